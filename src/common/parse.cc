#include "common/parse.h"

#include <cstdio>
#include <limits>
#include <string>

namespace hami {

namespace {

Error Bad(std::string_view what, std::string_view text, std::string_view why) {
  std::string msg(what);
  msg += "='";
  msg += text;
  msg += "': ";
  msg += why;
  return Error(ErrorCode::kInvalidArgument, std::move(msg));
}

// Parses leading digits; sets *end to the first non-digit.
Result<uint64_t> Digits(std::string_view text, std::string_view what, size_t* end) {
  uint64_t v = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    uint64_t d = uint64_t(text[i] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) {
      return Bad(what, text, "number too large");
    }
    v = v * 10 + d;
  }
  if (i == 0) {
    return Bad(what, text, text.empty() ? "empty value" : "not a non-negative integer");
  }
  *end = i;
  return v;
}

}  // namespace

Result<uint64_t> ParseUint64(std::string_view text, std::string_view what) {
  size_t end = 0;
  uint64_t v = HAMI_TRY(Digits(text, what, &end));
  if (end != text.size()) return Bad(what, text, "trailing characters after the number");
  return v;
}

Result<int64_t> ParseInt64(std::string_view text, std::string_view what) {
  bool neg = !text.empty() && text[0] == '-';
  std::string_view digits = neg ? text.substr(1) : text;
  size_t end = 0;
  uint64_t v = HAMI_TRY(Digits(digits, what, &end));
  if (end != digits.size()) return Bad(what, text, "trailing characters after the number");
  uint64_t limit = neg ? uint64_t(std::numeric_limits<int64_t>::max()) + 1
                       : uint64_t(std::numeric_limits<int64_t>::max());
  if (v > limit) return Bad(what, text, "number out of range");
  if (neg) return v == limit ? std::numeric_limits<int64_t>::min() : -int64_t(v);
  return int64_t(v);
}

Result<uint64_t> ParseSize(std::string_view text, std::string_view what) {
  size_t end = 0;
  uint64_t v = HAMI_TRY(Digits(text, what, &end));
  if (end == text.size()) return v;
  if (end + 1 != text.size()) {
    return Bad(what, text, "expected a number with an optional k, m, g or t suffix");
  }
  int shift = 0;
  switch (text[end]) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    case 't':
    case 'T':
      shift = 40;
      break;
    default:
      return Bad(what, text, "unknown size suffix (use k, m, g or t)");
  }
  if (v > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return Bad(what, text, "size too large");
  }
  return v << shift;
}

Result<bool> ParseBool(std::string_view text, std::string_view what) {
  std::string lower;
  for (char c : text) lower += char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  return Bad(what, text, "expected 1/0, true/false, yes/no or on/off");
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = double(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

}  // namespace hami
