#include "plugin/api.h"

#include <chrono>
#include <exception>
#include <utility>

namespace hami::plugin {

// ---- conversions ----

namespace {

// ToProto of each of `items`, appended to a repeated message field.
template <typename Repeated, typename T>
void AddEach(Repeated* field, const std::vector<T>& items) {
  for (const T& item : items) *field->Add() = ToProto(item);
}

// FromProto of each element of a repeated message field.
template <typename T, typename Repeated>
std::vector<T> FromEach(const Repeated& items) {
  std::vector<T> out;
  out.reserve(size_t(items.size()));
  for (const auto& item : items) out.push_back(FromProto(item));
  return out;
}

}  // namespace

v1beta1::Device ToProto(const ReplicaDevice& device) {
  v1beta1::Device out;
  out.set_id(device.id);
  out.set_health(device.healthy ? kHealthy : kUnhealthy);
  if (device.numa_node >= 0) out.mutable_topology()->add_nodes()->set_id(device.numa_node);
  return out;
}

ReplicaDevice FromProto(const v1beta1::Device& device) {
  ReplicaDevice out;
  out.id = device.id();
  out.healthy = device.health() == kHealthy;
  if (device.has_topology() && device.topology().nodes_size() > 0) {
    out.numa_node = int(device.topology().nodes(0).id());
  }
  return out;
}

v1beta1::ListAndWatchResponse ToListAndWatchResponse(const std::vector<ReplicaDevice>& devices) {
  v1beta1::ListAndWatchResponse out;
  AddEach(out.mutable_devices(), devices);
  return out;
}

std::vector<ReplicaDevice> FromProto(const v1beta1::ListAndWatchResponse& response) {
  return FromEach<ReplicaDevice>(response.devices());
}

v1beta1::ContainerAllocateRequest ToProto(const ContainerRequest& request) {
  v1beta1::ContainerAllocateRequest out;
  for (const std::string& id : request.device_ids) out.add_devices_ids(id);
  return out;
}

ContainerRequest FromProto(const v1beta1::ContainerAllocateRequest& request) {
  return ContainerRequest{{request.devices_ids().begin(), request.devices_ids().end()}};
}

v1beta1::AllocateRequest ToAllocateRequest(const std::vector<ContainerRequest>& containers) {
  v1beta1::AllocateRequest out;
  AddEach(out.mutable_container_requests(), containers);
  return out;
}

std::vector<ContainerRequest> FromProto(const v1beta1::AllocateRequest& request) {
  return FromEach<ContainerRequest>(request.container_requests());
}

v1beta1::ContainerAllocateResponse ToProto(const ContainerResponse& response) {
  v1beta1::ContainerAllocateResponse out;
  for (const auto& [k, v] : response.envs) (*out.mutable_envs())[k] = v;
  for (const Mount& m : response.mounts) {
    v1beta1::Mount* pm = out.add_mounts();
    pm->set_container_path(m.container_path);
    pm->set_host_path(m.host_path);
    pm->set_read_only(m.read_only);
  }
  for (const DeviceNode& d : response.devices) {
    v1beta1::DeviceSpec* pd = out.add_devices();
    pd->set_container_path(d.container_path);
    pd->set_host_path(d.host_path);
    pd->set_permissions(d.permissions);
  }
  for (const auto& [k, v] : response.annotations) (*out.mutable_annotations())[k] = v;
  return out;
}

ContainerResponse FromProto(const v1beta1::ContainerAllocateResponse& response) {
  ContainerResponse out;
  out.envs.insert(response.envs().begin(), response.envs().end());
  for (const v1beta1::Mount& m : response.mounts()) {
    out.mounts.push_back(Mount{m.container_path(), m.host_path(), m.read_only()});
  }
  for (const v1beta1::DeviceSpec& d : response.devices()) {
    out.devices.push_back(DeviceNode{d.container_path(), d.host_path(), d.permissions()});
  }
  out.annotations.insert(response.annotations().begin(), response.annotations().end());
  return out;
}

v1beta1::AllocateResponse ToAllocateResponse(const std::vector<ContainerResponse>& containers) {
  v1beta1::AllocateResponse out;
  AddEach(out.mutable_container_responses(), containers);
  return out;
}

std::vector<ContainerResponse> FromProto(const v1beta1::AllocateResponse& response) {
  return FromEach<ContainerResponse>(response.container_responses());
}

v1beta1::ContainerPreferredAllocationRequest ToProto(const PreferredRequest& request) {
  v1beta1::ContainerPreferredAllocationRequest out;
  for (const std::string& id : request.available_device_ids) out.add_available_deviceids(id);
  for (const std::string& id : request.must_include_device_ids) out.add_must_include_deviceids(id);
  out.set_allocation_size(request.allocation_size);
  return out;
}

PreferredRequest FromProto(const v1beta1::ContainerPreferredAllocationRequest& request) {
  PreferredRequest out;
  out.available_device_ids.assign(request.available_deviceids().begin(),
                                  request.available_deviceids().end());
  out.must_include_device_ids.assign(request.must_include_deviceids().begin(),
                                     request.must_include_deviceids().end());
  out.allocation_size = request.allocation_size();
  return out;
}

v1beta1::PreferredAllocationRequest ToPreferredAllocationRequest(
    const std::vector<PreferredRequest>& containers) {
  v1beta1::PreferredAllocationRequest out;
  AddEach(out.mutable_container_requests(), containers);
  return out;
}

std::vector<PreferredRequest> FromProto(const v1beta1::PreferredAllocationRequest& request) {
  return FromEach<PreferredRequest>(request.container_requests());
}

v1beta1::PreferredAllocationResponse ToPreferredAllocationResponse(
    const std::vector<std::vector<std::string>>& device_ids) {
  v1beta1::PreferredAllocationResponse out;
  for (const auto& ids : device_ids) {
    v1beta1::ContainerPreferredAllocationResponse* c = out.add_container_responses();
    for (const std::string& id : ids) c->add_deviceids(id);
  }
  return out;
}

std::vector<std::vector<std::string>> FromProto(
    const v1beta1::PreferredAllocationResponse& response) {
  std::vector<std::vector<std::string>> out;
  out.reserve(size_t(response.container_responses_size()));
  for (const auto& c : response.container_responses()) {
    out.emplace_back(c.deviceids().begin(), c.deviceids().end());
  }
  return out;
}

// ---- status ----

grpc::Status ToGrpcStatus(const Error& error) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (error.code()) {
    case ErrorCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case ErrorCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case ErrorCode::kPermission:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case ErrorCode::kConflict:
    case ErrorCode::kExpired:
      code = grpc::StatusCode::ABORTED;
      break;
    case ErrorCode::kBusy:
    case ErrorCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case ErrorCode::kTimeout:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case ErrorCode::kIncompatible:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case ErrorCode::kUnsupported:
      code = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case ErrorCode::kCorrupt:
      code = grpc::StatusCode::DATA_LOSS;
      break;
    case ErrorCode::kIo:
    case ErrorCode::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, error.message());
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN_CODE";
  }
}

