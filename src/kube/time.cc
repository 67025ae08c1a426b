#include "kube/time.h"

#include <cstdint>
#include <cstdio>
#include <string>

namespace hami::kube {

namespace {

using std::chrono::days;
using std::chrono::floor;
using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using std::chrono::sys_days;
using std::chrono::year_month_day;

// "2026-12-01T09:15:39" of the second `s` falls in (UTC).
std::string FormatSeconds(std::chrono::sys_seconds s) {
  const sys_days day = floor<days>(s);
  const year_month_day ymd{day};
  const std::chrono::hh_mm_ss hms{s - day};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02uT%02d:%02d:%02d", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                static_cast<int>(hms.seconds().count()));
  return buf;
}

// Reads `n` decimal digits at `*pos`, advancing it; false when any is not a digit.
bool Digits(std::string_view text, size_t* pos, size_t n, int* out) {
  if (text.size() - *pos < n) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = text[*pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += n;
  *out = v;
  return true;
}

bool Literal(std::string_view text, size_t* pos, char c) {
  if (*pos >= text.size() || text[*pos] != c) return false;
  ++*pos;
  return true;
}

Error Bad(std::string_view text, std::string_view why) {
  std::string msg = "invalid time \"";
  msg += text;
  msg += "\" (want RFC 3339, e.g. 2026-12-01T09:15:39Z): ";
  msg += why;
  return Error(ErrorCode::kInvalidArgument, std::move(msg));
}

}  // namespace

std::string FormatTime(WallTime t) { return FormatSeconds(floor<seconds>(t)) + "Z"; }

std::string FormatMicroTime(WallTime t) {
  const auto us = floor<microseconds>(t);
  const auto s = floor<seconds>(us);
  char frac[32];
  std::snprintf(frac, sizeof(frac), ".%06dZ", static_cast<int>((us - s).count()));
  return FormatSeconds(s) + frac;
}

Result<WallTime> ParseTime(std::string_view text) {
  size_t pos = 0;
  int year, month, day, hour, minute, second;
  if (!Digits(text, &pos, 4, &year) || !Literal(text, &pos, '-') ||
      !Digits(text, &pos, 2, &month) || !Literal(text, &pos, '-') || !Digits(text, &pos, 2, &day)) {
    return Bad(text, "the date is not YYYY-MM-DD");
  }
  if (!Literal(text, &pos, 'T')) return Bad(text, "expected 'T' after the date");
  if (!Digits(text, &pos, 2, &hour) || !Literal(text, &pos, ':') ||
      !Digits(text, &pos, 2, &minute) || !Literal(text, &pos, ':') ||
      !Digits(text, &pos, 2, &second)) {
    return Bad(text, "the time of day is not hh:mm:ss");
  }
  const year_month_day ymd{std::chrono::year(year),
                           std::chrono::month(static_cast<unsigned>(month)),
                           std::chrono::day(static_cast<unsigned>(day))};
  if (!ymd.ok()) return Bad(text, "no such date");
  if (hour > 23 || minute > 59 || second > 59) return Bad(text, "no such time of day");

  int64_t nanos = 0;
  if (Literal(text, &pos, '.')) {
    size_t digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 9) nanos = nanos * 10 + (text[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return Bad(text, "no digits after the decimal point");
    for (size_t i = digits; i < 9; ++i) nanos *= 10;
  }

  int offset_minutes = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh, om;
    if (!Digits(text, &pos, 2, &oh) || !Literal(text, &pos, ':') || !Digits(text, &pos, 2, &om)) {
      return Bad(text, "the offset is not +hh:mm or -hh:mm");
    }
    if (oh > 23 || om > 59) return Bad(text, "no such offset");
    offset_minutes = sign * (oh * 60 + om);
  } else {
    return Bad(text, "expected 'Z' or an offset like +02:00 after the time");
  }
  if (pos != text.size()) return Bad(text, "unexpected text after the offset");

  const seconds since_epoch = sys_days(ymd).time_since_epoch() + hours(hour) + minutes(minute) +
                              seconds(second) - minutes(offset_minutes);
  constexpr int64_t kMaxSeconds =
      std::chrono::duration_cast<seconds>(WallTime::duration::max()).count() - 1;
  constexpr int64_t kMinSeconds =
      std::chrono::duration_cast<seconds>(WallTime::duration::min()).count() + 1;
  if (since_epoch.count() > kMaxSeconds || since_epoch.count() < kMinSeconds) {
    return Bad(text, "outside the range this clock represents");
  }
  return WallTime(std::chrono::duration_cast<WallTime::duration>(since_epoch + nanoseconds(nanos)));
}

}  // namespace hami::kube
