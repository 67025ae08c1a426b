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
// Nominated pods: kube-scheduler nominates a preemptor to the node where it deleted victims
// (status.nominatedNodeName) and retries it later. Until it binds, the room it needs there is
// held against every pod of lower or equal priority (as kube-scheduler adds nominated pods to a
// node before filtering others): HoldNominated places each such nominee on the node's GPUs, as
// a fit would, and counts what it would take. A nominee that does not fit as the node is now
// (its victims are still terminating) is placed as if the node's terminating pods were gone,
// so that the room they free is what it holds; one that fits neither way holds nothing.
//
// Thread safety: pure functions over the caller's data (ChooseVictims works in a copy of the
// node kept per thread).
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

// How ChooseVictims tries a set: kUse first asks whether enough GPUs could take the pod at all
// (counting, per container, the GPUs with room left for it) and skips the fit when not (for
// the node as it is, the fit is then made only if no set helps, for its reason); kNone fits
// every set. The choice is the same, reason and fits_tried included (a skipped fit counts as
// tried); kNone is the reference the tests hold kUse to.
enum class Shortcuts { kUse, kNone };

// `node`'s usage includes every candidate's. `quota.used` includes what the candidates in
// quota.ns take. Uses a copy of `node` kept per thread.
VictimChoice ChooseVictims(const NodeGpus& node, const std::vector<VictimCandidate>& candidates,
                           int32_t preemptor_priority, const PodRequest& request,
                           const PodConstraints& constraints, const PodPolicy& policy,
                           const QuotaCheck& quota, Shortcuts shortcuts = Shortcuts::kUse);

// A pod nominated to a node, not yet holding a share anywhere.
struct NominatedPod {
  std::string key;  // "namespace/name"
  int32_t priority = 0;
  PodRequest request;
  PodConstraints constraints;
  PodPolicy policy;
};

// Adds to `node` the usage of each of `nominees` (highest priority first, then by key) where it
// would be placed; `without_terminating`, when given, is the same node with its terminating
// pods' usage taken away and gets the same additions. Answers the keys of the nominees that
// hold room (the others fit nowhere on the node). The namespace quota is not consulted: the
// preemptor's quota was checked when it was filtered.
std::vector<std::string> HoldNominated(NodeGpus& node, NodeGpus* without_terminating,
                                       std::vector<const NominatedPod*> nominees);

}  // namespace hami::scheduler