Error FromGrpcStatus(const grpc::Status& status, std::string_view what) {
  ErrorCode code = ErrorCode::kInternal;
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      code = ErrorCode::kInvalidArgument;
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = ErrorCode::kNotFound;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      code = ErrorCode::kPermission;
      break;
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::ALREADY_EXISTS:
      code = ErrorCode::kConflict;
      break;
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
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
    default:
      break;
  }
  std::string message(what);
  message += ": ";
  message += status.error_message();
  message += " (gRPC ";
  message += StatusCodeName(status.error_code());
  message += ")";
  return Error(code, std::move(message));
}

// ---- counters ----

const char* RpcName(Rpc rpc) {
  switch (rpc) {
#define HAMI_PLUGIN_RPC_NAME(e, label) \
  case Rpc::e:                         \
    return #label;
    HAMI_PLUGIN_RPCS(HAMI_PLUGIN_RPC_NAME)
#undef HAMI_PLUGIN_RPC_NAME
  }
  return "unknown";
}

std::string ServiceCounters::ToKeyValues() const {
  std::string out;
  for (size_t i = 0; i < kRpcCount; ++i) {
    const char* name = RpcName(Rpc(i));
    out += name;
    out += "_calls=" + std::to_string(rpcs[i].calls) + " ";
    out += name;
    out += "_errors=" + std::to_string(rpcs[i].errors) + " ";
  }
  out += "list_and_watch_sends=" + std::to_string(list_and_watch_sends);
  out += " open_streams=" + std::to_string(open_streams);
  return out;
}

