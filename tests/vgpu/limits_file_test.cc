// A process that starts with an empty environment — as `env -i`, an SSH login or `su -`
// give — is still held to the container's limits: libvgpu.so reads them from the limits
// file at /overrideEnv, a path compiled into the library.
//
// Each test runs sim_worker in a private mount namespace where a test file is bound onto
// /overrideEnv, with nothing in its environment but LD_PRELOAD, LD_LIBRARY_PATH and the
// simulator's own HAMI_SIM_* variables. Needs root (unshare and mount).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/file.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;
constexpr char kLimitsFile[] = "/overrideEnv";  // vgpu::kLimitsFilePath

// Exit statuses of the child before it becomes sim_worker.
constexpr int kNoNamespace = 120;  // unshare(CLONE_NEWNS) refused with EPERM
constexpr int kUnshareFailed = 121;
constexpr int kPrivateFailed = 122;
constexpr int kBindFailed = 123;
constexpr int kExecFailed = 127;

std::string SetupFailure(int status) {
  switch (status) {
    case kUnshareFailed:
      return "unshare(CLONE_NEWNS) failed";
    case kPrivateFailed:
      return "making / recursively private failed";
    case kBindFailed:
      return std::string("bind-mounting the test file onto ") + kLimitsFile + " failed";
    case kExecFailed:
      return "executing sim_worker failed";
    default:
      return "";
  }
}

