#include "vgpu/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/visible_devices.h"
#include "vgpu/libc_symbols.h"

namespace hami::vgpu {

RawLogger g_log("hami-vgpu", LogLevel::kWarn);
thread_local int HookScope::depth_ = 0;

namespace {

Runtime* g_rt = new Runtime();  // leaked on purpose: hooks may run during static destruction
std::atomic<bool> g_loaded{false};

// The only thing that happens at load time.
__attribute__((constructor)) void OnLoad() { g_loaded.store(true, std::memory_order_relaxed); }

std::string UuidText(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char buf[48];
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

// In a fork child: the process is new. Its parent's registration, allocations and contexts
// are not its own; its mutex may have been held by a thread that does not exist here.
void ChildAfterFork() {
  Runtime& rt = *g_rt;
  std::construct_at(&rt.mu);
  rt.allocations.clear();
  rt.small_pages.clear();
  rt.contexts.clear();
  if (rt.region) {
    Status s = rt.region->ReopenAfterFork();
    if (!s.ok()) {
      g_log.Log(LogLevel::kError, "after fork: %s", s.error().message().c_str());
      rt.region_fast.store(nullptr);
      rt.region.reset();
      rt.region_tried = false;
    }
  }
}

template <typename T>
void Load(DlsymFn real, void* handle, const char* name, T* slot) {
  *slot = reinterpret_cast<T>(real(handle, name));
}

// Maps each CUDA-visible device to its NVML index by UUID. Caller holds rt.mu.
void MapToNvmlLocked(Runtime& rt) {
  if (rt.nvml_handle == nullptr || rt.nvml.nvmlDeviceGetCount_v2 == nullptr) return;
  unsigned count = 0;
  if (rt.nvml.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) return;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t h;
    char uuid[96];
    if (rt.nvml.nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS ||
        rt.nvml_aux.nvmlDeviceGetUUID(h, uuid, sizeof(uuid)) != NVML_SUCCESS) {
      continue;
    }
    for (VisibleDevice& d : rt.devices) {
      if (d.uuid == uuid) {
        d.nvml_index = int(i);
        d.nvml = h;
      }
    }
  }
}

// With NVML but no CUDA initialization yet: which devices CUDA would show, from
// CUDA_VISIBLE_DEVICES over NVML's list. Caller holds rt.mu.
void LearnDevicesFromNvmlLocked(Runtime& rt) {
  if (rt.devices_from_cuda || !rt.devices.empty() || rt.nvml_handle == nullptr) return;
  unsigned count = 0;
  if (rt.nvml.nvmlDeviceGetCount_v2 == nullptr ||
      rt.nvml.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) {
    return;
  }
  std::vector<std::string> uuids;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t h;
    char uuid[96] = {};
    if (rt.nvml.nvmlDeviceGetHandleByIndex_v2(i, &h) == NVML_SUCCESS) {
      rt.nvml_aux.nvmlDeviceGetUUID(h, uuid, sizeof(uuid));
    }
    uuids.push_back(uuid);
  }
  const auto& cvd = rt.config.visible_devices;
  VisibleDevices v =
      ParseVisibleDevices(cvd ? std::optional<std::string_view>(*cvd) : std::nullopt, uuids);
  if (v.stopped_at) {
    g_log.Log(LogLevel::kWarn,
              "CUDA_VISIBLE_DEVICES='%s': entry '%s' names no device (or repeats one); the "
              "devices after it are not visible",
              cvd->c_str(), v.stopped_at->c_str());
  }
  for (int p : v.physical) rt.devices.push_back({uuids[size_t(p)], -1, nullptr});
  MapToNvmlLocked(rt);
}

// Which region device each CUDA ordinal is: by UUID, so a process that orders or narrows
// CUDA_VISIBLE_DEVICES differently from the container still charges the right device. A
// region stamped without UUIDs is taken to be in this process's order. Caller holds rt.mu.
void MapToRegionLocked(Runtime& rt) {
  region::PolicyView policy = rt.region->Policy();
  bool have_uuids = false;
  for (int i = 0; i < policy.device_count; ++i) have_uuids |= !policy.uuid[size_t(i)].empty();
  for (size_t o = 0; o < rt.devices.size() && o < size_t(kMaxDevices); ++o) {
    int index = -1;
    if (!have_uuids) {
      index = int(o) < policy.device_count ? int(o) : -1;
    } else {
      for (int i = 0; i < policy.device_count; ++i) {
        if (policy.uuid[size_t(i)] == rt.devices[o].uuid) index = i;
      }
    }
    if (index < 0) {
      g_log.Log(LogLevel::kWarn,
                "CUDA device %zu (%s) is not one of the shared region's devices; its memory "
                "is not accounted",
                o, rt.devices[o].uuid.c_str());
    }
    rt.region_index[o].store(index, std::memory_order_relaxed);
  }
}

}  // namespace

Runtime& Rt() { return *g_rt; }

