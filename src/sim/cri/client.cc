#include "sim/cri/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "sim/grpc_code.h"

namespace hami::sim::cri {

namespace {

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& path) {
  grpc::ChannelArguments args;
  // A runtime that is starting refuses the first dials: retry within tens of milliseconds,
  // not gRPC's default second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  // As the kubelet: runtime answers of up to 16 MiB (long container lists).
  args.SetMaxReceiveMessageSize(16 << 20);
  return grpc::CreateCustomChannel("unix:" + path, grpc::InsecureChannelCredentials(), args);
}

// One unary call with a deadline; the response or the converted error.
template <typename Stub, typename Request, typename Response>
Result<Response> Call(Stub* stub,
                      grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                      const Request& request, int64_t timeout_ms, std::string_view name,
                      std::string_view subject, bool wait_for_ready = false) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  ctx.set_wait_for_ready(wait_for_ready);
  Response response;
  grpc::Status s = (stub->*method)(&ctx, request, &response);
  if (!s.ok()) return CriError(name, subject, s);
  return response;
}

}  // namespace

Error CriError(std::string_view call, std::string_view subject, const grpc::Status& status) {
  ErrorCode code = ErrorCode::kIo;
  switch (status.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      code = ErrorCode::kNotFound;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = ErrorCode::kTimeout;
      break;
    case grpc::StatusCode::UNAVAILABLE:
      code = ErrorCode::kUnavailable;
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      code = ErrorCode::kInvalidArgument;
      break;
    case grpc::StatusCode::ALREADY_EXISTS:
      code = ErrorCode::kConflict;
      break;
    default:
      break;
  }
  std::string text = "CRI " + std::string(call);
  if (!subject.empty()) text += " (" + std::string(subject) + ")";
  text += ": " + status.error_message() + " (gRPC " + StatusCodeText(status.error_code()) + ")";
  return Error(code, std::move(text));
}

CriClient::CriClient(const std::string& socket_path, int64_t call_timeout_ms)
    : socket_path_(socket_path), call_timeout_ms_(call_timeout_ms) {
  std::shared_ptr<grpc::Channel> channel = UnixChannel(socket_path);
  runtime_ = v1::RuntimeService::NewStub(channel);
  images_ = v1::ImageService::NewStub(channel);
}

Result<v1::VersionResponse> CriClient::Version(int64_t timeout_ms, bool wait_for_ready) {
  v1::VersionRequest req;
  req.set_version("v1");
  return Call(runtime_.get(), &v1::RuntimeService::Stub::Version, req, timeout_ms, "Version",
              socket_path_, wait_for_ready);
}

Result<v1::StatusResponse> CriClient::RuntimeStatus(bool verbose) {
  v1::StatusRequest req;
  req.set_verbose(verbose);
  return Call(runtime_.get(), &v1::RuntimeService::Stub::Status, req, call_timeout_ms_, "Status",
              socket_path_);
}

Result<std::string> CriClient::RunPodSandbox(const v1::PodSandboxConfig& config,
                                             const std::string& runtime_handler) {
  v1::RunPodSandboxRequest req;
  *req.mutable_config() = config;
  req.set_runtime_handler(runtime_handler);
  v1::RunPodSandboxResponse r = HAMI_TRY(Call(
      runtime_.get(), &v1::RuntimeService::Stub::RunPodSandbox, req, call_timeout_ms_,
      "RunPodSandbox", "pod " + config.metadata().namespace_() + "/" + config.metadata().name()));
  return r.pod_sandbox_id();
}

Status CriClient::StopPodSandbox(const std::string& sandbox_id) {
  v1::StopPodSandboxRequest req;
  req.set_pod_sandbox_id(sandbox_id);
  HAMI_TRY(Call(runtime_.get(), &v1::RuntimeService::Stub::StopPodSandbox, req, call_timeout_ms_,
                "StopPodSandbox", sandbox_id));
  return OkStatus();
}

Status CriClient::RemovePodSandbox(const std::string& sandbox_id) {
  v1::RemovePodSandboxRequest req;
  req.set_pod_sandbox_id(sandbox_id);
  HAMI_TRY(Call(runtime_.get(), &v1::RuntimeService::Stub::RemovePodSandbox, req, call_timeout_ms_,
                "RemovePodSandbox", sandbox_id));
  return OkStatus();
}

Result<v1::PodSandboxStatusResponse> CriClient::PodSandboxStatus(const std::string& sandbox_id,
                                                                 bool verbose) {
  v1::PodSandboxStatusRequest req;
  req.set_pod_sandbox_id(sandbox_id);
  req.set_verbose(verbose);
  return Call(runtime_.get(), &v1::RuntimeService::Stub::PodSandboxStatus, req, call_timeout_ms_,
              "PodSandboxStatus", sandbox_id);
}

Result<std::vector<v1::PodSandbox>> CriClient::ListPodSandbox(const v1::PodSandboxFilter& filter) {
  v1::ListPodSandboxRequest req;
  *req.mutable_filter() = filter;
  v1::ListPodSandboxResponse r =
      HAMI_TRY(Call(runtime_.get(), &v1::RuntimeService::Stub::ListPodSandbox, req,
                    call_timeout_ms_, "ListPodSandbox", ""));
  return std::vector<v1::PodSandbox>(r.items().begin(), r.items().end());
}

