// Initialization, devices, errors and symbol lookup of the simulated driver.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"
#include "sim/cuda/model.h"
#include "sim/device_nodes.h"
#include "sim/host_pid.h"
#include "sim/visible_devices.h"

namespace hami::sim {

RawLogger g_log("hami-sim", LogLevel::kWarn);

namespace {

Driver* g_driver = new Driver();  // leaked on purpose: usable during static destruction

CUresult g_init_result = CUDA_ERROR_NOT_INITIALIZED;  // sticky, as in the driver

void AtForkPrepare() { D().mu.lock(); }
void AtForkParent() { D().mu.unlock(); }
// The child is a new process: it must not act as its parent (contexts, slot, locks). Its
// copy of the parent's model is abandoned, and CUDA starts afresh in it (cuInit again):
// no initialization result carries over, and no current context (context.cc clears the
// forking thread's stack).
void AtForkChild() {
  Driver* old = g_driver;
  old->mu.unlock();
  if (old->state) old->state->AbandonAfterFork();
  g_driver = new Driver();
  g_init_result = CUDA_ERROR_NOT_INITIALIZED;
}

// The devices whose nodes this process has (sim/device_nodes.h): none when their file is
// unusable, never every device.
std::vector<int> AccessibleDevices(const std::string& path,
                                   const std::vector<DeviceSpec>& devices) {
  Result<std::vector<int>> accessible = ReadDeviceNodes(path, devices);
  if (accessible.ok()) return *std::move(accessible);
  g_log.Log(LogLevel::kError, "%s; this process sees no device (CUDA_ERROR_NO_DEVICE)",
            accessible.error().c_str());
  return {};
}

std::vector<int> VisibleFromEnvironment(const std::vector<DeviceSpec>& devices,
                                        const std::vector<int>& accessible) {
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  VisibleDevices v = ParseVisibleDevices(
      env != nullptr ? std::optional<std::string_view>(env) : std::nullopt, devices, accessible);
  if (v.stopped) {
    const std::string_view why = VisibleStopText(v.stopped->reason);
    g_log.Log(LogLevel::kWarn,
              "CUDA_VISIBLE_DEVICES='%s': entry '%s' %.*s, so it and the entries after it are "
              "ignored (%zu device(s) visible)",
              env, v.stopped->entry.c_str(), int(why.size()), why.data(), v.physical.size());
  }
  return v.physical;
}

CUresult InitLocked() {
  Driver& d = D();
  auto options = LoadSimOptionsFromEnvironment();
  if (!options.ok()) {
    g_log.Log(LogLevel::kError, "%s", options.error().message().c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  d.options = std::move(options).value();
  g_log.set_level(LogLevel(d.options.log_level));
  SleepForNs(int64_t(d.options.init_us) * 1000);
  auto state = SharedState::Open(d.options.state_path, d.options.profile_spec, d.options.node,
                                 d.options.kill_point);
  if (!state.ok()) {
    g_log.Log(LogLevel::kError, "%s", state.error().message().c_str());
    return state.error().code() == ErrorCode::kInvalidArgument ? CUDA_ERROR_INVALID_VALUE
                                                               : CUDA_ERROR_OPERATING_SYSTEM;
  }
  d.state = std::move(state).value();
  // A process of the host namespace tells processes that cannot see it their host PID.
  ServeHostPids(d.options.state_path, d.state->host_pidns_inode());
  d.devices = d.state->devices();
  d.rt.resize(d.devices.size());
  d.visible =
      VisibleFromEnvironment(d.devices, AccessibleDevices(d.options.device_nodes_path, d.devices));
  d.loading_mode = LoadingModeFromEnvironment();
  if (d.visible.empty()) return CUDA_ERROR_NO_DEVICE;
  d.initialized = true;
  return CUDA_SUCCESS;
}

// ---- errors ----

struct ErrorName {
  CUresult value;
  const char* name;
};

constexpr ErrorName kErrors[] = {
#define HAMI_CUDA_ERROR(name, value) {name, #name},
#include "cuda_errors.inc"
#undef HAMI_CUDA_ERROR
};

// "CUDA_ERROR_OUT_OF_MEMORY" -> "out of memory"; computed once per code.
const char* ErrorText(size_t index) {
  static std::string texts[std::size(kErrors)];
  static std::once_flag once;
  std::call_once(once, [] {
    for (size_t i = 0; i < std::size(kErrors); ++i) {
      std::string_view n = kErrors[i].name;
      n.remove_prefix(n.rfind("CUDA_ERROR_", 0) == 0 ? 11 : 5);
      std::string t;
      for (char c : n) t += c == '_' ? ' ' : char(std::tolower(static_cast<unsigned char>(c)));
      if (kErrors[i].value == CUDA_SUCCESS) t = "no error";
      texts[i] = t;
    }
  });
  return texts[index].c_str();
}

// ---- device attributes: one row per attribute the model gives a value ----

// A row's value: a constant, a number of the device's profile, or one derived from the
// device (PCI address, NUMA node, ...). Attributes without a row report 0.
struct AttributeRow {
  CUdevice_attribute attribute;
  int constant;
  int DeviceProfile::*field;
  int (*derive)(const DeviceSpec&);
  int Value(const DeviceSpec& s) const {
    if (derive != nullptr) return derive(s);
    return field != nullptr ? s.profile->*field : constant;
  }
};

constexpr AttributeRow Const(CUdevice_attribute a, int v) { return {a, v, nullptr, nullptr}; }
constexpr AttributeRow Profile(CUdevice_attribute a, int DeviceProfile::*f) {
  return {a, 0, f, nullptr};
}
constexpr AttributeRow Derived(CUdevice_attribute a, int (*d)(const DeviceSpec&)) {
  return {a, 0, nullptr, d};
}

// NOTE: sorted by attribute, each at most once (checked below); values are those of the
// real products where the profile does not hold them.
constexpr AttributeRow kAttributes[] = {
    Const(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
    Const(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024),
    Const(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024),
    Const(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64),
    Const(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647),
    Const(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535),
    Const(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535),
    Const(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024),
    Const(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 64 * 1024),
    Const(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
    Const(CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647),
    Const(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536),
    Derived(CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
            [](const DeviceSpec& s) { return s.profile->clock_mhz * 1000; }),
    Const(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512),
    Const(CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1),
    Profile(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &DeviceProfile::sm_count),
    Const(CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0),
    Const(CU_DEVICE_ATTRIBUTE_INTEGRATED, 0),
    Const(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1),
    Const(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 131072),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, 131072),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, 65536),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, 16384),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, 16384),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, 16384),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048),
    Const(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, 512),
    Const(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1),
    Derived(CU_DEVICE_ATTRIBUTE_ECC_ENABLED,
            [](const DeviceSpec& s) {
              return int(s.profile->cc_major >= 8 && s.profile->memory_bus_width >= 5120);
            }),
    Derived(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, [](const DeviceSpec& s) { return s.pci_bus; }),
    Derived(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, [](const DeviceSpec& s) { return s.pci_device; }),
    Const(CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0),
    Derived(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
            [](const DeviceSpec& s) { return s.profile->memory_clock_mhz * 1000; }),
    Profile(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, &DeviceProfile::memory_bus_width),
    Profile(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &DeviceProfile::l2_bytes),
    Profile(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, &DeviceProfile::max_threads_per_sm),
    Const(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2),
    Const(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS, 2048),
    Const(CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER, 1),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE, 8192),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE, 8192),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE, 32768),
    Derived(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, [](const DeviceSpec& s) { return s.pci_domain; }),
    Const(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, 2046),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH, 131072),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT, 65536),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH, 16384),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT, 16384),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH, 16384),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS, 2048),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS, 2048),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS, 2046),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH, 268435456),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH, 131072),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT, 65000),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH, 2097120),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT, 32768),
    Profile(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &DeviceProfile::cc_major),
    Profile(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &DeviceProfile::cc_minor),
    Const(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH, 32768),
    Const(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1),
    Profile(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            &DeviceProfile::shared_mem_per_sm),
    Const(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536),
    Const(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1),
    Const(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, 0),
    Derived(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID,
            [](const DeviceSpec& s) { return s.index; }),
    Const(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0),
    Const(CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2),
    Const(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0),
    Const(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1),
    Const(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 1),
    Const(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1),
    Profile(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            &DeviceProfile::shared_mem_per_block_optin),
    Const(CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, 0),
    Const(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0),
    Const(CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0),
    Const(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1),
    Profile(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, &DeviceProfile::max_blocks_per_sm),
    Derived(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
            [](const DeviceSpec& s) { return s.profile->l2_bytes * 3 / 4; }),
    Const(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, 128 << 20),
    Const(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024),
    Const(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
    Derived(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH,
            [](const DeviceSpec& s) { return int(s.profile->cc_major >= 9); }),
    Const(CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 1),
    Const(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 1),
    Const(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT, 4),
    Const(CU_DEVICE_ATTRIBUTE_NUMA_CONFIG, CU_DEVICE_NUMA_CONFIG_NONE),
    Const(CU_DEVICE_ATTRIBUTE_NUMA_ID, -1),
    // Multicast objects need an NVLink switch (cuMulticastCreate, multicast.cc).
    Derived(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
            [](const DeviceSpec& s) { return int(s.profile->nvlink_switch); }),
    Const(CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 0),
    Derived(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, [](const DeviceSpec& s) { return s.numa_node; }),
    Const(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
    Const(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
};

constexpr bool AttributesSortedAndUnique() {
  for (size_t i = 1; i < std::size(kAttributes); ++i) {
    if (kAttributes[i - 1].attribute >= kAttributes[i].attribute) return false;
  }
  return true;
}
static_assert(AttributesSortedAndUnique(), "kAttributes must be sorted by attribute, no repeats");

// ---- cuGetProcAddress ----

// A function name as a template argument.
template <size_t N>
struct FixedName {
  constexpr FixedName(const char (&s)[N]) { std::copy(s, s + N, text); }  // NOLINT: implicit
  char text[N];
};

// With debug logging, cuGetProcAddress hands out these instead: each logs its call's result
// (the runtime reaches nearly every function through cuGetProcAddress).
template <FixedName kName, auto kFn>
struct Traced;

template <FixedName kName, typename... Args, CUresult (*kFn)(Args...)>
struct Traced<kName, kFn> {
  static CUresult Call(Args... args) {
    CUresult r = kFn(args...);
    if constexpr (!std::string_view(kName.text).starts_with("cuGetProcAddress")) {
      g_log.Log(LogLevel::kDebug, "call %s -> %d", kName.text, int(r));
    }
    return r;
  }
};

struct ProcEntry {
  const char* base;
  int version;
  int flavor;  // 0: legacy default stream, 1: per-thread default stream
  const char* name;
  void* fn;
  void* traced;
};

const ProcEntry kProcTable[] = {
#define HAMI_CUDA_API(base, version, flavor, name) \
  {#base,                                          \
   version,                                        \
   flavor,                                         \
   #name,                                          \
   reinterpret_cast<void*>(&name),                 \
   reinterpret_cast<void*>(&Traced<FixedName(#name), &name>::Call)},
#include "cuda_api_table.inc"
#undef HAMI_CUDA_API
};

CUresult FindProc(const char* symbol, void** pfn, int version, cuuint64_t flags,
                  CUdriverProcAddressQueryResult* status, const char** found) {
  if (pfn != nullptr) *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == nullptr || pfn == nullptr ||
      (flags & ~cuuint64_t(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto lo = std::lower_bound(
      std::begin(kProcTable), std::end(kProcTable), symbol,
      [](const ProcEntry& e, const char* s) { return std::strcmp(e.base, s) < 0; });
  auto hi = lo;
  while (hi != std::end(kProcTable) && std::strcmp(hi->base, symbol) == 0) ++hi;
  if (lo == hi) return CUDA_ERROR_NOT_FOUND;
  int flavor = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 &&
                       std::any_of(lo, hi, [](const ProcEntry& e) { return e.flavor == 1; })
                   ? 1
                   : 0;
  const ProcEntry* best = nullptr;
  for (auto it = lo; it != hi; ++it) {
    if (it->flavor == flavor && it->version <= version &&
        (best == nullptr || it->version > best->version)) {
      best = &*it;
    }
  }
  if (best == nullptr) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = ConfigureLogFromEnvironment() ? best->traced : best->fn;
  *found = best->name;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

const char* ProcStatusName(CUdriverProcAddressQueryResult s) {
  switch (s) {
    case CU_GET_PROC_ADDRESS_SUCCESS:
      return "found";
    case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND:
      return "symbol not found";
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
      return "version not sufficient";
    default:
      return "?";
  }
}

// FindProc, logged at debug level with what was asked and what it resolved to.
CUresult LookupProc(const char* symbol, void** pfn, int version, cuuint64_t flags,
                    CUdriverProcAddressQueryResult* status) {
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const char* found = "-";
  CUresult r = FindProc(symbol, pfn, version, flags, &st, &found);
  if (status != nullptr) *status = st;
  if (ConfigureLogFromEnvironment()) {
    g_log.Log(LogLevel::kDebug, "cuGetProcAddress %s version=%d flags=%llu -> %s %s",
              symbol != nullptr ? symbol : "(null)", version,
              static_cast<unsigned long long>(flags), ProcStatusName(st), found);
  }
  return r;
}

}  // namespace

Driver& D() { return *g_driver; }

bool ConfigureLogFromEnvironment() {
  static const bool debug = [] {
    if (!D().initialized) {
      auto options = LoadSimOptionsFromEnvironment();
      if (options.ok()) g_log.set_level(LogLevel(options->log_level));
    }
    return g_log.Enabled(LogLevel::kDebug);
  }();
  return debug;
}

CUresult NotModelled(const char* name) {
  g_log.Log(LogLevel::kInfo, "%s is not modelled by the simulated GPU: CUDA_ERROR_NOT_SUPPORTED",
            name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult ToCuResult(const Error& error) {
  g_log.Log(LogLevel::kWarn, "%s", error.message().c_str());
  switch (error.code()) {
    case ErrorCode::kInvalidArgument:
      return CUDA_ERROR_INVALID_VALUE;
    case ErrorCode::kNotFound:
      return CUDA_ERROR_NOT_FOUND;
    case ErrorCode::kUnsupported:
      return CUDA_ERROR_NOT_SUPPORTED;
    case ErrorCode::kBusy:
      return CUDA_ERROR_OUT_OF_MEMORY;
    default:
      return CUDA_ERROR_OPERATING_SYSTEM;
  }
}

CUresult RequireInit() { return D().initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

CUresult PhysicalDevice(CUdevice dev, int* physical) {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (dev < 0 || size_t(dev) >= D().visible.size()) return CUDA_ERROR_INVALID_DEVICE;
  *physical = D().visible[size_t(dev)];
  return CUDA_SUCCESS;
}

uint64_t Driver::ContextBytes(int physical) const {
  return options.context_bytes != 0 ? options.context_bytes
                                    : spec(physical).profile->context_mib << 20;
}

CUresult Driver::EnsureSlot() {
  if (slot >= 0) return CUDA_SUCCESS;
  auto s = state->ClaimSlot();
  if (!s.ok()) return ToCuResult(s.error());
  slot = *s;
  return CUDA_SUCCESS;
}

CUresult Driver::Charge(int physical, uint64_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (CUresult r = EnsureSlot(); r != CUDA_SUCCESS) return r;
  return state->Charge(slot, physical, bytes) == ChargeResult::kOk ? CUDA_SUCCESS
                                                                   : CUDA_ERROR_OUT_OF_MEMORY;
}

void Driver::Uncharge(int physical, uint64_t bytes) {
  if (bytes != 0 && slot >= 0) state->Uncharge(slot, physical, bytes);
}

Allocation* Driver::FindAllocation(uintptr_t ptr, size_t bytes) {
  auto it = allocations.upper_bound(ptr);
  if (it == allocations.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  if (ptr < a.base || ptr - a.base > a.size || bytes > a.size - (ptr - a.base)) return nullptr;
  return &a;
}

bool Driver::DeviceAccessible(uintptr_t ptr, size_t bytes, Access access) {
  if (FindAllocation(ptr, bytes) != nullptr) return true;
  int need = access == Access::kWrite ? PROT_WRITE : PROT_READ;
  auto it = mappings.upper_bound(ptr);
  if (it == mappings.begin()) return false;
  --it;
  uintptr_t cursor = ptr;
  const uintptr_t end = ptr + bytes;
  if (end < ptr) return false;
  // Walk adjacent mappings until the range is covered.
  for (; it != mappings.end(); ++it) {
    const VaMapping& m = it->second;
    // A multicast mapping has no pages of its own to read or set (copies into it are
    // written to the memory bound to the object: MulticastWriteLocked).
    if (cursor < m.base || cursor >= m.base + m.size || (m.prot & need) == 0 || m.multicast) {
      return false;
    }
    cursor = m.base + m.size;
    if (cursor >= end) return true;
  }
  return false;
}

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

CUresult CUDAAPI cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild); });
  ApiLock api;
  if (D().initialized) return CUDA_SUCCESS;
  if (g_init_result != CUDA_ERROR_NOT_INITIALIZED) return g_init_result;
  g_init_result = InitLocked();
  if (g_init_result == CUDA_ERROR_NOT_INITIALIZED) g_init_result = CUDA_ERROR_UNKNOWN;
  return g_init_result;
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (D().initialized) {
    *driverVersion = D().options.driver_version;
    return CUDA_SUCCESS;
  }
  auto options = LoadSimOptionsFromEnvironment();
  *driverVersion = options.ok() ? options->driver_version : CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  *count = int(D().visible.size());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int physical;
  if (CUresult r = PhysicalDevice(ordinal, &physical); r != CUDA_SUCCESS) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  std::string_view n = D().spec(p).profile->name;
  size_t k = std::min(size_t(len) - 1, n.size());
  std::memcpy(name, n.data(), k);
  name[k] = '\0';
  return CUDA_SUCCESS;
}

static CUresult DeviceUuid(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  std::memcpy(uuid->bytes, D().spec(p).uuid_bytes, 16);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return DeviceUuid(uuid, dev); }
CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return DeviceUuid(uuid, dev); }

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  *bytes = D().spec(p).usable_bytes();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t b = 0;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = cuDeviceTotalMem_v2(&b, dev);
  if (r == CUDA_SUCCESS) *bytes = unsigned(std::min<size_t>(b, 0xffffffffu));
  return r;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  // The driver's form: "0000:19:00.0" (4-digit domain).
  char buf[32];
  const DeviceSpec& s = D().spec(p);
  std::snprintf(buf, sizeof(buf), "%04X:%02X:%02X.0", unsigned(s.pci_domain), unsigned(s.pci_bus),
                unsigned(s.pci_device));
  size_t k = std::min(size_t(len) - 1, std::strlen(buf));
  std::memcpy(pciBusId, buf, k);
  pciBusId[k] = '\0';
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  int n = std::sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &device, &function);
  if (n != 4) {
    domain = 0;
    n = std::sscanf(pciBusId, "%x:%x.%x", &bus, &device, &function);
    if (n != 3) return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < D().visible.size(); ++i) {
    const DeviceSpec& s = D().spec(D().visible[i]);
    if (unsigned(s.pci_domain) == domain && unsigned(s.pci_bus) == bus &&
        unsigned(s.pci_device) == device && function == 0) {
      *dev = int(i);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  if (EnumValue(attrib) < 1 || EnumValue(attrib) >= int(CU_DEVICE_ATTRIBUTE_MAX)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto row =
      std::lower_bound(std::begin(kAttributes), std::end(kAttributes), attrib,
                       [](const AttributeRow& r, CUdevice_attribute a) { return r.attribute < a; });
  // An attribute the model has no row for is a real one it reports as 0.
  *pi = row != std::end(kAttributes) && row->attribute == attrib ? row->Value(D().spec(p)) : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  *major = D().spec(p).profile->cc_major;
  *minor = D().spec(p).profile->cc_minor;
  return CUDA_SUCCESS;
}

// Every device of the model reaches every other one, with native atomics over the link.
CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int a, b;
  if (CUresult r = PhysicalDevice(dev, &a); r != CUDA_SUCCESS) return r;
  if (CUresult r = PhysicalDevice(peerDev, &b); r != CUDA_SUCCESS) return r;
  *canAccessPeer = a != b ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib,
                                         CUdevice srcDevice, CUdevice dstDevice) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int a, b;
  if (CUresult r = PhysicalDevice(srcDevice, &a); r != CUDA_SUCCESS) return r;
  if (CUresult r = PhysicalDevice(dstDevice, &b); r != CUDA_SUCCESS) return r;
  if (a == b) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
      *value = 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
      *value = 1;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuDeviceGetTexture1DLinearMaxWidth(size_t* maxWidthInElements,
                                                    CUarray_format format, unsigned numChannels,
                                                    CUdevice dev) {
  if (maxWidthInElements == nullptr || (numChannels != 1 && numChannels != 2 && numChannels != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  (void)format;
  *maxWidthInElements = size_t(1) << 28;  // CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorName& e : kErrors) {
    if (e.value == error) {
      *pStr = e.name;
      return CUDA_SUCCESS;
    }
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < std::size(kErrors); ++i) {
    if (kErrors[i].value == error) {
      *pStr = ErrorText(i);
      return CUDA_SUCCESS;
    }
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags) {
  return LookupProc(symbol, pfn, cudaVersion, flags, nullptr);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  return LookupProc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

}  // extern "C"
