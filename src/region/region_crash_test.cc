// Crash, concurrency and bad-input tests of the shared region. The processes under test are
// region_worker (tests/programs/region_worker.cc): exec'd programs linked with the region's
// kill points, so HAMI_KILL_POINT=<name>[:<n>] SIGKILLs one at a named step.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/file.h"
#include "common/kill_point.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "region/region.h"
#include "support/subprocess.h"

namespace hami {
// Test parameters print as their names (found by argument-dependent lookup).
static void PrintTo(KillPointId id, std::ostream* os) { *os << KillPointName(id); }
}  // namespace hami

namespace hami::region {
namespace {

using ::hami::testing::Subprocess;
using ::hami::testing::TestProgram;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kLimit = 64 * kMiB;  // device 0; device 1 is unlimited
constexpr int kBurstWorkers = 128;
constexpr int kRaceWorkers = 8;
constexpr int kRaceThreads = 4;
constexpr int kRaceMs = 3000;
constexpr uint64_t kRaceMaxBytes = 8 * kMiB;
constexpr int kKilled = 128 + SIGKILL;
constexpr int64_t kNextLockerBoundNs = 1'000'000'000;
constexpr int kStuckMs = 20'000;  // an in-process call blocked this long is a deadlock

PolicySpec TwoDevices() {
  PolicySpec p;
  p.device_count = 2;
  p.memory_limit[0] = kLimit;
  return p;
}

// A wall-clock budget for a whole test: every wait takes what is left of it, so a deadlock
// fails the test instead of hanging it.
class Deadline {
 public:
  explicit Deadline(int64_t ms) : end_ns_(MonotonicNs() + ms * 1'000'000) {}
  int left_ms() const { return int(std::max<int64_t>(0, (end_ns_ - MonotonicNs()) / 1'000'000)); }
  bool passed() const { return MonotonicNs() >= end_ns_; }

