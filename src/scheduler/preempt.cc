#include "scheduler/preempt.h"

#include <algorithm>
#include <numeric>

#include "scheduler/state.h"

namespace hami::scheduler {
namespace {

void Add(DeviceUsage& to, const DeviceUsage& u, int sign) {
  to.slots += sign * u.slots;
  to.mem_mib += sign * u.mem_mib;
  to.cores += sign * u.cores;
  to.exclusive += sign * u.exclusive;
}

// Whether some container of the pod cannot find as many GPUs as it asks for among those that
// could take it at all: healthy, not cordoned, shared, with a slot, memory and cores left for it
// and not held exclusively (the dynamic checks of fit.cc against the usage before the pod, which
// can only grow as the pod is placed; constraints, NUMA and quota left out). True means FitPod
// fails too; false decides nothing. Far cheaper than a fit: trials of multi-GPU pods on nodes
// where one victim frees one GPU end here.
bool CannotFit(const NodeGpus& node, const PodRequest& request, const PodPolicy& policy) {
  auto short_of_gpus = [&](const ContainerRequest& c) {
    if (c.count <= 0) return false;
    int32_t usable = 0;
    for (const GpuState& g : node.gpus) {
      const kube::NodeDevice& d = g.device;
      const DeviceUsage& u = g.used;
      if (!d.health || g.cordoned || (!d.mode.empty() && d.mode != "hami-core")) continue;
      if (u.slots >= d.count || u.exclusive > 0 || (c.exclusive() && u.slots > 0)) continue;
      if (policy.gpu.mutex && u.slots > 0) continue;
      if (u.mem_mib + c.MemoryOn(d.devmem_mib) > d.devmem_mib) continue;
      if (u.cores + c.cores > d.devcore) continue;
      if (++usable >= c.count) return false;
    }
    return true;
  };
  for (const ContainerRequest& c : request.init_containers) {
    if (short_of_gpus(c)) return true;
  }
  for (const ContainerRequest& c : request.containers) {
    if (short_of_gpus(c)) return true;
  }
  return false;
}

// Fits of the pod on the node with some candidates taken away; the node's copy is restored
// after each.
class Trials {
 public:
  Trials(const NodeGpus& node, const std::vector<VictimCandidate>& candidates,
         const PodRequest& request, const PodConstraints& constraints, const PodPolicy& policy,
         const QuotaCheck& quota)
      : work_(node),
        candidates_(candidates),
        request_(request),
        constraints_(constraints),
        policy_(policy),
        quota_(quota) {}

  FitResult Fit(const std::vector<size_t>& removed) {
    QuotaCheck q = quota_;
    for (size_t v : removed) Take(v, -1, q);
    ++tried_;
    FitResult r = FitPod(work_, request_, constraints_, policy_, q);
    for (size_t v : removed) Take(v, +1, q);
    return r;
  }
  // Fit(removed).fits, answered without a fit when CannotFit rules it out (counted as tried
  // all the same, so that the search's budget and its answer do not change).
  bool Fits(const std::vector<size_t>& removed) {
    QuotaCheck q = quota_;
    for (size_t v : removed) Take(v, -1, q);
    ++tried_;
    const bool fits = !CannotFit(work_, request_, policy_) &&
                      FitPod(work_, request_, constraints_, policy_, q).fits;
    for (size_t v : removed) Take(v, +1, q);
    return fits;
  }
  uint64_t tried() const { return tried_; }

 private:
  void Take(size_t v, int sign, QuotaCheck& q) {
    const VictimCandidate& c = candidates_[v];
    for (const auto& [pos, u] : c.usage) Add(work_.gpus[pos].used, u, sign);
    if (c.ns == q.ns) {
      if (sign < 0) {
        q.used -= c.amounts;
      } else {
        q.used += c.amounts;
      }
    }
  }

