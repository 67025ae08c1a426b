// Fit: which GPUs of one node a pod would get, or why none will do. A pure function of the
// node's devices and their current usage, the pod's request and constraints, its policy and
// its namespace's quota: no I/O, unit-tested rule by rule.
//
// A GPU is skipped for a container, with the first reason that applies:
//   static (no change of usage helps: the node is "unresolvable" when too few remain)
//     unhealthy                 NodeDevice::health is false
//     cordoned                  listed in the node's hami.io/device-cordon
//     mode                      a mode other than hami-core (MIG and MPS are not shared here)
//     type                      not matching nvidia.com/use-gputype, or matching
//                               nvidia.com/nouse-gputype (comma-separated, case-insensitive
//                               substrings of the device type)
//     uuid                      not in nvidia.com/use-gpuuuid, or in nvidia.com/nouse-gpuuuid
//     too small                 offers less memory or fewer cores than one container asks for
//   dynamic (depends on what runs there)
//     slots                     every one of its `count` slots is held by another pod
//     memory, cores             not enough left
//     exclusive                 a pod holds it with 100 cores, or the container asks for 100
//                               cores and something runs there
//     mutex                     something runs there and the policy is mutex
// A container asking for N GPUs gets N distinct GPUs; under nvidia.com/numa-bind all of them on
// one NUMA node. One pod holds at most one slot of a GPU, however many of its containers use it.
// Init containers are fitted first, each alone against the node's usage (they run one at a
// time, before the containers); the containers are then fitted together; what the pod holds
// on a GPU is the larger of its init containers' peak and its containers' sum. Finally the
// whole placement must fit the namespace's quota.
//
// Thread safety: pure functions over the caller's data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/annotations.h"
#include "kube/objects.h"
#include "scheduler/node_annotations.h"
#include "scheduler/policy.h"
#include "scheduler/quota.h"
#include "scheduler/request.h"

namespace hami::scheduler {

// What the pods placed on a GPU hold of it.
struct DeviceUsage {
  int32_t slots = 0;  // pods holding a share
  int64_t mem_mib = 0;
  int64_t cores = 0;
  int32_t exclusive = 0;  // pods holding it with 100 cores

  friend bool operator==(const DeviceUsage&, const DeviceUsage&) = default;
};

struct GpuState {
  kube::NodeDevice device;
  DeviceUsage used;
  bool cordoned = false;
};

// A node's GPUs as fit sees them.
struct NodeGpus {
  std::string name;
  std::vector<GpuState> gpus;
  PairScores pair_scores;   // empty without hami.io/node-nvidia-score
  std::string unavailable;  // not empty: no GPU of the node can be used, and this says why
};

// What a pod's annotations constrain (nvidia.com/use-gputype and the rest).
struct PodConstraints {
  std::vector<std::string> use_types;    // lower case
  std::vector<std::string> nouse_types;  // lower case
  std::vector<std::string> use_uuids;
  std::vector<std::string> nouse_uuids;
  bool numa_bind = false;
};

// Errors name the pod and the annotation (a numa-bind that is not a boolean).
Result<PodConstraints> ConstraintsForPod(const kube::ObjectMeta& pod);

// The namespace's quota and what the namespace's other pods hold already (this pod excluded).
struct QuotaCheck {
  std::string_view ns;
  const NamespaceQuota* quota = nullptr;  // nullptr or !limited(): no quota
  QuotaAmounts used;
  const config::DeviceConfig* config =
      nullptr;  // resource names for messages; required with a quota
};

struct FitResult {
  bool fits = false;
  bool unresolvable = false;  // !fits, and no change of usage on the node would help
  std::string reason;         // !fits: why, naming the container and counting skipped GPUs
  kube::PodDevices devices;   // fits: per container, init containers first
  int64_t score = 0;          // fits: the node policy's score, 0..10
};

// `pod` is what the pod asks; a pod asking for no GPU fits every node with score 0 and one
// empty entry per container.
FitResult FitPod(const NodeGpus& node, const PodRequest& pod, const PodConstraints& constraints,
                 const PodPolicy& policy, const QuotaCheck& quota);

// Steps `pos` (k strictly increasing positions below n) to the next combination in
// lexicographic order; false after the last one.
bool NextCombination(std::vector<size_t>& pos, size_t n);

// The device type written into hami.io/vgpu-devices-* entries (seed 004: "NVIDIA").
inline constexpr std::string_view kDeviceVendorType = "NVIDIA";

}  // namespace hami::scheduler
