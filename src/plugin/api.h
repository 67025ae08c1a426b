// The kubelet device-plugin API v1beta1 over gRPC: conversions between its protobuf messages
// (kubeletapi/api.proto) and the plain values of plugin/types.h, the one conversion between
// the project's Error and grpc::Status, the DevicePlugin service, and a gRPC server on one
// Unix socket. Everything else in the plugin speaks types.h and never sees protobuf.
//
// The service:
//   - GetDevicePluginOptions answers PluginOptions(): pre_start_required false,
//     get_preferred_allocation_available as ServiceOptions says;
//   - ListAndWatch sends the whole device list at once, then the whole list again after every
//     SetDevices() (a health change, a device gone); a stream that is behind by several
//     SetDevices() calls gets only the newest list. A stream ends when EndStreams() is called,
//     when the server shuts down (no stream delays a shutdown beyond the server's deadline,
//     UnixServer::Stop), and when the client goes away: at the next write, or within
//     kStreamCancelCheck while there is nothing to write;
//   - GetPreferredAllocation calls PreferFn (UNIMPLEMENTED when preferred allocation is not
//     offered); Allocate calls AllocateFn; each Error becomes the RPC's status through
//     ToGrpcStatus, message kept (the kubelet shows it in the pod's events). An answer whose
//     container count differs from the request's is refused as INTERNAL;
//   - PreStartContainer does nothing and succeeds.
//
// Every method is synchronous, ListAndWatch included, on purpose: with gRPC 1.51, one method of
// the callback API gives the server the callback API's shared completion queue, whose threads
// wait one second for an event and then sleep 100 ms with nobody polling; the kubelet's
// connection is polled by them too, so an RPC arriving in a nap waited up to 100 ms for its
// end (GetPreferredAllocation's p99 was 86 ms in `hami bench plugin`; docs/benchmarks-plugin.md).
// The synchronous server's own threads never nap. The price: a ListAndWatch stream holds one
// of gRPC's threads while open (the kubelet opens one), and a synchronous handler learns of
// a cancellation only by asking, which a waiting stream does every kStreamCancelCheck.
//
// Thread safety: DevicePluginService is called by gRPC's threads and by the owner's; every
// public method may be called from any thread. AllocateFn and PreferFn run on gRPC's
// synchronous-handler threads, possibly several at once: they must be thread-safe.
// Lifetime: the service must outlive every grpc::Server it is registered with; it may be
// registered with one server after another (the registrar serves again after a kubelet
// restart), never with two at once.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/result.h"
#include "common/unix_grpc_server.h"
#include "kubeletapi/api.grpc.pb.h"
#include "plugin/types.h"

