// The API's timestamps: RFC 3339 `Time` ("2026-12-01T09:15:39Z", second precision) and
// `MicroTime` ("2026-12-01T09:15:39.169933Z"), always UTC when written; parsing accepts any
// offset ("+00:00", "-07:00"), "z", and fractions of any length (Python sends isoformat).
// Pure arithmetic on the proleptic Gregorian calendar (no timegm, no locale, no TZ): every
// function is safe to call from any thread.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::kube {

using WallTime = std::chrono::system_clock::time_point;

std::string FormatTime(WallTime t);       // seconds, "Z"; the fraction is truncated
std::string FormatMicroTime(WallTime t);  // 6 fraction digits, "Z"; truncated to microseconds
// YYYY-MM-DDThh:mm:ss[.fraction](Z|z|+hh:mm|-hh:mm); digits beyond nanoseconds are dropped.
// Anything else (no offset, a space for 'T', a leap second, a date that does not exist, a year
// outside the clock's range, 1677 to 2262) is kInvalidArgument naming the text.
Result<WallTime> ParseTime(std::string_view text);

}  // namespace hami::kube