// ---- the service ----

DevicePluginService::DevicePluginService(ServiceOptions options) : options_(std::move(options)) {}

DevicePluginService::~DevicePluginService() = default;

v1beta1::DevicePluginOptions DevicePluginService::PluginOptions() const {
  v1beta1::DevicePluginOptions out;
  out.set_pre_start_required(false);
  out.set_get_preferred_allocation_available(options_.offer_preferred_allocation);
  return out;
}

void DevicePluginService::Count(Rpc rpc, bool error) {
  calls_[size_t(rpc)].fetch_add(1, std::memory_order_relaxed);
  if (error) errors_[size_t(rpc)].fetch_add(1, std::memory_order_relaxed);
}

ServiceCounters DevicePluginService::Counters() const {
  ServiceCounters out;
  for (size_t i = 0; i < kRpcCount; ++i) {
    out.rpcs[i].calls = calls_[i].load(std::memory_order_relaxed);
    out.rpcs[i].errors = errors_[i].load(std::memory_order_relaxed);
  }
  out.list_and_watch_sends = sends_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  out.open_streams = open_streams_;
  return out;
}

std::vector<ReplicaDevice> DevicePluginService::Devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_;
}

void DevicePluginService::SetDevices(std::vector<ReplicaDevice> devices) {
  v1beta1::ListAndWatchResponse message = ToListAndWatchResponse(devices);
  {
    std::lock_guard<std::mutex> lock(mu_);
    devices_ = std::move(devices);
    message_ = std::move(message);
    ++version_;
  }
  changed_.notify_all();
}

void DevicePluginService::AcceptStreams() {
  std::lock_guard<std::mutex> lock(mu_);
  refusing_ = false;
}

void DevicePluginService::RefuseStreams() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    refusing_ = true;
  }
  EndStreams();
}

void DevicePluginService::EndStreams() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++end_epoch_;
  }
  changed_.notify_all();
}

