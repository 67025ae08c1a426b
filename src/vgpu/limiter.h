// The compute (SM) limiter: every launch path charges its launch to the container's budget on
// the launch's device before the driver sees it, and waits (short, bounded sleeps) while the
// budget is owed. One controller per container and device sets the budget's rate from the
// container's measured SM utilization, so that the container's total converges to its limit.
//
// Cost model: a launch costs its waves, where a wave fills every SM of the device once:
//   waves = ceil(blocks / (SMs x blocks_per_SM)), blocks_per_SM = max_threads_per_SM /
//   threads_per_block (rounded up to a warp), at least 1
// in milli-units (kMilliUnitsPerWave per wave). The SM count divides out, so the controller's
// gain does not depend on it. A graph launch costs the sum of its kernel nodes.
//
// Budget: a token bucket in the region (layout::LimiterDevice), refilled at `rate` milli-units
// per second, holding at most kBurstNs of it. A launch takes its cost first; the bucket may
// be owed up to kDebtNs of the rate (launches go on, queued by the driver), and past that the
// launch sleeps until the refill has paid everything back (at most kMaxSleepNs at a time,
// re-checking the limit, which may be lifted meanwhile). Sleeping for the whole debt at once
// keeps wake-ups to a few hundred a second whatever the launch rate.
//
// Controller: a thread of one process per container and device (the holder of the region's
// limiter lock for the device; another process takes over when it dies) wakes every
// kPeriodNs, reads the SM utilization of the period from NVML by process, adds up the
// container's processes (joined to slots by host PID), estimates what a milli-unit costs in
// device time (utilization x period / milli-units launched), and sets rate = limit / that
// cost. When a process of the container has no host PID, the whole device's utilization
// stands in (open loop: it can only over-estimate the container's use, so it limits more).
// NVML is queried only there: never on a launch path, never under a cross-process lock.
// The arithmetic of a period is pure (MeasurePeriod, ControlStep below): the thread only
// gathers its inputs and publishes its decision.
//
// Pause and suspend: a launch waits (futex, no CPU) while the region's `paused` flag is set or
// this process's slot is suspended; an allocation waits while suspended.
#pragma once

#include <cuda.h>
#include <sys/types.h>

#include <cstdint>
#include <span>

#include "vgpu/accounting.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {

inline constexpr int64_t kPeriodNs = 100'000'000;
inline constexpr int64_t kBurstNs = 50'000'000;
inline constexpr int64_t kDebtNs = 2'000'000;
inline constexpr int64_t kMaxSleepNs = 5'000'000;
inline constexpr int64_t kMinSleepNs = 20'000;

// Before the first measurement a milli-unit is taken to cost this much device time: a
// 100 us wave, longer than most, so that a new container starts under its limit.
inline constexpr double kInitialNsPerMilliUnit = 100.0;
// A period whose utilization is below this fraction of the device says nothing about cost.
inline constexpr double kMinMeasurableUse = 0.005;
// Each period's cost sample moves the estimate this far (an exponential average).
inline constexpr double kEstimateGain = 0.5;

// ---- cost (pure) ----

// The cost in milli-units of a launch of `blocks` blocks of `threads` threads on a device of
// `sms` SMs of `threads_per_sm` threads each. A device shape of 0 counts as 1 SM of one block;
// every launch costs at least one wave.
int64_t WaveCost(uint32_t sms, uint32_t threads_per_sm, uint64_t blocks, uint64_t threads);

// The cost of a launch of `blocks` blocks of `threads` threads on CUDA ordinal `ordinal`: its
// WaveCost on the device's shape, asked of the driver once per ordinal and cached (1 SM of 32
// threads when the driver cannot say).
int64_t LaunchCost(Runtime& rt, int ordinal, uint64_t blocks, uint64_t threads);

// ---- the controller's step (pure: the controller thread feeds it NVML's samples) ----

// One NVML utilization sample: a process, by host PID, and its SM utilization in percent.
struct UtilSample {
  unsigned pid = 0;
  unsigned sm_percent = 0;
};

// A live process of the container, by its region slot.
struct ContainerProcess {
  int slot = -1;
  pid_t pid = 0;       // in its own PID namespace
  pid_t host_pid = 0;  // 0: unknown
  bool launched = false;
};

