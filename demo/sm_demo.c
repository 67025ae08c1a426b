/* hami-sm-demo: how much of GPU 0's time a process gets under `hami run --sm PCT`. A plain
 * driver API and NVML program, compiled only against cuda.h and the project's NVML
 * declarations; it runs on whichever libcuda.so.1 and libnvidia-ml.so.1 the loader finds.
 *
 *   hami-sm-demo SECONDS [TARGET]
 *
 * Launches a spinning kernel (PTX, compiled by the driver) over every SM, back to back, for
 * SECONDS, then reads from NVML the share of device time this process used over the last
 * two thirds of the run (the first third lets the limiter settle). With TARGET (percent) it
 * checks that share is within 10 points of it. Exit status: 0 when the check held (or
 * there was none), 1 when it did not, 2 when a CUDA or NVML call failed. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "nvml/nvml.h"

/* spin(cycles): every thread reads the SM clock until `cycles` have passed. */
static const char kSpinPtx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 cycles)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b64 %rd<6>;\n"
    "  ld.param.u64 %rd1, [cycles];\n"
    "  mov.u64 %rd2, %clock64;\n"
    "$Lspin:\n"
    "  mov.u64 %rd3, %clock64;\n"
    "  sub.s64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.s64 %p1, %rd4, %rd1;\n"
    "  @%p1 bra $Lspin;\n"
    "  ret;\n"
    "}\n";

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned long long NowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
}

static int Cuda(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return 0;
  const char* name = NULL;
  cuGetErrorName(r, &name);
  fprintf(stderr, "hami-sm-demo: %s: %s\n", what, name != NULL ? name : "?");
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: hami-sm-demo SECONDS [TARGET]\n");
    return 2;
  }
  const double seconds = atof(argv[1]);
  const int target = argc > 2 ? atoi(argv[2]) : -1;
  CUdevice dev;
  CUcontext ctx;
  CUmodule module;
  CUfunction spin;
  CUstream stream;
  int sms = 0, khz = 0;
  if (Cuda(cuInit(0), "cuInit") || Cuda(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      Cuda(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
      Cuda(cuCtxSetCurrent(ctx), "cuCtxSetCurrent") ||
      Cuda(cuModuleLoadData(&module, kSpinPtx), "cuModuleLoadData (the spin kernel)") ||
      Cuda(cuModuleGetFunction(&spin, module, "spin"), "cuModuleGetFunction") ||
      Cuda(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
      Cuda(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "SM count") ||
      Cuda(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev), "clock rate")) {
    return 2;
  }
  unsigned long long cycles = (unsigned long long)khz * 50 / 1000; /* 50 us */
  void* params[] = {&cycles};
  const double start = Now();
  unsigned long long measure_from = 0;
  long launches = 0;
  while (Now() - start < seconds) {
    if (measure_from == 0 && Now() - start >= seconds / 3) measure_from = NowUs();
    if (Cuda(cuLaunchKernel(spin, (unsigned)sms * 4, 1, 1, 256, 1, 1, 0, stream, params, NULL),
             "cuLaunchKernel")) {
      return 2;
    }
    ++launches;
  }
  if (Cuda(cuStreamSynchronize(stream), "cuStreamSynchronize")) return 2;

  nvmlDevice_t h;
  nvmlProcessUtilizationSample_t samples[64];
  unsigned n = 64;
  nvmlReturn_t r = nvmlInit_v2();
  if (r == NVML_SUCCESS) r = nvmlDeviceGetHandleByIndex_v2(0, &h);
  if (r == NVML_SUCCESS) r = nvmlDeviceGetProcessUtilization(h, samples, &n, measure_from);
  if (r != NVML_SUCCESS) {
    fprintf(stderr, "hami-sm-demo: NVML process utilization: error %d\n", (int)r);
    return 2;
  }
  double sum = 0;
  int count = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (samples[i].pid == (unsigned)getpid()) {
      sum += samples[i].smUtil;
      ++count;
    }
  }
  const double used = count > 0 ? sum / count : 0;
  printf("%ld launches in %.1f s; this process used %.0f%% of GPU 0's time (NVML)\n", launches,
         seconds, used);
  if (target < 0) return 0;
  const int ok = used >= target - 10 && used <= target + 10;
  printf("%s:     %.0f%% is within 10 points of the %d%% limit\n", ok ? "ok" : "FAILED", used,
         target);
  return ok ? 0 : 1;
}
