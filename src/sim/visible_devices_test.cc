#include "sim/visible_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Three devices with UUIDs chosen so that two of them share a prefix.
std::vector<DeviceSpec> Machine() {
  auto d = ParseProfileSpec("h100-80g:3", "");
  EXPECT_TRUE(d.ok());
  std::vector<DeviceSpec> out = *d;
  out[0].uuid = "GPU-aaaa1111-0000-4000-8000-000000000000";
  out[1].uuid = "GPU-aaaa2222-0000-4000-8000-000000000001";
  out[2].uuid = "GPU-bbbb3333-0000-4000-8000-000000000002";
  return out;
}

VisibleDevices Parse(std::optional<std::string_view> value) {
  return ParseVisibleDevices(value, Machine());
}

TEST(ParseVisibleDevices, UnsetShowsEveryDeviceInOrder) {
  VisibleDevices v = Parse(std::nullopt);
  EXPECT_THAT(v.physical, ElementsAre(0, 1, 2));
  EXPECT_FALSE(v.stopped_at.has_value());
}

TEST(ParseVisibleDevices, EmptyShowsNoDevice) {
  VisibleDevices v = Parse("");
  EXPECT_THAT(v.physical, IsEmpty());
  EXPECT_FALSE(v.stopped_at.has_value());
}

TEST(ParseVisibleDevices, IndicesSelectAndOrderDevices) {
  EXPECT_THAT(Parse("1").physical, ElementsAre(1));
  EXPECT_THAT(Parse("2,0").physical, ElementsAre(2, 0));
  EXPECT_THAT(Parse("2,1,0").physical, ElementsAre(2, 1, 0));
  EXPECT_THAT(Parse("01").physical, ElementsAre(1));
}

TEST(ParseVisibleDevices, IgnoresSpacesAroundEntriesAndATrailingComma) {
  EXPECT_THAT(Parse(" 1 ,\t0").physical, ElementsAre(1, 0));
  VisibleDevices v = Parse("0,1,");
  EXPECT_THAT(v.physical, ElementsAre(0, 1));
  EXPECT_FALSE(v.stopped_at.has_value());
}

TEST(ParseVisibleDevices, AFullUuidOrAUniquePrefixNamesADevice) {
  EXPECT_THAT(Parse("GPU-bbbb3333-0000-4000-8000-000000000002").physical, ElementsAre(2));
  EXPECT_THAT(Parse("GPU-aaaa2,GPU-b").physical, ElementsAre(1, 2));
  EXPECT_THAT(Parse("GPU-bbbb3333,0").physical, ElementsAre(2, 0));
}

struct Stop {
  const char* value;
  std::vector<int> visible;
  const char* stopped_at;
};

class ParseVisibleDevicesStops : public ::testing::TestWithParam<Stop> {};

TEST_P(ParseVisibleDevicesStops, AtTheFirstBadEntryNamingIt) {
  const Stop& c = GetParam();
  VisibleDevices v = Parse(c.value);
  EXPECT_EQ(v.physical, c.visible) << c.value;
  EXPECT_EQ(v.stopped_at.value_or("(none)"), c.stopped_at) << c.value;
}

INSTANTIATE_TEST_SUITE_P(
    Values, ParseVisibleDevicesStops,
    ::testing::Values(Stop{"0,7,1", {0}, "7"},              // no such index
                      Stop{"3", {}, "3"},                   // one past the last device
                      Stop{"1,1,2", {1}, "1"},              // a repeat
                      Stop{"2,GPU-bbbb", {2}, "GPU-bbbb"},  // a repeat by UUID
                      Stop{"GPU-aaaa,1", {}, "GPU-aaaa"},   // an ambiguous prefix
                      Stop{"GPU-cccc,1", {}, "GPU-cccc"},   // a UUID of no device
                      Stop{"GPU-,1", {}, "GPU-"},           // a bare prefix
                      Stop{"1,-1,0", {1}, "-1"},            // not an index
                      Stop{"0,abc", {0}, "abc"}, Stop{"1000", {}, "1000"},
                      Stop{"0,1 2", {0}, "1 2"}, Stop{"MIG-aaaa1111,0", {}, "MIG-aaaa1111"},
                      Stop{"gpu-aaaa1111", {}, "gpu-aaaa1111"}));

TEST(ParseVisibleDevices, AnEmptyEntryEndsTheListAndIsReported) {
  VisibleDevices v = Parse("0,,1");
  EXPECT_THAT(v.physical, ElementsAre(0));
  ASSERT_TRUE(v.stopped_at.has_value());
  EXPECT_EQ(*v.stopped_at, "");
}

}  // namespace
}  // namespace hami::sim
