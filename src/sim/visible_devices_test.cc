#include "sim/visible_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "sim/visible_devices_cases.h"

namespace hami::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using visible_cases::Case;

std::vector<DeviceSpec> Machine() {
  auto d = ParseProfileSpec("h100-80g:3", "");
  EXPECT_TRUE(d.ok());
  std::vector<DeviceSpec> out = *d;
  for (size_t i = 0; i < out.size(); ++i) out[i].uuid = visible_cases::kUuids[i];
  return out;
}

class SimVisibleDevices : public ::testing::TestWithParam<Case> {};

TEST_P(SimVisibleDevices, FollowsTheDocumentedRule) {
  const Case& c = GetParam();
  const VisibleDevices v = ParseVisibleDevices(c.value, Machine());
  const std::string shown(c.value.value_or("(unset)"));
  EXPECT_EQ(v.physical, c.visible) << "CUDA_VISIBLE_DEVICES='" << shown << "'";
  ASSERT_EQ(v.stopped.has_value(), c.stop.has_value()) << "CUDA_VISIBLE_DEVICES='" << shown << "'";
  if (c.stop) {
    EXPECT_EQ(v.stopped->reason, *c.stop)
        << "CUDA_VISIBLE_DEVICES='" << shown << "': entry '" << v.stopped->entry << "' "
        << VisibleStopText(v.stopped->reason);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SimVisibleDevices, ::testing::ValuesIn(visible_cases::Cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(param.param.name);
                         });

TEST(SimVisibleDevices, ReportsTheEntryThatEndedTheListWithoutItsBlanks) {
  VisibleDevices v = ParseVisibleDevices("0, GPU-aaaa ,1", Machine());
  EXPECT_THAT(v.physical, ElementsAre(0));
  ASSERT_TRUE(v.stopped.has_value());
  EXPECT_EQ(v.stopped->entry, "GPU-aaaa");
  EXPECT_EQ(v.stopped->reason, VisibleStop::kAmbiguousUuid);
}

TEST(SimVisibleDevices, AMachineWithoutDevicesShowsNoneEvenForIndexZero) {
  VisibleDevices v = ParseVisibleDevices("0", {});
  EXPECT_THAT(v.physical, IsEmpty());
  ASSERT_TRUE(v.stopped.has_value());
  EXPECT_EQ(v.stopped->reason, VisibleStop::kNoSuchIndex);
  EXPECT_THAT(ParseVisibleDevices(std::nullopt, {}).physical, IsEmpty());
}

TEST(SimVisibleDevices, EveryStopReasonHasItsOwnText) {
  using enum VisibleStop;
  const VisibleStop all[] = {kEmptyEntry, kNoSuchIndex, kNoSuchUuid, kAmbiguousUuid,
                             kMigDevice,  kRepeated,    kNotADevice};
  std::set<std::string_view> texts;
  for (VisibleStop r : all) texts.insert(VisibleStopText(r));
  EXPECT_EQ(texts.size(), std::size(all));
}

// The machine's UUID text is the simulator's own formatting of the 16 bytes.
TEST(GpuUuidString, PrintsLowerCaseHexInEightFourFourFourTwelveGroups) {
  const uint8_t bytes[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                             0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10};
  EXPECT_EQ(GpuUuidString(bytes), "GPU-01234567-89ab-cdef-fedc-ba9876543210");
}

TEST(GpuUuidString, IsTheTextOfEachSimulatedDevicesUuidBytes) {
  auto d = ParseProfileSpec("a100-40g:2", "node-a");
  ASSERT_TRUE(d.ok());
  for (const DeviceSpec& s : *d) EXPECT_EQ(s.uuid, GpuUuidString(s.uuid_bytes));
}

}  // namespace
}  // namespace hami::sim
