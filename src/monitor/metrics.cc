#include "monitor/metrics.h"

#include <set>
#include <unordered_map>

#include "common/prometheus.h"
#include "region/region.h"

namespace hami::monitor {

namespace {

using prometheus::AppendEscaped;
using region::layout::kIdentityReasons;
using region::layout::kIdentitySources;
using region::layout::kUsageKinds;

constexpr char kZone[] = "zone=\"vGPU\"";

// The families in the order they are exposed, each with its samples.
class Exposition {
 public:
  void Declare(const char* name, const char* type, const char* help) {
    index_[name] = families_.size();
    families_.push_back(Family{name, type, help, {}});
  }
  // `labels` already escaped, without zone (added here).
  void Add(const char* name, const std::string& labels, double value) {
    Family& f = families_[index_.at(name)];
    f.body += f.name;
    f.body += '{';
    if (!labels.empty()) {
      f.body += labels;
      f.body += ',';
    }
    f.body += kZone;
    f.body += "} ";
    prometheus::Number(f.body, value);
    f.body += '\n';
  }
  std::string Render() const {
    std::string out;
    size_t total = 0;
    for (const Family& f : families_) total += f.body.size() + 128;
    out.reserve(total);
    for (const Family& f : families_) {
      if (f.body.empty()) continue;
      prometheus::Header(out, f.name, f.help, f.type);
      out += f.body;
    }
    return out;
  }

