// The simulated Kubernetes API server: a stand-in for kube-apiserver that speaks the real REST
// API over real HTTP/1.1 (TLS optional), faithful enough that kubectl and the official Python
// client work against it. Objects live in memory; one cluster-wide resourceVersion counter.
//
// Served: core/v1 pods (binding, status, log, exec), nodes (status), namespaces, events,
// configmaps, resourcequotas, serviceaccounts, secrets, services (status); coordination.k8s.io/v1
// leases; apps/v1 deployments and daemonsets (status); rbac.authorization.k8s.io/v1 clusterroles,
// clusterrolebindings, roles, rolebindings; admissionregistration.k8s.io/v1
// mutatingwebhookconfigurations; discovery (/version, /api, /api/v1, /apis, group versions,
// aggregated discovery), /openapi/v3, /healthz, /readyz, /livez. Each resource gets the
// registry's defaults and validation that kubectl apply meets (strategy.h): deployments and
// daemonsets a selector matching the template, metadata.generation; services a cluster IP from
// 10.96.0.0/12 (kept across updates); secrets base64 data (stringData folded in); RBAC rules
// and bindings checked field by field; webhook configurations defaulted and checked.
//
// A pod create (POST, and CreateObject) goes through mutating admission first: every matching
// MutatingWebhookConfiguration webhook with a clientConfig.url is called and its JSON patch
// applied, or the create refused (admission.h); a create into a missing namespace is refused
// with 404 before any webhook is called.
//
// pods/log (GET; ?container= required when the pod has several) reads the container's logs as
// the kubelet lays them out and containerd writes them: <pod_log_dir>/<namespace>_<pod>_<uid>/
// <container>/<restart count>.log (the pod's metadata.uid, so a pod recreated under the same
// name never shows its predecessor's output), each file in the CRI log format, decoded back
// into the container's output as text/plain (cri_log.h). The current log is the highest
// restart count, previous=true the highest below it (none: 400 `previous terminated container
// "C" in pod "P" not found`); no file: 400 `container "C" in pod "P" is waiting to start`.
// timestamps=true prefixes each line with its RFC3339Nano timestamp; sinceSeconds or
// sinceTime leave out older entries (both, or sinceSeconds=0: 422); tailLines counts decoded
// lines; limitBytes cuts last. Malformed lines of a file are skipped and logged
// (event=pod_log_malformed). follow=true is accepted but answers what is there and ends (no
// streaming).
//
// pods/exec (GET or POST with an upgrade) runs `kubectl exec` through the pod's node: the
// server asks the node's kubelet (status.addresses, status.daemonEndpoints) for the stream and
// follows it to the container runtime; a WebSocket v5.channel.k8s.io session is answered here
// and relayed to the runtime over SPDY/3.1, any other upgrade is passed through. The request's
// connection is taken over for the session (found with sockets.h), so over TLS exec is 501.
// exec.h has the details.
//
// Semantics (research/kubectl-protocol.md, sections 4 to 8): every answer is JSON with kind and
// apiVersion (lists: items always an array, list metadata with the resourceVersion, items
// without kind); every failure a Status with the API's reason and message; Tables when the
// Accept header asks for one. Writes follow the registry: create assigns uid,
// creationTimestamp, resourceVersion (and a name for generateName); a PUT or patch whose
// metadata.resourceVersion differs from the stored one is 409 Conflict; a write that changes
// nothing keeps the resourceVersion and emits no event; a DELETE of an object with finalizers
// only sets its deletionTimestamp, and it goes when its last finalizer is removed (store.h);
// the main resource keeps `status`,
// `/status` keeps the rest. Patches: merge, JSON (a failed test is 422), strategic, apply (JSON
// body; fieldManager required; creates). Lists page with limit/continue over one snapshot
// (tokens expire with the watch window: 410). Watch (?watch=true|True|1): one JSON event per
// chunk, "\n"-terminated, Content-Type "application/json; charset=utf-8" (a type the HTTP
// library leaves uncompressed) or the Table type; from a resourceVersion only the later
// events, without one synthetic ADDED first; selectors turn transitions into ADDED/DELETED;
// bookmarks (allowWatchBookmarks) after a second without events and at the end; timeoutSeconds
// ends the stream cleanly; a version older than the window, or a stream that falls a window
// behind, gets an ERROR event with a 410 Expired Status. Request bodies are read whatever the
// method and framing (Content-Length or chunked), at most 3 MiB, nested at most 512 deep.
//
// Test controls (not part of the Kubernetes API): `GET/PUT /sim/faults` (the Faults below as
// JSON; PUT {} clears them), so that a test in another process (kubectl, Python) can inject
// faults too; `GET /sim/audit` (?user_agent=NAME for one client) answers the audit log (every
// resource request, not discovery or /sim/*, with its RBAC verb, group, resource,
// subresource, namespace, name and User-Agent name; audit.h), `DELETE /sim/audit` clears it.
//
// Thread safety: every method may be called from any thread while the server runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/resource.h"

