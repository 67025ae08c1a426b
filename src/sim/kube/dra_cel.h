// The subset of CEL that the kube-scheduler stand-in evaluates for DRA device selectors
// (DeviceClass spec.selectors[].cel.expression and a request's selectors; research/dra.md §2.5).
//
// One variable, `device`, with
//   device.driver                      string
//   device.attributes["domain"].id     the attribute's value as the slice types it: int, bool,
//   device.attributes["domain"]["id"]  string or version; an unknown domain is an empty map
//   device.capacity["domain"].id       a quantity; capacities and attributes without a domain
//                                      belong to the driver's
//   device.allowMultipleAllocations    bool
// Literals: strings ('x' or "x", escapes \\ \' \" \n \t), integers (decimal, unary minus),
// true, false. Operators: ! && || == != < <= > >= (ints, strings, quantities and versions of
// the same kind), `in` (key in a map: 'id' in device.attributes["domain"]), parentheses.
// Functions: quantity("10Gi") and semver("1.2.3"), with q.compareTo(q2) (-1, 0, 1),
// q.isGreaterThan(q2), q.isLessThan(q2); s.startsWith(p), s.endsWith(p), s.contains(p),
// s.lowerAscii() (A-Z to a-z, the rest kept).
// && and || are commutative about errors as CEL's are: `false && <error>` is false.
//
// What is not in the subset (cel.bind, macros such as has() and exists(), lists, arithmetic,
// the conditional operator, floats, bytes, ...) is refused when the expression is compiled:
// kInvalidArgument naming the expression and where ("CEL expression 'a + b': column 3:
// unsupported operator '+'"). Evaluation fails (kInvalidArgument, naming the expression) on an
// unknown field or attribute, and on operands of the wrong types, as CEL's runtime errors do.
// Expressions are at most 10 KiB and 64 levels deep.
//
// Thread safety: a compiled CelProgram is immutable; Evaluate may run on many threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

#include "common/result.h"
#include "kube/quantity.h"

namespace hami::sim::kube {

// A semantic version (2.0): major.minor.patch, optional -prerelease (+build is dropped).
struct SemVer {
  uint64_t major = 0;
  uint64_t minor = 0;
  uint64_t patch = 0;
  std::string prerelease;
};
Result<SemVer> ParseSemVer(std::string_view text);
// -1, 0 or 1, by semver's precedence rules.
int CompareSemVer(const SemVer& a, const SemVer& b);

// An attribute value: int, bool, string or version.
using AttributeValue = std::variant<int64_t, bool, std::string, SemVer>;

// The device as a selector sees it.
struct CelDevice {
  std::string driver;
  std::map<std::string, std::map<std::string, AttributeValue>, std::less<>> attributes;
  std::map<std::string, std::map<std::string, hami::kube::Quantity>, std::less<>> capacity;
  bool allow_multiple_allocations = false;
};

// A slice's device (spec.devices[i]) as a CelDevice: an attribute or capacity name
// "domain/id" goes under domain, a bare "id" under `driver`. Errors name `where` and the field.
Result<CelDevice> CelDeviceFromSlice(std::string_view driver, const nlohmann::json& device,
                                     std::string_view where);

class CelProgram {
 public:
  static Result<CelProgram> Compile(std::string_view expression);
  Result<bool> Evaluate(const CelDevice& device) const;
  const std::string& expression() const { return *expression_; }

  struct Node;  // the parsed tree

 private:
  CelProgram() = default;
  std::shared_ptr<const std::string> expression_;
  std::shared_ptr<const Node> root_;
};

}  // namespace hami::sim::kube
