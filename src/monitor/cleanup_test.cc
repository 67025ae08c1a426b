#include "monitor/cleanup.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/temp_dir.h"
#include "region/region.h"

namespace hami::monitor {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr auto kInterval = 5min;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

void WriteFile(const std::string& path, const std::string& text) {
  auto fd = OpenRegularFile(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  ASSERT_TRUE(WriteAll(fd->get(), text).ok());
}

class CleanupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    hook_ = tmp_.File("hook");
    containers_ = hook_ + "/vgpu/containers";
    outside_ = tmp_.File("outside");
    for (const std::string& d : {hook_, hook_ + "/vgpu", containers_, outside_}) {
      ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
    }
    auto c = Cleaner::Start({hook_, kInterval});
    ASSERT_TRUE(c.ok()) << c.error().message();
    cleaner_ = std::move(c).value();
  }

  // <uid>_<name>/ with a file in it, and <uid>_<name>.limits beside it.
  std::string MakeContainer(const std::string& uid, const std::string& name = "main") {
    const std::string dir = containers_ + "/" + uid + "_" + name;
    EXPECT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
    WriteFile(dir + "/usage.cache", "region");
    WriteFile(dir + ".limits", "CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n");
    return dir;
  }

  CleanupReport Pass(std::chrono::steady_clock::duration at) {
    return cleaner_->Pass(
        [this]() -> Result<std::vector<std::string>> {
          if (!list_error_.empty()) return Error(ErrorCode::kUnavailable, list_error_);
          return pods_;
        },
        t0_ + at);
  }

  TempDir tmp_{"hami-cleanup-test"};
  std::string hook_, containers_, outside_;
  std::unique_ptr<Cleaner> cleaner_;
  std::vector<std::string> pods_;
  std::string list_error_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::time_point() + 1h;
};

TEST_F(CleanupTest, ADeletedPodsDirectoryAndLimitsGoAfterTwoListsAnIntervalApart) {
  const std::string gone = MakeContainer("gone");
  const std::string live = MakeContainer("live");
  pods_ = {"live", "unrelated"};

  CleanupReport r = Pass(0s);
  EXPECT_TRUE(r.listed);
  EXPECT_EQ(r.waiting, 1);
  EXPECT_EQ(r.candidates, 0);
  r = Pass(kInterval - 1ns);
  EXPECT_EQ(r.waiting, 1);
  EXPECT_EQ(r.removed, 0);
  EXPECT_TRUE(Exists(gone));

  r = Pass(kInterval);
  EXPECT_EQ(r.candidates, 1);
  EXPECT_EQ(r.removed, 1);
  EXPECT_THAT(r.removed_dirs, ElementsAre(gone));
  EXPECT_TRUE(r.errors.empty());
  EXPECT_FALSE(Exists(gone));
  EXPECT_FALSE(Exists(gone + ".limits"));
  EXPECT_TRUE(Exists(live + "/usage.cache"));
  EXPECT_TRUE(Exists(live + ".limits"));
  r = Pass(kInterval + 1s);
  EXPECT_EQ(r.removed, 0);
  EXPECT_EQ(r.waiting, 0);
}

TEST_F(CleanupTest, AClaimsDirectoryLimitsAndRecordAreNeverTouched) {
  const std::string claim = MakeContainer("claim-uid", "claim");
  WriteFile(claim + ".claim", "{\"name\":\"c\",\"namespace\":\"ml\",\"uid\":\"claim-uid\"}\n");
  // Without its record, the same name is a pod's container called "claim": cleaned up.
  const std::string pods_claim = MakeContainer("gone", "claim");
  pods_ = {};
  for (int i = 0; i < 3; ++i) Pass(i * kInterval);
  EXPECT_TRUE(Exists(claim + "/usage.cache"));
  EXPECT_TRUE(Exists(claim + ".limits"));
  EXPECT_TRUE(Exists(claim + ".claim"));
  EXPECT_FALSE(Exists(pods_claim));
  EXPECT_FALSE(Exists(pods_claim + ".limits"));
  CleanupReport r = Pass(3 * kInterval);
  EXPECT_EQ(r.waiting, 0);
  EXPECT_EQ(r.candidates, 0);
}

TEST_F(CleanupTest, ALivePodsFilesAreNeverTouched) {
  const std::string live = MakeContainer("live");
  pods_ = {"live"};
  for (int i = 0; i < 5; ++i) {
    CleanupReport r = Pass(i * kInterval);
    EXPECT_EQ(r.waiting, 0);
    EXPECT_EQ(r.candidates, 0);
  }
  EXPECT_EQ(*ReadFileToString(live + "/usage.cache"), "region");
  EXPECT_EQ(*ReadFileToString(live + ".limits"), "CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n");
}

