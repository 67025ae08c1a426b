#include "scheduler/preempt.h"

#include <algorithm>
#include <numeric>
#include <optional>

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
// where one victim frees one GPU end here. What each container asks of each GPU is worked out
// once per search (Reset); a trial only compares the GPUs' usage with it.
class RoomCheck {
 public:
  void Reset(const NodeGpus& node, const PodRequest& request, const PodPolicy& policy) {
    needs_.clear();
    gpus_.clear();
    auto add = [&](const ContainerRequest& c) {
      if (c.count <= 0) return;
      Need need{c.count, c.exclusive() || policy.gpu.mutex, gpus_.size(), 0};
      for (size_t pos = 0; pos < node.gpus.size(); ++pos) {
        const GpuState& g = node.gpus[pos];
        const kube::NodeDevice& d = g.device;
        if (!d.health || g.cordoned || (!d.mode.empty() && d.mode != "hami-core")) continue;
        gpus_.push_back({pos, d.count, int64_t{d.devmem_mib} - c.MemoryOn(d.devmem_mib),
                         int64_t{d.devcore} - c.cores});
      }
      need.end = gpus_.size();
      needs_.push_back(need);
    };
    for (const ContainerRequest& c : request.init_containers) add(c);
    for (const ContainerRequest& c : request.containers) add(c);
  }

  // `node`: the node Reset was given, its usage changed since.
  bool CannotFit(const NodeGpus& node) const {
    for (const Need& need : needs_) {
      int32_t usable = 0;
      for (size_t i = need.begin; i < need.end && usable < need.count; ++i) {
        const Gpu& g = gpus_[i];
        const DeviceUsage& u = node.gpus[g.pos].used;
        if (u.slots < g.slots && u.exclusive <= 0 && (!need.alone || u.slots <= 0) &&
            u.mem_mib <= g.mem_max && u.cores <= g.cores_max) {
          ++usable;
        }
      }
      if (usable < need.count) return true;
    }
    return false;
  }

 private:
  // One container asking for GPUs; its GPUs are gpus_[begin, end).
  struct Need {
    int32_t count;
    bool alone;  // exclusive or under the mutex policy: only a GPU nobody holds will do
    size_t begin, end;
  };
  // A GPU that could take the container, and the most usage it may carry for that.
  struct Gpu {
    size_t pos;         // in NodeGpus::gpus
    int32_t slots;      // slots held must stay below this
    int64_t mem_max;    // MiB held at most
    int64_t cores_max;  // cores held at most
  };
  std::vector<Need> needs_;
  std::vector<Gpu> gpus_;
};

// Fits of the pod on the node with some candidates taken away; the node's copy is restored
// after each.
class Trials {
 public:
  Trials(const NodeGpus& node, const std::vector<VictimCandidate>& candidates,
         const PodRequest& request, const PodConstraints& constraints, const PodPolicy& policy,
         const QuotaCheck& quota, Shortcuts shortcuts)
      : work_(Scratch()),
        room_(Room()),
        candidates_(candidates),
        request_(request),
        constraints_(constraints),
        policy_(policy),
        quota_(quota),
        shortcuts_(shortcuts) {
    work_ = node;
    if (shortcuts_ == Shortcuts::kUse) room_.Reset(node, request, policy);
  }

  FitResult Fit(const std::vector<size_t>& removed) {
    ++tried_;
    return FitUncounted(removed);
  }
  // Fit(removed).fits, answered without a fit when RoomCheck rules it out (counted as tried
  // all the same, so that the search's budget and its answer do not change).
  bool Fits(const std::vector<size_t>& removed) {
    ++tried_;
    for (size_t v : removed) Take(v, -1);
    const bool fits =
        !RuledOut() && FitPod(work_, request_, constraints_, policy_, QuotaWithout(removed)).fits;
    for (size_t v : removed) Take(v, +1);
    return fits;
  }
  // Whether RoomCheck rules the pod out on the node as it is (nothing taken away).
  bool RuledOut() const { return shortcuts_ == Shortcuts::kUse && room_.CannotFit(work_); }
  // A trial decided without calling Fit.
  void CountTried() { ++tried_; }
  FitResult FitUncounted(const std::vector<size_t>& removed) {
    for (size_t v : removed) Take(v, -1);
    FitResult r = FitPod(work_, request_, constraints_, policy_, QuotaWithout(removed));
    for (size_t v : removed) Take(v, +1);
    return r;
  }
  uint64_t tried() const { return tried_; }

