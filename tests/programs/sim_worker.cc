// sim_worker: a scripted CUDA driver API process for multi-process tests of the simulated
// GPU. It runs its steps in order, prints one line per step on stdout, and with `hold`
// waits until its stdin closes (or it is killed) before releasing anything.
//
//   sim_worker [device N] [print-devices] [context] [alloc BYTES] [try-alloc BYTES]
//              [meminfo] [launch COUNT] [launch-for-ms N] [sync] [free-all] [sleep-ms N]
//              [hold] [release-context] [touch PATH] [wait-path PATH]
//              [until-alloc BYTES MS] ...
//
// try-alloc prints "try-alloc BYTES CURESULT" and goes on whatever the result (a failed
// allocation is not an error); meminfo prints "meminfo FREE TOTAL DEVICE_TOTAL" from
// cuMemGetInfo_v2 and cuDeviceTotalMem_v2 for the current device.
// touch creates PATH (a sign to a test); wait-path waits up to 60 s for PATH to exist (a
// sign from the test; a timeout is an error). until-alloc tries to allocate BYTES every
// millisecond until it succeeds or MS pass, then prints "until-alloc BYTES CURESULT" (the
// last result: a limit raised while the process runs reaches it).
// print-devices needs no context: it prints "device ORDINAL UUID PCI_BUS_ID" for each
// device CUDA shows. launch-for-ms launches back-to-back kernels (each several waves of the
// whole device) for N milliseconds of wall time, then prints "launched COUNT".
//
// Exit status: 0 when every step succeeded; 1 with "error <step> <CUresult>" otherwise.
#include <cuda.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/parse.h"
#include "common/visible_devices.h"

