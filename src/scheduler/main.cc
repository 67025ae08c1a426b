// hami-scheduler: the kube-scheduler extender and mutating webhook of hami-cpp. Flags (CLI11)
// -> validated options (every error names the flag or the file's key) -> the daemon
// (daemon.h) -> SIGINT or SIGTERM, taken with sigwaitinfo -> orderly stop. docs/scheduler.md
// lists every flag.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "common/stop_signals.h"
#include "kube/config.h"
#include "log/flags.h"
#include "scheduler/daemon.h"

namespace {

using hami::scheduler::Daemon;
using hami::scheduler::DaemonOptions;

int Fail(const std::string& message) {
  std::fprintf(stderr, "hami-scheduler: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hami-scheduler: the kube-scheduler extender (filter, prioritize, bind) and mutating "
      "webhook that place GPU-sharing pods"};
  DaemonOptions o;
  std::string kubeconfig;
  std::string device_config_file;
  std::string gpu_policy = "spread";
  std::string node_policy = "binpack";
  std::string webhook_mode = "device-plugin";
  int64_t lock_timeout_ms = 5 * 60 * 1000;
  int64_t lock_wait_ms = 10000;
  int64_t handshake_interval_ms = 15000;
  double qps = 50;
  int burst = 100;
  const std::map<std::string, int64_t> kUnits = {
      {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}};

  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig file (else $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--scheduler-name", o.scheduler.scheduler_name,
                 "the schedulerName the webhook gives GPU pods")
      ->capture_default_str();
  app.add_option("--node-scheduler-policy", node_policy, "binpack or spread")
      ->capture_default_str();
  app.add_option("--gpu-scheduler-policy", gpu_policy,
                 "a chain of binpack, spread, topology-aware, mutex, numa (e.g. binpack,numa)")
      ->capture_default_str();
  app.add_option("--webhook-mode", webhook_mode,
                 "device-plugin (pods keep their GPU resources) or dra (GPU shares become "
                 "ResourceClaims of hami-core-gpu.project-hami.io)")
      ->capture_default_str();
  app.add_option("--device-config-file", device_config_file,
                 "HAMi's device-config.yaml (resource names, defaults)");
  app.add_option("--http-bind", o.server.http_bind, "extender address host:port")
      ->capture_default_str();
  app.add_option("--cert-file", o.server.cert_file, "serve HTTPS with this PEM certificate");
  app.add_option("--key-file", o.server.key_file, "and this PEM private key");
  app.add_option("--metrics-bind-address", o.server.metrics_bind,
                 "Prometheus metrics address (empty: only /metrics on --http-bind)")
      ->capture_default_str();
  app.add_flag("--leader-elect", o.leader_elect,
               "run the handshake loop only while holding the lease");
  app.add_option("--leader-elect-namespace", o.lease_namespace, "namespace of the lease")
      ->capture_default_str();
  app.add_option("--leader-elect-name", o.lease_name, "name of the lease")->capture_default_str();
  app.add_option("--node-lock-timeout", lock_timeout_ms,
                 "a node lock older than this is broken (5m; units ms, s, m, h)")
      ->transform(CLI::AsNumberWithUnit(kUnits, CLI::AsNumberWithUnit::CASE_SENSITIVE, "DURATION"));
  app.add_option("--node-lock-wait", lock_wait_ms,
                 "how long a bind waits for another pod's node lock (10s)")
      ->transform(CLI::AsNumberWithUnit(kUnits, CLI::AsNumberWithUnit::CASE_SENSITIVE, "DURATION"));
  app.add_option("--handshake-interval", handshake_interval_ms,
                 "period of the node handshake loop (15s)")
      ->transform(CLI::AsNumberWithUnit(kUnits, CLI::AsNumberWithUnit::CASE_SENSITIVE, "DURATION"));
  app.add_flag("--single-node-filter", o.scheduler.single_node_filter,
               "filter answers only the best node, as HAMi does (loses kube-scheduler's scoring)");
  app.add_option("--kube-qps", qps, "API requests per second (<= 0: unlimited)")
      ->capture_default_str();
  app.add_option("--kube-burst", burst, "API request burst")->capture_default_str();
  app.add_option("--threads", o.server.threads, "HTTP request threads")->capture_default_str();
  hami::log::Flags log_flags;
  hami::log::AddFlags(app, log_flags);
  CLI11_PARSE(app, argc, argv);
  if (auto logging = hami::log::ApplyFlags(log_flags, "hami-scheduler"); !logging.ok()) {
    return Fail(logging.error().message());
  }

  if (lock_timeout_ms < 1000) return Fail("--node-lock-timeout: must be at least 1s");
  if (lock_wait_ms < 0) return Fail("--node-lock-wait: must not be negative");
  if (handshake_interval_ms < 100) return Fail("--handshake-interval: must be at least 100ms");
  auto gpu = hami::scheduler::ParseGpuPolicy(gpu_policy, "--gpu-scheduler-policy");
  if (!gpu.ok()) return Fail(gpu.error().message());
  auto node = hami::scheduler::ParseNodePolicy(node_policy, "--node-scheduler-policy");
  if (!node.ok()) return Fail(node.error().message());
  auto mode = hami::scheduler::webhook::ParseWebhookMode(webhook_mode, "--webhook-mode");
  if (!mode.ok()) return Fail(mode.error().message());
  o.webhook_mode = *mode;
  o.scheduler.gpu_policy = *gpu;
  o.scheduler.node_policy = *node;
  if (!device_config_file.empty()) {
    auto dc = hami::config::LoadDeviceConfig(device_config_file);
    if (!dc.ok()) return Fail(dc.error().message());
    o.scheduler.device_config = *dc;
  }
  o.scheduler.node_lock_timeout = std::chrono::seconds(lock_timeout_ms / 1000);
  o.scheduler.node_lock_wait = std::chrono::milliseconds(lock_wait_ms);
  o.handshake.interval = std::chrono::milliseconds(handshake_interval_ms);
  o.client.qps = qps;
  o.client.burst = burst;
  o.client.user_agent = "hami-scheduler";

  auto config = hami::kube::LoadConfig(kubeconfig);
  if (!config.ok()) return Fail(config.error().message());

  if (auto blocked = hami::BlockStopSignals(); !blocked.ok()) {
    return Fail(blocked.error().message());
  }
  const sigset_t stop_signals = hami::StopSignals();
  auto daemon = Daemon::Start(std::move(config).value(), std::move(o));
  if (!daemon.ok()) return Fail(daemon.error().message());
  std::printf("hami-scheduler: serving on port %d (metrics %d)\n", (*daemon)->port(),
              (*daemon)->metrics_port());
  std::fflush(stdout);
  int sig = 0;
  while (sig != SIGINT && sig != SIGTERM) {
    siginfo_t info{};
    sig = sigwaitinfo(&stop_signals, &info);
    if (sig < 0 && errno != EINTR) {
      (*daemon)->Stop();
      return Fail(std::string("sigwaitinfo: ") + std::strerror(errno));
    }
  }
  (*daemon)->Stop();
  HAMI_LOG(kInfo, "event=stop signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
  return 0;
}
