// The simulated machine and shared region of a libvgpu.so test process, set in the
// environment before libvgpu reads it (at the first CUDA or NVML call). Whoever calls Get()
// first sets them; everyone reads back what is set.
#pragma once

#include <stdlib.h>

#include <string>

#include "common/temp_dir.h"

namespace hami::testing {

struct VgpuEnv {
  static VgpuEnv& Get(const char* memory_limit = "2g") {
    static VgpuEnv env(memory_limit);
    return env;
  }
  TempDir dir{"hami-vgpu-test"};
  std::string region;
  std::string state;

 private:
  explicit VgpuEnv(const char* memory_limit) {
    setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", dir.File("usage.cache").c_str(), 0);
    setenv("HAMI_SIM_STATE", dir.File("sim.state").c_str(), 0);
    setenv("CUDA_DEVICE_MEMORY_LIMIT", memory_limit, 0);
    setenv("HAMI_SIM_PROFILE", "h100-80g:2", 0);
    region = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    state = getenv("HAMI_SIM_STATE");
  }
};

}  // namespace hami::testing
