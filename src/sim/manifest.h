// Module manifests: a module image the simulated driver understands, declaring its kernels
// (with an optional device time per wave) and globals:
//
//   hami-sim-module
//   # comments and blank lines are ignored
//   kernel busy wave_ns=50000
//   kernel copy
//   global counters bytes=4k
//
// Any other image (cubin, PTX, fatbin) is accepted too; its functions are found by any
// name and take the default cost.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami::sim {

inline constexpr std::string_view kManifestMagic = "hami-sim-module";

struct Manifest {
  std::map<std::string, uint64_t> kernels;                // name -> wave_ns (0: HAMI_SIM_WAVE_NS)
  std::vector<std::pair<std::string, uint64_t>> globals;  // name, bytes
};

// True when `image` starts with the manifest magic line.
bool IsManifest(const char* image);

// Parses a manifest; an error names the line number and the line.
Result<Manifest> ParseManifest(std::string_view text);

}  // namespace hami::sim
