// The device plugin's values, in plain C++: what the kubelet's device-plugin API v1beta1
// carries (pkg/apis/deviceplugin/v1beta1/api.proto), without gRPC. The Allocate logic and the
// inventory and health code speak these types; only the gRPC service (api.h) converts them to
// and from protobuf messages, so everything else is tested without a server.
//
// Thread safety: value types.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace hami::plugin {

// The resource the plugin advertises and the kubelet allocates replicas of.
inline constexpr char kDefaultResourceName[] = "nvidia.com/gpu";

// One schedulable unit the kubelet sees (v1beta1 Device): a replica of a GPU, named
// "<GPU-UUID>-<i>" for i in 0..deviceSplitCount-1.
struct ReplicaDevice {
  std::string id;       // "GPU-8f6b...-3"
  bool healthy = true;  // "Healthy" / "Unhealthy" on the wire
  int numa_node = -1;   // TopologyInfo.nodes[0].ID; -1: no topology sent

  friend bool operator==(const ReplicaDevice&, const ReplicaDevice&) = default;
};

// v1beta1 Mount.
struct Mount {
  std::string container_path;
  std::string host_path;
  bool read_only = false;

  friend bool operator==(const Mount&, const Mount&) = default;
};

// v1beta1 DeviceSpec (a device node made available in the container).
struct DeviceNode {
  std::string container_path;
  std::string host_path;
  std::string permissions;  // "rw", "rwm", ...

  friend bool operator==(const DeviceNode&, const DeviceNode&) = default;
};

// v1beta1 ContainerAllocateRequest: the replica IDs the kubelet chose for one container.
struct ContainerRequest {
  std::vector<std::string> device_ids;
};

// v1beta1 ContainerAllocateResponse. `mounts` keeps its order: a runtime applies mounts in the
// order listed, so a parent directory must come before a mount nested in it (seed 000).
struct ContainerResponse {
  std::map<std::string, std::string> envs;
  std::vector<Mount> mounts;
  std::vector<DeviceNode> devices;
  std::map<std::string, std::string> annotations;

  friend bool operator==(const ContainerResponse&, const ContainerResponse&) = default;
};

// v1beta1 ContainerPreferredAllocationRequest.
struct PreferredRequest {
  std::vector<std::string> available_device_ids;
  std::vector<std::string> must_include_device_ids;
  int allocation_size = 0;
};

// The plugin's answers, as the gRPC service calls them. An error becomes the RPC's status
// (its message is what `kubectl describe pod` shows in the kubelet's event).
using AllocateFn =
    std::function<Result<std::vector<ContainerResponse>>(const std::vector<ContainerRequest>&)>;
using PreferFn = std::function<Result<std::vector<std::vector<std::string>>>(
    const std::vector<PreferredRequest>&)>;

}  // namespace hami::plugin
