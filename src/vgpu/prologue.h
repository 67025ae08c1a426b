// The opening of every exported wrapper, chosen by the policy column of the wrapper's row in
// hooks/cuda_hooks.def or hooks/nvml_hooks.def. A wrapper names itself and its arguments and
// never writes its own opening:
//
//   CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
//     HAMI_CUDA_PROLOGUE(cuMemAlloc_v2, dptr, bytesize);
//     return AdmitAllocation(...);  // the policy, with `drv` bound
//   }
//
// What the prologue of each policy class does:
//   kLaunch   binds the real table (`drv`); no re-entry guard: a launch is the hot path, and
//             it is paced at whatever depth it is made.
//   kLookup   re-entry guard, binds `drv`; a nested lookup is substituted like any other (a
//             route never hands out the driver's own pointer of a hooked function).
//   kInit, kView, kContext, kAdmit, kRelease, kReconcile
//             re-entry guard, binds `drv`; a call made from inside another hook on the same
//             thread (the driver calling an exported name back) goes to the driver as it is,
//             so the code after the prologue runs only for the outermost call.
// Without the real library, or when it lacks the function: kInit answers what the library's
// own loader would (CUDA_ERROR_NO_DEVICE, NVML_ERROR_LIBRARY_NOT_FOUND), every other class
// "not initialized" (CUDA_ERROR_NOT_INITIALIZED, NVML_ERROR_UNINITIALIZED).
//
// The policy is read from the row at compile time, and the macro refuses to compile in any
// function but the one it names, so no wrapper can open with a prologue its row does not
// give. vgpu_prologue_check (check_prologues.cmake) fails when a wrapper does not open with
// its prologue. NVML wrappers bind `nv` instead of `drv`.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string_view>

#include "nvml/nvml.h"
#include "vgpu/hooks.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {

// How a policy class opens its wrappers.
struct Prologue {
  bool guarded;                // holds a re-entry guard (HookScope)
  bool nested_passes_through;  // a nested call goes straight to the driver
};

constexpr Prologue PrologueOf(Policy policy) {
  switch (policy) {
    case Policy::kLaunch:
      return {false, false};
    case Policy::kLookup:
      return {true, false};
    case Policy::kInit:
    case Policy::kView:
    case Policy::kContext:
    case Policy::kAdmit:
    case Policy::kRelease:
    case Policy::kReconcile:
      return {true, true};
  }
  return {true, true};
}

// The answer when the real library or its function is missing.
constexpr CUresult CudaMissing(Policy policy) {
  return policy == Policy::kInit ? CUDA_ERROR_NO_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
}
constexpr nvmlReturn_t NvmlMissing(Policy policy) {
  return policy == Policy::kInit ? NVML_ERROR_LIBRARY_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
}

// The policy column, by hook.
inline constexpr Policy kCudaPolicies[] = {
#define HAMI_CUDA_HOOK(name, policy, version) Policy::policy,
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
};
inline constexpr Policy kNvmlPolicies[] = {
#define HAMI_NVML_HOOK(name, policy) Policy::policy,
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK
};
constexpr Policy PolicyOf(CudaHook hook) { return kCudaPolicies[size_t(hook)]; }
constexpr Policy PolicyOf(NvmlHook hook) { return kNvmlPolicies[size_t(hook)]; }

// The re-entry guard a prologue holds, or none.
template <bool kGuarded>
class HookGuard {
 public:
  bool nested() const { return scope_.nested(); }

 private:
  HookScope scope_;
};

template <>
class HookGuard<false> {
 public:
  static constexpr bool nested() { return false; }
};

}  // namespace hami::vgpu

// Opens the CUDA wrapper `name` (called with `...`, its arguments in order) as its row's
// policy says; binds `drv`.
#define HAMI_CUDA_PROLOGUE(name, ...)                                                       \
  static_assert(::std::string_view(__builtin_FUNCTION()) == #name,                          \
                "HAMI_CUDA_PROLOGUE(" #name ") must open the wrapper " #name);              \
  constexpr ::hami::vgpu::Policy hami_policy_ =                                             \
      ::hami::vgpu::PolicyOf(::hami::vgpu::CudaHook::k_##name);                             \
  constexpr ::hami::vgpu::Prologue hami_prologue_ = ::hami::vgpu::PrologueOf(hami_policy_); \
  ::hami::vgpu::HookGuard<hami_prologue_.guarded> hami_guard_;                              \
  HAMI_CUDA_REAL(name, ::hami::vgpu::CudaMissing(hami_policy_));                            \
  [[maybe_unused]] ::hami::vgpu::Runtime& rt = ::hami::vgpu::Rt();                          \
  if (hami_prologue_.nested_passes_through && hami_guard_.nested()) {                       \
    return drv.cuda.name(__VA_ARGS__);                                                      \
  }                                                                                         \
  static_assert(true)

// The same for the NVML wrapper `name`; binds `nv`.
#define HAMI_NVML_PROLOGUE(name, ...)                                                       \
  static_assert(::std::string_view(__builtin_FUNCTION()) == #name,                          \
                "HAMI_NVML_PROLOGUE(" #name ") must open the wrapper " #name);              \
  constexpr ::hami::vgpu::Policy hami_policy_ =                                             \
      ::hami::vgpu::PolicyOf(::hami::vgpu::NvmlHook::k_##name);                             \
  constexpr ::hami::vgpu::Prologue hami_prologue_ = ::hami::vgpu::PrologueOf(hami_policy_); \
  ::hami::vgpu::HookGuard<hami_prologue_.guarded> hami_guard_;                              \
  const ::hami::vgpu::NvmlDriver* hami_nv_ = ::hami::vgpu::Nvml();                          \
  if (hami_nv_ == nullptr || hami_nv_->nvml.name == nullptr) {                              \
    return ::hami::vgpu::NvmlMissing(hami_policy_);                                         \
  }                                                                                         \
  const ::hami::vgpu::NvmlDriver& nv = *hami_nv_;                                           \
  [[maybe_unused]] ::hami::vgpu::Runtime& rt = ::hami::vgpu::Rt();                          \
  if (hami_prologue_.nested_passes_through && hami_guard_.nested()) {                       \
    return nv.nvml.name(__VA_ARGS__);                                                       \
  }                                                                                         \
  static_assert(true)