// The period's use of the device as the controller measures it.
struct PeriodUse {
  double used = 0;        // fraction of the device: the container's (closed) or the device's
  bool closed = true;     // false: open loop, the whole device's utilization stands in
  pid_t unknown_pid = 0;  // open loop: a launching process without a host PID (0: none)
};

// Adds up the period's samples (the first 256): each process's samples are averaged, the
// container's total is the sum over its processes joined by host PID, and `sm_percent_out` (one per
// process, same order) gets each process's average (-1 when it has no sample). The loop is open
// when a process that launched has no host PID, or when per-process samples are missing and
// `device_percent` (the whole device's utilization, >= 0) stands in. `device_percent` < 0:
// per-process samples exist.
PeriodUse MeasurePeriod(std::span<const UtilSample> samples,
                        std::span<const ContainerProcess> processes, double device_percent,
                        std::span<double> sm_percent_out);

// What the controller knows between periods: what a milli-unit costs in device time.
struct ControlEstimate {
  double ns_per_mu = 0;  // 0: not measured yet
};

// One period's inputs.
struct ControlInput {
  uint32_t limit_percent = 0;  // the limit in force (0: none)
  int64_t period_ns = 0;       // since the previous step
  uint64_t launched_mu = 0;    // milli-units admitted during the period
  uint64_t admitted_mu = 0;    // milli-units admitted ever (0: nothing launched yet)
  PeriodUse use;
};

// What the controller publishes for the period.
struct ControlDecision {
  bool publish = false;  // false: the bucket is left as it is (no limit, or nothing launched)
  uint64_t rate = 0;     // milli-units per second
  region::LimiterMode mode = region::LimiterMode::kOff;
  uint32_t measured = 0;  // `use.used` in percent x 100
};

// The controller's step: a period that used some of the device and launched something
// gives a cost sample (used x period / launched), averaged into `estimate` with kEstimateGain;
// the rate is the limit over the estimate (kInitialNsPerMilliUnit before any sample), at
// least 1 (0 is "no rate yet" to the launch path). No limit: the estimate is forgotten and
// the mode is kOff. Pure.
ControlDecision ControlStep(const ControlInput& in, ControlEstimate* estimate);

// The rate a bucket starts at before the controller's first decision.
uint64_t InitialRate(uint32_t limit_percent);

// ---- the budget (a token bucket in the region) ----

// Where the budget's wait reads the time and sleeps. Null functions: CLOCK_MONOTONIC and
// clock_nanosleep. Tests inject their own.
struct PaceClock {
  int64_t (*now_ns)(void* arg) = nullptr;
  void (*sleep_ns)(void* arg, int64_t ns) = nullptr;
  void* arg = nullptr;
};

// Adds what the rate has earned since the bucket's latest refill at `now_ns`, up to kBurstNs
// of it (elapsed time counts at most 10 s). Only the caller that moves refill_ns forward adds.
void RefillBucket(region::layout::LimiterDevice& lim, int64_t now_ns);

// A launch of `cost` on region device `index` whose charge left the bucket owed or found no
// rate: sets the first rate (InitialRate) when none is set, refills, and when the bucket is
// owed past kDebtNs of the rate, sleeps (each sleep the time the refill needs to pay the debt
// back, between kMinSleepNs and kMaxSleepNs) until the debt is paid or the limit is lifted, waiting
// while the container is paused. Then counts `cost` as admitted, and the time waited in the
// bucket and this process's slot. Returns the time waited (by `clock`). Starts no thread.
int64_t PayForLaunch(region::Region* reg, int index, int64_t cost, const PaceClock& clock = {});

// The slow paths.
void WaitWhileHeld(region::Region* reg, bool launch);
// PayForLaunch, after starting the process's controller thread if it is not running.
void PaceSlow(Runtime& rt, region::Region* reg, int index, int64_t cost);

// Whether any device of the region may be limited (cached per policy generation).
bool AnyLimitSlow(Runtime& rt, region::Region* reg, uint64_t generation);
// Records launch activity for a node agent and the controller: adds `launches` to this
// process's slot and stamps the slot's and the container's latest-kernel time.
void NoteActivity(region::Region* reg, uint32_t launches);
// Launches of this thread, flushed to the slot at the first, every kActivityBatch, and
// whenever the container's recent-kernel counter reads 0: the node agent's feedback loop
// decays it every few seconds and takes 0 for an idle container, so a thread launching
// fewer than kActivityBatch kernels between two decays must still say it is active.
inline constexpr uint32_t kActivityBatch = 256;
__attribute__((tls_model("initial-exec"))) inline constinit thread_local uint32_t t_launches = 0;
__attribute__((tls_model("initial-exec"))) inline constinit thread_local uint32_t t_noted = 0;

