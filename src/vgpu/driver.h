// The real driver's and NVML's function tables: loaded once per process by soname, then
// immutable and shared by every thread without a lock.
//
// Loading calls dlopen with no lock of libvgpu held: threads that race to load each build a
// table and the first to publish wins (the others' identical tables are dropped). A failed
// load is published too, so that it is tried once. The tables survive fork (the libraries
// stay mapped in the child).
#pragma once

#include <cuda.h>

#include <atomic>

#include "nvml/nvml.h"
#include "vgpu/hooks.h"

namespace hami::vgpu {

// Functions used but not intercepted (hooks/aux.def).
struct CudaAux {
#define HAMI_CUDA_AUX(name) decltype(&::name) name = nullptr;
#define HAMI_NVML_AUX(name)
#include "vgpu/hooks/aux.def"
#undef HAMI_CUDA_AUX
#undef HAMI_NVML_AUX
};

struct NvmlAux {
#define HAMI_CUDA_AUX(name)
#define HAMI_NVML_AUX(name) decltype(&::name) name = nullptr;
#include "vgpu/hooks/aux.def"
#undef HAMI_CUDA_AUX
#undef HAMI_NVML_AUX
};

struct CudaDriver {
  CudaReal cuda;  // what the hooks wrap
  CudaAux aux;
};

struct NvmlDriver {
  NvmlReal nvml;
  NvmlAux aux;
};

namespace internal {
// Null until loaded; kNoDriver-like sentinels mark a failed load.
extern constinit std::atomic<const CudaDriver*> g_cuda;
extern constinit std::atomic<const NvmlDriver*> g_nvml;
extern const CudaDriver kNoCuda;
extern const NvmlDriver kNoNvml;
const CudaDriver* LoadCudaSlow();
const NvmlDriver* LoadNvmlSlow();
}  // namespace internal

// The real libcuda.so.1's table, loading it at the first call; null when there is none.
inline const CudaDriver* Cuda() {
  const CudaDriver* d = internal::g_cuda.load(std::memory_order_acquire);
  if (__builtin_expect(d == nullptr, 0)) d = internal::LoadCudaSlow();
  return d == &internal::kNoCuda ? nullptr : d;
}

// The table if it has been loaded already (never loads; null otherwise).
inline const CudaDriver* CudaIfLoaded() {
  const CudaDriver* d = internal::g_cuda.load(std::memory_order_acquire);
  return d == &internal::kNoCuda ? nullptr : d;
}

// The real libnvidia-ml.so.1's table, loading it at the first call; null when there is none.
inline const NvmlDriver* Nvml() {
  const NvmlDriver* d = internal::g_nvml.load(std::memory_order_acquire);
  if (__builtin_expect(d == nullptr, 0)) d = internal::LoadNvmlSlow();
  return d == &internal::kNoNvml ? nullptr : d;
}

// The NVML table if it has been loaded already (never loads; null otherwise).
inline const NvmlDriver* NvmlIfLoaded() {
  const NvmlDriver* d = internal::g_nvml.load(std::memory_order_acquire);
  return d == &internal::kNoNvml ? nullptr : d;
}

// The loaded tables, or empty ones (every pointer null) when there is no library; for code
// that runs only after a hook has found the driver, and checks each pointer it uses.
inline const CudaDriver& CudaOrEmpty() {
  const CudaDriver* d = CudaIfLoaded();
  return d != nullptr ? *d : internal::kNoCuda;
}
inline const NvmlDriver& NvmlOrEmpty() {
  const NvmlDriver* d = NvmlIfLoaded();
  return d != nullptr ? *d : internal::kNoNvml;
}

// NVML initialized by libvgpu for its own queries in this process (again in a fork child,
// whose NVML starts uninitialized). False: no usable NVML. No lock is held across nvmlInit.
bool NvmlReady();

}  // namespace hami::vgpu
