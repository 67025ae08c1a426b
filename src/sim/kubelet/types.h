// What the simulated kubelet keeps of the device-plugin API v1beta1 (kubeletapi/api.proto), in
// plain C++: its own reading of the messages, written apart from the device plugin's
// (plugin/types.h), which this kubelet checks. A field the plugin misreads must not be
// misread the same way here.
//
// Thread safety: value types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hami::sim::kubelet {

// The API's constants, as the kubelet defines them (pkg/apis/deviceplugin/v1beta1).
inline constexpr char kApiVersion[] = "v1beta1";
inline constexpr char kHealthy[] = "Healthy";
inline constexpr char kDevicePluginDir[] = "/var/lib/kubelet/device-plugins";
inline constexpr char kKubeletSocketName[] = "kubelet.sock";

// A Device of a ListAndWatch response, as sent.
struct Device {
  std::string id;
  std::string health;               // as sent; the kubelet counts only exactly "Healthy"
  std::vector<int64_t> numa_nodes;  // topology.nodes[].ID in order; empty without topology

  bool healthy() const { return health == kHealthy; }
  friend bool operator==(const Device&, const Device&) = default;
};

// A Mount of a ContainerAllocateResponse.
struct Mount {
  std::string container_path;
  std::string host_path;
  bool read_only = false;

  friend bool operator==(const Mount&, const Mount&) = default;
};

// A DeviceSpec of a ContainerAllocateResponse.
struct DeviceSpec {
  std::string container_path;
  std::string host_path;
  std::string permissions;

  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

// A ContainerAllocateResponse: what the runtime is to give the container. `mounts` and
// `devices` keep the plugin's order (a runtime applies them in that order).
struct ContainerAllocation {
  std::map<std::string, std::string> envs;
  std::vector<Mount> mounts;
  std::vector<DeviceSpec> devices;
  std::map<std::string, std::string> annotations;
  std::vector<std::string> cdi_devices;  // fully qualified names

  friend bool operator==(const ContainerAllocation&, const ContainerAllocation&) = default;
};

// A ContainerPreferredAllocationRequest.
struct PreferredRequest {
  std::vector<std::string> available_device_ids;
  std::vector<std::string> must_include_device_ids;
  int32_t allocation_size = 0;
};

}  // namespace hami::sim::kubelet