Result<std::string> CriClient::CreateContainer(const std::string& sandbox_id,
                                               const v1::ContainerConfig& config,
                                               const v1::PodSandboxConfig& sandbox_config) {
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id(sandbox_id);
  *req.mutable_config() = config;
  *req.mutable_sandbox_config() = sandbox_config;
  v1::CreateContainerResponse r = HAMI_TRY(
      Call(runtime_.get(), &v1::RuntimeService::Stub::CreateContainer, req, call_timeout_ms_,
           "CreateContainer", "sandbox " + sandbox_id + ", container " + config.metadata().name()));
  return r.container_id();
}

Status CriClient::StartContainer(const std::string& container_id) {
  v1::StartContainerRequest req;
  req.set_container_id(container_id);
  HAMI_TRY(Call(runtime_.get(), &v1::RuntimeService::Stub::StartContainer, req, call_timeout_ms_,
                "StartContainer", container_id));
  return OkStatus();
}

Status CriClient::StopContainer(const std::string& container_id, int64_t timeout_s) {
  v1::StopContainerRequest req;
  req.set_container_id(container_id);
  req.set_timeout(timeout_s);
  HAMI_TRY(Call(runtime_.get(), &v1::RuntimeService::Stub::StopContainer, req,
                call_timeout_ms_ + timeout_s * 1000, "StopContainer", container_id));
  return OkStatus();
}

Status CriClient::RemoveContainer(const std::string& container_id) {
  v1::RemoveContainerRequest req;
  req.set_container_id(container_id);
  HAMI_TRY(Call(runtime_.get(), &v1::RuntimeService::Stub::RemoveContainer, req, call_timeout_ms_,
                "RemoveContainer", container_id));
  return OkStatus();
}

Result<std::vector<v1::Container>> CriClient::ListContainers(const v1::ContainerFilter& filter) {
  v1::ListContainersRequest req;
  *req.mutable_filter() = filter;
  v1::ListContainersResponse r =
      HAMI_TRY(Call(runtime_.get(), &v1::RuntimeService::Stub::ListContainers, req,
                    call_timeout_ms_, "ListContainers", ""));
  return std::vector<v1::Container>(r.containers().begin(), r.containers().end());
}

Result<v1::ContainerStatusResponse> CriClient::ContainerStatus(const std::string& container_id,
                                                               bool verbose) {
  v1::ContainerStatusRequest req;
  req.set_container_id(container_id);
  req.set_verbose(verbose);
  return Call(runtime_.get(), &v1::RuntimeService::Stub::ContainerStatus, req, call_timeout_ms_,
              "ContainerStatus", container_id);
}

Result<pid_t> CriClient::ContainerPid(const std::string& container_id) {
  v1::ContainerStatusResponse r = HAMI_TRY(ContainerStatus(container_id, true));
  const std::string what = "CRI ContainerStatus (" + container_id + ") verbose info";
  if (r.status().state() != v1::CONTAINER_RUNNING) {
    return Error(ErrorCode::kNotFound, "container " + container_id + " is not running");
  }
  auto info = r.info().find("info");
  if (info == r.info().end()) {
    return Error(ErrorCode::kIncompatible, what + ": no \"info\" entry");
  }
  nlohmann::json j = nlohmann::json::parse(info->second, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() ||
      j["pid"].get<int64_t>() <= 0) {
    return Error(ErrorCode::kIncompatible, what + ": no positive integer \"pid\"");
  }
  return pid_t(j["pid"].get<int64_t>());
}

Result<v1::ExecSyncResponse> CriClient::ExecSync(const std::string& container_id,
                                                 const std::vector<std::string>& cmd,
                                                 int64_t timeout_s) {
  v1::ExecSyncRequest req;
  req.set_container_id(container_id);
  for (const std::string& a : cmd) req.add_cmd(a);
  req.set_timeout(timeout_s);
  return Call(runtime_.get(), &v1::RuntimeService::Stub::ExecSync, req,
              call_timeout_ms_ + timeout_s * 1000, "ExecSync", container_id);
}

Result<std::string> CriClient::Exec(const v1::ExecRequest& request) {
  v1::ExecResponse r = HAMI_TRY(Call(runtime_.get(), &v1::RuntimeService::Stub::Exec, request,
                                     call_timeout_ms_, "Exec", request.container_id()));
  return r.url();
}

Result<std::vector<v1::Image>> CriClient::ListImages() {
  v1::ListImagesRequest req;
  v1::ListImagesResponse r = HAMI_TRY(Call(images_.get(), &v1::ImageService::Stub::ListImages, req,
                                           call_timeout_ms_, "ListImages", ""));
  return std::vector<v1::Image>(r.images().begin(), r.images().end());
}

Result<v1::Image> CriClient::ImageStatus(const std::string& image) {
  v1::ImageStatusRequest req;
  req.mutable_image()->set_image(image);
  v1::ImageStatusResponse r = HAMI_TRY(Call(images_.get(), &v1::ImageService::Stub::ImageStatus,
                                            req, call_timeout_ms_, "ImageStatus", image));
  if (!r.has_image()) {
    return Error(ErrorCode::kNotFound, "image " + image + " is not present on the node (CRI " +
                                           "ImageStatus from " + socket_path_ + ")");
  }
  return r.image();
}

}  // namespace hami::sim::cri
