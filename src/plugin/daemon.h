// The hami-device-plugin daemon assembled from its parts, with explicit lifetimes. main.cc
// parses flags into DaemonOptions and runs one; the end-to-end tests and `hami bench plugin`
// run it in-process or as the real binary.
//
// Start, in order (any failure stops there, undoes what was started, and is returned naming
// the step; the plugin then exits rather than serve a node it cannot limit):
//   1. the configuration: device-config.yaml and config.json resolved for this node (config.h);
//   2. the node's GPUs from NVML (inventory.h), turned into replicas and the register
//      annotation (devices.h); a node without GPUs is refused;
//   3. the hook directory: libvgpu.so and ld.so.preload installed under <hook>/vgpu/ (when
//      `vgpu_library` names the library to install), <hook>/vgpu/containers/ made;
//   4. the host-PID broker (broker_host.h), when its gate is exactly "1";
//   5. the API client, the allocator (allocator.h), the DevicePlugin service (api.h);
//   6. the health watcher (inventory/health.h): a GPU's critical Xid resends ListAndWatch, updates
//   the
//      allocator's view and kicks the registration loop;
//   7. the registration loop (register_loop.h), which also keeps the Node's status resources
//      (node_resources.h: advertiseMemoryAndCores), and the kubelet registrar (registrar.h).
// Stop ends them in reverse. Wait blocks until a stop signal (SIGINT, SIGTERM: they must be
// blocked in every thread before Start, so that the threads started here inherit the mask) or
// until the broker ends on its own, which is an error (seed 000: the plugin exits with it).
//
// Thread safety: Start, Wait and Stop from one thread; the accessors from any.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/mutex.h"
#include "common/result.h"
#include "inventory/health.h"
#include "inventory/inventory.h"
#include "kube/client.h"
#include "kube/config.h"
#include "node/paths.h"
#include "plugin/allocator.h"
#include "plugin/api.h"
#include "plugin/broker_host.h"
#include "plugin/config.h"
#include "plugin/devices.h"
#include "plugin/register_loop.h"
#include "plugin/registrar.h"
#include "plugin/resize.h"

namespace hami::plugin {

struct DaemonOptions {
  LoadOptions config;  // node name (resolved), device-config.yaml, config.json
  std::string hook_path = node::kDefaultHookPath;  // --hook-path
  RegistrarOptions registrar;                      // --kubelet-socket
  inventory::Options inventory;                    // NVML, libcuda, sysfs
  std::optional<std::string> broker_gate;          // LIBVGPU_HOSTPID_BROKER
  std::string broker_dir = node::kBrokerHostDir;   // --broker-dir
  std::string lock_parent = node::kLockDirParent;  // tests only
  // The libvgpu.so to install as <hook>/vgpu/libvgpu.so (copied, then renamed into place);
  // empty: the hook directory is expected to hold one already (checked).
  std::string vgpu_library;
  std::chrono::milliseconds register_period{30000};
  // How often the node's pods are looked at for an accepted resize (plugin/resize.h).
  std::chrono::milliseconds resize_period{2000};
  std::chrono::milliseconds register_retry{5000};
  bool health_checks = true;  // false: no NVML event watcher (the GPUs stay as NVML listed them)
  kube::ClientOptions client;
};

struct DaemonCounters {
  Allocator::Stats allocator;
  ServiceCounters service;
  RegistrarCounters registrar;
  RegisterLoop::Stats register_loop;
  std::optional<broker::ServerCounters> broker;  // when the broker runs
  // "allocations=3 replays=0 failures=0 allocate_calls=3 ... broker_accepted=2": a
  // structured log line.
  std::string ToKeyValues() const;
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Start(kube::Config config, DaemonOptions options);
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Until SIGINT or SIGTERM (OK) or the broker's end (its error). `stop_fd`, when >= 0, is
  // another descriptor whose readability ends the wait (OK), for in-process users.
  Status Wait(int stop_fd = -1);
  void Stop();

  const PluginConfig& config() const { return config_; }
  const std::string& plugin_socket() const { return plugin_socket_; }
  std::vector<ReplicaDevice> Devices() const;
  DaemonCounters Counters() const;
  bool WaitForRegistrations(uint64_t count, int64_t timeout_ms) const;

 private:
  Daemon() = default;
  Status InstallHookFiles();
  void OnHealthChange(const inventory::HealthChange& change);
  // The GPUs' current view (inventory and health) given to the allocator and to ListAndWatch.
  void Republish();
  DeviceView View() const;

  DaemonOptions options_;
  PluginConfig config_;
  DeviceOptions device_options_;
  inventory::Inventory inventory_;
  std::string plugin_socket_;

  mutable Mutex health_mu_;
  HealthMap health_ GUARDED_BY(health_mu_);

  std::unique_ptr<BrokerHost> broker_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<DevicePluginService> service_;
  std::unique_ptr<RegisterLoop> register_loop_;
  std::unique_ptr<ResizeApplier> resize_;
  std::unique_ptr<inventory::HealthWatcher> health_watcher_;
  std::unique_ptr<Registrar> registrar_;
  bool stopped_ = false;
};

// The device options (devices.h) that a resolved configuration means.
DeviceOptions DeviceOptionsFor(const PluginConfig& config);
// The allocator's view of the GPUs (allocate.h) in a device view's node devices.
std::vector<NodeGpu> NodeGpusFor(const DeviceView& view);

}  // namespace hami::plugin
