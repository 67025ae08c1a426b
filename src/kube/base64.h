// Strict base64 (RFC 4648, standard alphabet, '=' padding required), as Go's
// base64.StdEncoding reads a kubeconfig's *-data fields: '\r' and '\n' anywhere are skipped,
// anything else outside the alphabet, a missing or misplaced '=', or a length that is not a
// multiple of four is an error. Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::kube {

// The decoded bytes; errors are kInvalidArgument and say what is wrong and where
// ("not base64: character '%' at offset 12").
Result<std::string> DecodeBase64(std::string_view text);

std::string EncodeBase64(std::string_view bytes);

}  // namespace hami::kube
