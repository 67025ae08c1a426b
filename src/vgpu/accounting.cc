#include "vgpu/accounting.h"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "common/proc.h"
#include "vgpu/identity.h"
#include "vgpu/imports.h"
#include "vgpu/limiter.h"
#include "vgpu/spill.h"
#include "vgpu/watch.h"

namespace hami::vgpu {

namespace {

constexpr uint64_t kDefaultGranularity = 2ull << 20;

}  // namespace

Books BooksFor(Runtime& rt, int ordinal) {
  uint32_t state = rt.join_state.load(std::memory_order_acquire);
  while (state == uint32_t(JoinState::kJoining)) {
    rt.join_state.wait(state, std::memory_order_acquire);
    state = rt.join_state.load(std::memory_order_acquire);
  }
  // Refused: no region at all, no slot, no initialization through cuInit, or a device the
  // container's region was not made for (MapToRegionLocked said which).
  const bool in_region = RegionIndex(rt, ordinal) >= 0;
  return state == uint32_t(JoinState::kJoined) && in_region ? Books::kAccounted : Books::kRefused;
}

namespace {

// A refusal because the process never initialized is said once (a refusal for want of a
// slot was said when the join failed).
void NoteRefused(Runtime& rt) {
  if (rt.join_state.load(std::memory_order_acquire) == uint32_t(JoinState::kNotYet) &&
      !rt.refusal_logged.exchange(true, std::memory_order_relaxed)) {
    g_log.Log(LogLevel::kError,
              "an allocation was made before this process initialized CUDA through cuInit, so "
              "it cannot be accounted; it is refused (CUDA_ERROR_OUT_OF_MEMORY)");
  }
}

}  // namespace

namespace {

// Reserves in the region for a device known to be accounted (the gate already passed),
// unless the watcher holds it back (a replaced region file, a gap under the suspend policy).
bool ReserveAccounted(Runtime& rt, int ordinal, uint64_t bytes, UsageKind kind) {
  if (bytes == 0) return true;
  region::Region* reg = ViewRegion(rt);
  const int index = RegionIndex(rt, ordinal);
  return reg != nullptr && !WatcherRefuses(rt, index) &&
         reg->Reserve(index, bytes, kind) == region::Admission::kOk;
}

}  // namespace

bool Admit(Runtime& rt, int ordinal, uint64_t bytes, UsageKind kind) {
  GateAllocation(rt);
  // A context of no measured size still starts the watcher.
  if (bytes == 0) {
    if (BooksFor(rt, ordinal) == Books::kAccounted) EnsureWatcher(rt);
    return true;
  }
  switch (BooksFor(rt, ordinal)) {
    case Books::kRefused:
      NoteRefused(rt);
      return false;
    case Books::kAccounted:
      break;
  }
  EnsureWatcher(rt);
  return ReserveAccounted(rt, ordinal, bytes, kind);
}

void Record(Runtime& rt, int ordinal, uint64_t bytes, UsageKind kind) {
  if (bytes == 0 || BooksFor(rt, ordinal) != Books::kAccounted) return;
  if (region::Region* reg = ViewRegion(rt)) {
    reg->Reserve(RegionIndex(rt, ordinal), bytes, kind, region::Region::Enforce::kNone);
  }
}

void Return(Runtime& rt, int ordinal, uint64_t bytes, UsageKind kind) {
  region::Region* reg = ViewRegion(rt);
  int index = RegionIndex(rt, ordinal);
  if (reg != nullptr && index >= 0 && bytes != 0) reg->Release(index, bytes, kind);
}

void Apply(Runtime& rt, const Returns& returns) {
  returns.ForEach(
      [&rt](int device, uint64_t bytes, UsageKind kind) { Return(rt, device, bytes, kind); });
}

uint64_t Granularity(Runtime& rt, int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return kDefaultGranularity;
  std::atomic<uint64_t>& cached = rt.granularity[size_t(ordinal)];
  if (uint64_t g = cached.load(std::memory_order_relaxed); g != 0) return g;
  uint64_t g = kDefaultGranularity;
  const CudaDriver* d = rt.CudaIfLoaded();
  if (d != nullptr && d->aux.cuMemGetAllocationGranularity != nullptr) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    size_t value = 0;
    if (d->aux.cuMemGetAllocationGranularity(&value, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) ==
            CUDA_SUCCESS &&
        value != 0) {
      g = value;
    }
  }
  cached.store(g, std::memory_order_relaxed);  // racing askers store the same answer
  return g;
}

