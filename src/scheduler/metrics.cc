#include "scheduler/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "scheduler/state.h"

namespace hami::scheduler {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// What a GPU leaves of its memory (MiB) and cores: nothing while it is unhealthy.
int64_t FreeMemoryMib(const ClusterState::GpuReport& g) {
  return g.device.health ? std::max<int64_t>(0, g.device.devmem_mib - g.used.mem_mib) : 0;
}
int64_t FreeCores(const ClusterState::GpuReport& g) {
  return g.device.health ? std::max<int64_t>(0, g.device.devcore - g.used.cores) : 0;
}

using prometheus::Escape;
using prometheus::Header;
using prometheus::Number;
using prometheus::Sample;

}  // namespace

std::string_view BindFailureName(BindFailure f) {
  switch (f) {
    case BindFailure::kInvalid:
      return "invalid";
    case BindFailure::kPodNotFound:
      return "pod_not_found";
    case BindFailure::kNodeUnknown:
      return "node_unknown";
    case BindFailure::kNoFit:
      return "no_fit";
    case BindFailure::kLockBusy:
      return "lock_busy";
    case BindFailure::kApi:
      return "api";
    case BindFailure::kCount:
      break;
  }
  return "unknown";
}

void SchedulerMetrics::CountRequest(std::string_view verb, int code) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(verb), code}];
}

