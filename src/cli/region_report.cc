#include "cli/region_report.h"

#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/parse.h"
#include "common/strings.h"

namespace hami::cli {

namespace {

using region::Access;
using region::layout::File;
using region::layout::SlotState;

std::string FixedString(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

// The open failed only because this user may not write the file.
bool NoWriteAccess(const Error& e) {
  return e.sys_errno() == EACCES || e.sys_errno() == EPERM || e.sys_errno() == EROFS;
}

nlohmann::json When(int64_t realtime_ns) {
  return {{"realtime_ns", realtime_ns}, {"time", FormatRealtime(realtime_ns)}};
}

// Per tier, why it gave no PID (tiers that answered or were not reached are left out), with
// the number of attempts and the latest attempt's duration.
nlohmann::json IdentityDetail(const region::SlotView& s) {
  nlohmann::json tiers = nlohmann::json::object();
  for (int t = 0; t < region::kIdentityTiers; ++t) {
    const region::IdentityReason reason = s.identity_reason[size_t(t)];
    if (reason == region::IdentityReason::kNone) continue;
    tiers[region::IdentityTierName(region::IdentityTier(t))] = region::IdentityReasonName(reason);
  }
  return {{"attempts", s.identity_attempts},
          {"duration_us", s.identity_ns / 1000},
          {"tier_reasons", tiers}};
}

// The latest NVML cross-check of one device, as libvgpu's watcher recorded it.
nlohmann::json CrossCheckReport(const region::Region::CrossCheckState& c) {
  if (c.checked_ns == 0) return {{"checked", false}};
  return {{"checked", true},
          {"age_s", double(MonotonicNs() - c.checked_ns) / 1e9},
          {"unaccounted_bytes", c.unaccounted_bytes},
          {"largest_host_pid", c.host_pid},
          {"unchecked_processes", c.unchecked}};
}

// The compute limiter's shared state of one device.
nlohmann::json LimiterReport(const region::layout::LimiterDevice& l) {
  return {{"mode", region::LimiterModeName(region::LimiterMode(l.mode.load()))},
          {"measured_percent", double(l.measured.load()) / 100.0},
          {"rate_waves_per_s", double(l.rate.load()) / double(region::layout::kMilliUnitsPerWave)},
          {"launched_waves", l.admitted.load() / uint64_t(region::layout::kMilliUnitsPerWave)},
          {"waited_ms", l.waited_ns.load() / 1000000},
          {"controller_pid", l.controller_pid.load()}};
}

}  // namespace

const char* AccessName(Access access) {
  return access == Access::kReadOnly ? "read-only" : "read-write";
}

std::string FormatLimit(uint64_t limit_bytes) {
  return limit_bytes == 0 ? "unlimited" : FormatBytes(limit_bytes);
}

std::string FormatSmLimit(uint32_t percent) {
  return percent == 0 || percent == 100 ? "unlimited" : std::to_string(percent) + "%";
}

std::string FormatRealtime(int64_t realtime_ns) {
  if (realtime_ns == 0) return "-";
  time_t secs = time_t(realtime_ns / 1000000000);
  struct tm tm {};
  if (gmtime_r(&secs, &tm) == nullptr) return std::to_string(realtime_ns) + "ns";
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Printable(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

std::string DumpJson(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<OpenedRegion> OpenExistingRegion(const std::string& path, RegionAccess access) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Error::FromErrno("shared region " + path);
  if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
    return Error(ErrorCode::kPermission,
                 "shared region " + path + ": not a regular file; refusing to use it");
  }
  Access mode = access == RegionAccess::kReadOnly ? Access::kReadOnly : Access::kReadWrite;
  auto r = region::Region::Open(path, nullptr, region::Create::kNever, nullptr, mode);
  if (!r.ok() && access == RegionAccess::kReadWriteElseReadOnly && NoWriteAccess(r.error())) {
    mode = Access::kReadOnly;
    r = region::Region::Open(path, nullptr, region::Create::kNever, nullptr, mode);
  }
  if (!r.ok()) return std::move(r).error();
  // A container's process may hold a lock forever, or forge its word: never wait on one.
  (*r)->SetLockTimeout(region::Region::kHostLockTimeoutNs);
  // Every loop over devices (the library's included) trusts this count.
  uint32_t devices = (*r)->file().policy.device_count;
  if (devices > uint32_t(region::kMaxDevices)) {
    return Error(ErrorCode::kCorrupt, "shared region " + path + ": its policy counts " +
                                          std::to_string(devices) + " devices, more than the " +
                                          std::to_string(region::kMaxDevices) +
                                          " its layout holds; refusing to use it");
  }
  return OpenedRegion{std::move(r).value(), mode};
}

nlohmann::json DescribeRegion(const OpenedRegion& opened) {
  using nlohmann::json;
  const region::Region& r = *opened.region;
  const File& f = r.file();
  const region::PolicyView p = r.Policy();
  const int n = std::clamp(p.device_count, 0, region::kMaxDevices);

  json out;
  out["file"] = r.path();
  out["access"] = AccessName(opened.access);
  out["layout"] = {{"major", f.header.major},
                   {"minor", f.header.minor},
                   {"fingerprint", FormatHex64(f.header.fingerprint)}};
  out["creator"] = {{"pid", f.header.creator_pid},
                    {"comm", FixedString(f.header.creator_comm, sizeof(f.header.creator_comm))},
                    {"created", When(f.header.created_realtime_ns)}};

  int64_t changed_ns = f.policy.changed_realtime_ns.load(std::memory_order_relaxed);
  json changed = nullptr;
  if (changed_ns != 0) {
    changed = When(changed_ns);
    changed["pid"] = f.policy.changed_by_pid.load(std::memory_order_relaxed);
  }
  json stamped = When(p.stamped_realtime_ns);
  stamped["pid"] = p.stamped_by_pid;
  stamped["comm"] = p.stamped_by_comm;
  out["policy"] = {{"generation", p.generation},
                   {"device_count", p.device_count},
                   {"priority", p.priority},
                   {"core_policy", region::CorePolicyName(p.core_policy)},
                   {"oversubscribe", p.oversubscribe},
                   {"host_limit_bytes", p.host_limit},
                   {"utilization_switch", p.utilization_switch},
                   {"paused", p.paused},
                   {"stamped", stamped},
                   {"changed", changed}};

  out["devices"] = json::array();
  for (int d = 0; d < n; ++d) {
    region::DeviceSnapshot s = r.Snapshot(d);
    std::array<uint64_t, region::kUsageKinds> kinds{};
    for (const auto& [slot, usage] : s.slots) {
      for (size_t k = 0; k < kinds.size(); ++k) kinds[k] += usage[k];
    }
    json by_kind = json::object();
    for (int k = 0; k < region::kUsageKinds; ++k) {
      const char* name = region::UsageKindName(region::UsageKind(k));
      // The reserved kind appears only when something was charged to it (a bug).
      if (std::strcmp(name, "reserved") == 0 && kinds[size_t(k)] == 0) continue;
      by_kind[name] = kinds[size_t(k)];
    }
    const auto& account = f.devices[d];
    out["devices"].push_back(
        {{"index", d},
         {"uuid", p.uuid[size_t(d)]},
         {"memory_limit_bytes", s.limit_bytes},
         {"sm_limit_percent", p.sm_limit[size_t(d)]},
         {"used_bytes", s.used_bytes},
         {"peak_bytes", s.peak_bytes},
         {"rejected", s.rejected},
         {"slot_sum_bytes", s.slot_sum_bytes},
         {"usage_bytes", by_kind},
         {"sm_util_percent", account.sm_util.load(std::memory_order_relaxed)},
         {"limiter", LimiterReport(f.policy.limiter[d])},
         {"monitor_used_bytes", account.monitor_used_bytes.load(std::memory_order_relaxed)},
         {"crosscheck", CrossCheckReport(r.CrossCheck(d))}});
  }

  // Memory the container's processes hold outside the device budget: allocations served from
  // host memory (oversubscription) and other processes' memory they map (imports).
  const region::Region::HostUse host = r.Host();
  out["outside_budget"] = {{"host_limit_bytes", host.limit_bytes},
                           {"spilled_bytes", host.spilled_bytes},
                           {"spilled_peak_bytes", host.peak_bytes},
                           {"spill_rejected", host.rejected},
                           {"imported_bytes", host.imported_bytes}};

  out["slots"] = json::array();
  for (const region::SlotView& s : r.Slots()) {
    json used = json::array();
    json sm = json::array();
    for (int d = 0; d < n; ++d) {
      used.push_back(s.used_bytes[size_t(d)]);
      sm.push_back(f.slots[s.index].sm_util[d].load(std::memory_order_relaxed));
    }
    out["slots"].push_back(
        {{"index", s.index},
         {"state", region::SlotStateName(s.state)},
         {"alive", s.alive},
         {"generation", s.generation},
         {"pid", s.pid},
         {"host_pid", s.host_pid},
         {"identity", region::IdentitySourceName(s.identity)},
         {"identity_detail", IdentityDetail(s)},
         {"status", region::SlotStatusName(s.status)},
         {"comm", s.comm},
         {"registered", When(s.registered_realtime_ns)},
         {"launches", s.launches},
         {"used_bytes", used},
         {"spilled_bytes", s.host_bytes},
         {"imported_bytes", s.imported_bytes},
         {"sm_util_percent", sm},
         {"sm_limiter_mode", region::LimiterModeName(region::LimiterMode(
                                 f.slots[s.index].sm_mode.load(std::memory_order_relaxed)))},
         {"sm_waited_ms", f.slots[s.index].sm_waited_ns.load(std::memory_order_relaxed) / 1000000},
         {"unaccounted",
          s.unaccounted_bytes == 0
              ? json(nullptr)
              : json{{"device", s.unaccounted_device},
                     {"bytes", s.unaccounted_bytes},
                     {"nvml_bytes", s.unaccounted_nvml_bytes},
                     {"for_s", double(MonotonicNs() - s.unaccounted_since_ns) / 1e9}}}});
  }

  // How the container's processes learned their host PIDs (counts since the region was made).
  json by_source = json::object(), by_reason = json::object();
  const auto sources = r.IdentityCounts();
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i] != 0) {
      by_source[region::IdentitySourceName(region::IdentitySource(i))] = sources[i];
    }
  }
  const auto reasons = r.IdentityReasonCounts();
  for (size_t i = 0; i < reasons.size(); ++i) {
    if (reasons[i] != 0) {
      by_reason[region::IdentityReasonName(region::IdentityReason(i))] = reasons[i];
    }
  }
  out["identity"] = {{"by_source", by_source}, {"tier_failures", by_reason}};

  out["inconsistencies"] = json::array();
  for (const region::Inconsistency& i : r.Check()) {
    out["inconsistencies"].push_back({{"kind", region::InconsistencyKindName(i.kind)},
                                      {"device", i.device >= 0 ? json(i.device) : json(nullptr)},
                                      {"slot", i.slot >= 0 ? json(i.slot) : json(nullptr)},
                                      {"message", i.message}});
  }
  return out;
}

}  // namespace hami::cli
