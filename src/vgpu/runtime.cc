#include "vgpu/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/proc.h"
#include "common/visible_devices.h"
#include "vgpu/identity.h"
#include "vgpu/libc_symbols.h"

namespace hami::vgpu {

RawLogger g_log("hami-vgpu", LogLevel::kWarn);
constinit std::atomic<Runtime*> g_runtime{nullptr};

Runtime& MakeRuntime() {
  static Runtime* const rt = [] {
    auto* r = new Runtime();
    g_runtime.store(r, std::memory_order_release);
    return r;
  }();
  return *rt;
}

namespace {

std::atomic<bool> g_loaded{false};

// The only thing that happens at load time.
__attribute__((constructor)) void OnLoad() { g_loaded.store(true, std::memory_order_relaxed); }

// In a fork child: the process is new. Its parent's registration, allocations and contexts
// are not its own; its mutex may have been held by a thread that does not exist here.
void ChildAfterFork() {
  Runtime& rt = Rt();
  std::construct_at(&rt.mu);
  std::construct_at(&rt.pool_mu);
  std::construct_at(&rt.graph_mu);
  std::construct_at(&rt.module_mu);
  rt.allocations.Clear();
  rt.small_pages.clear();
  rt.contexts.clear();
  rt.contexts_epoch.fetch_add(1);
  rt.objects.clear();
  rt.physical.clear();
  rt.mapped.clear();
  rt.pools.clear();
  rt.any_pools.store(false);
  rt.graph_charged = {};
  rt.graph_execs.clear();
  rt.any_graph_memory.store(false);
  if (rt.region) {
    Status s = rt.region->ReopenAfterFork();
    if (!s.ok()) {
      g_log.Log(LogLevel::kError, "after fork: %s", s.error().message().c_str());
      rt.region_fast.store(nullptr);
      rt.region.reset();
    }
  }
  // The child has a PID of its own, and CUDA does not survive fork.
  std::construct_at(&rt.identity_mu);
  if (rt.broker_query_started) {  // the parent's connection: the parent reads its answer
    broker::AbandonQuery(&rt.broker_query);
    rt.broker_query_started = false;
  }
  rt.identity_state.store(int(IdentityState::kNotStarted));
  rt.identity_retry_ns.store(0);
  rt.identity_backoff_ns = 0;
  rt.identity_logged = false;
  rt.cuda_initialized.store(false);
  // Threads do not survive fork: the child starts its own controller when it needs one.
  rt.controller_started.store(false);
  std::construct_at(&rt.graph_kernels_mu);
  rt.limits_generation.store(~uint64_t(0));
  if (rt.region == nullptr) {  // the child may succeed where its parent could not
    rt.region_tried = false;
    rt.region_gave_up.store(false);
  }
}

template <typename T>
void Load(DlsymFn real, void* handle, const char* name, T* slot) {
  *slot = reinterpret_cast<T>(real(handle, name));
}

// The process (ForkCount()) whose NVML handles rt.devices holds (guarded by rt.mu). A fork
// child's NVML may hand out other handles once the child initializes it, so the child maps
// afresh.
uint64_t g_nvml_mapped_in = ~uint64_t(0);

// Maps each CUDA-visible device to its NVML index by UUID. Caller holds rt.mu.
void MapToNvmlLocked(Runtime& rt) {
  if (rt.nvml_handle == nullptr || rt.nvml.nvmlDeviceGetCount_v2 == nullptr) return;
  unsigned count = 0;
  if (rt.nvml.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) return;
  g_nvml_mapped_in = ForkCount();
  for (VisibleDevice& d : rt.devices) {
    d.nvml_index = -1;
    d.nvml = nullptr;
  }
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
  // Said once: with no device visible this runs again at every NVML call.
  static bool warned = false;  // guarded by rt.mu
  if (v.stopped_at && !warned) {
    warned = true;
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
  // The driver reads CUDA_VISIBLE_DEVICES from the environment when it starts (after this):
  // a value from the limits file must reach it there too, or a login that lost the variable
  // would see every device, and per-device limits would land on the wrong ones.
  for (const Setting& s : rt.config.settings) {
    if (s.name == "CUDA_VISIBLE_DEVICES" && s.source == Source::kLimitsFile) {
      setenv("CUDA_VISIBLE_DEVICES", s.value.c_str(), 1);
    }
  }
  static std::once_flag atfork;
  std::call_once(atfork, [] {
    ForkCount();  // its counter first: ChildAfterFork must see the child's count
    pthread_atfork(nullptr, nullptr, ChildAfterFork);
  });
  rt.configured_fast.store(true, std::memory_order_release);
}

bool LoadCuda() {
  Runtime& rt = Rt();
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
  Load(real, h, "cuStreamGetCtx", &rt.cuda_aux.cuStreamGetCtx);
  Load(real, h, "cuStreamIsCapturing", &rt.cuda_aux.cuStreamIsCapturing);
  Load(real, h, "cuStreamIsCapturing_ptsz", &rt.cuda_aux.cuStreamIsCapturing_ptsz);
  Load(real, h, "cuDeviceGetMemPool", &rt.cuda_aux.cuDeviceGetMemPool);
  Load(real, h, "cuDeviceGetDefaultMemPool", &rt.cuda_aux.cuDeviceGetDefaultMemPool);
  Load(real, h, "cuMemPoolGetAttribute", &rt.cuda_aux.cuMemPoolGetAttribute);
  Load(real, h, "cuDeviceGetGraphMemAttribute", &rt.cuda_aux.cuDeviceGetGraphMemAttribute);
  Load(real, h, "cuGraphGetNodes", &rt.cuda_aux.cuGraphGetNodes);
  Load(real, h, "cuGraphNodeGetType", &rt.cuda_aux.cuGraphNodeGetType);
  Load(real, h, "cuGraphMemAllocNodeGetParams", &rt.cuda_aux.cuGraphMemAllocNodeGetParams);
  Load(real, h, "cuCtxPushCurrent_v2", &rt.cuda_aux.cuCtxPushCurrent_v2);
  Load(real, h, "cuCtxPopCurrent_v2", &rt.cuda_aux.cuCtxPopCurrent_v2);
  Load(real, h, "cuDeviceGetAttribute", &rt.cuda_aux.cuDeviceGetAttribute);
  Load(real, h, "cuGraphKernelNodeGetParams_v2", &rt.cuda_aux.cuGraphKernelNodeGetParams_v2);
  Load(real, h, "cuGraphChildGraphNodeGetGraph", &rt.cuda_aux.cuGraphChildGraphNodeGetGraph);
  rt.cuda_handle = h;
  rt.cuda_loaded.store(true, std::memory_order_release);
  return true;
}

bool LoadNvml() {
  Runtime& rt = Rt();
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
  Load(real, h, "nvmlDeviceGetProcessUtilization", &rt.nvml_aux.nvmlDeviceGetProcessUtilization);
  Load(real, h, "nvmlDeviceGetUtilizationRates", &rt.nvml_aux.nvmlDeviceGetUtilizationRates);
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
    devices.push_back({GpuUuidText(uuid.bytes), -1, nullptr});
  }
  rt.devices = std::move(devices);
  rt.devices_from_cuda = true;
  MapToNvmlLocked(rt);
  if (rt.region != nullptr) MapToRegionLocked(rt);
}

namespace {

// The visible devices with their NVML handles, current for this process. Caller holds rt.mu.
const std::vector<VisibleDevice>& NvmlDevicesLocked(Runtime& rt) {
  if (rt.devices.empty()) {
    LearnDevicesFromNvmlLocked(rt);
  } else if (rt.devices.front().nvml == nullptr || g_nvml_mapped_in != ForkCount()) {
    MapToNvmlLocked(rt);
  }
  return rt.devices;
}

}  // namespace

std::vector<VisibleDevice> VisibleDevicesForNvml() {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  return NvmlDevicesLocked(rt);
}

int NvmlVisibleCount() {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  return int(NvmlDevicesLocked(rt).size());
}

int NvmlOrdinalOf(nvmlDevice_t h) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  const std::vector<VisibleDevice>& devices = NvmlDevicesLocked(rt);
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].nvml == h) return int(i);
  }
  return -1;
}

