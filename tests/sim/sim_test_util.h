// Helpers of the simulated GPU's own tests: a forked child for behaviour that needs another
// environment, a CUDA fixture with a current context, and the text forms of device ids.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/visible_devices.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {

// Environment changes for a child; nullopt unsets the variable.
using ChildEnv = std::vector<std::pair<std::string, std::optional<std::string>>>;

// Forks; the child applies `env`, runs `body` and exits 1 when it recorded a GoogleTest
// failure (the child's own output shows it), 0 otherwise. Returns the child's exit status,
// 128 + signal when it was killed, or -1 when it ran past `timeout_ms` (it is then killed).
// The child is a new process for the simulated driver and NVML: neither is initialized in it.
inline int RunInChild(const ChildEnv& env, const std::function<void()>& body,
                      int timeout_ms = 60000) {
  // The child gets this process's private machine, never the shared default state file
  // (a test run alone by CTest may not have set one up yet).
  SimEnv::Setup();
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -2;
  if (pid == 0) {
    for (const auto& [name, value] : env) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    body();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  // The child's exit, through its pidfd (support/subprocess.h); killed past the timeout.
  const bool exited = WaitForExit(pid, timeout_ms);
  if (!exited) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!exited) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs `body` in a child (RunInChild) and records a failure at `file`:`line` unless the
// child passed. Use through EXPECT_IN_CHILD(env, body).
inline void ExpectInChild(const char* file, int line, const ChildEnv& env,
                          const std::function<void()>& body) {
  int status = RunInChild(env, body);
  if (status != 0) {
    ADD_FAILURE_AT(file, line) << "the child process failed (status " << status
                               << "; its own failures, if any, are printed above)";
  }
}

#define EXPECT_IN_CHILD(...) ::hami::testing::ExpectInChild(__FILE__, __LINE__, __VA_ARGS__)

inline std::string UuidText(const CUuuid& uuid) { return GpuUuidText(uuid.bytes); }

inline std::string CudaUuid(CUdevice dev) {
  CUuuid u{};
  EXPECT_EQ(cuDeviceGetUuid_v2(&u, dev), CUDA_SUCCESS);
  return UuidText(u);
}

// UUIDs of the devices CUDA shows, by ordinal.
inline std::vector<std::string> CudaUuids() {
  int count = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back(CudaUuid(i));
  return out;
}

// Kernels of known device cost. One wave of a 1024-thread block grid is SMs * 2 blocks on
// every 2048-thread-per-SM profile (264 on an H100).
inline constexpr char kManifest[] =
    "hami-sim-module\n"
    "kernel k1ms wave_ns=1000000\n"
    "kernel k20ms wave_ns=20000000\n"
    "kernel k100ms wave_ns=100000000\n"
    "kernel dflt\n"
    "global counters bytes=4k\n";
inline constexpr unsigned kH100Wave1024 = 132 * 2;
inline constexpr double kLaunchMs = 0.003;  // HAMI_SIM_LAUNCH_NS's default

inline CUresult Launch(CUfunction f, unsigned grid, CUstream stream = nullptr,
                       unsigned block = 1024, unsigned smem = 0) {
  return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, stream, nullptr, nullptr);
}

inline CUfunction Function(CUmodule m, const char* name) {
  CUfunction f = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&f, m, name), CUDA_SUCCESS) << name;
  return f;
}

// Device time, in ms, of `n` back-to-back launches of `f` on a new stream, measured with
// events. A 100 ms kernel (`lead`) first keeps the device busy so that the launches queue
// behind it and the start event marks exactly where they begin, however slowly this
// process is scheduled meanwhile.
inline double DeviceMs(CUfunction lead, CUfunction f, unsigned grid, int n = 1,
                       unsigned block = 1024, unsigned smem = 0) {
  CUstream s;
  CUevent start, end;
  EXPECT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventCreate(&end, 0), CUDA_SUCCESS);
  EXPECT_EQ(Launch(lead, 1, s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  for (int i = 0; i < n; ++i) EXPECT_EQ(Launch(f, grid, s, block, smem), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(end, s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(end), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(start), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(end), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  return ms;
}

// For a child: initializes CUDA, makes device 0's primary context current and loads the
// kernels above. The process's exit releases them.
inline CUmodule StartCudaWithManifest() {
  CUcontext ctx = nullptr;
  CUmodule m = nullptr;
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleLoadData(&m, kManifest), CUDA_SUCCESS);
  return m;
}

inline void* Sym(const char* name) { return dlsym(RTLD_DEFAULT, name); }

// The function cuGetProcAddress_v2 gives for `name` at `version`, typed as `Fn`.
template <typename Fn>
Fn Proc(const char* name, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  EXPECT_EQ(cuGetProcAddress_v2(name, &p, version, flags, &status), CUDA_SUCCESS) << name;
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << name;
  return reinterpret_cast<Fn>(p);
}

// A test on the default machine (two H100s) with device 0's primary context current and
// the kernels above loaded in it.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimEnv::Setup("h100-80g:2");
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleLoadData(&module_, kManifest), CUDA_SUCCESS);
    k1ms_ = Function(module_, "k1ms");
    k20ms_ = Function(module_, "k20ms");
    k100ms_ = Function(module_, "k100ms");
  }

  void TearDown() override {
    cuCtxSetCurrent(ctx_);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    if (module_ != nullptr) {
      EXPECT_EQ(cuModuleUnload(module_), CUDA_SUCCESS);
    }
    CUcontext c = nullptr;
    while (cuCtxGetCurrent(&c) == CUDA_SUCCESS && c != nullptr) cuCtxPopCurrent_v2(&c);
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  }

  double DeviceMs(CUfunction f, unsigned grid, int n = 1, unsigned block = 1024,
                  unsigned smem = 0) {
    return ::hami::testing::DeviceMs(k100ms_, f, grid, n, block, smem);
  }

  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction k1ms_ = nullptr, k20ms_ = nullptr, k100ms_ = nullptr;
};

// Expects `actual_ms` to be `expected_ms` within 1%.
#define EXPECT_DEVICE_MS(actual_ms, expected_ms) \
  EXPECT_NEAR((actual_ms), (expected_ms), 0.01 * (expected_ms))

}  // namespace hami::testing
