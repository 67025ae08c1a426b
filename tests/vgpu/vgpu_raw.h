// The driver's own functions, past libvgpu.so's wrappers (whose dlsym route would hand back
// the wrapper): what the simulated driver answers, and a way for a test to get a context
// that libvgpu refuses, to check what it does with the calls that come next. Link
// src/vgpu/libc_symbols.cc.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include "nvml/nvml.h"
#include "vgpu/libc_symbols.h"

namespace hami::testing {

template <typename Fn>
Fn Raw(const char* soname, const char* name) {
  return reinterpret_cast<Fn>(vgpu::FindVersionedSymbol(soname, name, nullptr));
}
#define HAMI_RAW_CUDA(name) ::hami::testing::Raw<decltype(&::name)>("libcuda.so.1", #name)
#define HAMI_RAW_NVML(name) ::hami::testing::Raw<decltype(&::name)>("libnvidia-ml.so.1", #name)

// Device 0's primary context, retained and made current through the driver alone. False
// when the driver refuses.
inline bool RawPrimaryContext() {
  auto retain = HAMI_RAW_CUDA(cuDevicePrimaryCtxRetain);
  auto set_current = HAMI_RAW_CUDA(cuCtxSetCurrent);
  CUcontext ctx = nullptr;
  return retain != nullptr && set_current != nullptr && retain(&ctx, 0) == CUDA_SUCCESS &&
         set_current(ctx) == CUDA_SUCCESS;
}

// For a process libvgpu refuses (no usable region, a zero budget): cuInit works, but no
// context is admitted and, on a context libvgpu did not make, no allocation either.
inline void ExpectNothingAdmitted() {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_OUT_OF_MEMORY) << "a context too";
  ASSERT_TRUE(RawPrimaryContext());
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 4 << 10), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc_v2(&p, 8 << 20), CUDA_ERROR_OUT_OF_MEMORY);
}

}  // namespace hami::testing
