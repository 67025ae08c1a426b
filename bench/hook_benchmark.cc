// hami_bench_hook: what libvgpu.so's wrappers add to a driver call, measured beside the goals.
//
// One process holds two ways into one simulated driver:
//   direct   dlsym on the simulated libcuda.so.1 / libnvidia-ml.so.1, loaded by full path;
//   wrapped  dlsym on libvgpu.so, loaded by full path with RTLD_LOCAL (nothing is preloaded).
// libvgpu's own lazy dlopen("libcuda.so.1") finds the simulated library already loaded, by
// its soname, so both sides reach the same driver with the same state; checked before any
// timing, as is the configuration below (the limit is visible through the wrappers only).
//
// Configuration, set before anything is loaded: a private simulated machine (h100-80g:2,
// state file in a temp dir, launches cost 1 ns of device time), a memory limit of 8 GiB on
// CUDA device 0 and none on device 1, a private shared region in the same temp dir, no SM
// limit. Cases, each a direct and a wrapped benchmark:
//   pass_through   cuDeviceTotalMem_v2 on device 1 (no limit: the wrapper forwards and reads
//                  the device's limit, 0; no accounting)
//   launch         cuLaunchKernel of a manifest kernel to a non-blocking stream, with a
//                  direct cuStreamSynchronize every kSyncEvery launches on both sides
//   launch_sm_limit  the same with CUDA_DEVICE_SM_LIMIT=50 and the budget available: the
//                  launch is charged to the container's bucket, which never runs dry (run in
//                  a child process, below)
//   alloc_free     cuMemAlloc_v2 + cuMemFree_v2 on device 0 (limited), 4 MiB and 4 KiB; a
//                  4 KiB allocation stays live throughout, so a small allocation shares a
//                  page already charged (the steady state of a program's small buffers)
//   vmm_create_release, vmm_map_unmap
//                  cuMemCreate + cuMemRelease of a 2 MiB granule on device 0 (limited), and
//                  cuMemMap + cuMemUnmap of a granule the same side made into a range reserved
//                  once; the goal, +100 ns per call, is +200 for each pair
//   mem_get_info   cuMemGetInfo_v2 on device 0 (limited)
//   nvml_count     nvmlDeviceGetCount_v2
//   nvml_mem_info  nvmlDeviceGetMemoryInfo on device 0 (limited)
//   cudart_malloc, cudart_launch
//                  the CUDA runtime's cudaMalloc + cudaFree (4 MiB, device 0, limited) and a
//                  <<<>>> launch to a stream, from the nvcc-built client of tests/cudart
//                  (cudart_client_shared) in two processes of its own: one on the simulated
//                  driver, one with libvgpu.so preloaded (the runtime reaches the driver
//                  through cuGetProcAddress_v2); each process times its calls (its thread's
//                  CPU time, the lowest of 10 rounds) and prints the figures. Not run when the
//                  client was not built (no nvcc when the build was configured)
//
// libvgpu reads CUDA_DEVICE_SM_LIMIT once, at its first call, and a limit anywhere puts every
// launch of the process on the charging path; so launch_sm_limit runs in a child process of its
// own: this binary again, with the same flags (less --benchmark_out*, whose file is this
// process's) and kChildVariable naming the file for its figures. The child sets up a machine,
// a region and the configuration above of its own, plus the limit, then fills the container's
// bucket for device 0 through the region library (tokens and rate far past anything a run
// uses, refilled now), so that every wrapped launch takes the budget's fast path; it checks
// that a wrapped launch is charged without waiting before timing, and that no launch waited
// after. Its Google Benchmark output follows this process's (on stderr with
// --benchmark_format=json), and its figures join the table.
//
// After the Google Benchmark output: a table of direct, wrapped and added nanoseconds per
// call beside each goal. The table takes each benchmark's lowest CPU time per iteration over
// its repetitions: the thread's own time, so another process taking the CPU (a shared
// machine) does not count; every case here runs without blocking, so on a quiet machine CPU
// and real time agree. Goals are reported, never enforced: the exit status is 0 when
// everything ran, 1 when the setup failed, 2 on bad flags.
//
// usage: hami_bench_hook [--benchmark_*]
//   defaults, each replaced by the same flag given: --benchmark_min_time=0.05
//   --benchmark_repetitions=10 --benchmark_enable_random_interleaving=true
//   --benchmark_display_aggregates_only=true; --benchmark_format=json keeps stdout JSON (the
//   table goes to stderr).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <regex.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/proc.h"
#include "nvml/nvml.h"
#include "region/region.h"

extern char** environ;