grpc::Status DevicePluginService::ListAndWatch(
    grpc::ServerContext* context, const v1beta1::Empty* /*request*/,
    grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  Count(Rpc::kListAndWatch, false);
  v1beta1::ListAndWatchResponse message;
  grpc::Status status;
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t epoch = end_epoch_;  // EndStreams() ends the stream once it passed
  uint64_t sent = 0;                  // the version last written (0: none yet)
  ++open_streams_;
  for (;;) {
    if (epoch < end_epoch_ || refusing_) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the device plugin is stopping");
      break;
    }
    if (context->IsCancelled()) {
      status = grpc::Status(grpc::StatusCode::CANCELLED, "ListAndWatch cancelled");
      break;
    }
    if (sent == version_) {
      changed_.wait_for(lock, kStreamCancelCheck);
      continue;
    }
    message = message_;
    sent = version_;
    lock.unlock();
    sends_.fetch_add(1, std::memory_order_relaxed);
    const bool written = writer->Write(message);
    lock.lock();
    if (!written) {
      errors_[size_t(Rpc::kListAndWatch)].fetch_add(1, std::memory_order_relaxed);
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "ListAndWatch: the client went away");
      break;
    }
  }
  --open_streams_;
  return status;
}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext* /*context*/,
                                                         const v1beta1::Empty* /*request*/,
                                                         v1beta1::DevicePluginOptions* response) {
  Count(Rpc::kGetDevicePluginOptions, false);
  *response = PluginOptions();
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::GetPreferredAllocation(
    grpc::ServerContext* /*context*/, const v1beta1::PreferredAllocationRequest* request,
    v1beta1::PreferredAllocationResponse* response) {
  auto fail = [&](grpc::Status status) {
    Count(Rpc::kGetPreferredAllocation, true);
    return status;
  };
  if (!options_.offer_preferred_allocation) {
    return fail(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                             "GetPreferredAllocation is not offered by this device plugin "
                             "(get_preferred_allocation_available is false)"));
  }
  if (!options_.prefer) {
    return fail(grpc::Status(grpc::StatusCode::INTERNAL,
                             "GetPreferredAllocation: the plugin has no PreferFn"));
  }
  const std::vector<PreferredRequest> containers = FromProto(*request);
  Result<std::vector<std::vector<std::string>>> chosen = [&] {
    try {
      return options_.prefer(containers);
    } catch (const std::exception& e) {
      return Result<std::vector<std::vector<std::string>>>(
          Error(ErrorCode::kInternal, std::string("GetPreferredAllocation threw: ") + e.what()));
    }
  }();
  if (!chosen.ok()) return fail(ToGrpcStatus(chosen.error()));
  if (chosen->size() != containers.size()) {
    return fail(grpc::Status(grpc::StatusCode::INTERNAL,
                             "GetPreferredAllocation answered " + std::to_string(chosen->size()) +
                                 " containers for " + std::to_string(containers.size()) +
                                 " requested"));
  }
  *response = ToPreferredAllocationResponse(*chosen);
  Count(Rpc::kGetPreferredAllocation, false);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext* /*context*/,
                                           const v1beta1::AllocateRequest* request,
                                           v1beta1::AllocateResponse* response) {
  auto fail = [&](grpc::Status status) {
    Count(Rpc::kAllocate, true);
    return status;
  };
  if (!options_.allocate) {
    return fail(grpc::Status(grpc::StatusCode::INTERNAL, "Allocate: the plugin has no AllocateFn"));
  }
  const std::vector<ContainerRequest> containers = FromProto(*request);
  Result<std::vector<ContainerResponse>> answer = [&] {
    try {
      return options_.allocate(containers);
    } catch (const std::exception& e) {
      return Result<std::vector<ContainerResponse>>(
          Error(ErrorCode::kInternal, std::string("Allocate threw: ") + e.what()));
    }
  }();
  if (!answer.ok()) return fail(ToGrpcStatus(answer.error()));
  if (answer->size() != containers.size()) {
    return fail(grpc::Status(grpc::StatusCode::INTERNAL,
                             "Allocate answered " + std::to_string(answer->size()) +
                                 " containers for " + std::to_string(containers.size()) +
                                 " requested"));
  }
  *response = ToAllocateResponse(*answer);
  Count(Rpc::kAllocate, false);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::PreStartContainer(
    grpc::ServerContext* /*context*/, const v1beta1::PreStartContainerRequest* /*request*/,
    v1beta1::PreStartContainerResponse* /*response*/) {
  Count(Rpc::kPreStartContainer, false);
  return grpc::Status::OK;
}

// ---- UnixServer ----

std::string UnixTarget(std::string_view socket_path) { return UnixGrpcTarget(socket_path); }

std::shared_ptr<grpc::Channel> UnixChannel(std::string_view socket_path) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(UnixTarget(socket_path), grpc::InsecureChannelCredentials(),
                                   args);
}

Result<std::unique_ptr<UnixServer>> ServeDevicePlugin(const std::string& socket_path,
                                                      DevicePluginService* service) {
  service->AcceptStreams();
  return UnixServer::Start(socket_path, {service}, [service] { service->RefuseStreams(); });
}

}  // namespace hami::plugin
