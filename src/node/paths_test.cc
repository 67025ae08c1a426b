// The node's shared paths: the values HAMi's contracts fix, and the host layout's validation
// of the names that come from the API server (src/node/paths.h).
#include "node/paths.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <string_view>

namespace hami::node {
namespace {

using ::testing::HasSubstr;

const ContainerRef kRef{"6a2f3c1e-9d1b-4a8e-8f0e-1c2d3e4f5a6b", "trainer"};

TEST(NodePaths, ConstantsAreHamisContracts) {
  EXPECT_STREQ(kLimitsFilePath, "/overrideEnv");
  EXPECT_STREQ(kDefaultSharedCache, "/tmp/cudevshr.cache");
  EXPECT_STREQ(kLockDir, "/tmp/vgpulock");
  EXPECT_EQ(kLockDirMode, mode_t{01777});
  EXPECT_STREQ(kProbeLockPath, "/tmp/vgpulock/probe.lock");
  EXPECT_STREQ(kBrokerHostSocket, "/var/run/hami/hostpid/broker.sock");
  EXPECT_STREQ(kBrokerContainerSocket, "/tmp/vgpulock/hostpid/broker.sock");
  EXPECT_STREQ(kDefaultHookPath, "/usr/local");
}

TEST(NodePaths, RegionIsInsideTheContainerDirectoryAndTheLimitsFileBesideIt) {
  const std::string stem =
      "/usr/local/vgpu/containers/6a2f3c1e-9d1b-4a8e-8f0e-1c2d3e4f5a6b_trainer";
  auto dir = ContainerDir(kDefaultHookPath, kRef);
  ASSERT_TRUE(dir.ok()) << dir.error().message();
  EXPECT_EQ(*dir, stem);
  auto region = ContainerRegionPath(kDefaultHookPath, kRef);
  ASSERT_TRUE(region.ok());
  EXPECT_EQ(*region, stem + "/usage.cache");
  auto limits = ContainerLimitsPath(kDefaultHookPath, kRef);
  ASSERT_TRUE(limits.ok());
  EXPECT_EQ(*limits, stem + ".limits");
}

TEST(NodePaths, TrailingSlashesOfTheHookPathAreDropped) {
  auto dir = ContainerDir("/opt/hami///", {"uid", "c"});
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, "/opt/hami/vgpu/containers/uid_c");
  auto root = ContainerDir("/", {"uid", "c"});
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(*root, "/vgpu/containers/uid_c");
}

struct BadName {
  const char* name;
  std::string_view value;
  std::string_view why;
};

void PrintTo(const BadName& b, std::ostream* os) { *os << b.name; }

class BadComponent : public ::testing::TestWithParam<BadName> {};

TEST_P(BadComponent, IsRefusedAsPodUidAndAsContainerNamingWhatIsWrong) {
  const BadName& bad = GetParam();
  for (bool as_pod : {true, false}) {
    ContainerRef ref = as_pod ? ContainerRef{bad.value, "c"} : ContainerRef{"uid", bad.value};
    std::string_view what = as_pod ? "pod UID" : "container name";
    for (auto result :
         {ContainerDir(kDefaultHookPath, ref), ContainerRegionPath(kDefaultHookPath, ref),
          ContainerLimitsPath(kDefaultHookPath, ref)}) {
      ASSERT_FALSE(result.ok()) << what << " '" << bad.value << "'";
      EXPECT_EQ(result.error().code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(result.error().message(), HasSubstr(std::string(what) + " '"));
      EXPECT_THAT(result.error().message(), HasSubstr(std::string(bad.why)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    NodePaths, BadComponent,
    ::testing::Values(BadName{"Empty", "", "is empty"}, BadName{"Slash", "a/b", "contains '/'"},
                      BadName{"OnlySlash", "/", "contains '/'"},
                      BadName{"DotDot", "..", "contains '..'"},
                      BadName{"InnerDotDot", "a..b", "contains '..'"},
                      BadName{"Dot", ".", "is '.'"},
                      BadName{"Newline", "a\nb", "control character at offset 1"},
                      BadName{"Nul", std::string_view("a\0b", 3), "control character"},
                      BadName{"Delete", "\x7f", "control character at offset 0"}),
    [](const ::testing::TestParamInfo<BadName>& p) { return p.param.name; });

TEST(NodePaths, ControlCharactersAreShownEscapedInTheError) {
  Status s = ValidatePathComponent("container name", "x\ty");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(),
            "container name 'x\\x09y': contains a control character at offset 1");
}

TEST(NodePaths, HookPathMustBeAbsoluteAndPlain) {
  for (std::string_view hook : {"", "usr/local/vgpu", "/usr/../etc", "/usr/local\n"}) {
    auto dir = ContainerDir(hook, kRef);
    ASSERT_FALSE(dir.ok()) << "'" << hook << "'";
    EXPECT_THAT(dir.error().message(), HasSubstr("hook path '"));
  }
}

TEST(NodePaths, PlainNamesPass) {
  EXPECT_TRUE(ValidatePathComponent("container name", "my-container.v2_x").ok());
}

}  // namespace
}  // namespace hami::node
