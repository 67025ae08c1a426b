// The compute limiter's arithmetic in-process: a launch's cost in waves, the controller's step
// fed sampled utilization traces from a model of the device (no process, no NVML, no sleep),
// and the token bucket's wait against an injected clock. The properties asserted are those of
// the sequences (converges, stays positive and bounded, does not oscillate), never timings.
#include "vgpu/limiter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "common/temp_dir.h"
#include "region/region.h"
#include "vgpu/test_state.h"

namespace hami::vgpu {
namespace {

using region::LimiterMode;
using region::layout::kMilliUnitsPerWave;
using region::layout::LimiterDevice;

constexpr int64_t kSecondNs = 1'000'000'000;

// ---- cost ----

TEST(WaveCost, ALaunchCostsItsWavesInMilliUnits) {
  // An H100: 132 SMs of 2048 threads. 256-thread blocks: 8 per SM, 1056 per wave.
  EXPECT_EQ(WaveCost(132, 2048, 1056, 256), 1 * kMilliUnitsPerWave);
  EXPECT_EQ(WaveCost(132, 2048, 1057, 256), 2 * kMilliUnitsPerWave);
  EXPECT_EQ(WaveCost(132, 2048, 4096, 256), 4 * kMilliUnitsPerWave);
}

TEST(WaveCost, EveryLaunchCostsAtLeastOneWave) {
  EXPECT_EQ(WaveCost(132, 2048, 1, 32), kMilliUnitsPerWave);
  EXPECT_EQ(WaveCost(132, 2048, 0, 256), kMilliUnitsPerWave);
}

TEST(WaveCost, ThreadsPerBlockAreRoundedUpToAWarp) {
  // 33 threads take two warps: 32 blocks of 64 threads fill an SM of 2048.
  EXPECT_EQ(WaveCost(1, 2048, 32, 33), kMilliUnitsPerWave);
  EXPECT_EQ(WaveCost(1, 2048, 33, 33), 2 * kMilliUnitsPerWave);
  // Fewer than a warp count as one.
  EXPECT_EQ(WaveCost(1, 2048, 64, 1), kMilliUnitsPerWave);
  EXPECT_EQ(WaveCost(1, 2048, 65, 1), 2 * kMilliUnitsPerWave);
}

TEST(WaveCost, ABlockLargerThanAnSmStillRunsOnePerSm) {
  EXPECT_EQ(WaveCost(4, 1024, 4, 2048), kMilliUnitsPerWave);
  EXPECT_EQ(WaveCost(4, 1024, 5, 2048), 2 * kMilliUnitsPerWave);
}

TEST(WaveCost, TheSmCountDividesOut) {
  // The same kernel scaled to the device costs the same on a small and a large one.
  EXPECT_EQ(WaveCost(10, 2048, 10 * 8 * 3, 256), WaveCost(100, 2048, 100 * 8 * 3, 256));
}

TEST(WaveCost, AnUnknownShapeCountsEachBlockAsAWave) {
  EXPECT_EQ(WaveCost(0, 0, 7, 256), 7 * kMilliUnitsPerWave);
}

// The fake driver's device shape, by ordinal.
CUresult FakeAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = 132;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *value = 2048;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

TEST(LaunchCost, UsesTheShapeTheDriverGivesAndOneSmOfAWarpWhenItCannot) {
  CudaDriver fake;
  fake.aux.cuDeviceGetAttribute = FakeAttribute;
  std::unique_ptr<Runtime> state = testing::MakeState({}, &fake);
  Runtime& rt = *state;
  EXPECT_EQ(LaunchCost(rt, 0, 4096, 256), 4 * kMilliUnitsPerWave);
  // Ordinal 1 answers nothing: 1 SM of 32 threads, one 32-thread block per wave.
  EXPECT_EQ(LaunchCost(rt, 1, 5, 256), 5 * kMilliUnitsPerWave);
  // Out of range: no shape at all.
  EXPECT_EQ(LaunchCost(rt, -1, 5, 256), 5 * kMilliUnitsPerWave);
  // Asked once per ordinal: a driver that changed its mind is not asked again.
  fake.aux.cuDeviceGetAttribute = nullptr;
  EXPECT_EQ(LaunchCost(rt, 0, 4096, 256), 4 * kMilliUnitsPerWave);
}

// ---- measuring a period ----

TEST(MeasurePeriod, TheContainerIsItsProcessesJoinedByHostPid) {
  const std::vector<UtilSample> samples = {{100, 20}, {100, 30}, {200, 10}, {999, 50}};
  const std::vector<ContainerProcess> procs = {{0, 7, 100, true}, {1, 8, 200, true}};
  std::vector<double> percent(procs.size());
  const PeriodUse use = MeasurePeriod(samples, procs, -1, percent);
  EXPECT_TRUE(use.closed);
  EXPECT_DOUBLE_EQ(use.used, 0.35) << "25 (the average of 100's samples) + 10; 999 is not ours";
  EXPECT_DOUBLE_EQ(percent[0], 25);
  EXPECT_DOUBLE_EQ(percent[1], 10);
  EXPECT_EQ(use.unknown_pid, 0);
}

TEST(MeasurePeriod, AProcessWithoutSamplesIsMarkedAndCountsNothing) {
  const std::vector<UtilSample> samples = {{100, 40}};
  const std::vector<ContainerProcess> procs = {{0, 7, 100, true}, {3, 9, 300, true}};
  std::vector<double> percent(procs.size());
  const PeriodUse use = MeasurePeriod(samples, procs, -1, percent);
  EXPECT_TRUE(use.closed);
  EXPECT_DOUBLE_EQ(use.used, 0.40);
  EXPECT_DOUBLE_EQ(percent[1], -1);
}

TEST(MeasurePeriod, ALaunchingProcessWithoutAHostPidOpensTheLoop) {
  const std::vector<UtilSample> samples = {{100, 20}, {999, 50}};
  const std::vector<ContainerProcess> procs = {{0, 7, 100, true}, {1, 12, 0, true}};
  std::vector<double> percent(procs.size());
  const PeriodUse use = MeasurePeriod(samples, procs, -1, percent);
  EXPECT_FALSE(use.closed);
  EXPECT_DOUBLE_EQ(use.used, 0.70) << "the whole device stands in";
  EXPECT_EQ(use.unknown_pid, 12);
}

TEST(MeasurePeriod, AnIdleProcessWithoutAHostPidLeavesTheLoopClosed) {
  const std::vector<UtilSample> samples = {{100, 20}, {999, 50}};
  const std::vector<ContainerProcess> procs = {{0, 7, 100, true}, {1, 12, 0, false}};
  std::vector<double> percent(procs.size());
  const PeriodUse use = MeasurePeriod(samples, procs, -1, percent);
  EXPECT_TRUE(use.closed);
  EXPECT_DOUBLE_EQ(use.used, 0.20);
}

TEST(MeasurePeriod, WithoutPerProcessSamplesTheDeviceStandsIn) {
  const std::vector<ContainerProcess> procs = {{0, 7, 100, true}};
  std::vector<double> percent(procs.size());
  const PeriodUse use = MeasurePeriod({}, procs, 64, percent);
  EXPECT_FALSE(use.closed);
  EXPECT_DOUBLE_EQ(use.used, 0.64);
  EXPECT_DOUBLE_EQ(percent[0], -1);
}

TEST(MeasurePeriod, NoSampleIsNoUse) {
  const std::vector<ContainerProcess> procs = {{0, 7, 100, true}};
  const PeriodUse use = MeasurePeriod({}, procs, -1, {});
  EXPECT_TRUE(use.closed);
  EXPECT_EQ(use.used, 0);
}

// ---- the controller against a model of the device ----

constexpr int64_t kPeriod = kPeriodNs;
constexpr unsigned kOurHostPid = 4242, kNeighbourPid = 999;

// One container's workload on one device, period by period, as the controller sees it: the
// bucket lets at most rate x period milli-units in, the driver holds at most one period of
// work queued beyond what runs, the device runs what it can in the time the neighbours leave, and
// NVML reports whole percents of what ran, with optional noise.
struct Model {
  double ns_per_mu = 20;  // what a milli-unit of the container's work takes on the device
  double demand = 1;      // the fraction of the device the workload would take unthrottled
  double neighbour = 0;   // another container's share of the device (its own PID in NVML)
  double noise_points = 0;
  bool host_pid_known = true;
  uint32_t limit = 30;

