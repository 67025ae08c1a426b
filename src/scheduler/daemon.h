// The hami-scheduler daemon assembled from its parts, with explicit lifetimes: the API client,
// the informers, the event recorder, the metrics, the scheduler, the HTTP(S) servers, and the
// handshake loop (under leader election when asked). main.cc parses flags into DaemonOptions
// and runs one; tests and `hami bench scheduler` run it in-process.
//
// Order: Start builds everything and starts the informers and the servers (/readyz answers 503
// until the informers have synced; the verbs answer 503 too), then the handshake loop (at once,
// or once this replica leads). Stop ends them in reverse: the handshake loop (releasing the
// lease), the servers (requests in flight finish), the informers, the event recorder.
//
// Thread safety: Start and Stop from one thread; the accessors from any.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/result.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/event_recorder.h"
#include "kube/informer.h"
#include "kube/leader_election.h"
#include "scheduler/handshake.h"
#include "scheduler/metrics.h"
#include "scheduler/resize.h"
#include "scheduler/scheduler.h"
#include "scheduler/server.h"
#include "scheduler/webhook.h"

namespace hami::scheduler {

struct DaemonOptions {
  SchedulerOptions scheduler;
  ServerOptions server;
  HandshakeOptions handshake;
  bool handshake_enabled = true;
  kube::ClientOptions client;  // qps, burst, timeouts
  bool leader_elect = false;
  std::string lease_namespace = "kube-system";
  std::string lease_name = "hami-scheduler";
  std::string leader_identity;  // empty: "<hostname>_<pid>"
  bool webhook = true;          // serve POST /webhook
  webhook::WebhookMode webhook_mode = webhook::WebhookMode::kDevicePlugin;
  ResizeOptions resize;  // resizing running pods (scheduler/resize.h)
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Start(kube::Config config, DaemonOptions options);
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  void Stop();

  bool WaitReady(std::chrono::steady_clock::time_point deadline) const;
  int port() const;
  int metrics_port() const;
  Scheduler& scheduler();
  SchedulerMetrics& metrics();
  kube::Client& client();
  ResizeController& resize();

 private:
  Daemon() = default;

  DaemonOptions options_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<kube::InformerFactory> informers_;
  std::unique_ptr<kube::EventRecorder> events_;
  SchedulerMetrics metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<HandshakeLoop> handshake_;
  std::unique_ptr<ResizeController> resize_;
  std::unique_ptr<kube::LeaderElector> elector_;
  std::jthread background_;  // the handshake loop, or the elector running it
  bool stopped_ = false;
};

}  // namespace hami::scheduler