void EnsureConfigured() {
  Runtime& rt = Rt();
  if (rt.configured_fast.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> l(rt.mu);
  if (rt.configured) return;
  rt.configured = true;
  LimitsFile file = ReadLimitsFile(kLimitsFilePath);
  Resolution res = ResolveConfig(file, [](const char* name) { return std::getenv(name); });
  rt.config = std::move(res.config);
  g_log.set_level(LogLevel(rt.config.log_level));
  for (const std::string& p : res.problems) g_log.Log(LogLevel::kError, "%s", p.c_str());
  for (const std::string& n : res.notes) g_log.Log(LogLevel::kInfo, "%s", n.c_str());
  static std::once_flag atfork;
  std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, ChildAfterFork); });
  rt.configured_fast.store(true, std::memory_order_release);
}

bool EnsureCudaLoaded() {
  Runtime& rt = Rt();
  if (rt.cuda_loaded.load(std::memory_order_acquire)) return true;
  EnsureConfigured();
  std::lock_guard<std::mutex> l(rt.mu);
  if (rt.cuda_load_tried) return rt.cuda_handle != nullptr;
  rt.cuda_load_tried = true;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  DlsymFn real = RealDlsym();
  if (h == nullptr || real == nullptr) {
    g_log.Log(LogLevel::kInfo, "no NVIDIA driver (libcuda.so.1): %s",
              h == nullptr ? dlerror() : "cannot read libc's dlsym");
    return false;
  }
#define HAMI_CUDA_HOOK(name, policy, version) Load(real, h, #name, &rt.cuda.name);
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
  Load(real, h, "cuDeviceGetCount", &rt.cuda_aux.cuDeviceGetCount);
  Load(real, h, "cuDeviceGet", &rt.cuda_aux.cuDeviceGet);
  Load(real, h, "cuDeviceGetUuid_v2", &rt.cuda_aux.cuDeviceGetUuid_v2);
  Load(real, h, "cuDeviceGetUuid", &rt.cuda_aux.cuDeviceGetUuid);
  Load(real, h, "cuCtxGetDevice", &rt.cuda_aux.cuCtxGetDevice);
  Load(real, h, "cuCtxGetCurrent", &rt.cuda_aux.cuCtxGetCurrent);
  Load(real, h, "cuDevicePrimaryCtxGetState", &rt.cuda_aux.cuDevicePrimaryCtxGetState);
  Load(real, h, "cuMemGetAllocationGranularity", &rt.cuda_aux.cuMemGetAllocationGranularity);
  rt.cuda_handle = h;
  rt.cuda_loaded.store(true, std::memory_order_release);
  return true;
}

bool EnsureNvmlLoaded() {
  Runtime& rt = Rt();
  if (rt.nvml_loaded.load(std::memory_order_acquire)) return true;
  EnsureConfigured();
  std::lock_guard<std::mutex> l(rt.mu);
  if (rt.nvml_load_tried) return rt.nvml_handle != nullptr;
  rt.nvml_load_tried = true;
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  DlsymFn real = RealDlsym();
  if (h == nullptr || real == nullptr) {
    g_log.Log(LogLevel::kInfo, "no NVML (libnvidia-ml.so.1): %s",
              h == nullptr ? dlerror() : "cannot read libc's dlsym");
    return false;
  }
#define HAMI_NVML_HOOK(name, policy) Load(real, h, #name, &rt.nvml.name);
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK
  Load(real, h, "nvmlDeviceGetUUID", &rt.nvml_aux.nvmlDeviceGetUUID);
  rt.nvml_handle = h;
  rt.nvml_loaded.store(true, std::memory_order_release);
  return true;
}

void LearnDevicesFromCuda() {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  if (rt.devices_from_cuda || rt.cuda_aux.cuDeviceGetCount == nullptr) return;
  int count = 0;
  if (rt.cuda_aux.cuDeviceGetCount(&count) != CUDA_SUCCESS) return;
  std::vector<VisibleDevice> devices;
  for (int i = 0; i < count && i < kMaxDevices; ++i) {
    CUdevice dev;
    CUuuid uuid{};
    if (rt.cuda_aux.cuDeviceGet(&dev, i) != CUDA_SUCCESS) return;
    CUresult r = rt.cuda_aux.cuDeviceGetUuid_v2 != nullptr
                     ? rt.cuda_aux.cuDeviceGetUuid_v2(&uuid, dev)
                     : rt.cuda_aux.cuDeviceGetUuid(&uuid, dev);
    if (r != CUDA_SUCCESS) return;
    devices.push_back({UuidText(uuid), -1, nullptr});
  }
  rt.devices = std::move(devices);
  rt.devices_from_cuda = true;
  MapToNvmlLocked(rt);
  if (rt.region != nullptr) MapToRegionLocked(rt);
}

std::vector<VisibleDevice> VisibleDevicesForNvml() {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  if (rt.devices.empty()) {
    LearnDevicesFromNvmlLocked(rt);
  } else if (rt.devices.front().nvml == nullptr) {
    MapToNvmlLocked(rt);
  }
  return rt.devices;
}

