#include "plugin/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/file.h"
#include "common/stop_signals.h"
#include "common/strings.h"
#include "common/unique_fd.h"
#include "log/log.h"

namespace hami::plugin {

namespace {}  // namespace

DeviceOptions DeviceOptionsFor(const PluginConfig& config) {
  DeviceOptions o;
  o.split_count = config.device.device_split_count;
  o.memory_scaling = config.device.device_memory_scaling;
  o.core_scaling = config.device.device_core_scaling;
  o.pre_configured_memory_mib = config.device.pre_configured_device_memory;
  o.enable_numa_topology = config.device.enable_numa_topology;
  o.mode = std::string(OperatingModeName(config.operating_mode));
  o.exclude_uuids = config.filter.uuids;
  o.exclude_indices = config.filter.indices;
  return o;
}

std::vector<NodeGpu> NodeGpusFor(const DeviceView& view) {
  std::vector<NodeGpu> gpus;
  gpus.reserve(view.node_devices.size());
  for (const kube::NodeDevice& d : view.node_devices) {
    gpus.push_back(NodeGpu{d.id, d.index, d.health});
  }
  return gpus;
}

std::string DaemonCounters::ToKeyValues() const {
  std::string out = "allocations=" + std::to_string(allocator.allocations) +
                    " replays=" + std::to_string(allocator.replays) +
                    " allocate_failures=" + std::to_string(allocator.failures) + " " +
                    service.ToKeyValues() + " " + registrar.ToKeyValues() +
                    " register_checks=" + std::to_string(register_loop.checks) +
                    " register_writes=" + std::to_string(register_loop.writes) +
                    " register_status_writes=" + std::to_string(register_loop.status_writes) +
                    " register_errors=" + std::to_string(register_loop.errors);
  if (broker) {
    // Each broker counter prefixed, so that the line stays one flat key space.
    const std::string kv = broker->ToKeyValues();
    std::vector<std::string_view> pairs = SplitString(kv, ' ', false);
    if (pairs.back().empty()) pairs.pop_back();  // "" and a trailing ' '
    for (std::string_view pair : pairs) {
      out += " broker_";
      out += pair;
    }
  }
  return out;
}

DeviceView Daemon::View() const {
  HealthMap health;
  {
    MutexLock lock(&health_mu_);
    health = health_;
  }
  return ComputeDevices(inventory_, device_options_, health);
}

Status Daemon::InstallHookFiles() {
  return plugin::InstallHookFiles(options_.hook_path, options_.vgpu_library);
}

void Daemon::OnHealthChange(const inventory::HealthChange& change) {
  {
    MutexLock lock(&health_mu_);
    health_[change.uuid] = change.healthy;
  }
  log::Log(change.healthy ? log::Level::kInfo : log::Level::kError,
           "event=health gpu=%s healthy=%d reason=\"%s\"", change.uuid.c_str(), int(change.healthy),
           change.reason.c_str());
  Republish();
  register_loop_->Kick();
}

void Daemon::Republish() {
  DeviceView view = View();
  allocator_->SetGpus(NodeGpusFor(view));
  service_->SetDevices(std::move(view.replicas));
}

Result<std::unique_ptr<Daemon>> Daemon::Start(kube::Config config, DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon());
  d->options_ = std::move(options);
  const DaemonOptions& o = d->options_;

  // 1. The configuration.
  auto plugin_config = LoadPluginConfig(o.config);
  if (!plugin_config.ok()) return plugin_config.error();
  d->config_ = std::move(plugin_config).value();
  d->device_options_ = DeviceOptionsFor(d->config_);
  if (Status s = ValidateDeviceOptions(d->device_options_); !s.ok()) return s.error();

  // 2. The GPUs.
  auto inventory = inventory::ReadInventory(o.inventory);
  if (!inventory.ok()) {
    return Error(inventory.error().code(),
                 "reading the node's GPUs: " + inventory.error().message());
  }
  d->inventory_ = std::move(inventory).value();
  DeviceView view = d->View();
  for (const std::string& line : view.skipped) HAMI_LOG(kWarn, "%s", line.c_str());
  if (view.node_devices.empty()) {
    return Error(ErrorCode::kNotFound, "no GPU to advertise on node " + d->config_.node_name +
                                           " (NVML listed " +
                                           std::to_string(d->inventory_.devices.size()) +
                                           "; see the lines above for why each was left out)");
  }

  // 3. The hook directory.
  if (d->config_.operating_mode == OperatingMode::kHamiCore) {
    if (Status s = d->InstallHookFiles(); !s.ok()) {
      return Error(s.error().code(),
                   "preparing the hook path " + o.hook_path + ": " + s.error().message());
    }
  }

  // 4. The broker.
  BrokerHostOptions broker_options;
  broker_options.gate = o.broker_gate;
  broker_options.socket_dir = o.broker_dir;
  auto broker = StartBrokerHost(broker_options);
  if (!broker.ok()) return broker.error();
  d->broker_ = std::move(broker).value();

  // 5. The API client, the allocator, the service.
  auto client = kube::Client::Create(std::move(config), o.client);
  if (!client.ok()) return client.error();
  d->client_ = std::move(client).value();
  AllocatorOptions allocator_options;
  allocator_options.hook_path = o.hook_path;
  allocator_options.broker = d->broker_ != nullptr ? Broker::kEnabled : Broker::kDisabled;
  allocator_options.lock_dir.parent = o.lock_parent;
  allocator_options.broker_host_dir = o.broker_dir;
  allocator_options.log = [](std::string_view line) {
    HAMI_LOG(kInfo, "%.*s", int(line.size()), line.data());
  };
  d->allocator_ = std::make_unique<Allocator>(*d->client_, d->config_, NodeGpusFor(view),
                                              std::move(allocator_options));
  ServiceOptions service_options;
  service_options.resource_name = d->config_.device.resource_count_name;
  service_options.allocate = d->allocator_->AllocateFunction();
  service_options.prefer = d->allocator_->PreferFunction();
  service_options.offer_preferred_allocation = d->config_.enable_preferred_allocation;
  d->service_ = std::make_unique<DevicePluginService>(std::move(service_options));
  d->service_->SetDevices(view.replicas);

