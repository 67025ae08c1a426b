// CriClient: the kubelet's side of the Container Runtime Interface v1 (sim/cri/api.proto),
// over gRPC on the runtime's Unix socket. Typed wrappers for the calls the simulated nodes
// make; each call has a deadline (the client's call timeout, plus the command's own timeout
// for ExecSync).
//
// Errors: a failed call is an Error naming the call, its subject and the runtime's message,
// with the gRPC code: "CRI CreateContainer (pod 4f2e…, container main): failed to get image
// \"hami.local/sim/none:1\": not found (gRPC NOT_FOUND)". NOT_FOUND maps to kNotFound,
// DEADLINE_EXCEEDED to kTimeout, UNAVAILABLE to kUnavailable, INVALID_ARGUMENT to
// kInvalidArgument, ALREADY_EXISTS to kConflict, anything else to kIo. ImageStatus of an image
// the runtime does not have (an OK answer without an image) is kNotFound naming the image.
//
// Thread safety: every method may be called from any number of threads at once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "sim/cri/api.grpc.pb.h"

namespace hami::sim::cri {

namespace v1 = ::runtime::v1;

// The kubelet's default --runtime-request-timeout.
inline constexpr int64_t kDefaultCallTimeoutMs = 120'000;

class CriClient {
 public:
  // Connects lazily: the first call dials `socket_path`.
  explicit CriClient(const std::string& socket_path,
                     int64_t call_timeout_ms = kDefaultCallTimeoutMs);

  const std::string& socket_path() const { return socket_path_; }

  // Version, with its own deadline; `wait_for_ready`: wait (until the deadline) for the
  // socket to accept instead of failing at once.
  Result<v1::VersionResponse> Version(int64_t timeout_ms, bool wait_for_ready = false);
  // CRI Status (named for what it returns: the runtime's conditions).
  Result<v1::StatusResponse> RuntimeStatus(bool verbose = false);

  // Returns the sandbox's ID.
  Result<std::string> RunPodSandbox(const v1::PodSandboxConfig& config,
                                    const std::string& runtime_handler = "");
  Status StopPodSandbox(const std::string& sandbox_id);
  Status RemovePodSandbox(const std::string& sandbox_id);
  Result<v1::PodSandboxStatusResponse> PodSandboxStatus(const std::string& sandbox_id,
                                                        bool verbose = false);
  Result<std::vector<v1::PodSandbox>> ListPodSandbox(const v1::PodSandboxFilter& filter = {});

  // Returns the container's ID.
  Result<std::string> CreateContainer(const std::string& sandbox_id,
                                      const v1::ContainerConfig& config,
                                      const v1::PodSandboxConfig& sandbox_config);
  Status StartContainer(const std::string& container_id);
  // SIGTERM, then SIGKILL after `timeout_s` seconds (the pod's grace period).
  Status StopContainer(const std::string& container_id, int64_t timeout_s);
  Status RemoveContainer(const std::string& container_id);
  Result<std::vector<v1::Container>> ListContainers(const v1::ContainerFilter& filter = {});
  Result<v1::ContainerStatusResponse> ContainerStatus(const std::string& container_id,
                                                      bool verbose = false);
  // The host PID of a running container's first process, from ContainerStatus's verbose
  // info ("pid" in the JSON under "info"). kNotFound when the container is not running.
  Result<pid_t> ContainerPid(const std::string& container_id);
  // Runs `cmd` in the running container; the call waits `timeout_s` seconds (0: no limit
  // beyond the call timeout) plus the call timeout.
  Result<v1::ExecSyncResponse> ExecSync(const std::string& container_id,
                                        const std::vector<std::string>& cmd, int64_t timeout_s);
  // Prepares a streaming exec of `request.cmd` in the running container: the URL of the
  // runtime's streaming server that runs it (single use; containerd's expires after a minute).
  Result<std::string> Exec(const v1::ExecRequest& request);

  Result<std::vector<v1::Image>> ListImages();
  Result<v1::Image> ImageStatus(const std::string& image);

 private:
  std::string socket_path_;
  int64_t call_timeout_ms_;
  std::unique_ptr<v1::RuntimeService::Stub> runtime_;
  std::unique_ptr<v1::ImageService::Stub> images_;
};

// The one conversion from a failed gRPC status to the project's Error: "CRI <call>
// (<subject>): <message> (gRPC <CODE>)"; `subject` may be empty.
Error CriError(std::string_view call, std::string_view subject, const grpc::Status& status);

}  // namespace hami::sim::cri
