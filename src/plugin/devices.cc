#include "plugin/devices.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hami::plugin {

namespace {

// x truncated toward zero into int32 (clamped), after the 1e-9 the header explains.
int32_t TruncateToInt32(double x) {
  const double v = std::trunc(x + 1e-9);
  if (v >= double(std::numeric_limits<int32_t>::max())) return std::numeric_limits<int32_t>::max();
  if (v <= 0) return 0;
  return int32_t(v);
}

std::string DeviceType(const std::string& nvml_name) {
  if (nvml_name.starts_with("NVIDIA")) return nvml_name;
  return "NVIDIA-" + nvml_name;
}

std::string Describe(const inventory::Device& d) {
  std::string s = "GPU " + std::to_string(d.index);
  if (!d.uuid.empty()) s += " (" + d.uuid + ")";
  return s;
}

bool Excluded(const DeviceOptions& o, const inventory::Device& d) {
  return std::find(o.exclude_uuids.begin(), o.exclude_uuids.end(), d.uuid) !=
             o.exclude_uuids.end() ||
         std::find(o.exclude_indices.begin(), o.exclude_indices.end(), d.index) !=
             o.exclude_indices.end();
}

Status CheckScaling(double v, const char* key) {
  if (std::isfinite(v) && v > 0) return OkStatus();
  return Error(ErrorCode::kInvalidArgument,
               std::string(key) + ": " + std::to_string(v) + " is not a number > 0");
}

}  // namespace

Status ValidateDeviceOptions(const DeviceOptions& o) {
  if (o.split_count < 1 || o.split_count > 1024) {
    return Error(ErrorCode::kInvalidArgument,
                 "deviceSplitCount: " + std::to_string(o.split_count) + " is not in 1..1024");
  }
  HAMI_TRY(CheckScaling(o.memory_scaling, "deviceMemoryScaling"));
  HAMI_TRY(CheckScaling(o.core_scaling, "deviceCoreScaling"));
  if (o.pre_configured_memory_mib < 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "preConfiguredDeviceMemory: " + std::to_string(o.pre_configured_memory_mib) +
                     " is negative");
  }
  if (o.mode != kModeHamiCore && o.mode != kModeMig) {
    return Error(ErrorCode::kInvalidArgument,
                 "operatingmode: '" + o.mode + "' is not one of hami-core, mig");
  }
  return OkStatus();
}

std::string ReplicaId(std::string_view uuid, int replica) {
  return std::string(uuid) + "-" + std::to_string(replica);
}

DeviceView ComputeDevices(const inventory::Inventory& inventory, const DeviceOptions& o,
                          const HealthMap& health) {
  DeviceView view;
  const bool mig = o.mode == kModeMig;
  for (const inventory::Device& d : inventory.devices) {
    if (d.uuid.empty()) {
      view.skipped.push_back(Describe(d) + ": no UUID (" +
                             (d.health_reason.empty() ? "not reported" : d.health_reason) + ")");
      continue;
    }
    if (Excluded(o, d)) {
      view.skipped.push_back(Describe(d) + ": excluded by filterdevices");
      continue;
    }
    int64_t memory_mib = int64_t(d.memory_bytes >> 20);
    if (d.memory_bytes == 0) {
      if (o.pre_configured_memory_mib <= 0) {
        view.skipped.push_back(Describe(d) +
                               ": NVML reports no memory size and preConfiguredDeviceMemory is "
                               "not set (set it to the GPU's memory in MiB)");
        continue;
      }
      memory_mib = o.pre_configured_memory_mib;
    }
    bool healthy = d.healthy;
    if (auto it = health.find(d.uuid); it != health.end()) healthy = healthy && it->second;

    kube::NodeDevice n;
    n.id = d.uuid;
    n.index = d.index;
    n.count = o.split_count;
    n.devmem_mib = mig ? TruncateToInt32(double(memory_mib))
                       : TruncateToInt32(double(memory_mib) * o.memory_scaling);
    n.devcore = mig ? 100 : TruncateToInt32(100 * o.core_scaling);
    n.type = DeviceType(d.name);
    n.numa = d.numa_node >= 0 ? d.numa_node : 0;
    n.mode = o.mode;
    n.health = healthy;
    view.node_devices.push_back(std::move(n));

    const int numa = o.enable_numa_topology && d.numa_node >= 0 ? d.numa_node : -1;
    for (int i = 0; i < o.split_count; ++i) {
      view.replicas.push_back({ReplicaId(d.uuid, i), healthy, numa});
    }
  }
  return view;
}

}  // namespace hami::plugin
