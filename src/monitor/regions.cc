#include "monitor/regions.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

namespace hami::monitor {

const char* RegionErrorReason(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kCorrupt:
      return "corrupt";
    case ErrorCode::kIncompatible:
      return "incompatible";
    case ErrorCode::kPermission:
      return "permission";
    case ErrorCode::kIo:
      return "io";
    default:
      return "invalid";
  }
}

Result<RegionPtr> OpenRegionFile(const ContainerKey& key, const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Error::FromErrno("shared region " + path);
  auto out = std::make_shared<OpenedRegion>();
  out->key = key;
  out->path = path;
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  out->size = st.st_size;
  auto r = region::Region::Open(path, nullptr, region::Create::kNever, nullptr,
                                region::Access::kReadWrite);
  out->writable = true;
  if (!r.ok() && (r.error().sys_errno() == EACCES || r.error().sys_errno() == EROFS ||
                  r.error().sys_errno() == EPERM)) {
    r = region::Region::Open(path, nullptr, region::Create::kNever, nullptr,
                             region::Access::kReadOnly);
    out->writable = false;
  }
  if (!r.ok()) return std::move(r).error();
  // A container's process may hold a lock forever, or forge its word: never wait on one.
  (*r)->SetLockTimeout(region::Region::kHostLockTimeoutNs);
  const uint32_t devices = (*r)->file().policy.device_count;
  if (devices > uint32_t(region::kMaxDevices)) {
    return Error(ErrorCode::kCorrupt, "shared region " + path + ": its policy counts " +
                                          std::to_string(devices) + " devices, more than the " +
                                          std::to_string(region::kMaxDevices) +
                                          " its layout holds; refusing to use it");
  }
  out->region = std::move(r).value();
  return out;
}

RegionSet::ScanReport RegionSet::Scan(const std::string& hook_path) {
  ScanReport report;
  std::vector<Error> skipped;
  auto dirs = ListContainerDirs(hook_path, &skipped);
  std::lock_guard lock(mu_);
  ++scans_;
  if (!dirs.ok()) {
    // Keep what is open: a transient failure must not drop every container's metrics.
    report.listed = false;
    report.list_error = dirs.error().message();
    return report;
  }
  std::map<std::string, std::string> still_skipped;
  for (const Error& e : skipped) {
    if (!skipped_.contains(e.message())) report.new_problems.push_back(e.message());
    still_skipped[e.message()] = e.message();
  }
  skipped_ = std::move(still_skipped);

  std::map<std::string, RegionPtr> next;
  std::map<std::string, RegionErrorView> next_errors;
  containers_.clear();
  claims_.clear();
  for (const ContainerDir& d : *dirs) {
    containers_.push_back(d.key);
    if (d.is_claim) claims_[d.key] = d.claim;
    for (const std::string& path : d.region_files) {
      struct stat st;
      if (lstat(path.c_str(), &st) != 0) continue;  // gone since the listing
      if (auto it = by_path_.find(path); it != by_path_.end() && it->second->dev == st.st_dev &&
                                         it->second->ino == st.st_ino &&
                                         it->second->size == st.st_size) {
        next[path] = it->second;
        continue;
      }
      auto opened = OpenRegionFile(d.key, path);
      if (!opened.ok()) {
        RegionErrorView view{path, RegionErrorReason(opened.error())};
        auto old = errors_.find(path);
        if (old == errors_.end() || old->second.reason != view.reason) {
          report.new_problems.push_back("event=region_refused path=" + path +
                                        " reason=" + view.reason + ": " + opened.error().message());
        }
        next_errors[path] = std::move(view);
        continue;
      }
      ++report.opened;
      next[path] = std::move(opened).value();
    }
  }
  for (const auto& [path, r] : by_path_) {
    if (!next.contains(path)) ++report.closed;
  }
  by_path_ = std::move(next);
  errors_ = std::move(next_errors);
  report.containers = int(containers_.size());
  return report;
}

std::vector<RegionPtr> RegionSet::regions() const {
  std::vector<RegionPtr> out;
  {
    std::lock_guard lock(mu_);
    out.reserve(by_path_.size());
    for (const auto& [path, r] : by_path_) out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(), [](const RegionPtr& a, const RegionPtr& b) {
    if (a->key != b->key) return a->key < b->key;
    // usage.cache first, then the others by name.
    const bool ua = a->path.ends_with("/usage.cache"), ub = b->path.ends_with("/usage.cache");
    if (ua != ub) return ua;
    return a->path < b->path;
  });
  return out;
}

std::vector<ContainerKey> RegionSet::containers() const {
  std::lock_guard lock(mu_);
  return containers_;
}

std::map<ContainerKey, std::optional<node::ClaimRecord>> RegionSet::claims() const {
  std::lock_guard lock(mu_);
  return claims_;
}