int NvmlIndexOf(int ordinal) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  const std::vector<VisibleDevice>& devices = NvmlDevicesLocked(rt);
  return ordinal >= 0 && size_t(ordinal) < devices.size() ? devices[size_t(ordinal)].nvml_index
                                                          : -1;
}

nvmlDevice_t NvmlHandleOf(int ordinal) {
  Runtime& rt = Rt();
  std::lock_guard<std::mutex> l(rt.mu);
  const std::vector<VisibleDevice>& devices = NvmlDevicesLocked(rt);
  return ordinal >= 0 && size_t(ordinal) < devices.size() ? devices[size_t(ordinal)].nvml : nullptr;
}

pid_t OwnHostPid() {
  region::Region* reg = Rt().region_fast.load(std::memory_order_acquire);
  int slot = reg != nullptr ? reg->slot() : -1;
  return slot >= 0 ? reg->file().slots[slot].host_pid.load(std::memory_order_relaxed) : 0;
}

namespace {

region::Region* JoinRegionOnce();

}  // namespace

region::Region* JoinRegion() {
  region::Region* r = JoinRegionOnce();
  // Registered now: learn this process's host PID (outside every lock; the fast tiers here,
  // the probe once CUDA is initialized).
  if (r != nullptr && r->slot() >= 0) {
    ResolveIdentity(Rt().cuda_initialized.load(std::memory_order_acquire));
  }
  return r;
}

namespace {

region::Region* JoinRegionOnce() {
  Runtime& rt = Rt();
  {
    std::lock_guard<std::mutex> l(rt.mu);
    if (rt.region != nullptr) {
      if (rt.region->slot() < 0) {
        auto slot = rt.region->Register();
        if (!slot.ok()) g_log.Log(LogLevel::kError, "%s", slot.error().message().c_str());
      }
      return rt.region.get();
    }
    if (rt.region_tried) {
      rt.region_gave_up.store(true, std::memory_order_relaxed);
      return nullptr;
    }
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

}  // namespace

namespace {

// The calling thread's last answer: its current context and that context's device, valid
// while no context has ended since (contexts_epoch).
struct ThreadContext {
  CUcontext ctx;
  int device;
  uint64_t epoch;
};
__attribute__((tls_model("initial-exec"))) constinit thread_local ThreadContext t_context{nullptr,
                                                                                          -1, 0};

}  // namespace

CUresult CurrentDevice(int* ordinal, CUcontext* ctx) {
  Runtime& rt = Rt();
  if (rt.cuda_aux.cuCtxGetCurrent == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext current = nullptr;
  if (CUresult r = rt.cuda_aux.cuCtxGetCurrent(&current); r != CUDA_SUCCESS) return r;
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t epoch = rt.contexts_epoch.load(std::memory_order_acquire);
  ThreadContext& t = t_context;
  if (t.ctx != current || t.epoch != epoch) {
    CUdevice dev;
    if (CUresult r = rt.cuda_aux.cuCtxGetDevice(&dev); r != CUDA_SUCCESS) return r;
    t = ThreadContext{current, int(dev), epoch};
  }
  *ordinal = t.device;
  if (ctx != nullptr) *ctx = current;
  return CUDA_SUCCESS;
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
