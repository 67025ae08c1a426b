// The simulated kubelet's conversions between the device-plugin API's protobuf messages
// (kubeletapi/api.proto) and its own types (sim/kubelet/types.h), and its one reading of a
// gRPC status as an Error (its code named by sim/grpc_code.h). Pure; written apart from the
// device plugin's (plugin/api.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kubeletapi/api.pb.h"
#include "sim/grpc_code.h"
#include "sim/kubelet/types.h"

namespace hami::sim::kubelet {

// Every device of the response, in order, fields as sent.
std::vector<Device> DevicesOf(const v1beta1::ListAndWatchResponse& response);

// One ContainerAllocateRequest per element, devices_ids in the order given.
v1beta1::AllocateRequest AllocateRequestOf(const std::vector<std::vector<std::string>>& containers);
ContainerAllocation AllocationOf(const v1beta1::ContainerAllocateResponse& response);

v1beta1::PreferredAllocationRequest PreferredRequestOf(
    const std::vector<PreferredRequest>& containers);
// The deviceIDs of each container response, in order.
std::vector<std::vector<std::string>> PreferredIdsOf(
    const v1beta1::PreferredAllocationResponse& response);

// A failed call as an Error: "<what>: <message> (gRPC <CODE>)". The code: INVALID_ARGUMENT
// and OUT_OF_RANGE → kInvalidArgument, NOT_FOUND → kNotFound, ALREADY_EXISTS and ABORTED →
// kConflict, PERMISSION_DENIED and UNAUTHENTICATED → kPermission, UNAVAILABLE and CANCELLED
// → kUnavailable, DEADLINE_EXCEEDED → kTimeout, FAILED_PRECONDITION → kIncompatible,
// UNIMPLEMENTED → kUnsupported, DATA_LOSS → kCorrupt, RESOURCE_EXHAUSTED → kBusy, the rest
// → kInternal.
Error ErrorOfStatus(const grpc::Status& status, std::string_view what);

}  // namespace hami::sim::kubelet