region::Region* EnsureRegion() {
  Runtime& rt = Rt();
  if (region::Region* r = rt.region_fast.load(std::memory_order_acquire);
      r != nullptr && r->slot() >= 0) {
    return r;
  }
  {
    std::lock_guard<std::mutex> l(rt.mu);
    if (rt.region != nullptr) {
      if (rt.region->slot() < 0) {
        auto slot = rt.region->Register();
        if (!slot.ok()) g_log.Log(LogLevel::kError, "%s", slot.error().message().c_str());
      }
      return rt.region.get();
    }
    if (rt.region_tried) return nullptr;
    if (rt.devices.empty()) LearnDevicesFromNvmlLocked(rt);
    if (rt.devices.empty()) return nullptr;  // nothing to account on yet
    rt.region_tried = true;
  }
  // Open outside the lock: it may wait for another process that is creating the file.
  region::PolicySpec spec;
  const Config& c = rt.config;
  spec.device_count = int(rt.devices.size());
  for (int d = 0; d < spec.device_count; ++d) {
    spec.memory_limit[size_t(d)] = c.memory_limit[size_t(d)];
    spec.sm_limit[size_t(d)] = c.sm_limit[size_t(d)];
    spec.uuid[size_t(d)] = rt.devices[size_t(d)].uuid;
  }
  spec.priority = c.priority;
  spec.core_policy = c.core_policy;
  spec.oversubscribe = c.oversubscribe;
  std::vector<region::PolicyDifference> diffs;
  auto opened = region::Region::Open(c.shared_cache, &spec, region::Create::kIfMissing, &diffs);
  if (!opened.ok()) {
    // Limits must not silently turn off: hold this process to them on its own.
    g_log.Log(LogLevel::kError,
              "%s; this process's limits are enforced for it alone, not shared with the "
              "container",
              opened.error().message().c_str());
    char tmpl[] = "/tmp/hami-vgpu-private-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd >= 0) {
      close(fd);
      unlink(tmpl);  // a fresh, empty name for the region to create
      opened = region::Region::Open(tmpl, &spec, region::Create::kIfMissing, nullptr);
      unlink(tmpl);  // the mapping and descriptor stay; nobody else may join it
    }
    if (!opened.ok()) {
      g_log.Log(LogLevel::kError, "cannot make a private region either: %s",
                opened.error().message().c_str());
      return nullptr;
    }
  }
  for (const region::PolicyDifference& d : diffs) {
    g_log.Log(LogLevel::kWarn,
              "shared region %s: %s is %s there but %s here; the region's value stands",
              c.shared_cache.c_str(), d.field.c_str(), d.region.c_str(), d.mine.c_str());
  }
  auto slot = (*opened)->Register();
  if (!slot.ok()) g_log.Log(LogLevel::kError, "%s", slot.error().message().c_str());
  // A normal exit gives the slot back (a killed process is reclaimed by the others).
  static std::once_flag at_exit;
  std::call_once(at_exit, [] {
    atexit([] {
      if (region::Region* r = Rt().region_fast.load(std::memory_order_acquire)) r->Unregister();
    });
  });
  std::lock_guard<std::mutex> l(rt.mu);
  rt.region = std::move(opened).value();
  MapToRegionLocked(rt);
  rt.region_fast.store(rt.region.get(), std::memory_order_release);
  return rt.region.get();
}

CUresult CurrentDevice(int* ordinal, CUcontext* ctx) {
  Runtime& rt = Rt();
  if (rt.cuda_aux.cuCtxGetDevice == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUdevice dev;
  if (CUresult r = rt.cuda_aux.cuCtxGetDevice(&dev); r != CUDA_SUCCESS) return r;
  *ordinal = dev;
  if (ctx != nullptr) {
    if (CUresult r = rt.cuda_aux.cuCtxGetCurrent(ctx); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

int RegionIndex(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return -1;
  return Rt().region_index[size_t(ordinal)].load(std::memory_order_relaxed);
}

uint64_t LimitOf(int ordinal) {
  region::Region* reg = EnsureRegion();
  int index = RegionIndex(ordinal);
  if (reg == nullptr || index < 0) return 0;
  return reg->MemoryLimit(index);
}

bool LimitedView(int ordinal, uint64_t physical_total, uint64_t physical_free, uint64_t* total,
                 uint64_t* free) {
  region::Region* reg = EnsureRegion();
  int index = RegionIndex(ordinal);
  if (reg == nullptr || index < 0) return false;
  uint64_t limit = reg->MemoryLimit(index);
  if (limit == 0) return false;
  reg->SweepDeadIfDue();
  uint64_t used = reg->UsedBytes(index);
  *total = std::min(limit, physical_total);
  *free = std::min(physical_free, *total > used ? *total - used : 0);
  return true;
}

}  // namespace hami::vgpu
