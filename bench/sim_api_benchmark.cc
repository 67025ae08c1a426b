// Cost of the simulated driver's hot calls, so later benchmarks that run on it know what
// the simulation itself adds. Each is reported next to a baseline measured in the same run
// (a host malloc/free pair, an empty function call).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <stdlib.h>

#include <cstdlib>
#include <string>

#include "nvml/nvml.h"

namespace {

CUcontext g_ctx = nullptr;
CUfunction g_kernel = nullptr;

void SetUpOnce() {
  if (g_ctx != nullptr) return;
  char dir[] = "/tmp/hami-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) std::abort();
  setenv("HAMI_SIM_STATE", (std::string(dir) + "/sim.state").c_str(), 0);
  setenv("HAMI_SIM_QUEUE_DEPTH", "65536", 0);
  setenv("HAMI_SIM_WAVE_NS", "1", 0);
  setenv("HAMI_SIM_LAUNCH_NS", "0", 0);
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&g_ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) {
    std::abort();
  }
  CUmodule m;
  if (cuModuleLoadData(&m, "hami-sim-module\nkernel k\n") != CUDA_SUCCESS ||
      cuModuleGetFunction(&g_kernel, m, "k") != CUDA_SUCCESS || nvmlInit_v2() != NVML_SUCCESS) {
    std::abort();
  }
}

void BM_BaselineMallocFree(benchmark::State& state) {
  for (auto _ : state) {
    void* p = std::malloc(size_t(state.range(0)));
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_BaselineMallocFree)->Arg(4 << 20);

void BM_MemAllocFree(benchmark::State& state) {
  SetUpOnce();
  for (auto _ : state) {
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, size_t(state.range(0))) != CUDA_SUCCESS) state.SkipWithError("alloc");
    cuMemFree_v2(p);
  }
}
BENCHMARK(BM_MemAllocFree)->Arg(4 << 20)->Arg(256);

void BM_LaunchKernel(benchmark::State& state) {
  SetUpOnce();
  for (auto _ : state) {
    if (cuLaunchKernel(g_kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr) != CUDA_SUCCESS) {
      state.SkipWithError("launch");
    }
  }
  cuCtxSynchronize();
}
BENCHMARK(BM_LaunchKernel);

void BM_NvmlRunningProcesses(benchmark::State& state) {
  SetUpOnce();
  nvmlDevice_t dev;
  nvmlDeviceGetHandleByIndex_v2(0, &dev);
  nvmlProcessInfo_t infos[16];
  for (auto _ : state) {
    unsigned n = 16;
    nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, infos);
    benchmark::DoNotOptimize(n);
  }
}
BENCHMARK(BM_NvmlRunningProcesses);

}  // namespace

BENCHMARK_MAIN();
