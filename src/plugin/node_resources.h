// The node's GPU memory and compute as extended resources in its status, so that `kubectl
// describe node`, kube-state-metrics and autoscalers see them (device config key
// advertiseMemoryAndCores, per node advertisememoryandcores; off by default).
//
// On, the Node's status.capacity and status.allocatable both carry, under the device config's
// resource names:
//   resourceMemoryName (nvidia.com/gpumem)    the sum of devmem (MiB) of the node's healthy GPUs
//   resourceCoreName   (nvidia.com/gpucores)  the sum of their devcore (100 per GPU at scaling 1)
// devmem and devcore are hami.io/node-nvidia-register's values (devices.h), so memory and core
// scaling apply as they do to the scheduler's view; a GPU the filter leaves out counts nowhere.
// An unhealthy GPU leaves both capacity and allocatable: the kubelet rewrites every capacity
// entry into allocatable on each status update (for a resource no device plugin registered),
// so an allocatable below the capacity would not stay.
// Off, both names are removed from capacity and allocatable when the Node carries them (a
// node that published before); a Node without them is left alone.
//
// The values are plain integers ("163840", "200"), compared with the Node's by quantity, so a
// canonical form the API server chose ("1k" for 1000) is not a difference.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kube/annotations.h"

namespace hami::plugin {

enum class Advertise { kOff, kOn };

struct NodeResourceNames {
  std::string memory = "nvidia.com/gpumem";  // MiB
  std::string cores = "nvidia.com/gpucores";
};

struct NodeResourceAmounts {
  int64_t memory_mib = 0;
  int64_t cores = 0;
  friend bool operator==(const NodeResourceAmounts&, const NodeResourceAmounts&) = default;
};

// The healthy GPUs' sums.
NodeResourceAmounts AmountsOf(const std::vector<kube::NodeDevice>& devices);

// The merge patch of the Node's status subresource that makes `node` (a Node object as the API
// server returned it) carry what `advertise` asks for `devices`; nullopt when it does already.
// On: {"status": {"capacity": {memory: "<MiB>", cores: "<n>"}, "allocatable": {the same}}};
// off: the same keys with null (a merge patch's removal).
std::optional<nlohmann::json> NodeResourcesPatch(const nlohmann::json& node,
                                                 const std::vector<kube::NodeDevice>& devices,
                                                 const NodeResourceNames& names,
                                                 Advertise advertise);

}  // namespace hami::plugin
