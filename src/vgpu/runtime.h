// libvgpu.so's process-wide state and its lazy, once-only initialization.
//
// Nothing runs at load time but setting a flag. The first CUDA or NVML call (whichever comes
// first) reads the limits file, then the environment, loads the real driver by its soname
// (no fixed path), and opens and joins the container's shared region. A fork child starts
// its per-process state afresh (registration, allocations, contexts) at its next call.
//
// Thread safety: every function may be called from any thread; state is guarded by
// Runtime::mu (not held across calls into the driver). No exception crosses a C boundary
// (the library is built with -fno-exceptions).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/client.h"
#include "common/raw_log.h"
#include "region/region.h"
#include "vgpu/config.h"
#include "vgpu/hooks.h"
#include "vgpu/pointer_map.h"

namespace hami::vgpu {

extern RawLogger g_log;

// Driver functions libvgpu needs for itself but does not intercept.
struct CudaAux {
  decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
  decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
  decltype(&::cuDeviceGetUuid_v2) cuDeviceGetUuid_v2 = nullptr;
  decltype(&::cuDeviceGetUuid) cuDeviceGetUuid = nullptr;
  decltype(&::cuCtxGetDevice) cuCtxGetDevice = nullptr;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent = nullptr;
  decltype(&::cuDevicePrimaryCtxGetState) cuDevicePrimaryCtxGetState = nullptr;
  decltype(&::cuMemGetAllocationGranularity) cuMemGetAllocationGranularity = nullptr;
  decltype(&::cuStreamGetCtx) cuStreamGetCtx = nullptr;
  decltype(&::cuStreamIsCapturing) cuStreamIsCapturing = nullptr;
  decltype(&::cuStreamIsCapturing_ptsz) cuStreamIsCapturing_ptsz = nullptr;
  decltype(&::cuDeviceGetMemPool) cuDeviceGetMemPool = nullptr;
  decltype(&::cuDeviceGetDefaultMemPool) cuDeviceGetDefaultMemPool = nullptr;
  decltype(&::cuMemPoolGetAttribute) cuMemPoolGetAttribute = nullptr;
  decltype(&::cuDeviceGetGraphMemAttribute) cuDeviceGetGraphMemAttribute = nullptr;
  decltype(&::cuGraphGetNodes) cuGraphGetNodes = nullptr;
  decltype(&::cuGraphNodeGetType) cuGraphNodeGetType = nullptr;
  decltype(&::cuGraphMemAllocNodeGetParams) cuGraphMemAllocNodeGetParams = nullptr;
  decltype(&::cuGraphChildGraphNodeGetGraph) cuGraphChildGraphNodeGetGraph = nullptr;
  decltype(&::cuCtxPushCurrent_v2) cuCtxPushCurrent_v2 = nullptr;
  decltype(&::cuCtxPopCurrent_v2) cuCtxPopCurrent_v2 = nullptr;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute = nullptr;
  decltype(&::cuGraphKernelNodeGetParams_v2) cuGraphKernelNodeGetParams_v2 = nullptr;
};

struct NvmlAux {
  decltype(&::nvmlDeviceGetUUID) nvmlDeviceGetUUID = nullptr;
  decltype(&::nvmlDeviceGetProcessUtilization) nvmlDeviceGetProcessUtilization = nullptr;
  decltype(&::nvmlDeviceGetUtilizationRates) nvmlDeviceGetUtilizationRates = nullptr;
};

// One device the container's CUDA sees, by CUDA ordinal.
struct VisibleDevice {
  std::string uuid;             // "GPU-..."
  int nvml_index = -1;          // the host's NVML index of the same device
  nvmlDevice_t nvml = nullptr;  // its NVML handle, once NVML is loaded
};

// What a process holds of the region's budget, by what it is.
struct Allocation {
  int device;
  uint64_t charge;
  region::UsageKind kind;
  CUcontext ctx;
  bool small;  // shares granule pages (see ChargeFor)
};

// Something held that is not linear memory (an array, a module): by handle.
struct Held {
  int device;  // CUDA ordinal
  uint64_t bytes;
  region::UsageKind kind;
  CUcontext ctx;  // goes with its context
};

// The granule pages a context's small allocations share.
struct SmallPages {
  CUcontext ctx = nullptr;
  int device = -1;
  uint64_t bytes = 0;
  uint64_t pages = 0;
};

struct Runtime {
  std::mutex mu;
  // Set once each stage is done, read without the lock by every hook.
  std::atomic<bool> configured_fast{false};
  std::atomic<bool> cuda_loaded{false};
  std::atomic<bool> nvml_loaded{false};
  std::atomic<region::Region*> region_fast{nullptr};
  std::atomic<bool> region_gave_up{false};  // no region can be had (until a fork)

