#include "scheduler/policy.h"

#include <algorithm>
#include <charconv>

#include "common/quote.h"
#include "common/strings.h"
#include "kube/annotations.h"
#include "scheduler/request.h"

namespace hami::scheduler {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> SplitComma(std::string_view s) {
  std::vector<std::string_view> out = SplitString(s, ',', false);
  for (std::string_view& part : out) part = Trim(part);
  return out;
}

Error Invalid(std::string_view what, std::string msg) {
  return Error(ErrorCode::kInvalidArgument, std::string(what) + ": " + std::move(msg));
}

}  // namespace

Result<GpuPolicy> ParseGpuPolicy(std::string_view text, std::string_view what) {
  GpuPolicy p;
  p.text = std::string(text);
  if (Trim(text).empty()) return Invalid(what, "empty GPU policy");
  bool seen_sort[3] = {false, false, false};
  for (std::string_view term : SplitComma(text)) {
    auto once = [&](bool& flag) -> Status {
      if (flag) return Invalid(what, "'" + std::string(term) + "' appears twice");
      flag = true;
      return OkStatus();
    };
    if (term == "binpack" || term == "spread" || term == "numa") {
      const SortKey key = term == "binpack"  ? SortKey::kBinpack
                          : term == "spread" ? SortKey::kSpread
                                             : SortKey::kNuma;
      HAMI_TRY(once(seen_sort[static_cast<int>(key)]));
      p.sort_keys.push_back(key);
    } else if (term == "mutex") {
      HAMI_TRY(once(p.mutex));
    } else if (term == "topology-aware") {
      HAMI_TRY(once(p.topology_aware));
    } else {
      return Invalid(
          what,
          QuoteInput(term) + " is not a GPU policy (binpack, spread, topology-aware, mutex, numa)");
    }
  }
  if (seen_sort[0] && seen_sort[1]) {
    return Invalid(what, "binpack and spread exclude each other");
  }
  if (p.sort_keys.empty() || (p.sort_keys.size() == 1 && p.sort_keys[0] == SortKey::kNuma)) {
    // numa alone only groups; usage still orders within a NUMA node.
    p.sort_keys.push_back(SortKey::kSpread);
  }
  return p;
}

Result<NodePolicy> ParseNodePolicy(std::string_view text, std::string_view what) {
  if (text == "binpack") return NodePolicy::kBinpack;
  if (text == "spread") return NodePolicy::kSpread;
  return Invalid(what, QuoteInput(text) + " is not a node policy (binpack, spread)");
}

std::string_view NodePolicyName(NodePolicy policy) {
  return policy == NodePolicy::kBinpack ? "binpack" : "spread";
}

Result<ScoringWeights> ParseScoringWeights(std::string_view text, std::string_view what) {
  ScoringWeights w;
  bool seen[3] = {false, false, false};
  for (std::string_view term : SplitComma(text)) {
    const size_t eq = term.find('=');
    if (eq == std::string_view::npos) {
      return Invalid(what, QuoteInput(term) + ": expected name=weight");
    }
    const std::string_view name = Trim(term.substr(0, eq));
    const std::string_view value = Trim(term.substr(eq + 1));
    int index = name == "slot" ? 0 : name == "core" ? 1 : name == "memory" ? 2 : -1;
    if (index < 0) {
      return Invalid(what, QuoteInput(name) + " is not a weight (slot, core, memory)");
    }
    if (seen[index]) return Invalid(what, "'" + std::string(name) + "' appears twice");
    seen[index] = true;
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || v < 0 ||
        value.front() == '+' || value.front() == '-') {
      return Invalid(what,
                     std::string(name) + "=" + QuoteInput(value) + ": not a non-negative integer");
    }
    (index == 0 ? w.slot : index == 1 ? w.core : w.memory) = v;
  }
  for (int i = 0; i < 3; ++i) {
    if (!seen[i]) {
      static constexpr std::string_view kNames[] = {"slot", "core", "memory"};
      return Invalid(what, "missing the " + std::string(kNames[i]) +
                               " weight (all of slot, core and memory are required)");
    }
  }
  if (w.slot == 0 && w.core == 0 && w.memory == 0) {
    return Invalid(what, "every weight is 0; at least one must be positive");
  }
  return w;
}

Result<PodPolicy> PolicyForPod(const kube::ObjectMeta& pod, const GpuPolicy& default_gpu,
                               NodePolicy default_node) {
  PodPolicy p;
  p.gpu = default_gpu;
  p.node = default_node;
  const std::string name = DescribePod(pod);
  auto what = [&](std::string_view annotation) {
    return name + ": annotation " + std::string(annotation);
  };
  if (const std::string* v = pod.Annotation(kube::kGpuSchedulerPolicyAnnotation)) {
    p.gpu = HAMI_TRY(ParseGpuPolicy(*v, what(kube::kGpuSchedulerPolicyAnnotation)));
  }
  if (const std::string* v = pod.Annotation(kube::kNodeSchedulerPolicyAnnotation)) {
    p.node = HAMI_TRY(ParseNodePolicy(*v, what(kube::kNodeSchedulerPolicyAnnotation)));
  }
  if (const std::string* v = pod.Annotation(kDeviceScoringWeightsAnnotation)) {
    p.weights = HAMI_TRY(ParseScoringWeights(*v, what(kDeviceScoringWeightsAnnotation)));
  }
  return p;
}

double DeviceScore(const ScoringWeights& w, int64_t slots, int32_t count, int64_t cores,
                   int32_t devcore, int64_t mem_mib, int32_t devmem_mib) {
  auto ratio = [](int64_t used, int32_t total) {
    if (total <= 0) return 1.0;
    return std::min(1.0, static_cast<double>(used) / total);
  };
  const double sum = double(w.slot) + w.core + w.memory;
  if (sum <= 0) return 0;
  return 10.0 *
         (w.slot * ratio(slots, count) + w.core * ratio(cores, devcore) +
          w.memory * ratio(mem_mib, devmem_mib)) /
         sum;
}

}  // namespace hami::scheduler
