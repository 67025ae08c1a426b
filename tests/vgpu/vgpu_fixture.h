// Tests that run under libvgpu.so (LD_PRELOAD, set by CTest for hami_vgpu_test targets) on
// the simulated GPU. Each test binary process gets a private simulated machine and a private
// shared region; limits come from the environment the fixture sets before the first CUDA
// call (libvgpu reads its configuration lazily, at that call).
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "common/temp_dir.h"

namespace hami::testing {

// True when the global cuInit is libvgpu's: the test really runs under the preload.
inline bool UnderLibvgpu() {
  Dl_info info{};
  void* sym = dlsym(RTLD_DEFAULT, "cuInit");
  return sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr &&
         std::string(info.dli_fname).find("libvgpu.so") != std::string::npos;
}

// The process's machine and region; set once, before any CUDA call.
struct VgpuEnv {
  static VgpuEnv& Get(const char* memory_limit = "2g") {
    static VgpuEnv env(memory_limit);
    return env;
  }
  TempDir dir{"hami-vgpu-test"};
  std::string region;
  std::string state;

 private:
  explicit VgpuEnv(const char* memory_limit) {
    region = dir.File("usage.cache");
    state = dir.File("sim.state");
    setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", region.c_str(), 0);
    setenv("HAMI_SIM_STATE", state.c_str(), 0);
    setenv("CUDA_DEVICE_MEMORY_LIMIT", memory_limit, 0);
    setenv("HAMI_SIM_PROFILE", "h100-80g:2", 0);
  }
};

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

  static uint64_t FreeBytes() {
    size_t free = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
    return free;
  }

  // FreeBytes() once it equals `expected` or two seconds have passed: what a dead process
  // held returns at the next sweep, and sweeps run at most every region::kSweepIntervalNs.
  static uint64_t FreeBytesSettlingAt(uint64_t expected) {
    uint64_t free = FreeBytes();
    for (int i = 0; i < 200 && free != expected; ++i) {
      usleep(10'000);
      free = FreeBytes();
    }
    return free;
  }

  CUcontext ctx_ = nullptr;
};

}  // namespace hami::testing
