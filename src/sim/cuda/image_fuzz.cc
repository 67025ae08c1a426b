// Arbitrary bytes as a module image: ReadImage never reads outside them, and an image it
// accepts describes kernels and globals with names.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "sim/cuda/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto info = hami::sim::ReadImage(std::span<const uint8_t>(data, size));
  if (!info.ok()) return 0;
  for (const auto& [name, kernel] : info->kernels) {
    if (name.empty()) std::abort();
    for (const auto& p : kernel.params) {
      if (p.size > 32764) std::abort();  // a kernel's parameter space
    }
  }
  for (const auto& [name, global] : info->globals) {
    if (name.empty() || global.init.size() > size) std::abort();
  }
  return 0;
}