  // Initialization stages; each is attempted once per process (again after fork).
  bool configured = false;
  bool cuda_load_tried = false;
  bool nvml_load_tried = false;
  bool region_tried = false;
  bool devices_from_cuda = false;

  Config config;
  void* cuda_handle = nullptr;
  void* nvml_handle = nullptr;
  CudaReal cuda;
  CudaAux cuda_aux;
  NvmlReal nvml;
  NvmlAux nvml_aux;
  std::vector<VisibleDevice> devices;

  std::unique_ptr<region::Region> region;

  // ---- per process: what it holds (cleared in a fork child) ----
  // Linear allocations, by address; small ones share pages per context (one device each).
  PointerMap<Allocation> allocations;
  std::vector<SmallPages> small_pages;
  struct ContextCharge {
    int device;
    uint64_t bytes;
    bool primary;
  };
  std::map<CUcontext, ContextCharge> contexts;        // every context this process created
  std::array<uint64_t, kMaxDevices> context_bytes{};  // measured; 0 = not yet
  std::array<std::atomic<uint64_t>, kMaxDevices> granularity{};  // 0 = not yet asked
  // Arrays, mipmapped arrays, modules and libraries, by handle.
  std::unordered_map<const void*, Held> objects;
  // VMM physical allocations (freed when released and unmapped) and their mappings.
  struct Physical {
    int device;
    uint64_t bytes;
    int refs;
    int mappings;
  };
  std::map<CUmemGenericAllocationHandle, Physical> physical;
  struct Mapping {
    CUmemGenericAllocationHandle handle;
    size_t size;
  };
  std::map<CUdeviceptr, Mapping> mapped;
  // Stream-ordered pools: what the region holds for each (its reserved memory). pool_mu is
  // held across a pool allocation's driver call so that estimates never overlap.
  std::mutex pool_mu;
  struct PoolCharge {
    int device;
    uint64_t charged;
  };
  std::map<CUmemoryPool, PoolCharge> pools;  // guarded by pool_mu
  std::atomic<bool> any_pools{false};
  // Graph memory: what the region holds per device (the device's reserved graph memory),
  // and what each executable graph's allocation nodes need per device.
  std::mutex graph_mu;
  std::array<uint64_t, kMaxDevices> graph_charged{};  // guarded by graph_mu
  struct GraphNeeds {
    std::array<uint64_t, kMaxDevices> bytes{};
    std::array<bool, kMaxDevices> resident{};  // launched since the last trim
  };
  std::map<CUgraphExec, GraphNeeds> graph_execs;  // guarded by graph_mu
  std::atomic<bool> any_graph_memory{false};
  // Module loads are measured one at a time, and only while nothing else allocates.
  std::mutex module_mu;
  // Allocating or freeing driver calls: begun (high 32 bits) and in flight (low 32 bits).
  std::atomic<uint64_t> allocation_calls{0};
  // Bumped whenever a context ends: a thread's cached context -> device answer is stale.
  std::atomic<uint64_t> contexts_epoch{0};

  // This process's host PID (identity.h): IdentityState, when a failed attempt is retried
  // and how long until the one after; one attempt at a time.
  std::atomic<int> identity_state{0};
  std::atomic<int64_t> identity_retry_ns{0};
  int64_t identity_backoff_ns = 0;  // guarded by identity_mu
  bool identity_logged = false;     // guarded by identity_mu
  std::mutex identity_mu;
  // The broker's answer, asked for before the driver's cuInit and read after it.
  broker::PendingQuery broker_query;          // guarded by identity_mu
  bool broker_query_started = false;          // guarded by identity_mu
  std::atomic<bool> cuda_initialized{false};  // the real cuInit succeeded in this process

  // The compute limiter (limiter.h): whether any device is limited, as of which policy
  // generation; each device's SMs and threads per SM (packed; 0 = not asked yet); whether
  // this process's controller thread runs.
  std::atomic<uint64_t> limits_generation{~uint64_t(0)};
  std::atomic<bool> any_sm_limit{false};
  std::array<std::atomic<uint64_t>, kMaxDevices> device_shape{};
  std::atomic<bool> controller_started{false};
  // The kernel nodes of each executable graph (blocks, threads per block), for its cost.
  std::mutex graph_kernels_mu;
  std::unordered_map<CUgraphExec, std::vector<std::pair<uint64_t, uint64_t>>> graph_kernels;

  // CUDA ordinal -> the region's device index (matched by UUID; -1: not in the region, so
  // not accounted). Written before region_fast is published and again if CUDA's own device
  // list replaces the one learned from NVML.
  std::array<std::atomic<int>, kMaxDevices> region_index;

