// libvgpu.so's process-wide state and its once-only initialization.
//
// Nothing runs at load time but setting a flag. The first CUDA or NVML call reads the limits
// file, then the environment (EnsureConfigured), and loads the real driver by its soname
// (driver.h). The container's shared region is joined once, explicitly, at initialization:
// in the cuInit hook after the real cuInit succeeded, and in the nvmlInit hooks (JoinRegion).
// Admission never joins. A process that cannot register (every slot held by a live process,
// or the region refused it) has every accounted allocation refused with
// CUDA_ERROR_OUT_OF_MEMORY; it never waits for a slot and never runs unaccounted.
//
// The state is split by what guards it: the driver tables are immutable once published
// (driver.h); the configuration is written once and then only read; the device table, the
// ledger (ledger.h), the identity, the pools and the graphs each have their own mutex, named
// in GUARDED_BY annotations that clang's -Wthread-safety checks. No lock of libvgpu is held
// across a call into the driver, NVML, dlopen or the region's cross-process mutex, except
// where a comment on the lock says why (pool and graph admission, module measurement).
//
// A fork child starts its per-process state afresh (registration, allocations, contexts) and
// registers again at its next cuInit. No exception crosses a C boundary (-fno-exceptions).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/client.h"
#include "common/mutex.h"
#include "common/raw_log.h"
#include "common/thread_annotations.h"
#include "region/region.h"
#include "vgpu/call_census.h"
#include "vgpu/config.h"
#include "vgpu/driver.h"
#include "vgpu/hooks.h"
#include "vgpu/ledger.h"
#include "vgpu/outside_budget.h"

namespace hami::vgpu {

extern RawLogger g_log;

// One device the container's CUDA sees, by CUDA ordinal.
struct VisibleDevice {
  std::string uuid;             // "GPU-..."
  int nvml_index = -1;          // the host's NVML index of the same device
  nvmlDevice_t nvml = nullptr;  // its NVML handle, once NVML is loaded
};

// Where the process stands with the shared region.
enum class JoinState : uint32_t {
  kNotYet = 0,   // not initialized (or a fork child before its cuInit)
  kJoining = 1,  // one thread is opening and registering; the others wait for it
  kJoined = 2,   // registered: allocations are accounted
  kRefused = 3,  // no slot could be had: every accounted allocation is refused
};

struct Runtime {
  // ---- configuration: written once, then read-only (configured_fast published) ----
  Mutex config_mu;
  std::atomic<bool> configured_fast{false};
  bool configured GUARDED_BY(config_mu) = false;
  Config config;  // immutable once configured_fast is true

  // ---- the visible devices, as CUDA numbers them ----
  Mutex devices_mu;
  std::vector<VisibleDevice> devices GUARDED_BY(devices_mu);
  bool devices_from_cuda GUARDED_BY(devices_mu) = false;
  // The process (ForkCount()) whose NVML handles `devices` holds: a fork child's NVML may
  // hand out other handles once the child initializes it.
  uint64_t nvml_mapped_in GUARDED_BY(devices_mu) = ~uint64_t(0);
  bool warned_visible GUARDED_BY(devices_mu) = false;
  // CUDA ordinal -> the region's device index (matched by UUID; -1: not in the region, so not
  // accounted).
  std::array<std::atomic<int>, kMaxDevices> region_index;

  // ---- the shared region: opened and joined once (again in a fork child) ----
  std::atomic<uint32_t> join_state{uint32_t(JoinState::kNotYet)};
  // Written by the joining thread before join_state leaves kJoining; never replaced after.
  std::unique_ptr<region::Region> region;
  std::atomic<region::Region*> region_fast{nullptr};  // views read it without joining
  std::atomic<bool> refusal_logged{false};