  // Published by the controller (the bucket starts at InitialRate).
  uint64_t rate = 0;
  ControlEstimate estimate;
  uint64_t admitted = 0;
  double queued_mu = 0;
  std::mt19937 random{7};

  struct Period {
    ControlDecision decision;
    double util;  // the container's true share of the device in the period
    uint64_t rate_before;
  };

  Period Step() {
    if (rate == 0 && limit != 0) rate = InitialRate(limit);
    const double period = double(kPeriod);
    const double capacity = (1 - neighbour) * period / ns_per_mu;
    // Back to back (demand 1): as much as the bucket and the driver's queue let in.
    const double wanted = demand >= 1 ? HUGE_VAL : demand * period / ns_per_mu;
    const double room = std::max(0.0, 2 * capacity - queued_mu);
    // No limit in force: launches are neither paced nor charged.
    const double allowed = limit != 0 ? double(rate) * period / 1e9 : HUGE_VAL;
    const double launched = std::floor(std::min({wanted, allowed, room}));
    const double ran = std::min(queued_mu + launched, capacity);
    queued_mu += launched - ran;
    const uint64_t charged = limit != 0 ? uint64_t(launched) : 0;
    admitted += charged;
    const double util = ran * ns_per_mu / period;

    std::uniform_real_distribution<double> jitter(-noise_points, noise_points);
    const double seen = noise_points > 0 ? util * 100 + jitter(random) : util * 100;
    std::vector<UtilSample> samples;
    if (ran > 0)
      samples.push_back({kOurHostPid, unsigned(std::clamp(std::lround(seen), 0l, 100l))});
    if (neighbour > 0) samples.push_back({kNeighbourPid, unsigned(std::lround(neighbour * 100))});
    const std::vector<ContainerProcess> procs = {
        {0, 1, host_pid_known ? pid_t(kOurHostPid) : 0, admitted > 0}};
    ControlInput in;
    in.limit_percent = limit;
    in.period_ns = kPeriod;
    in.launched_mu = charged;
    in.admitted_mu = admitted;
    in.use = MeasurePeriod(samples, procs, -1, {});
    Period p{ControlStep(in, &estimate), util, rate};
    if (p.decision.publish) rate = p.decision.rate;
    return p;
  }

