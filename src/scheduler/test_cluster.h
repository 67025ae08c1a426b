// Objects of a simulated GPU cluster for the scheduler's tests and benchmark: Nodes carrying
// the device plugin's inventory (hami.io/node-nvidia-register) and allocatable GPUs, pending
// pods asking for GPU shares, running pods holding an allocation. Not shipped.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kube/annotations.h"

namespace hami::scheduler::testing {

struct GpuNodeSpec {
  std::string name;
  int gpus = 8;
  int32_t mem_mib = 16384;
  int32_t split = 10;
  std::string type = "NVIDIA-A100-SXM4-40GB";
  int numa_nodes = 1;  // GPUs spread evenly over this many NUMA nodes
};

// "GPU-<node>-<index>".
std::string GpuUuid(std::string_view node, int index);

// A Ready node with the inventory annotation and status.allocatable nvidia.com/gpu =
// gpus * split, pods 110.
nlohmann::json GpuNode(const GpuNodeSpec& spec);

struct GpuPodSpec {
  std::string name;
  std::string ns = "default";
  int32_t gpus = 1;
  int32_t mem_mib = 1000;  // 0: not named
  int32_t cores = 0;       // < 0: not named
  std::string scheduler_name = "hami-scheduler";
  nlohmann::json annotations = nlohmann::json::object();
  // spec.priority, and spec.priorityClassName PriorityClassName(priority): the API server
  // admits the pod once that class exists (PriorityClass).
  std::optional<int32_t> priority = std::nullopt;
};

// "priority-<value>" ("priority-minus-<value>" below 0).
std::string PriorityClassName(int32_t value);
// The PriorityClass of that name and value.
nlohmann::json PriorityClass(int32_t value);

// A pending pod with one container asking for `gpus` x `mem_mib` and `cores`.
nlohmann::json GpuPod(const GpuPodSpec& spec);

// The same pod bound to `node` and holding `devices` (both device annotations, bind-phase
// success, spec.nodeName), as a scheduler and plugin leave it.
nlohmann::json RunningGpuPod(const GpuPodSpec& spec, std::string_view node,
                             const kube::PodDevices& devices);

// A KubeSchedulerConfiguration whose one extender is hami-scheduler on 127.0.0.1:`port`, as
// the deployment docs configure it (node names only, GPUs left to the extender).
std::string ExtenderSchedulerConfig(int port);

}  // namespace hami::scheduler::testing
