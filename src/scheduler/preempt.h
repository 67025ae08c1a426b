// Preemption: which of the pods kube-scheduler offers as victims on a node must go so that a
// pending pod fits on that node's GPUs. A pure function over fit.h's view of the node; the
// extender's preempt verb (scheduler.h) feeds it from the cluster view.
//
// The rules, in order:
//   - a candidate of equal or higher priority than the preemptor is never a victim (it stays
//     counted on its GPUs), and neither is one that holds nothing on the node's GPUs (removing
//     it frees nothing here);
//   - the pod must fit with every remaining candidate removed, under its own request,
//     constraints, policy and namespace quota (a victim in the pod's namespace gives its quota
//     back); otherwise no subset helps and the node is dropped;
//   - of the subsets that make it fit, the one with the fewest victims; among those, the one
//     whose highest victim priority is lowest, then the lowest sum of priorities, then the
//     earliest in (priority, namespace/name) order. Sets are tried by size while the number of
//     fits stays within kMaxPreemptFits; past that, the answer is kube-scheduler's own reprieve
//     (remove every candidate, give each back, highest priority first, when the pod still
//     fits), which never takes a victim the pod does not need.
//
// Thread safety: pure functions over the caller's data.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/fit.h"
#include "scheduler/quota.h"

namespace hami::scheduler {

// One pod kube-scheduler offers as a victim, as the cluster view knows it.
struct VictimCandidate {
  std::string key;  // "namespace/name": messages and the last tie-break
  std::string ns;
  int32_t priority = 0;
  // What it holds on the node, per GPU position in NodeGpus::gpus.
  std::vector<std::pair<size_t, DeviceUsage>> usage;
  QuotaAmounts amounts;  // what it takes from its namespace's quota
};

struct VictimChoice {
  enum class Outcome {
    kFitsAlready,  // the pod fits without removing anything
    kVictims,      // `victims` make it fit
    kNoHelp,       // no subset of the candidates helps (`reason` says why)
  };
  Outcome outcome = Outcome::kNoHelp;
  std::vector<size_t> victims;  // indices into the candidates, lowest priority first
  std::string reason;
  bool unresolvable = false;  // kNoHelp: the pod does not fit even on empty GPUs
  uint64_t fits_tried = 0;
};

// At most this many fits are tried to find the smallest set on one node.
inline constexpr uint64_t kMaxPreemptFits = 512;

// `node`'s usage includes every candidate's. `quota.used` includes what the candidates in
// quota.ns take.
VictimChoice ChooseVictims(const NodeGpus& node, const std::vector<VictimCandidate>& candidates,
                           int32_t preemptor_priority, const PodRequest& request,
                           const PodConstraints& constraints, const PodPolicy& policy,
                           const QuotaCheck& quota);

}  // namespace hami::scheduler
