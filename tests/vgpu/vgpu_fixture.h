// Tests that run under libvgpu.so (LD_PRELOAD, set by CTest for hami_vgpu_test targets) on
// the simulated GPU. Each test binary process gets a private simulated machine and a private
// shared region; limits come from the environment the fixture sets before the first CUDA
// call (libvgpu reads its configuration lazily, at that call).
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nvml/nvml.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
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

// cuInit and device 0's primary context current, for a test that first prepares what
// libvgpu.so will find (its environment, its region) and then starts CUDA itself.
inline void StartPrimaryContext() {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

// Sends this process's stderr to a pipe until Take(): what libvgpu.so logs meanwhile (the
// pipe holds 64 KiB, more than a start-up's lines).
class CapturedStderr {
 public:
  CapturedStderr() {
    if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) return;
    saved_ = dup(2);
    dup2(fds_[1], 2);
  }
  ~CapturedStderr() { Take(); }
  CapturedStderr(const CapturedStderr&) = delete;
  CapturedStderr& operator=(const CapturedStderr&) = delete;

  // Restores stderr and returns everything written meanwhile.
  std::string Take() {
    if (saved_ < 0) return text_;
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    close(fds_[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fds_[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) text_.append(buf, size_t(n));
    }
    close(fds_[0]);
    return text_;
  }

 private:
  int fds_[2] = {-1, -1};
  int saved_ = -1;
  std::string text_;
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
