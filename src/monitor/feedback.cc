#include "monitor/feedback.h"

#include <algorithm>
#include <numeric>

namespace hami::monitor {

namespace {

// The non-empty UUIDs, sorted and unique.
std::vector<std::string> DeviceSet(const std::vector<std::string>& devices) {
  std::vector<std::string> out;
  for (const std::string& d : devices) {
    if (!d.empty()) out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool Share(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  auto i = a.begin();
  auto j = b.begin();
  while (i != a.end() && j != b.end()) {
    if (*i == *j) return true;
    if (*i < *j) {
      ++i;
    } else {
      ++j;
    }
  }
  return false;
}

}  // namespace

uint32_t DecayRecentKernel(uint32_t recent_kernel) {
  if (recent_kernel == 0) return 0;
  return std::min(recent_kernel, region::kRecentKernelOnLaunch) - 1;
}

std::vector<FeedbackDecision> DecideFeedback(std::span<const FeedbackInput> containers) {
  const size_t n = containers.size();
  std::vector<FeedbackDecision> out(n);
  std::vector<std::vector<std::string>> devices(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].recent_kernel = DecayRecentKernel(containers[i].recent_kernel);
    out[i].active = out[i].recent_kernel > 0;
    devices[i] = DeviceSet(containers[i].devices);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return containers[a].priority < containers[b].priority;
  });
  std::vector<bool> competing(n, false);
  // Highest priority first; a group of equal priority is decided before any of it competes.
  for (size_t begin = 0; begin < n;) {
    size_t end = begin;
    const int32_t priority = containers[order[begin]].priority;
    while (end < n && containers[order[end]].priority == priority) ++end;
    for (size_t k = begin; k < end; ++k) {
      const size_t c = order[k];
      for (size_t d = 0; d < n && !out[c].paused; ++d) {
        out[c].paused =
            competing[d] && containers[d].priority < priority && Share(devices[c], devices[d]);
      }
    }
    for (size_t k = begin; k < end; ++k) {
      const size_t c = order[k];
      competing[c] = out[c].active && !out[c].paused;
    }
    begin = end;
  }
  for (size_t c = 0; c < n; ++c) {
    for (size_t d = 0; d < n && !out[c].utilization_switch; ++d) {
      out[c].utilization_switch = d != c && competing[d] &&
                                  containers[d].priority <= containers[c].priority &&
                                  Share(devices[c], devices[d]);
    }
    const region::CorePolicy policy = containers[c].core_policy;
    out[c].sm_limit_applies = policy == region::CorePolicy::kForce ||
                              (policy == region::CorePolicy::kDefault && out[c].utilization_switch);
  }
  return out;
}

FeedbackStats RunFeedbackPass(std::span<region::Region* const> regions) {
  FeedbackStats stats;
  std::vector<FeedbackInput> inputs;
  std::vector<region::Region*> used;
  inputs.reserve(regions.size());
  used.reserve(regions.size());
  for (region::Region* r : regions) {
    // The decay first (a CAS from the value it replaces), then the decision from that value.
    auto replaced = r->UpdateRecentKernel(DecayRecentKernel);
    if (!replaced.ok()) {
      ++stats.errors;
      continue;
    }
    const region::PolicyView p = r->Policy();
    FeedbackInput in;
    in.priority = p.priority;
    in.core_policy = p.core_policy;
    in.recent_kernel = *replaced;
    const int count = std::clamp(p.device_count, 0, region::kMaxDevices);
    in.devices.assign(p.uuid.begin(), p.uuid.begin() + count);
    in.paused = p.paused;
    in.utilization_switch = p.utilization_switch != 0;
    inputs.push_back(std::move(in));
    used.push_back(r);
  }
  const std::vector<FeedbackDecision> decisions = DecideFeedback(inputs);
  stats.regions = int(used.size());
  for (size_t i = 0; i < used.size(); ++i) {
    const FeedbackDecision& d = decisions[i];
    if (d.paused != inputs[i].paused) {
      if (used[i]->SetPaused(d.paused).ok()) {
        ++stats.writes;
      } else {
        ++stats.errors;
      }
    }
    if (d.utilization_switch != inputs[i].utilization_switch) {
      if (used[i]->SetUtilizationSwitch(d.utilization_switch).ok()) {
        ++stats.writes;
      } else {
        ++stats.errors;
      }
    }
    stats.active += d.active ? 1 : 0;
    stats.paused += d.paused ? 1 : 0;
    stats.switched_on += d.utilization_switch ? 1 : 0;
  }
  return stats;
}

}  // namespace hami::monitor
