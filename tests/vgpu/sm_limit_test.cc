// The compute (SM) limit on the simulated GPU (its execution model turns launches into device
// time and NVML samples): each target held, containers side by side, processes of one
// container sharing one budget, every launch path, limit changes, pause and suspend,
// identity missing, and the core policies.
#include <nvml/nvml.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/temp_dir.h"
#include "region/region.h"
#include "support/subprocess.h"
#include "vgpu_fixture.h"

namespace hami::testing {
namespace {

// The settle time and measurement window of the issue: 1 s, then 3 s.
constexpr int64_t kSettleUs = 1'000'000;
constexpr int64_t kWindowUs = 3'000'000;

unsigned long long NowUs() { return static_cast<unsigned long long>(RealtimeNs() / 1000); }

// One container: a region of its own, its processes on one simulated device.
class Container {
 public:
  Container(int device, const std::map<std::string, std::string>& extra) : device_(device) {
    env_ = {{"HAMI_SIM_STATE", VgpuEnv::Get().state},
            {"HAMI_SIM_PROFILE", getenv("HAMI_SIM_PROFILE")},
            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", dir_.File("usage.cache")},
            {"CUDA_VISIBLE_DEVICES", std::to_string(device)},
            {"CUDA_DEVICE_MEMORY_LIMIT", ""}};
    for (const auto& [k, v] : extra) env_[k] = v;
  }
  // Starts a process launching for `ms` (mode and shape as sm_worker takes them).
  pid_t Start(int64_t ms, const std::vector<std::string>& args = {}) {
    std::vector<std::string> argv = {TestProgram("sm_worker"), std::to_string(ms)};
    argv.insert(argv.end(), args.begin(), args.end());
    procs_.push_back(std::make_unique<Subprocess>(argv, env_));
    auto ready = procs_.back()->WaitForLine("ready", 20000);
    EXPECT_TRUE(ready) << "sm_worker did not start";
    return procs_.back()->pid();
  }
  std::unique_ptr<region::Region> Region() {
    auto r = region::Region::Open(dir_.File("usage.cache"), nullptr, region::Create::kNever,
                                  nullptr, region::Access::kReadWrite);
    if (!r.ok()) {
      ADD_FAILURE() << r.error().message();
      return nullptr;
    }
    return std::move(r).value();
  }
  std::vector<pid_t> Pids() const {
    std::vector<pid_t> out;
    for (const auto& p : procs_) out.push_back(p->pid());
    return out;
  }
  void WaitAll() {
    for (auto& p : procs_) EXPECT_EQ(p->Wait(30000), 0) << p->ReadAll(1000);
  }
  int device() const { return device_; }

 private:
  int device_;
  TempDir dir_{"hami-sm-test"};
  std::map<std::string, std::string> env_;
  std::vector<std::unique_ptr<Subprocess>> procs_;
};

// The percent of device `device`'s time the processes `pids` used since `since_us` (NVML's
// per-process samples of the simulated device, read past libvgpu).
double Used(int device, const std::vector<pid_t>& pids, unsigned long long since_us) {
  nvmlDevice_t h;
  if (nvmlInit_v2() != NVML_SUCCESS ||
      nvmlDeviceGetHandleByIndex_v2(unsigned(device), &h) != NVML_SUCCESS) {
    ADD_FAILURE() << "NVML";
    return -1;
  }
  nvmlProcessUtilizationSample_t samples[64];
  unsigned n = 64;
  nvmlReturn_t r = nvmlDeviceGetProcessUtilization(h, samples, &n, since_us);
  if (r == NVML_ERROR_NOT_FOUND) return 0;
  EXPECT_EQ(r, NVML_SUCCESS);
  double total = 0;
  for (unsigned i = 0; i < n; ++i) {
    for (pid_t p : pids) {
      if (samples[i].pid == unsigned(p)) total += samples[i].smUtil;
    }
  }
  return total;
}

// Waits `settle_us`, then measures over `window_us`.
double Measure(const Container& c, int64_t settle_us = kSettleUs, int64_t window_us = kWindowUs) {
  usleep(useconds_t(settle_us));
  const unsigned long long from = NowUs();
  usleep(useconds_t(window_us));
  return Used(c.device(), c.Pids(), from);
}

// CPU time (user + system) of `pid` so far, in clock ticks.
long CpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; rest >> field; ++i) {
    if (i == 14) utime = std::atol(field.c_str());
    if (i == 15) {
      stime = std::atol(field.c_str());
      break;
    }
  }
  return utime + stime;
}

class SmLimitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("HAMI_SIM_PROFILE", "h100-80g:8", 0);
    VgpuEnv::Get();
  }
};

TEST_F(SmLimitTest, EachTargetIsHeldWithinFivePoints) {
  const int targets[] = {10, 25, 50, 75, 90};
  std::vector<std::unique_ptr<Container>> containers;
  for (int i = 0; i < 5; ++i) {
    containers.push_back(std::make_unique<Container>(
        i,
        std::map<std::string, std::string>{{"CUDA_DEVICE_SM_LIMIT", std::to_string(targets[i])}}));
    containers.back()->Start(5000);
  }
  usleep(useconds_t(kSettleUs));
  const unsigned long long from = NowUs();
  usleep(useconds_t(kWindowUs));
  for (int i = 0; i < 5; ++i) {
    const double used = Used(i, containers[size_t(i)]->Pids(), from);
    EXPECT_NEAR(used, targets[i], 5) << "target " << targets[i] << "%";
  }
  for (auto& c : containers) c->WaitAll();
}

TEST_F(SmLimitTest, TwoContainersOnOneDeviceEachGetTheirShare) {
  Container a(0, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  Container b(0, {{"CUDA_DEVICE_SM_LIMIT", "70"}});
  a.Start(5000);
  b.Start(5000);
  usleep(useconds_t(kSettleUs));
  const unsigned long long from = NowUs();
  usleep(useconds_t(kWindowUs));
  EXPECT_NEAR(Used(0, a.Pids(), from), 30, 5);
  EXPECT_NEAR(Used(0, b.Pids(), from), 70, 5);
  a.WaitAll();
  b.WaitAll();
}

TEST_F(SmLimitTest, FourProcessesOfOneContainerShareOneBudget) {
  Container c(1, {{"CUDA_DEVICE_SM_LIMIT", "40"}});
  for (int i = 0; i < 4; ++i) c.Start(5000);
  EXPECT_NEAR(Measure(c), 40, 5) << "the container's total, not each process's";
  c.WaitAll();
}

TEST_F(SmLimitTest, GraphCooperativeAndExLaunchesAreLimited) {
  Container graph(2, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  Container coop(3, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  Container ex(4, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  graph.Start(5000, {"graph"});
  coop.Start(5000, {"coop", "1056"});  // co-resident: 132 SMs x 8 blocks of 256 threads
  ex.Start(5000, {"ex"});
  usleep(useconds_t(kSettleUs));
  const unsigned long long from = NowUs();
  usleep(useconds_t(kWindowUs));
  EXPECT_NEAR(Used(2, graph.Pids(), from), 30, 5) << "cuGraphLaunch";
  EXPECT_NEAR(Used(3, coop.Pids(), from), 30, 5) << "cuLaunchCooperativeKernel";
  EXPECT_NEAR(Used(4, ex.Pids(), from), 30, 5) << "cuLaunchKernelEx";
  graph.WaitAll();
  coop.WaitAll();
  ex.WaitAll();
}

TEST_F(SmLimitTest, ALimitChangedInTheRegionTakesEffectWithinASecond) {
  Container c(5, {{"CUDA_DEVICE_SM_LIMIT", "20"}});
  c.Start(6000);
  EXPECT_NEAR(Measure(c, kSettleUs, 1'500'000), 20, 5);
  auto r = c.Region();
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->SetSmLimit(0, 60).ok());
  EXPECT_NEAR(Measure(c, 1'000'000, 2'000'000), 60, 5) << "measured from 1 s after the change";
  c.WaitAll();
}

TEST_F(SmLimitTest, APausedContainerWaitsWithoutCpuAndResumesPromptly) {
  // A short queue (8 ms of work): what was launched before the pause drains at once.
  Container c(6, {{"HAMI_SIM_QUEUE_DEPTH", "64"}});
  const pid_t pid = c.Start(4000);
  auto r = c.Region();
  ASSERT_TRUE(r);
  usleep(300'000);
  ASSERT_TRUE(r->SetPaused(true).ok());
  usleep(300'000);  // launches already queued drain
  const long cpu_before = CpuTicks(pid);
  EXPECT_LT(Measure(c, 0, 1'000'000), 3) << "no launch while paused";
  EXPECT_LE(CpuTicks(pid) - cpu_before, 5) << "waiting burns no CPU (ticks in 1 s)";
  ASSERT_TRUE(r->SetPaused(false).ok());
  EXPECT_GT(Measure(c, 200'000, 500'000), 80) << "resumed";
  c.WaitAll();
}

TEST_F(SmLimitTest, ASuspendedProcessWaitsAndResumes) {
  Container c(7, {{"HAMI_SIM_QUEUE_DEPTH", "64"}});
  const pid_t pid = c.Start(4000);
  auto r = c.Region();
  ASSERT_TRUE(r);
  int slot = -1;
  for (const region::SlotView& s : r->Slots()) {
    if (s.pid == pid) slot = s.index;
  }
  ASSERT_GE(slot, 0);
  ASSERT_TRUE(r->SetSlotStatus(slot, region::SlotStatus::kSuspended).ok());
  usleep(300'000);
  EXPECT_LT(Measure(c, 0, 1'000'000), 3) << "no launch while suspended";
  ASSERT_TRUE(r->SetSlotStatus(slot, region::SlotStatus::kRunning).ok());
  EXPECT_GT(Measure(c, 200'000, 500'000), 80) << "resumed";
  c.WaitAll();
}

TEST_F(SmLimitTest, WithoutAHostPidTheLimitStillHoldsOpenLoopAndSaysSo) {
  Container c(0, {{"CUDA_DEVICE_SM_LIMIT", "40"}, {"HAMI_IDENTITY_TIERS", "none"}});
  c.Start(5000, {"kernel", "4096", "256", "40000"});
  EXPECT_NEAR(Measure(c), 40, 15);
  auto r = c.Region();
  ASSERT_TRUE(r);
  EXPECT_EQ(region::LimiterMode(r->Limiter(0).mode.load()), region::LimiterMode::kOpenLoop);
  c.WaitAll();
}

TEST_F(SmLimitTest, PoliciesDisableForceAndDefaultFollowTheSwitch) {
  {
    Container c(1, {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"GPU_CORE_UTILIZATION_POLICY", "disable"}});
    c.Start(2500);
    EXPECT_GT(Measure(c, 500'000, 1'500'000), 90) << "disable: never limited";
    c.WaitAll();
  }
  {
    Container c(2, {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"GPU_CORE_UTILIZATION_POLICY", "force"}});
    c.Start(6000);
    auto r = c.Region();
    ASSERT_TRUE(r);
    ASSERT_TRUE(r->SetUtilizationSwitch(false).ok());
    EXPECT_NEAR(Measure(c, kSettleUs, 2'000'000), 30, 5) << "force: limited, switch or not";
    c.WaitAll();
  }
  {
    Container c(3, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
    c.Start(6000);
    EXPECT_NEAR(Measure(c, kSettleUs, 1'500'000), 30, 5) << "default, switch on: limited";
    auto r = c.Region();
    ASSERT_TRUE(r);
    ASSERT_TRUE(r->SetUtilizationSwitch(false).ok());
    EXPECT_GT(Measure(c, 500'000, 1'500'000), 90) << "default, switch off: not limited";
    c.WaitAll();
  }
}

}  // namespace
}  // namespace hami::testing
