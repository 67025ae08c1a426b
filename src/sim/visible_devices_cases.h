// CUDA_VISIBLE_DEVICES cases over one three-device machine, with what NVIDIA's documented
// rules make visible (sim/visible_devices.h states the rules). Two tests read this one table:
// visible_devices_test.cc runs it against the simulator's parser, visible_devices_product_test.cc
// against the product's (common/visible_devices.h), so the two are compared case by case with
// the documentation, never with each other.
#pragma once

#include <array>
#include <optional>
#include <ostream>
#include <string_view>
#include <vector>

#include "sim/visible_devices.h"

namespace hami::sim::visible_cases {

// The machine's UUIDs, in enumeration order. The first two share the prefix "GPU-aaaa".
inline constexpr std::array<std::string_view, 3> kUuids = {
    "GPU-aaaa1111-0000-4000-8000-000000000000",
    "GPU-aaaa2222-0000-4000-8000-000000000001",
    "GPU-bbbb3333-0000-4000-8000-000000000002",
};

// Where a case's expectation comes from.
enum class Basis {
  kDocumented,  // stated by NVIDIA's documentation (or the task's rule for repeats)
  kSimChoice,   // left open by the documentation; the simulator's documented choice
};

struct Case {
  const char* name;                       // a test-name suffix: letters, digits, underscores
  std::optional<std::string_view> value;  // nullopt: the variable is unset
  std::vector<int> visible;               // physical indices in CUDA ordinal order
  std::optional<VisibleStop> stop;        // why the simulator's parser ended the list
  Basis basis;
};

// GoogleTest prints a case by its name and value.
inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " CUDA_VISIBLE_DEVICES=";
  if (c.value) {
    *os << "'" << *c.value << "'";
  } else {
    *os << "(unset)";
  }
}

inline const std::vector<Case>& Cases() {
  using enum VisibleStop;
  using enum Basis;
  static const std::vector<Case> cases = {
      // Unset and empty.
      {"Unset", std::nullopt, {0, 1, 2}, std::nullopt, kDocumented},
      {"Empty", "", {}, std::nullopt, kDocumented},
      // Indices select and order.
      {"OneIndex", "1", {1}, std::nullopt, kDocumented},
      {"IndicesInListOrder", "2,1", {2, 1}, std::nullopt, kDocumented},
      {"EveryIndexReversed", "2,1,0", {2, 1, 0}, std::nullopt, kDocumented},
      {"LeadingZero", "01", {1}, std::nullopt, kDocumented},
      {"ManyLeadingZeros", "0001,2", {1, 2}, std::nullopt, kDocumented},
      // An invalid index ends the list (the Programming Guide's own example).
      {"GuideExampleNegativeIndex", "0,2,-1,1", {0, 2}, kNotADevice, kDocumented},
      {"IndexOfNoDevice", "1,7,0", {1}, kNoSuchIndex, kDocumented},
      {"OnePastTheLastDevice", "3", {}, kNoSuchIndex, kDocumented},
      {"LargeIndex", "1000", {}, kNoSuchIndex, kDocumented},
      {"IndexPastUnsigned64", "0,99999999999999999999999", {0}, kNoSuchIndex, kDocumented},
      {"Garbage", "0,abc,1", {0}, kNotADevice, kDocumented},
      {"DigitsThenLetters", "1gpu2", {}, kNotADevice, kSimChoice},
      {"PlusSign", "+1", {}, kNotADevice, kSimChoice},
      {"BlankInsideAnEntry", "0,1 2", {0}, kNotADevice, kDocumented},
      // Blanks around entries, empty entries.
      {"BlanksAroundEntries", " 1 ,\t0", {1, 0}, std::nullopt, kSimChoice},
      {"OnlyBlanks", "  ", {}, kEmptyEntry, kSimChoice},
      {"TrailingComma", "0,1,", {0, 1}, kEmptyEntry, kDocumented},
      {"EmptyEntryInTheMiddle", "0,,1", {0}, kEmptyEntry, kDocumented},
      {"OnlyAComma", ",", {}, kEmptyEntry, kDocumented},
      // A repeated device ends the list.
      {"RepeatedIndex", "1,1,2", {1}, kRepeated, kDocumented},
      {"RepeatedByUuid", "2,GPU-bbbb", {2}, kRepeated, kDocumented},
      {"RepeatedByIndexAfterUuid", "GPU-aaaa1,0,1", {0}, kRepeated, kDocumented},
      // UUIDs and their unique prefixes.
      {"FullUuid", "GPU-bbbb3333-0000-4000-8000-000000000002", {2}, std::nullopt, kDocumented},
      {"UniquePrefixes", "GPU-aaaa2,GPU-b", {1, 2}, std::nullopt, kDocumented},
      {"PrefixThenIndex", "GPU-bbbb3333,0", {2, 0}, std::nullopt, kDocumented},
      {"PrefixAcrossADash", "GPU-aaaa1111-0", {0}, std::nullopt, kDocumented},
      {"AmbiguousPrefix", "GPU-aaaa,1", {}, kAmbiguousUuid, kDocumented},
      {"AmbiguousPrefixAfterADevice", "2,GPU-a,0", {2}, kAmbiguousUuid, kDocumented},
      {"UuidOfNoDevice", "0,GPU-cccc,1", {0}, kNoSuchUuid, kDocumented},
      {"LongerThanAnyUuid",
       "GPU-bbbb3333-0000-4000-8000-0000000000020",
       {},
       kNoSuchUuid,
       kDocumented},
      {"BarePrefix", "GPU-,1", {}, kNoSuchUuid, kSimChoice},
      {"UuidWithoutGpuPrefix",
       "bbbb3333-0000-4000-8000-000000000002",
       {},
       kNotADevice,
       kDocumented},
      {"LowerCaseGpuPrefix", "gpu-bbbb3333", {}, kNotADevice, kSimChoice},
      {"UpperCaseHex", "GPU-BBBB3333", {}, kNoSuchUuid, kSimChoice},
      // MIG devices: the simulated machine has none.
      {"MigUuid", "MIG-aaaa1111-0000-4000-8000-000000000000,0", {}, kMigDevice, kSimChoice},
      {"MigGpuInstanceForm",
       "1,MIG-GPU-aaaa1111-0000-4000-8000-000000000000/0/0,0",
       {1},
       kMigDevice,
       kSimChoice},
  };
  return cases;
}

}  // namespace hami::sim::visible_cases
