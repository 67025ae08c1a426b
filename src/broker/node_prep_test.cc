// PrepareLockDirectory in a private parent directory: what it makes, and each unsafe parent or
// entry it refuses (including a replacement between its checks, through the test hook).
#include "broker/node_prep.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/temp_dir.h"
#include "common/unique_fd.h"

namespace hami::broker {
namespace {

using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;

class NodePrepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    parent_ = tmp_.File("tmp");
    ASSERT_EQ(mkdir(parent_.c_str(), 0700), 0);
    ASSERT_EQ(chmod(parent_.c_str(), 01777), 0);  // like /tmp
    lock_dir_ = parent_ + "/vgpulock";
  }

  // Options for the private parent; the expected owner is whoever runs the test (root in CI).
  NodePrepOptions Options() const {
    NodePrepOptions o;
    o.parent = parent_;
    o.expected_owner = geteuid();
    return o;
  }

  static struct stat Lstat(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st;
  }

  TempDir tmp_{"hnp"};
  std::string parent_;
  std::string lock_dir_;
};

TEST_F(NodePrepTest, CreatesTheDirectoryWithMode01777WhateverTheUmask) {
  const mode_t old = umask(077);
  const Status s = PrepareLockDirectory(Options());
  umask(old);
  ASSERT_TRUE(s.ok()) << s.error().message();
  const struct stat st = Lstat(lock_dir_);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(NodePrepTest, TheDefaultsAreRootAndTmpVgpulock) {
  const NodePrepOptions o;
  EXPECT_EQ(o.parent, "/tmp");
  EXPECT_EQ(o.name, "vgpulock");
  EXPECT_EQ(o.expected_owner, 0u);
}

TEST_F(NodePrepTest, IsIdempotentAndRestoresANarrowedMode) {
  ASSERT_TRUE(PrepareLockDirectory(Options()).ok());
  const ino_t ino = Lstat(lock_dir_).st_ino;
  ASSERT_EQ(chmod(lock_dir_.c_str(), 0700), 0);
  const Status again = PrepareLockDirectory(Options());
  ASSERT_TRUE(again.ok()) << again.error().message();
  const struct stat st = Lstat(lock_dir_);
  EXPECT_EQ(st.st_ino, ino) << "the existing directory was replaced";
  EXPECT_EQ(st.st_mode & 07777, 01777u);
}

TEST_F(NodePrepTest, KeepsWhatIsInsideAnExistingDirectory) {
  ASSERT_EQ(mkdir(lock_dir_.c_str(), 0755), 0);
  UniqueFd f(open((lock_dir_ + "/a.lock").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  ASSERT_TRUE(f.valid());
  ASSERT_TRUE(PrepareLockDirectory(Options()).ok());
  EXPECT_EQ(access((lock_dir_ + "/a.lock").c_str(), F_OK), 0);
  EXPECT_EQ(Lstat(lock_dir_).st_mode & 07777, 01777u);
}

TEST_F(NodePrepTest, RefusesAParentThatIsASymlink) {
  const std::string link = tmp_.File("tmp-link");
  ASSERT_EQ(symlink(parent_.c_str(), link.c_str()), 0);
  NodePrepOptions o = Options();
  o.parent = link;
  const Status s = PrepareLockDirectory(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(s.error().message(), link + ": is a symlink; refusing to follow it");
  EXPECT_NE(access(lock_dir_.c_str(), F_OK), 0) << "created through the symlink";
}

TEST_F(NodePrepTest, RefusesAWorldWritableParentWithoutTheStickyBit) {
  ASSERT_EQ(chmod(parent_.c_str(), 0777), 0);
  const Status s = PrepareLockDirectory(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(s.error().message(), parent_ +
                                     ": mode 0777 lets group or others write without the sticky "
                                     "bit, so any user could replace vgpulock");
  EXPECT_NE(access(lock_dir_.c_str(), F_OK), 0);
}

TEST_F(NodePrepTest, AcceptsAParentOnlyItsOwnerCanWrite) {
  ASSERT_EQ(chmod(parent_.c_str(), 0755), 0);
  const Status s = PrepareLockDirectory(Options());
  EXPECT_TRUE(s.ok()) << s.error().message();
}

TEST_F(NodePrepTest, RefusesAParentOwnedByAnotherUid) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: chown the parent to another UID";
  ASSERT_EQ(chown(parent_.c_str(), kNobody, kNobody), 0);
  const Status s = PrepareLockDirectory(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), parent_ + ": owned by UID 65534, not UID 0");
  EXPECT_NE(access(lock_dir_.c_str(), F_OK), 0);
}

TEST_F(NodePrepTest, RefusesAnEntryThatIsASymlink) {
  const std::string target = tmp_.File("target");
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(symlink(target.c_str(), lock_dir_.c_str()), 0);
  const Status s = PrepareLockDirectory(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(s.error().message(), lock_dir_ + ": is a symlink; refusing to follow it");
  EXPECT_EQ(Lstat(target).st_mode & 07777, 0700u) << "the symlink's target was changed";
}

TEST_F(NodePrepTest, RefusesAnEntryThatIsARegularFile) {
  UniqueFd f(open(lock_dir_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_TRUE(f.valid());
  const Status s = PrepareLockDirectory(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), lock_dir_ + ": is a regular file, not a directory");
  EXPECT_EQ(Lstat(lock_dir_).st_mode, mode_t(S_IFREG | 0644));
}

TEST_F(NodePrepTest, RefusesAnEntryOwnedByAnotherUid) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: chown the directory to another UID";
  ASSERT_EQ(mkdir(lock_dir_.c_str(), 0700), 0);
  ASSERT_EQ(chown(lock_dir_.c_str(), kNobody, kNobody), 0);
  const Status s = PrepareLockDirectory(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), lock_dir_ + ": owned by UID 65534, not UID 0");
  EXPECT_EQ(Lstat(lock_dir_).st_mode & 07777, 0700u) << "changed a directory it refused";
}

TEST_F(NodePrepTest, RefusesADirectoryReplacedBeforeTheFinalCheck) {
  NodePrepOptions o = Options();
  int calls = 0;
  o.before_final_check = [&calls](const std::string& path) {
    ++calls;
    // Another directory, with the right owner and mode, now has the name.
    ASSERT_EQ(rename(path.c_str(), (path + ".old").c_str()), 0);
    ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
    ASSERT_EQ(chmod(path.c_str(), 01777), 0);
  };
  const Status s = PrepareLockDirectory(o);
  EXPECT_EQ(calls, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_THAT(s.error().message(), HasSubstr(lock_dir_ + ": replaced during preparation"));
}

TEST_F(NodePrepTest, RefusesASymlinkSwappedInBeforeTheFinalCheck) {
  NodePrepOptions o = Options();
  const std::string target = tmp_.File("target");
  o.before_final_check = [&target](const std::string& path) {
    ASSERT_EQ(rename(path.c_str(), (path + ".old").c_str()), 0);
    ASSERT_EQ(mkdir(target.c_str(), 01777), 0);
    ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0);
  };
  const Status s = PrepareLockDirectory(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), lock_dir_ +
                                     ": replaced during preparation (now a symlink with another "
                                     "device/inode)");
}

TEST_F(NodePrepTest, RefusesAModeChangedBeforeTheFinalCheck) {
  NodePrepOptions o = Options();
  o.before_final_check = [](const std::string& path) { ASSERT_EQ(chmod(path.c_str(), 0777), 0); };
  const Status s = PrepareLockDirectory(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), lock_dir_ + ": final mode 0777, expected 01777");
}

TEST_F(NodePrepTest, RefusesANameThatIsNotOnePathComponent) {
  NodePrepOptions o = Options();
  for (const char* name : {"", ".", "..", "a/b"}) {
    o.name = name;
    const Status s = PrepareLockDirectory(o);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument) << name;
  }
}

}  // namespace
}  // namespace hami::broker
