// What route_probe_lib.cc's constructor found, for the routes test.
#pragma once

#include <cuda.h>

struct RouteProbe {
  void* dlsym_default = nullptr;       // dlsym(RTLD_DEFAULT, "cuMemAlloc_v2")
  void* dlsym_next = nullptr;          // dlsym(RTLD_NEXT, "cuMemFree_v2")
  void* dlopen_handle = nullptr;       // dlsym(dlopen("libcuda.so.1"), "cuMemGetInfo_v2")
  void* get_proc_address = nullptr;    // dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2")
  void* proc_address_alloc = nullptr;  // through it: "cuMemAlloc", newest
  CUresult init_result = CUDA_ERROR_UNKNOWN;
};

extern "C" const RouteProbe* hami_route_probe();
// Defined by the library and by the test program, for RTLD_NEXT chains.
extern "C" int hami_route_chain_probe();
// dlsym(RTLD_NEXT, name) asked from inside the library.
extern "C" void* hami_route_probe_next(const char* name);
