#include "vgpu/accounting.h"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "common/proc.h"
#include "vgpu/identity.h"
#include "vgpu/limiter.h"

namespace hami::vgpu {

namespace {

constexpr uint64_t kSmallAlign = 512;
constexpr uint64_t kDefaultGranularity = 2ull << 20;

// The small-allocation pages of `ctx`. Caller holds rt.mu.
SmallPages& SmallPagesLocked(Runtime& rt, CUcontext ctx, int device) {
  for (SmallPages& sp : rt.small_pages) {
    if (sp.ctx == ctx) return sp;
  }
  return rt.small_pages.emplace_back(SmallPages{ctx, device, 0, 0});
}

// Releases whatever `a` still holds. Caller holds rt.mu.
void ReleaseLocked(Runtime& rt, const Allocation& a) {
  if (a.device < 0) return;
  if (!a.small) {
    Return(a.device, a.charge, a.kind);
    return;
  }
  uint64_t g = Granularity(a.device);
  SmallPages& sp = SmallPagesLocked(rt, a.ctx, a.device);
  sp.bytes -= std::min(sp.bytes, a.charge);
  uint64_t pages = RoundUp(sp.bytes, g) / g;
  if (pages < sp.pages) {
    Return(a.device, (sp.pages - pages) * g, UsageKind::kData);
    sp.pages = pages;
  }
}

}  // namespace

bool Admit(int ordinal, uint64_t bytes, UsageKind kind) {
  GateAllocation();
  region::Region* reg = EnsureRegion();
  int index = RegionIndex(ordinal);
  if (reg == nullptr || index < 0 || bytes == 0) return true;  // not accounted
  return reg->Reserve(index, bytes, kind) == region::Admission::kOk;
}

void Record(int ordinal, uint64_t bytes, UsageKind kind) {
  region::Region* reg = EnsureRegion();
  int index = RegionIndex(ordinal);
  if (reg == nullptr || index < 0 || bytes == 0) return;
  reg->Reserve(index, bytes, kind, region::Region::Enforce::kNone);
}

void Return(int ordinal, uint64_t bytes, UsageKind kind) {
  region::Region* reg = Rt().region_fast.load(std::memory_order_acquire);
  int index = RegionIndex(ordinal);
  if (reg != nullptr && index >= 0 && bytes != 0) reg->Release(index, bytes, kind);
}

uint64_t Granularity(int ordinal) {
  Runtime& rt = Rt();
  if (ordinal < 0 || ordinal >= kMaxDevices) return kDefaultGranularity;
  std::atomic<uint64_t>& cached = rt.granularity[size_t(ordinal)];
  if (uint64_t g = cached.load(std::memory_order_relaxed); g != 0) return g;
  uint64_t g = kDefaultGranularity;
  if (rt.cuda_aux.cuMemGetAllocationGranularity != nullptr) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    size_t value = 0;
    if (rt.cuda_aux.cuMemGetAllocationGranularity(
            &value, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS &&
        value != 0) {
      g = value;
    }
  }
  cached.store(g, std::memory_order_relaxed);  // racing askers store the same answer
  return g;
}

CUresult StreamDevice(CUstream stream, int* ordinal) {
  Runtime& rt = Rt();
  if (stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD &&
      rt.cuda_aux.cuStreamGetCtx != nullptr) {
    CUcontext ctx = nullptr;
    if (CUresult r = rt.cuda_aux.cuStreamGetCtx(stream, &ctx); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::mutex> l(rt.mu);
    auto it = rt.contexts.find(ctx);
    if (it != rt.contexts.end()) {
      *ordinal = it->second.device;
      return CUDA_SUCCESS;
    }
  }
  return CurrentDevice(ordinal);
}

CUresult Reserve(uint64_t bytes, UsageKind kind, Charge* charge) {
  GateAllocation();
  int dev;
  CUcontext ctx;
  if (CUresult r = CurrentDevice(&dev, &ctx); r != CUDA_SUCCESS) return r;
  region::Region* reg = EnsureRegion();
  if (reg == nullptr || RegionIndex(dev) < 0) return CUDA_SUCCESS;  // not accounted
  MaybeRetryIdentity();
  Runtime& rt = Rt();
  uint64_t g = Granularity(dev);
  charge->device = dev;
  charge->ctx = ctx;
  if (bytes <= g / 2 && kind == UsageKind::kData) {
    // Shares pages: only a new page costs budget.
    std::lock_guard<std::mutex> l(rt.mu);
    SmallPages& sp = SmallPagesLocked(rt, ctx, dev);
    uint64_t size = RoundUp(bytes, kSmallAlign);
    uint64_t pages = RoundUp(sp.bytes + size, g) / g;
    uint64_t extra = pages > sp.pages ? (pages - sp.pages) * g : 0;
    if (!Admit(dev, extra, kind)) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sp.bytes += size;
    sp.pages = std::max(sp.pages, pages);
    charge->reserved = extra;
    charge->size = size;
    charge->small = true;
    return CUDA_SUCCESS;
  }
  uint64_t size = RoundUp(bytes, g);
  if (!Admit(dev, size, kind)) return CUDA_ERROR_OUT_OF_MEMORY;
  charge->reserved = size;
  charge->size = size;
  return CUDA_SUCCESS;
}

void Unreserve(const Charge& charge, UsageKind kind) {
  if (charge.device < 0) return;
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  ReleaseLocked(rt, Allocation{charge.device, charge.size, kind, charge.ctx, charge.small});
}

void Track(CUdeviceptr ptr, const Charge& charge, UsageKind kind) {
  if (charge.device < 0) return;
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  rt.allocations.Insert(ptr,
                        Allocation{charge.device, charge.size, kind, charge.ctx, charge.small});
}

bool Forget(CUdeviceptr ptr) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  Allocation a;
  if (!rt.allocations.Erase(ptr, &a)) return false;
  ReleaseLocked(rt, a);
  return true;
}

bool PrimaryActive(CUdevice dev) {
  Runtime& rt = Rt();
  unsigned flags = 0;
  int active = 0;
  return rt.cuda_aux.cuDevicePrimaryCtxGetState != nullptr &&
         rt.cuda_aux.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS &&
         active != 0;
}

// Again in a fork child, whose NVML starts uninitialized.
bool NvmlReady() {
  Runtime& rt = Rt();
  if (!EnsureNvmlLoaded()) return false;
  static std::mutex mu;
  static uint64_t ready_in = ~uint64_t(0);  // ForkCount() when initialized
  std::lock_guard<std::mutex> l(mu);
  if (ready_in == ForkCount()) return true;
  if (rt.nvml.nvmlInit_v2 == nullptr || rt.nvml.nvmlInit_v2() != NVML_SUCCESS) return false;
  ready_in = ForkCount();
  return true;
}

DeviceUse MeasureUse(CUdevice dev) {
  Runtime& rt = Rt();
  DeviceUse use;
  if (!NvmlReady()) return use;
  nvmlDevice_t h = NvmlHandleOf(dev);
  nvmlMemory_t m{};
  if (h == nullptr || rt.nvml.nvmlDeviceGetMemoryInfo == nullptr ||
      rt.nvml.nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS) {
    return use;
  }
  use.device = m.used;
  // This process's own entry, by its PID here or on the host.
  auto listed_owner = std::make_unique<ListedProcesses>();  // 12 KiB: not on an app's stack
  const ListedProcesses& listed = *listed_owner;
  if (!ListProcesses(h, listed_owner.get())) return use;
  const unsigned self = unsigned(getpid());
  const unsigned host = unsigned(OwnHostPid());
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

bool ListProcesses(nvmlDevice_t h, ListedProcesses* out) {
  Runtime& rt = Rt();
  out->count = 0;
  if (rt.nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) return false;
  unsigned n = kMaxListedProcesses;
  if (rt.nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, &n, out->infos) != NVML_SUCCESS) {
    return false;
  }
  out->count = std::min(n, kMaxListedProcesses);
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

uint64_t KnownContextBytes(CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices) return 0;
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  return rt.context_bytes[size_t(dev)];
}

void ChargeContext(CUdevice dev, CUcontext ctx, bool primary, const DeviceUse& before) {
  region::Region* reg = EnsureRegion();
  if (reg == nullptr || RegionIndex(dev) < 0) return;
  Runtime& rt = Rt();
  uint64_t bytes = KnownContextBytes(dev);
  if (bytes == 0) {
    // Measured once per device: what this process's own use grew by while the context was
    // made; when NVML does not list the process, what the whole device's grew by (which
    // another process starting a context at the same moment would inflate).
    DeviceUse after = MeasureUse(dev);
    if (after.process_listed && after.process > before.process) {
      bytes = after.process - before.process;
    } else if (before.device != UINT64_MAX && after.device != UINT64_MAX &&
               after.device > before.device) {
      bytes = after.device - before.device;
    }
    if (bytes != 0 && bytes < (8ull << 30)) {
      std::lock_guard<std::mutex> l(rt.mu);
      rt.context_bytes[size_t(dev)] = bytes;
    } else {
      bytes = 0;
      g_log.Log(LogLevel::kInfo, "device %d: the context's size could not be measured", int(dev));
    }
  }
  Record(dev, bytes, UsageKind::kContext);
  std::lock_guard<std::mutex> l(rt.mu);
  rt.contexts[ctx] = {int(dev), bytes, primary};
}

void ContextEnded(CUcontext ctx) {
  Runtime& rt = Rt();
  rt.contexts_epoch.fetch_add(1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> l(rt.mu);
    auto c = rt.contexts.find(ctx);
    if (c != rt.contexts.end()) {
      Return(c->second.device, c->second.bytes, UsageKind::kContext);
      rt.contexts.erase(c);
    }
    // Everything the context held is gone with it.
    rt.allocations.EraseIf([&](CUdeviceptr, const Allocation& a) {
      if (a.ctx != ctx) return false;
      if (!a.small) Return(a.device, a.charge, a.kind);
      return true;
    });
    std::erase_if(rt.small_pages, [&](const SmallPages& sp) {
      if (sp.ctx != ctx) return false;
      Return(sp.device, sp.pages * Granularity(sp.device), UsageKind::kData);
      return true;
    });
    for (auto it = rt.objects.begin(); it != rt.objects.end();) {
      if (it->second.ctx == ctx) {
        Return(it->second.device, it->second.bytes, it->second.kind);
        it = rt.objects.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Pools and graph memory may have given memory back with the context.
  ReconcilePools();
  ReconcileGraphMemory(-1);
}

void TrackObject(const void* handle, const Held& held) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  rt.objects[handle] = held;
}

bool ForgetObject(const void* handle) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  auto it = rt.objects.find(handle);
  if (it == rt.objects.end()) return false;
  Return(it->second.device, it->second.bytes, it->second.kind);
  rt.objects.erase(it);
  return true;
}

void PrimaryMayHaveEnded(CUdevice dev) {
  if (PrimaryActive(dev)) return;
  CUcontext primary = nullptr;
  {
    Runtime& rt = Rt();
    std::lock_guard<std::mutex> l(rt.mu);
    for (const auto& [ctx, info] : rt.contexts) {
      if (info.device == int(dev) && info.primary) primary = ctx;
    }
  }
  if (primary != nullptr) ContextEnded(primary);
}

}  // namespace hami::vgpu