 private:
  // The node's copy, reused by every search on this thread: assigning a node of the same shape
  // reuses its vectors' and strings' room, where a new copy would allocate each of them.
  static NodeGpus& Scratch() {
    thread_local NodeGpus scratch;
    return scratch;
  }
  static RoomCheck& Room() {
    thread_local RoomCheck room;
    return room;
  }

  void Take(size_t v, int sign) {
    for (const auto& [pos, u] : candidates_[v].usage) Add(work_.gpus[pos].used, u, sign);
  }
  // The quota check with what `removed` take in the pod's namespace given back (FitPod reads
  // the usage only under a limit).
  QuotaCheck QuotaWithout(const std::vector<size_t>& removed) const {
    QuotaCheck q = quota_;
    if (q.quota == nullptr || !q.quota->limited()) return q;
    for (size_t v : removed) {
      if (candidates_[v].ns == q.ns) q.used -= candidates_[v].amounts;
    }
    return q;
  }

  NodeGpus& work_;
  RoomCheck& room_;
  const std::vector<VictimCandidate>& candidates_;
  const PodRequest& request_;
  const PodConstraints& constraints_;
  const PodPolicy& policy_;
  const QuotaCheck& quota_;
  const Shortcuts shortcuts_;
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
                           const QuotaCheck& quota, Shortcuts shortcuts) {
  VictimChoice out;
  Trials trials(node, candidates, request, constraints, policy, quota, shortcuts);
  auto finish = [&](VictimChoice::Outcome o) {
    out.outcome = o;
    out.fits_tried = trials.tried();
    return std::move(out);
  };

  // The node as it is. When RoomCheck rules the pod out there, the fit is put off (counted as
  // tried all the same): it cannot fit, and whether it is unresolvable matters only where no
  // subset helps (where it is, no subset helps: the static checks fail whatever is removed).
  std::optional<FitResult> as_is;
  if (trials.RuledOut()) {
    trials.CountTried();
  } else {
    as_is = trials.Fit({});
    if (as_is->fits) return finish(VictimChoice::Outcome::kFitsAlready);
    if (as_is->unresolvable) {
      out.unresolvable = true;
      out.reason = as_is->reason;
      return finish(VictimChoice::Outcome::kNoHelp);
    }
  }
  // Where no subset helps: the answer of the node as it is when it is unresolvable, as the
  // search would have given it without putting the fit off (one fit tried).
  auto unresolvable_as_is = [&] {
    if (as_is) return false;
    as_is = trials.FitUncounted({});
    if (!as_is->unresolvable) return false;
    out.unresolvable = true;
    out.reason = as_is->reason;
    out.outcome = VictimChoice::Outcome::kNoHelp;
    out.fits_tried = 1;
    return true;
  };

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
    if (unresolvable_as_is()) return out;
    out.reason = "none of the " + std::to_string(candidates.size()) +
                 " candidate victims has a lower priority than the pod (" +
                 std::to_string(preemptor_priority) + ") and holds a share of this node's GPUs";
    return finish(VictimChoice::Outcome::kNoHelp);
  }
  const FitResult without_all = trials.Fit(order);
  if (!without_all.fits) {
    if (unresolvable_as_is()) return out;
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
  std::vector<size_t> without;
  for (size_t i = order.size(); i-- > 0;) {
    without.assign(reprieve.begin(), reprieve.end());
    without.erase(std::find(without.begin(), without.end(), order[i]));
    if (trials.Fits(without)) reprieve.swap(without);
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
