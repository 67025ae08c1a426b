// pods/exec of the simulated API server: `kubectl exec` through the path a cluster takes,
// kubectl ⇄ API server ⇄ the node's kubelet ⇄ the container runtime's streaming server.
//
// A request (GET or POST .../pods/NAME/exec?command=A&command=B&container=C&stdin=true&stdout=
// true&stderr=true&tty=false) is checked as the registry checks it: the pod exists (404),
// `container` names one of its containers, init or ephemeral containers (400 `container C is
// not valid for pod P`) or, left out, the pod has exactly one container (400 `a container name
// must be specified for pod P, choose one of: [a b]`), the pod is bound (400 `pod P does not
// have a host assigned`), its node exists (404 `nodes "N" not found`), and it asks for a
// command and a stream. The kubelet is the node's status.addresses InternalIP (else Hostname)
// at status.daemonEndpoints.kubeletEndpoint.Port; the API server asks it for
// /exec/NS/POD/CONTAINER?command=..&input=1&output=1&error=1&tty=1 and follows its redirect to
// the runtime (the simulated kubelet answers 302 to containerd's streaming URL).
//
// Then, as kube-apiserver 1.30+ does:
//   WebSocket whose first protocol offered that the server speaks is v5.channel.k8s.io
//     (kubectl 1.30+): the stream translator. The server answers the upgrade itself (101,
//     Sec-WebSocket-Accept, v5.channel.k8s.io), sends the empty message on the lowest
//     requested output channel, then opens SPDY/3.1 to the runtime with
//     X-Stream-Protocol-Version v4.channel.k8s.io (containerd 1.6 refuses v5, and its WebSocket
//     protocols cannot end stdin) and relays: channel 0 → the stdin stream, the v5 close signal
//     [255, 0] → stdin's end (FIN), channel 4 → the resize stream (tty); the stdout and stderr
//     streams → channels 1 and 2; the runtime's v4 status (metav1.Status JSON; NonZeroExitCode
//     with the ExitCode cause for a non-zero exit) → channel 3, or Success when it sends none.
//     Failures after the upgrade go to channel 3 as an InternalError Status, as the
//     translator reports them: `Internal error occurred: unable to upgrade connection:
//     container not found ("C")` (the kubelet's refusal), `Internal error occurred: dial tcp
//     127.0.0.1:P: connect: connection refused (the kubelet of node "N")`. The session ends
//     with a close frame (1000); the server then waits for the client's close (at most
//     finish_timeout) before shutting the socket down, so no output in flight is lost.
//     Pings are answered with pongs.
//   any other upgrade (WebSocket v4.channel.k8s.io, channel.k8s.io, base64 variants, or
//     SPDY/3.1): the upgrade-aware proxy. The request's upgrade headers go to the kubelet and
//     on to the runtime, whose answer comes back as it is: a 101 and then the bytes both ways
//     until both sides close, or its refusal (containerd answers 403 to the protocols it does
//     not speak). A kubelet that cannot be reached is 500 `error dialing backend: ...`.
//   no upgrade: 400 `Upgrade request required`.
//
// Thread safety: the functions are pure except ServeExecSession, which uses the calling thread
// and one more for the session's life.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "sim/kube/api_status.h"

namespace hami::sim::kube {

inline constexpr char kStreamProtocolV5[] = "v5.channel.k8s.io";
inline constexpr char kStreamProtocolV4[] = "v4.channel.k8s.io";

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// The query of a pods/exec request (PodExecOptions).
struct ExecOptions {
  std::string container;             // "": the pod's only container
  std::vector<std::string> command;  // in order
  bool stdin = false, stdout = false, stderr = false, tty = false;
};

// Booleans as Go's strconv.ParseBool reads them; 400 naming a bad one; a missing command or
// no stream at all is 400.
ApiResult<ExecOptions> ParseExecOptions(const std::multimap<std::string, std::string>& params);

// The container an exec of `options` runs in, as the registry picks and checks it (see above).
ApiResult<std::string> ExecContainer(const nlohmann::json& pod, std::string_view pod_name,
                                     const std::string& requested);

struct KubeletEndpoint {
  std::string host;
  int port = 0;
};

// The node's kubelet: InternalIP, else Hostname, else ExternalIP of status.addresses, and
// status.daemonEndpoints.kubeletEndpoint.Port. An error names the node and the missing field.
Result<KubeletEndpoint> KubeletEndpointOf(const nlohmann::json& node);

// What one exec asks for, resolved against the pod and its node.
struct ExecPlan {
  std::string ns, pod, container, node;
  ExecOptions options;
  std::optional<KubeletEndpoint> kubelet;
  std::string kubelet_error;  // why there is no endpoint (reported as the dial's failure)
};

// The kubelet's request target: /exec/NS/POD/CONTAINER?command=..&input=1&output=1&error=1
// &tty=1 (flags only when true; values escaped).
std::string KubeletExecTarget(const ExecPlan& plan);

// The upgrade as the client asked for it.
struct UpgradeRequest {
  std::string method;  // GET or POST
  HeaderList headers;  // as received; names in any case, repeats kept
  // The first value of `name` (case-insensitive), "" when absent.
  std::string Header(std::string_view name) const;
  // Every value of `name`, each split at commas and trimmed.
  std::vector<std::string> Tokens(std::string_view name) const;
};

enum class ExecRoute {
  kNoUpgrade,  // not an upgrade request
  kTranslate,  // WebSocket, v5.channel.k8s.io
  kProxy,      // WebSocket with another protocol (or none), or SPDY
};
ExecRoute ChooseExecRoute(const UpgradeRequest& req);

// An HTTP/1.1 response head (status line and headers, without the blank line).
struct ResponseHead {
  int status = 0;
  HeaderList headers;
  std::string Header(std::string_view name) const;
};
// Refuses (kInvalidArgument) a status line that is not `HTTP/1.x NNN reason`, a header line
// without a colon, and more than 100 headers.
Result<ResponseHead> ParseResponseHead(std::string_view text);

// The body of a chunked transfer; kInvalidArgument for a malformed chunk, nullopt while the
// last chunk has not arrived.
Result<std::optional<std::string>> DecodeChunked(std::string_view text);

struct ExecSessionOptions {
  std::chrono::seconds dial_timeout{10};     // connect and the upgrade's answer
  std::chrono::seconds write_timeout{30};    // one blocked write to either side
  std::chrono::seconds finish_timeout{300};  // waiting for the client's close
  size_t max_message_bytes = 1 << 20;        // one WebSocket message or SPDY frame
};

// What ServeExecSession did.
struct ExecOutcome {
  // The connection was taken over: the upgrade was answered on the socket, the session ran
  // and the socket has been shut down; nothing may be written to it.
  bool upgraded = false;
  // Otherwise the answer to send.
  int status = 0;
  std::string body;
  std::string content_type;
  // For the log: the route, what the session ended with.
  std::string route, detail;
};

// Runs an exec whose request and plan are checked: answers the client on `client_fd` (the
// request's connected socket, owned by the HTTP server) or returns the answer to send.
ExecOutcome ServeExecSession(const UpgradeRequest& req, int client_fd, const ExecPlan& plan,
                             const ExecSessionOptions& options = {});

}  // namespace hami::sim::kube