namespace hami::plugin {

// ---- the API's constants (pkg/apis/deviceplugin/v1beta1/constants.go) ----

inline constexpr char kApiVersion[] = "v1beta1";
inline constexpr char kHealthy[] = "Healthy";
inline constexpr char kUnhealthy[] = "Unhealthy";
// Where the kubelet and the plugins put their sockets (no trailing slash).
inline constexpr char kDevicePluginDir[] = "/var/lib/kubelet/device-plugins";
inline constexpr char kKubeletSocketName[] = "kubelet.sock";
// This plugin's socket file in that directory (RegisterRequest.endpoint).
inline constexpr char kDefaultPluginSocketName[] = "hami-nvidia.sock";

// ---- conversions (pure) ----
// FromProto(Device): health "Healthy" is healthy, anything else unhealthy; numa_node is the
// first topology node's ID, -1 without topology. ToProto(ReplicaDevice) sends topology only
// for numa_node >= 0. FromProto(ContainerAllocateResponse) drops cdi_devices (types.h has no
// CDI devices; the plugin never sends any). Maps come back ordered by key; repeated fields
// keep their order.

v1beta1::Device ToProto(const ReplicaDevice& device);
ReplicaDevice FromProto(const v1beta1::Device& device);
v1beta1::ListAndWatchResponse ToListAndWatchResponse(const std::vector<ReplicaDevice>& devices);
std::vector<ReplicaDevice> FromProto(const v1beta1::ListAndWatchResponse& response);

v1beta1::ContainerAllocateRequest ToProto(const ContainerRequest& request);
ContainerRequest FromProto(const v1beta1::ContainerAllocateRequest& request);
v1beta1::AllocateRequest ToAllocateRequest(const std::vector<ContainerRequest>& containers);
std::vector<ContainerRequest> FromProto(const v1beta1::AllocateRequest& request);

v1beta1::ContainerAllocateResponse ToProto(const ContainerResponse& response);
ContainerResponse FromProto(const v1beta1::ContainerAllocateResponse& response);
v1beta1::AllocateResponse ToAllocateResponse(const std::vector<ContainerResponse>& containers);
std::vector<ContainerResponse> FromProto(const v1beta1::AllocateResponse& response);

v1beta1::ContainerPreferredAllocationRequest ToProto(const PreferredRequest& request);
PreferredRequest FromProto(const v1beta1::ContainerPreferredAllocationRequest& request);
v1beta1::PreferredAllocationRequest ToPreferredAllocationRequest(
    const std::vector<PreferredRequest>& containers);
std::vector<PreferredRequest> FromProto(const v1beta1::PreferredAllocationRequest& request);
v1beta1::PreferredAllocationResponse ToPreferredAllocationResponse(
    const std::vector<std::vector<std::string>>& device_ids);
std::vector<std::vector<std::string>> FromProto(
    const v1beta1::PreferredAllocationResponse& response);

// The one conversion from Error to grpc::Status (message kept as it is):
//   kInvalidArgument → INVALID_ARGUMENT, kNotFound → NOT_FOUND, kPermission →
//   PERMISSION_DENIED, kConflict and kExpired → ABORTED (decide again and retry), kBusy and
//   kUnavailable → UNAVAILABLE, kTimeout → DEADLINE_EXCEEDED, kIncompatible →
//   FAILED_PRECONDITION, kUnsupported → UNIMPLEMENTED, kCorrupt → DATA_LOSS, kIo and
//   kInternal → INTERNAL.
grpc::Status ToGrpcStatus(const Error& error);
// And back, for clients: "<what>: <message> (gRPC <CODE>)", with the code mapped the other way
// (CANCELLED → kUnavailable, UNKNOWN and the rest → kInternal).
Error FromGrpcStatus(const grpc::Status& status, std::string_view what);
// "INVALID_ARGUMENT", "UNAVAILABLE", ...
const char* StatusCodeName(grpc::StatusCode code);

// ---- the DevicePlugin service ----

// How often a ListAndWatch stream with nothing to send looks whether its client went away.
inline constexpr std::chrono::milliseconds kStreamCancelCheck{500};

// NOTE: every RPC of the service, in one list: X(enumerator, label). The counters, their
// names and their key=value rendering are expanded from it.
#define HAMI_PLUGIN_RPCS(X)                             \
  X(kGetDevicePluginOptions, get_device_plugin_options) \
  X(kListAndWatch, list_and_watch)                      \
  X(kGetPreferredAllocation, get_preferred_allocation)  \
  X(kAllocate, allocate)                                \
  X(kPreStartContainer, pre_start_container)

enum class Rpc : uint8_t {
#define HAMI_PLUGIN_RPC_ENUM(e, label) e,
  HAMI_PLUGIN_RPCS(HAMI_PLUGIN_RPC_ENUM)
#undef HAMI_PLUGIN_RPC_ENUM
};

#define HAMI_PLUGIN_RPC_ONE(e, label) 1,
inline constexpr size_t kRpcCount =
    std::initializer_list<int>{HAMI_PLUGIN_RPCS(HAMI_PLUGIN_RPC_ONE)}.size();
#undef HAMI_PLUGIN_RPC_ONE

// "get_device_plugin_options", "allocate", ... (the label column above).
const char* RpcName(Rpc rpc);

struct RpcCounters {
  uint64_t calls = 0;
  // Calls answered with an error status. ListAndWatch: streams whose write failed (the
  // kubelet went away mid-stream); a stream ended by EndStreams or a shutdown is no error.
  uint64_t errors = 0;
};

// A snapshot (each field read with relaxed ordering: consistent per field only).
struct ServiceCounters {
  std::array<RpcCounters, kRpcCount> rpcs{};
  uint64_t list_and_watch_sends = 0;  // ListAndWatchResponse messages written
  uint64_t open_streams = 0;          // gauge: ListAndWatch streams open now