namespace {

int Fail(const char* step, int code) {
  std::printf("error %s %d\n", step, code);
  std::fflush(stdout);
  return 1;
}

int PrintDevices() {
  int count = 0;
  if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS) return Fail("cuDeviceGetCount", r);
  for (int i = 0; i < count; ++i) {
    CUuuid u;
    char bus[32];
    if (CUresult r = cuDeviceGetUuid_v2(&u, i); r != CUDA_SUCCESS) return Fail("uuid", r);
    if (CUresult r = cuDeviceGetPCIBusId(bus, sizeof(bus), i); r != CUDA_SUCCESS) {
      return Fail("pci", r);
    }
    std::printf("device %d %s %s\n", i, hami::GpuUuidText(u.bytes).c_str(), bus);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (CUresult r = cuInit(0); r != CUDA_SUCCESS) return Fail("cuInit", r);
  int device = 0;
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
  std::vector<CUdeviceptr> held;
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (step == "device") {
      device = std::atoi(next().c_str());
      continue;
    }
    if (step == "print-devices") {
      if (int rc = PrintDevices(); rc != 0) return rc;
      std::fflush(stdout);
      continue;
    }
    if (ctx == nullptr || step == "context") {
      const int64_t context_start = hami::MonotonicNs();
      CUdevice dev;
      if (CUresult r = cuDeviceGet(&dev, device); r != CUDA_SUCCESS) return Fail("cuDeviceGet", r);
      if (CUresult r = cuDevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS) {
        return Fail("cuDevicePrimaryCtxRetain", r);
      }
      if (CUresult r = cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) return Fail("cuCtxSetCurrent", r);
      if (step == "context") {
        std::printf("context device=%d start_ns=%lld end_ns=%lld\n", device,
                    static_cast<long long>(context_start),
                    static_cast<long long>(hami::MonotonicNs()));
        continue;
      }
    }
    if (step == "alloc") {
      auto bytes = hami::ParseSize(next(), "alloc");
      if (!bytes.ok()) return Fail("alloc-size", 1);
      CUdeviceptr p;
      if (CUresult r = cuMemAlloc_v2(&p, *bytes); r != CUDA_SUCCESS) return Fail("alloc", r);
      held.push_back(p);
      std::printf("alloc %llu\n", static_cast<unsigned long long>(*bytes));
    } else if (step == "try-alloc") {
      auto bytes = hami::ParseSize(next(), "try-alloc");
      if (!bytes.ok()) return Fail("try-alloc-size", 1);
      CUdeviceptr p;
      CUresult r = cuMemAlloc_v2(&p, *bytes);
      if (r == CUDA_SUCCESS) held.push_back(p);
      std::printf("try-alloc %llu %d\n", static_cast<unsigned long long>(*bytes), int(r));
    } else if (step == "until-alloc") {
      auto bytes = hami::ParseSize(next(), "until-alloc");
      const int64_t until = hami::MonotonicNs() + int64_t(std::atoll(next().c_str())) * 1'000'000;
      if (!bytes.ok()) return Fail("until-alloc-size", 1);
      CUresult r;
      for (;;) {
        CUdeviceptr p;
        r = cuMemAlloc_v2(&p, *bytes);
        if (r == CUDA_SUCCESS) held.push_back(p);
        if (r == CUDA_SUCCESS || hami::MonotonicNs() >= until) break;
        hami::SleepForNs(1'000'000);
      }
      std::printf("until-alloc %llu %d\n", static_cast<unsigned long long>(*bytes), int(r));
    } else if (step == "touch") {
      const std::string path = next();
      FILE* f = std::fopen(path.c_str(), "we");
      if (f == nullptr) return Fail("touch", errno);
      std::fclose(f);
      std::printf("touched\n");
      std::fflush(stdout);
    } else if (step == "wait-path") {
      const std::string path = next();
      const int64_t until = hami::MonotonicNs() + 60'000'000'000;
      while (access(path.c_str(), F_OK) != 0) {
        if (hami::MonotonicNs() >= until) return Fail("wait-path", ETIMEDOUT);
        hami::SleepForNs(1'000'000);
      }
      std::printf("waited\n");
    } else if (step == "meminfo") {
      size_t free = 0, total = 0, device_total = 0;
      if (CUresult r = cuMemGetInfo_v2(&free, &total); r != CUDA_SUCCESS) {
        return Fail("meminfo", r);
      }
      if (CUresult r = cuDeviceTotalMem_v2(&device_total, device); r != CUDA_SUCCESS) {
        return Fail("device-total", r);
      }
      std::printf("meminfo %zu %zu %zu\n", free, total, device_total);
    } else if (step == "launch" || step == "launch-for-ms") {
      int n = std::atoi(next().c_str());
      if (module == nullptr) {
        if (CUresult r = cuModuleLoadData(&module, "hami-sim-module\nkernel busy\n");
            r != CUDA_SUCCESS) {
          return Fail("module", r);
        }
        if (CUresult r = cuModuleGetFunction(&kernel, module, "busy"); r != CUDA_SUCCESS) {
          return Fail("function", r);
        }
      }
      const int64_t until = hami::MonotonicNs() + int64_t(n) * 1000000;
      int count = 0;
      while (step == "launch" ? count < n : hami::MonotonicNs() < until) {
        if (CUresult r =
                cuLaunchKernel(kernel, 4096, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr);
            r != CUDA_SUCCESS) {
          return Fail("launch", r);
        }
        ++count;
      }
      std::printf("launched %d\n", count);
    } else if (step == "sync") {
      if (CUresult r = cuCtxSynchronize(); r != CUDA_SUCCESS) return Fail("sync", r);
      std::printf("synced\n");
    } else if (step == "free-all") {
      for (CUdeviceptr p : held) {
        if (CUresult r = cuMemFree_v2(p); r != CUDA_SUCCESS) return Fail("free", r);
      }
      held.clear();
      std::printf("freed\n");
    } else if (step == "hold") {
      std::printf("holding pid=%d\n", int(getpid()));
      std::fflush(stdout);
      char buf[64];
      while (read(0, buf, sizeof(buf)) > 0) {
      }
      std::printf("released\n");
    } else if (step == "sleep-ms") {
      struct timespec ts = {std::atoi(next().c_str()) / 1000, 0};
      ts.tv_nsec = long(std::atoi(argv[i]) % 1000) * 1000000;
      nanosleep(&ts, nullptr);
      std::printf("slept\n");
    } else if (step == "release-context") {
      CUdevice dev;
      cuDeviceGet(&dev, device);
      if (CUresult r = cuDevicePrimaryCtxRelease_v2(dev); r != CUDA_SUCCESS) {
        return Fail("release", r);
      }
      ctx = nullptr;
      std::printf("context released\n");
    } else if (step == "context") {
      // handled above
    } else {
      std::fprintf(stderr, "sim_worker: unknown step '%s'\n", step.c_str());
      return 2;
    }
    std::fflush(stdout);
  }
  std::printf("done\n");
  return 0;
}
