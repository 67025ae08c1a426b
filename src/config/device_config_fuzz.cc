// Fuzzes ParseDeviceConfig: it never crashes, every rejection has a message, and an accepted
// configuration holds values in their documented ranges.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/device_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = hami::config::ParseDeviceConfig(text, "fuzz");
  if (!c.ok()) {
    if (c.error().message().empty()) std::abort();
    return 0;
  }
  if (c->default_cores < 0 || c->default_cores > 100 || c->default_gpu_num < 1 ||
      c->memory_factor < 1 || c->default_memory_mib < 0 || c->device_split_count < 1 ||
      !(c->device_memory_scaling > 0) || !(c->device_core_scaling > 0) ||
      c->resource_count_name.empty() || c->resource_memory_name.empty()) {
    std::abort();
  }
  return 0;
}
