// Fuzzes ParseNodeConfig (config.json): it never crashes, every rejection has a message, and an
// accepted file holds values in their documented ranges, with one entry per name.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "plugin/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = hami::plugin::ParseNodeConfig(text, "fuzz");
  if (!r.ok()) {
    if (r.error().message().empty()) std::abort();
    return 0;
  }
  std::set<std::string> names;
  for (const auto& e : *r) {
    if (e.name.empty() || !names.insert(e.name).second) std::abort();
    if (e.device_split_count && (*e.device_split_count < 1 || *e.device_split_count > 1024)) {
      std::abort();
    }
    if (e.device_memory_scaling && !(*e.device_memory_scaling > 0)) std::abort();
    if (e.device_core_scaling && !(*e.device_core_scaling > 0)) std::abort();
    if (e.lib_cuda_log_level && (*e.lib_cuda_log_level < 0 || *e.lib_cuda_log_level > 4)) {
      std::abort();
    }
    if (e.pre_configured_memory && *e.pre_configured_memory < 0) std::abort();
    for (int32_t i : e.filter.indices) {
      if (i < 0) std::abort();
    }
  }
  return 0;
}
