// The hook tables, expanded from the two lists (hooks/cuda_hooks.def, hooks/nvml_hooks.def):
// an enum of hooks, the typed real-function tables, and a sorted name -> hook index used by
// the dlsym, dlvsym and cuGetProcAddress routes.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <string_view>

#include "nvml/nvml.h"
#include "vgpu/export.h"

namespace hami::vgpu {

enum class Policy : uint8_t {
  kInit,
  kLookup,
  kView,
  kContext,
  kAdmit,
  kRelease,
  kReconcile,
  kLaunch,
};

enum class CudaHook : uint16_t {
#define HAMI_CUDA_HOOK(name, policy, version) k_##name,
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
  kCount
};

enum class NvmlHook : uint16_t {
#define HAMI_NVML_HOOK(name, policy) k_##name,
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK
  kCount
};

// The real driver's functions, typed from the same declarations the wrappers have.
struct CudaReal {
#define HAMI_CUDA_HOOK(name, policy, version) decltype(&::name) name = nullptr;
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
};

struct NvmlReal {
#define HAMI_NVML_HOOK(name, policy) decltype(&::name) name = nullptr;
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK
};

struct HookInfo {
  std::string_view name;
  Policy policy;
  int version;     // CUDA version that introduced the ABI (0 for NVML)
  bool cuda;       // false: NVML
  uint16_t index;  // CudaHook or NvmlHook value
};

// Every hook, CUDA then NVML, in list order.
std::array<HookInfo, size_t(CudaHook::kCount) + size_t(NvmlHook::kCount)> const& AllHooks();

// The hook with exported name `name`, or null. O(log n); no allocation.
const HookInfo* FindHook(std::string_view name);

// The hook of the ABI cuGetProcAddress gives for `symbol` (a base name such as "cuMemAlloc")
// at `cuda_version`, from the toolkit's table of ABIs; null when that ABI is not hooked or
// the version is newer than the table.
const HookInfo* HookForProc(std::string_view symbol, int cuda_version, bool per_thread);

// Our wrapper for a hook (the address a route hands out).
void* WrapperOf(const HookInfo& hook);

// The real function a hook wraps, once the driver is loaded (else null).
void* RealOf(const HookInfo& hook);

}  // namespace hami::vgpu
