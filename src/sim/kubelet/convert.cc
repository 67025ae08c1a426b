#include "sim/kubelet/convert.h"

namespace hami::sim::kubelet {

std::vector<Device> DevicesOf(const v1beta1::ListAndWatchResponse& response) {
  std::vector<Device> out;
  out.reserve(size_t(response.devices_size()));
  for (const v1beta1::Device& d : response.devices()) {
    Device device;
    device.id = d.id();
    device.health = d.health();
    if (d.has_topology()) {
      for (const v1beta1::NUMANode& node : d.topology().nodes()) {
        device.numa_nodes.push_back(node.id());
      }
    }
    out.push_back(std::move(device));
  }
  return out;
}

v1beta1::AllocateRequest AllocateRequestOf(
    const std::vector<std::vector<std::string>>& containers) {
  v1beta1::AllocateRequest request;
  for (const std::vector<std::string>& ids : containers) {
    v1beta1::ContainerAllocateRequest* c = request.add_container_requests();
    for (const std::string& id : ids) c->add_devices_ids(id);
  }
  return request;
}

ContainerAllocation AllocationOf(const v1beta1::ContainerAllocateResponse& response) {
  ContainerAllocation out;
  out.envs.insert(response.envs().begin(), response.envs().end());
  for (const v1beta1::Mount& m : response.mounts()) {
    out.mounts.push_back({m.container_path(), m.host_path(), m.read_only()});
  }
  for (const v1beta1::DeviceSpec& d : response.devices()) {
    out.devices.push_back({d.container_path(), d.host_path(), d.permissions()});
  }
  out.annotations.insert(response.annotations().begin(), response.annotations().end());
  for (const v1beta1::CDIDevice& cdi : response.cdi_devices())
    out.cdi_devices.push_back(cdi.name());
  return out;
}

v1beta1::PreferredAllocationRequest PreferredRequestOf(
    const std::vector<PreferredRequest>& containers) {
  v1beta1::PreferredAllocationRequest request;
  for (const PreferredRequest& p : containers) {
    v1beta1::ContainerPreferredAllocationRequest* c = request.add_container_requests();
    for (const std::string& id : p.available_device_ids) c->add_available_deviceids(id);
    for (const std::string& id : p.must_include_device_ids) c->add_must_include_deviceids(id);
    c->set_allocation_size(p.allocation_size);
  }
  return request;
}

std::vector<std::vector<std::string>> PreferredIdsOf(
    const v1beta1::PreferredAllocationResponse& response) {
  std::vector<std::vector<std::string>> out;
  for (const v1beta1::ContainerPreferredAllocationResponse& c : response.container_responses()) {
    out.emplace_back(c.deviceids().begin(), c.deviceids().end());
  }
  return out;
}

Error ErrorOfStatus(const grpc::Status& status, std::string_view what) {
  ErrorCode code = ErrorCode::kInternal;
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      code = ErrorCode::kInvalidArgument;
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = ErrorCode::kNotFound;
      break;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
      code = ErrorCode::kConflict;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      code = ErrorCode::kPermission;
      break;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
      code = ErrorCode::kUnavailable;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = ErrorCode::kTimeout;
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = ErrorCode::kIncompatible;
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      code = ErrorCode::kUnsupported;
      break;
    case grpc::StatusCode::DATA_LOSS:
      code = ErrorCode::kCorrupt;
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      code = ErrorCode::kBusy;
      break;
    default:
      break;
  }
  return Error(code, std::string(what) + ": " + status.error_message() + " (gRPC " +
                         StatusCodeText(status.error_code()) + ")");
}

}  // namespace hami::sim::kubelet
