// A process that starts with an empty environment — as `env -i`, an SSH login or `su -`
// give — is still held to the container's limits: libvgpu.so reads them from the limits
// file at /overrideEnv, a path compiled into the library.
//
// Each test runs sim_worker with nothing in its environment but LD_PRELOAD, LD_LIBRARY_PATH
// and the simulator's own HAMI_SIM_* variables, chrooted into a private root: a directory
// with the host's top-level entries bound into it (so every path still resolves) and the
// test's limits file at /overrideEnv, in a mount namespace of the child's own. The host's
// /overrideEnv is never touched. As root the child makes the mount namespace directly;
// otherwise it first makes a user namespace (it is root there, over its own mounts), where
// the kernel allows that; where neither is allowed the tests skip, saying why.
#include "limits/limits_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/file.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "region/region.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;
constexpr char kLimitsFile[] = "/overrideEnv";  // vgpu::kLimitsFilePath

// Exit statuses of the child before it becomes sim_worker.
constexpr int kNoNamespace = 120;  // the kernel refused the namespaces (reason on stdout)
constexpr int kUnshareFailed = 121;
constexpr int kPrivateFailed = 122;
constexpr int kBindFailed = 123;
constexpr int kIdMapFailed = 124;
constexpr int kChrootFailed = 125;
constexpr int kExecFailed = 127;

std::string SetupFailure(int status) {
  switch (status) {
    case kUnshareFailed:
      return "unshare failed";
    case kPrivateFailed:
      return "making / recursively private failed";
    case kBindFailed:
      return "bind-mounting a top-level entry into the private root failed";
    case kIdMapFailed:
      return "writing the user namespace's uid_map or gid_map failed";
    case kChrootFailed:
      return "chroot into the private root failed";
    case kExecFailed:
      return "executing sim_worker failed";
    default:
      return "";
  }
}

// A root for the child: `dir` holds a mount point for every entry of the host's /, the same
// symbolic links, and the limits file at overrideEnv. Made by the test's user, before fork.
struct PrivateRoot {
  std::string dir;
  std::vector<std::string> binds;  // host paths ("/usr"), each bound onto dir + path
  std::string error;               // why it could not be made
};