// Makes sure a file exists at /overrideEnv to bind onto, for as long as the object lives:
// creates an empty one when there is none (to libvgpu an empty file is no limits file, so it
// changes nothing for other processes meanwhile) and removes it afterwards. A file that was
// already there is never written or removed.
//
// The file is its own lock, as for `hami run --limits-file-mount`: every user holds a shared
// flock on it while its mount exists, and the creator removes it only when it can take the
// lock exclusively (waiting for the others to finish), so the removal never detaches another
// process's bind mount.
class MountPoint {
 public:
  MountPoint() {
    for (int attempt = 0; attempt < 100 && !fd_.valid(); ++attempt) {
      bool created = false;
      UniqueFd fd(open(kLimitsFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
      if (!fd.valid() && errno == ENOENT) {
        fd.Reset(open(kLimitsFile, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
        if (!fd.valid() && errno == EEXIST) continue;
        created = fd.valid();
      }
      struct stat held, now;
      if (!fd.valid() || fstat(fd.get(), &held) != 0) {
        error_ = std::string("cannot open or create ") + kLimitsFile + ": " + std::strerror(errno);
        return;
      }
      if (!S_ISREG(held.st_mode)) {
        error_ = std::string(kLimitsFile) + " is not a regular file";
        return;
      }
      while (flock(fd.get(), LOCK_SH) != 0) {
        if (errno != EINTR) {
          error_ = std::string("cannot lock ") + kLimitsFile + ": " + std::strerror(errno);
          return;
        }
      }
      // Still the file at the path (not removed by its creator while we waited)?
      if (lstat(kLimitsFile, &now) == 0 && now.st_dev == held.st_dev && now.st_ino == held.st_ino) {
        fd_ = std::move(fd);
        created_ = created;
      }
    }
    if (!fd_.valid() && error_.empty()) {
      error_ = std::string(kLimitsFile) + " keeps being replaced; cannot hold it";
    }
  }
  ~MountPoint() {
    if (!created_) return;
    // Wait (bounded) for the others that found our file to let go of it, then remove it if
    // it is still ours and still empty; otherwise an empty file stays, which is harmless.
    const int64_t deadline = MonotonicNs() + 10'000'000'000;
    while (flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      if (MonotonicNs() > deadline) return;
      usleep(2'000);
    }
    struct stat held, now;
    if (fstat(fd_.get(), &held) == 0 && lstat(kLimitsFile, &now) == 0 &&
        now.st_dev == held.st_dev && now.st_ino == held.st_ino && now.st_size == 0) {
      unlink(kLimitsFile);
    }
  }
  MountPoint(const MountPoint&) = delete;
  MountPoint& operator=(const MountPoint&) = delete;

  const std::string& error() const { return error_; }

 private:
  UniqueFd fd_;  // holds the shared lock; closing it releases the lock
  bool created_ = false;
  std::string error_;
};

struct WorkerRun {
  int status = -1;  // exit status, 128+signal, or -1 when it did not finish in time
  std::string out;  // stdout and stderr together
};

// Runs sim_worker `steps` with exactly `env` as its environment, in a private mount
// namespace where `limits_file` is bound onto /overrideEnv.
WorkerRun RunWithLimitsFile(const std::string& limits_file, const std::vector<std::string>& steps,
                            const std::vector<std::string>& env) {
  // Everything the child needs is built before fork: after it, only system calls.
  const std::string worker = TestProgram("sim_worker");
  std::vector<char*> argv = {const_cast<char*>(worker.c_str())};
  for (const std::string& s : steps) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  WorkerRun run;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return run;
  UniqueFd read_end(out[0]);
  UniqueFd write_end(out[1]);
  pid_t pid = fork();
  if (pid < 0) return run;
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0) _exit(errno == EPERM ? kNoNamespace : kUnshareFailed);
    // Private first, so the bind below never propagates back to the host's namespace.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(kPrivateFailed);
    if (mount(limits_file.c_str(), kLimitsFile, nullptr, MS_BIND, nullptr) != 0) {
      _exit(kBindFailed);
    }
    if (dup2(write_end.get(), 1) < 0 || dup2(write_end.get(), 2) < 0) _exit(kExecFailed);
    execve(argv[0], argv.data(), envp.data());
    _exit(kExecFailed);
  }
  write_end.Reset();
  const int64_t deadline = MonotonicNs() + 30'000'000'000;
  for (;;) {
    int left_ms = int((deadline - MonotonicNs()) / 1'000'000);
    if (left_ms <= 0) break;
    pollfd p{read_end.get(), POLLIN, 0};
    int rc = poll(&p, 1, left_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) break;
    char buf[4096];
    ssize_t n = read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    run.out.append(buf, size_t(n));
  }
  // The output is closed; the process ends at once, unless it is stuck (then it is killed).
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && MonotonicNs() < deadline) {
    usleep(5'000);
  }
  if (done != pid) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return run;
  }
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

// The first line of `out` that starts with `prefix`, split into words; empty when none.
std::vector<std::string> LineWords(const std::string& out, const std::string& prefix) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    return words;
  }
  return {};
}

class LimitsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: binds a test file onto " << kLimitsFile
                   << " in a private mount namespace (unshare, mount)";
    }
    ASSERT_TRUE(dir_.ok());
    region_ = dir_.File("usage.cache");
    env_ = {std::string("LD_PRELOAD=") + HAMI_VGPU_LIBRARY,
            std::string("LD_LIBRARY_PATH=") + HAMI_SIM_LIBRARY_DIR,
            "HAMI_SIM_STATE=" + dir_.File("sim.state"), "HAMI_SIM_PROFILE=h100-80g:1"};
    // A sanitizer build's runtime options are the test harness's, not the workload's.
    for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"}) {
      if (const char* v = getenv(name)) env_.push_back(std::string(name) + "=" + v);
    }
  }

  // Writes `text` as the limits file and runs sim_worker `steps` against it.
  WorkerRun RunWith(const std::string& text, const std::vector<std::string>& steps) {
    std::string path = dir_.File("limits");
    {
      auto fd = OpenRegularFile(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
      EXPECT_TRUE(fd.ok());
      if (!fd.ok() || !WriteAll(fd->get(), text).ok()) return {};
    }
    MountPoint mount_point;
    if (!mount_point.error().empty()) {
      ADD_FAILURE() << mount_point.error();
      return {};
    }
    return RunWithLimitsFile(path, steps, env_);
  }

  // Fails the test with the reason when the child never became sim_worker; skips it when
  // this root may not make a mount namespace. Callers return when IsSkipped() or
  // HasFailure().
  void CheckStarted(const WorkerRun& run) {
    if (run.status == kNoNamespace) {
      GTEST_SKIP() << "this root may not make a mount namespace (unshare: EPERM; no "
                      "CAP_SYS_ADMIN)";
    }
    std::string why = SetupFailure(run.status);
    ASSERT_TRUE(why.empty()) << why << "\n" << run.out;
  }

  TempDir dir_{"hami-limits-file-test"};
  std::string region_;
  std::vector<std::string> env_;
};

