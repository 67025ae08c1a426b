// Every variable the simulated GPU reads, in one table: name, default, parser, one line of
// doc. `hami sim options` prints it; docs/simulated-gpu.md explains each.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::sim {

struct SimOptions {
  std::string profile_spec;        // HAMI_SIM_PROFILE
  std::string node;                // HAMI_SIM_NODE
  std::string state_path;          // HAMI_SIM_STATE
  std::string device_nodes_path;   // HAMI_SIM_DEVICE_NODES (sim/device_nodes.h)
  int driver_version = 0;          // HAMI_SIM_DRIVER_VERSION
  uint64_t init_us = 0;            // HAMI_SIM_INIT_US
  uint64_t ctx_create_us = 0;      // HAMI_SIM_CTX_CREATE_US
  bool ctx_serialize = false;      // HAMI_SIM_CTX_SERIALIZE
  uint64_t nvml_us = 0;            // HAMI_SIM_NVML_US
  uint64_t launch_ns = 0;          // HAMI_SIM_LAUNCH_NS
  uint64_t wave_ns = 0;            // HAMI_SIM_WAVE_NS
  uint32_t queue_depth = 0;        // HAMI_SIM_QUEUE_DEPTH
  uint32_t util_window_ms = 0;     // HAMI_SIM_UTIL_WINDOW_MS
  uint64_t context_bytes = 0;      // HAMI_SIM_CONTEXT_SIZE; 0: the profile's
  uint64_t alloc_granularity = 0;  // HAMI_SIM_ALLOC_GRANULARITY
  int log_level = 2;               // HAMI_SIM_LOG_LEVEL
  std::string kill_point;          // HAMI_SIM_KILL_POINT (tests only)
};

struct SimOptionInfo {
  const char* name;
  const char* default_text;
  const char* doc;
  Status (*apply)(SimOptions* options, std::string_view value);
};

std::span<const SimOptionInfo> SimOptionTable();

using GetEnvFn = std::function<const char*(const char*)>;

// Defaults, then every variable that is set. The first malformed variable fails the whole
// load with an error naming it and its value.
Result<SimOptions> LoadSimOptions(const GetEnvFn& getenv_fn);
Result<SimOptions> LoadSimOptionsFromEnvironment();

}  // namespace hami::sim
