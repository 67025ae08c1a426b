// The probe tier, for hosts with no broker and no trusted procfs: make this process appear in
// NVML's list of processes on its first visible device and see which PID appeared.
//
// Two processes probing one GPU at once would each see the other appear, so probes are
// serialized node-wide by the probe lock (probe_lock.h), a file under /tmp/vgpulock (which
// the device plugin shares between containers): the release wakes the next waiter, the kernel
// frees the lock when its holder dies, however it dies, and the wait is bounded. A process
// that already holds a context is listed already; it marks itself instead with a small
// allocation (charged like any other) and looks for the one PID whose memory grew by that
// much. Exactly one candidate or nothing: never a guess.
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "limits/vocabulary.h"
#include "vgpu/accounting.h"
#include "vgpu/identity.h"
#include "vgpu/probe_lock.h"

namespace hami::vgpu {
namespace {

// Takes the node-wide probe lock (probe_lock.h), waiting while its holders keep changing.
// Returns false when the wait gave up (a stuck holder, or the hard bound). A lock file that
// cannot be had at all leaves `lock` unheld and returns true: the probe then runs
// unserialized and relies on its exactly-one-candidate rule.
bool TakeProbeLock(const Config& config, ProbeLock* lock) {
  ProbeLockReport report;
  const ProbeLockOptions options = ProbeLockOptions::ForWaitMs(config.probe_wait_ms);
  *lock = ProbeLock::Acquire(config.probe_lock, options, &report);
  switch (report.outcome) {
    case ProbeLockOutcome::kAcquired:
      return true;
    case ProbeLockOutcome::kUnavailable:
      g_log.Log(LogLevel::kWarn, "identity probe: %s; probing unlocked", report.error.c_str());
      return true;
    case ProbeLockOutcome::kStalled:
      g_log.Log(LogLevel::kInfo,
                "identity probe: gave up on the lock %s after %.1f ms: its holder kept it %u ms "
                "without a change (%s)",
                config.probe_lock.c_str(), double(report.waited_ns) / 1e6, config.probe_wait_ms,
                limits::KeyName(limits::Key::kIdentityProbeWaitMs));
      return false;
    case ProbeLockOutcome::kBoundReached:
      g_log.Log(LogLevel::kInfo,
                "identity probe: gave up on the lock %s after %.1f ms in its queue (%u changes "
                "of holder; at most %lld x %s)",
                config.probe_lock.c_str(), double(report.waited_ns) / 1e6, report.holder_changes,
                static_cast<long long>(kProbeLockBoundFactor),
                limits::KeyName(limits::Key::kIdentityProbeWaitMs));
      return false;
  }
  return false;
}

// The PIDs listed in `after` but not in `before`.
unsigned NewPids(const ListedProcesses& before, const ListedProcesses& after, unsigned* first) {
  unsigned n = 0;
  for (unsigned i = 0; i < after.count; ++i) {
    if (before.Find(after.infos[i].pid) == nullptr) {
      if (n++ == 0) *first = after.infos[i].pid;
    }
  }
  return n;
}

// With this process already listed: allocate a marker in `ctx` and find the one PID whose
// memory grew by at least its size.
IdentityReason MarkAndFind(Runtime& rt, CUcontext ctx, int ordinal, nvmlDevice_t h, pid_t* out) {
  const CudaDriver* d = rt.CudaIfLoaded();
  if (d == nullptr) return IdentityReason::kNoDriver;
  const CudaDriver& drv = *d;
  if (drv.aux.cuCtxPushCurrent_v2 == nullptr || drv.aux.cuCtxPopCurrent_v2 == nullptr ||
      drv.cuda.cuMemAlloc_v2 == nullptr || drv.cuda.cuMemFree_v2 == nullptr) {
    return IdentityReason::kNoDriver;
  }
  const uint64_t marker = 2 * Granularity(rt, ordinal);
  if (!Admit(rt, ordinal, marker, UsageKind::kOther)) return IdentityReason::kBusy;
  IdentityReason reason = IdentityReason::kDriverError;
  if (drv.aux.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
    auto before_owner = std::make_unique<ListedProcesses>();
    auto after_owner = std::make_unique<ListedProcesses>();
    ListedProcesses& before = *before_owner;
    ListedProcesses& after = *after_owner;
    CUdeviceptr p = 0;
    if (ListProcesses(rt, h, &before)) {
      CUresult r;
      {
        Allocating allocating(rt);
        r = drv.cuda.cuMemAlloc_v2(&p, marker);
      }
      if (r == CUDA_SUCCESS) {
        if (ListProcesses(rt, h, &after)) {
          unsigned found = 0, candidate = 0;
          for (unsigned i = 0; i < after.count; ++i) {
            const nvmlProcessInfo_t* was = before.Find(after.infos[i].pid);
            const uint64_t grew = UsedMemory(after.infos[i]) -
                                  std::min(UsedMemory(after.infos[i]), was ? UsedMemory(*was) : 0);
            if (grew >= marker) {
              ++found;
              candidate = after.infos[i].pid;
            }
          }
          reason = found == 1   ? IdentityReason::kNone
                   : found == 0 ? IdentityReason::kNotFound
                                : IdentityReason::kAmbiguous;
          if (found == 1) *out = pid_t(candidate);
        }
        Allocating allocating(rt);
        drv.cuda.cuMemFree_v2(p);
      }
    }
    CUcontext popped;
    drv.aux.cuCtxPopCurrent_v2(&popped);
  }
  Return(rt, ordinal, marker, UsageKind::kOther);
  return reason;
}

}  // namespace

TierOutcome ProbeTier(Runtime& rt, const Config& config) {
  TierOutcome o;
  o.reason = IdentityReason::kNoDriver;
  const CudaDriver* d = rt.Cuda();
  if (d == nullptr) return o;
  const CudaDriver& drv = *d;
  if (!rt.NvmlReady() || drv.aux.cuDeviceGet == nullptr ||
      drv.cuda.cuDevicePrimaryCtxRetain == nullptr ||
      (drv.cuda.cuDevicePrimaryCtxRelease_v2 == nullptr &&
       drv.cuda.cuDevicePrimaryCtxRelease == nullptr)) {
    return o;
  }
  // The first device this process sees, whatever CUDA_VISIBLE_DEVICES says: its NVML handle
  // is matched by UUID.
  CUdevice dev;
  nvmlDevice_t h = NvmlHandleOf(rt, 0);
  if (h == nullptr || drv.aux.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return o;

  ProbeLock lock;  // released (and handed on) when the probe returns
  if (!TakeProbeLock(config, &lock)) {
    o.reason = IdentityReason::kLockTimeout;
    return o;
  }

  o.reason = IdentityReason::kDriverError;
  // The lists are 12 KiB each: on the heap, not on the application's thread's stack.
  auto before_owner = std::make_unique<ListedProcesses>();
  ListedProcesses& before = *before_owner;
  if (!ListProcesses(rt, h, &before)) return o;
  // Listed under its own PID: NVML sees this process's PID namespace.
  if (before.Find(unsigned(getpid())) != nullptr) {
    o.host_pid = getpid();
    o.reason = IdentityReason::kNone;
    return o;
  }
  const bool held_context = rt.ledger.AnyContext() || PrimaryActive(rt, dev);

  CUcontext ctx = nullptr;
  CUresult r = CreateContext(rt, dev, &ctx, true,
                             [&] { return drv.cuda.cuDevicePrimaryCtxRetain(&ctx, dev); });
  if (r != CUDA_SUCCESS) return o;
  auto after_owner = std::make_unique<ListedProcesses>();
  ListedProcesses& after = *after_owner;
  if (ListProcesses(rt, h, &after)) {
    unsigned candidate = 0;
    const unsigned appeared = NewPids(before, after, &candidate);
    if (appeared == 1) {
      o.host_pid = pid_t(candidate);
      o.reason = IdentityReason::kNone;
    } else if (appeared > 1) {
      o.reason = IdentityReason::kAmbiguous;
    } else if (held_context) {
      o.reason = MarkAndFind(rt, ctx, 0, h, &o.host_pid);
    } else {
      o.reason = IdentityReason::kNotFound;
    }
  }
  r = drv.cuda.cuDevicePrimaryCtxRelease_v2 != nullptr ? drv.cuda.cuDevicePrimaryCtxRelease_v2(dev)
                                                       : drv.cuda.cuDevicePrimaryCtxRelease(dev);
  if (r == CUDA_SUCCESS) PrimaryMayHaveEnded(rt, dev);
  return o;
}

}  // namespace hami::vgpu
