// The host side's one NVML loader: the device inventory, the health watcher and the monitor's
// sampler open libnvidia-ml.so.1 through it, and no daemon or command opens it otherwise
// (libvgpu.so, inside containers, has its own routes to the driver).
//
// Open dlopen()s the library RTLD_NOW | RTLD_LOCAL (a soname is searched as the loader
// searches, a path is opened as is) and resolves every function of HAMI_NVML_FUNCTIONS, each
// typed by decltype of its declaration in nvml/nvml.h; a function the library lacks stays
// nullptr. Each user states which functions it requires (FirstMissing) and tests the optional
// ones before calling them. NvmlLibrary neither initializes nor shuts NVML down: its users pair
// nvmlInit_v2 with nvmlShutdown before the library is closed.
//
// Thread safety: after Open, every const member may be called from any thread (NVML's own
// calls are as thread-safe as NVML is). Not for libvgpu.so (it allocates and calls dlopen).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "common/result.h"
#include "nvml/nvml.h"

namespace hami::inventory {

// Every NVML function the host side calls, one row each.
// NOTE: a function is called only through this list; a new call adds its row here (it then
// gets a typed member of NvmlFunctions and a name FirstMissing knows).
#define HAMI_NVML_FUNCTIONS(X)                \
  X(nvmlInit_v2)                              \
  X(nvmlShutdown)                             \
  X(nvmlErrorString)                          \
  X(nvmlSystemGetDriverVersion)               \
  X(nvmlDeviceGetCount_v2)                    \
  X(nvmlDeviceGetHandleByIndex_v2)            \
  X(nvmlDeviceGetUUID)                        \
  X(nvmlDeviceGetName)                        \
  X(nvmlDeviceGetMemoryInfo)                  \
  X(nvmlDeviceGetPciInfo_v3)                  \
  X(nvmlDeviceGetCudaComputeCapability)       \
  X(nvmlDeviceGetNumaNodeId)                  \
  X(nvmlDeviceGetMigMode)                     \
  X(nvmlDeviceGetUtilizationRates)            \
  X(nvmlDeviceGetComputeRunningProcesses_v3)  \
  X(nvmlDeviceGetGraphicsRunningProcesses_v3) \
  X(nvmlDeviceGetProcessUtilization)          \
  X(nvmlDeviceGetSupportedEventTypes)         \
  X(nvmlEventSetCreate)                       \
  X(nvmlDeviceRegisterEvents)                 \
  X(nvmlEventSetWait_v2)                      \
  X(nvmlEventSetFree)

// The resolved functions; nullptr: the library lacks it.
struct NvmlFunctions {
#define HAMI_NVML_MEMBER(name) decltype(&::name) name = nullptr;
  HAMI_NVML_FUNCTIONS(HAMI_NVML_MEMBER)
#undef HAMI_NVML_MEMBER
};

// What closing the library does. kNever opens it RTLD_NODELETE: the code stays mapped for the
// rest of the process, as the CUDA driver does once initialized (what NVML's constructors
// allocated is reachable only from its own data; unloading drops it on every close).
enum class Unload { kOnClose, kNever };

class NvmlLibrary {
 public:
  // Opens `library` and resolves the list. Fails only when it cannot be opened: kNotFound,
  // the message being the loader's ("<file>: cannot open shared object file: ...").
  static Result<NvmlLibrary> Open(const std::string& library, Unload unload);

  NvmlLibrary(NvmlLibrary&& other) noexcept;
  NvmlLibrary& operator=(NvmlLibrary&& other) noexcept;
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;
  ~NvmlLibrary();  // dlclose (with Unload::kNever the code stays mapped)

  const NvmlFunctions& fn() const { return fn_; }

  // The first of `required` (names from HAMI_NVML_FUNCTIONS) the library lacks; empty when
  // it has them all. A name not on the list counts as missing.
  std::string FirstMissing(std::initializer_list<std::string_view> required) const;

  // NVML's text for `r` (nvmlErrorString), or "NVML error <r>" without it.
  std::string Why(nvmlReturn_t r) const;

  // The file the loader opened, resolved (realpath); empty when unknown.
  std::string Path() const;

 private:
  explicit NvmlLibrary(void* handle);
  bool Has(std::string_view name) const;

  void* handle_ = nullptr;
  NvmlFunctions fn_;
};

}  // namespace hami::inventory