PrivateRoot MakePrivateRoot(const std::string& dir, const std::string& limits_text) {
  PrivateRoot root;
  root.dir = dir;
  auto fail = [&root](const std::string& what) {
    root.error = what + ": " + std::strerror(errno);
    return root;
  };
  if (mkdir(dir.c_str(), 0755) != 0) return fail("mkdir " + dir);
  DIR* top = opendir("/");
  if (top == nullptr) return fail("opendir /");
  std::vector<std::string> names;
  while (const dirent* e = readdir(top)) names.emplace_back(e->d_name);
  closedir(top);
  for (const std::string& name : names) {
    if (name == "." || name == ".." || "/" + name == kLimitsFile) continue;
    const std::string host = "/" + name, here = dir + host;
    struct stat st;
    if (lstat(host.c_str(), &st) != 0) continue;  // gone meanwhile
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = readlink(host.c_str(), target, sizeof(target) - 1);
      if (n < 0) return fail("readlink " + host);
      target[n] = '\0';
      if (symlink(target, here.c_str()) != 0) return fail("symlink " + here);
    } else if (S_ISDIR(st.st_mode)) {
      if (mkdir(here.c_str(), 0755) != 0) return fail("mkdir " + here);
      root.binds.push_back(host);
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd f(open(here.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
      if (!f.valid()) return fail("create " + here);
      root.binds.push_back(host);
    }  // sockets, FIFOs and devices at the top level are left out
  }
  auto fd = OpenRegularFile(dir + kLimitsFile, O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (!fd.ok()) {
    root.error = fd.error().message();
  } else if (auto w = WriteAll(fd->get(), limits_text); !w.ok()) {
    root.error = w.error().message();
  }
  return root;
}

struct WorkerRun {
  int status = -1;  // exit status, 128+signal, or -1 when it did not finish in time
  std::string out;  // stdout and stderr together
};

// In the child, before exec: says `what` failed with errno on the output, then exits.
[[noreturn]] void ChildFail(int status, const char* what) {
  char line[512];
  const int n = std::snprintf(line, sizeof(line), "setup: %s: %s\n", what, std::strerror(errno));
  if (n > 0) (void)!write(1, line, std::min(size_t(n), sizeof(line) - 1));
  _exit(status);
}

// In the child: writes `text` to the file at `path` (a /proc/self map).
bool WriteSmall(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = write(fd, text, std::strlen(text));
  close(fd);
  return n == ssize_t(std::strlen(text));
}

// Runs sim_worker `steps` with exactly `env` as its environment, chrooted into `root` in a
// mount namespace of its own (and a user namespace of its own when not root).
WorkerRun RunInPrivateRoot(const PrivateRoot& root, const std::vector<std::string>& steps,
                           const std::vector<std::string>& env) {
  // Everything the child needs is built before fork: after it, only system calls.
  const std::string worker = TestProgram("sim_worker");
  std::vector<char*> argv = {const_cast<char*>(worker.c_str())};
  for (const std::string& s : steps) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<std::string> targets;
  for (const std::string& b : root.binds) targets.push_back(root.dir + b);
  const bool as_root = geteuid() == 0;
  char uid_map[64], gid_map[64];
  std::snprintf(uid_map, sizeof(uid_map), "0 %u 1\n", unsigned(geteuid()));
  std::snprintf(gid_map, sizeof(gid_map), "0 %u 1\n", unsigned(getegid()));

  WorkerRun run;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return run;
  UniqueFd read_end(out[0]);
  UniqueFd write_end(out[1]);
  pid_t pid = fork();
  if (pid < 0) return run;
  if (pid == 0) {
    if (dup2(write_end.get(), 1) < 0 || dup2(write_end.get(), 2) < 0) _exit(kExecFailed);
    if (unshare(as_root ? CLONE_NEWNS : CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      const bool refused = errno == EPERM || errno == EINVAL || errno == ENOSPC;
      ChildFail(refused ? kNoNamespace : kUnshareFailed,
                as_root ? "unshare(CLONE_NEWNS)" : "unshare(CLONE_NEWUSER | CLONE_NEWNS)");
    }
    if (!as_root && (!WriteSmall("/proc/self/setgroups", "deny") ||
                     !WriteSmall("/proc/self/uid_map", uid_map) ||
                     !WriteSmall("/proc/self/gid_map", gid_map))) {
      ChildFail(kIdMapFailed, "mapping the test's user to root in its user namespace");
    }
    // Private first, so that no mount below propagates back to the host's namespace.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      ChildFail(kPrivateFailed, "mount --make-rprivate /");
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      if (mount(root.binds[i].c_str(), targets[i].c_str(), nullptr, MS_BIND | MS_REC, nullptr) !=
          0) {
        ChildFail(kBindFailed, root.binds[i].c_str());
      }
    }
    if (chroot(root.dir.c_str()) != 0 || chdir("/") != 0) ChildFail(kChrootFailed, "chroot");
    execve(argv[0], argv.data(), envp.data());
    ChildFail(kExecFailed, argv[0]);
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
  // The output is closed, so the process has ended or is ending; one that is stuck is killed.
  const int left_ms = int(std::max<int64_t>(0, (deadline - MonotonicNs()) / 1'000'000));
  const bool exited = WaitForExit(pid, left_ms);
  int status = 0;
  if (!exited) kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!exited) return run;
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

  // Puts `text` at /overrideEnv of a private root and runs sim_worker `steps` there.
  WorkerRun RunWith(const std::string& text, const std::vector<std::string>& steps) {
    PrivateRoot root = MakePrivateRoot(dir_.File("root"), text);
    if (!root.error.empty()) {
      ADD_FAILURE() << "cannot make the private root: " << root.error;
      return {};
    }
    return RunInPrivateRoot(root, steps, env_);
  }

  // Fails the test with the reason when the child never became sim_worker; skips it when the
  // kernel refuses the namespaces. Callers return when IsSkipped() or HasFailure().
  void CheckStarted(const WorkerRun& run) {
    if (run.status == kNoNamespace) {
      GTEST_SKIP() << "the kernel refuses "
                   << (geteuid() == 0 ? "a mount namespace to this root (no CAP_SYS_ADMIN)"
                                      : "an unprivileged user namespace (user.max_user_"
                                        "namespaces, a sysctl such as kernel.unprivileged_"
                                        "userns_clone, or a seccomp filter)")
                   << ", which the private /overrideEnv needs: " << run.out;
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

// A running process follows the root-owned limits file when the node rewrites it in place (a
// resize), and not a raise written into the region alone (what a tenant can do): the worker
// starts under `initial`, tries `bytes`, waits while `raise_region` raises the region alone,
// tries again, waits while the file is rewritten with `after`, then tries until it is granted.
class LimitsFileFollowTest : public LimitsFileTest {
 protected:
  // Returns the worker's three outcomes ("try-alloc N E", "until-alloc N E" lines).
  std::vector<std::string> RaiseRegionThenFile(
      const std::string& initial, const std::function<void(region::Region&)>& raise_region,
      const std::vector<limits::Entry>& after, const std::string& bytes) {
    const std::string ready1 = dir_.File("ready1"), go1 = dir_.File("go1");
    const std::string ready2 = dir_.File("ready2"), go2 = dir_.File("go2");
    std::atomic<bool> ended{false};
    std::thread worker([&] {
      run_ = RunWith(initial,
                     {"context", "try-alloc", bytes, "touch", ready1, "wait-path", go1, "try-alloc",
                      bytes, "touch", ready2, "wait-path", go2, "until-alloc", bytes, "30000"});
      ended = true;
    });
    // Waits for the worker's sign; false when it ended first (its output says why).
    auto wait_for = [&](const std::string& path) {
      const int64_t deadline = MonotonicNs() + 60'000'000'000;
      while (access(path.c_str(), F_OK) != 0) {
        if (MonotonicNs() >= deadline || ended) return false;
        SleepForNs(1'000'000);
      }
      return true;
    };
    auto go = [](const std::string& path) {
      UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
      EXPECT_TRUE(fd.valid()) << path << ": " << std::strerror(errno);
    };
    if (wait_for(ready1)) {
      auto reg = region::Region::Open(region_, nullptr, region::Create::kNever, nullptr);
      EXPECT_TRUE(reg.ok()) << reg.error().message();
      if (reg.ok()) raise_region(**reg);
      go(go1);
      if (wait_for(ready2)) {
        Status s = limits::UpdateLimitsFileInPlace(dir_.File("root") + kLimitsFile, after);
        EXPECT_TRUE(s.ok()) << s.error().message();
      }
      go(go2);
    }
    worker.join();
    std::vector<std::string> tries;
    std::istringstream lines(run_.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("try-alloc ", 0) == 0 || line.rfind("until-alloc ", 0) == 0) {
        tries.push_back(line);
      }
    }
    return tries;
  }

  WorkerRun run_;
};

TEST_F(LimitsFileFollowTest, ARunningProcessFollowsTheFileAndNotARaiseInTheRegionAlone) {
  const std::string base = "CUDA_DEVICE_MEMORY_SHARED_CACHE=" + region_ + "\n";
  const std::vector<std::string> tries = RaiseRegionThenFile(
      "CUDA_DEVICE_MEMORY_LIMIT=1g\n" + base + "HAMI_LIMITS_FORMAT=1\n",
      [](region::Region& r) { EXPECT_TRUE(r.SetMemoryLimit(0, 4 * kGiB).ok()); },
      {{"CUDA_DEVICE_MEMORY_LIMIT", "3g"}, {"CUDA_DEVICE_MEMORY_SHARED_CACHE", region_}}, "2g");
  CheckStarted(run_);
  if (IsSkipped() || HasFailure()) return;
  EXPECT_EQ(run_.status, 0) << run_.out;
  const std::string two = std::to_string(2 * kGiB);
  EXPECT_THAT(tries, ::testing::ElementsAre("try-alloc " + two + " 2", "try-alloc " + two + " 2",
                                            "until-alloc " + two + " 0"))
      << "2 GiB: refused under the file's 1 GiB, still refused with the region alone raised to "
         "4 GiB, granted once the file says 3 GiB\n"
      << run_.out;
}

// The host budget of an oversubscribed container follows the file the same way: 2 GiB past a
// 1 GiB device budget is refused under a 256 MiB host budget, still refused with the region's
// alone raised, and served from host memory once the file says 4 GiB.
TEST_F(LimitsFileFollowTest, TheHostBudgetFollowsTheFileAndNotARaiseInTheRegionAlone) {
  const std::string base = "CUDA_DEVICE_MEMORY_SHARED_CACHE=" + region_ + "\n";
  const std::vector<std::string> tries = RaiseRegionThenFile(
      "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_OVERSUBSCRIBE=true\nCUDA_OVERSUBSCRIBE_HOST_LIMIT=256m\n" +
          base,
      [](region::Region& r) { EXPECT_TRUE(r.SetHostLimit(4 * kGiB).ok()); },
      {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"},
       {"CUDA_OVERSUBSCRIBE", "true"},
       {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "4g"},
       {"CUDA_DEVICE_MEMORY_SHARED_CACHE", region_}},
      "2g");
  CheckStarted(run_);
  if (IsSkipped() || HasFailure()) return;
  EXPECT_EQ(run_.status, 0) << run_.out;
  const std::string two = std::to_string(2 * kGiB);
  EXPECT_THAT(tries, ::testing::ElementsAre("try-alloc " + two + " 2", "try-alloc " + two + " 2",
                                            "until-alloc " + two + " 0"))
      << run_.out;
}

}  // namespace
}  // namespace hami::testing