  // ---- what this process holds (cleared in a fork child) ----
  Ledger ledger;
  // Outside the device budget: allocations served from host memory (spill.h) and other
  // processes' memory mapped here (imports.h).
  Spills spills;
  Imports imports;
  std::array<std::atomic<uint64_t>, kMaxDevices> granularity{};  // 0 = not yet asked
  // Bumped whenever a context ends: a thread's cached context -> device answer is stale.
  std::atomic<uint64_t> contexts_epoch{0};
  // Allocating or freeing driver calls: begun and in flight (accounting.h: Allocating).
  CallCensus allocation_calls;
  // Module loads are measured one at a time (held across the load: two loads measured
  // together would each count the other's memory; a load never calls back into a hook that
  // takes it).
  Mutex module_mu;

  // Stream-ordered pools: what the region holds for each (its reserved memory). pool_mu is
  // held across a pool allocation's driver call so that two estimates never count the same
  // cached bytes.
  struct PoolCharge {
    int device;
    uint64_t charged;
  };
  Mutex pool_mu;
  std::map<CUmemoryPool, PoolCharge> pools GUARDED_BY(pool_mu);
  std::atomic<bool> any_pools{false};

  // Graph memory: what the region holds per device (the device's reserved graph memory),
  // and what each executable graph's allocation nodes need per device. graph_mu is held
  // across a graph's first launch so that no other launch counts on the same memory.
  struct GraphNeeds {
    std::array<uint64_t, kMaxDevices> bytes{};
    std::array<bool, kMaxDevices> resident{};  // launched since the last trim
  };
  Mutex graph_mu;
  std::array<uint64_t, kMaxDevices> graph_charged GUARDED_BY(graph_mu) = {};
  std::map<CUgraphExec, GraphNeeds> graph_execs GUARDED_BY(graph_mu);
  std::atomic<bool> any_graph_memory{false};

  // ---- identity (identity.h): one attempt at a time ----
  std::atomic<int> identity_state{0};
  std::atomic<int64_t> identity_retry_ns{0};
  Mutex identity_mu;
  int64_t identity_backoff_ns GUARDED_BY(identity_mu) = 0;
  bool identity_logged GUARDED_BY(identity_mu) = false;
  // The broker's answer, asked for before the driver's cuInit and read after it.
  broker::PendingQuery broker_query GUARDED_BY(identity_mu);
  bool broker_query_started GUARDED_BY(identity_mu) = false;
  std::atomic<bool> cuda_initialized{false};  // the real cuInit succeeded in this process

  // ---- the compute limiter (limiter.h) ----
  // Whether any device is limited, as of which policy generation; each device's SMs and
  // threads per SM (packed; 0 = not asked yet); whether this process's controller runs.
  std::atomic<uint64_t> limits_generation{~uint64_t(0)};
  std::atomic<bool> any_sm_limit{false};
  std::array<std::atomic<uint64_t>, kMaxDevices> device_shape{};
  std::atomic<bool> controller_started{false};

  // ---- the watcher (watch.h) ----
  std::atomic<bool> watcher_started{false};
  // The region's limits when this process joined it (what Region::Open compared with its
  // own): written by the joining thread before the watcher starts, read by the watcher.
  std::array<uint64_t, kMaxDevices> joined_memory_limit{};
  std::array<uint32_t, kMaxDevices> joined_sm_limit{};
  // This process's own limits per region device (bytes, 0 = none; percent, 0 or 100 = none):
  // config's at first (EnsureConfigured), then what the root-owned limits file says whenever it
  // changes (the watcher), never the environment again. Held with the region's
  // (Region::SetOwnMemoryLimit, SetOwnSmLimit).
  std::array<std::atomic<uint64_t>, kMaxDevices> own_memory_limit{};
  std::array<std::atomic<uint32_t>, kMaxDevices> own_sm_limit{};
  // The limits file as EnsureConfigured read it (LimitsFileState): written once before the
  // region is joined, read by the watcher, whose first look follows a change made since.
  std::string configured_limits_state;
  // The file at the region's path is no longer the one this process mapped (found by the
  // watcher, or by a fork child reopening it): every accounted allocation is refused from then
  // on. Kept in a fork child.
  std::atomic<bool> region_replaced{false};
  // A suspend-policy refusal has been said in the current episode of a gap.
  std::atomic<bool> unaccounted_refusal_logged{false};

