// The device plugin's configuration: the global device config (HAMi's device-config.yaml,
// `nvidia:` keys, parsed by config/device_config.h) and the per-node file config.json, whose
// entry for this node overrides the global values:
//
//   {"nodeconfig": [{"name": "node1", "operatingmode": "hami-core", "devicesplitcount": 20,
//                    "devicememoryscaling": 1.5, "devicecorescaling": 1,
//                    "preconfigureddevicememory": 0, "libcudaloglevel": 2,
//                    "enablenumatopology": false, "migstrategy": "none",
//                    "filterdevices": {"uuid": ["GPU-..."], "index": [0, 1]},
//                    "enablegetpreferredallocation": true, "limitdelivery": "file",
//                    "advertisememoryandcores": false}]}
//
// Keys are matched without regard to case, as HAMi's plugin reads the file (Go's encoding/json
// does), so "limitDelivery" and "libCudaLogLevel" are the same keys as their lower-case forms.
// Every other key is an error, and so is a key given twice (in any case), a value of the wrong
// type or out of range, two entries with one name and an entry without a name. Every error
// names the file, the key (with its entry's position) and the value:
//   device plugin config /config/config.json: nodeconfig[0].devicesplitcount: -1 must be >= 1
//
// Limit delivery (seed 003) is resolved per pod: the pod's hami.io/limit-delivery annotation,
// else this node's entry, else the global nvidia.limitDelivery, else "file".
//
// Thread safety: pure functions over value types, except LoadPluginConfig, which reads files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/device_config.h"

namespace hami::plugin {

// Where HAMi's chart mounts the per-node file.
inline constexpr char kDefaultNodeConfigPath[] = "/config/config.json";
// The variable the node name comes from when --node-name is not given.
inline constexpr char kNodeNameEnv[] = "NODE_NAME";

enum class LimitDelivery { kFile, kEnv };
std::string_view LimitDeliveryName(LimitDelivery delivery);  // "file", "env"
// Exactly "file" or "env"; `what` names the input in the error:
//   hami.io/limit-delivery: 'files' is not one of file, env
Result<LimitDelivery> ParseLimitDelivery(std::string_view value, std::string_view what);

// What the plugin does with a GPU (HAMi's operatingmode).
enum class OperatingMode {
  kHamiCore,  // "hami-core": shared, limited by libvgpu.so (the default)
  kMig,       // "mig": MIG instances; no libvgpu.so, no limits (seed 003's MIG row)
};
std::string_view OperatingModeName(OperatingMode mode);  // "hami-core", "mig"

// GPUs this node's plugin leaves out (filterdevices): by UUID or by NVML index.
struct DeviceFilter {
  std::vector<std::string> uuids;
  std::vector<int32_t> indices;

  // Whether a GPU with this UUID or index is left out.
  bool Excludes(std::string_view uuid, int index) const;
  friend bool operator==(const DeviceFilter&, const DeviceFilter&) = default;
};

// One entry of config.json as read: each value is set only when the entry names it.
struct NodeConfigEntry {
  std::string name;
  std::optional<int32_t> device_split_count;       // devicesplitcount, 1..1024
  std::optional<double> device_memory_scaling;     // devicememoryscaling, > 0
  std::optional<double> device_core_scaling;       // devicecorescaling, > 0
  std::optional<int32_t> pre_configured_memory;    // preconfigureddevicememory, MiB, >= 0
  std::optional<int32_t> lib_cuda_log_level;       // libcudaloglevel, 0..4 (number or string)
  std::optional<bool> enable_numa_topology;        // enablenumatopology
  std::optional<OperatingMode> operating_mode;     // operatingmode: hami-core, mig
  std::optional<std::string> mig_strategy;         // migstrategy: none, single, mixed
  DeviceFilter filter;                             // filterdevices {uuid[], index[]}
  std::optional<bool> enable_preferred;            // enablegetpreferredallocation
  std::optional<LimitDelivery> limit_delivery;     // limitdelivery: file, env
  std::optional<bool> advertise_memory_and_cores;  // advertisememoryandcores

  friend bool operator==(const NodeConfigEntry&, const NodeConfigEntry&) = default;
};

// Parses config.json's text; `source` (the file's path) names it in errors. An empty object
// and an absent or empty "nodeconfig" are fine (no entries).
Result<std::vector<NodeConfigEntry>> ParseNodeConfig(std::string_view text,
                                                     std::string_view source);

// The configuration the plugin runs with on one node.
struct PluginConfig {
  std::string node_name;
  // The global device config with this node's entry applied (devicesplitcount,
  // devicememoryscaling, devicecorescaling, preconfigureddevicememory, libcudaloglevel,
  // enablenumatopology, migstrategy, limitdelivery and advertisememoryandcores replace the
  // global values).
  config::DeviceConfig device;
  OperatingMode operating_mode = OperatingMode::kHamiCore;
  DeviceFilter filter;
  // Whether the kubelet is told to ask GetPreferredAllocation (the replicas of the GPUs the
  // scheduler chose). HAMi's default is off; ours is on, since the choice only follows the
  // scheduler's decision.
  bool enable_preferred_allocation = true;
  // The node's delivery (node entry > global > "file"); a pod's annotation may override it.
  LimitDelivery limit_delivery = LimitDelivery::kFile;
  bool node_entry_found = false;  // whether config.json had an entry for this node
};

// Applies the entry named `node_name` (if any) to `global`. Fails (naming the global key) when
// the global limitDelivery is not file or env.
Result<PluginConfig> ResolvePluginConfig(const config::DeviceConfig& global,
                                         const std::vector<NodeConfigEntry>& nodes,
                                         std::string_view node_name);

// The node name: `flag` (--node-name) when not empty, else `env` (NODE_NAME's value, may be
// nullptr). Neither: kInvalidArgument "node name: neither --node-name nor NODE_NAME is set".
Result<std::string> ResolveNodeName(std::string_view flag, const char* env);

struct LoadOptions {
  std::string node_name;                                  // already resolved (ResolveNodeName)
  std::string device_config_path;                         // empty: the defaults
  std::string node_config_path = kDefaultNodeConfigPath;  // absent file: no node entries
};

// Reads both files and resolves them. The device config's errors are LoadDeviceConfig's; an
// absent config.json is not an error (HAMi's chart may mount none), an unreadable or invalid
// one is.
Result<PluginConfig> LoadPluginConfig(const LoadOptions& options);

// The delivery for one pod: its hami.io/limit-delivery annotation (`annotation`, nullptr when
// absent) when present, else config.limit_delivery. A value other than "file" or "env" is an
// error naming the annotation:
//   hami.io/limit-delivery: 'files' is not one of file, env
Result<LimitDelivery> ResolveLimitDelivery(const PluginConfig& config,
                                           const std::string* annotation);

}  // namespace hami::plugin
