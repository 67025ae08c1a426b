// A library the routes test links (so it loads before main): its constructor looks driver
// functions up through every route while the process is still starting — as a framework's
// library constructor would — and initializes the driver through cuGetProcAddress. It also
// defines hami_route_chain_probe, for the RTLD_NEXT chain checks.
#include "route_probe_lib.h"

#include <cuda.h>
#include <dlfcn.h>

#include "vgpu_env.h"

namespace {

RouteProbe g_probe;

__attribute__((constructor)) void LookUpEarly() {
  hami::testing::VgpuEnv::Get();  // the test's machine and limit, before the driver starts
  g_probe.dlsym_default = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  g_probe.dlsym_next = dlsym(RTLD_NEXT, "cuMemFree_v2");
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  g_probe.dlopen_handle = h != nullptr ? dlsym(h, "cuMemGetInfo_v2") : nullptr;
  g_probe.get_proc_address = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
  auto get = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(g_probe.get_proc_address);
  CUdriverProcAddressQueryResult status;
  if (get != nullptr) {
    get("cuMemAlloc", &g_probe.proc_address_alloc, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,
        &status);
  }
  g_probe.init_result = cuInit(0);
}

}  // namespace

extern "C" const RouteProbe* hami_route_probe() { return &g_probe; }

extern "C" int hami_route_chain_probe() { return 2; }

extern "C" void* hami_route_probe_next(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  __asm__ volatile("" ::: "memory");  // no tail call: dlsym must see this library as its caller
  return p;
}
