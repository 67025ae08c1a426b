#include "vgpu/driver.h"

#include <dlfcn.h>

#include "common/proc.h"
#include "vgpu/libc_symbols.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {

namespace internal {

constinit std::atomic<const CudaDriver*> g_cuda{nullptr};
constinit std::atomic<const NvmlDriver*> g_nvml{nullptr};
const CudaDriver kNoCuda{};
const NvmlDriver kNoNvml{};

namespace {

template <typename T>
void Load(DlsymFn real, void* handle, const char* name, T* slot) {
  *slot = reinterpret_cast<T>(real(handle, name));
}

// Publishes `mine` unless another thread was first; returns what stands.
template <typename T>
const T* Publish(std::atomic<const T*>* slot, const T* mine) {
  const T* expected = nullptr;
  if (slot->compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) return mine;
  return expected;
}

}  // namespace

const CudaDriver* LoadCudaSlow() {
  EnsureConfigured(Rt());
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  DlsymFn real = RealDlsym();
  if (h == nullptr || real == nullptr) {
    const char* why = h == nullptr ? dlerror() : "cannot read libc's dlsym";
    const CudaDriver* won = Publish(&g_cuda, &kNoCuda);
    if (won == &kNoCuda) g_log.Log(LogLevel::kInfo, "no NVIDIA driver (libcuda.so.1): %s", why);
    return won;
  }
  auto* d = new CudaDriver();
#define HAMI_CUDA_HOOK(name, policy, version) Load(real, h, #name, &d->cuda.name);
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
#define HAMI_CUDA_AUX(name) Load(real, h, #name, &d->aux.name);
#define HAMI_NVML_AUX(name)
#include "vgpu/hooks/aux.def"
#undef HAMI_CUDA_AUX
#undef HAMI_NVML_AUX
  const CudaDriver* won = Publish<CudaDriver>(&g_cuda, d);
  if (won != d) delete d;  // another thread's identical table stands
  return won;
}

const NvmlDriver* LoadNvmlSlow() {
  EnsureConfigured(Rt());
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  DlsymFn real = RealDlsym();
  if (h == nullptr || real == nullptr) {
    const char* why = h == nullptr ? dlerror() : "cannot read libc's dlsym";
    const NvmlDriver* won = Publish(&g_nvml, &kNoNvml);
    if (won == &kNoNvml) g_log.Log(LogLevel::kInfo, "no NVML (libnvidia-ml.so.1): %s", why);
    return won;
  }
  auto* d = new NvmlDriver();
#define HAMI_NVML_HOOK(name, policy) Load(real, h, #name, &d->nvml.name);
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK
#define HAMI_CUDA_AUX(name)
#define HAMI_NVML_AUX(name) Load(real, h, #name, &d->aux.name);
#include "vgpu/hooks/aux.def"
#undef HAMI_CUDA_AUX
#undef HAMI_NVML_AUX
  const NvmlDriver* won = Publish<NvmlDriver>(&g_nvml, d);
  if (won != d) delete d;
  return won;
}

}  // namespace internal

bool NvmlReady() {
  // ForkCount() of the process that initialized NVML; racing threads may both call nvmlInit
  // (NVML counts its initializations; libvgpu never shuts it down).
  static constinit std::atomic<uint64_t> ready_in{~uint64_t(0)};
  const NvmlDriver* n = Nvml();
  if (n == nullptr) return false;
  const uint64_t now = ForkCount();
  if (ready_in.load(std::memory_order_acquire) == now) return true;
  if (n->nvml.nvmlInit_v2 == nullptr || n->nvml.nvmlInit_v2() != NVML_SUCCESS) return false;
  ready_in.store(now, std::memory_order_release);
  return true;
}

}  // namespace hami::vgpu
