#include "scheduler/fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "common/parse.h"

namespace hami::scheduler {
namespace {

enum class Skip {
  kNone,
  // Static.
  kUnhealthy,
  kCordoned,
  kMode,
  kType,
  kUuid,
  kTooSmall,
  // Dynamic.
  kSlots,
  kMemory,
  kCores,
  kExclusive,
  kMutex,
  kCount,
};
constexpr std::array<std::string_view, static_cast<size_t>(Skip::kCount)> kSkipText = {
    "",
    "unhealthy",
    "cordoned",
    "not in hami-core mode",
    "excluded by type",
    "excluded by UUID",
    "smaller than the request",
    "all slots in use",
    "short of memory",
    "short of cores",
    "held exclusively or busy for an exclusive request",
    "in use (mutex policy)",
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::vector<std::string> SplitList(std::string_view value, bool lower) {
  std::vector<std::string> out;
  for (const std::string& part : DecodeCordonList(value)) out.push_back(lower ? Lower(part) : part);
  return out;
}

bool AnyContained(const std::string& haystack, const std::vector<std::string>& needles) {
  return std::any_of(needles.begin(), needles.end(),
                     [&](const std::string& n) { return haystack.find(n) != std::string::npos; });
}

bool AnyEqual(const std::string& s, const std::vector<std::string>& list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// One fitting of a pod on a node.
class Fitter {
 public:
  Fitter(const NodeGpus& node, const PodConstraints& constraints, const PodPolicy& policy)
      : node_(node), constraints_(constraints), policy_(policy) {
    if (!constraints.use_types.empty() || !constraints.nouse_types.empty()) {
      lower_types_.reserve(node.gpus.size());
      for (const auto& g : node.gpus) lower_types_.push_back(Lower(g.device.type));
    }
  }

  // The chosen GPU positions for one container, or a failure with its reason.
  struct Choice {
    std::vector<size_t> picked;
    bool ok = false;
    bool unresolvable = false;
    std::string why;
  };

  Choice Select(const ContainerRequest& c, const std::vector<DeviceUsage>& usage,
                const std::vector<bool>& pod_holds) const;

 private:
  Skip StaticSkip(size_t i, const ContainerRequest& c) const;
  Skip DynamicSkip(size_t i, const ContainerRequest& c, const DeviceUsage& u, bool holds) const;
  int32_t Pair(size_t a, size_t b) const;
  std::vector<size_t> Topology(const std::vector<size_t>& sorted, int32_t count) const;

  const NodeGpus& node_;
  const PodConstraints& constraints_;
  const PodPolicy& policy_;
  std::vector<std::string> lower_types_;
};

Skip Fitter::StaticSkip(size_t i, const ContainerRequest& c) const {
  const GpuState& g = node_.gpus[i];
  const kube::NodeDevice& d = g.device;
  if (!d.health) return Skip::kUnhealthy;
  if (g.cordoned) return Skip::kCordoned;
  if (!d.mode.empty() && d.mode != "hami-core") return Skip::kMode;
  if (!lower_types_.empty()) {
    if (!constraints_.use_types.empty() && !AnyContained(lower_types_[i], constraints_.use_types)) {
      return Skip::kType;
    }
    if (AnyContained(lower_types_[i], constraints_.nouse_types)) return Skip::kType;
  }
  if (!constraints_.use_uuids.empty() && !AnyEqual(d.id, constraints_.use_uuids)) {
    return Skip::kUuid;
  }
  if (AnyEqual(d.id, constraints_.nouse_uuids)) return Skip::kUuid;
  if (c.MemoryOn(d.devmem_mib) > d.devmem_mib || c.cores > d.devcore || d.count <= 0) {
    return Skip::kTooSmall;
  }
  return Skip::kNone;
}

Skip Fitter::DynamicSkip(size_t i, const ContainerRequest& c, const DeviceUsage& u,
                         bool holds) const {
  const kube::NodeDevice& d = node_.gpus[i].device;
  if (!holds && u.slots >= d.count) return Skip::kSlots;
  if (u.exclusive > 0 || (c.exclusive() && u.slots > 0)) return Skip::kExclusive;
  if (policy_.gpu.mutex && u.slots > 0) return Skip::kMutex;
  if (u.mem_mib + c.MemoryOn(d.devmem_mib) > d.devmem_mib) return Skip::kMemory;
  if (u.cores + c.cores > d.devcore) return Skip::kCores;
  return Skip::kNone;
}

int32_t Fitter::Pair(size_t a, size_t b) const {
  const std::string& ua = node_.gpus[a].device.id;
  const std::string& ub = node_.gpus[b].device.id;
  if (auto row = node_.pair_scores.find(ua); row != node_.pair_scores.end()) {
    if (auto it = row->second.find(ub); it != row->second.end()) return it->second;
  }
  if (auto row = node_.pair_scores.find(ub); row != node_.pair_scores.end()) {
    if (auto it = row->second.find(ua); it != row->second.end()) return it->second;
  }
  return 0;
}

// Topology-aware selection over `sorted` (policy order; ties go to the earlier).
std::vector<size_t> Fitter::Topology(const std::vector<size_t>& sorted, int32_t count) const {
  const size_t n = sorted.size();
  const size_t k = static_cast<size_t>(count);
  if (node_.pair_scores.empty() || n == k) {
    return {sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(k)};
  }
  if (k == 1) {
    // The GPU least connected to the other candidates: well-connected sets stay whole.
    size_t best = 0;
    int64_t best_sum = -1;
    for (size_t i = 0; i < n; ++i) {
      int64_t sum = 0;
      for (size_t j = 0; j < n; ++j) {
        if (j != i) sum += Pair(sorted[i], sorted[j]);
      }
      if (best_sum < 0 || sum < best_sum) {
        best = i;
        best_sum = sum;
      }
    }
    return {sorted[best]};
  }
  // Combinations in lexicographic order of policy positions when there are few of them.
  double combos = 1;
  for (size_t i = 0; i < k; ++i) combos = combos * double(n - i) / double(i + 1);
  if (combos <= 4096) {
    std::vector<size_t> pos(k);
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<size_t> best = pos;
    int64_t best_sum = -1;
    while (true) {
      int64_t sum = 0;
      for (size_t a = 0; a < k; ++a) {
        for (size_t b = a + 1; b < k; ++b) sum += Pair(sorted[pos[a]], sorted[pos[b]]);
      }
      if (sum > best_sum) {
        best_sum = sum;
        best = pos;
      }
      if (!NextCombination(pos, n)) break;
    }
    std::vector<size_t> out;
    for (size_t p : best) out.push_back(sorted[p]);
    return out;
  }
  // Greedy: the policy's first, then each time the best connected to those chosen.
  std::vector<size_t> out = {sorted[0]};
  std::vector<bool> used(n, false);
  used[0] = true;
  while (out.size() < k) {
    size_t best = n;
    int64_t best_sum = -1;
    for (size_t i = 0; i < n; ++i) {
      if (used[i]) continue;
      int64_t sum = 0;
      for (size_t o : out) sum += Pair(sorted[i], o);
      if (sum > best_sum) {
        best_sum = sum;
        best = i;
      }
    }
    used[best] = true;
    out.push_back(sorted[best]);
  }
  return out;
}

Fitter::Choice Fitter::Select(const ContainerRequest& c, const std::vector<DeviceUsage>& usage,
                              const std::vector<bool>& pod_holds) const {
  Choice out;
  std::array<int, static_cast<size_t>(Skip::kCount)> skipped{};
  // Reused by every call on this thread: filtering a thousand nodes allocates little.
  thread_local std::vector<size_t> candidates;
  thread_local std::vector<int32_t> static_ok_numa;
  candidates.clear();
  static_ok_numa.clear();
  size_t static_ok = 0;
  for (size_t i = 0; i < node_.gpus.size(); ++i) {
    Skip s = StaticSkip(i, c);
    if (s == Skip::kNone) {
      ++static_ok;
      if (constraints_.numa_bind) static_ok_numa.push_back(node_.gpus[i].device.numa);
      s = DynamicSkip(i, c, usage[i], pod_holds[i]);
    }
    if (s == Skip::kNone) {
      candidates.push_back(i);
    } else {
      ++skipped[static_cast<size_t>(s)];
    }
  }

  // Policy order.
  struct Key {
    double score;
    int32_t numa;
    int32_t index;
  };
  thread_local std::vector<Key> keys;
  keys.resize(node_.gpus.size());
  for (size_t i : candidates) {
    const kube::NodeDevice& d = node_.gpus[i].device;
    const DeviceUsage& u = usage[i];
    keys[i] = {
        DeviceScore(policy_.weights, u.slots + (pod_holds[i] ? 0 : 1), d.count, u.cores + c.cores,
                    d.devcore, u.mem_mib + c.MemoryOn(d.devmem_mib), d.devmem_mib),
        d.numa, d.index};
  }
  // The comparator is a total order (the index breaks every tie): sort is deterministic.
  std::sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
    for (SortKey key : policy_.gpu.sort_keys) {
      switch (key) {
        case SortKey::kBinpack:
          if (keys[a].score != keys[b].score) return keys[a].score > keys[b].score;
          break;
        case SortKey::kSpread:
          if (keys[a].score != keys[b].score) return keys[a].score < keys[b].score;
          break;
        case SortKey::kNuma:
          if (keys[a].numa != keys[b].numa) return keys[a].numa < keys[b].numa;
          break;
      }
    }
    return keys[a].index < keys[b].index;
  });

  auto describe = [&](std::string why_tail) {
    std::string s =
        "asks for " + std::to_string(c.count) + (c.count == 1 ? " GPU" : " GPUs") + " (";
    if (c.mem_mib > 0) {
      s += std::to_string(c.mem_mib) + " MiB";
    } else {
      s += std::to_string(c.mem_percentage) + "% of memory";
    }
    s += ", " + std::to_string(c.cores) + " cores" + (c.count == 1 ? ")" : " each)") + ": ";
    return s + why_tail;
  };
  auto skipped_text = [&]() {
    std::string s;
    for (size_t k = 1; k < skipped.size(); ++k) {
      if (skipped[k] == 0) continue;
      s += s.empty() ? " (" : ", ";
      s += std::to_string(skipped[k]) + " " + std::string(kSkipText[k]);
    }
    return s.empty() ? s : s + ")";
  };

  const size_t count = static_cast<size_t>(c.count);
  if (constraints_.numa_bind) {
    std::vector<size_t> group;
    for (size_t first : candidates) {
      group.clear();
      for (size_t i : candidates) {
        if (node_.gpus[i].device.numa == node_.gpus[first].device.numa) group.push_back(i);
      }
      if (group.size() >= count) break;
    }
    if (group.size() < count) {
      size_t best_static = 0;
      for (int32_t numa : static_ok_numa) {
        best_static = std::max(
            best_static,
            static_cast<size_t>(std::count(static_ok_numa.begin(), static_ok_numa.end(), numa)));
      }
      out.unresolvable = best_static < count;
      out.why =
          describe("no NUMA node has " + std::to_string(count) + " usable GPUs (" +
                   std::string(kNumaBindAnnotation) + "); " + std::to_string(candidates.size()) +
                   " of " + std::to_string(node_.gpus.size()) + " usable" + skipped_text());
      return out;
    }
    candidates.assign(group.begin(), group.end());
  }
  if (candidates.size() < count) {
    out.unresolvable = static_ok < count;
    out.why = describe(std::to_string(candidates.size()) + " of " +
                       std::to_string(node_.gpus.size()) + " usable" + skipped_text());
    return out;
  }
  if (policy_.gpu.topology_aware) {
    out.picked = Topology(candidates, c.count);
  } else {
    out.picked.assign(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(count));
  }
  out.ok = true;
  return out;
}

std::string ContainerName(const ContainerRequest& c, bool init, size_t i) {
  return std::string(init ? "init container \"" : "container \"") + c.name + "\" (spec." +
         (init ? "initContainers[" : "containers[") + std::to_string(i) + "])";
}

}  // namespace

bool NextCombination(std::vector<size_t>& pos, size_t n) {
  const size_t k = pos.size();
  size_t i = k;
  while (i > 0 && pos[i - 1] == n - k + i - 1) --i;
  if (i == 0) return false;
  ++pos[i - 1];
  for (size_t j = i; j < k; ++j) pos[j] = pos[j - 1] + 1;
  return true;
}

Result<PodConstraints> ConstraintsForPod(const kube::ObjectMeta& pod) {
  PodConstraints k;
  if (const std::string* v = pod.Annotation(kube::kUseGpuTypeAnnotation)) {
    k.use_types = SplitList(*v, true);
  }
  if (const std::string* v = pod.Annotation(kube::kNoUseGpuTypeAnnotation)) {
    k.nouse_types = SplitList(*v, true);
  }
  if (const std::string* v = pod.Annotation(kube::kUseGpuUuidAnnotation)) {
    k.use_uuids = SplitList(*v, false);
  }
  if (const std::string* v = pod.Annotation(kube::kNoUseGpuUuidAnnotation)) {
    k.nouse_uuids = SplitList(*v, false);
  }
  if (const std::string* v = pod.Annotation(kNumaBindAnnotation)) {
    auto b = ParseBool(*v, "value");
    if (!b.ok()) {
      return Error(ErrorCode::kInvalidArgument, DescribePod(pod) + ": annotation " +
                                                    std::string(kNumaBindAnnotation) + ": '" + *v +
                                                    "' is not a boolean");
    }
    k.numa_bind = *b;
  }
  return k;
}

FitResult FitPod(const NodeGpus& node, const PodRequest& pod, const PodConstraints& constraints,
                 const PodPolicy& policy, const QuotaCheck& quota) {
  FitResult r;
  r.devices.reserve(pod.init_containers.size() + pod.containers.size());
  if (!pod.RequestsGpus()) {
    r.fits = true;
    r.devices.resize(pod.init_containers.size() + pod.containers.size());
    return r;
  }
  if (!node.unavailable.empty()) {
    r.unresolvable = true;
    r.reason = node.unavailable;
    return r;
  }
  if (node.gpus.empty()) {
    r.unresolvable = true;
    r.reason = "no GPUs registered (" + std::string(kube::kNodeRegisterAnnotation) + ")";
    return r;
  }
  const size_t n = node.gpus.size();
  Fitter fitter(node, constraints, policy);
  // Reused by every call on this thread (see Select).
  thread_local std::vector<DeviceUsage> base, work;
  thread_local std::vector<int64_t> init_mem, init_cores, app_mem, app_cores;
  thread_local std::vector<bool> init_touch, none, holds, app_exclusive;
  base.resize(n);
  for (size_t i = 0; i < n; ++i) base[i] = node.gpus[i].used;
  init_mem.assign(n, 0);
  init_cores.assign(n, 0);
  init_touch.assign(n, false);
  none.assign(n, false);
  auto entry = [&](size_t i, const ContainerRequest& c) {
    const kube::NodeDevice& d = node.gpus[i].device;
    return kube::ContainerDevice{d.id, std::string(kDeviceVendorType), c.MemoryOn(d.devmem_mib),
                                 c.cores};
  };
  for (size_t ci = 0; ci < pod.init_containers.size(); ++ci) {
    const ContainerRequest& c = pod.init_containers[ci];
    kube::ContainerDevices devices;
    devices.reserve(size_t(std::max(c.count, 0)));
    if (c.requests_gpus()) {
      Fitter::Choice choice = fitter.Select(c, base, none);
      if (!choice.ok) {
        r.unresolvable = choice.unresolvable;
        r.reason = ContainerName(c, true, ci) + " " + choice.why;
        return r;
      }
      for (size_t i : choice.picked) {
        const kube::ContainerDevice e = entry(i, c);
        init_mem[i] = std::max<int64_t>(init_mem[i], e.mem_mib);
        init_cores[i] = std::max<int64_t>(init_cores[i], e.cores);
        init_touch[i] = true;
        devices.push_back(e);
      }
    }
    r.devices.push_back(std::move(devices));
  }

  work.assign(base.begin(), base.end());
  holds.assign(n, false);
  app_exclusive.assign(n, false);
  app_mem.assign(n, 0);
  app_cores.assign(n, 0);
  for (size_t ci = 0; ci < pod.containers.size(); ++ci) {
    const ContainerRequest& c = pod.containers[ci];
    kube::ContainerDevices devices;
    devices.reserve(size_t(std::max(c.count, 0)));
    if (c.requests_gpus()) {
      Fitter::Choice choice = fitter.Select(c, work, holds);
      if (!choice.ok) {
        r.unresolvable = choice.unresolvable;
        r.reason = ContainerName(c, false, ci) + " " + choice.why;
        return r;
      }
      for (size_t i : choice.picked) {
        const kube::ContainerDevice e = entry(i, c);
        DeviceUsage& u = work[i];
        if (!holds[i]) ++u.slots;
        holds[i] = true;
        u.mem_mib += e.mem_mib;
        u.cores += e.cores;
        app_mem[i] += e.mem_mib;
        app_cores[i] += e.cores;
        if (c.exclusive() && !app_exclusive[i]) {
          ++u.exclusive;
          app_exclusive[i] = true;
        }
        devices.push_back(e);
      }
    }
    r.devices.push_back(std::move(devices));
  }

  if (quota.quota != nullptr && quota.quota->limited()) {
    const QuotaAmounts wanted = AllocationAmounts(r.devices, pod.init_containers.size());
    if (auto over = QuotaExceeded(quota.ns, *quota.quota, quota.used, wanted, *quota.config)) {
      r.devices.clear();
      r.reason = *over;
      return r;
    }
  }

  // What the node holds with the pod placed: per GPU the larger of init peak and containers.
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    const kube::NodeDevice& d = node.gpus[i].device;
    const DeviceUsage& u = base[i];
    const bool touched = holds[i] || init_touch[i];
    total += DeviceScore(policy.weights, u.slots + (touched ? 1 : 0), d.count,
                         u.cores + std::max(init_cores[i], app_cores[i]), d.devcore,
                         u.mem_mib + std::max(init_mem[i], app_mem[i]), d.devmem_mib);
  }
  const double mean = total / double(n);
  const double score = policy.node == NodePolicy::kBinpack ? mean : 10.0 - mean;
  r.score = std::clamp<int64_t>(std::llround(score), 0, 10);
  r.fits = true;
  return r;
}

}  // namespace hami::scheduler
