#include "sim/device_nodes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "common/temp_dir.h"
#include "sim/visible_devices.h"

namespace hami::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<DeviceSpec> Machine() {
  auto d = ParseProfileSpec("h100-80g:3", "node-a");
  EXPECT_TRUE(d.ok());
  return *d;
}

std::string Uuid(int i) { return Machine()[size_t(i)].uuid; }

TEST(ParseDeviceNodes, ListsTheNamedDevicesInTheMachinesOrderNotTheFiles) {
  auto r = ParseDeviceNodes(Uuid(2) + "\n" + Uuid(0) + "\n", Machine(), "/f");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_THAT(*r, ElementsAre(0, 2));
}

TEST(ParseDeviceNodes, TakesALastLineWithoutNewlineAndAUuidListedTwiceAsOneDevice) {
  auto r = ParseDeviceNodes(Uuid(1) + "\n" + Uuid(1), Machine(), "/f");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_THAT(*r, ElementsAre(1));
}

TEST(ParseDeviceNodes, AnEmptyFileGivesNoDevice) {
  auto r = ParseDeviceNodes("", Machine(), "/f");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_THAT(*r, IsEmpty());
}

struct BadFile {
  const char* name;
  std::string text;
  int line;
  std::string why;
};

// GoogleTest prints a case by its name.
void PrintTo(const BadFile& c, std::ostream* os) { *os << c.name; }

class ParseDeviceNodesRejects : public ::testing::TestWithParam<BadFile> {};

TEST_P(ParseDeviceNodesRejects, NamingTheFileAndTheLine) {
  const BadFile& c = GetParam();
  auto r = ParseDeviceNodes(c.text, Machine(), "/run/hami-sim/device-nodes");
  ASSERT_FALSE(r.ok()) << c.text;
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(),
              HasSubstr("/run/hami-sim/device-nodes: line " + std::to_string(c.line) + " "));
  EXPECT_THAT(r.error().message(), HasSubstr(c.why));
}

std::string Upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Lines, ParseDeviceNodesRejects,
    ::testing::Values(
        BadFile{"UuidOfAnotherMachine", Uuid(0) + "\nGPU-00000000-0000-0000-0000-000000000000\n", 2,
                "'GPU-00000000-0000-0000-0000-000000000000' is the UUID of no GPU of this machine"},
        BadFile{"EmptyLine", Uuid(0) + "\n\n" + Uuid(1) + "\n", 2, "is empty"},
        BadFile{"OnlyANewline", "\n", 1, "is empty"},
        BadFile{"Index", "0\n", 1, "'0' is not a GPU UUID"},
        BadFile{"UuidPrefix", Uuid(0).substr(0, 12) + "\n", 1, "is not a GPU UUID"},
        BadFile{"UpperCaseHex", "GPU-" + Upper(Uuid(0).substr(4)) + "\n", 1, "is not a GPU UUID"},
        BadFile{"TrailingBlank", Uuid(0) + " \n", 1, "is not a GPU UUID"},
        BadFile{"CarriageReturn", Uuid(0) + "\r\n", 1, "is not a GPU UUID"},
        BadFile{"CommaList", Uuid(0) + "," + Uuid(1) + "\n", 1, "is not a GPU UUID"},
        BadFile{"Comment", "# the container's GPUs\n", 1, "is not a GPU UUID"},
        BadFile{"BinaryIsShownAsQuestionMarks", std::string("\x01\xff", 2), 1,
                "'?"
                "?' is not a GPU UUID"},
        BadFile{"LongLineIsCut", std::string(200, 'x'), 1, std::string(64, 'x') + "...'"}),
    [](const ::testing::TestParamInfo<BadFile>& param) { return std::string(param.param.name); });

