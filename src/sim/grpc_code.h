// The simulator's one naming of a gRPC status code, for the messages of its gRPC clients (the
// kubelet stand-in's device-manager client, the nodes' CRI client). Written apart from the
// device plugin's (plugin/api.h), which the simulator checks.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

namespace hami::sim {

// "INVALID_ARGUMENT", "UNAVAILABLE", ...; "CODE_<n>" for a number gRPC does not define.
std::string StatusCodeText(grpc::StatusCode code);

}  // namespace hami::sim
