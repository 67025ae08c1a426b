// The API's timestamps: RFC 3339 `Time` ("2026-12-01T09:15:39Z", second precision) and
// `MicroTime` ("2026-12-01T09:15:39.169933Z"), always UTC when written; parsing accepts any
// offset ("+00:00", "-07:00"), "z", and fractions of any length (Python sends isoformat).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::kube {

using WallTime = std::chrono::system_clock::time_point;

std::string FormatTime(WallTime t);       // seconds, "Z"
std::string FormatMicroTime(WallTime t);  // 6 fraction digits, "Z"
Result<WallTime> ParseTime(std::string_view text);

}  // namespace hami::kube
