#include "monitor/containers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "common/temp_dir.h"
#include "gtest/gtest.h"

namespace hami::monitor {
namespace {

void Touch(const std::string& path) {
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  close(fd);
}

TEST(ParseContainerDirName, SplitsAtFirstUnderscore) {
  auto key = ParseContainerDirName("1234-abcd_main_sidecar");
  ASSERT_TRUE(key.ok()) << key.error().message();
  EXPECT_EQ(key->pod_uid, "1234-abcd");
  EXPECT_EQ(key->container, "main_sidecar");
}

TEST(ParseContainerDirName, RejectsNameWithoutSeparatorNamingIt) {
  auto key = ParseContainerDirName("justone");
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(key.error().message().find("'justone'"), std::string::npos);
  EXPECT_NE(key.error().message().find("no '_'"), std::string::npos);
}

TEST(ParseContainerDirName, RejectsEmptyPartsAndDotDot) {
  EXPECT_FALSE(ParseContainerDirName("_main").ok());
  EXPECT_FALSE(ParseContainerDirName("uid_").ok());
  auto bad = ParseContainerDirName("uid_a..b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("container name"), std::string::npos);
}

class ListContainerDirsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(hook_.ok());
    root_ = hook_.path() + "/vgpu/containers";
    ASSERT_EQ(mkdir((hook_.path() + "/vgpu").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
  }
  void MakeDir(const std::string& name) { ASSERT_EQ(mkdir((root_ + "/" + name).c_str(), 0755), 0); }
  TempDir hook_{"hami-containers"};
  std::string root_;
};

TEST_F(ListContainerDirsTest, MissingContainersDirectoryIsEmptyList) {
  TempDir empty("hami-containers-empty");
  std::vector<Error> skipped;
  auto dirs = ListContainerDirs(empty.path(), &skipped);
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  EXPECT_TRUE(dirs->empty());
  EXPECT_TRUE(skipped.empty());
}

TEST_F(ListContainerDirsTest, ListsSortedWithUsageCacheFirst) {
  MakeDir("uid-b_main");
  MakeDir("uid-a_worker");
  Touch(root_ + "/uid-b_main/zz.cache");
  Touch(root_ + "/uid-b_main/aa.cache");
  Touch(root_ + "/uid-b_main/usage.cache");
  Touch(root_ + "/uid-b_main/notes.txt");
  Touch(root_ + "/uid-b_main.limits");
  ASSERT_EQ(symlink("/etc/passwd", (root_ + "/uid-b_main/link.cache").c_str()), 0);
  std::vector<Error> skipped;
  auto dirs = ListContainerDirs(hook_.path() + "/", &skipped);
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  ASSERT_EQ(dirs->size(), 2u);
  EXPECT_EQ((*dirs)[0].key.pod_uid, "uid-a");
  EXPECT_TRUE((*dirs)[0].region_files.empty());
  const ContainerDir& b = (*dirs)[1];
  EXPECT_EQ(b.key.container, "main");
  EXPECT_EQ(b.dir, root_ + "/uid-b_main");
  EXPECT_EQ(b.limits_file, root_ + "/uid-b_main.limits");
  ASSERT_EQ(b.region_files.size(), 3u);
  EXPECT_EQ(b.region_files[0], b.dir + "/usage.cache");
  EXPECT_EQ(b.region_files[1], b.dir + "/aa.cache");
  EXPECT_EQ(b.region_files[2], b.dir + "/zz.cache");
  EXPECT_TRUE(skipped.empty()) << skipped[0].message();
}

TEST_F(ListContainerDirsTest, SkipsBadEntriesNamingThemAndIgnoresDotNames) {
  MakeDir("good_main");
  MakeDir("nounderscore");
  MakeDir(".hidden_x");
  Touch(root_ + "/stray_file");
  ASSERT_EQ(symlink("/tmp", (root_ + "/linked_dir").c_str()), 0);
  std::vector<Error> skipped;
  auto dirs = ListContainerDirs(hook_.path(), &skipped);
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  ASSERT_EQ(dirs->size(), 1u);
  EXPECT_EQ((*dirs)[0].key.pod_uid, "good");
  ASSERT_EQ(skipped.size(), 3u);
  std::string all;
  for (const auto& e : skipped) all += e.message() + "\n";
  EXPECT_NE(all.find(root_ + "/nounderscore"), std::string::npos) << all;
  EXPECT_NE(all.find(root_ + "/stray_file: not a directory"), std::string::npos) << all;
  EXPECT_NE(all.find(root_ + "/linked_dir: is a symlink"), std::string::npos) << all;
  EXPECT_EQ(all.find(".hidden"), std::string::npos) << all;
}

TEST_F(ListContainerDirsTest, AClaimsDirectoryCarriesItsRecordAndAPodsContainerNamedClaimDoesNot) {
  MakeDir("u-1_claim");
  Touch(root_ + "/u-1_claim/usage.cache");
  Touch(root_ + "/u-1_claim.limits");
  ASSERT_TRUE(std::ofstream(root_ + "/u-1_claim.claim")
              << node::ClaimRecordText({"ml", "trainer-gpu", "u-1"}));
  MakeDir("pod-2_claim");  // a device-plugin container that happens to be named "claim"
  Touch(root_ + "/pod-2_claim.limits");
  std::vector<Error> skipped;
  auto dirs = ListContainerDirs(hook_.path(), &skipped);
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  EXPECT_TRUE(skipped.empty()) << skipped[0].message();
  ASSERT_EQ(dirs->size(), 2u);
  const ContainerDir& pod = (*dirs)[0];
  EXPECT_EQ(pod.key.pod_uid, "pod-2");
  EXPECT_FALSE(pod.is_claim);
  EXPECT_FALSE(pod.claim.has_value());
  const ContainerDir& claim = (*dirs)[1];
  EXPECT_EQ(claim.key.pod_uid, "u-1");
  EXPECT_EQ(claim.key.container, "claim");
  EXPECT_TRUE(claim.is_claim);
  ASSERT_TRUE(claim.claim.has_value());
  EXPECT_EQ(*claim.claim, (node::ClaimRecord{"ml", "trainer-gpu", "u-1"}));
  EXPECT_EQ(claim.region_files, std::vector<std::string>{claim.dir + "/usage.cache"});
}

TEST_F(ListContainerDirsTest, AClaimRecordThatIsBadOrNamesAnotherUidIsReportedAndNotUsed) {
  MakeDir("u-1_claim");
  ASSERT_TRUE(std::ofstream(root_ + "/u-1_claim.claim") << "{\"name\":1}");
  MakeDir("u-2_claim");
  ASSERT_TRUE(std::ofstream(root_ + "/u-2_claim.claim")
              << node::ClaimRecordText({"ml", "other", "u-3"}));
  std::vector<Error> skipped;
  auto dirs = ListContainerDirs(hook_.path(), &skipped);
  ASSERT_TRUE(dirs.ok()) << dirs.error().message();
  ASSERT_EQ(dirs->size(), 2u);
  for (const ContainerDir& d : *dirs) {
    EXPECT_TRUE(d.is_claim) << d.dir;
    EXPECT_FALSE(d.claim.has_value()) << d.dir;
  }
  std::vector<std::string> messages;
  for (const Error& e : skipped) messages.push_back(e.message());
  std::sort(messages.begin(), messages.end());  // readdir's order is the file system's
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0], "claim directory " + root_ + "/u-1_claim: " + root_ +
                             "/u-1_claim.claim: claim record: no namespace (its series "
                             "are not exported)");
  EXPECT_EQ(messages[1], "claim directory " + root_ +
                             "/u-2_claim: its claim record names uid u-3, not u-2 (its "
                             "series are not exported)");
}

TEST_F(ListContainerDirsTest, NullSkippedIsAllowed) {
  MakeDir("nounderscore");
  auto dirs = ListContainerDirs(hook_.path(), nullptr);
  ASSERT_TRUE(dirs.ok());
  EXPECT_TRUE(dirs->empty());
}

}  // namespace
}  // namespace hami::monitor
