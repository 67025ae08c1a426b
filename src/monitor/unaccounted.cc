#include "monitor/unaccounted.h"

#include <algorithm>
#include <map>

namespace hami::monitor {

const char* UnaccountedReasonName(UnaccountedReason reason) {
  switch (reason) {
    case UnaccountedReason::kNoRegion:
      return "no_region";
    case UnaccountedReason::kUnderReported:
      return "under_reported";
  }
  return "no_region";
}

std::vector<UnaccountedProcess> FindUnaccounted(
    const inventory::NodeSample& sample, const std::vector<AccountedProcess>& accounted,
    uint64_t tolerance_bytes, const std::function<Attribution(pid_t)>& attribute) {
  // (uuid, pid) -> bytes accounted, and the first slot's container.
  std::map<std::pair<std::string, pid_t>, std::pair<uint64_t, const ContainerKey*>> slots;
  for (const AccountedProcess& a : accounted) {
    if (a.host_pid <= 0) continue;
    auto& entry = slots[{a.device_uuid, a.host_pid}];
    entry.first += a.accounted_bytes;
    if (entry.second == nullptr) entry.second = &a.key;
  }
  std::vector<UnaccountedProcess> out;
  for (const inventory::GpuSample& gpu : sample.gpus) {
    if (gpu.uuid.empty()) continue;
    std::vector<inventory::GpuProcess> procs = gpu.processes;
    std::sort(procs.begin(), procs.end(),
              [](const inventory::GpuProcess& a, const inventory::GpuProcess& b) {
                return a.pid < b.pid;
              });
    for (const inventory::GpuProcess& p : procs) {
      if (p.used_bytes == 0) continue;
      UnaccountedProcess u;
      u.pid = pid_t(p.pid);
      u.device_uuid = gpu.uuid;
      u.nvml_bytes = p.used_bytes;
      auto it = slots.find({gpu.uuid, pid_t(p.pid)});
      if (it == slots.end()) {
        u.reason = UnaccountedReason::kNoRegion;
        u.unaccounted_bytes = p.used_bytes;
        if (attribute) u.attribution = attribute(u.pid);
      } else {
        const uint64_t have = it->second.first;
        const uint64_t gap = region::UnaccountedGap(p.used_bytes, have, tolerance_bytes);
        if (gap == 0) continue;
        u.reason = UnaccountedReason::kUnderReported;
        u.accounted_bytes = have;
        u.unaccounted_bytes = gap;
        u.attribution.source = AttributionSource::kRegion;
        u.attribution.key = *it->second.second;
      }
      out.push_back(std::move(u));
    }
  }
  return out;
}

}  // namespace hami::monitor
