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

#include "common/raw_log.h"
#include "region/region.h"
#include "vgpu/config.h"
#include "vgpu/hooks.h"

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
};

struct NvmlAux {
  decltype(&::nvmlDeviceGetUUID) nvmlDeviceGetUUID = nullptr;
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

struct SmallPages {
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

  // Per process: what it holds and how much a context costs on each device.
  std::unordered_map<CUdeviceptr, Allocation> allocations;
  std::map<std::pair<CUcontext, int>, SmallPages> small_pages;
  struct ContextCharge {
    int device;
    uint64_t bytes;
    bool primary;
  };
  std::map<CUcontext, ContextCharge> contexts;        // every context this process created
  std::array<uint64_t, kMaxDevices> context_bytes{};  // measured; 0 = not yet
  std::array<uint64_t, kMaxDevices> granularity{};
  // CUDA ordinal -> the region's device index (matched by UUID; -1: not in the region, so
  // not accounted). Written before region_fast is published and again if CUDA's own device
  // list replaces the one learned from NVML.
  std::array<std::atomic<int>, kMaxDevices> region_index;

  Runtime() {
    for (auto& i : region_index) i.store(-1, std::memory_order_relaxed);
  }
};

Runtime& Rt();

// Stage functions; each returns quickly once done. Callers must not hold Rt().mu.
void EnsureConfigured();
bool EnsureCudaLoaded();  // false: no real libcuda.so.1
bool EnsureNvmlLoaded();  // false: no real libnvidia-ml.so.1
// Opens and joins the shared region (after the devices are known). Null if it cannot.
region::Region* EnsureRegion();
// Learns the CUDA-visible devices from the real driver (after a successful real cuInit).
void LearnDevicesFromCuda();
// For NVML: the visible devices with their NVML handles (from CUDA_VISIBLE_DEVICES over
// NVML's list when CUDA has not been initialized). Needs real NVML initialized.
std::vector<VisibleDevice> VisibleDevicesForNvml();

// The current context's CUDA ordinal, or the driver's error (no context...).
CUresult CurrentDevice(int* ordinal, CUcontext* ctx = nullptr);

// The region's index of CUDA ordinal `ordinal`, or -1 when the region does not hold it.
int RegionIndex(int ordinal);
// Memory limit of CUDA ordinal `ordinal` as the region says (0 = unlimited).
uint64_t LimitOf(int ordinal);
// The memory the container sees on CUDA ordinal `ordinal`, from the device's physical
// figures: total = min(limit, physical), free = min(physical free, total - what the
// container uses), never negative. What dead processes left behind is returned first (at
// most once per region::kSweepIntervalNs). False when the device has no limit: the
// physical figures stand.
bool LimitedView(int ordinal, uint64_t physical_total, uint64_t physical_free, uint64_t* total,
                 uint64_t* free);

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
  static thread_local int depth_;
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
