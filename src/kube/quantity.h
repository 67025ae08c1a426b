// Kubernetes resource quantities ("500m", "1.5Gi", "32768", "1e3"), by the API's grammar:
//
//   <quantity> ::= <sign> <digits> [ "." <digits> ] <suffix>    (".5" and "5." are numbers too)
//   <sign>     ::= "" | "+" | "-"
//   <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei           binary SI (powers of 1024)
//               |  n | u | m | "" | k | M | G | T | P | E  decimal SI (1e-9 .. 1e18)
//               |  ( "e" | "E" ) <sign> <digits>         a decimal exponent ("1e3", "2E-3")
//
// No spaces anywhere. A value is exact to 1n (1e-9): a finer fraction is rounded up, away from
// zero, to the next nano unit as the API server does ("0.1n" is "1n"). A magnitude above
// 2^63-1 is rejected (the API caps such values; we refuse them), as are more than 40
// significant digits. Both are documented deviations of an input nobody writes.
//
// Thread safety: Quantity is a value type; ParseQuantity is pure and re-entrant.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::kube {

// The family of suffix a quantity was written with; ToString keeps it, as the API does.
enum class QuantityFormat {
  kDecimalSI,        // no suffix, n u m k M G T P E
  kBinarySI,         // Ki Mi Gi Ti Pi Ei
  kDecimalExponent,  // e<exp>
};

class Quantity {
 public:
  Quantity() = default;  // zero, decimal SI

  // An integer count of units ("3000" for FromInt(3000); FromInt(1024, kBinarySI) is "1Ki").
  static Quantity FromInt(int64_t value, QuantityFormat format = QuantityFormat::kDecimalSI);
  // A count of thousandths of a unit: FromMilli(1500) is "1500m".
  static Quantity FromMilli(int64_t milli, QuantityFormat format = QuantityFormat::kDecimalSI);

  // The value in units, rounded away from zero to an integer (as the API's Value(): "1500m"
  // is 2, "-1500m" is -2). Always fits: the magnitude is at most 2^63-1.
  int64_t Value() const;
  // The value in thousandths of a unit, rounded away from zero; saturates at INT64_MAX /
  // INT64_MIN for magnitudes above about 9.2e15 units.
  int64_t MilliValue() const;

  bool IsZero() const { return nanos_ == 0; }
  int Sign() const { return nanos_ > 0 ? 1 : (nanos_ < 0 ? -1 : 0); }
  QuantityFormat format() const { return format_; }

  // The API's canonical form, which parses back to an equal Quantity with the same canonical
  // form: decimal SI uses the largest suffix (a power of 1000) that keeps the number an
  // integer ("1500m" for 1.5, "1k" for 1000, "100m" for 0.1); binary SI the largest power of
  // 1024 that divides the value ("1536Mi" for 1.5Gi, "1536" for 1.5Ki), falling back to
  // decimal SI for fractions and magnitudes below 1024 ("512" for 0.5Ki); decimal exponent
  // the same mantissa as decimal SI with the exponent written out ("1e3", "1500", "15e-1"
  // never: "1500e-3"). Zero is "0".
  std::string ToString() const;

  // Quantities compare by value; the format does not matter ("1Ki" == "1024").
  friend bool operator==(const Quantity& a, const Quantity& b) { return a.nanos_ == b.nanos_; }
  friend std::strong_ordering operator<=>(const Quantity& a, const Quantity& b) {
    return a.nanos_ <=> b.nanos_;
  }

 private:
  friend Result<Quantity> ParseQuantity(std::string_view text, std::string_view what);
  Quantity(__int128 nanos, QuantityFormat format) : nanos_(nanos), format_(format) {}

  __int128 nanos_ = 0;  // the value in units of 1e-9; |nanos_| <= (2^63-1) * 1e9
  QuantityFormat format_ = QuantityFormat::kDecimalSI;
};

// Parses `text`. On failure the error (kInvalidArgument) names `what` (the source, e.g. "Pod
// default/x: spec.containers[0].resources.limits.nvidia.com/gpumem"; may be empty), the text
// and what is wrong: "...: quantity '10 Mi': unknown suffix ' Mi'".
Result<Quantity> ParseQuantity(std::string_view text, std::string_view what);

}  // namespace hami::kube