TEST(ReadDeviceNodes, WithoutAFileEveryDeviceIsAccessible) {
  TempDir dir("hami-device-nodes");
  auto r = ReadDeviceNodes(dir.File("absent"), Machine());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_THAT(*r, ElementsAre(0, 1, 2));
  auto under_missing_dir = ReadDeviceNodes(dir.File("no-dir/device-nodes"), Machine());
  ASSERT_TRUE(under_missing_dir.ok()) << under_missing_dir.error().message();
  EXPECT_THAT(*under_missing_dir, ElementsAre(0, 1, 2));
}

TEST(ReadDeviceNodes, ReadsTheFileThatIsThere) {
  TempDir dir("hami-device-nodes");
  std::ofstream(dir.File("nodes")) << DeviceNodesText(std::vector<std::string>{Uuid(1)});
  auto r = ReadDeviceNodes(dir.File("nodes"), Machine());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_THAT(*r, ElementsAre(1));
}

TEST(ReadDeviceNodes, AFileThatCannotBeReadIsAnErrorNamingIt) {
  TempDir dir("hami-device-nodes");
  ASSERT_EQ(mkdir(dir.File("nodes").c_str(), 0755), 0);
  auto r = ReadDeviceNodes(dir.File("nodes"), Machine());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr(dir.File("nodes")));
  std::ofstream(dir.File("big")) << std::string(65 << 10, 'x');
  auto big = ReadDeviceNodes(dir.File("big"), Machine());
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.error().message(), HasSubstr(dir.File("big")));
}

TEST(DeviceNodesText, IsOneUuidPerLineAndParsesBack) {
  const std::vector<std::string> uuids = {Uuid(0), Uuid(2)};
  EXPECT_EQ(DeviceNodesText(uuids), Uuid(0) + "\n" + Uuid(2) + "\n");
  EXPECT_EQ(DeviceNodesText(std::vector<std::string>{}), "");
  auto r = ParseDeviceNodes(DeviceNodesText(uuids), Machine(), "/f");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_THAT(*r, ElementsAre(0, 2));
}

// CUDA_VISIBLE_DEVICES over the devices a container has the nodes of, as the driver applies
// it there: indices count within them, other devices' UUIDs name nothing.
TEST(ParseVisibleDevicesOverDeviceNodes, CountsIndicesWithinTheAccessibleDevices) {
  const std::vector<int> accessible = {1, 2};
  EXPECT_THAT(ParseVisibleDevices(std::nullopt, Machine(), accessible).physical, ElementsAre(1, 2));
  EXPECT_THAT(ParseVisibleDevices("0", Machine(), accessible).physical, ElementsAre(1));
  EXPECT_THAT(ParseVisibleDevices("1,0", Machine(), accessible).physical, ElementsAre(2, 1));
  VisibleDevices past = ParseVisibleDevices("0,2", Machine(), accessible);
  EXPECT_THAT(past.physical, ElementsAre(1));
  ASSERT_TRUE(past.stopped.has_value());
  EXPECT_EQ(past.stopped->reason, VisibleStop::kNoSuchIndex);
}

TEST(ParseVisibleDevicesOverDeviceNodes, AUuidOfAnInaccessibleDeviceNamesNoDevice) {
  const std::vector<int> accessible = {1, 2};
  EXPECT_THAT(ParseVisibleDevices(Uuid(2), Machine(), accessible).physical, ElementsAre(2));
  VisibleDevices other = ParseVisibleDevices(Uuid(0) + "," + Uuid(1), Machine(), accessible);
  EXPECT_THAT(other.physical, IsEmpty());
  ASSERT_TRUE(other.stopped.has_value());
  EXPECT_EQ(other.stopped->reason, VisibleStop::kNoSuchUuid);
}

TEST(ParseVisibleDevicesOverDeviceNodes, NoAccessibleDeviceShowsNone) {
  EXPECT_THAT(ParseVisibleDevices(std::nullopt, Machine(), std::vector<int>{}).physical, IsEmpty());
  EXPECT_THAT(ParseVisibleDevices("0", Machine(), std::vector<int>{}).physical, IsEmpty());
}

}  // namespace
}  // namespace hami::sim
