#include "sim/profiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <span>

#include "common/strings.h"

namespace hami::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<DeviceSpec> Parse(std::string_view spec, std::string_view node = "") {
  auto r = ParseProfileSpec(spec, node);
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? *r : std::vector<DeviceSpec>{};
}

TEST(ParseProfileSpec, ExpandsCountsInOrderWithPhysicalIndices) {
  std::vector<DeviceSpec> d = Parse("a100-40g,h100-80g:3");
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].profile->key, "a100-40g");
  for (int i = 1; i < 4; ++i) EXPECT_EQ(d[size_t(i)].profile->key, "h100-80g");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d[size_t(i)].index, i);
}

TEST(ParseProfileSpec, ACountOfOneMayBeOmitted) {
  EXPECT_EQ(Parse("t4-16g").size(), 1u);
  EXPECT_EQ(Parse("t4-16g:1").size(), 1u);
}

TEST(ParseProfileSpec, NoneIsAMachineWithoutDevices) { EXPECT_TRUE(Parse("none").empty()); }

TEST(ParseProfileSpec, GivesEachDeviceARandomLookingVersion4Uuid) {
  std::vector<DeviceSpec> d = Parse("h100-80g:8");
  const std::regex form("GPU-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  std::set<std::string> seen;
  for (const DeviceSpec& s : d) {
    EXPECT_TRUE(std::regex_match(s.uuid, form)) << s.uuid;
    EXPECT_EQ(s.uuid.substr(4, 2), HexEncode(std::span<const uint8_t>(s.uuid_bytes, 1)))
        << "the text and the bytes are the same UUID";
    seen.insert(s.uuid);
  }
  EXPECT_EQ(seen.size(), d.size());
}

TEST(ParseProfileSpec, TheSameInputsGiveTheSameUuidsAndAnotherNodeOthers) {
  std::vector<DeviceSpec> a = Parse("h100-80g:2", "node-a");
  std::vector<DeviceSpec> again = Parse("h100-80g:2", "node-a");
  std::vector<DeviceSpec> b = Parse("h100-80g:2", "node-b");
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a[i].uuid, again[i].uuid);
    EXPECT_NE(a[i].uuid, b[i].uuid);
  }
}

TEST(ParseProfileSpec, PlacesDevicesOnDistinctBusesAndSplitsThemOverTwoNumaNodes) {
  std::vector<DeviceSpec> d = Parse("h100-80g:4");
  EXPECT_EQ(d[0].pci_bus_id, "00000000:08:00.0");
  EXPECT_EQ(d[1].pci_bus_id, "00000000:17:00.0");
  EXPECT_EQ(d[1].pci_bus, 0x17);
  EXPECT_EQ(d[0].pci_domain, 0);
  EXPECT_EQ(d[0].numa_node, 0);
  EXPECT_EQ(d[1].numa_node, 0);
  EXPECT_EQ(d[2].numa_node, 1);
  EXPECT_EQ(d[3].numa_node, 1);
  EXPECT_EQ(Parse("h100-80g")[0].numa_node, 0);
}

TEST(ParseProfileSpec, UsableMemoryIsTotalLessTheDriverReservation) {
  const DeviceSpec d = Parse("h100-80g")[0];
  EXPECT_EQ(d.total_bytes(), 81559ull << 20);
  EXPECT_EQ(d.reserved_bytes(), 540ull << 20);
  EXPECT_EQ(d.usable_bytes(), (81559ull - 540) << 20);
}

TEST(ParseProfileSpec, AcceptsSixteenDevicesAndRefusesTheSeventeenth) {
  EXPECT_EQ(Parse("sim-1g:16").size(), 16u);
  auto r = ParseProfileSpec("sim-1g:16,t4-16g", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("more than 16 devices"));
}

struct Rejection {
  const char* spec;
  const char* why;
};

class ParseProfileSpecRejects : public ::testing::TestWithParam<Rejection> {};

TEST_P(ParseProfileSpecRejects, NamingTheVariableTheSpecAndTheReason) {
  const Rejection& c = GetParam();
  auto r = ParseProfileSpec(c.spec, "node");
  ASSERT_FALSE(r.ok()) << c.spec;
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), StartsWith("HAMI_SIM_PROFILE='" + std::string(c.spec) + "': "));
  EXPECT_THAT(r.error().message(), HasSubstr(c.why));
}

INSTANTIATE_TEST_SUITE_P(
    Specs, ParseProfileSpecRejects,
    ::testing::Values(Rejection{"", "empty device list"},
                      Rejection{"h100-80g,,t4-16g", "empty entry"},
                      Rejection{"h100-80g,", "empty entry"}, Rejection{",h100-80g", "empty entry"},
                      Rejection{"h100-80g:", "count '' of 'h100-80g' is not a number"},
                      Rejection{"h100-80g:x", "count 'x' of 'h100-80g' is not a number"},
                      Rejection{"h100-80g:-1", "count '-1'"},
                      Rejection{"h100-80g:100", "count '100'"},
                      Rejection{"h100-80g:0", "count 0 of 'h100-80g' is not from 1 to 16"},
                      Rejection{"h100-80g:17", "count 17 of 'h100-80g' is not from 1 to 16"},
                      Rejection{"h100-80g:2:2", "count '2:2'"},
                      Rejection{"h100", "unknown profile 'h100' (known: a100-40g, "},
                      Rejection{"H100-80G", "unknown profile 'H100-80G'"},
                      Rejection{"h100-80g, t4-16g", "unknown profile ' t4-16g'"},
                      Rejection{"None", "unknown profile 'None'"}));

TEST(ParseProfileSpec, NamesTheInputItWasGiven) {
  auto r = ParseProfileSpec("bogus", "", "--sim");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), StartsWith("--sim='bogus': unknown profile"));
}

TEST(Profiles, KeysAreUniqueAndEachIsFoundAndListed) {
  std::set<std::string_view> keys;
  const std::string listed = ProfileKeys();
  for (const DeviceProfile& p : Profiles()) {
    EXPECT_TRUE(keys.insert(p.key).second) << p.key;
    EXPECT_EQ(FindProfile(p.key), &p);
    EXPECT_THAT(listed, HasSubstr(std::string(p.key)));
    EXPECT_LT(p.reserved_mib + p.context_mib, p.memory_mib) << p.key;
    EXPECT_EQ(p.pci_device_id & 0xffffu, 0x10deu) << p.key << ": NVIDIA's vendor id";
  }
  EXPECT_EQ(FindProfile("nosuch"), nullptr);
}

TEST(Profiles, ReportTheProductsNumbers) {
  const DeviceProfile* h100 = FindProfile("h100-80g");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h100->name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100->sm_count, 132);
  EXPECT_EQ(h100->cc_major * 10 + h100->cc_minor, 90);
  const DeviceProfile* a100 = FindProfile("a100-40g");
  ASSERT_NE(a100, nullptr);
  EXPECT_EQ(a100->sm_count, 108);
  EXPECT_EQ(a100->memory_mib, 40960u);
  const DeviceProfile* t4 = FindProfile("t4-16g");
  ASSERT_NE(t4, nullptr);
  EXPECT_EQ(t4->cc_major * 10 + t4->cc_minor, 75);
  EXPECT_EQ(t4->max_threads_per_sm, 1024);
}

}  // namespace
}  // namespace hami::sim