  // The rate that holds the container at its limit.
  double TargetRate() const { return double(limit) / 100 * 1e9 / ns_per_mu; }
};

std::vector<Model::Period> RunTrace(Model* m, int periods,
                                    const std::function<void(int, Model*)>& script = nullptr) {
  std::vector<Model::Period> trace;
  for (int i = 0; i < periods; ++i) {
    if (script) script(i, m);
    trace.push_back(m->Step());
  }
  return trace;
}

// How many times the sequence crosses from above `high` to below `low` or back.
int Swings(const std::vector<double>& v, double low, double high) {
  int swings = 0, side = 0;
  for (double x : v) {
    const int s = x > high ? 1 : x < low ? -1 : side;
    if (side != 0 && s != side) ++swings;
    side = s;
  }
  return swings;
}

std::vector<double> Rates(const std::vector<Model::Period>& t, size_t from, size_t to) {
  std::vector<double> out;
  for (size_t i = from; i < std::min(to, t.size()); ++i) out.push_back(double(t[i].decision.rate));
  return out;
}

void ExpectPositiveAndBounded(const std::vector<Model::Period>& trace, const Model& m) {
  // Bounded by the limit over the cheapest cost a sample can show: kMinMeasurableUse of a
  // period spread over a whole period's launches at the fastest rate seen.
  for (size_t i = 0; i < trace.size(); ++i) {
    if (!trace[i].decision.publish) continue;
    EXPECT_GT(trace[i].decision.rate, 0u) << "period " << i;
    EXPECT_LE(double(trace[i].decision.rate), 100 * m.TargetRate()) << "period " << i;
  }
}

TEST(ControlStep, ASteadyLoadConvergesToTheLimit) {
  Model m;
  const auto trace = RunTrace(&m, 50);
  ExpectPositiveAndBounded(trace, m);
  // Within 5 periods: the share within half a point of the limit, the rate within 2%.
  for (size_t i = 5; i < trace.size(); ++i) {
    EXPECT_NEAR(trace[i].util, 0.30, 0.005) << "period " << i;
    EXPECT_NEAR(double(trace[i].decision.rate) / m.TargetRate(), 1.0, 0.02) << "period " << i;
    EXPECT_EQ(trace[i].decision.mode, LimiterMode::kClosedLoop);
  }
  EXPECT_EQ(Swings(Rates(trace, 1, 50), 0.98 * m.TargetRate(), 1.02 * m.TargetRate()), 0);
}

TEST(ControlStep, AWorkloadHeavierThanTheFirstGuessSettlesAfterSaturatingTheDevice) {
  // 1 ms per milli-unit: the first rate queues more than the device runs, so the first
  // samples misjudge the cost; the queue drains and the estimate settles.
  Model m;
  m.ns_per_mu = 1000;
  const auto trace = RunTrace(&m, 60);
  ExpectPositiveAndBounded(trace, m);
  EXPECT_GT(trace[0].util, 0.9) << "the first guess lets in more than the limit";
  for (size_t i = 20; i < trace.size(); ++i) {
    EXPECT_NEAR(trace[i].util, 0.30, 0.01) << "period " << i;
    EXPECT_NEAR(double(trace[i].decision.rate) / m.TargetRate(), 1.0, 0.03) << "period " << i;
  }
  // It approaches without ringing: at most one swing through a 10% band around the target.
  EXPECT_LE(Swings(Rates(trace, 0, 60), 0.9 * m.TargetRate(), 1.1 * m.TargetRate()), 1);
}

TEST(ControlStep, KernelsThatGrowLongerAreFollowedWithinTenPeriods) {
  Model m;
  auto trace = RunTrace(&m, 100, [](int i, Model* model) {
    if (i == 40) model->ns_per_mu = 80;  // the same launches now take four times the device time
  });
  ExpectPositiveAndBounded(trace, m);
  for (size_t i = 50; i < trace.size(); ++i) {
    EXPECT_NEAR(trace[i].util, 0.30, 0.01) << "period " << i;
    EXPECT_NEAR(double(trace[i].decision.rate) / m.TargetRate(), 1.0, 0.05) << "period " << i;
  }
  // Between the step and settling, the rate only falls (no undershoot and recovery).
  for (size_t i = 41; i < 50; ++i) {
    EXPECT_LE(trace[i].decision.rate, trace[i - 1].decision.rate) << "period " << i;
    EXPECT_GE(double(trace[i].decision.rate), 0.95 * m.TargetRate()) << "period " << i;
  }
}

TEST(ControlStep, AWorkloadBelowItsLimitKeepsTheRateAndGetsItsShareBackAtOnce) {
  Model m;
  const double target = m.TargetRate();
  auto trace = RunTrace(&m, 60, [](int i, Model* model) {
    if (i == 20) model->demand = 0.10;
    if (i == 40) model->demand = 1;
  });
  ExpectPositiveAndBounded(trace, m);
  for (size_t i = 21; i < 40; ++i) {
    EXPECT_NEAR(trace[i].util, 0.10, 0.005) << "period " << i;
    EXPECT_NEAR(double(trace[i].decision.rate) / target, 1.0, 0.02) << "period " << i;
  }
  for (size_t i = 41; i < 60; ++i) EXPECT_NEAR(trace[i].util, 0.30, 0.005) << "period " << i;
}

TEST(ControlStep, ALimitRaisedOrLoweredScalesTheRateAtTheNextPeriod) {
  Model m;
  auto trace = RunTrace(&m, 60, [](int i, Model* model) {
    if (i == 20) model->limit = 60;
    if (i == 40) model->limit = 10;
  });
  ExpectPositiveAndBounded(trace, m);
  // The estimate is the cost, which the limit leaves alone: the rate follows the limit at once.
  EXPECT_NEAR(double(trace[20].decision.rate) / double(trace[19].decision.rate), 2.0, 0.05);
  EXPECT_NEAR(double(trace[40].decision.rate) / double(trace[39].decision.rate), 1.0 / 6, 0.01);
  for (size_t i = 22; i < 40; ++i) EXPECT_NEAR(trace[i].util, 0.60, 0.01) << "period " << i;
  for (size_t i = 45; i < 60; ++i) EXPECT_NEAR(trace[i].util, 0.10, 0.01) << "period " << i;
}

TEST(ControlStep, ALimitLiftedTurnsTheLimiterOffAndForgetsTheEstimate) {
  ControlEstimate estimate{25};
  ControlInput in;
  in.limit_percent = 0;
  in.period_ns = kPeriod;
  in.launched_mu = 1000;
  in.admitted_mu = 5000;
  in.use.used = 0.5;
  const ControlDecision d = ControlStep(in, &estimate);
  EXPECT_FALSE(d.publish);
  EXPECT_EQ(d.mode, LimiterMode::kOff);
  EXPECT_EQ(estimate.ns_per_mu, 0);

  // Set again, it measures afresh from the next period and converges as before.
  Model m;
  auto trace = RunTrace(&m, 40, [](int i, Model* model) {
    if (i == 15) model->limit = 0;
    if (i == 20) model->limit = 30;
  });
  for (size_t i = 15; i < 20; ++i) EXPECT_EQ(trace[i].decision.mode, LimiterMode::kOff) << i;
  EXPECT_EQ(trace[20].decision.mode, LimiterMode::kClosedLoop);
  // Unpaced, the workload had filled the driver's queue: the first samples after the limit
  // returns see the queue drain and overestimate the cost, so the share comes back from
  // below, never above.
  for (size_t i = 22; i < 40; ++i) EXPECT_LE(trace[i].util, 0.305) << "period " << i;
  for (size_t i = 30; i < 40; ++i) EXPECT_NEAR(trace[i].util, 0.30, 0.005) << "period " << i;
}

TEST(ControlStep, OpenLoopHoldsTheWholeDeviceToTheLimit) {
  // No host PID: the neighbour's 10% counts as the container's, so the container gets 20%.
  Model closed, open;
  closed.neighbour = open.neighbour = 0.10;
  open.host_pid_known = false;
  const auto c = RunTrace(&closed, 40);
  const auto o = RunTrace(&open, 40);
  ExpectPositiveAndBounded(o, open);
  for (size_t i = 10; i < 40; ++i) {
    EXPECT_EQ(o[i].decision.mode, LimiterMode::kOpenLoop);
    EXPECT_EQ(c[i].decision.mode, LimiterMode::kClosedLoop);
    EXPECT_NEAR(c[i].util, 0.30, 0.005) << "period " << i;
    EXPECT_NEAR(o[i].util + open.neighbour, 0.30, 0.01) << "period " << i;
    EXPECT_LT(o[i].decision.rate, c[i].decision.rate) << "open loop only limits more";
  }
}

TEST(ControlStep, OpenLoopBehindANeighbourOverTheLimitStarvesTheContainerButKeepsARate) {
  // The neighbour alone takes more than the limit: every period's sample says the container's
  // launches cost more, and the rate falls, but stays a rate (0 would mean "no rate yet" to
  // the launch path, which would start over at the first guess).
  Model m;
  m.neighbour = 0.50;
  m.host_pid_known = false;
  const auto trace = RunTrace(&m, 200);
  for (size_t i = 1; i < trace.size(); ++i) {
    ASSERT_TRUE(trace[i].decision.publish);
    EXPECT_GT(trace[i].decision.rate, 0u) << "period " << i;
    EXPECT_LE(trace[i].decision.rate, trace[i - 1].decision.rate) << "period " << i;
    EXPECT_LE(trace[i].util, 0.30) << "period " << i;
  }
}

TEST(ControlStep, TheRateIsNeverZero) {
  // A process stopped for minutes while the device stayed busy: one huge sample.
  ControlEstimate estimate;
  ControlInput in;
  in.limit_percent = 1;
  in.period_ns = 600 * kSecondNs;
  in.launched_mu = kMilliUnitsPerWave;
  in.admitted_mu = kMilliUnitsPerWave;
  in.use.used = 1;
  const ControlDecision d = ControlStep(in, &estimate);
  EXPECT_TRUE(d.publish);
  EXPECT_EQ(d.rate, 1u);
}

TEST(ControlStep, NothingLaunchedYetPublishesNothing) {
  Model m;
  m.demand = 0;
  const auto trace = RunTrace(&m, 10);
  for (const auto& p : trace) EXPECT_FALSE(p.decision.publish);
  EXPECT_EQ(m.estimate.ns_per_mu, 0);
}

TEST(ControlStep, LaunchesNvmlHasNotSeenYetStartOnTheFirstGuess) {
  ControlEstimate estimate;
  ControlInput in;
  in.limit_percent = 30;
  in.period_ns = kPeriod;
  in.launched_mu = 1000;
  in.admitted_mu = 1000;
  in.use.used = 0;  // the samples lag the launches
  const ControlDecision d = ControlStep(in, &estimate);
  EXPECT_TRUE(d.publish);
  EXPECT_EQ(d.mode, LimiterMode::kStarting);
  EXPECT_EQ(d.rate, InitialRate(30));
  EXPECT_EQ(d.rate, uint64_t(0.30 * 1e9 / kInitialNsPerMilliUnit));
}

TEST(ControlStep, PeriodsWithoutLaunchesKeepTheRateAndTheEstimate) {
  Model m;
  auto trace = RunTrace(&m, 60, [](int i, Model* model) {
    if (i == 20) model->demand = 0;
    if (i == 40) model->demand = 1;
  });
  const double estimate_before = 20;
  for (size_t i = 21; i < 40; ++i) {
    EXPECT_TRUE(trace[i].decision.publish);
    EXPECT_EQ(trace[i].decision.rate, trace[20].decision.rate) << "period " << i;
    EXPECT_EQ(trace[i].decision.mode, LimiterMode::kClosedLoop);
    EXPECT_EQ(trace[i].util, 0);
  }
  EXPECT_NEAR(m.estimate.ns_per_mu, estimate_before, 0.01);
  for (size_t i = 41; i < 60; ++i) EXPECT_NEAR(trace[i].util, 0.30, 0.005) << "period " << i;
}

TEST(ControlStep, AUseTooSmallToMeasureIsNoSample) {
  ControlEstimate estimate{20};
  ControlInput in;
  in.limit_percent = 30;
  in.period_ns = kPeriod;
  in.launched_mu = 10;
  in.admitted_mu = 1'000'000;
  in.use.used = kMinMeasurableUse / 2;
  const ControlDecision d = ControlStep(in, &estimate);
  EXPECT_EQ(estimate.ns_per_mu, 20);
  EXPECT_EQ(d.rate, uint64_t(0.30 * 1e9 / 20));
}

TEST(ControlStep, NoisySamplesKeepTheRateInABandAroundTheTarget) {
  // NVML's samples off by up to 3 points either way, each period: about 10% of a 30% share.
  Model m;
  m.noise_points = 3;
  const auto trace = RunTrace(&m, 300);
  ExpectPositiveAndBounded(trace, m);
  const double target = m.TargetRate();
  double util_sum = 0;
  for (size_t i = 5; i < trace.size(); ++i) {
    const double rate = double(trace[i].decision.rate);
    EXPECT_NEAR(rate / target, 1.0, 0.15) << "period " << i;
    // One period moves the rate by at most about half a sample's error.
    const double before = double(trace[i - 1].decision.rate);
    EXPECT_LE(std::abs(rate - before) / before, 0.15) << "period " << i;
    EXPECT_NEAR(trace[i].util, 0.30, 0.05) << "period " << i;
    util_sum += trace[i].util;
  }
  EXPECT_NEAR(util_sum / double(trace.size() - 5), 0.30, 0.01) << "on average, the limit";
}

// ---- the token bucket ----

// A clock that only moves when the bucket sleeps.
struct FakeClock {
  int64_t now = 5 * kSecondNs;
  std::vector<int64_t> sleeps;
  std::function<void(int)> on_sleep;  // after the n-th sleep (from 1)