TEST_F(CleanupTest, AFailedListInBetweenDeletesNothingAndResetsTheMarks) {
  const std::string gone = MakeContainer("gone");
  EXPECT_EQ(Pass(0s).waiting, 1);
  list_error_ = "GET /api/v1/pods: connection refused";
  CleanupReport r = Pass(1min);
  EXPECT_FALSE(r.listed);
  EXPECT_EQ(r.list_error, "GET /api/v1/pods: connection refused");
  EXPECT_EQ(r.removed, 0);
  list_error_.clear();
  r = Pass(kInterval);  // would have been due; marked afresh instead
  EXPECT_EQ(r.removed, 0);
  EXPECT_EQ(r.waiting, 1);
  EXPECT_TRUE(Exists(gone));
  r = Pass(2 * kInterval - 1ns);
  EXPECT_EQ(r.removed, 0);
  r = Pass(2 * kInterval);
  EXPECT_EQ(r.removed, 1);
  EXPECT_FALSE(Exists(gone));
}

TEST_F(CleanupTest, APodThatReappearsInAListClearsItsMark) {
  const std::string dir = MakeContainer("back");
  EXPECT_EQ(Pass(0s).waiting, 1);
  pods_ = {"back"};
  EXPECT_EQ(Pass(1min).waiting, 0);
  pods_.clear();
  EXPECT_EQ(Pass(kInterval).removed, 0) << "absent again since only now";
  EXPECT_EQ(Pass(2 * kInterval).removed, 1);
  EXPECT_FALSE(Exists(dir));
}

TEST_F(CleanupTest, ADirectoryMadeAfterThePassesScanIsNotACandidateOfThatPass) {
  std::string late;
  auto list_and_make = [&]() -> Result<std::vector<std::string>> {
    if (late.empty()) late = MakeContainer("late");
    return std::vector<std::string>{};
  };
  CleanupReport r = cleaner_->Pass(list_and_make, t0_);
  EXPECT_EQ(r.waiting, 0) << "made during the list: not seen by this pass's scan";
  ASSERT_TRUE(Exists(late));
  EXPECT_EQ(Pass(kInterval).waiting, 1) << "first judged here";
  EXPECT_TRUE(Exists(late));
  EXPECT_EQ(Pass(2 * kInterval).removed, 1);
  EXPECT_FALSE(Exists(late));
}

TEST_F(CleanupTest, ADirectoryWithALiveProcessInItsRegionIsKeptAndCounted) {
  const std::string dir = containers_ + "/busy_main";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  region::PolicySpec spec;
  spec.device_count = 1;
  spec.uuid[0] = "GPU-aaaaaaaa-0000-4000-8000-000000000000";
  ASSERT_TRUE(
      region::Region::Open(dir + "/usage.cache", &spec, region::Create::kIfMissing, nullptr).ok());
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  pid_t child = fork();
  if (child == 0) {
    auto r = region::Region::Open(dir + "/usage.cache", nullptr, region::Create::kNever, nullptr);
    if (!r.ok() || !(*r)->Register().ok()) _exit(1);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    if (read(release[0], &c, 1) != 1) _exit(3);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);

  Pass(0s);
  CleanupReport r = Pass(kInterval);
  EXPECT_EQ(r.candidates, 1);
  EXPECT_EQ(r.kept_attached, 1);
  EXPECT_EQ(r.removed, 0);
  EXPECT_TRUE(Exists(dir + "/usage.cache"));

  ASSERT_EQ(write(release[1], &c, 1), 1);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) close(fd);
  r = Pass(kInterval + 5s);
  EXPECT_EQ(r.kept_attached, 0);
  EXPECT_EQ(r.removed, 1) << "still due: removed once the process is gone";
  EXPECT_FALSE(Exists(dir));
}

TEST_F(CleanupTest, SymlinksAreRemovedAsLinksAndWhatTheyPointAtStays) {
  // The directory and the limits file are links to elsewhere.
  const std::string target_dir = outside_ + "/dir";
  ASSERT_EQ(mkdir(target_dir.c_str(), 0755), 0);
  WriteFile(target_dir + "/usage.cache", "keep");
  WriteFile(outside_ + "/limits", "keep");
  const std::string linked = containers_ + "/linked_main";
  ASSERT_EQ(symlink(target_dir.c_str(), linked.c_str()), 0);
  ASSERT_EQ(symlink((outside_ + "/limits").c_str(), (linked + ".limits").c_str()), 0);
  // A real directory holding a link to a directory elsewhere.
  const std::string holder = MakeContainer("holder");
  const std::string deep_target = outside_ + "/deep";
  ASSERT_EQ(mkdir(deep_target.c_str(), 0755), 0);
  WriteFile(deep_target + "/file", "keep");
  ASSERT_EQ(symlink(deep_target.c_str(), (holder + "/escape").c_str()), 0);

  Pass(0s);
  CleanupReport r = Pass(kInterval);
  EXPECT_EQ(r.removed, 2);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front().message();
  EXPECT_FALSE(Exists(linked));
  EXPECT_FALSE(Exists(linked + ".limits"));
  EXPECT_FALSE(Exists(holder));
  EXPECT_EQ(*ReadFileToString(target_dir + "/usage.cache"), "keep");
  EXPECT_EQ(*ReadFileToString(outside_ + "/limits"), "keep");
  EXPECT_EQ(*ReadFileToString(deep_target + "/file"), "keep");
}

