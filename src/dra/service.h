// The kubelet plugin's gRPC side: the DRA service (k8s.io/kubelet/pkg/apis/dra v1 and v1beta1,
// the same two RPCs; v1beta1 lacks Device.share_id), the device-health service
// (v1alpha1.DRAResourceHealth, research/dra.md §5.4), the registration service
// (pluginregistration.Registration, research/dra.md §5.1) and a gRPC server on one Unix socket.
// Everything else in src/dra speaks driver.h and never sees protobuf.
//
// Registration: GetInfo answers {type "DRAPlugin", name <driver>, endpoint <dra.sock>,
// supported_versions ["v1.DRAPlugin", "v1beta1.DRAPlugin"] (the kubelet takes the first it
// knows), then "v1alpha1.DRAResourceHealth" when the health service is served};
// NotifyRegistrationStatus records what the kubelet said and logs a refusal. DRA:
// NodePrepareResources / NodeUnprepareResources answer one entry per claim of the request, keyed by
// claim UID, with the claim's error in the entry; the RPC itself fails only on a request the driver
// cannot read (a claim without a UID: INVALID_ARGUMENT), since a non-OK status makes the kubelet
// drop the whole answer. Health: NodeWatchResources sends the complete device list at once, then
// again after every HealthService::Set (each message must be the driver's complete list); a stream
// ends when the client goes away (noticed at the next write, or within kStreamCancelCheck while
// there is nothing to write) and when EndStreams is called (SocketServer::Stop calls it before
// shutting down, so that no open stream holds a shutdown up).
//
// Thread safety: the services are called by gRPC's threads; the Driver serializes its calls.
// Lifetime: the Driver outlives the services, the services every server they are registered
// with.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/unix_grpc_server.h"
#include "dra/driver.h"
#include "draapi/dra_health_v1alpha1.grpc.pb.h"
#include "draapi/dra_v1.grpc.pb.h"
#include "draapi/dra_v1beta1.grpc.pb.h"
#include "draapi/registration.grpc.pb.h"

namespace hami::dra {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

inline constexpr char kPluginType[] = "DRAPlugin";
inline constexpr char kV1Service[] = "v1.DRAPlugin";
inline constexpr char kV1beta1Service[] = "v1beta1.DRAPlugin";
inline constexpr char kHealthService[] = "v1alpha1.DRAResourceHealth";
// The kubelet's directories (no trailing slash).
inline constexpr char kDefaultRegistryDir[] = "/var/lib/kubelet/plugins_registry";
inline constexpr char kDefaultPluginsDir[] = "/var/lib/kubelet/plugins";
inline constexpr char kDraSocketName[] = "dra.sock";

// "<driver>-reg.sock": the registration socket's name in the plugins_registry directory.
std::string RegistrationSocketName(std::string_view driver);

// ---- conversions (pure) ----
std::vector<ClaimRef> FromProto(const google::protobuf::RepeatedPtrField<drav1::Claim>& claims);
std::vector<ClaimRef> FromProto(
    const google::protobuf::RepeatedPtrField<drav1beta1::Claim>& claims);
drav1::NodePrepareResourcesResponse ToV1(const std::map<std::string, PrepareAnswer>& answers);
drav1beta1::NodePrepareResourcesResponse ToV1beta1(
    const std::map<std::string, PrepareAnswer>& answers);

class DraV1Service final : public drav1::DRAPlugin::Service {
 public:
  explicit DraV1Service(Driver& driver) : driver_(driver) {}
  grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                    const drav1::NodePrepareResourcesRequest* request,
                                    drav1::NodePrepareResourcesResponse* response) override;
  grpc::Status NodeUnprepareResources(grpc::ServerContext* context,
                                      const drav1::NodeUnprepareResourcesRequest* request,
                                      drav1::NodeUnprepareResourcesResponse* response) override;

 private:
  Driver& driver_;
};

class DraV1beta1Service final : public drav1beta1::DRAPlugin::Service {
 public:
  explicit DraV1beta1Service(Driver& driver) : driver_(driver) {}
  grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                    const drav1beta1::NodePrepareResourcesRequest* request,
                                    drav1beta1::NodePrepareResourcesResponse* response) override;
  grpc::Status NodeUnprepareResources(
      grpc::ServerContext* context, const drav1beta1::NodeUnprepareResourcesRequest* request,
      drav1beta1::NodeUnprepareResourcesResponse* response) override;

 private:
  Driver& driver_;
};

// One device's health as the kubelet's health stream carries it.
struct DeviceHealth {
  std::string pool;
  std::string device;
  bool healthy = true;
  std::string message;         // why not healthy; cut to 1024 bytes on the wire
  int64_t last_updated_s = 0;  // unix seconds of the last change

  friend bool operator==(const DeviceHealth&, const DeviceHealth&) = default;
};

// How often a health stream with nothing to send looks whether its client went away.
inline constexpr std::chrono::milliseconds kStreamCancelCheck{500};

class HealthService final : public ::v1alpha1::DRAResourceHealth::Service {
 public:
  explicit HealthService(std::vector<DeviceHealth> devices);
  ~HealthService() override;
  // Replaces the list and sends it on every open stream.
  void Set(std::vector<DeviceHealth> devices);
  std::vector<DeviceHealth> devices() const;
  // Ends every stream open now and refuses new ones until AcceptStreams.
  void EndStreams();
  void AcceptStreams();
  uint64_t open_streams() const;

  grpc::Status NodeWatchResources(
      grpc::ServerContext* context, const ::v1alpha1::NodeWatchResourcesRequest* request,
      grpc::ServerWriter<::v1alpha1::NodeWatchResourcesResponse>* writer) override;

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<DeviceHealth> devices_;  // guarded by mu_
  uint64_t version_ = 1;               // guarded by mu_: bumped by Set
  bool ending_ = false;                // guarded by mu_: from EndStreams to AcceptStreams
  uint64_t open_ = 0;                  // guarded by mu_
};

// The health stream's message for `devices`.
::v1alpha1::NodeWatchResourcesResponse ToHealthResponse(const std::vector<DeviceHealth>& devices);

enum class Health { kNotServed, kServed };

struct RegistrationState {
  bool notified = false;    // NotifyRegistrationStatus was called
  bool registered = false;  // and said plugin_registered
  std::string error;        // the kubelet's error when it refused
};

class RegistrationService final : public ::pluginregistration::Registration::Service {
 public:
  // `log`: nullptr logs to stderr.
  RegistrationService(std::string driver, std::string endpoint, Health health,
                      std::function<void(std::string_view)> log = {});
  grpc::Status GetInfo(grpc::ServerContext* context,
                       const ::pluginregistration::InfoRequest* request,
                       ::pluginregistration::PluginInfo* response) override;
  grpc::Status NotifyRegistrationStatus(
      grpc::ServerContext* context, const ::pluginregistration::RegistrationStatus* request,
      ::pluginregistration::RegistrationStatusResponse* response) override;
  RegistrationState state() const;

 private:
  const std::string driver_;
  const std::string endpoint_;
  const Health health_;
  const std::function<void(std::string_view)> log_;
  mutable std::mutex mu_;
  RegistrationState state_;  // guarded by mu_
};

// A gRPC server on one Unix socket (common/unix_grpc_server.h): a stale socket at the path is
// removed first, anything else there is refused; Stop() runs `before_shutdown` (a
// HealthService's EndStreams), shuts down with a deadline and removes the socket while it is
// still the one this server bound.
using SocketServer = UnixGrpcServer;

}  // namespace hami::dra