 private:
  int64_t end_ns_;
};

// Ends the test binary, saying what was stuck, when an in-process call (one that may wait on
// a lock) has not returned within `ms`; a deadlock then fails instead of hanging.
class Watchdog {
 public:
  Watchdog(std::string what, int ms) : what_(std::move(what)) {
    thread_ = std::thread([this, ms] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return done_; })) {
        std::fprintf(stderr, "FATAL: %s still blocked after %d ms (deadlock?)\n", what_.c_str(),
                     ms);
        std::_Exit(1);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

std::string FileBytes(const std::string& path) {
  auto s = ReadFileToString(path, 64 << 20);
  return s.ok() ? *s : "<unreadable: " + s.error().message() + ">";
}

// Opens `path` in a child process, so an open that blocks fails the test instead of hanging
// it; returns "ok" or the error's message.
std::string OpenElsewhere(const std::string& path, Create create, Access access) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return "pipe failed";
  UniqueFd rd(p[0]), wr(p[1]);
  pid_t pid = fork();
  if (pid == 0) {
    PolicySpec stamp = TwoDevices();
    auto r = Region::Open(path, create == Create::kIfMissing ? &stamp : nullptr, create, nullptr,
                          access);
    (void)WriteAll(wr.get(), r.ok() ? std::string("ok") : r.error().message());
    _exit(0);
  }
  wr.Reset();
  std::string out;
  Deadline deadline(5000);
  for (;;) {
    pollfd pfd{rd.get(), POLLIN, 0};
    int left = deadline.left_ms();
    if (left == 0 || poll(&pfd, 1, left) == 0) {
      kill(pid, SIGKILL);
      out = "timed out: Open blocked";
      break;
    }
    char buf[512];
    ssize_t n = read(rd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  waitpid(pid, nullptr, 0);
  return out;
}

class RegionCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    path_ = tmp_.File("usage.cache");
  }

  std::unique_ptr<Region> MustOpen(const std::string& path) {
    PolicySpec p = TwoDevices();
    Watchdog watchdog("Region::Open " + path, kStuckMs);
    auto r = Region::Open(path, &p, Create::kIfMissing, nullptr);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
    return r.ok() ? std::move(r).value() : nullptr;
  }
  std::unique_ptr<Region> MustOpen() { return MustOpen(path_); }

  std::unique_ptr<Subprocess> Worker(const std::vector<std::string>& steps,
                                     const std::string& kill_point = "",
                                     const std::string& path = "") {
    std::vector<std::string> argv = {TestProgram("region_worker"), path.empty() ? path_ : path};
    argv.insert(argv.end(), steps.begin(), steps.end());
    // An empty value unsets the variable: no kill point leaks in from outside.
    return std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"HAMI_KILL_POINT", kill_point}});
  }

  // Runs a worker to its end; returns its exit status (128+signal when killed).
  int RunWorker(const std::vector<std::string>& steps, const std::string& kill_point = "",
                const std::string& path = "", std::string* output = nullptr) {
    auto w = Worker(steps, kill_point, path);
    std::string out = w->ReadAll(20'000);
    int status = w->Wait(20'000);
    if (output != nullptr) *output = out;
    return status;
  }

  TempDir tmp_{"hami-region-crash"};
  std::string dir_, path_;
};

// ---------------------------------------------------------------------------------------
// Registration burst

TEST_F(RegionCrashTest, ABurstOfRegistrationsGivesEveryProcessExactlyOneSlot) {
  Deadline deadline(60'000);
  auto r = MustOpen();
  ASSERT_NE(r, nullptr);
  int barrier[2];
  ASSERT_EQ(pipe2(barrier, O_CLOEXEC), 0);
  UniqueFd barrier_rd(barrier[0]), barrier_wr(barrier[1]);
  // Workers inherit the read end; the write end stays here alone, so closing it releases all.
  ASSERT_EQ(fcntl(barrier_rd.get(), F_SETFD, 0), 0);
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int i = 0; i < kBurstWorkers; ++i) {
    workers.push_back(Worker(
        {"wait-barrier", std::to_string(barrier_rd.get()), "register", "hold", "unregister"}));
  }
  barrier_rd.Reset();
  for (int i = 0; i < kBurstWorkers; ++i) {
    ASSERT_TRUE(workers[size_t(i)]->WaitForLine("ready", deadline.left_ms()))
        << "worker " << i << " did not start before the deadline";
  }
  barrier_wr.Reset();

  std::map<pid_t, int> reported;
  for (int i = 0; i < kBurstWorkers; ++i) {
    Subprocess& w = *workers[size_t(i)];
    auto line = w.WaitForLine("slot ", deadline.left_ms());
    ASSERT_TRUE(line) << "worker " << i << " (pid " << w.pid()
                      << ") did not register before the deadline (deadlock?)";
    reported[w.pid()] = std::atoi(line->c_str() + 5);
    ASSERT_TRUE(w.WaitForLine("holding", deadline.left_ms())) << "worker " << i;
  }

  std::map<pid_t, std::vector<int>> slots_of;
  std::set<int> indices;
  for (const SlotView& s : r->Slots()) {
    slots_of[s.pid].push_back(s.index);
    indices.insert(s.index);
    EXPECT_EQ(s.state, layout::SlotState::kLive) << "slot " << s.index;
    EXPECT_TRUE(s.alive) << "slot " << s.index;
  }
  EXPECT_EQ(slots_of.size(), size_t(kBurstWorkers));
  EXPECT_EQ(indices.size(), size_t(kBurstWorkers));
  for (const auto& [pid, slot] : reported) {
    EXPECT_EQ(slots_of[pid], std::vector<int>{slot}) << "pid " << pid;
  }

  for (auto& w : workers) w->CloseStdin();
  for (int i = 0; i < kBurstWorkers; ++i) {
    Subprocess& w = *workers[size_t(i)];
    EXPECT_TRUE(w.WaitForLine("unregistered", deadline.left_ms())) << "worker " << i;
    EXPECT_EQ(w.Wait(deadline.left_ms()), 0) << "worker " << i;
  }
  EXPECT_TRUE(r->Slots().empty());
  EXPECT_TRUE(r->Check().empty());
  EXPECT_FALSE(deadline.passed()) << "the burst took longer than its deadline";
}

// ---------------------------------------------------------------------------------------
// Kill injection

// What a test does before each run of the killed worker.
enum class Before {
  kNothing,
  kFreshPath,        // the killed worker must create the region
  kDeadHolder,       // a worker holding memory on both devices dies (unregistering nothing)
  kDeadMutexHolder,  // a worker dies holding device 0's mutex, with 2 MiB counted there
};

struct KillCase {
  KillPointId point;
  Before before;
  std::vector<std::string> steps;  // the killed worker's
  std::vector<int> nth;            // one run each, with HAMI_KILL_POINT=<point>:<n>
};

const std::vector<std::string> kRegister = {"register"};
const std::vector<std::string> kReserveLoop = {"register", "reserve-loop", "0", "1m", "8"};
const std::vector<std::string> kReleaseLoop = {
    "register", "reserve-loop", "0", "1m", "4", "release-loop", "0", "1m", "4"};
const std::vector<std::string> kTwoDevices = {"register", "reserve", "0",  "1m",
                                              "reserve",  "1",       "1m", "unregister"};

// One case per region point of common/kill_points.def (KillPointCoverage checks it).
const KillCase kKillCases[] = {
    {KillPointId::kRegionCreateSized, Before::kFreshPath, {"open"}, {1, 1, 1}},
    {KillPointId::kRegionCreateFilled, Before::kFreshPath, {"open"}, {1, 1, 1}},
    {KillPointId::kRegionRegisterLocked, Before::kNothing, kRegister, {1, 1, 1}},
    {KillPointId::kRegionRegisterClaimed, Before::kNothing, kRegister, {1, 1, 1}},
    {KillPointId::kRegionRegisterFilled, Before::kNothing, kRegister, {1, 1, 1}},
    {KillPointId::kRegionReserveBegun, Before::kNothing, kReserveLoop, {1, 4, 8}},
    {KillPointId::kRegionReserveSlot, Before::kNothing, kReserveLoop, {1, 4, 8}},
    {KillPointId::kRegionReleaseBegun, Before::kNothing, kReleaseLoop, {1, 2, 4}},
    {KillPointId::kRegionReleaseSlot, Before::kNothing, kReleaseLoop, {1, 2, 4}},
    {KillPointId::kRegionUnregisterDevice, Before::kNothing, kTwoDevices, {1, 2, 1}},
    {KillPointId::kRegionUnregisterFreed, Before::kNothing, kTwoDevices, {1, 1, 1}},
    {KillPointId::kRegionReclaimDevice, Before::kDeadHolder, {"sweep"}, {1, 2, 1}},
    {KillPointId::kRegionRepairBegun,
     Before::kDeadMutexHolder,
     {"register", "reserve", "0", "1m"},
     {1, 1, 1}},
};

// The region's points, in the list's order: the parameters of the kill test.
std::vector<KillPointId> RegionKillPoints() {
  std::vector<KillPointId> out;
  for (const KillPointInfo& p : KillPoints()) {
    if (p.owner == KillPointOwner::kRegion) out.push_back(p.id);
  }
  return out;
}

const KillCase* CaseFor(KillPointId id) {
  for (const KillCase& c : kKillCases) {
    if (c.point == id) return &c;
  }
  return nullptr;
}

class KillPointTest : public RegionCrashTest, public ::testing::WithParamInterface<KillPointId> {
 protected:
  // The first lock of each device after a death (a Reserve, repairing whatever the dead
  // left) proceeds within the bound: a liveness bound, not a speed test.
  void ExpectNextLockerProceeds(Region& r) {
    for (int d = 0; d < 2; ++d) {
      Watchdog watchdog("Reserve on device " + std::to_string(d) + " after a kill", kStuckMs);
      int64_t start = MonotonicNs();
      Admission a = r.Reserve(d, kMiB, UsageKind::kData);
      int64_t took_ns = MonotonicNs() - start;
      EXPECT_EQ(a, Admission::kOk) << "device " << d;
      EXPECT_LT(took_ns, kNextLockerBoundNs) << "device " << d;
      if (a == Admission::kOk) r.Release(d, kMiB, UsageKind::kData);
    }
  }

  // Once the dead are swept: the region validates for a new opener, the totals are exactly
  // the slots' sums, and nothing is counted (no live process holds memory).
  void ExpectSettled(Region& r, const std::string& path) {
    EXPECT_GE(r.SweepDead(), 0);
    for (const Inconsistency& i : r.Check()) ADD_FAILURE() << i.message;
    for (int d = 0; d < 2; ++d) {
      DeviceSnapshot s = r.Snapshot(d);
      EXPECT_EQ(s.used_bytes, s.slot_sum_bytes) << "device " << d;
      EXPECT_EQ(s.used_bytes, 0u) << "device " << d;
    }
    EXPECT_LE(r.Snapshot(0).peak_bytes, kLimit);
    std::vector<SlotView> slots = r.Slots();
    ASSERT_EQ(slots.size(), 1u) << "only the test's own slot is left";
    EXPECT_EQ(slots[0].index, r.slot());
    auto reopened = Region::Open(path, nullptr, Create::kNever, nullptr, Access::kReadOnly);
    ASSERT_TRUE(reopened.ok()) << reopened.error().message();
    EXPECT_TRUE((*reopened)->Check().empty());
  }
};

TEST_P(KillPointTest, ARegionSurvivesAProcessKilledThere) {
  const KillCase* found = CaseFor(GetParam());
  ASSERT_NE(found, nullptr) << "kill point " << KillPointName(GetParam())
                            << " (common/kill_points.def) has no case in kKillCases";
  const KillCase& c = *found;
  std::unique_ptr<Region> r;
  if (c.before != Before::kFreshPath) {
    r = MustOpen();
    ASSERT_NE(r, nullptr);
    ASSERT_TRUE(r->Register().ok());
  }
  for (size_t run = 0; run < c.nth.size(); ++run) {
    const std::string kill = std::string(KillPointName(c.point)) + ":" + std::to_string(c.nth[run]);
    SCOPED_TRACE("HAMI_KILL_POINT=" + kill);
    std::string path = path_;
    if (c.before == Before::kFreshPath) path = dir_ + "/fresh" + std::to_string(run);
    if (c.before == Before::kDeadHolder) {
      ASSERT_EQ(RunWorker({"register", "reserve", "0", "2m", "reserve", "1", "2m", "crash"}),
                kKilled);
    }
    if (c.before == Before::kDeadMutexHolder) {
      ASSERT_EQ(RunWorker({"register", "reserve", "0", "2m", "reserve", "0", "1m"},
                          std::string(KillPointName(KillPointId::kRegionReserveBegun)) + ":2"),
                kKilled);
    }
    std::string output;
    ASSERT_EQ(RunWorker(c.steps, kill, path, &output), kKilled)
        << "the worker did not die at the kill point; it said:\n"
        << output;

    if (c.before == Before::kFreshPath) {
      // A reader cannot use what the creator left, and must not change it.
      std::string before = FileBytes(path);
      std::string why = OpenElsewhere(path, Create::kNever, Access::kReadOnly);
      EXPECT_THAT(why, HasSubstr(path));
      EXPECT_EQ(FileBytes(path), before);
      // The next opener makes the region again.
      r = MustOpen(path);
      ASSERT_NE(r, nullptr);
      ASSERT_TRUE(r->Register().ok());
    }
    ExpectNextLockerProceeds(*r);
    ExpectSettled(*r, path);
    if (c.before == Before::kFreshPath) r.reset();
  }
}

std::string KillCaseName(const ::testing::TestParamInfo<KillPointId>& info) {
  std::string name = KillPointName(info.param);
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(EveryKillPoint, KillPointTest, ::testing::ValuesIn(RegionKillPoints()),
                         KillCaseName);

TEST(KillPointCoverage, EveryCaseIsForARegionPointOfTheList) {
  EXPECT_FALSE(RegionKillPoints().empty());
  std::set<KillPointId> seen;
  for (const KillCase& c : kKillCases) {
    EXPECT_EQ(KillPointInfoOf(c.point).owner, KillPointOwner::kRegion) << KillPointName(c.point);
    EXPECT_TRUE(seen.insert(c.point).second) << "two cases for " << KillPointName(c.point);
    EXPECT_FALSE(c.nth.empty()) << KillPointName(c.point);
  }
}

// ---------------------------------------------------------------------------------------
// Admission race

TEST_F(RegionCrashTest, RacingReservationsNeverTakeTheTotalPastTheLimit) {
  Deadline deadline(60'000);
  auto r = MustOpen();
  ASSERT_NE(r, nullptr);
  int barrier[2];
  ASSERT_EQ(pipe2(barrier, O_CLOEXEC), 0);
  UniqueFd barrier_rd(barrier[0]), barrier_wr(barrier[1]);
  ASSERT_EQ(fcntl(barrier_rd.get(), F_SETFD, 0), 0);
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int i = 0; i < kRaceWorkers; ++i) {
    workers.push_back(Worker({"register", "wait-barrier", std::to_string(barrier_rd.get()), "race",
                              std::to_string(kRaceThreads), std::to_string(kRaceMs), "0",
                              std::to_string(kRaceMaxBytes)}));
  }
  barrier_rd.Reset();
  for (auto& w : workers) ASSERT_TRUE(w->WaitForLine("ready", deadline.left_ms()));
  barrier_wr.Reset();

  uint64_t snapshots = 0, over_limit = 0, torn = 0, max_used = 0;
  for (bool running = true; running;) {
    for (int k = 0; k < 64; ++k) {
      DeviceSnapshot s = r->Snapshot(0);
      ++snapshots;
      max_used = std::max(max_used, s.used_bytes);
      if (s.used_bytes > kLimit) ++over_limit;
      if (s.used_bytes != s.slot_sum_bytes) ++torn;
    }
    running = false;
    for (auto& w : workers) running = running || w->Wait(0) == -1;
    ASSERT_FALSE(deadline.passed()) << "the workers did not finish before the deadline";
  }

  uint64_t ok = 0, refused = 0;
  for (auto& w : workers) {
    std::string out = w->ReadAll(deadline.left_ms());
    unsigned long long k = 0, n = 0;
    const char* line = std::strstr(out.c_str(), "race ok=");
    ASSERT_NE(line, nullptr) << out;
    ASSERT_EQ(std::sscanf(line, "race ok=%llu refused=%llu", &k, &n), 2) << out;
    ok += k;
    refused += n;
    EXPECT_EQ(w->Wait(deadline.left_ms()), 0) << out;
  }
  EXPECT_EQ(over_limit, 0u) << "the observer saw the total above the limit, at most " << max_used;
  EXPECT_LE(max_used, kLimit);
  EXPECT_EQ(torn, 0u) << "snapshots whose slots did not add up to the total";
  EXPECT_GT(snapshots, 0u);
  EXPECT_GT(ok, 0u);
  EXPECT_GT(refused, 0u) << "the race never reached the limit";
  DeviceSnapshot end = r->Snapshot(0);
  EXPECT_EQ(end.used_bytes, 0u);
  EXPECT_EQ(end.slot_sum_bytes, 0u);
  EXPECT_LE(end.peak_bytes, kLimit);
  EXPECT_TRUE(r->Slots().empty());
  EXPECT_TRUE(r->Check().empty());
}

// ---------------------------------------------------------------------------------------
// Bad files

struct BadFile {
  std::string what;
  std::function<void(const std::string& path)> make;
  ::testing::Matcher<std::string> says;
};

template <typename T>
void Poke(const std::string& path, size_t offset, T value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(pwrite(fd.get(), &value, sizeof(value), off_t(offset)), ssize_t(sizeof(value)));
}

// What a file looks like from outside: kind, size, mode and, for regular files, every byte.
std::string Describe(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return "missing";
  std::string d = std::to_string(st.st_mode) + " " + std::to_string(st.st_size);
  if (S_ISREG(st.st_mode)) d += " " + FileBytes(path);
  return d;
}

TEST_F(RegionCrashTest, BadFilesAreRefusedNamingTheFileAndTheMismatchAndLeftAlone) {
  auto valid = [this](const std::string& path) { ASSERT_NE(MustOpen(path), nullptr); };
  const std::vector<BadFile> cases = {
      {"truncated",
       [&](const std::string& p) {
         valid(p);
         ASSERT_EQ(truncate(p.c_str(), off_t(sizeof(layout::File) / 2)), 0);
       },
       HasSubstr("bytes but its header says " + std::to_string(sizeof(layout::File)))},
      {"shorter than a header",
       [&](const std::string& p) {
         valid(p);
         ASSERT_EQ(truncate(p.c_str(), 100), 0);
       },
       HasSubstr("smaller than a header")},
      {"wrong magic",
       [&](const std::string& p) {
         valid(p);
         Poke(p, 0, std::array<char, 8>{'N', 'O', 'T', 'H', 'A', 'M', 'I', '!'});
       },
       HasSubstr("bad magic")},
      {"wrong major version",
       [&](const std::string& p) {
         valid(p);
         Poke(p, offsetof(layout::Header, major), uint16_t(layout::kMajor + 1));
       },
       HasSubstr("layout version " + std::to_string(layout::kMajor + 1) + ".")},
      {"fingerprint mismatch",
       [&](const std::string& p) {
         valid(p);
         Poke(p, offsetof(layout::Header, fingerprint), layout::Fingerprint() ^ 1);
       },
       HasSubstr("layout fingerprint")},
      {"wrong section table",
       [&](const std::string& p) {
         valid(p);
         Poke(p, offsetof(layout::Header, max_slots), uint32_t(layout::kMaxSlots / 2));
       },
       HasSubstr("section table")},
      {"symlink",
       [&](const std::string& p) {
         valid(p + ".target");
         ASSERT_EQ(symlink((p + ".target").c_str(), p.c_str()), 0);
       },
       HasSubstr("symbolic link")},
      {"directory", [](const std::string& p) { ASSERT_EQ(mkdir(p.c_str(), 0755), 0); },
       AnyOf(HasSubstr("Is a directory"), HasSubstr("not a regular file"))},
      {"fifo", [](const std::string& p) { ASSERT_EQ(mkfifo(p.c_str(), 0644), 0); },
       HasSubstr("not a regular file")},
  };
  int n = 0;
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    std::string path = dir_ + "/bad" + std::to_string(n++);
    c.make(path);
    if (::testing::Test::HasFatalFailure()) return;
    const std::string before = Describe(path);
    const std::string target_before = Describe(path + ".target");
    for (Create create : {Create::kIfMissing, Create::kNever}) {
      for (Access access : {Access::kReadWrite, Access::kReadOnly}) {
        if (create == Create::kIfMissing && access == Access::kReadOnly) continue;
        std::string why = OpenElsewhere(path, create, access);
        EXPECT_THAT(why, HasSubstr(path)) << "create " << int(create) << " access " << int(access);
        EXPECT_THAT(why, c.says) << "create " << int(create) << " access " << int(access);
        EXPECT_EQ(Describe(path), before) << "the refused file was changed";
        EXPECT_EQ(Describe(path + ".target"), target_before);
      }
    }
  }
}

TEST_F(RegionCrashTest, AnotherMinorVersionOpens) {
  ASSERT_NE(MustOpen(), nullptr);
  Poke(path_, offsetof(layout::Header, minor), uint16_t(layout::kMinor + 3));
  EXPECT_EQ(OpenElsewhere(path_, Create::kNever, Access::kReadWrite), "ok");
  EXPECT_EQ(OpenElsewhere(path_, Create::kIfMissing, Access::kReadWrite), "ok");
}

// ---------------------------------------------------------------------------------------
// Fork and exec

TEST_F(RegionCrashTest, AForkChildThatReopensGetsItsOwnSlotAndLeavesItsParentsAlone) {
  auto r = MustOpen();
  ASSERT_NE(r, nullptr);
  auto w = Worker({"register", "reserve", "0", "1m", "fork-child", "0", "2m", "hold", "wait-child",
                   "unregister"});
  auto parent_line = w->WaitForLine("slot ");
  ASSERT_TRUE(parent_line);
  int parent_slot = std::atoi(parent_line->c_str() + 5);
  auto child_line = w->WaitForLine("child ");
  ASSERT_TRUE(child_line) << "the child could not reopen and register";
  int child_pid = 0, child_slot = -1;
  ASSERT_EQ(std::sscanf(child_line->c_str(), "child %d %d", &child_pid, &child_slot), 2);
  ASSERT_TRUE(w->WaitForLine("holding"));

  EXPECT_NE(child_slot, parent_slot);
  std::map<int, SlotView> by_index;
  for (const SlotView& s : r->Slots()) by_index.emplace(s.index, s);
  ASSERT_EQ(by_index.size(), 2u);
  ASSERT_TRUE(by_index.count(parent_slot));
  ASSERT_TRUE(by_index.count(child_slot));
  EXPECT_EQ(by_index.at(parent_slot).pid, w->pid());
  EXPECT_TRUE(by_index.at(parent_slot).alive);
  EXPECT_EQ(by_index.at(parent_slot).used_bytes[0], kMiB);
  EXPECT_EQ(by_index.at(child_slot).pid, child_pid);
  EXPECT_TRUE(by_index.at(child_slot).alive);
  EXPECT_EQ(by_index.at(child_slot).used_bytes[0], 2 * kMiB);
  EXPECT_EQ(r->Snapshot(0).used_bytes, 3 * kMiB);

  w->CloseStdin();
  EXPECT_TRUE(w->WaitForLine("child-exit 0"));
  EXPECT_TRUE(w->WaitForLine("unregistered"));
  EXPECT_EQ(w->Wait(), 0);
  EXPECT_TRUE(r->Slots().empty());
  EXPECT_EQ(r->Snapshot(0).used_bytes, 0u);
}

TEST_F(RegionCrashTest, AForkChildExitingWithoutReopeningLeavesItsParentsSlotAlone) {
  auto r = MustOpen();
  ASSERT_NE(r, nullptr);
  auto w = Worker({"register", "reserve", "0", "1m", "fork-exit", "hold"});
  auto line = w->WaitForLine("slot ");
  ASSERT_TRUE(line);
  int slot = std::atoi(line->c_str() + 5);
  ASSERT_TRUE(w->WaitForLine("child-exit 0"));
  ASSERT_TRUE(w->WaitForLine("holding"));

  std::vector<SlotView> slots = r->Slots();
  ASSERT_EQ(slots.size(), 1u) << "the child's exit freed its parent's slot";
  EXPECT_EQ(slots[0].index, slot);
  EXPECT_EQ(slots[0].pid, w->pid());
  EXPECT_TRUE(slots[0].alive) << "the child's exit released its parent's slot lock";
  EXPECT_EQ(slots[0].used_bytes[0], kMiB);
  EXPECT_EQ(r->Snapshot(0).used_bytes, kMiB);
  EXPECT_EQ(r->SweepDead(), 0);

  w->CloseStdin();
  EXPECT_EQ(w->Wait(), 0);
  EXPECT_TRUE(r->Slots().empty());
  EXPECT_EQ(r->Snapshot(0).used_bytes, 0u);
}

TEST_F(RegionCrashTest, AProcessThatExecsStartsAfreshAndItsOldSlotIsReclaimed) {
  auto r = MustOpen();
  ASSERT_NE(r, nullptr);
  auto w =
      Worker({"register", "reserve", "0", "1m", "exec", "register", "reserve", "0", "2m", "hold"});
  auto before = w->WaitForLine("slot ");
  ASSERT_TRUE(before);
  int old_slot = std::atoi(before->c_str() + 5);
  ASSERT_TRUE(w->WaitForLine("exec"));
  auto after = w->WaitForLine("slot ");
  ASSERT_TRUE(after) << "the new image did not register";
  int new_slot = std::atoi(after->c_str() + 5);
  ASSERT_TRUE(w->WaitForLine("reserve ok"));
  ASSERT_TRUE(w->WaitForLine("holding"));

  // The exec closed the region's descriptor, and with it the old slot's lock.
  for (const SlotView& s : r->Slots()) {
    if (s.index != new_slot) {
      EXPECT_EQ(s.index, old_slot);
      EXPECT_FALSE(s.alive) << "slot " << s.index;
    }
  }
  r->SweepDead();
  std::vector<SlotView> slots = r->Slots();
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].index, new_slot);
  EXPECT_EQ(slots[0].pid, w->pid());
  EXPECT_TRUE(slots[0].alive);
  EXPECT_EQ(slots[0].used_bytes[0], 2 * kMiB);
  DeviceSnapshot s = r->Snapshot(0);
  EXPECT_EQ(s.used_bytes, 2 * kMiB);
  EXPECT_EQ(s.slot_sum_bytes, s.used_bytes);

  w->CloseStdin();
  EXPECT_EQ(w->Wait(), 0);
  EXPECT_TRUE(r->Slots().empty());
  EXPECT_EQ(r->Snapshot(0).used_bytes, 0u);
}

}  // namespace
}  // namespace hami::region
