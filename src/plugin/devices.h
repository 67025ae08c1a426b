// What the device plugin offers, computed from the device inventory (inventory/inventory.h):
// the replicas ListAndWatch sends the kubelet, and the node's entry list for
// hami.io/node-nvidia-register (kube::NodeDevice, seed 004). Pure functions of the inventory,
// the options and the health the watcher reported (health.h); no NVML, no I/O.
//
// Per GPU, as HAMi's plugin registers it:
//   id       the UUID
//   index    NVML index
//   count    split count (how many containers may share it)
//   devmem   total memory MiB x memory scaling, truncated; a GPU whose NVML memory query is
//            not supported (inventory memory_bytes 0) offers preConfiguredDeviceMemory MiB
//            instead (scaled the same way), or is left out when that is 0. MIG mode: no scaling.
//   devcore  100 x core scaling, truncated (MIG mode: 100)
//   type     the NVML name, with "NVIDIA-" in front unless it starts with "NVIDIA" already:
//            "Tesla V100-PCIE-32GB" -> "NVIDIA-Tesla V100-PCIE-32GB", "NVIDIA H100 80GB HBM3"
//            stays as it is
//   numa     the inventory's NUMA node (NVML, else sysfs); 0 when unknown
//   mode     the operating mode, "hami-core" or "mig"
//   health   the inventory's health and the watcher's, both required
// A GPU is left out (and said why in `skipped`) when the filter names its UUID or index, when
// its UUID could not be read, or for memory as above.
//
// Truncation as HAMi's Go conversions do, after adding 1e-9 so that scalings written in decimal
// (0.29 x 100) give the number written (29), not the binary fraction below it.
//
// Thread safety: pure functions on value types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "inventory/inventory.h"
#include "kube/annotations.h"
#include "plugin/types.h"

namespace hami::plugin {

inline constexpr std::string_view kModeHamiCore = "hami-core";
inline constexpr std::string_view kModeMig = "mig";

struct DeviceOptions {
  int32_t split_count = 10;                       // deviceSplitCount, >= 1
  double memory_scaling = 1;                      // deviceMemoryScaling, > 0
  double core_scaling = 1;                        // deviceCoreScaling, > 0
  int32_t pre_configured_memory_mib = 0;          // preConfiguredDeviceMemory, >= 0; 0: none
  bool enable_numa_topology = false;              // enableNumaTopology: NUMA node on the replicas
  std::string mode = std::string(kModeHamiCore);  // operatingmode: "hami-core" or "mig"
  // filterdevices: GPUs left out, by UUID or NVML index.
  std::vector<std::string> exclude_uuids;
  std::vector<int32_t> exclude_indices;
};

// kInvalidArgument naming the option and value ("deviceSplitCount: 0 is not >= 1") for a
// split count below 1 or above 1024, a scaling that is not > 0 (or not finite), a negative
// preConfiguredDeviceMemory, or a mode other than hami-core and mig.
Status ValidateDeviceOptions(const DeviceOptions& options);

// Health the watcher reported, by GPU UUID; a GPU absent from it is as healthy as the
// inventory says.
using HealthMap = inventory::HealthMap;

struct DeviceView {
  // "<UUID>-<i>" for i < split count, per offered GPU in index order, with the GPU's health
  // and, when enable_numa_topology is set and the node is known, its NUMA node (else -1).
  std::vector<ReplicaDevice> replicas;
  // One per offered GPU, in index order: the value of hami.io/node-nvidia-register is
  // kube::EncodeNodeInventory(node_devices).
  std::vector<kube::NodeDevice> node_devices;
  // Why each GPU that is not offered was left out, one line each, for the log:
  // "GPU 1 (GPU-...): excluded by filterdevices".
  std::vector<std::string> skipped;
};

// Precondition: ValidateDeviceOptions(options) passed.
DeviceView ComputeDevices(const inventory::Inventory& inventory, const DeviceOptions& options,
                          const HealthMap& health = {});

// "<uuid>-<i>".
std::string ReplicaId(std::string_view uuid, int replica);

}  // namespace hami::plugin
