/* hami-demo: a plain CUDA driver API program, compiled only against the toolkit's cuda.h.
 * It lists the devices it can see, then on each one allocates device memory, copies a
 * pattern in and back out through a second buffer, and checks every byte; then it runs a
 * kernel and times it with events. On the simulated GPU the kernel comes from a module
 * manifest; on a real GPU that step is skipped. Exit status 0 means every check passed. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                            \
  do {                                                                                         \
    CUresult r_ = (call);                                                                      \
    if (r_ != CUDA_SUCCESS) {                                                                  \
      const char* name_ = NULL;                                                                \
      cuGetErrorName(r_, &name_);                                                              \
      fprintf(stderr, "hami-demo: %s failed: %s (%d)\n", #call, name_ ? name_ : "?", (int)r_); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

static const char kModule[] =
    "hami-sim-module\n"
    "kernel busy wave_ns=50000\n";

static int RoundTrip(CUdevice dev, int ordinal, size_t bytes) {
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  size_t free_before, total;
  CHECK(cuMemGetInfo(&free_before, &total));

  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, bytes));
  CHECK(cuMemAlloc(&b, bytes));
  unsigned char* in = malloc(bytes);
  unsigned char* out = malloc(bytes);
  if (in == NULL || out == NULL) return 1;
  for (size_t i = 0; i < bytes; ++i) in[i] = (unsigned char)(i * 131u + 7u + (unsigned)ordinal);
  memset(out, 0, bytes);
  CHECK(cuMemcpyHtoD(a, in, bytes));
  CHECK(cuMemcpyDtoD(b, a, bytes));
  CHECK(cuMemcpyDtoH(out, b, bytes));
  size_t bad = 0;
  for (size_t i = 0; i < bytes; ++i) bad += in[i] != out[i];
  size_t free_during;
  CHECK(cuMemGetInfo(&free_during, &total));
  printf("  round trip: %zu MiB host -> device -> device -> host: %s (%zu bytes differ)\n",
         bytes >> 20, bad == 0 ? "verified" : "MISMATCH", bad);
  printf("  free memory: %zu MiB before, %zu MiB with the two buffers (of %zu MiB)\n",
         free_before >> 20, free_during >> 20, total >> 20);

  /* A kernel, timed by events. Only the simulated driver accepts the manifest. */
  CUmodule module;
  if (cuModuleLoadData(&module, kModule) == CUDA_SUCCESS) {
    CUfunction busy;
    CUevent start, stop;
    CHECK(cuModuleGetFunction(&busy, module, "busy"));
    CHECK(cuEventCreate(&start, 0));
    CHECK(cuEventCreate(&stop, 0));
    CHECK(cuEventRecord(start, NULL));
    for (int i = 0; i < 20; ++i) {
      CHECK(cuLaunchKernel(busy, 1024, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
    }
    CHECK(cuEventRecord(stop, NULL));
    CHECK(cuEventSynchronize(stop));
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, start, stop));
    printf("  kernels: 20 launches of 1024x256 threads took %.2f ms of device time\n", ms);
    CHECK(cuEventDestroy(start));
    CHECK(cuEventDestroy(stop));
    CHECK(cuModuleUnload(module));
  }

  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  free(in);
  free(out);
  CHECK(cuDevicePrimaryCtxRelease(dev));
  return bad == 0 ? 0 : 1;
}

int main(void) {
  CHECK(cuInit(0));
  int version = 0, count = 0;
  CHECK(cuDriverGetVersion(&version));
  CHECK(cuDeviceGetCount(&count));
  printf("CUDA driver API %d.%d, %d device(s)\n", version / 1000, (version % 1000) / 10, count);
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    char name[128], bus[32];
    CUuuid uuid;
    size_t mem;
    int sms, major, minor;
    CHECK(cuDeviceGet(&dev, i));
    CHECK(cuDeviceGetName(name, sizeof(name), dev));
    CHECK(cuDeviceGetUuid(&uuid, dev));
    CHECK(cuDeviceTotalMem(&mem, dev));
    CHECK(cuDeviceGetPCIBusId(bus, sizeof(bus), dev));
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    const unsigned char* u = (const unsigned char*)uuid.bytes;
    printf(
        "device %d: %s\n  GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x"
        "  %zu MiB  %d SMs  compute %d.%d  PCI %s\n",
        i, name, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
        u[13], u[14], u[15], mem >> 20, sms, major, minor, bus);
    failed |= RoundTrip(dev, i, (size_t)64 << 20);
  }
  printf(failed ? "hami-demo: FAILED\n" : "hami-demo: all checks passed\n");
  return failed;
}