namespace hami::sim::kube {

struct ApiServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;               // 0: any free port (see ApiServer::port())
  std::string tls_cert_file;  // both set: HTTPS with this certificate and key
  std::string tls_key_file;
  int64_t watch_window = 10000;  // change events kept for watch; older versions get 410 Gone
  int threads = 128;  // request threads: each open watch and each idle keep-alive connection
                      // (for up to 5 s) holds one; more connections wait for a free thread
  std::string default_namespaces = "default,kube-system";  // created at start
  // pods/log reads <pod_log_dir>/<namespace>_<pod>_<uid>/<container>/<restart count>.log, in
  // the CRI log format (the kubelet's /var/log/pods layout); empty: no logs (400).
  std::string pod_log_dir;
  bool audit = true;               // record resource requests for GET /sim/audit
  size_t audit_capacity = 100000;  // entries kept; older ones are dropped and counted
};

// Faults injected into resource requests (discovery, /version, /healthz and /sim/* are never
// faulted). Rates draw from one RNG seeded with `seed` whenever the faults are set, so a
// sequence of requests meets the same faults run after run.
struct Faults {
  std::chrono::milliseconds latency{0};  // added before every answer
  double rate_429 = 0;                   // fraction of requests answered 429 TooManyRequests
  int retry_after_seconds = 1;           // the Retry-After header of those answers
  double rate_500 = 0;                   // fraction answered 500 InternalError
  int cut_watch_after_events = 0;        // > 0: every watch stream is cut (the connection
                                         // dropped, no end chunk) after that many object events
  int force_gone_watches = 0;            // the next N watch requests get 410 Expired (an ERROR
                                         // event); faults() shows how many are left
  uint64_t seed = 1;
};

// The JSON of /sim/faults: {"latency_ms":0,"rate_429":0,"retry_after_seconds":1,"rate_500":0,
// "cut_watch_after_events":0,"force_gone_watches":0,"seed":1}. FaultsFromJson takes any subset
// (the rest keep their defaults) and rejects unknown fields, wrong types and values out of range
// (rates 0..1, latency up to 10 minutes), naming the field.
nlohmann::json FaultsToJson(const Faults& f);
Result<Faults> FaultsFromJson(const nlohmann::json& j);

class ApiServer {
 public:
  // Creates the default namespaces, binds, starts serving; returns once requests are served.
  // Errors: both or neither TLS file (kInvalidArgument), an unreadable certificate or key, a
  // port that cannot be bound (kIo). Ignores SIGPIPE process-wide when it has its default
  // disposition (a write to a vanished client must fail, not kill the process).
  static Result<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options);
  ~ApiServer();  // Stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Ends every watch stream (cleanly, with the end chunk), closes idle keep-alive connections,
  // waits for the request threads and stops serving. Prompt: nothing waits on a client.
  // Idempotent.
  void Stop();

  int port() const;
  std::string url() const;  // "http://127.0.0.1:PORT" (https with TLS; a wildcard host reads
                            // as the loopback address)

  // A kubeconfig for this server (cluster, user and context "hami-sim", current-context, a user
  // without credentials; with TLS the certificate as certificate-authority-data and a bearer
  // token, which the server ignores, because kubectl prompts for a username over HTTPS when
  // the user has no credential), written atomically to `path` (a temporary file renamed over
  // it). The server does no authentication or authorization.
  Status WriteKubeconfig(const std::string& path) const;

  void SetFaults(const Faults& faults);
  Faults faults() const;

  // The store, for seeding and inspecting without HTTP (tests, benchmarks). Same semantics as
  // the HTTP verbs (a POST, GET, DELETE of the object's namespace, metadata.namespace or
  // "default" for a namespaced resource): Create assigns uid, creationTimestamp and a
  // resourceVersion, and watchers see it. Objects come back with kind and apiVersion.
  Result<nlohmann::json> CreateObject(const hami::kube::Resource& r, const nlohmann::json& obj);
  Result<nlohmann::json> GetObject(const hami::kube::Resource& r, std::string_view ns,
                                   std::string_view name) const;
  Status DeleteObject(const hami::kube::Resource& r, std::string_view ns, std::string_view name);
  // Every object of `r` in `ns` (all namespaces when empty), in namespace/name order.
  std::vector<nlohmann::json> ListObjects(const hami::kube::Resource& r,
                                          std::string_view ns = {}) const;
  int64_t resource_version() const;  // the cluster-wide counter's current value

  struct Stats {
    uint64_t requests = 0;
    uint64_t watches_open = 0;
    uint64_t faults_injected = 0;
    uint64_t watches_overflowed = 0;  // watches ended 410 Expired for falling behind
  };
  Stats stats() const;

 private:
  struct Impl;
  explicit ApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hami::sim::kube
