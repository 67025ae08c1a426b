// The probe tier, for hosts with no broker and no trusted procfs: make this process appear in
// NVML's list of processes on its first visible device and see which PID appeared.
//
// Two processes probing one GPU at once would each see the other appear, so probes are
// serialized node-wide by an OFD lock on a file under /tmp/vgpulock (which the device plugin
// shares between containers): the kernel releases it when its holder dies, however it dies,
// and the wait is bounded. A process that already holds a context is listed already; it marks
// itself instead with a small allocation (charged like any other) and looks for the one PID
// whose memory grew by that much. Exactly one candidate or nothing: never a guess.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/clock.h"
#include "common/ofd_lock.h"
#include "common/unique_fd.h"
#include "vgpu/accounting.h"
#include "vgpu/identity.h"

namespace hami::vgpu {
namespace {

constexpr unsigned kMaxListed = 512;

struct Listed {
  unsigned count = 0;
  nvmlProcessInfo_t infos[kMaxListed];
};

bool List(nvmlDevice_t h, Listed* out) {
  Runtime& rt = Rt();
  if (rt.nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) return false;
  unsigned n = kMaxListed;
  if (rt.nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, &n, out->infos) != NVML_SUCCESS) {
    return false;
  }
  out->count = std::min(n, kMaxListed);
  return true;
}

const nvmlProcessInfo_t* Find(const Listed& l, unsigned pid) {
  for (unsigned i = 0; i < l.count; ++i) {
    if (l.infos[i].pid == pid) return &l.infos[i];
  }
  return nullptr;
}

uint64_t Used(const nvmlProcessInfo_t& p) {
  return p.usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)
             ? 0
             : p.usedGpuMemory;
}

// Takes the node-wide probe lock before `deadline_ns`. The directory is made when missing
// (a host without the device plugin's preparation). Returns the locked descriptor, an
// invalid one when no lock file can be had at all (the probe then runs unserialized and
// relies on its exactly-one-candidate rule), or sets *timed_out.
UniqueFd TakeProbeLock(const std::string& path, int64_t deadline_ns, bool* timed_out) {
  *timed_out = false;
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (!fd.valid() && errno == ENOENT) {
    std::string dir = path.substr(0, path.rfind('/'));
    if (!dir.empty() && mkdir(dir.c_str(), 01777) == 0) chmod(dir.c_str(), 01777);
    fd.Reset(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666));
  }
  if (!fd.valid()) {
    g_log.Log(LogLevel::kWarn, "identity probe: cannot open the lock file %s: %s; probing unlocked",
              path.c_str(), std::strerror(errno));
    return fd;
  }
  fchmod(fd.get(), 0666);  // every container's user may take it (best effort)
  int64_t pause_ns = 1'000'000;
  for (;;) {
    int err = OfdLockByte(fd.get(), 0, F_WRLCK, LockWait::kNo);
    if (err == 0) return fd;
    if (err != EAGAIN && err != EACCES) {
      g_log.Log(LogLevel::kWarn, "identity probe: cannot lock %s: %s; probing unlocked",
                path.c_str(), std::strerror(err));
      return UniqueFd();
    }
    const int64_t now = MonotonicNs();
    if (now >= deadline_ns) {
      *timed_out = true;
      return UniqueFd();
    }
    SleepForNs(std::min(pause_ns, deadline_ns - now));
    pause_ns = std::min<int64_t>(pause_ns * 2, 20'000'000);
  }
}

// The PIDs listed in `after` but not in `before`.
unsigned NewPids(const Listed& before, const Listed& after, unsigned* first) {
  unsigned n = 0;
  for (unsigned i = 0; i < after.count; ++i) {
    if (Find(before, after.infos[i].pid) == nullptr) {
      if (n++ == 0) *first = after.infos[i].pid;
    }
  }
  return n;
}

