#include "node/mount_point.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "common/file.h"
#include "common/temp_dir.h"

namespace hami::node {
namespace {

// Opens `path` with `flags` and writes `text`; true when all of it was written.
bool Write(const std::string& path, int flags, const std::string& text) {
  auto fd = OpenRegularFile(path, flags | O_WRONLY, 0644);
  return fd.ok() && WriteAll(fd->get(), text).ok();
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

TEST(HeldMountPointTest, AnAbsentFileIsCreatedEmptyAndRemovedByItsCreator) {
  TempDir dir("hami-mount-point-");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("overrideEnv");
  {
    auto held = HeldMountPoint::Hold(path);
    ASSERT_TRUE(held.ok()) << held.error().message();
    EXPECT_TRUE(held->created());
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_size, 0);
  }
  EXPECT_FALSE(Exists(path));
}

TEST(HeldMountPointTest, AFileThatWasThereStays) {
  TempDir dir("hami-mount-point-");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("overrideEnv");
  ASSERT_TRUE(Write(path, O_CREAT | O_EXCL, ""));
  {
    auto held = HeldMountPoint::Hold(path);
    ASSERT_TRUE(held.ok()) << held.error().message();
    EXPECT_FALSE(held->created());
  }
  EXPECT_TRUE(Exists(path));
}

TEST(HeldMountPointTest, TheCreatorLeavesItWhileAnotherHoldsIt) {
  TempDir dir("hami-mount-point-");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("overrideEnv");
  std::optional<HeldMountPoint> second;
  {
    auto first = HeldMountPoint::Hold(path);
    ASSERT_TRUE(first.ok()) << first.error().message();
    ASSERT_TRUE(first->created());
    auto other = HeldMountPoint::Hold(path);
    ASSERT_TRUE(other.ok()) << other.error().message();
    EXPECT_FALSE(other->created());
    second.emplace(std::move(other).value());
  }
  EXPECT_TRUE(Exists(path)) << "removed under a holder's bind mount";
  second.reset();
  EXPECT_TRUE(Exists(path)) << "only its creator removes it";
}

TEST(HeldMountPointTest, ACreatedFileThatGainedContentStays) {
  TempDir dir("hami-mount-point-");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("overrideEnv");
  {
    auto held = HeldMountPoint::Hold(path);
    ASSERT_TRUE(held.ok()) << held.error().message();
    // Same inode, new content: someone else's file now.
    ASSERT_TRUE(Write(path, O_APPEND, "CUDA_DEVICE_SM_LIMIT=20\n"));
  }
  EXPECT_TRUE(Exists(path));
}

TEST(HeldMountPointTest, ASymbolicLinkOrADirectoryIsRefusedNamingThePath) {
  TempDir dir("hami-mount-point-");
  ASSERT_TRUE(dir.ok());
  const std::string link = dir.File("link");
  ASSERT_EQ(symlink(dir.File("target").c_str(), link.c_str()), 0);
  auto on_link = HeldMountPoint::Hold(link);
  ASSERT_FALSE(on_link.ok());
  EXPECT_NE(on_link.error().message().find(link + " is a symbolic link"), std::string::npos)
      << on_link.error().message();

  const std::string sub = dir.File("sub");
  ASSERT_EQ(mkdir(sub.c_str(), 0755), 0);
  auto on_dir = HeldMountPoint::Hold(sub);
  ASSERT_FALSE(on_dir.ok());
  EXPECT_NE(on_dir.error().message().find(sub + " is not a regular file"), std::string::npos)
      << on_dir.error().message();
}

TEST(HeldMountPointTest, AnUncreatablePathSaysHowToMakeIt) {
  if (geteuid() == 0) GTEST_SKIP() << "root creates files in any directory";
  TempDir dir("hami-mount-point-");
  ASSERT_TRUE(dir.ok());
  const std::string locked = dir.File("locked");
  ASSERT_EQ(mkdir(locked.c_str(), 0555), 0);
  auto held = HeldMountPoint::Hold(locked + "/overrideEnv");
  ASSERT_FALSE(held.ok());
  EXPECT_NE(held.error().message().find("touch " + locked + "/overrideEnv"), std::string::npos)
      << held.error().message();
}

}  // namespace
}  // namespace hami::node