namespace hami::bench {
namespace {

constexpr uint64_t kLimitBytes = 8ull << 30;
constexpr char kLimitText[] = "8g";
constexpr int kLimitedDevice = 0;
constexpr int kFreeDevice = 1;  // no memory limit
constexpr int kSyncEvery = 1024;
constexpr uint64_t kLargeBytes = 4ull << 20;
constexpr uint64_t kSmallBytes = 4ull << 10;
constexpr double kNoGoal = -1;
constexpr int kDeviceVariables = 16;  // CUDA_DEVICE_*_<i>: the indices libvgpu reads
// The SM-limit case's child: its limit, and its bucket (milli-units of a wave; a launch here
// costs 1000): more than any run can take, at a rate no refill needs.
constexpr char kSmLimitText[] = "50";
constexpr uint32_t kSmLimitPercent = 50;
constexpr int64_t kFullBucket = int64_t(1) << 62;
constexpr uint64_t kUnlimitedRate = uint64_t(1) << 62;
// In a child's environment: where it writes its figures.
constexpr char kChildVariable[] = "HAMI_BENCH_HOOK_SM_LIMIT_RESULTS";

// The calls both sides make. NOTE: one row per function; the table of pointers and the
// lookup of each side are expanded from it.
#define HAMI_HOOK_BENCH_CALLS(X) \
  X(cuInit)                      \
  X(cuDevicePrimaryCtxRetain)    \
  X(cuDeviceTotalMem_v2)         \
  X(cuLaunchKernel)              \
  X(cuMemAlloc_v2)               \
  X(cuMemFree_v2)                \
  X(cuMemGetInfo_v2)             \
  X(cuMemCreate)                 \
  X(cuMemRelease)                \
  X(cuMemMap)                    \
  X(cuMemUnmap)                  \
  X(nvmlInit_v2)                 \
  X(nvmlDeviceGetCount_v2)       \
  X(nvmlDeviceGetMemoryInfo)

struct Api {
#define HAMI_FIELD(name) decltype(&::name) name = nullptr;
  HAMI_HOOK_BENCH_CALLS(HAMI_FIELD)
#undef HAMI_FIELD
};

// Driver functions used only to set up and to drain the stream: always the direct ones.
struct Driver {
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent = nullptr;
  decltype(&::cuModuleLoadData) cuModuleLoadData = nullptr;
  decltype(&::cuModuleGetFunction) cuModuleGetFunction = nullptr;
  decltype(&::cuStreamCreate) cuStreamCreate = nullptr;
  decltype(&::cuStreamSynchronize) cuStreamSynchronize = nullptr;
  decltype(&::cuMemAddressReserve) cuMemAddressReserve = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) nvmlDeviceGetHandleByIndex_v2 = nullptr;
};

enum class Side { kDirect, kWrapped };

struct World {
  Api direct;
  Api wrapped;
  Driver driver;
  CUfunction kernel = nullptr;
  CUstream stream = nullptr;
  nvmlDevice_t nvml_limited = nullptr;
  CUdeviceptr small_ballast = 0;
  CUdeviceptr vmm_range = 0;  // reserved once: the VMM cases map granules into it

  const Api& api(Side side) const { return side == Side::kDirect ? direct : wrapped; }
};

World g_world;

// ---- the cases ----

void PassThrough(benchmark::State& state, const Api& api) {
  size_t bytes = 0;
  for (auto _ : state) {
    if (api.cuDeviceTotalMem_v2(&bytes, kFreeDevice) != CUDA_SUCCESS) {
      state.SkipWithError("cuDeviceTotalMem_v2");
      break;
    }
    benchmark::DoNotOptimize(bytes);
  }
}

void Launch(benchmark::State& state, const Api& api) {
  const World& w = g_world;
  int pending = 0;
  for (auto _ : state) {
    if (api.cuLaunchKernel(w.kernel, 1, 1, 1, 32, 1, 1, 0, w.stream, nullptr, nullptr) !=
        CUDA_SUCCESS) {
      state.SkipWithError("cuLaunchKernel");
      break;
    }
    if (++pending == kSyncEvery) {
      w.driver.cuStreamSynchronize(w.stream);
      pending = 0;
    }
  }
  w.driver.cuStreamSynchronize(w.stream);
}

template <uint64_t kBytes>
void AllocFree(benchmark::State& state, const Api& api) {
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (api.cuMemAlloc_v2(&p, kBytes) != CUDA_SUCCESS || api.cuMemFree_v2(p) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemAlloc_v2/cuMemFree_v2");
      break;
    }
  }
}

// A granule of device 0's memory for the VMM cases (the simulated granularity, 2 MiB).
constexpr uint64_t kGranuleBytes = 2ull << 20;

CUmemAllocationProp VmmProp() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = kLimitedDevice;
  return prop;
}

// cuMemCreate + cuMemRelease of one granule: the physical allocation charged and given back.
void VmmCreateRelease(benchmark::State& state, const Api& api) {
  const CUmemAllocationProp prop = VmmProp();
  for (auto _ : state) {
    CUmemGenericAllocationHandle h = 0;
    if (api.cuMemCreate(&h, kGranuleBytes, &prop, 0) != CUDA_SUCCESS ||
        api.cuMemRelease(h) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemCreate/cuMemRelease");
      break;
    }
  }
}

// cuMemMap + cuMemUnmap of one granule made by the same side, into the reserved range.
void VmmMapUnmap(benchmark::State& state, const Api& api) {
  const CUmemAllocationProp prop = VmmProp();
  CUmemGenericAllocationHandle h = 0;
  if (api.cuMemCreate(&h, kGranuleBytes, &prop, 0) != CUDA_SUCCESS) {
    state.SkipWithError("cuMemCreate");
    return;
  }
  for (auto _ : state) {
    if (api.cuMemMap(g_world.vmm_range, kGranuleBytes, 0, h, 0) != CUDA_SUCCESS ||
        api.cuMemUnmap(g_world.vmm_range, kGranuleBytes) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemMap/cuMemUnmap");
      break;
    }
  }
  api.cuMemRelease(h);
}

