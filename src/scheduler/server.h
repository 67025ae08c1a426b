// hami-scheduler's HTTP(S) servers (cpp-httplib, OpenSSL for HTTPS):
//
//   the extender, on --http-bind (HTTPS with --cert-file and --key-file):
//     POST /filter /prioritize /bind /preempt
//                                      the kube-scheduler extender verbs (scheduler.h)
//     POST /webhook                    the mutating admission webhook (webhook.h), when routed
//     GET  /healthz                    200 "ok" while the process serves
//     GET  /readyz                     200 "ok" once the informers have synced, else 503
//     GET  /metrics                    the Prometheus exposition (metrics.h)
//   the metrics listener, on --metrics-bind-address (plain HTTP): GET /metrics and /healthz.
//
// A request body over max_body_bytes (1 MiB) is refused with 413 before it is read further; a
// body the verb cannot read is 400 with the verb's error shape naming the field; an unknown
// path is 404, a known path with another method 405. Every answer is JSON except /healthz,
// /readyz (text) and /metrics (text/plain; version=0.0.4).
//
// Thread safety: Start and Stop from one thread; the routes are called from the server's pool
// of `threads` threads (binds wait for node locks, so the pool is larger than the CPU count).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "common/bind_address.h"
#include "common/result.h"
#include "scheduler/scheduler.h"

namespace hami::scheduler {

struct ServerOptions {
  std::string http_bind = "127.0.0.1:8080";  // host:port; ":port" is every address; port 0: any
  std::string cert_file;                     // both or neither: HTTPS
  std::string key_file;
  std::string metrics_bind = ":9395";  // empty: no metrics listener of its own
  int threads = 64;
  size_t max_body_bytes = 1 << 20;
};

struct Routes {
  std::function<Answer(std::string_view body)> filter;
  std::function<Answer(std::string_view body)> prioritize;
  std::function<Answer(std::string_view body)> bind;
  std::function<Answer(std::string_view body)> preempt;  // empty: no /preempt route
  std::function<Answer(std::string_view body)> webhook;  // empty: no /webhook route
  std::function<bool()> ready;
  std::function<std::string()> metrics;
};

// The routes of a Scheduler (no webhook).
Routes SchedulerRoutes(Scheduler& scheduler, SchedulerMetrics& metrics);

// "host:port", ":port" (every IPv4 address), "[v6]:port". Errors name `flag`.
using ::hami::ParseBindAddress;

class HttpServer {
 public:
  // Binds both listeners and serves; returns once they accept. Errors: a bad address, a
  // certificate or key that cannot be read or do not match (naming the files), a port in use.
  static Result<std::unique_ptr<HttpServer>> Start(const ServerOptions& options, Routes routes);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;          // the extender's
  int metrics_port() const;  // 0 without a metrics listener
  bool tls() const;
  // Stops accepting, waits for requests in flight; idempotent.
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hami::scheduler