CUresult StreamDevice(Runtime& rt, CUstream stream, int* ordinal) {
  const CudaDriver* d = rt.CudaIfLoaded();
  if (stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD &&
      d != nullptr && d->aux.cuStreamGetCtx != nullptr) {
    CUcontext ctx = nullptr;
    if (CUresult r = d->aux.cuStreamGetCtx(stream, &ctx); r != CUDA_SUCCESS) return r;
    if (std::optional<int> device = rt.ledger.DeviceOfContext(ctx)) {
      *ordinal = *device;
      return CUDA_SUCCESS;
    }
  }
  return CurrentDevice(rt, ordinal);
}

CUresult Reserve(Runtime& rt, uint64_t bytes, UsageKind kind, Charge* charge) {
  // Every allocation waits here while the process is suspended, even one that fits pages it
  // already holds.
  GateAllocation(rt);
  int dev;
  CUcontext ctx;
  if (CUresult r = CurrentDevice(rt, &dev, &ctx); r != CUDA_SUCCESS) return r;
  switch (BooksFor(rt, dev)) {
    case Books::kRefused:
      NoteRefused(rt);
      return CUDA_ERROR_OUT_OF_MEMORY;
    case Books::kAccounted:
      break;
  }
  EnsureWatcher(rt);
  MaybeRetryIdentity(rt);
  const uint64_t g = Granularity(rt, dev);
  charge->device = dev;
  charge->ctx = ctx;
  if (bytes <= g / 2 && kind == UsageKind::kData) {
    // Shares pages: only a new page costs budget. A page is admitted before the ledger counts
    // it (with no lock held); two threads that each admitted one for the same need give the
    // spare back.
    const uint64_t size = RoundUp(bytes, kSmallAlign);
    if (!rt.ledger.TakeSmall(ctx, dev, size, g)) {
      const uint64_t pages = rt.ledger.PagesNeeded(ctx, dev, size, g);
      if (!ReserveAccounted(rt, dev, pages * g, kind)) return CUDA_ERROR_OUT_OF_MEMORY;
      Apply(rt, rt.ledger.TakeSmallWithPages(ctx, dev, size, pages, g));
      charge->reserved = pages * g;
    }
    charge->size = size;
    charge->small = true;
    return CUDA_SUCCESS;
  }
  const uint64_t size = RoundUp(bytes, g);
  if (!ReserveAccounted(rt, dev, size, kind)) return CUDA_ERROR_OUT_OF_MEMORY;
  charge->reserved = size;
  charge->size = size;
  return CUDA_SUCCESS;
}

void Unreserve(Runtime& rt, const Charge& charge, UsageKind kind) {
  if (charge.device < 0) return;
  Apply(rt,
        rt.ledger.Release(Allocation{charge.device, charge.size, kind, charge.ctx, charge.small}));
}

void Track(Runtime& rt, CUdeviceptr ptr, const Charge& charge, UsageKind kind) {
  if (charge.device < 0) return;
  rt.ledger.Track(ptr, Allocation{charge.device, charge.size, kind, charge.ctx, charge.small});
}

bool Forget(Runtime& rt, CUdeviceptr ptr) {
  std::optional<Returns> r = rt.ledger.Forget(ptr);
  if (!r) return false;
  Apply(rt, *r);
  return true;
}

bool SettlePitch(Runtime& rt, CUdeviceptr ptr, uint64_t actual, Charge* charge) {
  if (charge->device < 0 || actual <= charge->size) return true;
  Unreserve(rt, *charge, UsageKind::kData);
  *charge = Charge{};
  if (Reserve(rt, actual, UsageKind::kData, charge) == CUDA_SUCCESS) return true;
  if (const CudaDriver* d = rt.CudaIfLoaded(); d != nullptr && d->cuda.cuMemFree_v2 != nullptr) {
    d->cuda.cuMemFree_v2(ptr);
  }
  return false;
}

bool PrimaryActive(Runtime& rt, CUdevice dev) {
  const CudaDriver* d = rt.CudaIfLoaded();
  unsigned flags = 0;
  int active = 0;
  return d != nullptr && d->aux.cuDevicePrimaryCtxGetState != nullptr &&
         d->aux.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active != 0;
}

DeviceUse MeasureUse(Runtime& rt, CUdevice dev) {
  DeviceUse use;
  if (!rt.NvmlReady()) return use;
  const NvmlDriver& n = *rt.NvmlIfLoaded();
  nvmlDevice_t h = NvmlHandleOf(rt, dev);
  nvmlMemory_t m{};
  if (h == nullptr || n.nvml.nvmlDeviceGetMemoryInfo == nullptr ||
      n.nvml.nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS) {
    return use;
  }
  use.device = m.used;
  // This process's own entry, by its PID here or on the host.
  auto listed_owner = std::make_unique<ListedProcesses>();  // 12 KiB: not on an app's stack
  const ListedProcesses& listed = *listed_owner;
  if (!ListProcesses(rt, h, listed_owner.get())) return use;
  const unsigned self = unsigned(getpid());
  const unsigned host = unsigned(OwnHostPid(rt));
  use.process_listed = false;
  use.process = 0;
  for (unsigned i = 0; i < listed.count; ++i) {
    const nvmlProcessInfo_t& p = listed.infos[i];
    if ((p.pid == self || (host != 0 && p.pid == host)) &&
        p.usedGpuMemory != static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) {
      use.process_listed = true;
      use.process = p.usedGpuMemory;
    }
  }
  return use;
}