void MemGetInfo(benchmark::State& state, const Api& api) {
  size_t free_bytes = 0, total_bytes = 0;
  for (auto _ : state) {
    if (api.cuMemGetInfo_v2(&free_bytes, &total_bytes) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemGetInfo_v2");
      break;
    }
    benchmark::DoNotOptimize(free_bytes);
  }
}

void NvmlCount(benchmark::State& state, const Api& api) {
  unsigned count = 0;
  for (auto _ : state) {
    if (api.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) {
      state.SkipWithError("nvmlDeviceGetCount_v2");
      break;
    }
    benchmark::DoNotOptimize(count);
  }
}

void NvmlMemInfo(benchmark::State& state, const Api& api) {
  nvmlMemory_t memory{};
  for (auto _ : state) {
    if (api.nvmlDeviceGetMemoryInfo(g_world.nvml_limited, &memory) != NVML_SUCCESS) {
      state.SkipWithError("nvmlDeviceGetMemoryInfo");
      break;
    }
    benchmark::DoNotOptimize(memory);
  }
}

// Where a case runs: in this process, in the child process with the SM limit, or in the
// CUDA runtime client's processes (one per side).
enum class Where { kHere, kSmLimitChild, kCudartProcess };

struct Case {
  const char* name;      // benchmarks <name>/direct and <name>/wrapped
  const char* what;      // for the table
  double goal_added_ns;  // kNoGoal: reported only
  void (*run)(benchmark::State&, const Api&);
  Where where = Where::kHere;
};

const Case kCases[] = {
    {"pass_through", "cuDeviceTotalMem_v2, device without limit", 2, PassThrough},
    {"launch", "cuLaunchKernel, no SM limit", 10, Launch},
    {"launch_sm_limit", "cuLaunchKernel, SM limit, budget available", 50, Launch,
     Where::kSmLimitChild},
    {"alloc_free_4MiB", "cuMemAlloc_v2+cuMemFree_v2 4 MiB, limit", 100, AllocFree<kLargeBytes>},
    {"alloc_free_4KiB", "cuMemAlloc_v2+cuMemFree_v2 4 KiB, limit", 100, AllocFree<kSmallBytes>},
    {"vmm_create_release", "cuMemCreate+cuMemRelease 2 MiB, limit", 200, VmmCreateRelease},
    {"vmm_map_unmap", "cuMemMap+cuMemUnmap 2 MiB, limit", 200, VmmMapUnmap},
    {"mem_get_info", "cuMemGetInfo_v2, limit", kNoGoal, MemGetInfo},
    {"nvml_count", "nvmlDeviceGetCount_v2", kNoGoal, NvmlCount},
    {"nvml_mem_info", "nvmlDeviceGetMemoryInfo, limit", kNoGoal, NvmlMemInfo},
    {"cudart_malloc", "cudaMalloc+cudaFree 4 MiB (runtime), limit", kNoGoal, nullptr,
     Where::kCudartProcess},
    {"cudart_launch", "<<<>>> launch (runtime), no SM limit", kNoGoal, nullptr,
     Where::kCudartProcess},
};

constexpr const char* SideName(Side side) { return side == Side::kDirect ? "direct" : "wrapped"; }

// ---- setup ----

bool Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "hami_bench_hook: %s: %s\n", what, detail.c_str());
  return false;
}

// A fresh directory for the simulated machine's state and the shared region, removed (with
// both files) at the end of the run.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hami-bench-hook-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    for (const char* f : {kSimState, kRegion, kChildResults}) unlink((path_ + "/" + f).c_str());
    // The simulated machine's host-PID resolver (served by this process) beside its state.
    const std::string resolver = path_ + "/" + kSimState + ".hostpid";
    for (const char* f : {"resolver.sock", "resolver.lock"}) unlink((resolver + "/" + f).c_str());
    rmdir(resolver.c_str());
    rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  bool ok() const { return !path_.empty(); }
  std::string SimState() const { return path_ + "/" + kSimState; }
  std::string Region() const { return path_ + "/" + kRegion; }
  std::string ChildResults() const { return path_ + "/" + kChildResults; }

 private:
  static constexpr char kSimState[] = "sim.state";
  static constexpr char kRegion[] = "usage.cache";
  static constexpr char kChildResults[] = "sm-limit.results";
  std::string path_;
};

// Whether this process runs with the SM limit (the SM-limit case's child).
enum class SmLimit { kNone, kSet };