  PaceClock clock() {
    PaceClock c;
    c.arg = this;
    c.now_ns = [](void* arg) { return static_cast<FakeClock*>(arg)->now; };
    c.sleep_ns = [](void* arg, int64_t ns) {
      auto* self = static_cast<FakeClock*>(arg);
      self->sleeps.push_back(ns);
      self->now += ns;
      if (self->on_sleep) self->on_sleep(int(self->sleeps.size()));
    };
    return c;
  }
};

class BucketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    region::PolicySpec spec;
    spec.device_count = 1;
    spec.sm_limit[0] = 30;
    spec.core_policy = region::CorePolicy::kForce;
    auto r =
        region::Region::Open(dir_.File("usage.cache"), &spec, region::Create::kIfMissing, nullptr);
    ASSERT_TRUE(r.ok()) << r.error().message();
    region_ = std::move(r).value();
    ASSERT_EQ(region_->SmLimitInForce(0), 30u);
  }
  LimiterDevice& Lim() { return region_->Limiter(0); }
  // What the launch's fast path does before the slow one: takes the cost.
  int64_t Charge(int64_t cost, FakeClock* clock) {
    Lim().tokens.fetch_sub(cost);
    return PayForLaunch(region_.get(), 0, cost, clock->clock());
  }

  TempDir dir_{"hami-limiter-test"};
  std::unique_ptr<region::Region> region_;
};

