// Makes a context on device 0 and prints what NVML lists for the device, as seen from where
// it runs (a child PID namespace, in the tests):
//   self <getpid()>
//   pids <pid> <pid> ...
// then holds the context until its standard input closes.
#include <cuda.h>
#include <unistd.h>

#include <cstdio>

#include "nvml/nvml.h"

int main() {
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      nvmlInit_v2() != NVML_SUCCESS) {
    std::printf("failed\n");
    return 1;
  }
  nvmlDevice_t dev;
  nvmlProcessInfo_t infos[64];
  unsigned count = 64;
  if (nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS ||
      nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos) != NVML_SUCCESS) {
    std::printf("failed\n");
    return 1;
  }
  std::printf("self %d\npids", int(getpid()));
  for (unsigned i = 0; i < count; ++i) std::printf(" %u", infos[i].pid);
  std::printf("\n");
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  nvmlShutdown();
  cuDevicePrimaryCtxRelease_v2(0);
  return 0;
}
