// Fuzzes the simulated node's CDI reader (cdi.h): any bytes as a spec, read as JSON and as
// YAML. Nothing crashes; a refusal names the file; an accepted spec has a known cdiVersion, a
// vendor and class, and devices whose names are unique and non-empty.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "sim/cluster/cdi.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const bool yaml : {false, true}) {
    const std::string path = yaml ? "/cdi/fuzz.yaml" : "/cdi/fuzz.json";
    auto spec = hami::sim::cluster::ParseCdiSpec(text, yaml, path);
    if (!spec.ok()) {
      if (spec.error().message().find(path) == std::string::npos) std::abort();
      continue;
    }
    if (spec->version.empty() || spec->vendor.empty() || spec->cls.empty()) std::abort();
    std::set<std::string> names;
    for (const auto& [name, edits] : spec->devices) {
      if (name.empty() || !names.insert(name).second) std::abort();
    }
  }
  return 0;
}
