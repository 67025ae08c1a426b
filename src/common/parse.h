// Strict parsers for outside input (variables, files, command lines). Each takes `what`,
// the name of the input, and returns an error that names it and the offending text:
//   HAMI_SIM_INIT_US='12x': trailing characters after the number
// No leading/trailing spaces, signs or empty strings are accepted unless stated.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"

namespace hami {

// Decimal digits only; fails on overflow.
Result<uint64_t> ParseUint64(std::string_view text, std::string_view what);

// An optional '-' then decimal digits.
Result<int64_t> ParseInt64(std::string_view text, std::string_view what);

// A byte quantity: decimal digits with an optional binary suffix k, m, g or t (either
// case): "4096" is 4096 bytes, "3000m" is 3000 MiB, "2g" is 2 GiB. Fails on overflow.
Result<uint64_t> ParseSize(std::string_view text, std::string_view what);

// 1/0, true/false, yes/no, on/off (any case).
Result<bool> ParseBool(std::string_view text, std::string_view what);

// Formats a byte count for people: "512 B", "3.0 MiB", "80.0 GiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace hami
