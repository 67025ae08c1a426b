// hami-dra-plugin: the kubelet plugin of the DRA driver hami-core-gpu.project-hami.io. Flags
// (CLI11) -> the node's GPUs (NVML) -> the hook files (libvgpu.so, ld.so.preload) -> the driver
// (its checkpoint) -> the DRA service on <plugins dir>/<driver>/dra.sock and the registration
// service on <registry dir>/<driver>-reg.sock, the node's ResourceSlice published (publisher.h)
// -> SIGINT or SIGTERM -> orderly stop. docs/dra.md lists the flags.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "common/stop_signals.h"
#include "dra/claim.h"
#include "dra/driver.h"
#include "dra/publisher.h"
#include "dra/service.h"
#include "dra/slices.h"
#include "inventory/health.h"
#include "inventory/inventory.h"
#include "kube/client.h"
#include "kube/config.h"
#include "limits/vocabulary.h"
#include "log/flags.h"
#include "log/log.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "hami-dra-plugin: %s\n", message.c_str());
  return 1;
}

const char* EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  namespace dra = hami::dra;
  CLI::App app{
      "hami-dra-plugin: prepares DRA claims on shared GPUs, held to their share by libvgpu"};
  dra::DriverOptions o;
  std::string node_name = EnvOr("NODE_NAME", "");
  std::string kubeconfig;
  std::string registry_dir = dra::kDefaultRegistryDir;
  std::string plugins_dir = dra::kDefaultPluginsDir;
  hami::inventory::Options inventory_options;
  bool print_slice = false;
  bool no_health = false;
  bool broker = false;
  bool no_publish = false;
  std::string vgpu_library;
  o.hook_path = EnvOr("HOOK_PATH", hami::node::kDefaultHookPath);

  app.add_option("--node-name", node_name, "this node's name, the pool's (else $NODE_NAME)");
  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig file (else $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--plugins-registry-dir", registry_dir,
                 "the kubelet's plugin registration directory")
      ->capture_default_str();
  app.add_option("--plugins-dir", plugins_dir,
                 "the kubelet's plugins directory; the driver serves in <dir>/<driver>/")
      ->capture_default_str();
  app.add_option("--cdi-dir", o.cdi_dir, "where the claims' CDI specs are written")
      ->capture_default_str();
  app.add_option("--hook-path", o.hook_path,
                 "host directory holding vgpu/libvgpu.so and vgpu/containers/ (else $HOOK_PATH)")
      ->capture_default_str();
  app.add_option("--vgpu-library", vgpu_library,
                 "install this libvgpu.so into <hook-path>/vgpu/ at start (atomically), with "
                 "the ld.so.preload file containers get; empty: one must be there already");
  app.add_option("--nvml-library", inventory_options.nvml_library, "the NVML library to open")
      ->capture_default_str();
  app.add_option("--cuda-library", inventory_options.cuda_library,
                 "the CUDA driver, for SM counts (empty: not opened)")
      ->capture_default_str();
  app.add_option("--lock-parent", o.lock_dir.parent,
                 "the host directory holding vgpulock, bound at /tmp/vgpulock in containers")
      ->capture_default_str();
  app.add_flag("--broker", broker,
               std::string("mount the host-PID broker's directory and set ") +
                   hami::limits::KeyName(hami::limits::Key::kHostPidBroker) +
                   "=1 (the broker itself is served by hami-device-plugin or `hami broker`)");
  double qps = 50;
  int burst = 100;
  app.add_option("--kube-qps", qps,
                 "API requests per second (<= 0: unlimited); a prepare reads its claim")
      ->capture_default_str();
  app.add_option("--kube-burst", burst, "API request burst")->capture_default_str();
  app.add_flag("--no-health-checks", no_health,
               "do not watch NVML events (as DP_DISABLE_HEALTHCHECKS=all): every GPU keeps the "
               "health it had at start");
  app.add_flag("--no-publish-resource-slice", no_publish,
               "do not publish the node's ResourceSlice (another component publishes it)");
  app.add_flag("--print-resource-slice", print_slice,
               "print the node's ResourceSlice as JSON and exit");
  hami::log::Flags log_flags;
  hami::log::AddFlags(app, log_flags);
  CLI11_PARSE(app, argc, argv);
  if (auto logging = hami::log::ApplyFlags(log_flags, "hami-dra-plugin"); !logging.ok()) {
    return Fail(logging.error().message());
  }
  if (node_name.empty()) return Fail("--node-name: required (or $NODE_NAME)");
  o.node_name = node_name;
  o.log = [](std::string_view line) { HAMI_LOG(kInfo, "%.*s", int(line.size()), line.data()); };
  o.broker = broker ? hami::plugin::Broker::kEnabled : hami::plugin::Broker::kDisabled;

  auto inventory = hami::inventory::ReadInventory(inventory_options);
  if (!inventory.ok()) return Fail(inventory.error().message());
  if (print_slice) {
    dra::SliceInput in;
    in.driver = o.driver_name;
    in.node_name = node_name;
    in.inventory = *inventory;
    auto slice = dra::BuildResourceSlice(in);
    if (!slice.ok()) return Fail(slice.error().message());
    std::printf("%s\n", slice->dump(2).c_str());
    return 0;
  }

  auto config = hami::kube::LoadConfig(kubeconfig);
  if (!config.ok()) return Fail(config.error().message());
  if (burst < 1) return Fail("--kube-burst: must be at least 1");
  hami::kube::ClientOptions client_options;
  client_options.user_agent = "hami-dra-plugin";
  client_options.qps = qps;
  client_options.burst = burst;
  auto client = hami::kube::Client::Create(std::move(config).value(), client_options);
  if (!client.ok()) return Fail(client.error().message());
  dra::ApiClaimSource source(**client);

  if (auto hook = hami::plugin::InstallHookFiles(o.hook_path, vgpu_library); !hook.ok()) {
    return Fail(hook.error().message());
  }
  const std::string plugin_dir = plugins_dir + "/" + o.driver_name;
  std::error_code ec;
  std::filesystem::create_directories(plugin_dir, ec);
  if (ec) return Fail("creating " + plugin_dir + ": " + ec.message());
  std::filesystem::create_directories(registry_dir, ec);
  if (ec) return Fail("creating " + registry_dir + ": " + ec.message());
  o.checkpoint_path = plugin_dir + "/" + dra::kCheckpointFileName;

  if (auto blocked = hami::BlockStopSignals(); !blocked.ok())
    return Fail(blocked.error().message());
  signal(SIGPIPE, SIG_IGN);

  auto driver = dra::Driver::Create(source, dra::GpusFromInventory(*inventory), std::move(o));
  if (!driver.ok()) return Fail(driver.error().message());
  dra::Driver& d = **driver;
  const std::string driver_name = d.options().driver_name;

  // The node's ResourceSlice, published now and again on every health change.
  hami::inventory::Inventory published = *inventory;  // guarded by gpus_mu
  std::unique_ptr<dra::SliceLoop> slices;
  if (!no_publish) {
    dra::PublisherOptions po;
    po.driver = driver_name;
    po.node_name = node_name;
    po.log = [](std::string_view line) {
      const bool failed = line.find("event=slice_publish_failed") != std::string_view::npos;
      hami::log::Log(failed ? hami::log::Level::kWarn : hami::log::Level::kInfo, "%.*s",
                     int(line.size()), line.data());
    };
    slices = std::make_unique<dra::SliceLoop>(**client, std::move(po), published);
  }

  // The GPUs' health: the inventory's at start, then the NVML event watcher's changes, to the
  // driver (a warning when a claim lands on an unhealthy GPU), the kubelet's health stream and
  // the ResourceSlice (a taint on an unhealthy GPU).
  std::mutex gpus_mu;
  std::vector<dra::Gpu> gpus = dra::GpusFromInventory(*inventory);
  std::map<std::string, dra::DeviceHealth> health_by_uuid;
  const int64_t start_s = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  for (const hami::inventory::Device& dev : inventory->devices) {
    if (dev.uuid.empty() || dev.index < 0) continue;
    health_by_uuid[dev.uuid] = {node_name, dra::DeviceName(dev.index), dev.healthy,
                                dev.health_reason, start_s};
  }
  auto health_list = [&] {
    std::vector<dra::DeviceHealth> out;
    for (const dra::Gpu& g : gpus) out.push_back(health_by_uuid[g.uuid]);
    return out;
  };
  dra::HealthService health(health_list());
  std::unique_ptr<hami::inventory::HealthWatcher> watcher;
  if (!no_health) {
    hami::inventory::HealthOptions ho;
    ho.nvml_library = inventory_options.nvml_library;
    for (const dra::Gpu& g : gpus) ho.uuids.push_back(g.uuid);
    ho.xids = hami::inventory::XidPolicy::FromEnvironment();
    ho.on_change = [&](const hami::inventory::HealthChange& change) {
      std::lock_guard lock(gpus_mu);
      for (dra::Gpu& g : gpus) {
        if (g.uuid == change.uuid) g.healthy = change.healthy;
      }
      dra::DeviceHealth& h = health_by_uuid[change.uuid];
      h.healthy = change.healthy;
      h.message = change.reason;
      h.last_updated_s = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
      hami::log::Log(change.healthy ? hami::log::Level::kInfo : hami::log::Level::kError,
                     "dra event=health gpu=%s healthy=%d reason=\"%s\"", change.uuid.c_str(),
                     int(change.healthy), change.reason.c_str());
      d.SetGpus(gpus);
      health.Set(health_list());
      for (hami::inventory::Device& dev : published.devices) {
        if (dev.uuid != change.uuid) continue;
        dev.healthy = change.healthy;
        dev.health_reason = change.healthy ? "" : change.reason;
      }
      if (slices) slices->Set(published);
    };
    auto started = hami::inventory::HealthWatcher::Start(std::move(ho));
    if (!started.ok()) {
      HAMI_LOG(kWarn, "dra event=health_watch_failed error=\"%s\"",
               started.error().message().c_str());
    } else {
      watcher = std::move(started).value();
    }
  }

  dra::DraV1Service v1(d);
  dra::DraV1beta1Service v1beta1(d);
  const std::string endpoint = plugin_dir + "/" + dra::kDraSocketName;
  health.AcceptStreams();
  auto dra_server =
      dra::SocketServer::Start(endpoint, {&v1, &v1beta1, &health}, [&] { health.EndStreams(); });
  if (!dra_server.ok()) return Fail(dra_server.error().message());
  dra::RegistrationService registration(
      driver_name, endpoint, dra::Health::kServed,
      [](std::string_view line) { HAMI_LOG(kInfo, "%.*s", int(line.size()), line.data()); });
  auto reg_server = dra::SocketServer::Start(
      registry_dir + "/" + dra::RegistrationSocketName(driver_name), {&registration});
  if (!reg_server.ok()) return Fail(reg_server.error().message());
  std::printf("hami-dra-plugin: serving %s on %s, registration on %s\n", driver_name.c_str(),
              endpoint.c_str(), (*reg_server)->path().c_str());
  std::fflush(stdout);

  auto stop = hami::WaitForStop({});
  // The registration socket first: the kubelet stops calling a plugin whose socket is gone.
  (*reg_server)->Stop();
  (*dra_server)->Stop();
  if (watcher) watcher->Stop();
  if (slices) slices->Stop();
  if (!stop.ok()) return Fail(stop.error().message());
  return 0;
}
