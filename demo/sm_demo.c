/* hami-sm-demo: how much of GPU 0's time a process gets under `hami run --sm PCT`, or in a
 * pod given `nvidia.com/gpucores`. A plain driver API and NVML program, compiled only against
 * cuda.h and the project's NVML declarations; it runs on whichever libcuda.so.1 and
 * libnvidia-ml.so.1 the loader finds.
 *
 *   hami-sm-demo SECONDS [TARGET]
 *   hami-sm-demo --every INTERVAL [SECONDS]
 *
 * Launches a spinning kernel (PTX, compiled by the driver) over every SM, back to back.
 *
 * The first form runs SECONDS, then reads from NVML the share of device time this process
 * used over the last two thirds of the run (the first third lets the limiter settle). With
 * TARGET (percent) it checks that share is within 10 points of it. Exit status: 0 when the
 * check held (or there was none), 1 when it did not, 2 when a CUDA or NVML call failed.
 *
 * The second form prints, every INTERVAL seconds, that interval's share of device time (NVML)
 * and launch rate, one line each:
 *
 *   every 1.0 s at 3.0 s: 25% of GPU 0's time (NVML), 10342 launches/s
 *
 * for SECONDS, or until SIGTERM or SIGINT (exit 0; so it can be a container's first process).
 * The share of a process alone on an unlimited GPU is about 100%: a share is also the fraction
 * of the unlimited launch rate it got. Exit status 2 when a CUDA or NVML call failed. */
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static volatile sig_atomic_t stop_requested = 0;

static void RequestStop(int sig) {
  (void)sig;
  stop_requested = 1;
}

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

/* This process's share of device `h`'s time since `since_us` (NVML), in percent; -1 when NVML
 * failed (said on stderr). In a container NVML names processes by their host PIDs, which a
 * process does not know: when no sample carries this process's PID, the samples shown are
 * summed. Under libvgpu.so they are the container's processes only (it hides other tenants'),
 * so the figure is the container's share, which is what its limit holds. */
static double UsedSince(nvmlDevice_t h, unsigned long long since_us) {
  nvmlProcessUtilizationSample_t samples[64];
  unsigned n = 64;
  nvmlReturn_t r = nvmlDeviceGetProcessUtilization(h, samples, &n, since_us);
  if (r == NVML_ERROR_NOT_FOUND) return 0; /* no sample since then: it used nothing */
  if (r != NVML_SUCCESS) {
    fprintf(stderr, "hami-sm-demo: NVML process utilization: error %d\n", (int)r);
    return -1;
  }
  /* A driver may give a process several samples over the period: each process's mean. */
  double own = -1, all = 0;
  for (unsigned i = 0; i < n; ++i) {
    unsigned first = 0;
    while (samples[first].pid != samples[i].pid) ++first;
    if (first != i) continue; /* counted with its first sample */
    double sum = 0;
    int count = 0;
    for (unsigned j = i; j < n; ++j) {
      if (samples[j].pid == samples[i].pid) {
        sum += samples[j].smUtil;
        ++count;
      }
    }
    all += sum / count;
    if (samples[i].pid == (unsigned)getpid()) own = sum / count;
  }
  return own >= 0 ? own : all;
}

static int Nvml(nvmlDevice_t* h) {
  nvmlReturn_t r = nvmlInit_v2();
  if (r == NVML_SUCCESS) r = nvmlDeviceGetHandleByIndex_v2(0, h);
  if (r != NVML_SUCCESS) {
    fprintf(stderr, "hami-sm-demo: NVML device 0: error %d\n", (int)r);
    return 1;
  }
  return 0;
}

static int Usage(void) {
  fprintf(stderr,
          "usage: hami-sm-demo SECONDS [TARGET]\n"
          "       hami-sm-demo --every INTERVAL [SECONDS]\n");
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const int every_mode = strcmp(argv[1], "--every") == 0;
  double interval = 0;
  double seconds = 0; /* 0 in --every mode: until SIGTERM or SIGINT */
  int target = -1;
  if (every_mode) {
    if (argc < 3 || argc > 4) return Usage();
    interval = atof(argv[2]);
    if (argc > 3) seconds = atof(argv[3]);
    if (interval < 0.1) {
      fprintf(stderr, "hami-sm-demo: --every %s: the interval is at least 0.1 s\n", argv[2]);
      return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = RequestStop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
  } else {
    seconds = atof(argv[1]);
    target = argc > 2 ? atoi(argv[2]) : -1;
  }
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
  nvmlDevice_t h;
  if (every_mode && Nvml(&h)) return 2;
  unsigned long long cycles = (unsigned long long)khz * 50 / 1000; /* 50 us */
  void* params[] = {&cycles};
  const double start = Now();
  unsigned long long measure_from = 0;
  double interval_start = start, next_report = start + interval;
  unsigned long long interval_start_us = NowUs();
  long launches = 0, interval_launches = 0;
  for (;;) {
    const double now = Now();
    if (every_mode && now >= next_report) {
      const double used = UsedSince(h, interval_start_us);
      if (used < 0) return 2;
      printf("every %.1f s at %.1f s: %.0f%% of GPU 0's time (NVML), %.0f launches/s\n", interval,
             now - start, used, (double)interval_launches / (now - interval_start));
      fflush(stdout);
      interval_start = now;
      next_report += interval;
      interval_start_us = NowUs();
      interval_launches = 0;
    }
    if (stop_requested || (seconds > 0 && now - start >= seconds)) break;
    if (!every_mode && measure_from == 0 && now - start >= seconds / 3) measure_from = NowUs();
    if (Cuda(cuLaunchKernel(spin, (unsigned)sms * 4, 1, 1, 256, 1, 1, 0, stream, params, NULL),
             "cuLaunchKernel")) {
      return 2;
    }
    ++launches;
    ++interval_launches;
  }
  if (Cuda(cuStreamSynchronize(stream), "cuStreamSynchronize")) return 2;
  if (every_mode) return 0;

  if (Nvml(&h)) return 2;
  const double used = UsedSince(h, measure_from);
  if (used < 0) return 2;
  printf("%ld launches in %.1f s; this process used %.0f%% of GPU 0's time (NVML)\n", launches,
         seconds, used);
  if (target < 0) return 0;
  const int ok = used >= target - 10 && used <= target + 10;
  printf("%s:     %.0f%% is within 10 points of the %d%% limit\n", ok ? "ok" : "FAILED", used,
         target);
  return ok ? 0 : 1;
}
