// main() of the libvgpu.so test binaries: makes sure the binary runs with the library
// preloaded (and the simulated driver on the library path) by re-executing itself with
// them when they are missing, so CTest, test discovery and a person running the binary by
// hand all get the same process.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr || std::strstr(preload, HAMI_VGPU_LIBRARY) == nullptr) {
    std::string p = HAMI_VGPU_LIBRARY;
    if (preload != nullptr && *preload != '\0') p += std::string(":") + preload;
    setenv("LD_PRELOAD", p.c_str(), 1);
    const char* old = std::getenv("LD_LIBRARY_PATH");
    std::string lib = HAMI_SIM_LIBRARY_DIR;
    if (old != nullptr && *old != '\0') lib += std::string(":") + old;
    setenv("LD_LIBRARY_PATH", lib.c_str(), 1);
    execv("/proc/self/exe", argv);
    std::perror("re-executing under libvgpu.so");
    return 127;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
