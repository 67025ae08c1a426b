// The simulated Kubernetes API server: a stand-in for kube-apiserver that speaks the real REST
// API over real HTTP/1.1 (TLS optional), faithful enough that kubectl and the official Python
// client work against it. Objects live in memory; one cluster-wide resourceVersion counter.
//
// Served: core/v1 pods (binding, status), nodes (status), namespaces, events, configmaps,
// resourcequotas; coordination.k8s.io/v1 leases; discovery (/version, /api, /api/v1, /apis,
// group versions, aggregated discovery), /openapi/v3, /healthz, /readyz, /livez.
//
// Test controls (not part of the Kubernetes API): `GET/PUT /sim/faults` (the Faults below as
// JSON), so that a test in another process (kubectl, Python) can inject faults too.
//
// Thread safety: every method may be called from any thread while the server runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/result.h"
#include "kube/resource.h"

namespace hami::sim::kube {

struct ApiServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;               // 0: any free port (see ApiServer::port())
  std::string tls_cert_file;  // both set: HTTPS with this certificate and key
  std::string tls_key_file;
  int64_t watch_window = 10000;  // change events kept for watch; older versions get 410 Gone
  int threads = 64;              // request threads; each open watch holds one
  std::string default_namespaces = "default,kube-system";  // created at start
};

// Faults injected into resource requests (discovery, /version and /sim/* are never faulted).
struct Faults {
  std::chrono::milliseconds latency{0};  // added before every answer
  double rate_429 = 0;                   // fraction of requests answered 429 TooManyRequests
  int retry_after_seconds = 1;           // the Retry-After header of those answers
  double rate_500 = 0;                   // fraction answered 500 InternalError
  int cut_watch_after_events = 0;        // > 0: every watch stream is cut after that many events
  int force_gone_watches = 0;            // the next N watch requests get 410 Expired
};

nlohmann::json FaultsToJson(const Faults& f);
Result<Faults> FaultsFromJson(const nlohmann::json& j);  // errors name the field

class ApiServer {
 public:
  // Binds, starts serving, creates the default namespaces; returns once requests are served.
  static Result<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options);
  ~ApiServer();  // Stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Ends every watch stream and stops serving. Idempotent.
  void Stop();

  int port() const;
  std::string url() const;  // "http://127.0.0.1:PORT" (https with TLS)

  // A kubeconfig for this server (context "hami-sim", user without credentials, the CA when
  // serving TLS), written atomically to `path`.
  Status WriteKubeconfig(const std::string& path) const;

  void SetFaults(const Faults& faults);
  Faults faults() const;

  // The store, for seeding and inspecting without HTTP (tests, benchmarks). Same semantics as
  // the HTTP verbs: Create assigns uid, creationTimestamp and a resourceVersion, and watchers see
  // it.
  Result<nlohmann::json> CreateObject(const hami::kube::Resource& r, const nlohmann::json& obj);
  Result<nlohmann::json> GetObject(const hami::kube::Resource& r, std::string_view ns,
                                   std::string_view name) const;
  int64_t resource_version() const;  // the cluster-wide counter's current value

  struct Stats {
    uint64_t requests = 0;
    uint64_t watches_open = 0;
    uint64_t faults_injected = 0;
  };
  Stats stats() const;

 private:
  struct Impl;
  explicit ApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hami::sim::kube