// The gates every launch passes (pause, suspend), then the region index of the launch's
// device when a compute limit is in force there (-1: nothing to charge). Inline fast path:
// with no limit anywhere, a few relaxed loads.
inline int LimitedDevice(Runtime& rt, region::Region* reg, CUstream stream, int* ordinal) {
  if (const uint32_t n = ++t_launches;
      __builtin_expect(n - t_noted >= kActivityBatch || t_noted == 0 ||
                           reg->file().policy.recent_kernel.load(std::memory_order_relaxed) == 0,
                       0)) {
    NoteActivity(reg, n - t_noted);
    t_noted = n;
  }
  if (__builtin_expect(reg->PausedWord().load(std::memory_order_relaxed) != 0, 0)) {
    WaitWhileHeld(reg, true);
  }
  if (std::atomic<uint32_t>* status = reg->OwnStatusWord();
      status != nullptr &&
      __builtin_expect(
          status->load(std::memory_order_relaxed) != uint32_t(region::SlotStatus::kRunning), 0)) {
    WaitWhileHeld(reg, true);
  }
  const uint64_t generation = reg->file().policy.generation.load(std::memory_order_relaxed);
  if (generation != rt.limits_generation.load(std::memory_order_acquire)) {
    if (!AnyLimitSlow(rt, reg, generation)) return -1;
  } else if (!rt.any_sm_limit.load(std::memory_order_relaxed)) {
    return -1;  // no device is limited at this generation of the policy
  }
  if (StreamDevice(rt, stream, ordinal) != CUDA_SUCCESS) return -1;  // the driver will say why
  const int index = RegionIndex(rt, *ordinal);
  if (index < 0 || reg->SmLimitInForce(index) == 0) return -1;
  return index;
}

// Charges `cost` to the container's budget on region device `index`.
inline void ChargeLaunch(Runtime& rt, region::Region* reg, int index, int64_t cost) {
  region::layout::LimiterDevice& lim = reg->Limiter(index);
  if (lim.tokens.fetch_sub(cost, std::memory_order_relaxed) - cost >= 0 &&
      lim.rate.load(std::memory_order_relaxed) != 0) {
    lim.admitted.fetch_add(uint64_t(cost), std::memory_order_relaxed);
    return;
  }
  PaceSlow(rt, reg, index, cost);
}

// Before a launch of `blocks` blocks of `threads` threads on `stream`.
inline void PaceLaunch(Runtime& rt, CUstream stream, uint64_t blocks, uint64_t threads) {
  region::Region* reg = rt.region_fast.load(std::memory_order_acquire);
  if (reg == nullptr) return;
  int ordinal;
  const int index = LimitedDevice(rt, reg, stream, &ordinal);
  if (index >= 0) ChargeLaunch(rt, reg, index, LaunchCost(rt, ordinal, blocks, threads));
}

// Before an allocation: waits while this process is suspended.
inline void GateAllocation(Runtime& rt) {
  region::Region* reg = rt.region_fast.load(std::memory_order_acquire);
  if (reg == nullptr) return;
  std::atomic<uint32_t>* status = reg->OwnStatusWord();
  if (status != nullptr &&
      __builtin_expect(
          status->load(std::memory_order_relaxed) != uint32_t(region::SlotStatus::kRunning), 0)) {
    WaitWhileHeld(reg, false);
  }
}

// The cost of a launch of graph `exec` on CUDA ordinal `ordinal` (its kernel nodes, learned
// at instantiation; 0 when unknown).
int64_t GraphLaunchCost(Runtime& rt, CUgraphExec exec, int ordinal);
// Records the kernel nodes of a new executable graph / forgets a destroyed one.
void LearnGraphKernels(Runtime& rt, CUgraphExec exec, CUgraph graph);
void ForgetGraphKernels(Runtime& rt, CUgraphExec exec);

// Before a graph launch: as PaceLaunch, with the graph's cost.
void PaceGraphLaunch(Runtime& rt, CUgraphExec exec, CUstream stream);

}  // namespace hami::vgpu
