// The watcher: one thread in every process that has joined its container's region, for what
// interposition cannot stop but can see.
//
// - The region's file: the thread watches it (inotify: unlinked, renamed, replaced by a
//   rename over it, truncated) and checks it once a period whatever inotify says
//   (Region::VerifyFile). When the path no longer names the file the process mapped, the
//   container's processes no longer share one budget: from the next admission on, every
//   accounted allocation of this process is refused (CUDA_ERROR_OUT_OF_MEMORY), and it says so
//   whatever the log level. A fork child whose parent's file was replaced is refused too.
// - The NVML cross-check (region/crosscheck.h), every kCrossCheckPeriodNs, by one process per
//   container and device (the holder of the region's cross-check lock for the device; another
//   takes over when it dies), while a memory limit is in force: what NVML shows each of the
//   container's processes holding (by host PID) against its slot's books. A gap (counters
//   edited, a driver loaded with dlmopen, a static helper, raw ioctls) is recorded in the slot
//   and the device, logged once per gap at every log level, and with
//   HAMI_UNACCOUNTED_POLICY=suspend it refuses the container's allocations on the device
//   while it lasts (UnaccountedRefusal).
// - The policy: a region whose memory limit differs from the one this process was given
//   (edited in the file, or set by `hami region set`) is recorded as a conflict (once per
//   value) for `hami inspect`; the process holds to the stricter either way.
//
// The thread blocks every signal, holds no lock of libvgpu across NVML, and never runs on an
// allocation or launch path: admission reads one process-local flag and, only while a gap is
// recorded, the device's check time.
#pragma once

#include "vgpu/runtime.h"

namespace hami::vgpu {

// Starts this process's watcher (again in a fork child that joins). A thread that cannot be
// started is said at every log level; admission goes on, refusing nothing for want of it (the
// region's own books still hold the limit).
void StartWatcher(Runtime& rt);

// The thread starts at the process's first admission (a context or memory), not at the join:
// a process that never creates a context or allocates (a tool that lists devices, a framework
// probing for a GPU) has nothing on the GPU for it to watch and pays for no thread. The
// admission that starts it first checks the region's file itself, so that a file replaced
// before the thread existed is refused from that admission on, reclaims dead processes'
// slots when a sweep is due and records the slot's start time (the join does neither:
// region.h). The cross-check of a container
// is led by one of its processes that has admitted something.
void StartWatcherForAdmission(Runtime& rt);
inline void EnsureWatcher(Runtime& rt) {
  if (__builtin_expect(!rt.watcher_started.load(std::memory_order_relaxed), 0)) {
    StartWatcherForAdmission(rt);
  }
}

// Whether an admission on region device `index` is refused because of what the watcher
// found: the region's file was replaced (always), or a gap stands on the device and this
// process's policy is suspend. Says why the first time of each episode.
bool WatcherRefuses(Runtime& rt, int index);

}  // namespace hami::vgpu
