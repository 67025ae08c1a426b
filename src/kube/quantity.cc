#include "kube/quantity.h"

#include <array>
#include <cstddef>
#include <limits>

#include "common/quote.h"

namespace hami::kube {
namespace {

using Int128 = __int128;

constexpr int64_t kNanosPerUnit = 1'000'000'000;
constexpr Int128 kMaxNanos = Int128{std::numeric_limits<int64_t>::max()} * kNanosPerUnit;
constexpr size_t kMaxSignificantDigits = 40;
constexpr int kMaxExponent = 1'000'000;  // any non-zero digit times 10^this overflows

// The text as an error message shows it: non-printable bytes as \xNN, at most 64 bytes.
std::string Quote(std::string_view text) { return QuoteInput(text, 64); }

Error Invalid(std::string_view what, std::string_view text, std::string_view problem) {
  std::string msg;
  if (!what.empty()) {
    msg += what;
    msg += ": ";
  }
  msg += "quantity ";
  msg += Quote(text);
  msg += ": ";
  msg += problem;
  return Error(ErrorCode::kInvalidArgument, std::move(msg));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

struct Suffix {
  QuantityFormat format;
  int exp10 = 0;  // decimal SI and exponent
  int exp2 = 0;   // binary SI
};

// Reads the suffix, or returns the problem with it.
Result<Suffix> ParseSuffix(std::string_view s, std::string_view what, std::string_view text) {
  Suffix out{QuantityFormat::kDecimalSI};
  if (s.empty()) return out;
  if (s.size() == 1) {
    static constexpr std::string_view kLetters = "numkMGTPE";
    static constexpr int kExps[] = {-9, -6, -3, 3, 6, 9, 12, 15, 18};
    size_t at = kLetters.find(s[0]);
    if (at != std::string_view::npos) {
      out.exp10 = kExps[at];
      return out;
    }
  }
  if (s.size() == 2 && s[1] == 'i') {
    static constexpr std::string_view kLetters = "KMGTPE";
    size_t at = kLetters.find(s[0]);
    if (at != std::string_view::npos) {
      out.format = QuantityFormat::kBinarySI;
      out.exp2 = 10 * static_cast<int>(at + 1);
      return out;
    }
  }
  if ((s[0] == 'e' || s[0] == 'E') && s.size() > 1) {
    size_t i = 1;
    bool negative = false;
    if (s[i] == '+' || s[i] == '-') negative = s[i++] == '-';
    if (i == s.size()) {
      return Invalid(what, text, "exponent " + Quote(s) + " has no digits");
    }
    int value = 0;
    for (; i < s.size(); ++i) {
      if (!IsDigit(s[i])) {
        return Invalid(what, text, "exponent " + Quote(s) + " is not an integer");
      }
      if (value < kMaxExponent) value = value * 10 + (s[i] - '0');
    }
    if (value > kMaxExponent) value = kMaxExponent;
    out.format = QuantityFormat::kDecimalExponent;
    out.exp10 = negative ? -value : value;
    return out;
  }
  if (s[0] == '.') return Invalid(what, text, "more than one decimal point");
  std::string problem = "unknown suffix " + Quote(s);
  if (s.find(' ') != std::string_view::npos) problem += " (no spaces are allowed)";
  problem += " (expected Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or e<exponent>)";
  return Invalid(what, text, problem);
}

// Decimal digits, most significant first, of a number up to kMaxSignificantDigits digits
// times 2^60 (at most 59 digits).
class Digits {
 public:
  void Push(char d) { d_[n_++] = static_cast<uint8_t>(d - '0'); }
  size_t size() const { return n_; }
  uint8_t operator[](size_t i) const { return d_[i]; }

  void MultiplyByPow2(int exp2) {
    for (int k = 0; k < exp2; ++k) {
      int carry = 0;
      for (size_t i = n_; i-- > 0;) {
        int v = d_[i] * 2 + carry;
        d_[i] = static_cast<uint8_t>(v % 10);
        carry = v / 10;
      }
      if (carry != 0) {
        for (size_t i = n_; i > 0; --i) d_[i] = d_[i - 1];
        d_[0] = static_cast<uint8_t>(carry);
        ++n_;
      }
    }
  }

 private:
  std::array<uint8_t, 64> d_{};
  size_t n_ = 0;
};

// |value| in nanos, rounded up; false when it exceeds kMaxNanos.
bool ToNanos(const Digits& digits, int64_t exp10, Int128* out) {
  auto n = static_cast<int64_t>(digits.size());
  int64_t kept = exp10 >= 0 ? n : n + exp10;  // digits left of the nano point
  if (kept + (exp10 > 0 ? exp10 : 0) > 29) return false;
  Int128 v = 0;
  for (int64_t i = 0; i < kept; ++i) v = v * 10 + digits[static_cast<size_t>(i)];
  for (int64_t i = 0; i < exp10; ++i) v *= 10;
  for (int64_t i = kept < 0 ? 0 : kept; i < n; ++i) {
    if (digits[static_cast<size_t>(i)] != 0) {
      ++v;
      break;
    }
  }
  if (v > kMaxNanos) return false;
  *out = v;
  return true;
}

Int128 DivideAwayFromZero(Int128 v, Int128 d) {
  Int128 q = v / d;
  if (v % d != 0) q += v > 0 ? 1 : -1;
  return q;
}

void AppendInt(Int128 v, std::string* out) {
  if (v < 0) {
    *out += '-';
    v = -v;
  }
  char buf[48];
  size_t n = 0;
  do {
    buf[n++] = static_cast<char>('0' + static_cast<int>(v % 10));
    v /= 10;
  } while (v != 0);
  while (n > 0) *out += buf[--n];
}

}  // namespace

Quantity Quantity::FromInt(int64_t value, QuantityFormat format) {
  if (value == std::numeric_limits<int64_t>::min()) ++value;
  return Quantity(Int128{value} * kNanosPerUnit, format);
}

Quantity Quantity::FromMilli(int64_t milli, QuantityFormat format) {
  return Quantity(Int128{milli} * 1'000'000, format);
}

int64_t Quantity::Value() const {
  return static_cast<int64_t>(DivideAwayFromZero(nanos_, kNanosPerUnit));
}

int64_t Quantity::MilliValue() const {
  Int128 milli = DivideAwayFromZero(nanos_, 1'000'000);
  if (milli > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
  if (milli < std::numeric_limits<int64_t>::min()) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(milli);
}

std::string Quantity::ToString() const {
  if (nanos_ == 0) return "0";
  std::string out;
  if (format_ == QuantityFormat::kBinarySI && nanos_ % kNanosPerUnit == 0) {
    Int128 units = nanos_ / kNanosPerUnit;
    if (units >= 1024 || units <= -1024) {
      static constexpr std::string_view kSuffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
      int shift = 0;
      while (shift < 6 && units % 1024 == 0) {
        units /= 1024;
        ++shift;
      }
      AppendInt(units, &out);
      out += kSuffixes[shift];
      return out;
    }
  }
  Int128 mantissa = nanos_;
  int exp10 = -9;
  while (exp10 < 18 && mantissa % 1000 == 0) {
    mantissa /= 1000;
    exp10 += 3;
  }
  AppendInt(mantissa, &out);
  if (format_ == QuantityFormat::kDecimalExponent) {
    if (exp10 != 0) {
      out += 'e';
      out += std::to_string(exp10);
    }
    return out;
  }
  static constexpr std::string_view kSuffixes[] = {"n", "u", "m", "", "k", "M", "G", "T", "P", "E"};
  out += kSuffixes[(exp10 + 9) / 3];
  return out;
}

Result<Quantity> ParseQuantity(std::string_view text, std::string_view what) {
  if (text.empty()) return Invalid(what, text, "is empty");
  size_t i = 0;
  bool negative = false;
  if (text[0] == '+' || text[0] == '-') negative = text[i++] == '-';
  size_t int_begin = i;
  while (i < text.size() && IsDigit(text[i])) ++i;
  std::string_view int_digits = text.substr(int_begin, i - int_begin);
  std::string_view frac_digits;
  if (i < text.size() && text[i] == '.') {
    size_t frac_begin = ++i;
    while (i < text.size() && IsDigit(text[i])) ++i;
    frac_digits = text.substr(frac_begin, i - frac_begin);
  }
  if (int_digits.empty() && frac_digits.empty()) {
    return Invalid(what, text, "expected a number before any suffix");
  }
  Suffix suffix = HAMI_TRY(ParseSuffix(text.substr(i), what, text));

  // Significant digits without leading or trailing zeros; value = digits * 10^exp10.
  int64_t exp10 = suffix.exp10 - static_cast<int64_t>(frac_digits.size());
  size_t lead = 0;
  size_t total = int_digits.size() + frac_digits.size();
  auto digit_at = [&](size_t k) {
    return k < int_digits.size() ? int_digits[k] : frac_digits[k - int_digits.size()];
  };
  while (lead < total && digit_at(lead) == '0') ++lead;
  size_t end = total;
  while (end > lead && digit_at(end - 1) == '0') {
    --end;
    ++exp10;
  }
  if (lead == end) return Quantity(0, suffix.format);
  if (end - lead > kMaxSignificantDigits) {
    return Invalid(what, text, "more than 40 significant digits");
  }
  Digits digits;
  for (size_t k = lead; k < end; ++k) digits.Push(digit_at(k));
  digits.MultiplyByPow2(suffix.exp2);
  Int128 nanos = 0;
  if (!ToNanos(digits, exp10 + 9, &nanos)) {
    return Invalid(what, text, "exceeds 2^63-1 in magnitude");
  }
  return Quantity(negative ? -nanos : nanos, suffix.format);
}

}  // namespace hami::kube
