// hami-device-plugin: advertises a node's GPUs to the kubelet as shares, publishes the node's
// inventory, and turns the scheduler's decision into a container held to its share. Flags
// (CLI11) -> options (daemon.h) -> the daemon -> SIGINT or SIGTERM, or the broker's end ->
// orderly stop. docs/device-plugin.md lists every flag and every configuration key.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/stop_signals.h"
#include "kube/config.h"
#include "log/flags.h"
#include "plugin/allocate.h"
#include "plugin/daemon.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "hami-device-plugin: %s\n", message.c_str());
  return 1;
}

const char* EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hami-device-plugin: advertises GPU shares to the kubelet and delivers each container's "
      "memory and compute limits"};
  hami::plugin::DaemonOptions o;
  std::string node_name;
  std::string kubeconfig;
  int64_t register_ms = 30000;
  bool no_health = false;
  // Each Allocate makes about seven requests (node, pod list, pod patch, lock release) and the
  // kubelet may start several containers at once: client-go's 5/s would hold a node to
  // fewer than one pod a second.
  double qps = 50;
  int burst = 100;
  o.hook_path = EnvOr("HOOK_PATH", hami::node::kDefaultHookPath);
  const std::map<std::string, int64_t> kUnits = {
      {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}};

  app.add_option("--node-name", node_name, "this node's name (else $NODE_NAME)");
  app.add_option("--device-config-file", o.config.device_config_path,
                 "HAMi's device-config.yaml (nvidia: keys); none: the defaults");
  app.add_option("--node-config-file", o.config.node_config_path,
                 "per-node config.json (nodeconfig[]); absent: no per-node values")
      ->capture_default_str();
  app.add_option("--kubelet-socket", o.registrar.kubelet_socket,
                 "the kubelet's registration socket; the plugin serves in its directory")
      ->capture_default_str();
  app.add_option("--socket-name", o.registrar.socket_name,
                 "the plugin's socket file in that directory")
      ->capture_default_str();
  app.add_option("--hook-path", o.hook_path,
                 "host directory holding vgpu/libvgpu.so and vgpu/containers/ (else $HOOK_PATH)")
      ->capture_default_str();
  app.add_option("--vgpu-library", o.vgpu_library,
                 "install this libvgpu.so into <hook-path>/vgpu/ at start (atomically)");
  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig file (else $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--nvml-library", o.inventory.nvml_library, "the NVML library to open")
      ->capture_default_str();
  app.add_option("--cuda-library", o.inventory.cuda_library,
                 "the CUDA driver, for SM counts (empty: not opened)")
      ->capture_default_str();
  app.add_option("--sysfs-root", o.inventory.sysfs_root, "sysfs, for NUMA nodes")
      ->capture_default_str();
  app.add_option("--broker-dir", o.broker_dir,
                 std::string("where the host-PID broker serves when ") +
                     hami::plugin::kBrokerGateEnv + "=1")
      ->capture_default_str();
  app.add_option("--register-interval", register_ms,
                 "how often the node's inventory is compared and republished (30s)")
      ->transform(CLI::AsNumberWithUnit(kUnits, CLI::AsNumberWithUnit::CASE_SENSITIVE, "DURATION"));
  app.add_option("--kube-qps", qps, "API requests per second (<= 0: unlimited)")
      ->capture_default_str();
  app.add_option("--kube-burst", burst, "API request burst")->capture_default_str();
  app.add_flag("--no-health-checks", no_health,
               "do not watch NVML events (as DP_DISABLE_HEALTHCHECKS=all)");
  hami::log::Flags log_flags;
  hami::log::AddFlags(app, log_flags);
  CLI11_PARSE(app, argc, argv);
  if (auto logging = hami::log::ApplyFlags(log_flags, "hami-device-plugin"); !logging.ok()) {
    return Fail(logging.error().message());
  }

  auto name = hami::plugin::ResolveNodeName(node_name, std::getenv(hami::plugin::kNodeNameEnv));
  if (!name.ok()) return Fail(name.error().message());
  o.config.node_name = *name;
  if (register_ms < 100) return Fail("--register-interval: must be at least 100ms");
  o.register_period = std::chrono::milliseconds(register_ms);
  o.health_checks = !no_health;
  if (const char* gate = std::getenv(hami::plugin::kBrokerGateEnv); gate != nullptr) {
    o.broker_gate = gate;
  }
  if (burst < 1) return Fail("--kube-burst: must be at least 1");
  o.client.qps = qps;
  o.client.burst = burst;
  o.client.user_agent = "hami-device-plugin";

  auto config = hami::kube::LoadConfig(kubeconfig);
  if (!config.ok()) return Fail(config.error().message());

  // Blocked before any thread starts, so that every thread inherits the mask and the daemon
  // takes the signals through its signalfd.
  if (auto blocked = hami::BlockStopSignals(); !blocked.ok()) {
    return Fail(blocked.error().message());
  }
  // A kubelet that goes away mid-write must not kill the plugin.
  signal(SIGPIPE, SIG_IGN);

  auto daemon = hami::plugin::Daemon::Start(std::move(config).value(), std::move(o));
  if (!daemon.ok()) return Fail(daemon.error().message());
  std::printf("hami-device-plugin: serving %s on %s\n",
              (*daemon)->config().device.resource_count_name.c_str(),
              (*daemon)->plugin_socket().c_str());
  std::fflush(stdout);
  hami::Status end = (*daemon)->Wait();
  (*daemon)->Stop();
  if (!end.ok()) return Fail(end.error().message());
  return 0;
}
