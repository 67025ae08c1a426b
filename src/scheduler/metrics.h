// hami-scheduler's Prometheus metrics (text exposition format 0.0.4), served on
// --metrics-bind-address (:9395) and on the extender's own port at /metrics.
//
// HAMi's names, per GPU (labels node, device_uuid, device_index, device_type):
//   hami_gpu_memory_limit_bytes          memory the GPU offers (devmem)
//   hami_gpu_core_limit_ratio            compute it offers (devcore / 100)
//   hami_gpu_memory_allocated_bytes      memory allocated to pods
//   hami_gpu_core_allocated_ratio        compute allocated (cores / 100)
//   hami_gpu_shared_count                pods holding a share of it
//   hami_node_gpu_overview               memory allocated, in bytes (HAMi's overview gauge)
//   hami_node_gpu_memory_allocated_ratio memory allocated / offered
// and ours, per GPU (the same labels):
//   hami_gpu_memory_free_bytes           memory offered less allocated; 0 on an unhealthy GPU
//   hami_gpu_core_free_ratio             compute offered less allocated; 0 on an unhealthy GPU
// per node (label node), the sums over its GPUs of the per-GPU figures:
//   hami_node_gpu_memory_limit_bytes, hami_node_gpu_memory_allocated_bytes,
//   hami_node_gpu_memory_free_bytes, hami_node_gpu_core_limit_ratio,
//   hami_node_gpu_core_allocated_ratio, hami_node_gpu_core_free_ratio
// "Free" is what the amounts leave; a GPU whose replicas are all held, or that one pod holds
// with 100 cores, takes no further pod whatever its free memory.
// per container and GPU (labels namespace, node, pod, container_index, device_uuid):
//   hami_vgpu_memory_allocated_bytes, hami_vgpu_core_allocated_ratio
// per namespace quota (labels namespace, resource = "limits.nvidia.com/gpumem" or
// "limits.nvidia.com/gpucores"; MiB and percent, as the ResourceQuota writes them):
//   hami_resource_quota_used, hami_resource_quota_limit
// and this scheduler's own:
//   hami_scheduler_filter_duration_seconds, hami_scheduler_prioritize_duration_seconds,
//   hami_scheduler_bind_duration_seconds           histograms of the verbs' handling
//   hami_scheduler_requests_total{verb,code}       HTTP answers by verb and status
//   hami_scheduler_bind_failures_total{reason}     invalid, pod_not_found, node_unknown, no_fit,
//                                                  lock_busy, api
//   hami_scheduler_bad_annotations_total{object}   node, pod annotations that did not decode
//   hami_scheduler_inventory_changes_total, hami_scheduler_device_count_changes_total
//   hami_scheduler_handshake_writes_total{state}   Requesting, Deleted
//   hami_scheduler_bind_reads_total{source}        view, list: how a bind read the node's pods
//                                                  under its lock
//   hami_scheduler_ready, hami_scheduler_leader    1 or 0
//   hami_scheduler_pods_allocated                  pods holding GPUs
//
// Thread safety: every member may be used from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "common/prometheus.h"

namespace hami::scheduler {

class ClusterState;

using Histogram = prometheus::Histogram;

enum class BindFailure { kInvalid, kPodNotFound, kNodeUnknown, kNoFit, kLockBusy, kApi, kCount };
std::string_view BindFailureName(BindFailure f);

class SchedulerMetrics {
 public:
  Histogram filter_seconds;
  Histogram prioritize_seconds;
  Histogram bind_seconds;
  std::atomic<uint64_t> handshake_requesting{0};
  std::atomic<uint64_t> handshake_deleted{0};
  std::atomic<bool> leader{false};
  // How binds re-read the node's pods under the lock: the view (caught up with the lock), or a
  // list from the API.
  std::atomic<uint64_t> fresh_read_view{0};
  std::atomic<uint64_t> fresh_read_list{0};

  void CountRequest(std::string_view verb, int code);
  void CountBindFailure(BindFailure f);
  uint64_t bind_failures(BindFailure f) const;

  // The whole exposition: the counters above and `state`'s gauges; `ready` for
  // hami_scheduler_ready.
  std::string Render(const ClusterState& state, bool ready) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::array<std::atomic<uint64_t>, static_cast<size_t>(BindFailure::kCount)> bind_failures_{};
};

}  // namespace hami::scheduler
