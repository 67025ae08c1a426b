// What the broker's filesystem checks (node preparation, the server's socket directory, lock
// file and socket) say about a path they refuse.
//
// Thread-safe (no shared state); no exceptions.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::broker {

// A refusal: ErrorCode::kPermission, "<path>: <problem>".
Error Unsafe(const std::string& path, std::string_view problem);

// The permission bits of `mode` in octal with a leading zero: "01777".
std::string Octal(mode_t mode);

// What kind of file `mode` (st_mode) is, with its article: "a directory", "a symlink".
const char* KindName(mode_t mode);

}  // namespace hami::broker
