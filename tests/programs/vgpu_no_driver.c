/* vgpu_no_driver: a program that links no driver library, run with libvgpu.so preloaded on
 * a machine (or library path) without libcuda.so.1 and libnvidia-ml.so.1. It reaches the
 * hooks through dlsym and prints what each call returns, one "NAME CODE" line each: libvgpu
 * must answer with the driver's own codes and never crash. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

typedef int (*InitFn)(unsigned);
typedef int (*AllocFn)(unsigned long long*, size_t);
typedef int (*InfoFn)(size_t*, size_t*);
typedef int (*ProcFn)(const char*, void**, int, unsigned long long, int*);
typedef int (*VoidFn)(void);
typedef int (*CountFn)(unsigned*);

static void* Find(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (p == NULL) printf("%s missing\n", name);
  return p;
}

int main(void) {
  InitFn init = (InitFn)Find("cuInit");
  AllocFn alloc = (AllocFn)Find("cuMemAlloc_v2");
  InfoFn info = (InfoFn)Find("cuMemGetInfo_v2");
  ProcFn proc = (ProcFn)Find("cuGetProcAddress_v2");
  VoidFn nvml_init = (VoidFn)Find("nvmlInit_v2");
  CountFn nvml_count = (CountFn)Find("nvmlDeviceGetCount_v2");
  if (!init || !alloc || !info || !proc || !nvml_init || !nvml_count) return 2;
  unsigned long long p = 0;
  size_t free_bytes = 0, total = 0;
  void* fn = NULL;
  int status = 0;
  unsigned count = 0;
  printf("cuInit %d\n", init(0));
  printf("cuMemAlloc_v2 %d\n", alloc(&p, 1 << 20));
  printf("cuMemGetInfo_v2 %d\n", info(&free_bytes, &total));
  printf("cuGetProcAddress_v2 %d\n", proc("cuMemAlloc", &fn, 13000, 0, &status));
  printf("nvmlInit_v2 %d\n", nvml_init());
  printf("nvmlDeviceGetCount_v2 %d\n", nvml_count(&count));
  return 0;
}