 private:
  struct Family {
    std::string name;
    std::string type;
    std::string help;
    std::string body;
  };
  std::vector<Family> families_;
  std::unordered_map<std::string, size_t> index_;
};

// key="value" with the value escaped.
void Label(std::string& out, const char* key, std::string_view value) {
  if (!out.empty()) out += ',';
  out += key;
  out += "=\"";
  AppendEscaped(out, value);
  out += '"';
}

std::string ContainerLabels(const RegionView& r) {
  std::string l;
  Label(l, "namespace", r.ns);
  Label(l, "pod", r.pod);
  Label(l, "container", r.claim ? r.claim->container : r.key.container);
  if (r.claim) {
    Label(l, "claim", r.claim->name);
    Label(l, "claim_uid", r.claim->uid);
  }
  return l;
}

const char* IdentitySourceLabel(int s) {
  return region::IdentitySourceName(region::layout::IdentitySource(s));
}

void DeclareAll(Exposition& e) {
  e.Declare("hami_build_info", "gauge", "hami-monitor's version (value 1).");
  e.Declare("hami_host_gpu_memory_used_bytes", "gauge",
            "Device memory in use on the GPU, as NVML reports it.");
  e.Declare("hami_host_gpu_memory_total_bytes", "gauge", "Device memory of the GPU (NVML).");
  e.Declare("hami_host_gpu_utilization_ratio", "gauge",
            "Share of the last sample period in which kernels ran on the GPU (NVML).");
  e.Declare("hami_host_gpu_memory_controller_utilization_ratio", "gauge",
            "Share of the last sample period in which device memory was read or written (NVML).");
  e.Declare("hami_host_gpu_healthy", "gauge",
            "1 while the GPU is healthy (no critical Xid, queries answer), else 0.");
  e.Declare("hami_host_gpu_processes", "gauge", "Processes NVML lists on the GPU.");
  e.Declare("hami_vgpu_memory_used_bytes", "gauge",
            "Device memory the container's region accounts for on the device (its ledger).");
  e.Declare("hami_vgpu_memory_limit_bytes", "gauge",
            "The container's memory limit on the device (0: unlimited).");
  e.Declare("hami_vgpu_memory_peak_bytes", "gauge",
            "The most device memory the container's region has accounted for on the device.");
  e.Declare("hami_vgpu_memory_context_bytes", "gauge", "Device memory charged to CUDA contexts.");
  e.Declare("hami_vgpu_memory_module_bytes", "gauge",
            "Device memory charged to loaded modules (code and globals).");
  e.Declare("hami_vgpu_memory_buffer_bytes", "gauge",
            "Device memory charged to allocations (data, pools, graphs, VMM, other).");
  e.Declare("hami_vgpu_admission_rejections_total", "counter",
            "Allocations the region refused because they would pass the memory limit.");
  e.Declare("hami_container_device_memory_bytes", "gauge",
            "Device memory NVML shows the container's processes holding on the GPU.");
  e.Declare("hami_container_device_utilization_ratio", "gauge",
            "SM utilization NVML shows for the container's processes on the GPU.");
  e.Declare("hami_container_last_kernel_elapsed_seconds", "gauge",
            "Seconds since the container's latest kernel launch.");
  e.Declare("hami_vgpu_core_limit_ratio", "gauge",
            "The container's SM limit on the device (0: unlimited).");
  e.Declare("hami_vgpu_core_limit_in_force_ratio", "gauge",
            "The SM limit the limiter holds the container to now (0: none in force).");
  e.Declare("hami_vgpu_limiter_mode", "gauge",
            "The compute limiter's mode on the device (1 for the current mode).");
  e.Declare("hami_vgpu_limiter_waited_seconds_total", "counter",
            "Time the container's launches waited for compute budget on the device.");
  e.Declare("hami_vgpu_limiter_measured_utilization_ratio", "gauge",
            "The container's SM utilization as the limiter last measured it.");
  e.Declare("hami_container_paused", "gauge",
            "1 while the priority feedback loop pauses the container's work.");
  e.Declare("hami_container_utilization_switch", "gauge",
            "1 while the core limiter limits a container of policy default.");
  e.Declare("hami_container_priority", "gauge", "The container's task priority (0 high, 1 low).");
  e.Declare("hami_container_processes", "gauge", "Live processes registered in the region.");
  e.Declare("hami_container_process_identity", "gauge",
            "One series per live process: its host PID and how it was learned (value 1).");
  e.Declare("hami_container_identity_resolutions_total", "counter",
            "Host-PID resolutions of the container's processes, by source.");
  e.Declare("hami_container_identity_failures_total", "counter",
            "Identity tiers that gave no host PID, by reason.");
  e.Declare("hami_container_region_writable", "gauge",
            "1 when the monitor holds the region read-write (feedback applies), 0 read-only.");
  e.Declare("hami_container_memory_spilled_bytes", "gauge",
            "Allocations past the device budget served from host memory (oversubscription).");
  e.Declare("hami_container_memory_host_limit_bytes", "gauge",
            "The host budget those allocations draw on (0: none).");
  e.Declare("hami_container_memory_spill_rejections_total", "counter",
            "Allocations refused with both the device and the host budget spent.");
  e.Declare("hami_container_memory_imported_bytes", "gauge",
            "Other processes' memory the container's processes map (never charged to it).");
  e.Declare("hami_container_unaccounted_memory_bytes", "gauge",
            "Device memory NVML shows a process holding that no region accounts for.");
  e.Declare("hami_claim_container_info", "gauge",
            "A container using a DRA claim's region (value 1; one series per container).");
  e.Declare("hami_monitor_containers", "gauge", "Container directories by state.");
  e.Declare("hami_monitor_region_errors", "gauge",
            "Region files the monitor refuses (value 1 per file and reason).");
  e.Declare("hami_monitor_scans_total", "counter", "Scans of the container directories.");
  e.Declare("hami_monitor_nvml_samples_total", "counter", "NVML samples taken, by outcome.");
  e.Declare("hami_monitor_pods_synced", "gauge", "1 once the pod informer has synced.");
  e.Declare("hami_monitor_events_total", "counter", "Warning events recorded on pods.");
  e.Declare("hami_monitor_cleanup_enabled", "gauge",
            "1 when this monitor holds the node's cleanup lock and cleans up.");
  e.Declare("hami_monitor_cleanup_passes_total", "counter", "Cleanup passes.");
  e.Declare("hami_monitor_cleanup_list_failures_total", "counter",
            "Cleanup passes whose pod list failed (nothing is removed until a resync).");
  e.Declare("hami_monitor_cleanup_removed_total", "counter",
            "Container directories removed with their limits files.");
  e.Declare("hami_monitor_cleanup_errors_total", "counter", "Errors during cleanup passes.");
  e.Declare("hami_monitor_cleanup_candidates", "gauge",
            "Directories whose pod was absent at the latest pass.");
  e.Declare("hami_monitor_cleanup_kept_attached", "gauge",
            "Directories of absent pods kept because a live process is attached.");
  e.Declare("hami_monitor_feedback_passes_total", "counter", "Priority feedback passes.");
  e.Declare("hami_monitor_feedback_regions", "gauge",
            "Regions the latest feedback pass saw, by state.");
  e.Declare("hami_monitor_feedback_writes_total", "counter",
            "Pause and utilization-switch values the feedback loop changed.");
  e.Declare("hami_monitor_feedback_errors_total", "counter",
            "Feedback changes a region refused (left as it was).");
}

}  // namespace

std::string RenderMetrics(const MetricsInput& in) {
  Exposition e;
  DeclareAll(e);
  {
    std::string l;
    Label(l, "version", in.version);
    Label(l, "node", in.node);
    e.Add("hami_build_info", l, 1);
  }
  if (in.sample != nullptr) {
    for (const inventory::GpuSample& g : in.sample->gpus) {
      std::string l;
      Label(l, "node", in.node);
      Label(l, "device_index", std::to_string(g.index));
      Label(l, "device_uuid", g.uuid);
      Label(l, "device_type", g.name);
      e.Add("hami_host_gpu_memory_used_bytes", l, double(g.memory_used_bytes));
      e.Add("hami_host_gpu_memory_total_bytes", l, double(g.memory_total_bytes));
      e.Add("hami_host_gpu_utilization_ratio", l, g.utilization);
      e.Add("hami_host_gpu_memory_controller_utilization_ratio", l, g.memory_utilization);
      bool healthy = g.ok;
      if (auto h = in.health.find(g.uuid); h != in.health.end())
        healthy = healthy && h->second.healthy;
      e.Add("hami_host_gpu_healthy", l, healthy ? 1 : 0);
      e.Add("hami_host_gpu_processes", l, double(g.processes.size()));
    }
  }

  std::set<std::tuple<std::string, std::string, int, std::string>> seen_devices;
  std::set<ContainerKey> seen_containers;
  for (const RegionView& r : in.regions) {
    const std::string cl = ContainerLabels(r);
    const bool first_of_container = seen_containers.insert(r.key).second;
    for (const DeviceView& d : r.devices) {
      if (!seen_devices.emplace(r.key.pod_uid, r.key.container, d.vdevice_index, d.uuid).second) {
        continue;
      }
      std::string l = cl;
      Label(l, "vdevice_index", std::to_string(d.vdevice_index));
      Label(l, "device_uuid", d.uuid);
      e.Add("hami_vgpu_memory_used_bytes", l, double(d.used_bytes));
      e.Add("hami_vgpu_memory_limit_bytes", l, double(d.limit_bytes));
      e.Add("hami_vgpu_memory_peak_bytes", l, double(d.peak_bytes));
      using region::layout::UsageKind;
      const auto& k = d.kind_bytes;
      e.Add("hami_vgpu_memory_context_bytes", l, double(k[size_t(UsageKind::kContext)]));
      e.Add("hami_vgpu_memory_module_bytes", l, double(k[size_t(UsageKind::kModule)]));
      uint64_t buffers = 0;
      for (int i = 0; i < kUsageKinds; ++i) {
        if (i != int(UsageKind::kContext) && i != int(UsageKind::kModule)) buffers += k[size_t(i)];
      }
      e.Add("hami_vgpu_memory_buffer_bytes", l, double(buffers));
      e.Add("hami_vgpu_admission_rejections_total", l, double(d.rejected));
      if (d.nvml_bytes) e.Add("hami_container_device_memory_bytes", l, double(*d.nvml_bytes));
      if (d.nvml_utilization) {
        e.Add("hami_container_device_utilization_ratio", l, *d.nvml_utilization);
      }
      if (r.last_kernel_elapsed_seconds) {
        e.Add("hami_container_last_kernel_elapsed_seconds", l, *r.last_kernel_elapsed_seconds);
      }
      e.Add("hami_vgpu_core_limit_ratio", l, d.sm_limit >= 100 ? 0 : double(d.sm_limit) / 100.0);
      e.Add("hami_vgpu_core_limit_in_force_ratio", l, double(d.sm_limit_in_force) / 100.0);
      for (auto mode :
           {region::layout::LimiterMode::kOff, region::layout::LimiterMode::kStarting,
            region::layout::LimiterMode::kClosedLoop, region::layout::LimiterMode::kOpenLoop}) {
        std::string ml = l;
        Label(ml, "mode", region::LimiterModeName(mode));
        e.Add("hami_vgpu_limiter_mode", ml, d.limiter_mode == mode ? 1 : 0);
      }
      e.Add("hami_vgpu_limiter_waited_seconds_total", l, d.limiter_waited_seconds);
      e.Add("hami_vgpu_limiter_measured_utilization_ratio", l, d.limiter_measured_ratio);
    }
    if (!first_of_container) continue;
    e.Add("hami_container_paused", cl, r.paused ? 1 : 0);
    e.Add("hami_container_utilization_switch", cl, r.utilization_switch ? 1 : 0);
    e.Add("hami_container_priority", cl, r.priority);
    e.Add("hami_container_processes", cl, double(r.processes.size()));
    e.Add("hami_container_region_writable", cl, r.writable ? 1 : 0);
    e.Add("hami_container_memory_spilled_bytes", cl, double(r.spilled_bytes));
    e.Add("hami_container_memory_host_limit_bytes", cl, double(r.host_limit_bytes));
    e.Add("hami_container_memory_spill_rejections_total", cl, double(r.spill_rejected));
    e.Add("hami_container_memory_imported_bytes", cl, double(r.imported_bytes));
    for (const ProcessView& p : r.processes) {
      std::string l = cl;
      Label(l, "pid", std::to_string(p.pid));
      Label(l, "host_pid", std::to_string(p.host_pid));
      Label(l, "source", region::IdentitySourceName(p.identity));
      e.Add("hami_container_process_identity", l, 1);
    }
    for (int s = 0; s < kIdentitySources; ++s) {
      if (r.identity_by_source[size_t(s)] == 0) continue;
      std::string l = cl;
      Label(l, "source", IdentitySourceLabel(s));
      e.Add("hami_container_identity_resolutions_total", l,
            double(r.identity_by_source[size_t(s)]));
    }
    for (int s = 1; s < kIdentityReasons; ++s) {
      if (r.identity_reasons[size_t(s)] == 0) continue;
      std::string l = cl;
      Label(l, "reason", region::IdentityReasonName(region::layout::IdentityReason(s)));
      e.Add("hami_container_identity_failures_total", l, double(r.identity_reasons[size_t(s)]));
    }
  }

  for (const UnaccountedProcess& u : in.unaccounted) {
    std::string ns, pod;
    if (auto it = in.pods_by_uid.find(u.attribution.key.pod_uid);
        !u.attribution.key.pod_uid.empty() && it != in.pods_by_uid.end()) {
      ns = it->second.ns;
      pod = it->second.pod;
    }
    std::string l;
    Label(l, "namespace", ns);
    Label(l, "pod", pod);
    Label(l, "container", u.attribution.key.container);
    Label(l, "device_uuid", u.device_uuid);
    Label(l, "pid", std::to_string(u.pid));
    Label(l, "reason", UnaccountedReasonName(u.reason));
    Label(l, "attribution", AttributionSourceName(u.attribution.source));
    e.Add("hami_container_unaccounted_memory_bytes", l, double(u.unaccounted_bytes));
  }

  for (const ClaimUseView& c : in.claim_uses) {
    std::string l;
    Label(l, "namespace", c.ns);
    Label(l, "pod", c.pod);
    Label(l, "container", c.container);
    Label(l, "claim", c.claim);
    Label(l, "claim_uid", c.claim_uid);
    e.Add("hami_claim_container_info", l, 1);
  }

  {
    std::string l;
    Label(l, "state", "with_pod");
    e.Add("hami_monitor_containers", l, double(in.containers - in.containers_without_pod));
    l.clear();
    Label(l, "state", "no_pod");
    e.Add("hami_monitor_containers", l, double(in.containers_without_pod));
  }
  for (const RegionErrorView& err : in.region_errors) {
    std::string l;
    Label(l, "path", err.path);
    Label(l, "reason", err.reason);
    e.Add("hami_monitor_region_errors", l, 1);
  }
  e.Add("hami_monitor_scans_total", "", double(in.scans));
  e.Add("hami_monitor_nvml_samples_total", "outcome=\"ok\"", double(in.nvml_samples));
  e.Add("hami_monitor_nvml_samples_total", "outcome=\"failed\"", double(in.nvml_failures));
  e.Add("hami_monitor_pods_synced", "", in.pods_synced ? 1 : 0);
  e.Add("hami_monitor_events_total", "", double(in.events_recorded));
  e.Add("hami_monitor_cleanup_enabled", "", in.cleanup.enabled ? 1 : 0);
  e.Add("hami_monitor_cleanup_passes_total", "", double(in.cleanup.passes));
  e.Add("hami_monitor_cleanup_list_failures_total", "", double(in.cleanup.list_failures));
  e.Add("hami_monitor_cleanup_removed_total", "", double(in.cleanup.removed));
  e.Add("hami_monitor_cleanup_errors_total", "", double(in.cleanup.errors));
  e.Add("hami_monitor_cleanup_candidates", "", double(in.cleanup.candidates));
  e.Add("hami_monitor_cleanup_kept_attached", "", double(in.cleanup.kept_attached));
  e.Add("hami_monitor_feedback_passes_total", "", double(in.feedback.passes));
  e.Add("hami_monitor_feedback_regions", "state=\"seen\"", double(in.feedback.regions));
  e.Add("hami_monitor_feedback_regions", "state=\"active\"", double(in.feedback.active));
  e.Add("hami_monitor_feedback_regions", "state=\"paused\"", double(in.feedback.paused));
  e.Add("hami_monitor_feedback_regions", "state=\"switched_on\"", double(in.feedback.switched_on));
  e.Add("hami_monitor_feedback_writes_total", "", double(in.feedback.writes));
  e.Add("hami_monitor_feedback_errors_total", "", double(in.feedback.errors));
  return e.Render();
}

}  // namespace hami::monitor