TEST_F(LimitsFileTest, EmptyEnvironmentIsStillHeldToTheFilesLimit) {
  WorkerRun run =
      RunWith("CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_SHARED_CACHE=" + region_ +
                  "\nHAMI_LIMITS_FORMAT=1\n",
              {"context", "meminfo", "try-alloc", "2g"});
  CheckStarted(run);
  if (IsSkipped() || HasFailure()) return;
  EXPECT_EQ(run.status, 0) << run.out;
  std::vector<std::string> meminfo = LineWords(run.out, "meminfo ");
  ASSERT_EQ(meminfo.size(), 4u) << run.out;
  EXPECT_EQ(meminfo[2], std::to_string(kGiB)) << "total: " << run.out;
  EXPECT_EQ(meminfo[3], std::to_string(kGiB)) << "device total: " << run.out;
  EXPECT_THAT(LineWords(run.out, "try-alloc "),
              ::testing::ElementsAre("try-alloc", std::to_string(2 * kGiB), "2"))
      << "2 GiB past a 1 GiB limit must be CUDA_ERROR_OUT_OF_MEMORY (2)\n"
      << run.out;
  struct stat st;
  EXPECT_EQ(stat(region_.c_str(), &st), 0) << "the region named in the file was not made";
}

TEST_F(LimitsFileTest, WithoutALimitInTheFileTheWholeDeviceIsSeen) {
  // The same run with the limit left out: what held the process above was the file.
  WorkerRun run = RunWith("CUDA_DEVICE_MEMORY_SHARED_CACHE=" + region_ + "\nHAMI_LIMITS_FORMAT=1\n",
                          {"context", "meminfo", "try-alloc", "2g"});
  CheckStarted(run);
  if (IsSkipped() || HasFailure()) return;
  EXPECT_EQ(run.status, 0) << run.out;
  std::vector<std::string> meminfo = LineWords(run.out, "meminfo ");
  ASSERT_EQ(meminfo.size(), 4u) << run.out;
  EXPECT_GT(std::stoull(meminfo[2]), 64 * kGiB) << run.out;
  EXPECT_THAT(LineWords(run.out, "try-alloc "),
              ::testing::ElementsAre("try-alloc", std::to_string(2 * kGiB), "0"))
      << run.out;
}

TEST_F(LimitsFileTest, MalformedLineIsReportedWithItsNumberAndTheRestApplies) {
  WorkerRun run = RunWith(
      "CUDA_DEVICE_MEMORY_LIMIT=1g\n"
      "this is not a setting\n"
      "CUDA_DEVICE_MEMORY_SHARED_CACHE=" +
          region_ + "\nHAMI_LIMITS_FORMAT=1\n",
      {"context", "meminfo", "try-alloc", "2g"});
  CheckStarted(run);
  if (IsSkipped() || HasFailure()) return;
  EXPECT_EQ(run.status, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("/overrideEnv line 2 'this is not a setting': not KEY=VALUE; "
                                 "skipped"));
  std::vector<std::string> meminfo = LineWords(run.out, "meminfo ");
  ASSERT_EQ(meminfo.size(), 4u) << run.out;
  EXPECT_EQ(meminfo[2], std::to_string(kGiB)) << run.out;
  EXPECT_THAT(LineWords(run.out, "try-alloc "),
              ::testing::ElementsAre("try-alloc", std::to_string(2 * kGiB), "2"))
      << run.out;
  struct stat st;
  EXPECT_EQ(stat(region_.c_str(), &st), 0) << "the line after the bad one was not applied";
}

}  // namespace
}  // namespace hami::testing
