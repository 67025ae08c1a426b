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
//
// Pause and suspend: a launch waits (futex, no CPU) while the region's `paused` flag is set or
// this process's slot is suspended; an allocation waits while suspended.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "vgpu/accounting.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {

inline constexpr int64_t kPeriodNs = 100'000'000;
inline constexpr int64_t kBurstNs = 50'000'000;
inline constexpr int64_t kDebtNs = 2'000'000;
inline constexpr int64_t kMaxSleepNs = 5'000'000;

// The cost of a launch of `blocks` blocks of `threads` threads on CUDA ordinal `ordinal`.
int64_t LaunchCost(int ordinal, uint64_t blocks, uint64_t threads);

// The slow paths.
void WaitWhileHeld(region::Region* reg, bool launch);
void PaceSlow(region::Region* reg, int index, int64_t cost);

// Whether any device of the region may be limited (cached per policy generation).
bool AnyLimitSlow(region::Region* reg, uint64_t generation);
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
inline int LimitedDevice(region::Region* reg, CUstream stream, int* ordinal) {
  Runtime& rt = Rt();
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
    if (!AnyLimitSlow(reg, generation)) return -1;
  } else if (!rt.any_sm_limit.load(std::memory_order_relaxed)) {
    return -1;  // no device is limited at this generation of the policy
  }
  if (StreamDevice(stream, ordinal) != CUDA_SUCCESS) return -1;  // the driver will say why
  const int index = RegionIndex(*ordinal);
  if (index < 0 || reg->SmLimitInForce(index) == 0) return -1;
  return index;
}

// Charges `cost` to the container's budget on region device `index`.
inline void ChargeLaunch(region::Region* reg, int index, int64_t cost) {
  region::layout::LimiterDevice& lim = reg->Limiter(index);
  if (lim.tokens.fetch_sub(cost, std::memory_order_relaxed) - cost >= 0 &&
      lim.rate.load(std::memory_order_relaxed) != 0) {
    lim.admitted.fetch_add(uint64_t(cost), std::memory_order_relaxed);
    return;
  }
  PaceSlow(reg, index, cost);
}

// Before a launch of `blocks` blocks of `threads` threads on `stream`.
inline void PaceLaunch(CUstream stream, uint64_t blocks, uint64_t threads) {
  region::Region* reg = Rt().region_fast.load(std::memory_order_acquire);
  if (reg == nullptr) return;
  int ordinal;
  const int index = LimitedDevice(reg, stream, &ordinal);
  if (index >= 0) ChargeLaunch(reg, index, LaunchCost(ordinal, blocks, threads));
}

// Before an allocation: waits while this process is suspended.
inline void GateAllocation() {
  region::Region* reg = Rt().region_fast.load(std::memory_order_acquire);
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
int64_t GraphLaunchCost(CUgraphExec exec, int ordinal);
// Records the kernel nodes of a new executable graph / forgets a destroyed one.
void LearnGraphKernels(CUgraphExec exec, CUgraph graph);
void ForgetGraphKernels(CUgraphExec exec);

// Before a graph launch: as PaceLaunch, with the graph's cost.
void PaceGraphLaunch(CUgraphExec exec, CUstream stream);

}  // namespace hami::vgpu
