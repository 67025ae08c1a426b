#include "vgpu/accounting.h"

#include <algorithm>

namespace hami::vgpu {

namespace {

constexpr uint64_t kSmallAlign = 512;
constexpr uint64_t kDefaultGranularity = 2ull << 20;

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

uint64_t GranularityLocked(Runtime& rt, int device) {
  uint64_t& g = rt.granularity[size_t(device)];
  if (g != 0) return g;
  g = kDefaultGranularity;
  if (rt.cuda_aux.cuMemGetAllocationGranularity != nullptr) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    size_t value = 0;
    if (rt.cuda_aux.cuMemGetAllocationGranularity(
            &value, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS &&
        value != 0) {
      g = value;
    }
  }
  return g;
}

// The region's books, by CUDA ordinal.
region::Admission RegionReserve(region::Region* reg, int ordinal, uint64_t bytes,
                                region::UsageKind kind,
                                region::Region::Enforce enforce = region::Region::Enforce::kLimit) {
  int index = RegionIndex(ordinal);
  if (reg == nullptr || index < 0) return region::Admission::kOk;  // not accounted
  return reg->Reserve(index, bytes, kind, enforce);
}

void RegionRelease(region::Region* reg, int ordinal, uint64_t bytes, region::UsageKind kind) {
  int index = RegionIndex(ordinal);
  if (reg != nullptr && index >= 0 && bytes != 0) reg->Release(index, bytes, kind);
}

// Releases whatever `a` still holds. Caller holds rt.mu.
void ReleaseLocked(Runtime& rt, const Allocation& a) {
  region::Region* reg = rt.region.get();
  if (reg == nullptr || a.device < 0) return;
  if (!a.small) {
    RegionRelease(reg, a.device, a.charge, a.kind);
    return;
  }
  uint64_t g = GranularityLocked(rt, a.device);
  SmallPages& sp = rt.small_pages[{a.ctx, a.device}];
  sp.bytes -= std::min(sp.bytes, a.charge);
  uint64_t pages = RoundUp(sp.bytes, g) / g;
  if (pages < sp.pages) {
    RegionRelease(reg, a.device, (sp.pages - pages) * g, region::UsageKind::kData);
    sp.pages = pages;
  }
}

}  // namespace

CUresult Reserve(uint64_t bytes, region::UsageKind kind, Charge* charge) {
  int dev;
  CUcontext ctx;
  if (CUresult r = CurrentDevice(&dev, &ctx); r != CUDA_SUCCESS) return r;
  region::Region* reg = EnsureRegion();
  if (reg == nullptr || RegionIndex(dev) < 0) return CUDA_SUCCESS;  // not accounted
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  uint64_t g = GranularityLocked(rt, dev);
  charge->device = dev;
  charge->ctx = ctx;
  if (bytes <= g / 2 && kind == region::UsageKind::kData) {
    // Shares pages: only a new page costs budget.
    SmallPages& sp = rt.small_pages[{ctx, dev}];
    uint64_t size = RoundUp(bytes, kSmallAlign);
    uint64_t pages = RoundUp(sp.bytes + size, g) / g;
    uint64_t extra = pages > sp.pages ? (pages - sp.pages) * g : 0;
    if (extra != 0 && RegionReserve(reg, dev, extra, kind) != region::Admission::kOk) {
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
  if (RegionReserve(reg, dev, size, kind) != region::Admission::kOk) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  charge->reserved = size;
  charge->size = size;
  return CUDA_SUCCESS;
}

void Unreserve(const Charge& charge, region::UsageKind kind) {
  if (charge.device < 0) return;
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  ReleaseLocked(rt, Allocation{charge.device, charge.size, kind, charge.ctx, charge.small});
}

void Track(CUdeviceptr ptr, const Charge& charge, region::UsageKind kind) {
  if (charge.device < 0) return;
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  rt.allocations[ptr] = Allocation{charge.device, charge.size, kind, charge.ctx, charge.small};
}

bool Forget(CUdeviceptr ptr) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  auto it = rt.allocations.find(ptr);
  if (it == rt.allocations.end()) return false;
  ReleaseLocked(rt, it->second);
  rt.allocations.erase(it);
  return true;
}

bool Tracked(CUdeviceptr ptr) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  return rt.allocations.count(ptr) != 0;
}

bool PrimaryActive(CUdevice dev) {
  Runtime& rt = Rt();
  unsigned flags = 0;
  int active = 0;
  return rt.cuda_aux.cuDevicePrimaryCtxGetState != nullptr &&
         rt.cuda_aux.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS &&
         active != 0;
}

uint64_t DeviceUsedBytes(CUdevice dev) {
  Runtime& rt = Rt();
  if (!EnsureNvmlLoaded()) return UINT64_MAX;
  static std::once_flag init;
  static bool nvml_ok = false;
  std::call_once(init, [&] {
    nvml_ok = rt.nvml.nvmlInit_v2 != nullptr && rt.nvml.nvmlInit_v2() == NVML_SUCCESS;
  });
  if (!nvml_ok) return UINT64_MAX;
  std::vector<VisibleDevice> devices = VisibleDevicesForNvml();
  nvmlDevice_t h = dev >= 0 && size_t(dev) < devices.size() ? devices[size_t(dev)].nvml : nullptr;
  nvmlMemory_t m{};
  if (h == nullptr || rt.nvml.nvmlDeviceGetMemoryInfo == nullptr ||
      rt.nvml.nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS) {
    return UINT64_MAX;
  }
  return m.used;
}

void ChargeContext(CUdevice dev, CUcontext ctx, bool primary, uint64_t used_before) {
  region::Region* reg = EnsureRegion();
  if (reg == nullptr || RegionIndex(dev) < 0) return;
  Runtime& rt = Rt();
  uint64_t bytes;
  {
    std::lock_guard<std::mutex> l(rt.mu);
    bytes = rt.context_bytes[size_t(dev)];
  }
  if (bytes == 0) {
    // Measured once per device: what the device's use grew by while the context was made.
    uint64_t after = DeviceUsedBytes(dev);
    if (used_before != UINT64_MAX && after != UINT64_MAX && after > used_before &&
        after - used_before < (8ull << 30)) {
      bytes = after - used_before;
      std::lock_guard<std::mutex> l(rt.mu);
      rt.context_bytes[size_t(dev)] = bytes;
    } else {
      g_log.Log(LogLevel::kInfo, "device %d: the context's size could not be measured", int(dev));
    }
  }
  RegionReserve(reg, dev, bytes, region::UsageKind::kContext, region::Region::Enforce::kNone);
  std::lock_guard<std::mutex> l(rt.mu);
  rt.contexts[ctx] = {int(dev), bytes, primary};
}

void ContextEnded(CUcontext ctx) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  region::Region* reg = rt.region.get();
  auto c = rt.contexts.find(ctx);
  if (c != rt.contexts.end()) {
    RegionRelease(reg, c->second.device, c->second.bytes, region::UsageKind::kContext);
    rt.contexts.erase(c);
  }
  // Everything the context held is gone with it.
  for (auto it = rt.allocations.begin(); it != rt.allocations.end();) {
    if (it->second.ctx == ctx) {
      if (!it->second.small) {
        RegionRelease(reg, it->second.device, it->second.charge, it->second.kind);
      }
      it = rt.allocations.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = rt.small_pages.begin(); it != rt.small_pages.end();) {
    if (it->first.first == ctx) {
      RegionRelease(reg, it->first.second,
                    it->second.pages * GranularityLocked(rt, it->first.second),
                    region::UsageKind::kData);
      it = rt.small_pages.erase(it);
    } else {
      ++it;
    }
  }
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
