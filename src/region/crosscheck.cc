#include "region/crosscheck.h"

#include <algorithm>
#include <map>

#include "region/region.h"

namespace hami::region {

uint64_t DeviceCrossCheck::TotalGap() const {
  uint64_t total = 0;
  for (const AccountingGap& g : gaps) total += g.gap_bytes;
  return total;
}

DeviceCrossCheck CrossCheckDevice(int device, std::span<const SlotView> slots,
                                  std::span<const NvmlProcessUse> nvml, uint64_t tolerance_bytes) {
  DeviceCrossCheck out;
  out.device = device;
  if (device < 0 || device >= kMaxDevices) return out;
  std::map<pid_t, uint64_t> shown;  // host PID -> bytes NVML shows
  for (const NvmlProcessUse& p : nvml) {
    if (p.host_pid > 0) shown[p.host_pid] += p.bytes;
  }
  // A host PID two slots name (a slot not yet reclaimed and its successor) is checked once,
  // against both slots' books, and reported on the first.
  std::map<pid_t, AccountingGap> by_pid;
  for (const SlotView& s : slots) {
    if (!s.alive || s.state != layout::SlotState::kLive) continue;
    if (s.host_pid <= 0) {
      ++out.unchecked;
      continue;
    }
    auto [it, added] = by_pid.try_emplace(s.host_pid);
    AccountingGap& g = it->second;
    if (added) {
      g.slot = s.index;
      g.pid = s.pid;
      g.host_pid = s.host_pid;
    }
    g.accounted_bytes += s.used_bytes[size_t(device)];
  }
  for (auto& [pid, g] : by_pid) {
    auto it = shown.find(pid);
    if (it == shown.end()) continue;
    g.nvml_bytes = it->second;
    g.gap_bytes = UnaccountedGap(g.nvml_bytes, g.accounted_bytes, tolerance_bytes);
    if (g.gap_bytes != 0) out.gaps.push_back(g);
  }
  std::sort(out.gaps.begin(), out.gaps.end(),
            [](const AccountingGap& a, const AccountingGap& b) { return a.slot < b.slot; });
  return out;
}

}  // namespace hami::region
