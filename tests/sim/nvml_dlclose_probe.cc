// Opens the simulated NVML by path, initializes and shuts it down, closes the library, then
// asks the host-PID resolver that initialization started (the library's code must still be
// there to answer), as a tool that opens NVML for one query does. Prints "resolver <pid>" and
// "self <pid>"; exits 1 when a step fails.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "sim/host_pid.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nvml_dlclose_probe LIBNVIDIA_ML\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::printf("dlopen %s\n", dlerror()), 1;
  using Fn = int (*)();
  auto init = reinterpret_cast<Fn>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<Fn>(dlsym(lib, "nvmlShutdown"));
  if (init == nullptr || shutdown == nullptr || init() != 0 || shutdown() != 0) {
    return std::printf("nvml failed\n"), 1;
  }
  dlclose(lib);
  const pid_t resolved = hami::sim::AskHostPid(std::getenv("HAMI_SIM_STATE"));
  std::printf("resolver %d\nself %d\n", int(resolved), int(getpid()));
  return resolved > 0 ? 0 : 1;
}