// The environment both libraries read at their first call: set before either is loaded,
// overriding whatever the caller had, so the run measures the configuration it states.
void SetEnvironment(const TempDir& dir, SmLimit sm_limit) {
  setenv("HAMI_SIM_PROFILE", "h100-80g:2", 1);
  setenv("HAMI_SIM_STATE", dir.SimState().c_str(), 1);
  setenv("HAMI_SIM_LAUNCH_NS", "0", 1);
  setenv("HAMI_SIM_WAVE_NS", "1", 1);
  setenv("HAMI_SIM_QUEUE_DEPTH", "65536", 1);
  setenv("HAMI_SIM_NVML_US", "0", 1);
  setenv("HAMI_SIM_INIT_US", "0", 1);
  setenv("HAMI_SIM_CTX_CREATE_US", "0", 1);
  setenv("HAMI_SIM_ALLOC_GRANULARITY", "2m", 1);
  setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", dir.Region().c_str(), 1);
  setenv(("CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(kLimitedDevice)).c_str(), kLimitText, 1);
  for (const char* name :
       {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_VISIBLE_DEVICES",
        "CUDA_OVERSUBSCRIBE", "GPU_CORE_UTILIZATION_POLICY"}) {
    unsetenv(name);
  }
  for (int d = 0; d < kDeviceVariables; ++d) {
    if (d != kLimitedDevice) unsetenv(("CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(d)).c_str());
    unsetenv(("CUDA_DEVICE_SM_LIMIT_" + std::to_string(d)).c_str());
  }
  if (sm_limit == SmLimit::kSet) setenv("CUDA_DEVICE_SM_LIMIT", kSmLimitText, 1);
}

template <typename T>
bool Sym(void* handle, const char* library, const char* name, T* slot) {
  *slot = reinterpret_cast<T>(dlsym(handle, name));
  return *slot != nullptr || Fail(library, std::string("no symbol ") + name);
}

bool LoadApi(void* cuda, void* nvml, const char* library, Api* api) {
  bool ok = true;
#define HAMI_LOAD(name) \
  ok &= Sym(std::string_view(#name).starts_with("nvml") ? nvml : cuda, library, #name, &api->name);
  HAMI_HOOK_BENCH_CALLS(HAMI_LOAD)
#undef HAMI_LOAD
  return ok;
}

// Loads the three libraries and checks that a load by soname (libvgpu's) finds the
// simulated ones.
bool Load(World* w) {
  std::string lib = ExecutableDir() + "/../lib";
  std::string sim = lib + "/sim";
  if (const char* env = std::getenv("HAMI_SIM_LIBDIR"); env != nullptr && *env != '\0') sim = env;
  std::string vgpu_path = lib + "/libvgpu.so";
  void* cuda = dlopen((sim + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return Fail("simulated libcuda.so.1", dlerror());
  void* nvml = dlopen((sim + "/libnvidia-ml.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) return Fail("simulated libnvidia-ml.so.1", dlerror());
  void* vgpu = dlopen(vgpu_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (vgpu == nullptr) return Fail("libvgpu.so", dlerror());
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != cuda ||
      dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD) != nvml) {
    return Fail("loading by soname", "does not find the simulated libraries loaded from " + sim);
  }
  Driver& d = w->driver;
  return LoadApi(cuda, nvml, "simulated driver", &w->direct) &&
         LoadApi(vgpu, vgpu, "libvgpu.so", &w->wrapped) &&
         Sym(cuda, "simulated driver", "cuCtxSetCurrent", &d.cuCtxSetCurrent) &&
         Sym(cuda, "simulated driver", "cuModuleLoadData", &d.cuModuleLoadData) &&
         Sym(cuda, "simulated driver", "cuModuleGetFunction", &d.cuModuleGetFunction) &&
         Sym(cuda, "simulated driver", "cuStreamCreate", &d.cuStreamCreate) &&
         Sym(cuda, "simulated driver", "cuStreamSynchronize", &d.cuStreamSynchronize) &&
         Sym(cuda, "simulated driver", "cuMemAddressReserve", &d.cuMemAddressReserve) &&
         Sym(nvml, "simulated NVML", "nvmlDeviceGetHandleByIndex_v2",
             &d.nvmlDeviceGetHandleByIndex_v2);
}

bool Check(CUresult r, const char* call) {
  return r == CUDA_SUCCESS || Fail(call, "CUresult " + std::to_string(int(r)));
}

bool Check(nvmlReturn_t r, const char* call) {
  return r == NVML_SUCCESS || Fail(call, "nvmlReturn_t " + std::to_string(int(r)));
}

// Initializes both sides (libvgpu first, so it opens the region and charges the primary
// context), then proves the configuration: the wrappers show the limit on device 0 and
// pass device 1 through.
bool Initialize(World* w) {
  const Api& wr = w->wrapped;
  const Api& di = w->direct;
  const Driver& d = w->driver;
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  if (!Check(wr.cuInit(0), "cuInit (wrapped)") || !Check(di.cuInit(0), "cuInit") ||
      !Check(wr.cuDevicePrimaryCtxRetain(&ctx, kLimitedDevice), "cuDevicePrimaryCtxRetain") ||
      !Check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent") ||
      !Check(d.cuModuleLoadData(&module, "hami-sim-module\nkernel busy\n"), "cuModuleLoadData") ||
      !Check(d.cuModuleGetFunction(&w->kernel, module, "busy"), "cuModuleGetFunction") ||
      !Check(d.cuStreamCreate(&w->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
      !Check(d.cuMemAddressReserve(&w->vmm_range, kGranuleBytes, 0, 0, 0), "cuMemAddressReserve") ||
      !Check(wr.nvmlInit_v2(), "nvmlInit_v2 (wrapped)") ||
      !Check(di.nvmlInit_v2(), "nvmlInit_v2") ||
      !Check(d.nvmlDeviceGetHandleByIndex_v2(kLimitedDevice, &w->nvml_limited),
             "nvmlDeviceGetHandleByIndex_v2")) {
    return false;
  }
  size_t limited = 0, free_direct = 0, free_wrapped = 0;
  if (!Check(wr.cuDeviceTotalMem_v2(&limited, kLimitedDevice), "cuDeviceTotalMem_v2") ||
      !Check(di.cuDeviceTotalMem_v2(&free_direct, kFreeDevice), "cuDeviceTotalMem_v2") ||
      !Check(wr.cuDeviceTotalMem_v2(&free_wrapped, kFreeDevice), "cuDeviceTotalMem_v2")) {
    return false;
  }
  if (limited != kLimitBytes || free_wrapped != free_direct || free_direct <= kLimitBytes) {
    return Fail("configuration", "through libvgpu device 0 shows " + std::to_string(limited) +
                                     " bytes (want the limit, " + std::to_string(kLimitBytes) +
                                     "), device 1 " + std::to_string(free_wrapped) +
                                     " (want the driver's " + std::to_string(free_direct) + ")");
  }
  // Warm what the first allocation of each kind learns once (the granularity), and hold a
  // small allocation so that the small case shares a page already charged.
  CUdeviceptr p = 0;
  return Check(wr.cuMemAlloc_v2(&p, kLargeBytes), "cuMemAlloc_v2") &&
         Check(wr.cuMemFree_v2(p), "cuMemFree_v2") &&
         Check(wr.cuMemAlloc_v2(&w->small_ballast, kSmallBytes), "cuMemAlloc_v2");
}

// ---- the SM-limit case's budget (in its child process) ----

// The container's limiter state for device 0 (region index 0: no CUDA_VISIBLE_DEVICES),
// through a read-write handle on the region libvgpu made.
struct Budget {
  std::unique_ptr<region::Region> region;
  region::layout::LimiterDevice* limiter = nullptr;
  int64_t waited_ns = 0;  // the launches' total wait for budget once filled
};

// Fills the bucket so that no run can empty it, then proves the case's configuration: the
// limit is in force on device 0, a direct launch is not charged, and a wrapped one is charged
// without waiting.
bool FillBudget(const World& w, const TempDir& dir, Budget* b) {
  auto opened = region::Region::Open(dir.Region(), nullptr, region::Create::kNever, nullptr,
                                     region::Access::kReadWrite);
  if (!opened.ok()) return Fail("the shared region", opened.error().message());
  b->region = std::move(opened).value();
  const uint32_t in_force = b->region->SmLimitInForce(kLimitedDevice);
  if (in_force != kSmLimitPercent) {
    return Fail("configuration", "the region shows an SM limit of " + std::to_string(in_force) +
                                     "% in force on device 0 (want " +
                                     std::to_string(kSmLimitPercent) + "%)");
  }
  region::layout::LimiterDevice& lim = b->region->Limiter(kLimitedDevice);
  b->limiter = &lim;
  lim.rate.store(kUnlimitedRate, std::memory_order_relaxed);
  lim.tokens.store(kFullBucket, std::memory_order_relaxed);
  lim.refill_ns.store(MonotonicNs(), std::memory_order_relaxed);

  const uint64_t admitted = lim.admitted.load(std::memory_order_relaxed);
  b->waited_ns = lim.waited_ns.load(std::memory_order_relaxed);
  if (!Check(w.direct.cuLaunchKernel(w.kernel, 1, 1, 1, 32, 1, 1, 0, w.stream, nullptr, nullptr),
             "cuLaunchKernel") ||
      !Check(w.driver.cuStreamSynchronize(w.stream), "cuStreamSynchronize")) {
    return false;
  }
  if (lim.admitted.load(std::memory_order_relaxed) != admitted) {
    return Fail("configuration", "a direct launch was charged to the budget");
  }
  if (!Check(w.wrapped.cuLaunchKernel(w.kernel, 1, 1, 1, 32, 1, 1, 0, w.stream, nullptr, nullptr),
             "cuLaunchKernel (wrapped)") ||
      !Check(w.driver.cuStreamSynchronize(w.stream), "cuStreamSynchronize")) {
    return false;
  }
  const uint64_t charged = lim.admitted.load(std::memory_order_relaxed) - admitted;
  const int64_t waited = lim.waited_ns.load(std::memory_order_relaxed) - b->waited_ns;
  if (charged == 0 || waited != 0) {
    return Fail("configuration", "a wrapped launch was charged " + std::to_string(charged) +
                                     " milli-units and waited " + std::to_string(waited) +
                                     " ns (want a charge, without a wait)");
  }
  return true;
}

// ---- reporting ----

double Lowest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Passes every run to the reporter the flags chose, in the order the benchmarks were
// registered (random interleaving finishes them in any order), and keeps, per benchmark,
// the lowest CPU time per iteration: over its repetitions, or their "min" statistic when
// only the statistics are reported.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  explicit CollectingReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner)
      : inner_(std::move(inner)) {}

  bool ReportContext(const Context& context) override { return inner_->ReportContext(context); }
  void ReportRuns(const std::vector<Run>& runs) override {
    if (!runs.empty()) held_.push_back(runs);
    for (const Run& run : runs) {
      bool lowest = run.run_type == Run::RT_Iteration ||
                    (run.run_type == Run::RT_Aggregate && run.aggregate_name == kLowest);
      if (!lowest || run.error_occurred) continue;
      double ns = run.GetAdjustedCPUTime() * NsPer(run.time_unit);
      auto [it, inserted] = lowest_ns_.try_emplace(run.run_name.function_name, ns);
      if (!inserted) it->second = std::min(it->second, ns);
    }
  }
  void Finalize() override {
    std::stable_sort(held_.begin(), held_.end(), [](const auto& a, const auto& b) {
      return a.front().family_index < b.front().family_index;
    });
    for (const std::vector<Run>& runs : held_) inner_->ReportRuns(runs);
    held_.clear();
    inner_->Finalize();
  }

  // A figure measured elsewhere (the SM-limit case's child process).
  void Record(const std::string& name, double ns) { lowest_ns_[name] = ns; }

  // NaN when the benchmark did not run (filtered out, or failed).
  double LowestNs(const std::string& name) const {
    auto it = lowest_ns_.find(name);
    return it == lowest_ns_.end() ? std::nan("") : it->second;
  }

  static constexpr char kLowest[] = "min";

 private:
  static double NsPer(benchmark::TimeUnit unit) {
    switch (unit) {
      case benchmark::kNanosecond:
        return 1;
      case benchmark::kMicrosecond:
        return 1e3;
      case benchmark::kMillisecond:
        return 1e6;
      case benchmark::kSecond:
        return 1e9;
    }
    return 1;
  }

  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
  std::vector<std::vector<Run>> held_;
  std::map<std::string, double> lowest_ns_;
};

std::string BenchmarkName(const Case& c, Side side) {
  return std::string(c.name) + "/" + SideName(side);
}

void PrintTable(FILE* out, const CollectingReporter& results) {
  std::fprintf(out,
               "\nlibvgpu.so wrapper overhead: CPU ns per call, lowest of the repetitions; "
               "added = wrapped - direct\n");
  std::fprintf(out, "%-16s %-42s %9s %9s %9s %8s  %s\n", "case", "call", "direct", "wrapped",
               "added", "goal", "meets");
  int missed = 0, unknown = 0;
  for (const Case& c : kCases) {
    double direct = results.LowestNs(BenchmarkName(c, Side::kDirect));
    double wrapped = results.LowestNs(BenchmarkName(c, Side::kWrapped));
    if (std::isnan(direct) || std::isnan(wrapped)) {
      unknown += c.goal_added_ns != kNoGoal ? 1 : 0;
      std::fprintf(out, "%-16s %-42s %9s %9s %9s\n", c.name, c.what, "not run", "", "");
      continue;
    }
    double added = wrapped - direct;
    char goal[32] = "-";
    const char* meets = "-";
    if (c.goal_added_ns != kNoGoal) {
      std::snprintf(goal, sizeof(goal), "<= +%g", c.goal_added_ns);
      bool met = added <= c.goal_added_ns;
      meets = met ? "yes" : "NO  <-- missed";
      missed += met ? 0 : 1;
    }
    std::fprintf(out, "%-16s %-42s %9.1f %9.1f %+9.1f %8s  %s\n", c.name, c.what, direct, wrapped,
                 added, goal, meets);
  }
  if (missed > 0) {
    std::fprintf(out, "GOALS MISSED: %d (reported, not enforced)\n", missed);
  } else if (unknown == 0) {
    std::fprintf(out, "every goal met\n");
  }
  if (unknown > 0) std::fprintf(out, "%d case(s) with a goal not run\n", unknown);
}

bool HasFlag(int argc, char** argv, std::string_view flag) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).starts_with(flag)) return true;
  }
  return false;
}

std::string FlagValue(int argc, char** argv, std::string_view flag) {
  std::string value;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.starts_with(flag) && a.size() > flag.size() && a[flag.size()] == '=') {
      value = std::string(a.substr(flag.size() + 1));
    }
  }
  return value;
}

// The reporter --benchmark_format asks for: json, else the console (the library's CSV
// reporter is deprecated).
std::unique_ptr<benchmark::BenchmarkReporter> MakeReporter(const std::string& format,
                                                           const std::string& color) {
  if (format == "json") return std::make_unique<benchmark::JSONReporter>();
  bool use_color = color == "true" || color == "yes" || color == "1" ||
                   ((color.empty() || color == "auto") && isatty(STDOUT_FILENO) != 0);
  return std::make_unique<benchmark::ConsoleReporter>(
      use_color ? benchmark::ConsoleReporter::OO_ColorTabular
                : benchmark::ConsoleReporter::OO_Tabular);
}

// In the SM-limit case's child: checks that no launch waited for budget (else its figures are
// not the case's, and none is written), then writes "<benchmark> <ns>" for each of the case's
// benchmarks that ran to `path`.
bool WriteChildResults(const std::string& path, const CollectingReporter& results,
                       const Budget& b) {
  const int64_t waited = b.limiter->waited_ns.load(std::memory_order_relaxed) - b.waited_ns;
  const int64_t tokens = b.limiter->tokens.load(std::memory_order_relaxed);
  if (waited != 0 || tokens < 0) {
    return Fail("launch_sm_limit", "launches waited " + std::to_string(waited) +
                                       " ns for budget (the bucket holds " +
                                       std::to_string(tokens) + "): not the case to measure");
  }
  std::string text;
  for (const Case& c : kCases) {
    if (c.where != Where::kSmLimitChild) continue;
    for (Side side : {Side::kDirect, Side::kWrapped}) {
      const double ns = results.LowestNs(BenchmarkName(c, side));
      if (std::isnan(ns)) continue;
      char line[160];
      std::snprintf(line, sizeof(line), "%s %.4f\n", BenchmarkName(c, side).c_str(), ns);
      text += line;
    }
  }
  std::ofstream out(path);
  out << text;
  out.close();
  return !out.fail() || Fail("writing", path);
}

// Whether --benchmark_filter `filter` selects the benchmark `name`, as Google Benchmark
// decides: an extended regular expression searched for in the name, "-" first negates it,
// empty or "all" selects all. True when the expression does not compile (the benchmark says
// why).
bool FilterMatches(std::string filter, const std::string& name) {
  if (filter.empty() || filter == "all") return true;
  const bool negative = filter.front() == '-';
  if (negative) filter.erase(0, 1);
  regex_t re;
  if (regcomp(&re, filter.c_str(), REG_EXTENDED | REG_NOSUB) != 0) return true;
  const bool found = regexec(&re, name.c_str(), 0, nullptr, 0) == 0;
  regfree(&re);
  return found != negative;
}

// Runs the cases of Where::kSmLimitChild in a child process (see the top of this file) and
// adds its figures to `results`. False when the child failed (it said why on stderr).
bool RunSmLimitChild(int argc, char** argv, const TempDir& dir, CollectingReporter* results) {
  if (std::none_of(std::begin(kCases), std::end(kCases), [argc, argv](const Case& c) {
        return c.where == Where::kSmLimitChild &&
               (FilterMatches(FlagValue(argc, argv, "--benchmark_filter"),
                              BenchmarkName(c, Side::kDirect)) ||
                FilterMatches(FlagValue(argc, argv, "--benchmark_filter"),
                              BenchmarkName(c, Side::kWrapped)));
      })) {
    return true;  // filtered out: the child would only say that nothing matches
  }
  std::vector<char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (!std::string_view(argv[i]).starts_with("--benchmark_out")) args.push_back(argv[i]);
  }
  args.push_back(nullptr);
  std::string variable = std::string(kChildVariable) + "=" + dir.ChildResults();
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(variable.data());
  env.push_back(nullptr);
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = -1;
  if (int err = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args.data(), env.data());
      err != 0) {
    return Fail("starting the SM-limit case's process", std::strerror(err));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Fail("the SM-limit case's process",
                WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                  : "ended by signal " + std::to_string(WTERMSIG(status)));
  }
  std::ifstream in(dir.ChildResults());
  std::string name;
  double ns = 0;
  while (in >> name >> ns) results->Record(name, ns);
  return true;
}

// Runs `argv` with this process's environment less LD_PRELOAD, plus `preload` when it is not
// empty and `extra`; returns its standard output, or nullopt when it did not exit 0.
std::optional<std::string> RunForOutput(const std::vector<std::string>& argv,
                                        const std::string& preload,
                                        const std::vector<std::string>& extra) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with("LD_PRELOAD=")) env_text.push_back(*e);
  }
  if (!preload.empty()) env_text.push_back("LD_PRELOAD=" + preload);
  env_text.insert(env_text.end(), extra.begin(), extra.end());
  std::vector<char*> env, args;
  for (std::string& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  std::vector<std::string> argv_text = argv;
  for (std::string& a : argv_text) args.push_back(a.data());
  args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  pid_t pid = -1;
  int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  if (err == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) out.append(buf, size_t(n));
    }
  }
  close(fds[0]);
  if (err != 0) return std::nullopt;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

