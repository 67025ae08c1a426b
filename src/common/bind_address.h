// The address a daemon's HTTP listener binds (--metrics-bind-address, --http-bind). Pure.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "common/result.h"

namespace hami {

// "host:port", ":port" (every IPv4 address), "[v6]:port" -> (host, port); port 0 asks for any
// free port. Errors (kInvalidArgument) name `flag` and the text.
Result<std::pair<std::string, int>> ParseBindAddress(std::string_view text, std::string_view flag);

}  // namespace hami
