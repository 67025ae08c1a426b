// Scheduling policies: how the GPUs of a node are chosen for a container (GPU policy), and how
// nodes are ranked for kube-scheduler (node policy).
//
// GPU policy: a comma-separated chain of terms, e.g. "binpack,numa" (--gpu-scheduler-policy, or
// per pod the annotation hami.io/gpu-scheduler-policy):
//   binpack         sort key: the GPU that would be the most used after placing the container
//                   first (fills GPUs before opening new ones)
//   spread          sort key: the least used first (spreads containers over GPUs)
//   numa            sort key: the lower NUMA node first, so that a container's GPUs share one
//   mutex           filter: only GPUs nothing runs on (no slot used)
//   topology-aware  selection: a container asking for several GPUs gets the set with the best
//                   sum of pair scores (hami.io/node-nvidia-score, higher is better connected);
//                   a container asking for one gets the GPU least connected to the other
//                   candidates, keeping well-connected sets whole
// Sort keys apply in the order written: the first decides, the next breaks its ties; the GPU
// index breaks the last tie, so equal requests on equal nodes land the same way. A chain
// without a sort key sorts as `spread` after its filters. A term may appear once; binpack and
// spread exclude each other.
//
// "Used" is the device's predicted utilization after the placement: with the weights of
// hami.io/device-scoring-weights ("slot=1,core=1,memory=3": all three required, non-negative
// integers, at least one positive; default 1 each),
//   score = 10 * (w_slot * slots/count + w_core * cores/devcore + w_mem * mem/devmem) / (sum w)
// in 0..10.
//
// Node policy (--node-scheduler-policy, per pod hami.io/node-scheduler-policy): binpack scores a
// node by how used its GPUs would be after the placement (the mean device score), spread by how
// free; the score kube-scheduler receives is an integer 0..10 (MaxExtenderPriority).
//
// Thread safety: pure functions and value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/objects.h"

namespace hami::scheduler {

inline constexpr std::string_view kDeviceScoringWeightsAnnotation =
    "hami.io/device-scoring-weights";

enum class SortKey { kBinpack, kSpread, kNuma };

struct GpuPolicy {
  std::vector<SortKey> sort_keys;  // never empty once parsed (spread when none was written)
  bool mutex = false;
  bool topology_aware = false;
  std::string text;  // as written, for messages and logs

  friend bool operator==(const GpuPolicy&, const GpuPolicy&) = default;
};

enum class NodePolicy { kBinpack, kSpread };

struct ScoringWeights {
  int32_t slot = 1;
  int32_t core = 1;
  int32_t memory = 1;

  friend bool operator==(const ScoringWeights&, const ScoringWeights&) = default;
};

// What one pod is scheduled with: the defaults, overridden by its annotations.
struct PodPolicy {
  GpuPolicy gpu;
  NodePolicy node = NodePolicy::kBinpack;
  ScoringWeights weights;
};

// `what` names the source in errors ("--gpu-scheduler-policy", "Pod default/x: annotation
// hami.io/gpu-scheduler-policy"):
//   --gpu-scheduler-policy: 'packbin' is not a GPU policy (binpack, spread, topology-aware,
//   mutex, numa)
Result<GpuPolicy> ParseGpuPolicy(std::string_view text, std::string_view what);
Result<NodePolicy> ParseNodePolicy(std::string_view text, std::string_view what);
Result<ScoringWeights> ParseScoringWeights(std::string_view text, std::string_view what);
std::string_view NodePolicyName(NodePolicy policy);  // "binpack", "spread"

// The defaults overridden by the pod's hami.io/gpu-scheduler-policy,
// hami.io/node-scheduler-policy and hami.io/device-scoring-weights; a malformed annotation is
// an error naming the pod and the annotation.
Result<PodPolicy> PolicyForPod(const kube::ObjectMeta& pod, const GpuPolicy& default_gpu,
                               NodePolicy default_node);

// Predicted utilization of a device, 0..10, by the formula above. `slots`, `cores` and
// `mem_mib` are the totals after the placement; a device offering 0 of something counts that
// term as fully used.
double DeviceScore(const ScoringWeights& w, int64_t slots, int32_t count, int64_t cores,
                   int32_t devcore, int64_t mem_mib, int32_t devmem_mib);

}  // namespace hami::scheduler