void SchedulerMetrics::CountBindFailure(BindFailure f) {
  bind_failures_[static_cast<size_t>(f)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t SchedulerMetrics::bind_failures(BindFailure f) const {
  return bind_failures_[static_cast<size_t>(f)].load(std::memory_order_relaxed);
}

std::string SchedulerMetrics::Render(const ClusterState& state, bool ready) const {
  std::string out;
  const auto gpus = state.Gpus();
  out.reserve(256 + gpus.size() * 7 * 160);
  std::vector<std::string> labels;
  labels.reserve(gpus.size());
  for (const auto& g : gpus) {
    labels.push_back("node=\"" + Escape(g.node) + "\",device_uuid=\"" + Escape(g.device.id) +
                     "\",device_index=\"" + std::to_string(g.device.index) + "\",device_type=\"" +
                     Escape(g.device.type) + "\"");
  }
  struct GpuMetric {
    const char* name;
    const char* help;
    double (*value)(const ClusterState::GpuReport&);
  };
  static constexpr GpuMetric kGpuMetrics[] = {
      {"hami_gpu_memory_limit_bytes", "GPU memory the device offers for sharing.",
       [](const ClusterState::GpuReport& g) { return g.device.devmem_mib * kMiB; }},
      {"hami_gpu_core_limit_ratio", "GPU compute the device offers (1 = the whole device).",
       [](const ClusterState::GpuReport& g) { return g.device.devcore / 100.0; }},
      {"hami_gpu_memory_allocated_bytes", "GPU memory allocated to pods.",
       [](const ClusterState::GpuReport& g) { return double(g.used.mem_mib) * kMiB; }},
      {"hami_gpu_core_allocated_ratio", "GPU compute allocated to pods (1 = the whole device).",
       [](const ClusterState::GpuReport& g) { return double(g.used.cores) / 100.0; }},
      {"hami_gpu_shared_count", "Pods holding a share of the GPU.",
       [](const ClusterState::GpuReport& g) { return double(g.used.slots); }},
      {"hami_node_gpu_overview", "GPU memory allocated to pods, by GPU of each node.",
       [](const ClusterState::GpuReport& g) { return double(g.used.mem_mib) * kMiB; }},
      {"hami_node_gpu_memory_allocated_ratio", "GPU memory allocated over memory offered.",
       [](const ClusterState::GpuReport& g) {
         return g.device.devmem_mib > 0 ? double(g.used.mem_mib) / g.device.devmem_mib : 0.0;
       }},
      {"hami_gpu_memory_free_bytes",
       "GPU memory offered and not allocated to pods (0 while the GPU is unhealthy).",
       [](const ClusterState::GpuReport& g) { return double(FreeMemoryMib(g)) * kMiB; }},
      {"hami_gpu_core_free_ratio",
       "GPU compute offered and not allocated to pods (1 = the whole device; 0 while the GPU is "
       "unhealthy).",
       [](const ClusterState::GpuReport& g) { return double(FreeCores(g)) / 100.0; }},
  };
  for (const GpuMetric& m : kGpuMetrics) {
    Header(out, m.name, m.help, "gauge");
    for (size_t i = 0; i < gpus.size(); ++i) Sample(out, m.name, labels[i], m.value(gpus[i]));
  }

  // Per-GPU figures summed per node (the GPUs come sorted by node).
  static constexpr GpuMetric kNodeMetrics[] = {
      {"hami_node_gpu_memory_limit_bytes", "GPU memory the node's GPUs offer for sharing.",
       [](const ClusterState::GpuReport& g) { return g.device.devmem_mib * kMiB; }},
      {"hami_node_gpu_memory_allocated_bytes", "GPU memory allocated to pods on the node.",
       [](const ClusterState::GpuReport& g) { return double(g.used.mem_mib) * kMiB; }},
      {"hami_node_gpu_memory_free_bytes",
       "GPU memory of the node's healthy GPUs not allocated to pods.",
       [](const ClusterState::GpuReport& g) { return double(FreeMemoryMib(g)) * kMiB; }},
      {"hami_node_gpu_core_limit_ratio", "GPU compute the node's GPUs offer (1 = one device).",
       [](const ClusterState::GpuReport& g) { return g.device.devcore / 100.0; }},
      {"hami_node_gpu_core_allocated_ratio",
       "GPU compute allocated to pods on the node (1 = one device).",
       [](const ClusterState::GpuReport& g) { return double(g.used.cores) / 100.0; }},
      {"hami_node_gpu_core_free_ratio",
       "GPU compute of the node's healthy GPUs not allocated to pods (1 = one device).",
       [](const ClusterState::GpuReport& g) { return double(FreeCores(g)) / 100.0; }},
  };
  for (const GpuMetric& m : kNodeMetrics) {
    Header(out, m.name, m.help, "gauge");
    for (size_t i = 0; i < gpus.size();) {
      double sum = 0;
      size_t j = i;
      for (; j < gpus.size() && gpus[j].node == gpus[i].node; ++j) sum += m.value(gpus[j]);
      Sample(out, m.name, "node=\"" + Escape(gpus[i].node) + "\"", sum);
      i = j;
    }
  }

  const auto shares = state.Shares();
  Header(out, "hami_vgpu_memory_allocated_bytes", "GPU memory allocated to a container on one GPU.",
         "gauge");
  std::string core_lines;
  for (const auto& [key, s] : shares) {
    for (size_t c = 0; c < s.devices.size(); ++c) {
      for (const auto& d : s.devices[c]) {
        const std::string l = "namespace=\"" + Escape(s.ns) + "\",node=\"" + Escape(s.node) +
                              "\",pod=\"" + Escape(s.name) + "\",container_index=\"" +
                              std::to_string(c) + "\",device_uuid=\"" + Escape(d.uuid) + "\"";
        Sample(out, "hami_vgpu_memory_allocated_bytes", l, d.mem_mib * kMiB);
        Sample(core_lines, "hami_vgpu_core_allocated_ratio", l, d.cores / 100.0);
      }
    }
  }
  Header(out, "hami_vgpu_core_allocated_ratio",
         "GPU compute allocated to a container on one GPU (1 = the whole device).", "gauge");
  out += core_lines;

  const auto quotas = state.Quotas();
  const config::DeviceConfig& config = state.config();
  const std::string mem_resource = "limits." + config.resource_memory_name;
  const std::string core_resource = "limits." + config.resource_core_name;
  std::string limit_lines;
  Header(out, "hami_resource_quota_used",
         "What a namespace's pods hold of a GPU quota (MiB of memory, percent of compute).",
         "gauge");
  for (const auto& [ns, qu] : quotas) {
    const auto& [quota, used] = qu;
    const std::string base = "namespace=\"" + Escape(ns) + "\",resource=\"";
    if (quota.memory_mib) {
      Sample(out, "hami_resource_quota_used", base + Escape(mem_resource) + "\"",
             double(used.memory_mib));
      Sample(limit_lines, "hami_resource_quota_limit", base + Escape(mem_resource) + "\"",
             double(*quota.memory_mib));
    }
    if (quota.cores) {
      Sample(out, "hami_resource_quota_used", base + Escape(core_resource) + "\"",
             double(used.cores));
      Sample(limit_lines, "hami_resource_quota_limit", base + Escape(core_resource) + "\"",
             double(*quota.cores));
    }
  }
  Header(out, "hami_resource_quota_limit",
         "A namespace's GPU quota (MiB of memory, percent of compute).", "gauge");
  out += limit_lines;

  filter_seconds.Render(out, "hami_scheduler_filter_duration_seconds",
                        "Time to answer a filter request.");
  prioritize_seconds.Render(out, "hami_scheduler_prioritize_duration_seconds",
                            "Time to answer a prioritize request.");
  bind_seconds.Render(out, "hami_scheduler_bind_duration_seconds",
                      "Time to answer a bind request, node lock and API writes included.");

  Header(out, "hami_scheduler_requests_total", "Extender requests answered, by verb and status.",
         "counter");
  {
    std::lock_guard lock(mu_);
    for (const auto& [k, v] : requests_) {
      Sample(out, "hami_scheduler_requests_total",
             "verb=\"" + Escape(k.first) + "\",code=\"" + std::to_string(k.second) + "\"",
             double(v));
    }
  }
  Header(out, "hami_scheduler_bind_failures_total", "Binds that failed, by reason.", "counter");
  for (size_t i = 0; i < bind_failures_.size(); ++i) {
    Sample(out, "hami_scheduler_bind_failures_total",
           "reason=\"" + std::string(BindFailureName(BindFailure(i))) + "\"",
           double(bind_failures_[i].load(std::memory_order_relaxed)));
  }
  const ClusterState::Stats st = state.stats();
  Header(out, "hami_scheduler_bad_annotations_total",
         "Annotations that did not decode and were taken as absent.", "counter");
  Sample(out, "hami_scheduler_bad_annotations_total", "object=\"node\"",
         double(st.bad_node_annotations));
  Sample(out, "hami_scheduler_bad_annotations_total", "object=\"pod\"",
         double(st.bad_pod_annotations));
  Header(out, "hami_scheduler_inventory_changes_total",
         "Node GPU inventories that changed or appeared.", "counter");
  Sample(out, "hami_scheduler_inventory_changes_total", "", double(st.inventory_changes));
  Header(out, "hami_scheduler_device_count_changes_total", "Nodes whose number of GPUs changed.",
         "counter");
  Sample(out, "hami_scheduler_device_count_changes_total", "", double(st.device_count_changes));
  Header(out, "hami_scheduler_handshake_writes_total",
         "Handshake annotations written, by the state written.", "counter");
  Sample(out, "hami_scheduler_handshake_writes_total", "state=\"Requesting\"",
         double(handshake_requesting.load()));
  Sample(out, "hami_scheduler_handshake_writes_total", "state=\"Deleted\"",
         double(handshake_deleted.load()));
  Header(out, "hami_scheduler_bind_reads_total",
         "How binds read the node's pods under the lock: the view once it caught up with the "
         "lock, else a list from the API.",
         "counter");
  Sample(out, "hami_scheduler_bind_reads_total", "source=\"view\"", double(fresh_read_view.load()));
  Sample(out, "hami_scheduler_bind_reads_total", "source=\"list\"", double(fresh_read_list.load()));
  Header(out, "hami_scheduler_ready", "1 once the informers have synced.", "gauge");
  Sample(out, "hami_scheduler_ready", "", ready ? 1 : 0);
  Header(out, "hami_scheduler_leader", "1 while this replica runs the handshake loop.", "gauge");
  Sample(out, "hami_scheduler_leader", "", leader.load() ? 1 : 0);
  Header(out, "hami_scheduler_pods_allocated", "Pods holding GPUs.", "gauge");
  Sample(out, "hami_scheduler_pods_allocated", "", double(shares.size()));
  return out;
}

}  // namespace hami::scheduler
