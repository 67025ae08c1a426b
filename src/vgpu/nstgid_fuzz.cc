// Arbitrary bytes as a /proc/<pid>/status text: the parser never reads out of bounds, and a
// success holds 1..capacity PIDs, each in 1..INT_MAX.
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "vgpu/nstgid.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hami::vgpu;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  pid_t pids[4];
  size_t n = 0;
  hami::Status s = ParseNStgid(text, pids, 4, &n);
  if (s.ok()) {
    if (n == 0 || n > 4) std::abort();
    for (size_t i = 0; i < n; ++i) {
      if (pids[i] <= 0) std::abort();
    }
  } else if (n != 0 || s.error().text().empty()) {
    std::abort();
  }
  return 0;
}