  NodeGpus work_;
  const std::vector<VictimCandidate>& candidates_;
  const PodRequest& request_;
  const PodConstraints& constraints_;
  const PodPolicy& policy_;
  const QuotaCheck& quota_;
  uint64_t tried_ = 0;
};

// Combinations of k out of n, saturating at `cap`.
uint64_t Choose(size_t n, size_t k, uint64_t cap) {
  if (k > n) return 0;
  uint64_t c = 1;
  for (size_t i = 0; i < k; ++i) {
    c = c * (n - i) / (i + 1);
    if (c > cap) return cap + 1;
  }
  return c;
}

}  // namespace

VictimChoice ChooseVictims(const NodeGpus& node, const std::vector<VictimCandidate>& candidates,
                           int32_t preemptor_priority, const PodRequest& request,
                           const PodConstraints& constraints, const PodPolicy& policy,
                           const QuotaCheck& quota) {
  VictimChoice out;
  Trials trials(node, candidates, request, constraints, policy, quota);
  auto finish = [&](VictimChoice::Outcome o) {
    out.outcome = o;
    out.fits_tried = trials.tried();
    return out;
  };

  const FitResult as_is = trials.Fit({});
  if (as_is.fits) return finish(VictimChoice::Outcome::kFitsAlready);
  if (as_is.unresolvable) {
    out.unresolvable = true;
    out.reason = as_is.reason;
    return finish(VictimChoice::Outcome::kNoHelp);
  }

  // The eligible candidates, lowest priority first.
  std::vector<size_t> order;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].priority < preemptor_priority && !candidates[i].usage.empty()) {
      order.push_back(i);
    }
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (candidates[a].priority != candidates[b].priority) {
      return candidates[a].priority < candidates[b].priority;
    }
    return candidates[a].key < candidates[b].key;
  });
  if (order.empty()) {
    out.reason = "none of the " + std::to_string(candidates.size()) +
                 " candidate victims has a lower priority than the pod (" +
                 std::to_string(preemptor_priority) + ") and holds a share of this node's GPUs";
    return finish(VictimChoice::Outcome::kNoHelp);
  }
  const FitResult without_all = trials.Fit(order);
  if (!without_all.fits) {
    out.unresolvable = without_all.unresolvable;
    out.reason = "it does not fit even without the " + std::to_string(order.size()) +
                 " lower-priority pods: " + without_all.reason;
    return finish(VictimChoice::Outcome::kNoHelp);
  }

  std::vector<size_t> set(1);
  for (size_t v : order) {
    set[0] = v;
    if (trials.Fits(set)) {
      out.victims = set;
      return finish(VictimChoice::Outcome::kVictims);
    }
  }

  // kube-scheduler's reprieve: from every eligible pod removed, give each back, highest
  // priority first, when the pod still fits without it.
  std::vector<size_t> reprieve = order;
  for (size_t i = order.size(); i-- > 0;) {
    std::vector<size_t> without = reprieve;
    without.erase(std::find(without.begin(), without.end(), order[i]));
    if (trials.Fits(without)) reprieve = std::move(without);
  }

  // Nobody spared: each candidate was needed with all the others gone, so every set that
  // works holds it (fitting only gets easier as pods go), and this set is the only smallest.
  if (reprieve.size() == order.size()) {
    out.victims = std::move(reprieve);
    return finish(VictimChoice::Outcome::kVictims);
  }

  // Smaller sets than the reprieve's, by size, while the fits stay within the budget.
  const size_t n = order.size();
  for (size_t k = 2; k < reprieve.size(); ++k) {
    const uint64_t left = kMaxPreemptFits > trials.tried() ? kMaxPreemptFits - trials.tried() : 0;
    if (Choose(n, k, left) > left) break;
    std::vector<size_t> pos(k);
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<size_t> best;
    int64_t best_max = 0, best_sum = 0;
    while (true) {
      set.resize(k);
      int64_t max = INT64_MIN, sum = 0;
      for (size_t j = 0; j < k; ++j) {
        set[j] = order[pos[j]];
        max = std::max<int64_t>(max, candidates[set[j]].priority);
        sum += candidates[set[j]].priority;
      }
      const bool better = best.empty() || max < best_max || (max == best_max && sum < best_sum);
      if (better && trials.Fits(set)) {
        best = set;
        best_max = max;
        best_sum = sum;
      }
      if (!NextCombination(pos, n)) break;
    }
    if (!best.empty()) {
      out.victims = std::move(best);
      return finish(VictimChoice::Outcome::kVictims);
    }
  }
  out.victims = std::move(reprieve);
  return finish(VictimChoice::Outcome::kVictims);
}

std::vector<std::string> HoldNominated(NodeGpus& node, NodeGpus* without_terminating,
                                       std::vector<const NominatedPod*> nominees) {
  std::sort(nominees.begin(), nominees.end(), [](const NominatedPod* a, const NominatedPod* b) {
    return a->priority != b->priority ? a->priority > b->priority : a->key < b->key;
  });
  std::vector<std::string> held;
  const QuotaCheck no_quota;
  for (const NominatedPod* n : nominees) {
    FitResult r = FitPod(node, n->request, n->constraints, n->policy, no_quota);
    if (!r.fits && without_terminating != nullptr) {
      r = FitPod(*without_terminating, n->request, n->constraints, n->policy, no_quota);
    }
    if (!r.fits) continue;
    const auto usage = ShareUsage(r.devices, n->request.init_containers.size());
    AddUsage(node, usage, +1);
    if (without_terminating != nullptr) AddUsage(*without_terminating, usage, +1);
    held.push_back(n->key);
  }
  return held;
}

}  // namespace hami::scheduler