// The "ns=" figure of the line `<name> err=0 ... ns=N` in `out`; NaN when missing or failed.
double ClientFigure(const std::string& out, const std::string& name) {
  size_t at = out.find(name + " err=0 ");
  if (at == std::string::npos) return std::nan("");
  size_t ns = out.find("ns=", at);
  size_t end = out.find('\n', at);
  if (ns == std::string::npos || ns > end) return std::nan("");
  return std::strtod(out.c_str() + ns + 3, nullptr);
}

// The cases of Where::kCudartProcess: the runtime client once on the driver, once under
// libvgpu.so, each timing its own calls. Without the client (or with a filter that leaves
// these cases out) nothing runs and the table says "not run".
bool RunCudartCases(int argc, char** argv, CollectingReporter* results) {
  const std::string filter = FlagValue(argc, argv, "--benchmark_filter");
  if (!FilterMatches(filter, "cudart_malloc/direct") &&
      !FilterMatches(filter, "cudart_launch/direct")) {
    return true;
  }
  const std::string dir = ExecutableDir();
  const std::string client = dir + "/../tests/cudart_client_shared";
  if (access(client.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "hami_bench_hook: note: %s is missing (nvcc was absent when the build was "
                 "configured): the CUDA runtime cases are not run\n",
                 client.c_str());
    return true;
  }
  std::string sim = dir + "/../lib/sim";
  if (const char* env = std::getenv("HAMI_SIM_LIBDIR"); env != nullptr && *env != '\0') sim = env;
  const std::vector<std::string> argv_client = {client, "time-alloc",  "2000",  "4194304",
                                                "10",   "time-launch", "20000", "10"};
  for (Side side : {Side::kDirect, Side::kWrapped}) {
    auto out = RunForOutput(argv_client,
                            side == Side::kWrapped ? dir + "/../lib/libvgpu.so" : std::string(),
                            {"LD_LIBRARY_PATH=" + sim});
    if (!out) return Fail("the CUDA runtime client", std::string(SideName(side)) + " run failed");
    results->Record(std::string("cudart_malloc/") + SideName(side),
                    ClientFigure(*out, "time_alloc"));
    results->Record(std::string("cudart_launch/") + SideName(side),
                    ClientFigure(*out, "time_launch"));
  }
  return true;
}

