// hami-monitor's daemon: the components of docs/monitor.md with explicit lifetimes.
//
// Start order (each failure returns an error naming its step, and main logs it and exits 1):
//   nvml           open and initialize NVML (--nvml-library)
//   kube_client    the API client (User-Agent hami-monitor)
//   pod_informer   the pods on this node (field selector spec.nodeName=<node>), started; its
//                  store keeps the last-known pods while the API server is down
//   cleanup        the node's single-cleaner lock (<hook>/vgpu/monitor.lock); held by another
//                  monitor: logged, exported as hami_monitor_cleanup_enabled 0, not fatal;
//                  --no-cleanup: not taken
//   health         NVML Xid/ECC events (inventory/health.h); a failure is logged, not fatal
//   metrics_server GET /metrics, /healthz, /readyz on --metrics-bind-address
//   sampler        the sampling thread: every --feedback-interval it scans the container
//                  directories (regions.h), samples NVML, runs the priority feedback pass over
//                  the writable regions, finds unaccounted memory (and records a Warning event
//                  once per process, GPU and reason), and every --resync-interval runs a cleanup
//                  pass with a fresh LIST of the node's pods.
// Ready (/readyz 200) once the first scan is done and the pod informer has synced.
//
// A scrape reads the regions (lock-free loads) and the cached NVML sample; it never calls NVML.
//
// Thread safety: Start, Stop, Wait from one thread; Scrape and the accessors from any.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "kube/client.h"
#include "kube/config.h"
#include "monitor/unaccounted.h"
#include "node/paths.h"

namespace hami::monitor {

struct DaemonOptions {
  std::string node_name;
  std::string hook_path = node::kDefaultHookPath;
  std::string metrics_bind = ":9394";
  std::chrono::nanoseconds resync_interval = std::chrono::minutes(5);
  std::chrono::nanoseconds feedback_interval = std::chrono::seconds(5);
  std::string nvml_library = "libnvidia-ml.so.1";
  bool cleanup = true;
  bool health_checks = true;
  std::string proc_root = "/proc";
  uint64_t unaccounted_tolerance_bytes = kDefaultUnaccountedToleranceBytes;
  std::string version = "unknown";
  kube::ClientOptions client;
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Start(kube::Config config, DaemonOptions options);
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Stops the sampler, the server, the informer, the recorder; releases the cleanup lock.
  void Stop();
  // Returns on SIGINT or SIGTERM (blocked by the caller beforehand; common/stop_signals.h) or
  // when `stop_fd` becomes readable.
  Status Wait(int stop_fd = -1);

  // The exposition a GET /metrics answers now.
  std::string Scrape();
  bool ready() const;
  int metrics_port() const;
  bool cleanup_enabled() const;

 private:
  struct Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hami::monitor
