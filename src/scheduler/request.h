// What a pod asks of HAMi, container by container: parsed from the resource names of the
// device config (kube/objects.h's Pod view, limits first, else requests, as HAMi reads them).
//
// Per container, with the default names:
//   nvidia.com/gpu                how many GPUs (distinct devices), >= 1
//   nvidia.com/gpumem             MiB per GPU, multiplied by memoryFactor
//   nvidia.com/gpumem-percentage  percent of each GPU's memory (1..100), when gpumem is absent
//   nvidia.com/gpucores           percent of each GPU's compute (0..100); 100 is exclusive
//   nvidia.com/priority           0 (high) or 1 (low): CUDA_TASK_PRIORITY
// Defaults (config::DeviceConfig): memory or cores or a percentage without a count asks for
// defaultGPUNum GPUs; no memory and no percentage asks for defaultMemory MiB, or the whole
// GPU (100 percent) when defaultMemory is 0; no cores asks for defaultCores. A container that
// names none of the count, memory, percentage and cores requests nothing (a priority alone
// included). When both gpumem and gpumem-percentage are given, gpumem wins (as in HAMi).
//
// Every value must be a whole number in its range; errors (kInvalidArgument) name the pod,
// the container and the resource:
//   Pod default/x: container "main" (spec.containers[0]): resources.limits.nvidia.com/gpucores:
//   150 is out of range 0..100
// A quantity that does not parse is named the same way (kube/quantity.h's message).
//
// gpumem is a plain integer count of MiB, 0..2^31-1. The API server writes a plain count
// ending in 000 with the suffix k (3000 arrives as "3k"), so "k" reads as a count; any other
// suffix (Ki, Mi, Gi, Ti, Pi, Ei, M, G, T, P, E, m, u, n) or an exponent is refused, and so
// are negative and fractional values. The error says the unit and, for a suffix, what to
// write: the quantity read as bytes, in MiB, rounded up:
//   resources.limits.nvidia.com/gpumem: 2Gi has a unit suffix (Gi), but nvidia.com/gpumem is
//   a plain integer count of MiB (2Gi would ask for 2147483648 MiB): for 2Gi of memory write
//   2048
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/device_config.h"
#include "kube/objects.h"

namespace hami::scheduler {

struct ContainerRequest {
  int32_t count = 0;           // GPUs; 0: the container requests none
  int32_t mem_mib = 0;         // per GPU, memoryFactor applied; 0: see mem_percentage
  int32_t mem_percentage = 0;  // per GPU, of the device's memory, used when mem_mib is 0
  int32_t cores = 0;           // per GPU, percent of the device
  std::optional<int32_t> priority;
  std::string name;  // the container's, for messages

  bool requests_gpus() const { return count > 0; }
  bool exclusive() const { return cores >= 100; }
  // MiB this container takes of a device offering `devmem_mib`.
  int32_t MemoryOn(int32_t devmem_mib) const {
    if (mem_mib > 0) return mem_mib;
    return static_cast<int32_t>(static_cast<int64_t>(devmem_mib) * mem_percentage / 100);
  }

  friend bool operator==(const ContainerRequest&, const ContainerRequest&) = default;
};

struct PodRequest {
  // One entry per spec.initContainers and spec.containers, in pod order (the order of the
  // hami.io/vgpu-devices-* annotations, init containers first).
  std::vector<ContainerRequest> init_containers;
  std::vector<ContainerRequest> containers;

  // Whether any container requests a GPU.
  bool RequestsGpus() const;
  // The most GPUs the pod holds at once: the larger of the largest init container's count and
  // the sum of the containers' counts.
  int32_t PeakGpuCount() const;

  friend bool operator==(const PodRequest&, const PodRequest&) = default;
};

// `what` names the container in errors ("Pod default/x: container \"main\"
// (spec.containers[0])").
Result<ContainerRequest> ParseContainerRequest(const kube::Container& container,
                                               const config::DeviceConfig& config,
                                               std::string_view what);
Result<PodRequest> ParsePodRequest(const kube::Pod& pod, const config::DeviceConfig& config);

// "nvidia.com/gpumem is a plain integer count of MiB (write 3000 for 3000 MiB)": what every
// refusal of a memory quantity says about its unit.
std::string MemoryUnitNote(std::string_view memory_resource);

// "Pod default/x" (or "Pod (no name)"): how messages name a pod.
std::string DescribePod(const kube::ObjectMeta& meta);

}  // namespace hami::scheduler
