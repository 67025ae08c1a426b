// The compute (SM) limit on the simulated GPU (its execution model turns launches into device
// time and NVML samples), as behaviour that does not depend on how closely or how quickly the
// share is held: a limited container is paced and its controller measures it, an unlimited
// one (no limit, 0, 100, policy disable) is not charged at all, every launch path is charged
// its waves into the one budget of the container, a limit or switch changed in the region
// reaches the limiter, a paused container and a suspended process sleep on their region word
// until released, and a process without a host PID runs the limiter open loop.
//
// How close and how soon (each target within 5 points, containers sharing a device, limit
// changes within a second, no launch and no CPU while paused, prompt resumption, open-loop
// accuracy, the policies' figures) is measured by `hami bench sm` (bench/sm_benchmark.cc)
// against its goals: wall-clock accuracy is not a test's to assert.
//
// Every wait is on an event (a worker's line, its exit) or, for state another process keeps in
// shared memory without announcing it (the limiter's fields, the kernel's view of a blocked
// thread), a bounded poll of that state; the bound only ends a test that fails.
#include <cuda.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/temp_dir.h"
#include "region/region.h"
#include "sim/state.h"
#include "support/subprocess.h"
#include "vgpu_fixture.h"

namespace hami::testing {
namespace {

using region::LimiterMode;

// Bounds the polls: far past anything a working limiter needs, even on a loaded machine.
constexpr int kPollMs = 30'000;
// A worker the test ends itself launches "forever" (it is killed when the test is done).
constexpr int64_t kForeverMs = 600'000;
// A worker that runs to its end launches this long: enough launches to spend any budget.
constexpr int64_t kShortRunMs = 600;

// sm_worker's default kernel: 4096 blocks of 256 threads.
constexpr uint64_t kGrid = 4096, kBlock = 256;

// A launch's cost in milli-units of the limiter (docs/sm-limit.md: waves = ceil(blocks /
// (SMs x blocks per SM)), blocks per SM = max threads per SM / threads per block rounded up
// to a warp), on the simulated device the test's CUDA sees as device 0 (every device of the
// profile is alike).
int64_t LaunchCost(uint64_t blocks, uint64_t threads) {
  int sms = 0, per_sm = 0;
  CUdevice dev = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
      cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) !=
          CUDA_SUCCESS) {
    ADD_FAILURE() << "the simulated device's shape";
    return 0;
  }
  const uint64_t warp_threads = std::max<uint64_t>(32, (threads + 31) / 32 * 32);
  const uint64_t blocks_per_sm = std::max<uint64_t>(1, uint64_t(per_sm) / warp_threads);
  const uint64_t per_wave = uint64_t(sms) * blocks_per_sm;
  return int64_t((blocks + per_wave - 1) / per_wave) * region::layout::kMilliUnitsPerWave;
}

// A snapshot of the container's limiter on its (one) device.
struct Limiter {
  LimiterMode mode;
  uint64_t rate;
  uint64_t admitted;
  int64_t waited_ns;
  pid_t controller_pid;
  int64_t updated_ns;
};

// One container: a region of its own, its processes on one simulated device.
class Container {
 public:
  Container(int device, const std::map<std::string, std::string>& extra) : device_(device) {
    env_ = {{"HAMI_SIM_STATE", VgpuEnv::Get().state},
            {"HAMI_SIM_PROFILE", getenv("HAMI_SIM_PROFILE")},
            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", path_},
            {"CUDA_VISIBLE_DEVICES", std::to_string(device)},
            {"CUDA_DEVICE_MEMORY_LIMIT", ""},
            {"CUDA_DEVICE_SM_LIMIT", ""},
            {"GPU_CORE_UTILIZATION_POLICY", ""},
            {"HAMI_IDENTITY_TIERS", ""}};
    for (const auto& [k, v] : extra) env_[k] = v;
  }