  // The kernel nodes of each executable graph (blocks, threads per block), for its cost.
  Mutex graph_kernels_mu;
  std::unordered_map<CUgraphExec, std::vector<std::pair<uint64_t, uint64_t>>> graph_kernels
      GUARDED_BY(graph_kernels_mu);

  // ---- the libraries this state calls ----
  // The process's own state (Rt()) calls the real libcuda and libnvidia-ml, loaded at first
  // use (driver.h); a state made for a test names tables of its own. Set at construction.
  const CudaDriver* cuda_tables = nullptr;
  const NvmlDriver* nvml_tables = nullptr;
  // The process's own state: it starts the watcher and the compute controller and gives its
  // region slot back at exit. A test's state does neither (they would outlive it).
  bool owns_process = true;

  Runtime() {
    for (auto& i : region_index) i.store(-1, std::memory_order_relaxed);
  }
  // A state of its own, configured with `config` as if read from the limits file and the
  // environment, calling `cuda` and `nvml`, starting no thread: for tests of the policy.
  Runtime(Config given, const CudaDriver* cuda, const NvmlDriver* nvml) : Runtime() {
    config = std::move(given);
    configured = true;
    configured_fast.store(true, std::memory_order_release);
    cuda_tables = cuda;
    nvml_tables = nvml;
    owns_process = false;
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The tables as driver.h gives them (null: no library), from this state's libraries; a
  // test's empty tables (internal::kNoCuda, kNoNvml) read as no library.
  const CudaDriver* Cuda() const {
    return cuda_tables != nullptr ? Named(cuda_tables) : ::hami::vgpu::Cuda();
  }
  const CudaDriver* CudaIfLoaded() const {
    return cuda_tables != nullptr ? Named(cuda_tables) : ::hami::vgpu::CudaIfLoaded();
  }
  const CudaDriver& CudaOrEmpty() const {
    return cuda_tables != nullptr ? *cuda_tables : ::hami::vgpu::CudaOrEmpty();
  }
  const NvmlDriver* Nvml() const {
    return nvml_tables != nullptr ? Named(nvml_tables) : ::hami::vgpu::Nvml();
  }
  const NvmlDriver* NvmlIfLoaded() const {
    return nvml_tables != nullptr ? Named(nvml_tables) : ::hami::vgpu::NvmlIfLoaded();
  }
  const NvmlDriver& NvmlOrEmpty() const {
    return nvml_tables != nullptr ? *nvml_tables : ::hami::vgpu::NvmlOrEmpty();
  }
  // NVML initialized for libvgpu's own queries (driver.h); a test's tables are taken as they
  // are given.
  bool NvmlReady() const {
    return nvml_tables != nullptr ? Named(nvml_tables) != nullptr : ::hami::vgpu::NvmlReady();
  }

 private:
  static const CudaDriver* Named(const CudaDriver* d) {
    return d == &internal::kNoCuda ? nullptr : d;
  }
  static const NvmlDriver* Named(const NvmlDriver* d) {
    return d == &internal::kNoNvml ? nullptr : d;
  }
};

// The process's state. It is named only where libvgpu is entered: a hook's prologue
// (prologue.h), the driver loader, the fork and exit handlers; the watcher and the controller
// are handed it when they start. Everything below takes the state as a parameter, so a test
// makes a state of its own (the testing constructor above) and no process-wide one exists.
// Made at first use, not by a static initializer: another library's constructor may call a
// hook before this library's initializers have run. Never destroyed: hooks may run during
// static destruction.
extern constinit std::atomic<Runtime*> g_runtime;
Runtime& MakeRuntime();
inline Runtime& Rt() {
  Runtime* r = g_runtime.load(std::memory_order_acquire);
  return __builtin_expect(r != nullptr, 1) ? *r : MakeRuntime();
}

// Reads the limits file and the environment, once. Holds config_mu only across that.
void EnsureConfigured(Runtime& rt);

// Initialization: joins the shared region once (opens it, creating it if missing, and
// registers this process), after the devices are known. Called by the cuInit and nvmlInit
// hooks; a second call returns what the first found. Threads that arrive while another joins
// wait for it (on the state word, holding nothing). Returns the state reached.
JoinState JoinRegion(Runtime& rt);

// Learns the CUDA-visible devices from the real driver (after a successful real cuInit).
void LearnDevicesFromCuda(Runtime& rt);
// For NVML: the visible devices (from CUDA_VISIBLE_DEVICES over NVML's list when CUDA has
// not been initialized), one answer at a time. Need real NVML initialized.
int NvmlVisibleCount(Runtime& rt);
int NvmlOrdinalOf(Runtime& rt, nvmlDevice_t h);  // the CUDA ordinal of a handle; -1: not visible
int NvmlIndexOf(Runtime& rt, int ordinal);  // the host's NVML index of a CUDA ordinal; -1: none
nvmlDevice_t NvmlHandleOf(Runtime& rt, int ordinal);
// This process's PID on the host as its region slot records it (0 until known).
pid_t OwnHostPid(Runtime& rt);

// The current context's CUDA ordinal, or the driver's error (no context...).
CUresult CurrentDevice(Runtime& rt, int* ordinal, CUcontext* ctx = nullptr);

// The region's index of CUDA ordinal `ordinal`, or -1 when the region does not hold it.
inline int RegionIndex(Runtime& rt, int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return -1;
  return rt.region_index[size_t(ordinal)].load(std::memory_order_relaxed);
}

// Starts `body(arg)` on a detached thread of this process, with every signal blocked, unless
// `started` says one was (a fork child clears it: threads do not survive fork). False only
// when the thread could not be created; it is not tried again.
bool StartThreadOnce(std::atomic<bool>& started, void* (*body)(void*), void* arg);

// The CUDA ordinal this process sees region device `index` as, or -1.
int OrdinalOf(Runtime& rt, int index);

// The region as views and the limiter read it (its policy and totals), without joining:
// null before initialization.
inline region::Region* ViewRegion(Runtime& rt) {
  return rt.region_fast.load(std::memory_order_acquire);
}

// The memory the container sees on CUDA ordinal `ordinal`, from the device's physical
// figures: total = min(limit, physical), free = min(physical free, total - what the
// container uses), never negative. What dead processes left behind is returned first (at
// most once per region::kSweepIntervalNs). False when the device has no limit: the
// physical figures stand.
bool LimitedView(Runtime& rt, int ordinal, uint64_t physical_total, uint64_t physical_free,
                 uint64_t* total, uint64_t* free);

// The memory limit in force on CUDA ordinal `ordinal`: the region's or this process's own,
// whichever is stricter (0 = unlimited).
inline uint64_t LimitOf(Runtime& rt, int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return 0;
  region::Region* reg = rt.region_fast.load(std::memory_order_acquire);
  if (reg == nullptr) return 0;
  const int index = rt.region_index[size_t(ordinal)].load(std::memory_order_relaxed);
  return index >= 0 ? reg->EffectiveMemoryLimit(index) : 0;
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

// Opens a CUDA wrapper: binds `drv` (the real driver's tables) and returns `fail` when there
// is no real driver or it lacks `name` (a missing driver gives the driver's own codes, never
// a crash).
#define HAMI_CUDA_REAL(name, fail)                                          \
  const ::hami::vgpu::CudaDriver* hami_drv_ = ::hami::vgpu::Cuda();         \
  if (hami_drv_ == nullptr || hami_drv_->cuda.name == nullptr) return fail; \
  const ::hami::vgpu::CudaDriver& drv = *hami_drv_
// The same for NVML: binds `nv`.
#define HAMI_NVML_REAL(name)                                       \
  const ::hami::vgpu::NvmlDriver* hami_nv_ = ::hami::vgpu::Nvml(); \
  if (hami_nv_ == nullptr || hami_nv_->nvml.name == nullptr) {     \
    return NVML_ERROR_UNINITIALIZED;                               \
  }                                                                \
  const ::hami::vgpu::NvmlDriver& nv = *hami_nv_
