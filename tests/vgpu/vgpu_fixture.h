// Tests that run under libvgpu.so (LD_PRELOAD, set by CTest for hami_vgpu_test targets) on
// the simulated GPU. Each test binary process gets a private simulated machine and a private
// shared region; limits come from the environment the fixture sets before the first CUDA
// call (libvgpu reads its configuration lazily, at that call).
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nvml/nvml.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "region/region.h"
#include "vgpu_env.h"

namespace hami::testing {

// True when the global cuInit is libvgpu's: the test really runs under the preload.
inline bool UnderLibvgpu() {
  Dl_info info{};
  void* sym = dlsym(RTLD_DEFAULT, "cuInit");
  return sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr &&
         std::string(info.dli_fname).find("libvgpu.so") != std::string::npos;
}

// A region, read-only, to check what it records (null, with a failure added, when it cannot
// be opened).
inline std::unique_ptr<region::Region> OpenRegionReadOnly(const std::string& path) {
  auto r = region::Region::Open(path, nullptr, region::Create::kNever, nullptr,
                                region::Access::kReadOnly);
  if (!r.ok()) {
    ADD_FAILURE() << r.error().message();
    return nullptr;
  }
  return std::move(r).value();
}

// A fixture with CUDA initialized and device 0's primary context current.
class VgpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VgpuEnv::Get();
    ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  void TearDown() override { cuDevicePrimaryCtxRelease_v2(0); }

 public:
  static uint64_t FreeBytes() {
    size_t free = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
    return free;
  }

  // FreeBytes() once what dead processes held is returned. The memory view sweeps the dead
  // at most once per region::kSweepIntervalNs (whoever swept last); a running-process
  // listing through libvgpu sweeps at once, so one comes first.
  static uint64_t FreeBytesAfterSweep() {
    nvmlDevice_t h;
    EXPECT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
    nvmlProcessInfo_t infos[64];
    unsigned n = 64;
    EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, infos), NVML_SUCCESS);
    return FreeBytes();
  }

 protected:
  CUcontext ctx_ = nullptr;
};

}  // namespace hami::testing
