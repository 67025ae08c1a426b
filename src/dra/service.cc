#include "dra/service.h"

#include <chrono>
#include <cstdio>
#include <utility>

namespace hami::dra {
namespace {

template <typename Claims>
std::vector<ClaimRef> Refs(const Claims& claims) {
  std::vector<ClaimRef> out;
  out.reserve(size_t(claims.size()));
  for (const auto& c : claims) out.push_back({c.namespace_(), c.uid(), c.name()});
  return out;
}

// A claim without a UID cannot be answered: the answer is keyed by it.
grpc::Status CheckRefs(const std::vector<ClaimRef>& refs) {
  for (const ClaimRef& r : refs) {
    if (r.uid.empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "claim " + r.ns + "/" + r.name + ": no uid");
    }
  }
  return grpc::Status::OK;
}

template <typename Response>
void FillPrepare(const std::map<std::string, PrepareAnswer>& answers, Response* out,
                 bool with_share_id) {
  for (const auto& [uid, a] : answers) {
    auto& entry = (*out->mutable_claims())[uid];
    entry.set_error(a.error);
    if (!a.error.empty()) continue;
    for (const PreparedDevice& d : a.devices) {
      auto* dev = entry.add_devices();
      for (const std::string& r : d.request_names) dev->add_request_names(r);
      dev->set_pool_name(d.pool);
      dev->set_device_name(d.device);
      for (const std::string& id : d.cdi_device_ids) dev->add_cdi_device_ids(id);
      if constexpr (requires { dev->set_share_id(std::string()); }) {
        if (with_share_id && !d.share_id.empty()) dev->set_share_id(d.share_id);
      }
    }
  }
}

template <typename Request, typename Response>
grpc::Status Prepare(Driver& driver, const Request& request, Response* response, bool share_id) {
  std::vector<ClaimRef> refs = Refs(request.claims());
  if (grpc::Status s = CheckRefs(refs); !s.ok()) return s;
  FillPrepare(driver.Prepare(refs), response, share_id);
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::Status Unprepare(Driver& driver, const Request& request, Response* response) {
  std::vector<ClaimRef> refs = Refs(request.claims());
  if (grpc::Status s = CheckRefs(refs); !s.ok()) return s;
  for (const auto& [uid, error] : driver.Unprepare(refs)) {
    (*response->mutable_claims())[uid].set_error(error);
  }
  return grpc::Status::OK;
}

}  // namespace

std::string RegistrationSocketName(std::string_view driver) {
  return std::string(driver) + "-reg.sock";
}

std::vector<ClaimRef> FromProto(const google::protobuf::RepeatedPtrField<drav1::Claim>& claims) {
  return Refs(claims);
}

std::vector<ClaimRef> FromProto(
    const google::protobuf::RepeatedPtrField<drav1beta1::Claim>& claims) {
  return Refs(claims);
}

drav1::NodePrepareResourcesResponse ToV1(const std::map<std::string, PrepareAnswer>& answers) {
  drav1::NodePrepareResourcesResponse out;
  FillPrepare(answers, &out, true);
  return out;
}

drav1beta1::NodePrepareResourcesResponse ToV1beta1(
    const std::map<std::string, PrepareAnswer>& answers) {
  drav1beta1::NodePrepareResourcesResponse out;
  FillPrepare(answers, &out, false);
  return out;
}

grpc::Status DraV1Service::NodePrepareResources(grpc::ServerContext* /*context*/,
                                                const drav1::NodePrepareResourcesRequest* request,
                                                drav1::NodePrepareResourcesResponse* response) {
  return Prepare(driver_, *request, response, true);
}

grpc::Status DraV1Service::NodeUnprepareResources(
    grpc::ServerContext* /*context*/, const drav1::NodeUnprepareResourcesRequest* request,
    drav1::NodeUnprepareResourcesResponse* response) {
  return Unprepare(driver_, *request, response);
}

grpc::Status DraV1beta1Service::NodePrepareResources(
    grpc::ServerContext* /*context*/, const drav1beta1::NodePrepareResourcesRequest* request,
    drav1beta1::NodePrepareResourcesResponse* response) {
  return Prepare(driver_, *request, response, false);
}

grpc::Status DraV1beta1Service::NodeUnprepareResources(
    grpc::ServerContext* /*context*/, const drav1beta1::NodeUnprepareResourcesRequest* request,
    drav1beta1::NodeUnprepareResourcesResponse* response) {
  return Unprepare(driver_, *request, response);
}

::v1alpha1::NodeWatchResourcesResponse ToHealthResponse(const std::vector<DeviceHealth>& devices) {
  ::v1alpha1::NodeWatchResourcesResponse out;
  for (const DeviceHealth& d : devices) {
    auto* h = out.add_devices();
    h->mutable_device()->set_pool_name(d.pool);
    h->mutable_device()->set_device_name(d.device);
    h->set_health(d.healthy ? ::v1alpha1::HEALTHY : ::v1alpha1::UNHEALTHY);
    h->set_last_updated_time(d.last_updated_s);
    h->set_message(d.message.substr(0, 1024));
  }
  return out;
}

HealthService::HealthService(std::vector<DeviceHealth> devices) : devices_(std::move(devices)) {}

HealthService::~HealthService() { EndStreams(); }

void HealthService::Set(std::vector<DeviceHealth> devices) {
  {
    std::lock_guard lock(mu_);
    devices_ = std::move(devices);
    ++version_;
  }
  changed_.notify_all();
}

std::vector<DeviceHealth> HealthService::devices() const {
  std::lock_guard lock(mu_);
  return devices_;
}

void HealthService::EndStreams() {
  {
    std::lock_guard lock(mu_);
    ending_ = true;
  }
  changed_.notify_all();
}

void HealthService::AcceptStreams() {
  std::lock_guard lock(mu_);
  ending_ = false;
}

uint64_t HealthService::open_streams() const {
  std::lock_guard lock(mu_);
  return open_;
}

grpc::Status HealthService::NodeWatchResources(
    grpc::ServerContext* context, const ::v1alpha1::NodeWatchResourcesRequest* /*request*/,
    grpc::ServerWriter<::v1alpha1::NodeWatchResourcesResponse>* writer) {
  std::unique_lock lock(mu_);
  if (ending_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the DRA plugin is stopping");
  }
  ++open_;
  uint64_t sent = 0;
  grpc::Status end = grpc::Status::OK;
  for (;;) {
    if (ending_) {
      end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the DRA plugin is stopping");
      break;
    }
    if (context->IsCancelled()) {
      end = grpc::Status::CANCELLED;
      break;
    }
    if (sent != version_) {
      ::v1alpha1::NodeWatchResourcesResponse message = ToHealthResponse(devices_);
      sent = version_;
      lock.unlock();
      const bool written = writer->Write(message);
      lock.lock();
      if (!written) {
        end = grpc::Status::CANCELLED;
        break;
      }
      continue;
    }
    changed_.wait_for(lock, kStreamCancelCheck, [&] { return ending_ || sent != version_; });
  }
  --open_;
  return end;
}

RegistrationService::RegistrationService(std::string driver, std::string endpoint, Health health,
                                         std::function<void(std::string_view)> log)
    : driver_(std::move(driver)),
      endpoint_(std::move(endpoint)),
      health_(health),
      log_(std::move(log)) {}

grpc::Status RegistrationService::GetInfo(grpc::ServerContext* /*context*/,
                                          const ::pluginregistration::InfoRequest* /*request*/,
                                          ::pluginregistration::PluginInfo* response) {
  response->set_type(kPluginType);
  response->set_name(driver_);
  response->set_endpoint(endpoint_);
  response->add_supported_versions(kV1Service);
  response->add_supported_versions(kV1beta1Service);
  if (health_ == Health::kServed) response->add_supported_versions(kHealthService);
  return grpc::Status::OK;
}

grpc::Status RegistrationService::NotifyRegistrationStatus(
    grpc::ServerContext* /*context*/, const ::pluginregistration::RegistrationStatus* request,
    ::pluginregistration::RegistrationStatusResponse* /*response*/) {
  {
    std::lock_guard lock(mu_);
    state_.notified = true;
    state_.registered = request->plugin_registered();
    state_.error = request->error();
  }
  const std::string line = request->plugin_registered()
                               ? "dra event=registered driver=" + driver_ + " endpoint=" + endpoint_
                               : "dra event=registration_refused driver=" + driver_ + " error=\"" +
                                     request->error() + "\"";
  if (log_) {
    log_(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  return grpc::Status::OK;
}

RegistrationState RegistrationService::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

}  // namespace hami::dra