int Main(int argc, char** argv) {
  // The SM-limit case's child, when the variable names the file for its figures.
  std::string child_results;
  if (const char* path = std::getenv(kChildVariable); path != nullptr) {
    child_results = path;
    unsetenv(kChildVariable);
  }
  const Where here = child_results.empty() ? Where::kHere : Where::kSmLimitChild;

  // Defaults that keep the run short; a flag given on the command line wins.
  std::vector<char*> args(argv, argv + argc);
  std::string defaults[] = {"--benchmark_min_time=0.05", "--benchmark_repetitions=10",
                            "--benchmark_enable_random_interleaving=true",
                            "--benchmark_display_aggregates_only=true"};
  for (std::string& flag : defaults) {
    if (!HasFlag(argc, argv, flag.substr(0, flag.find('=')))) args.push_back(flag.data());
  }
  int args_count = int(args.size());
  std::string format = FlagValue(argc, argv, "--benchmark_format");
  std::string color = FlagValue(argc, argv, "--benchmark_color");
  args.push_back(nullptr);
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 2;

  TempDir dir;
  if (!dir.ok()) {
    Fail("temp dir", std::strerror(errno));
    return 1;
  }
  SetEnvironment(dir, here == Where::kHere ? SmLimit::kNone : SmLimit::kSet);
  if (here == Where::kHere && access("/overrideEnv", F_OK) == 0) {
    std::fprintf(stderr,
                 "hami_bench_hook: note: /overrideEnv exists; libvgpu.so reads limits from it\n");
  }
  if (!Load(&g_world) || !Initialize(&g_world)) return 1;
  Budget budget;
  if (here == Where::kSmLimitChild && !FillBudget(g_world, dir, &budget)) return 1;

  if (here == Where::kHere) {
    benchmark::AddCustomContext("pass_through", "cuDeviceTotalMem_v2 on device 1 (no limit)");
    benchmark::AddCustomContext("limit", "device 0: 8 GiB (CUDA_DEVICE_MEMORY_LIMIT_0)");
  } else {
    benchmark::AddCustomContext("sm_limit",
                                "CUDA_DEVICE_SM_LIMIT=50, the bucket of device 0 filled");
  }
  for (const Case& c : kCases) {
    if (c.where != here) continue;
    for (Side side : {Side::kDirect, Side::kWrapped}) {
      auto run = [c, api = &g_world.api(side)](benchmark::State& state) { c.run(state, *api); };
      benchmark::RegisterBenchmark(BenchmarkName(c, side).c_str(), run)
          ->Unit(benchmark::kNanosecond)
          ->ComputeStatistics(CollectingReporter::kLowest, Lowest);
    }
  }
  std::unique_ptr<benchmark::BenchmarkReporter> display;
  if (here == Where::kSmLimitChild && format == "json") {
    // stdout holds the parent's JSON: the child's rows go beside the table, on stderr.
    display = std::make_unique<benchmark::ConsoleReporter>(benchmark::ConsoleReporter::OO_Tabular);
    display->SetOutputStream(&std::cerr);
  } else {
    display = MakeReporter(format, color);
  }
  CollectingReporter reporter(std::move(display));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  std::cout.flush();
  if (here == Where::kSmLimitChild) {
    return WriteChildResults(child_results, reporter, budget) ? 0 : 1;
  }
  const bool child_ok =
      RunSmLimitChild(argc, argv, dir, &reporter) && RunCudartCases(argc, argv, &reporter);
  // Machine-readable formats keep stdout to themselves.
  PrintTable(format == "json" ? stderr : stdout, reporter);
  return child_ok ? 0 : 1;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) { return hami::bench::Main(argc, argv); }