  Runtime() {
    for (auto& i : region_index) i.store(-1, std::memory_order_relaxed);
  }
};

// Made at first use, not by a static initializer: another library's constructor may call a
// hook before this library's initializers have run. Never destroyed: hooks may run during
// static destruction.
extern constinit std::atomic<Runtime*> g_runtime;
Runtime& MakeRuntime();
inline Runtime& Rt() {
  Runtime* r = g_runtime.load(std::memory_order_acquire);
  return __builtin_expect(r != nullptr, 1) ? *r : MakeRuntime();
}

// Stage functions; each returns quickly once done (inline fast paths). Callers must not hold
// Rt().mu.
void EnsureConfigured();
bool LoadCuda();  // the slow path of EnsureCudaLoaded
bool LoadNvml();
region::Region* JoinRegion();
inline bool EnsureCudaLoaded() {  // false: no real libcuda.so.1
  return Rt().cuda_loaded.load(std::memory_order_acquire) || LoadCuda();
}
inline bool EnsureNvmlLoaded() {  // false: no real libnvidia-ml.so.1
  return Rt().nvml_loaded.load(std::memory_order_acquire) || LoadNvml();
}
// Opens and joins the shared region (after the devices are known). Null if it cannot.
inline region::Region* EnsureRegion() {
  Runtime& rt = Rt();
  region::Region* r = rt.region_fast.load(std::memory_order_acquire);
  if (r != nullptr && r->slot() >= 0) return r;
  return rt.region_gave_up.load(std::memory_order_relaxed) ? nullptr : JoinRegion();
}
// Learns the CUDA-visible devices from the real driver (after a successful real cuInit).
void LearnDevicesFromCuda();
// For NVML: the visible devices with their NVML handles (from CUDA_VISIBLE_DEVICES over
// NVML's list when CUDA has not been initialized). Needs real NVML initialized.
std::vector<VisibleDevice> VisibleDevicesForNvml();
// The same, one answer at a time without copying the list.
int NvmlVisibleCount();
int NvmlOrdinalOf(nvmlDevice_t h);  // the CUDA ordinal of a handle; -1: not visible
int NvmlIndexOf(int ordinal);       // the host's NVML index of a CUDA ordinal; -1: none
nvmlDevice_t NvmlHandleOf(int ordinal);
// This process's PID on the host as its region slot records it (0 until known).
pid_t OwnHostPid();

// The current context's CUDA ordinal, or the driver's error (no context...).
CUresult CurrentDevice(int* ordinal, CUcontext* ctx = nullptr);

// The region's index of CUDA ordinal `ordinal`, or -1 when the region does not hold it.
inline int RegionIndex(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return -1;
  return Rt().region_index[size_t(ordinal)].load(std::memory_order_relaxed);
}

// The memory the container sees on CUDA ordinal `ordinal`, from the device's physical
// figures: total = min(limit, physical), free = min(physical free, total - what the
// container uses), never negative. What dead processes left behind is returned first (at
// most once per region::kSweepIntervalNs). False when the device has no limit: the
// physical figures stand.
bool LimitedView(int ordinal, uint64_t physical_total, uint64_t physical_free, uint64_t* total,
                 uint64_t* free);

// Memory limit of CUDA ordinal `ordinal` as the region says (0 = unlimited).
inline uint64_t LimitOf(int ordinal) {
  region::Region* reg = EnsureRegion();
  int index = RegionIndex(ordinal);
  return reg != nullptr && index >= 0 ? reg->MemoryLimit(index) : 0;
}

// Re-entry guard: a hook called from inside another hook on the same thread (the driver
// calling back into an exported name) passes straight through.
class HookScope {
 public:
  HookScope() : nested_(depth_++ > 0) {}
  ~HookScope() { --depth_; }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
  bool nested() const { return nested_; }

 private:
  // Initial-exec: one register-relative access, no __tls_get_addr call per hook.
  __attribute__((tls_model("initial-exec"))) static inline constinit thread_local int depth_ = 0;
  bool nested_;
};

}  // namespace hami::vgpu

// Opens a wrapper: binds `rt` and returns `fail` when there is no real driver or it lacks
// `name` (a missing driver gives the driver's own codes, never a crash).
#define HAMI_CUDA_REAL(name, fail)                                    \
  ::hami::vgpu::Runtime& rt = ::hami::vgpu::Rt();                     \
  if (!::hami::vgpu::EnsureCudaLoaded() || rt.cuda.name == nullptr) { \
    return fail;                                                      \
  }
#define HAMI_NVML_REAL(name)                                          \
  ::hami::vgpu::Runtime& rt = ::hami::vgpu::Rt();                     \
  if (!::hami::vgpu::EnsureNvmlLoaded() || rt.nvml.name == nullptr) { \
    return NVML_ERROR_UNINITIALIZED;                                  \
  }