  // 7 (built before 6, which kicks it). The registration loop.
  RegisterLoopOptions loop_options;
  loop_options.node_name = d->config_.node_name;
  loop_options.period = o.register_period;
  loop_options.error_retry = o.register_retry;
  loop_options.advertise =
      d->config_.device.advertise_memory_and_cores ? Advertise::kOn : Advertise::kOff;
  loop_options.resource_names = {d->config_.device.resource_memory_name,
                                 d->config_.device.resource_core_name};
  Daemon* self = d.get();
  loop_options.devices = [self]() -> Result<std::vector<kube::NodeDevice>> {
    return self->View().node_devices;
  };
  d->register_loop_ = std::make_unique<RegisterLoop>(*d->client_, std::move(loop_options));

  // 6. Health.
  if (o.health_checks) {
    inventory::HealthOptions health_options;
    health_options.nvml_library = o.inventory.nvml_library;
    for (const kube::NodeDevice& dev : view.node_devices) health_options.uuids.push_back(dev.id);
    health_options.xids = inventory::XidPolicy::FromEnvironment();
    for (const std::string& w : health_options.xids.warnings()) {
      HAMI_LOG(kWarn, "%s", w.c_str());
    }
    health_options.on_change = [self](const inventory::HealthChange& change) {
      self->OnHealthChange(change);
    };
    auto watcher = inventory::HealthWatcher::Start(std::move(health_options));
    if (!watcher.ok()) {
      return Error(watcher.error().code(), "watching GPU health: " + watcher.error().message());
    }
    d->health_watcher_ = std::move(watcher).value();
    for (const std::string& uuid : d->health_watcher_->unwatched()) {
      HAMI_LOG(kWarn,
               "event=health_unwatched gpu=%s: NVML cannot report its errors; it stays healthy",
               uuid.c_str());
    }
    // A GPU the watcher found unusable at its start.
    HealthMap initial = d->health_watcher_->health();
    bool changed = false;
    {
      MutexLock lock(&d->health_mu_);
      for (const auto& [uuid, healthy] : initial) {
        if (!healthy) {
          d->health_[uuid] = false;
          changed = true;
        }
      }
    }
    if (changed) d->Republish();
  }
  d->register_loop_->Start();
  d->resize_ = std::make_unique<ResizeApplier>(
      *d->client_, ResizeApplierOptions{d->config_.node_name, o.hook_path, o.resize_period,
                                        d->config_.device.device_memory_scaling});
  d->resize_->Start();

  // The kubelet.
  d->registrar_ = std::make_unique<Registrar>(d->service_.get(), o.registrar);
  if (Status s = d->registrar_->Start(); !s.ok()) return s.error();
  d->plugin_socket_ = d->registrar_->plugin_socket();

  HAMI_LOG(kInfo,
           "event=started node=%s gpus=%zu replicas=%zu resource=%s delivery=%s mode=%s "
           "broker=%s advertise_memory_and_cores=%d socket=%s",
           d->config_.node_name.c_str(), view.node_devices.size(), view.replicas.size(),
           d->config_.device.resource_count_name.c_str(),
           std::string(LimitDeliveryName(d->config_.limit_delivery)).c_str(),
           std::string(OperatingModeName(d->config_.operating_mode)).c_str(),
           d->broker_ != nullptr ? d->broker_->socket_path().c_str() : "off",
           int(d->config_.device.advertise_memory_and_cores), d->plugin_socket_.c_str());
  return d;
}

Daemon::~Daemon() { Stop(); }

void Daemon::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (registrar_ != nullptr) registrar_->Stop();
  if (health_watcher_ != nullptr) health_watcher_->Stop();
  if (register_loop_ != nullptr) register_loop_->Stop();
  if (resize_ != nullptr) resize_->Stop();
  if (service_ != nullptr) {
    HAMI_LOG(kInfo, "event=stopped %s", Counters().ToKeyValues().c_str());
  }
  if (broker_ != nullptr) broker_->Stop();
}

Status Daemon::Wait(int stop_fd) {
  const int broker_fd = broker_ != nullptr ? broker_->done_fd() : -1;
  StopEvent event = HAMI_TRY(WaitForStop({broker_fd, stop_fd}));
  if (event.signal != 0) {
    HAMI_LOG(kInfo, "event=signal signal=%s", strsignal(event.signal));
    return OkStatus();
  }
  if (event.fd_index == 0) {
    Status s = broker_->Wait();
    if (!s.ok()) {
      HAMI_LOG(kError, "event=broker_stopped: %s", s.error().message().c_str());
      return s;
    }
    return Error(ErrorCode::kUnavailable, "the host-PID broker stopped");
  }
  return OkStatus();
}

std::vector<ReplicaDevice> Daemon::Devices() const { return service_->Devices(); }

DaemonCounters Daemon::Counters() const {
  DaemonCounters c;
  c.allocator = allocator_->stats();
  c.service = service_->Counters();
  if (registrar_ != nullptr) c.registrar = registrar_->Counters();
  c.register_loop = register_loop_->stats();
  if (broker_ != nullptr) c.broker = broker_->Counters();
  return c;
}

bool Daemon::WaitForRegistrations(uint64_t count, int64_t timeout_ms) const {
  return registrar_->WaitForRegistrations(count, timeout_ms);
}

}  // namespace hami::plugin
