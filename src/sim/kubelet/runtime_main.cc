// hami_sim_runtime_probe: loads libcuda.so.1 and libnvidia-ml.so.1 by soname, as a CUDA
// program does, and prints "<soname> <path the loader chose>" for each; exits 1 naming the
// first one the loader cannot find. Used inside simulated containers started with an empty
// environment, to show that the injected driver libraries are found without LD_LIBRARY_PATH.
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <initializer_list>

int main() {
  for (const char* soname : {"libcuda.so.1", "libnvidia-ml.so.1"}) {
    void* handle = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
    if (handle == nullptr) {
      std::printf("%s not found: %s\n", soname, dlerror());
      return 1;
    }
    link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
      std::printf("%s loaded, path unknown: %s\n", soname, dlerror());
      return 1;
    }
    std::printf("%s %s\n", soname, map->l_name);
  }
  return 0;
}
