// sm_busy: keeps GPU 0 busy with spinning kernels for a while, through the CUDA runtime (as
// an application would), for scripts/gpu-check.sh's compute-limit checks.
//
//   sm_busy SECONDS [SPIN_US]
//
// Each launch covers every SM (4 blocks of 256 threads per SM) and spins for SPIN_US
// microseconds (default 50). Prints "launches N" at the end. Exit 1 on a CUDA error.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void Spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

static int Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  std::fprintf(stderr, "sm_busy: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 5.0;
  const double spin_us = argc > 2 ? std::atof(argv[2]) : 50.0;
  int sms = 0, khz = 0;
  if (Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count") ||
      Check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0), "clock rate")) {
    return 1;
  }
  const long long cycles = static_cast<long long>(double(khz) * spin_us / 1000.0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long launches = 0;
  while (std::chrono::steady_clock::now() < until) {
    Spin<<<sms * 4, 256>>>(cycles);
    if (Check(cudaGetLastError(), "launch")) return 1;
    ++launches;
  }
  if (Check(cudaDeviceSynchronize(), "synchronize")) return 1;
  std::printf("launches %ld\n", launches);
  return 0;
}