  // Starts a process launching for `ms` (mode and shape as sm_worker takes them); returns
  // once it is launching (its "ready" line), with its PID.
  pid_t Start(int64_t ms, const std::vector<std::string>& args = {}) {
    std::vector<std::string> argv = {TestProgram("sm_worker"), std::to_string(ms)};
    argv.insert(argv.end(), args.begin(), args.end());
    procs_.push_back(std::make_unique<Subprocess>(argv, env_));
    EXPECT_TRUE(procs_.back()->WaitForLine("ready", 20000)) << "sm_worker did not start";
    if (region_ == nullptr) {
      auto r = region::Region::Open(path_, nullptr, region::Create::kNever, nullptr,
                                    region::Access::kReadWrite);
      EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
      if (r.ok()) region_ = std::move(r).value();
    }
    return procs_.back()->pid();
  }

  // Waits for every process to end by itself; the launches each one reports ("done
  // launches=N"), in start order.
  std::vector<uint64_t> WaitAll() {
    std::vector<uint64_t> launches;
    for (auto& p : procs_) {
      auto done = p->WaitForLine("done launches=", 60'000);
      EXPECT_TRUE(done) << "a worker did not finish";
      launches.push_back(done ? std::strtoull(done->c_str() + 14, nullptr, 10) : 0);
      EXPECT_EQ(p->Wait(30'000), 0);
    }
    return launches;
  }

  // Polls the region's limiter until `condition` holds for it (the controller and the launch
  // paths publish it in shared memory without waking anyone).
  template <typename Condition>
  bool PollLimiter(Condition condition) {
    return PollUntil([&] { return condition(Snapshot()); }, kPollMs);
  }

  Limiter Snapshot() {
    region::layout::LimiterDevice& lim = region_->Limiter(0);
    return {LimiterMode(lim.mode.load()),
            lim.rate.load(),
            lim.admitted.load(),
            lim.waited_ns.load(),
            pid_t(lim.controller_pid.load()),
            lim.updated_ns.load()};
  }

  region::Region& region() { return *region_; }
  const std::string& path() const { return path_; }
  int device() const { return device_; }
  std::vector<pid_t> Pids() const {
    std::vector<pid_t> out;
    for (const auto& p : procs_) out.push_back(p->pid());
    return out;
  }
  // The slot of the process `pid`, or -1.
  int SlotOf(pid_t pid) { return View(pid).index; }
  // The launches the process `pid` has added to its slot (it adds them in batches of 256).
  uint64_t LaunchesOf(pid_t pid) { return View(pid).launches; }
  pid_t HostPidOf(pid_t pid) { return View(pid).host_pid; }

 private:
  int device_;
  TempDir dir_{"hami-sm-test"};
  std::string path_ = dir_.File("usage.cache");
  std::map<std::string, std::string> env_;
  std::vector<std::unique_ptr<Subprocess>> procs_;  // killed and reaped when the test ends
  std::unique_ptr<region::Region> region_;

  region::SlotView View(pid_t pid) {
    for (const region::SlotView& s : region_->Slots()) {
      if (s.pid == pid) return s;
    }
    region::SlotView none{};
    none.index = -1;
    return none;
  }
};

// Whether the main thread of `pid` sleeps in a futex wait on the word at `offset` of the
// region file `path` (the kernel's view: asleep, not spinning on a CPU).
bool SleepsOnRegionWord(pid_t pid, const std::string& path, uintptr_t offset) {
  const uintptr_t base = MappingStart(pid, path);
  if (base == 0) return false;
  auto t = ReadBlockedThread(pid, pid);
  return t && t->state == 'S' && t->syscall == SYS_futex && t->first_arg == base + offset;
}

uintptr_t OffsetIn(const region::Region& r, const void* word) {
  return uintptr_t(word) - uintptr_t(&r.file());
}

class SmLimitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("HAMI_SIM_PROFILE", "h100-80g:8", 0);
    VgpuEnv::Get();
  }
};

TEST_F(SmLimitTest, ALimitedProcessIsPacedAndItsControllerMeasuresIt) {
  Container c(0, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  const int64_t from_ns = MonotonicNs();
  const pid_t pid = c.Start(kForeverMs);
  // The controller leads from this process, measures the container's own processes (closed
  // loop: the process knows its host PID) and has made launches wait for budget.
  ASSERT_TRUE(c.PollLimiter([](const Limiter& l) {
    return l.mode == LimiterMode::kClosedLoop && l.waited_ns > 0 && l.updated_ns > 0;
  })) << "mode "
      << region::LimiterModeName(c.Snapshot().mode);
  const Limiter l = c.Snapshot();
  EXPECT_EQ(l.controller_pid, pid);
  EXPECT_GT(l.rate, 0u);
  EXPECT_GT(l.admitted, 0u);
  // The device's own ledger: a process launching back to back with nothing limiting it keeps
  // the device busy all the time; at 30% it is idle most of it. The bound is loose on purpose
  // (a loaded machine only makes the process launch less): it tells paced from unpaced, it
  // does not measure the share.
  auto state = sim::SharedState::OpenExisting(VgpuEnv::Get().state);
  ASSERT_TRUE(state.ok()) << state.error().message();
  const sim::BusyWindow busy = (*state)->DeviceBusy(c.device(), from_ns, MonotonicNs());
  ASSERT_GT(busy.covered_ns, 0);
  EXPECT_GT(busy.busy_ns, 0) << "it launched";
  EXPECT_LT(double(busy.busy_ns), 0.75 * double(busy.covered_ns))
      << "busy " << busy.busy_ns << " ns of " << busy.covered_ns << " ns";
}

class UnlimitedTest : public SmLimitTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(UnlimitedTest, AProcessWithoutALimitIsNeitherChargedNorPaced) {
  Container c(1, {{"CUDA_DEVICE_SM_LIMIT", GetParam()}});
  c.Start(kShortRunMs);
  const std::vector<uint64_t> launches = c.WaitAll();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_GT(launches[0], 0u);
  const Limiter l = c.Snapshot();
  EXPECT_EQ(l.mode, LimiterMode::kOff);
  EXPECT_EQ(l.admitted, 0u) << "no launch was charged";
  EXPECT_EQ(l.waited_ns, 0) << "no launch waited";
  EXPECT_EQ(l.controller_pid, 0) << "no controller ran";
}

INSTANTIATE_TEST_SUITE_P(NoneZeroOrHundred, UnlimitedTest, ::testing::Values("", "0", "100"),
                         [](const auto& param) {
                           return *param.param == '\0' ? std::string("Unset")
                                                       : std::string("Limit") + param.param;
                         });

// Each launch path in a container of its own at 30%: every launch is charged exactly its
// waves into the container's budget, and the budget runs dry (launches wait).
struct LaunchPath {
  const char* mode;  // sm_worker's
  std::vector<std::string> args;
  uint64_t kernels;  // kernel launches per call (a graph has four nodes)
  uint64_t blocks;
};

void PrintTo(const LaunchPath& p, std::ostream* os) { *os << p.mode; }

class LaunchPathTest : public SmLimitTest, public ::testing::WithParamInterface<LaunchPath> {};

TEST_P(LaunchPathTest, EveryLaunchIsChargedItsWavesAndPaced) {
  const LaunchPath& p = GetParam();
  Container c(2, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  std::vector<std::string> args = {p.mode};
  args.insert(args.end(), p.args.begin(), p.args.end());
  c.Start(kShortRunMs, args);
  const std::vector<uint64_t> launches = c.WaitAll();
  ASSERT_EQ(launches.size(), 1u);
  ASSERT_GT(launches[0], 0u);
  const Limiter l = c.Snapshot();
  EXPECT_EQ(l.admitted, launches[0] * p.kernels * uint64_t(LaunchCost(p.blocks, kBlock)))
      << launches[0] << " launches";
  EXPECT_GT(l.waited_ns, 0) << "the budget never ran dry";
}

INSTANTIATE_TEST_SUITE_P(EveryPath, LaunchPathTest,
                         ::testing::Values(LaunchPath{"kernel", {}, 1, kGrid},
                                           LaunchPath{"ex", {}, 1, kGrid},
                                           // co-resident: 132 SMs x 8 blocks of 256 threads
                                           LaunchPath{"coop", {"1056"}, 1, 1056},
                                           LaunchPath{"graph", {}, 4, kGrid}),
                         [](const auto& param) { return std::string(param.param.mode); });

TEST_F(SmLimitTest, FourProcessesOfOneContainerShareOneBudgetAndOneController) {
  Container c(3, {{"CUDA_DEVICE_SM_LIMIT", "40"}});
  for (int i = 0; i < 4; ++i) c.Start(kShortRunMs);
  const std::vector<pid_t> pids = c.Pids();
  const std::vector<uint64_t> launches = c.WaitAll();
  uint64_t total = 0;
  for (uint64_t n : launches) {
    EXPECT_GT(n, 0u);
    total += n;
  }
  const Limiter l = c.Snapshot();
  EXPECT_EQ(l.admitted, total * uint64_t(LaunchCost(kGrid, kBlock)))
      << "every process's launches went into the container's one budget";
  EXPECT_GT(l.waited_ns, 0);
  EXPECT_NE(std::find(pids.begin(), pids.end(), l.controller_pid), pids.end())
      << "controller pid " << l.controller_pid;
}

TEST_F(SmLimitTest, TwoContainersOnOneDeviceEachHaveTheirOwnBudget) {
  Container a(4, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  Container b(4, {{"CUDA_DEVICE_SM_LIMIT", "70"}});
  const pid_t pa = a.Start(kShortRunMs);
  const pid_t pb = b.Start(kShortRunMs);
  const std::vector<uint64_t> na = a.WaitAll(), nb = b.WaitAll();
  const uint64_t cost = uint64_t(LaunchCost(kGrid, kBlock));
  EXPECT_EQ(a.Snapshot().admitted, na[0] * cost);
  EXPECT_EQ(b.Snapshot().admitted, nb[0] * cost);
  EXPECT_EQ(a.Snapshot().controller_pid, pa);
  EXPECT_EQ(b.Snapshot().controller_pid, pb);
}

TEST_F(SmLimitTest, ALimitChangedInTheRegionReachesTheLimiter) {
  Container c(5, {{"CUDA_DEVICE_SM_LIMIT", "60"}});
  c.Start(kForeverMs);
  ASSERT_TRUE(c.PollLimiter(
      [](const Limiter& l) { return l.mode == LimiterMode::kClosedLoop && l.rate > 0; }));
  const uint64_t rate_at_60 = c.Snapshot().rate;
  // The rate is the limit over what a wave costs, which the change leaves alone: a third of
  // the limit makes (about) a third of the rate; half is the bound here.
  ASSERT_TRUE(c.region().SetSmLimit(0, 20).ok());
  EXPECT_TRUE(c.PollLimiter([&](const Limiter& l) { return 2 * l.rate <= rate_at_60; }))
      << "rate " << c.Snapshot().rate << " after the change, " << rate_at_60 << " before";
  const uint64_t rate_at_20 = c.Snapshot().rate;
  // Back up to what the process was given: the rate follows.
  ASSERT_TRUE(c.region().SetSmLimit(0, 60).ok());
  EXPECT_TRUE(c.PollLimiter([&](const Limiter& l) { return l.rate >= 2 * rate_at_20; }));
  // 0 is unlimited in the region, but the process was given 60%: it never runs looser than
  // that, so the limiter stays on.
  ASSERT_TRUE(c.region().SetSmLimit(0, 0).ok());
  EXPECT_TRUE(c.PollLimiter([&](const Limiter& l) {
    return l.mode == LimiterMode::kClosedLoop && l.rate >= 2 * rate_at_20;
  }));
  EXPECT_EQ(c.region().ContainerSmLimit(0), 60u);
}

TEST_F(SmLimitTest, APausedContainerSleepsOnThePauseWordUntilResumed) {
  // A short queue (64 launches): what was launched before the pause drains quickly.
  Container c(6, {{"HAMI_SIM_QUEUE_DEPTH", "64"}});
  const pid_t pid = c.Start(kForeverMs);
  ASSERT_TRUE(c.region().SetPaused(true).ok());
  const uintptr_t word = OffsetIn(c.region(), &c.region().PausedWord());
  EXPECT_TRUE(PollUntil([&] { return SleepsOnRegionWord(pid, c.path(), word); }, kPollMs))
      << "the launching thread is not asleep on the region's pause word";
  const uint64_t launched = c.LaunchesOf(pid);
  ASSERT_TRUE(c.region().SetPaused(false).ok());
  // Resumed: it launches again (its slot counts launches in batches of 256).
  EXPECT_TRUE(PollUntil([&] { return c.LaunchesOf(pid) >= launched + 512; }, kPollMs))
      << "no launch after the pause was lifted";
}

TEST_F(SmLimitTest, ASuspendedProcessSleepsOnItsStatusWordUntilResumed) {
  Container c(7, {{"HAMI_SIM_QUEUE_DEPTH", "64"}});
  const pid_t pid = c.Start(kForeverMs);
  const int slot = c.SlotOf(pid);
  ASSERT_GE(slot, 0);
  ASSERT_TRUE(c.region().SetSlotStatus(slot, region::SlotStatus::kSuspended).ok());
  const uintptr_t word = OffsetIn(c.region(), &c.region().file().slots[slot].status);
  EXPECT_TRUE(PollUntil([&] { return SleepsOnRegionWord(pid, c.path(), word); }, kPollMs))
      << "the launching thread is not asleep on its slot's status word";
  const uint64_t launched = c.LaunchesOf(pid);
  ASSERT_TRUE(c.region().SetSlotStatus(slot, region::SlotStatus::kRunning).ok());
  EXPECT_TRUE(PollUntil([&] { return c.LaunchesOf(pid) >= launched + 512; }, kPollMs))
      << "no launch after the process was resumed";
}

TEST_F(SmLimitTest, WithoutAHostPidTheLimiterRunsOpenLoopAndStillPaces) {
  Container c(0, {{"CUDA_DEVICE_SM_LIMIT", "40"}, {"HAMI_IDENTITY_TIERS", "none"}});
  const pid_t pid = c.Start(kForeverMs);
  EXPECT_TRUE(c.PollLimiter([](const Limiter& l) {
    return l.mode == LimiterMode::kOpenLoop && l.waited_ns > 0;
  })) << "mode "
      << region::LimiterModeName(c.Snapshot().mode);
  ASSERT_GE(c.SlotOf(pid), 0);
  EXPECT_EQ(c.HostPidOf(pid), 0) << "no host PID";
}

TEST_F(SmLimitTest, PolicyDisableNeverCharges) {
  Container c(1, {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"GPU_CORE_UTILIZATION_POLICY", "disable"}});
  c.Start(kShortRunMs);
  ASSERT_GT(c.WaitAll()[0], 0u);
  const Limiter l = c.Snapshot();
  EXPECT_EQ(l.admitted, 0u);
  EXPECT_EQ(l.waited_ns, 0);
  EXPECT_EQ(l.mode, LimiterMode::kOff);
}

TEST_F(SmLimitTest, PolicyForceChargesWithTheSwitchOff) {
  Container c(2, {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}});
  c.Start(kForeverMs);
  ASSERT_TRUE(c.region().SetUtilizationSwitch(false).ok());
  const uint64_t admitted = c.Snapshot().admitted;
  EXPECT_TRUE(c.PollLimiter([&](const Limiter& l) {
    return l.admitted > admitted && l.mode == LimiterMode::kClosedLoop;
  })) << "force: still charged and controlled with the switch off";
}

TEST_F(SmLimitTest, PolicyDefaultChargesWhileTheSwitchIsOnOnly) {
  Container c(3, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  const pid_t pid = c.Start(kForeverMs);
  ASSERT_TRUE(c.PollLimiter([](const Limiter& l) {
    return l.mode == LimiterMode::kClosedLoop && l.admitted > 0;
  })) << "switch on: limited";
  ASSERT_TRUE(c.region().SetUtilizationSwitch(false).ok());
  ASSERT_TRUE(c.PollLimiter([](const Limiter& l) { return l.mode == LimiterMode::kOff; }))
      << "switch off: the controller turns the limiter off";
  const uint64_t admitted = c.Snapshot().admitted;
  const uint64_t launched = c.LaunchesOf(pid);
  // Many more launches (two batches of 256 counted in the slot), and at most the one that was
  // waiting for budget when the switch went off was charged.
  ASSERT_TRUE(PollUntil([&] { return c.LaunchesOf(pid) >= launched + 512; }, kPollMs));
  EXPECT_LE(c.Snapshot().admitted - admitted, uint64_t(LaunchCost(kGrid, kBlock)));
}

}  // namespace
}  // namespace hami::testing