// With this process already listed: allocate a marker in `ctx` and find the one PID whose
// memory grew by at least its size.
IdentityReason MarkAndFind(CUcontext ctx, int ordinal, nvmlDevice_t h, pid_t* out) {
  Runtime& rt = Rt();
  if (rt.cuda_aux.cuCtxPushCurrent_v2 == nullptr || rt.cuda_aux.cuCtxPopCurrent_v2 == nullptr ||
      rt.cuda.cuMemAlloc_v2 == nullptr || rt.cuda.cuMemFree_v2 == nullptr) {
    return IdentityReason::kNoDriver;
  }
  const uint64_t marker = 2 * Granularity(ordinal);
  if (!Admit(ordinal, marker, UsageKind::kOther)) return IdentityReason::kBusy;
  IdentityReason reason = IdentityReason::kDriverError;
  if (rt.cuda_aux.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
    Listed before, after;
    CUdeviceptr p = 0;
    if (List(h, &before)) {
      CUresult r;
      {
        Allocating allocating;
        r = rt.cuda.cuMemAlloc_v2(&p, marker);
      }
      if (r == CUDA_SUCCESS) {
        if (List(h, &after)) {
          unsigned found = 0, candidate = 0;
          for (unsigned i = 0; i < after.count; ++i) {
            const nvmlProcessInfo_t* was = Find(before, after.infos[i].pid);
            const uint64_t grew =
                Used(after.infos[i]) - std::min(Used(after.infos[i]), was ? Used(*was) : 0);
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
        Allocating allocating;
        rt.cuda.cuMemFree_v2(p);
      }
    }
    CUcontext popped;
    rt.cuda_aux.cuCtxPopCurrent_v2(&popped);
  }
  Return(ordinal, marker, UsageKind::kOther);
  return reason;
}

}  // namespace

TierOutcome ProbeTier(const Config& config) {
  TierOutcome o;
  Runtime& rt = Rt();
  o.reason = IdentityReason::kNoDriver;
  if (!EnsureCudaLoaded() || !NvmlReady() || rt.cuda_aux.cuDeviceGet == nullptr ||
      rt.cuda.cuDevicePrimaryCtxRetain == nullptr ||
      (rt.cuda.cuDevicePrimaryCtxRelease_v2 == nullptr &&
       rt.cuda.cuDevicePrimaryCtxRelease == nullptr)) {
    return o;
  }
  // The first device this process sees, whatever CUDA_VISIBLE_DEVICES says: its NVML handle
  // is matched by UUID.
  CUdevice dev;
  nvmlDevice_t h = NvmlHandleOf(0);
  if (h == nullptr || rt.cuda_aux.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return o;

  bool timed_out = false;
  UniqueFd lock = TakeProbeLock(
      config.probe_lock, MonotonicNs() + int64_t(config.probe_wait_ms) * 1'000'000, &timed_out);
  if (timed_out) {
    o.reason = IdentityReason::kLockTimeout;
    return o;
  }

  o.reason = IdentityReason::kDriverError;
  Listed before;
  if (!List(h, &before)) return o;
  // Listed under its own PID: NVML sees this process's PID namespace.
  if (Find(before, unsigned(getpid())) != nullptr) {
    o.host_pid = getpid();
    o.reason = IdentityReason::kNone;
    return o;
  }
  bool held_context;
  {
    std::lock_guard<std::mutex> l(rt.mu);
    held_context = !rt.contexts.empty();
  }
  held_context = held_context || PrimaryActive(dev);

  CUcontext ctx = nullptr;
  CUresult r =
      CreateContext(dev, &ctx, true, [&] { return rt.cuda.cuDevicePrimaryCtxRetain(&ctx, dev); });
  if (r != CUDA_SUCCESS) return o;
  Listed after;
  if (List(h, &after)) {
    unsigned candidate = 0;
    const unsigned appeared = NewPids(before, after, &candidate);
    if (appeared == 1) {
      o.host_pid = pid_t(candidate);
      o.reason = IdentityReason::kNone;
    } else if (appeared > 1) {
      o.reason = IdentityReason::kAmbiguous;
    } else if (held_context) {
      o.reason = MarkAndFind(ctx, 0, h, &o.host_pid);
    } else {
      o.reason = IdentityReason::kNotFound;
    }
  }
  r = rt.cuda.cuDevicePrimaryCtxRelease_v2 != nullptr ? rt.cuda.cuDevicePrimaryCtxRelease_v2(dev)
                                                      : rt.cuda.cuDevicePrimaryCtxRelease(dev);
  if (r == CUDA_SUCCESS) PrimaryMayHaveEnded(dev);
  return o;
}

}  // namespace hami::vgpu
