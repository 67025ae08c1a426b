// The fixture of the simulated driver's memory and graph tests: device 0's primary context,
// fresh for every test and destroyed (with whatever it still holds) after it, and a created
// stream. Device memory is asserted as deltas of cuMemGetInfo_v2, so the tests pass in any
// order, in a process each or all in one.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "support/sim_env.h"

namespace hami::testing {

// `n` bytes that differ from their neighbours and from another seed's.
inline std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 31 + seed);
  return v;
}

inline CUmemAllocationProp DeviceProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

class SimDeviceTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kGiB = 1ull << 30;

  void SetUp() override {
    SimEnv::Setup("h100-80g:2");
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, dev_), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUmemAllocationProp prop = DeviceProp(0);
    ASSERT_EQ(cuMemGetAllocationGranularity(&g_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuStreamDestroy_v2(stream_), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(dev_), CUDA_SUCCESS);
  }

  // Free device memory, as every process sees it.
  static size_t FreeBytes() {
    size_t free_bytes = 0, total_bytes = 0;
    EXPECT_EQ(cuMemGetInfo_v2(&free_bytes, &total_bytes), CUDA_SUCCESS);
    return free_bytes;
  }
  static CUdeviceptr Alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAlloc_v2(&p, bytes), CUDA_SUCCESS);
    return p;
  }
  static void Free(std::initializer_list<CUdeviceptr> ptrs) {
    for (CUdeviceptr p : ptrs) EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  }
  static std::vector<uint8_t> Download(CUdeviceptr p, size_t n) {
    std::vector<uint8_t> out(n);
    EXPECT_EQ(cuMemcpyDtoH_v2(out.data(), p, n), CUDA_SUCCESS);
    return out;
  }
  // An address no allocation covers.
  static CUdeviceptr Outside() {
    static int not_device_memory = 0;
    return CUdeviceptr(uintptr_t(&not_device_memory));
  }

  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  size_t g_ = 0;  // allocation granularity
};

}  // namespace hami::testing