std::vector<RegionErrorView> RegionSet::errors() const {
  std::lock_guard lock(mu_);
  std::vector<RegionErrorView> out;
  for (const auto& [path, e] : errors_) out.push_back(e);
  return out;
}

uint64_t RegionSet::scans() const {
  std::lock_guard lock(mu_);
  return scans_;
}

RegionView ReadRegion(const OpenedRegion& r, const inventory::NodeSample* sample,
                      int64_t now_mono_ns) {
  const region::Region& reg = *r.region;
  const region::layout::File& f = reg.file();
  RegionView v;
  v.key = r.key;
  v.path = r.path;
  v.writable = r.writable;
  const region::PolicyView p = reg.Policy();
  v.paused = p.paused;
  v.utilization_switch = p.utilization_switch != 0;
  v.priority = p.priority;
  v.core_policy = p.core_policy;
  const int64_t last = f.policy.last_kernel_ns.load(std::memory_order_relaxed);
  if (last > 0) {
    v.last_kernel_elapsed_seconds = double(std::max<int64_t>(0, now_mono_ns - last)) / 1e9;
  }
  for (int s = 0; s < region::layout::kIdentitySources; ++s) {
    v.identity_by_source[size_t(s)] =
        f.header.identity_by_source[s].load(std::memory_order_relaxed);
  }
  for (int s = 0; s < region::layout::kIdentityReasons; ++s) {
    v.identity_reasons[size_t(s)] = f.header.identity_reasons[s].load(std::memory_order_relaxed);
  }
  const region::Region::HostUse host = reg.Host();
  v.spilled_bytes = host.spilled_bytes;
  v.host_limit_bytes = host.limit_bytes;
  v.spill_rejected = host.rejected;
  v.imported_bytes = host.imported_bytes;
  std::vector<region::SlotView> slots = reg.Slots();
  for (const region::SlotView& s : slots) {
    if (s.state != region::layout::SlotState::kLive || !s.alive) continue;
    v.processes.push_back(ProcessView{s.pid, s.host_pid, s.identity});
  }
  const int n = reg.device_count();
  for (int d = 0; d < n; ++d) {
    DeviceView dv;
    dv.vdevice_index = d;
    dv.uuid = p.uuid[size_t(d)];
    const region::DeviceSnapshot snap = reg.Snapshot(d);
    dv.used_bytes = snap.used_bytes;
    dv.limit_bytes = snap.limit_bytes;
    dv.peak_bytes = snap.peak_bytes;
    dv.rejected = snap.rejected;
    for (const auto& [slot, kinds] : snap.slots) {
      for (int k = 0; k < region::kUsageKinds; ++k) dv.kind_bytes[size_t(k)] += kinds[size_t(k)];
    }
    dv.sm_limit = reg.SmLimit(d);
    dv.sm_limit_in_force = reg.SmLimitInForce(d);
    const region::layout::LimiterDevice& lim = f.policy.limiter[d];
    dv.limiter_mode = region::layout::LimiterMode(lim.mode.load(std::memory_order_relaxed));
    dv.limiter_waited_seconds = double(lim.waited_ns.load(std::memory_order_relaxed)) / 1e9;
    dv.limiter_measured_ratio = double(lim.measured.load(std::memory_order_relaxed)) / 10000.0;
    if (sample != nullptr && !dv.uuid.empty()) {
      for (const inventory::GpuSample& g : sample->gpus) {
        if (g.uuid != dv.uuid) continue;
        uint64_t bytes = 0;
        uint32_t percent = 0;
        for (const ProcessView& proc : v.processes) {
          if (proc.host_pid <= 0) continue;
          for (const inventory::GpuProcess& gp : g.processes) {
            if (gp.pid == uint32_t(proc.host_pid)) bytes += gp.used_bytes;
          }
          if (auto it = g.process_sm_percent.find(uint32_t(proc.host_pid));
              it != g.process_sm_percent.end()) {
            percent += it->second;
          }
        }
        dv.nvml_bytes = bytes;
        dv.nvml_utilization = std::min<uint32_t>(percent, 100) / 100.0;
        break;
      }
    }
    v.devices.push_back(std::move(dv));
  }
  return v;
}

void AppendAccounted(const OpenedRegion& r, std::vector<AccountedProcess>& out) {
  const region::Region& reg = *r.region;
  const region::PolicyView p = reg.Policy();
  const int n = reg.device_count();
  for (const region::SlotView& s : reg.Slots()) {
    if (s.state != region::layout::SlotState::kLive || !s.alive || s.host_pid <= 0) continue;
    for (int d = 0; d < n; ++d) {
      out.push_back(
          AccountedProcess{s.host_pid, r.key, p.uuid[size_t(d)], s.used_bytes[size_t(d)]});
    }
  }
}

}  // namespace hami::monitor
