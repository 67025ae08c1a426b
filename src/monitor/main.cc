// hami-monitor: exports every container's GPU use on this node as Prometheus metrics, runs the
// priority feedback loop over the containers' regions, and removes ended pods' container
// directories. Flags (CLI11) -> options (daemon.h) -> the daemon -> SIGINT or SIGTERM ->
// orderly stop. docs/monitor.md lists every flag, metric and log line.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>

#include "common/stop_signals.h"
#include "kube/config.h"
#include "log/flags.h"
#include "monitor/daemon.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "hami-monitor: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hami-monitor: exports every container's GPU memory and compute use on this node, runs "
      "the priority feedback loop and cleans up after ended pods"};
  hami::monitor::DaemonOptions o;
  std::string kubeconfig;
  int64_t resync_ms = 5 * 60 * 1000;
  int64_t feedback_ms = 5000;
  bool no_cleanup = false;
  bool no_health = false;
  const std::map<std::string, int64_t> kUnits = {
      {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}};
  const auto duration =
      CLI::AsNumberWithUnit(kUnits, CLI::AsNumberWithUnit::CASE_SENSITIVE, "DURATION");

  app.add_option("--node-name", o.node_name, "this node's name")->envname("NODE_NAME");
  app.add_option("--hook-path", o.hook_path,
                 "host directory holding vgpu/containers/ (the device plugin's --hook-path)")
      ->envname("HOOK_PATH")
      ->capture_default_str();
  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig file (else $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--metrics-bind-address", o.metrics_bind,
                 "where GET /metrics, /healthz and /readyz are served")
      ->capture_default_str();
  app.add_option("--resync-interval", resync_ms,
                 "how often the node's pods are listed for cleanup (5m; \"2s\", \"90s\")")
      ->envname("HAMI_RESYNC_INTERVAL")
      ->transform(duration);
  app.add_option("--feedback-interval", feedback_ms,
                 "how often the regions are scanned, NVML sampled and the feedback loop run (5s)")
      ->transform(duration);
  app.add_option("--nvml-library", o.nvml_library, "the NVML library to open")
      ->capture_default_str();
  app.add_option("--proc-root", o.proc_root,
                 "procfs of the host's PID namespace, for attributing processes")
      ->capture_default_str();
  app.add_flag("--no-cleanup", no_cleanup, "never remove container directories");
  app.add_flag("--no-health-checks", no_health, "do not watch NVML Xid events");
  hami::log::Flags log_flags;
  hami::log::AddFlags(app, log_flags);
  CLI11_PARSE(app, argc, argv);
  if (auto logging = hami::log::ApplyFlags(log_flags, "hami-monitor"); !logging.ok()) {
    return Fail("step=config: " + logging.error().message());
  }

  if (o.node_name.empty()) return Fail("step=config: --node-name (or $NODE_NAME) is required");
  if (resync_ms < 1000) return Fail("step=config: --resync-interval: must be at least 1s");
  if (feedback_ms < 100) return Fail("step=config: --feedback-interval: must be at least 100ms");
  o.resync_interval = std::chrono::milliseconds(resync_ms);
  o.feedback_interval = std::chrono::milliseconds(feedback_ms);
  o.cleanup = !no_cleanup;
  o.health_checks = !no_health;
  o.version = HAMI_VERSION;

  auto config = hami::kube::LoadConfig(kubeconfig);
  if (!config.ok()) return Fail("step=kubeconfig: " + config.error().message());

  // Blocked before any thread starts, so that every thread inherits the mask and the daemon
  // takes the signals through its signalfd.
  if (auto blocked = hami::BlockStopSignals(); !blocked.ok()) {
    return Fail("step=signals: " + blocked.error().message());
  }
  signal(SIGPIPE, SIG_IGN);

  auto daemon = hami::monitor::Daemon::Start(std::move(config).value(), std::move(o));
  if (!daemon.ok()) return Fail(daemon.error().message());
  hami::Status end = (*daemon)->Wait();
  (*daemon)->Stop();
  if (!end.ok()) return Fail(end.error().message());
  return 0;
}