TEST_F(BucketTest, TheRefillAddsWhatTheRateEarnedUpToTheBurst) {
  LimiterDevice& lim = Lim();
  lim.rate = 1'000'000;  // milli-units per second
  lim.refill_ns = kSecondNs;
  lim.tokens = 0;
  RefillBucket(lim, kSecondNs + 10'000'000);
  EXPECT_EQ(lim.tokens.load(), 10'000) << "10 ms of the rate";
  RefillBucket(lim, kSecondNs + 10'000'000);
  EXPECT_EQ(lim.tokens.load(), 10'000) << "the same instant adds nothing twice";
  RefillBucket(lim, kSecondNs);
  EXPECT_EQ(lim.tokens.load(), 10'000) << "an earlier instant adds nothing";
  RefillBucket(lim, 3 * kSecondNs);
  EXPECT_EQ(lim.tokens.load(), 1'000'000 * kBurstNs / kSecondNs) << "at most the burst";
  lim.tokens = -40'000;
  RefillBucket(lim, 3 * kSecondNs + 20'000'000);
  EXPECT_EQ(lim.tokens.load(), -20'000) << "a debt is paid back at the rate";
}

TEST_F(BucketTest, AFirstLaunchSetsTheFirstRateAndDoesNotWait) {
  FakeClock clock;
  EXPECT_EQ(Charge(4000, &clock), 0);
  EXPECT_EQ(Lim().rate.load(), InitialRate(30));
  EXPECT_TRUE(clock.sleeps.empty());
  EXPECT_EQ(Lim().admitted.load(), 4000u);
  EXPECT_EQ(Lim().tokens.load(), int64_t(InitialRate(30)) * kBurstNs / kSecondNs)
      << "the bucket starts full";
  EXPECT_EQ(Lim().waited_ns.load(), 0);
}

TEST_F(BucketTest, ADebtWithinTheAllowanceDoesNotWait) {
  FakeClock clock;
  Lim().rate = 1'000'000;
  Lim().refill_ns = clock.now;
  const int64_t allowance = 1'000'000 * kDebtNs / kSecondNs;
  Lim().tokens = -allowance + 1000;
  EXPECT_EQ(Charge(1000, &clock), 0);
  EXPECT_TRUE(clock.sleeps.empty());
  EXPECT_EQ(Lim().tokens.load(), -allowance);
  EXPECT_EQ(Lim().admitted.load(), 1000u);
}

TEST_F(BucketTest, ADebtPastTheAllowanceWaitsUntilItIsPaidInBoundedSleeps) {
  FakeClock clock;
  Lim().rate = 1'000'000;
  Lim().refill_ns = clock.now;
  Lim().tokens = 0;
  // 23 ms of the rate owed after this launch.
  EXPECT_EQ(Charge(23'000, &clock), 23'000'000);
  EXPECT_GE(Lim().tokens.load(), 0) << "paid back";
  ASSERT_FALSE(clock.sleeps.empty());
  int64_t slept = 0;
  for (int64_t s : clock.sleeps) {
    EXPECT_GE(s, kMinSleepNs);
    EXPECT_LE(s, kMaxSleepNs);
    slept += s;
  }
  EXPECT_EQ(slept, 23'000'000) << "exactly the debt at the rate";
  EXPECT_EQ(clock.sleeps.size(), 5u) << "4 x 5 ms and the last 3 ms";
  EXPECT_EQ(Lim().admitted.load(), 23'000u);
  EXPECT_EQ(Lim().waited_ns.load(), 23'000'000);
}

TEST_F(BucketTest, ARateRaisedDuringTheWaitShortensIt) {
  FakeClock clock;
  Lim().rate = 1'000'000;
  Lim().refill_ns = clock.now;
  Lim().tokens = 0;
  clock.on_sleep = [this](int n) {
    if (n == 1) Lim().rate = 10'000'000;  // the controller's next period
  };
  const int64_t waited = Charge(100'000, &clock);  // 100 ms at the first rate
  EXPECT_LT(waited, 20'000'000);
  EXPECT_GE(Lim().tokens.load(), 0);
}

TEST_F(BucketTest, ALimitLiftedDuringTheWaitEndsIt) {
  FakeClock clock;
  Lim().rate = 1'000'000;
  Lim().refill_ns = clock.now;
  Lim().tokens = 0;
  clock.on_sleep = [this](int n) {
    if (n == 2) {
      ASSERT_TRUE(region_->SetSmLimit(0, 0).ok());
    }
  };
  EXPECT_EQ(Charge(1'000'000, &clock), 2 * kMaxSleepNs) << "a second's debt, two sleeps";
  EXPECT_EQ(clock.sleeps.size(), 2u);
  EXPECT_LT(Lim().tokens.load(), 0) << "left owed: the limit is gone";
  EXPECT_EQ(Lim().admitted.load(), 1'000'000u) << "the launch still counts";
}

TEST_F(BucketTest, TheWaitIsChargedToTheProcessSlot) {
  ASSERT_TRUE(region_->Register().ok());
  FakeClock clock;
  Lim().rate = 1'000'000;
  Lim().refill_ns = clock.now;
  Lim().tokens = 0;
  Lim().mode = uint32_t(LimiterMode::kClosedLoop);
  EXPECT_EQ(Charge(10'000, &clock), 10'000'000);
  const region::layout::Slot* slot = region_->OwnSlot();
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->sm_waited_ns.load(), 10'000'000);
  EXPECT_EQ(slot->sm_mode.load(), uint32_t(LimiterMode::kClosedLoop));
  region_->Unregister();
}

}  // namespace
}  // namespace hami::vgpu
