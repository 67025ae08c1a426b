// The product's CUDA_VISIBLE_DEVICES parser (common/visible_devices.h, used by libvgpu and
// `hami run`) against the same table of documented cases the simulator's parser passes
// (visible_devices_cases.h). Where the product reads a case differently, the case is listed
// in kProductDifferences with what the product does instead, so that the difference is
// stated, and a change in either direction fails here.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/visible_devices.h"
#include "sim/visible_devices_cases.h"

namespace hami {
namespace {

using sim::visible_cases::Case;

struct Difference {
  std::vector<int> product_visible;
  const char* why;
};

// Case name -> what the product makes visible instead. Empty while the product agrees.
const std::map<std::string, Difference>& ProductDifferences() {
  static const std::map<std::string, Difference> differences = {};
  return differences;
}

std::vector<std::string> Uuids() {
  return {sim::visible_cases::kUuids.begin(), sim::visible_cases::kUuids.end()};
}

class ProductVisibleDevices : public ::testing::TestWithParam<Case> {};

TEST_P(ProductVisibleDevices, AgreesWithTheDocumentedRule) {
  const Case& c = GetParam();
  const VisibleDevices v = ParseVisibleDevices(c.value, Uuids());
  const std::string shown(c.value.value_or("(unset)"));
  auto known = ProductDifferences().find(c.name);
  if (known == ProductDifferences().end()) {
    EXPECT_EQ(v.physical, c.visible)
        << "the product's parser disagrees with the documented rule for CUDA_VISIBLE_DEVICES='"
        << shown << "'"
        << (c.basis == sim::visible_cases::Basis::kSimChoice
                ? " (a case the documentation leaves open)"
                : "");
    // Where the simulator reads the whole list as understood, the product must not report
    // an entry as having ended it.
    if (!c.stop) {
      EXPECT_FALSE(v.stopped_at.has_value())
          << "CUDA_VISIBLE_DEVICES='" << shown << "': the product reports entry '"
          << v.stopped_at.value_or("") << "' as ending the list";
    }
  } else {
    EXPECT_EQ(v.physical, known->second.product_visible)
        << "CUDA_VISIBLE_DEVICES='" << shown << "': the product no longer does what "
        << "kProductDifferences says (" << known->second.why << "); update the list";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ProductVisibleDevices,
                         ::testing::ValuesIn(sim::visible_cases::Cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(param.param.name);
                         });

TEST(ProductVisibleDevices, EveryListedDifferenceIsACaseOfTheTable) {
  for (const auto& [name, diff] : ProductDifferences()) {
    bool found = false;
    for (const Case& c : sim::visible_cases::Cases()) found = found || name == c.name;
    EXPECT_TRUE(found) << "kProductDifferences names '" << name << "', which is no case";
  }
}

}  // namespace
}  // namespace hami
