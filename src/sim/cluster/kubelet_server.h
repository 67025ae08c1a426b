// The simulated kubelet's HTTP server: the part of the kubelet's API (port 10250 on a node)
// that the API server calls for `kubectl exec`. One per node, on 127.0.0.1 and a free port,
// which the node publishes in its Node's status.daemonEndpoints.kubeletEndpoint.Port.
//
//   GET|POST /exec/{namespace}/{pod}/{container}         (also /exec/{ns}/{pod}/{uid}/{container})
//            ?command=ARG&command=ARG...&input=1&output=1&error=1&tty=1
//       finds the container's running CRI container (ListContainers by the labels the pod worker
//       sets: io.kubernetes.pod.namespace, io.kubernetes.pod.name, io.kubernetes.container.name,
//       and io.kubernetes.pod.uid when the path has one; the newest running one), calls CRI Exec
//       and answers 302 Found with the runtime's streaming URL in Location, as kubelets answered
//       with --redirect-container-streaming: the caller then speaks the remotecommand protocol
//       (SPDY or WebSocket) to the runtime itself. Stream flags are "1" for true, as the API
//       server sends them; tty drops stderr (it is merged into stdout), as the kubelet does.
//       Failures answer text/plain, as the kubelet's streaming.WriteError does:
//         400 `you must specify at least 1 of stdin, stdout, stderr`, `missing command`
//         404 `unknown path ...` for any other path
//         500 `container not found ("C")` when no such container runs
//         404 or 500 with the runtime's message when CRI Exec fails (404 for gRPC NOT_FOUND)
//   GET /healthz   "ok"
//
// Every exec is logged (event=exec with the pod, container and outcome).
//
// Thread safety: Start and Stop from one thread; requests are served on the server's threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sim/cri/client.h"

namespace hami::sim::cluster {

// What an /exec request asks for.
struct KubeletExecRequest {
  std::string ns, pod, uid, container;  // uid: "" when the path has none
  std::vector<std::string> command;
  bool stdin = false, stdout = false, stderr = false, tty = false;
};

// The request's path and query parameters (`command` repeated, in order) as the kubelet reads
// them, or the text/plain answer refusing it (`status` 400 or 404).
struct KubeletRefusal {
  int status = 400;
  std::string message;
};
struct KubeletParsed {
  std::optional<KubeletExecRequest> request;
  KubeletRefusal refusal;  // when request is empty
};
KubeletParsed ParseKubeletExec(std::string_view path,
                               const std::vector<std::pair<std::string, std::string>>& params);

// The CRI ID of the newest running container among `listed`, or "".
std::string PickRunningContainer(const std::vector<cri::v1::Container>& listed);

// The CRI Exec request for `r` in container `container_id`.
cri::v1::ExecRequest CriExecRequest(const KubeletExecRequest& r, const std::string& container_id);

class KubeletServer {
 public:
  // Serves on 127.0.0.1:`port` (0: a free port), calling `cri` for each exec; `cri` must outlive
  // the server (Stop it first). `node` names the node in the log.
  static Result<std::unique_ptr<KubeletServer>> Start(cri::CriClient& cri, std::string node,
                                                      int port = 0);
  ~KubeletServer();  // Stop()
  KubeletServer(const KubeletServer&) = delete;
  KubeletServer& operator=(const KubeletServer&) = delete;

  // Stops serving and waits for the requests in flight (each is one CRI call). Idempotent.
  void Stop();

  int port() const;

 private:
  struct Impl;
  explicit KubeletServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hami::sim::cluster