  const RpcCounters& operator[](Rpc rpc) const { return rpcs[size_t(rpc)]; }
  // "get_device_plugin_options_calls=1 get_device_plugin_options_errors=0 ...
  // list_and_watch_sends=2 open_streams=1": a structured log line, in list order.
  std::string ToKeyValues() const;
};

struct ServiceOptions {
  std::string resource_name = kDefaultResourceName;
  AllocateFn allocate;  // required
  PreferFn prefer;      // required when offer_preferred_allocation
  // GetDevicePluginOptions.get_preferred_allocation_available (config.json's
  // enablegetpreferredallocation): whether the kubelet may call GetPreferredAllocation.
  bool offer_preferred_allocation = true;
};

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  // Precondition: options.allocate is set, and options.prefer when preferred allocation is
  // offered (checked: a missing function answers INTERNAL naming it, never crashes).
  explicit DevicePluginService(ServiceOptions options);
  ~DevicePluginService() override;
  DevicePluginService(const DevicePluginService&) = delete;
  DevicePluginService& operator=(const DevicePluginService&) = delete;

  const std::string& resource_name() const { return options_.resource_name; }
  // What GetDevicePluginOptions answers and RegisterRequest.options carries.
  v1beta1::DevicePluginOptions PluginOptions() const;

  // Replaces the device list and sends it on every open ListAndWatch stream (and later to new
  // streams). Sent even when equal to the previous list (callers send on change).
  void SetDevices(std::vector<ReplicaDevice> devices);
  std::vector<ReplicaDevice> Devices() const;

  // Ends every ListAndWatch stream open now (status UNAVAILABLE "the device plugin is
  // stopping"); streams opened later work as usual.
  void EndStreams();
  // For a server's shutdown: ends the open streams and every stream opened until
  // AcceptStreams() (one a client opens while the server shuts down would otherwise hold the
  // shutdown until its deadline). ServeDevicePlugin(path, service) calls both.
  void RefuseStreams();
  void AcceptStreams();

  ServiceCounters Counters() const;

  // ---- the RPCs (called by gRPC) ----
  grpc::Status GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty* request,
                                      v1beta1::DevicePluginOptions* response) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty* request,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext* context,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override;
  grpc::Status Allocate(grpc::ServerContext* context, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;
  grpc::Status PreStartContainer(grpc::ServerContext* context,
                                 const v1beta1::PreStartContainerRequest* request,
                                 v1beta1::PreStartContainerResponse* response) override;

 private:
  void Count(Rpc rpc, bool error);

  const ServiceOptions options_;
  std::array<std::atomic<uint64_t>, kRpcCount> calls_{};
  std::array<std::atomic<uint64_t>, kRpcCount> errors_{};
  std::atomic<uint64_t> sends_{0};

  // A std::mutex rather than Mutex: the streams wait on changed_ with it.
  mutable std::mutex mu_;
  std::condition_variable changed_;        // a new list, EndStreams, RefuseStreams
  std::vector<ReplicaDevice> devices_;     // guarded by mu_
  v1beta1::ListAndWatchResponse message_;  // guarded by mu_: devices_, converted
  uint64_t version_ = 1;                   // guarded by mu_: bumped by SetDevices
  uint64_t end_epoch_ = 0;                 // guarded by mu_: bumped by EndStreams
  bool refusing_ = false;                  // guarded by mu_: from RefuseStreams until AcceptStreams
  uint64_t open_streams_ = 0;              // guarded by mu_
};

// ---- a gRPC server on one Unix socket ----

// The device plugin's gRPC server on its Unix socket (common/unix_grpc_server.h).
using UnixServer = UnixGrpcServer;

// Serves one DevicePluginService on `socket_path`: AcceptStreams() before serving,
// RefuseStreams() before the shutdown (gRPC waits for open ListAndWatch streams and tells
// them nothing).
Result<std::unique_ptr<UnixServer>> ServeDevicePlugin(const std::string& socket_path,
                                                      DevicePluginService* service);

// "unix:<path>" for grpc::CreateChannel and ServerBuilder (UnixGrpcTarget).
std::string UnixTarget(std::string_view socket_path);
// An insecure channel to a Unix socket with a subchannel pool of its own: a new channel
// connects at once instead of sharing another channel's reconnect backoff (gRPC's global
// pool would make a retry after a kubelet restart wait up to its backoff).
std::shared_ptr<grpc::Channel> UnixChannel(std::string_view socket_path);

}  // namespace hami::plugin
