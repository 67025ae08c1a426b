// The device configuration the scheduler, its webhook and the device plugin read: HAMi's
// `device-config.yaml`, whose `nvidia:` section names the resources a pod requests GPUs with
// and the defaults applied to a request that leaves something out.
//
//   nvidia:
//     resourceCountName: nvidia.com/gpu
//     resourceMemoryName: nvidia.com/gpumem
//     resourceMemoryPercentageName: nvidia.com/gpumem-percentage
//     resourceCoreName: nvidia.com/gpucores
//     resourcePriorityName: nvidia.com/priority
//     defaultMemory: 0        # MiB per GPU when a pod names no memory; 0: the whole GPU
//     defaultCores: 0         # percent per GPU when a pod names no cores
//     defaultGPUNum: 1        # GPUs when a pod names memory or cores but no count
//     memoryFactor: 1         # nvidia.com/gpumem is multiplied by it
//
// The file is YAML or JSON (JSON is read as YAML). Top-level sections of other backends
// (cambricon, hygon, ...) are ignored; in `nvidia:` every key HAMi's chart writes is read (the
// ones only the device plugin uses are kept for it), and an unknown key is an error naming it,
// so that a misspelt `defaultMemroy` never silently becomes the default. A file without
// `nvidia:` gives the defaults.
//
// Thread safety: pure functions; DeviceConfig is a value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::config {

struct DeviceConfig {
  // Resource names a container requests (limits, else requests).
  std::string resource_count_name = "nvidia.com/gpu";
  std::string resource_memory_name = "nvidia.com/gpumem";  // MiB
  std::string resource_memory_percentage_name = "nvidia.com/gpumem-percentage";
  std::string resource_core_name = "nvidia.com/gpucores";  // percent
  std::string resource_priority_name = "nvidia.com/priority";

  int32_t default_memory_mib = 0;  // defaultMemory; 0: the whole device (100 percent)
  int32_t default_cores = 0;       // defaultCores, 0..100
  int32_t default_gpu_num = 1;     // defaultGPUNum, >= 1
  int32_t memory_factor = 1;       // memoryFactor, >= 1

  // Read for the device plugin and `hami inspect`; the scheduler does not use them.
  bool overwrite_env = false;                // overwriteEnv
  int32_t device_split_count = 10;           // deviceSplitCount, >= 1
  double device_memory_scaling = 1;          // deviceMemoryScaling, > 0
  double device_core_scaling = 1;            // deviceCoreScaling, > 0
  int32_t pre_configured_device_memory = 0;  // preConfiguredDeviceMemory, MiB
  bool enable_numa_topology = false;         // enableNumaTopology
  bool disable_core_limit = false;           // disableCoreLimit (disablecorelimit)
  std::string gpu_core_policy = "default";   // gpuCorePolicy
  int32_t lib_cuda_log_level = 2;            // libCudaLogLevel, 0..4
  std::string limit_delivery = "file";       // limitDelivery
  std::string runtime_class_name;            // runtimeClassName
  std::string mig_strategy = "none";         // migStrategy (migstrategy)
  // advertiseMemoryAndCores: the device plugin publishes the node's GPU memory (MiB) and
  // compute (percent units) under resource_memory_name and resource_core_name in the Node's
  // status.capacity and status.allocatable (plugin/node_resources.h); off: it removes them.
  bool advertise_memory_and_cores = false;

  friend bool operator==(const DeviceConfig&, const DeviceConfig&) = default;
};

// Parses the file's text; `source` names it in errors:
//   device config /etc/hami/device-config.yaml: nvidia.defaultCores: 150 is out of range 0..100
//   device config /etc/hami/device-config.yaml: nvidia.defaultMemroy: unknown key
Result<DeviceConfig> ParseDeviceConfig(std::string_view text, std::string_view source);

// Reads and parses a file (at most 1 MiB; symbolic links followed, as a mounted ConfigMap is
// one).
Result<DeviceConfig> LoadDeviceConfig(const std::string& path);

}  // namespace hami::config