TEST_F(CleanupTest, AMountPointInsideADirectoryIsLeftInPlaceAndReported) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string dir = MakeContainer("mounted");
  const std::string mnt = dir + "/mnt";
  ASSERT_EQ(mkdir(mnt.c_str(), 0755), 0);
  // In a child with its own mount namespace, so the mount never leaks out of the test.
  pid_t child = fork();
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
      _exit(77);
    }
    if (!OpenRegularFile(mnt + "/data", O_CREAT | O_WRONLY, 0644).ok()) _exit(10);
    Pass(0s);
    CleanupReport r = Pass(kInterval);
    if (r.removed != 0 || r.errors.size() != 1) _exit(11);
    if (r.errors[0].message().find(mnt + ": a mount point") == std::string::npos) _exit(12);
    if (!Exists(mnt + "/data")) _exit(13);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) GTEST_SKIP() << "no private mount namespace here (unshare/mount)";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "see the exit codes in the child";
}

TEST_F(CleanupTest, AContainersDirectoryThatIsASymlinkIsNotFollowed) {
  const std::string elsewhere = outside_ + "/containers";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((elsewhere + "/gone_main").c_str(), 0755), 0);
  ASSERT_EQ(rmdir(containers_.c_str()), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), containers_.c_str()), 0);
  Pass(0s);
  CleanupReport r = Pass(kInterval);
  EXPECT_EQ(r.candidates, 0);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message(), HasSubstr("opening directory " + containers_));
  EXPECT_TRUE(Exists(elsewhere + "/gone_main"));
}

TEST_F(CleanupTest, ALimitsFileWhoseDirectoryIsGoneIsRemovedToo) {
  WriteFile(containers_ + "/orphan_main.limits", "X=1\n");
  Pass(0s);
  CleanupReport r = Pass(kInterval);
  EXPECT_EQ(r.removed, 1);
  EXPECT_THAT(r.removed_dirs, ElementsAre(containers_ + "/orphan_main.limits"));
  EXPECT_FALSE(Exists(containers_ + "/orphan_main.limits"));
}

TEST_F(CleanupTest, NamesThatAreNotThePluginsAreNeverTouched) {
  for (std::string name : {".hidden_main", "nounderscore", "uid_..", "_main"}) {
    const std::string dir = containers_ + "/" + name;
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir;
  }
  WriteFile(containers_ + "/monitor-notes.txt", "keep");
  Pass(0s);
  CleanupReport r = Pass(kInterval);
  EXPECT_EQ(r.candidates, 0);
  EXPECT_TRUE(Exists(containers_ + "/.hidden_main"));
  EXPECT_TRUE(Exists(containers_ + "/nounderscore"));
  EXPECT_TRUE(Exists(containers_ + "/_main"));
  EXPECT_TRUE(Exists(containers_ + "/uid_.."));
  EXPECT_TRUE(Exists(containers_ + "/monitor-notes.txt"));
}

TEST_F(CleanupTest, NoContainersDirectoryIsAnEmptyPass) {
  ASSERT_EQ(rmdir(containers_.c_str()), 0);
  CleanupReport r = Pass(0s);
  EXPECT_TRUE(r.listed);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_EQ(r.candidates + r.waiting, 0);
}

TEST_F(CleanupTest, ASecondCleanerOnTheHookPathIsBusyNamingTheLockAndItsHolder) {
  const std::string lock = hook_ + "/vgpu/monitor.lock";
  EXPECT_EQ(cleaner_->lock_path(), lock);
  EXPECT_EQ(*ReadFileToString(lock), std::to_string(getpid()) + "\n");
  // Two opens of the lock file conflict even in one process (OFD locks).
  auto second = Cleaner::Start({hook_ + "/", kInterval});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), ErrorCode::kBusy);
  EXPECT_THAT(second.error().message(), HasSubstr(lock));
  EXPECT_THAT(second.error().message(), HasSubstr("pid " + std::to_string(getpid())));
  EXPECT_THAT(second.error().message(), HasSubstr("cleanup stays off"));

  // Another process is refused too, and may take over once the holder is gone.
  pid_t child = fork();
  if (child == 0) {
    auto c = Cleaner::Start({hook_, kInterval});
    _exit(!c.ok() && c.error().code() == ErrorCode::kBusy ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  cleaner_.reset();
  auto again = Cleaner::Start({hook_, kInterval});
  ASSERT_TRUE(again.ok()) << again.error().message();
}

TEST(CleanerStart, RefusesAHookPathThatIsNotAbsoluteOrClimbs) {
  for (std::string bad : {"", "usr/local", "/usr/../tmp", "/"}) {
    auto c = Cleaner::Start({bad, kInterval});
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.error().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_THAT(c.error().message(), HasSubstr("hook path '" + bad + "'"));
  }
}

TEST(CleanerStart, MakesTheVgpuDirectoryWhenMissing) {
  TempDir tmp("hami-cleanup-start");
  ASSERT_TRUE(tmp.ok());
  auto c = Cleaner::Start({tmp.path(), kInterval});
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE(Exists(tmp.path() + "/vgpu/monitor.lock"));
  EXPECT_EQ((*c)->containers_dir(), tmp.path() + "/vgpu/containers");
}

}  // namespace
}  // namespace hami::monitor