bool ListProcesses(Runtime& rt, nvmlDevice_t h, ListedProcesses* out) {
  out->count = 0;
  const NvmlDriver* n = rt.NvmlIfLoaded();
  if (n == nullptr || n->nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) return false;
  unsigned count = kMaxListedProcesses;
  if (n->nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, &count, out->infos) != NVML_SUCCESS) {
    return false;
  }
  out->count = std::min(count, kMaxListedProcesses);
  return true;
}

const nvmlProcessInfo_t* ListedProcesses::Find(unsigned pid) const {
  for (unsigned i = 0; i < count; ++i) {
    if (infos[i].pid == pid) return &infos[i];
  }
  return nullptr;
}

uint64_t UsedMemory(const nvmlProcessInfo_t& p) {
  return p.usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)
             ? 0
             : p.usedGpuMemory;
}

uint64_t KnownContextBytes(Runtime& rt, CUdevice dev) { return rt.ledger.ContextBytes(int(dev)); }

bool AdmitContext(Runtime& rt, CUdevice dev, uint64_t bytes) {
  // A refused process or device is refused a context even of unmeasured size.
  if (BooksFor(rt, int(dev)) == Books::kRefused) {
    NoteRefused(rt);
    return false;
  }
  return Admit(rt, int(dev), bytes, UsageKind::kContext);
}

void UndoContext(Runtime& rt, CUdevice dev, CUcontext ctx, bool primary) {
  const CudaDriver* d = rt.CudaIfLoaded();
  if (d == nullptr) return;
  if (primary) {
    if (d->cuda.cuDevicePrimaryCtxRelease_v2 != nullptr) d->cuda.cuDevicePrimaryCtxRelease_v2(dev);
  } else if (d->cuda.cuCtxDestroy_v2 != nullptr) {
    d->cuda.cuCtxDestroy_v2(ctx);
  }
}

bool ChargeContext(Runtime& rt, CUdevice dev, CUcontext ctx, bool primary, const DeviceUse& before,
                   uint64_t admitted) {
  if (admitted != 0) {
    rt.ledger.AddContext(ctx, ContextCharge{int(dev), admitted, primary});
    return true;
  }
  uint64_t bytes = KnownContextBytes(rt, dev);
  if (bytes == 0) {
    // Measured once per device: what this process's own use grew by while the context was
    // made; when NVML does not list the process, what the whole device's grew by (which
    // another process starting a context at the same moment would inflate).
    DeviceUse after = MeasureUse(rt, dev);
    if (after.process_listed && after.process > before.process) {
      bytes = after.process - before.process;
    } else if (before.device != UINT64_MAX && after.device != UINT64_MAX &&
               after.device > before.device) {
      bytes = after.device - before.device;
    }
    if (bytes != 0 && bytes < (8ull << 30)) {
      rt.ledger.SetContextBytes(int(dev), bytes);
    } else {
      bytes = 0;
      g_log.Log(LogLevel::kInfo, "device %d: the context's size could not be measured", int(dev));
    }
  }
  // Admitted like any memory (a context the process could not register for, or on a device
  // the region does not hold, is refused as they are; 0 bytes still asks).
  if (!AdmitContext(rt, dev, bytes)) return false;
  rt.ledger.AddContext(ctx, ContextCharge{int(dev), bytes, primary});
  return true;
}

void ContextEnded(Runtime& rt, CUcontext ctx) {
  rt.contexts_epoch.fetch_add(1, std::memory_order_release);
  Apply(rt, rt.ledger.EndContext(ctx));
  SpillsEndedWithContext(rt, ctx);
  ImportsEndedWithContext(rt, ctx);
  // Pools and graph memory may have given memory back with the context.
  ReconcilePools(rt);
  ReconcileGraphMemory(rt, -1);
}

void TrackObject(Runtime& rt, const void* handle, const Held& held) {
  rt.ledger.TrackObject(handle, held);
}

bool ForgetObject(Runtime& rt, const void* handle) {
  std::optional<Returns> r = rt.ledger.ForgetObject(handle);
  if (!r) return false;
  Apply(rt, *r);
  return true;
}

void PrimaryMayHaveEnded(Runtime& rt, CUdevice dev) {
  if (PrimaryActive(rt, dev)) return;
  if (CUcontext primary = rt.ledger.PrimaryOn(int(dev)); primary != nullptr) {
    ContextEnded(rt, primary);
  }
}

}  // namespace hami::vgpu
