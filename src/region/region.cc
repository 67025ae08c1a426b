#include "region/region.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/futex.h"
#include "common/kill_point.h"
#include "common/ofd_lock.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/robust_mutex.h"
#include "common/strings.h"
#include "common/versioned_file.h"
#include "limits/vocabulary.h"

namespace hami::region {

namespace {

using layout::DeviceAccount;
using layout::File;
using layout::Header;
using layout::Slot;
using layout::SlotState;

constexpr off_t SlotLock(int slot) { return layout::kSlotLockBase + slot; }

void CopyString(char* dst, size_t cap, std::string_view src) {
  size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  std::memset(dst + n, 0, cap - n);
}

std::string FixedString(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

layout::SectionRef ExpectedPolicy() {
  return {offsetof(File, policy), sizeof(layout::Policy), 1, sizeof(layout::Policy)};
}
layout::SectionRef ExpectedDevices() {
  return {offsetof(File, devices), sizeof(File::devices), layout::kMaxDevices,
          sizeof(DeviceAccount)};
}
layout::SectionRef ExpectedSlots() {
  return {offsetof(File, slots), sizeof(File::slots), layout::kMaxSlots, sizeof(Slot)};
}

bool SameSection(const layout::SectionRef& a, const layout::SectionRef& b) {
  return a.offset == b.offset && a.size == b.size && a.count == b.count && a.stride == b.stride;
}

uint64_t SlotDeviceTotal(const Slot& s, int device) {
  uint64_t sum = 0;
  for (int k = 0; k < kUsageKinds; ++k) sum += s.usage[device][k].load(std::memory_order_relaxed);
  return sum;
}

// ---- the device lock and its repair ----

// Seqlock writer side; the caller holds the device mutex.
void BeginWrite(DeviceAccount& a) {
  a.seq.store(a.seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}
void EndWrite(DeviceAccount& a) {
  a.seq.store(a.seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

struct RepairContext {
  File* file;
  int device;
};

// The previous holder of a device's mutex died inside it: it may have updated its slot and
// not the total, and may have left the sequence odd. The slots are the truth.
void RepairDevice(void* arg) {
  auto* c = static_cast<RepairContext*>(arg);
  HAMI_KILL_POINT(kRegionRepairBegun);
  DeviceAccount& a = c->file->devices[c->device];
  // The repair is a write section of its own (or finishes the one the dead writer left
  // open): the sequence turns even only after the total is right.
  if (a.seq.load(std::memory_order_relaxed) % 2 == 0) BeginWrite(a);
  uint64_t sum = 0;
  for (const Slot& s : c->file->slots) {
    if (s.state.load(std::memory_order_acquire) != uint32_t(SlotState::kFree)) {
      sum += SlotDeviceTotal(s, c->device);
    }
  }
  a.used_bytes.store(sum, std::memory_order_relaxed);
  if (a.peak_bytes.load(std::memory_order_relaxed) < sum) {
    a.peak_bytes.store(sum, std::memory_order_relaxed);
  }
  EndWrite(a);
}

// A device's mutex. With a timeout (host tools: Region::SetLockTimeout) it is given up on
// after that long, and `wedged` (when given) records the wait.
class DeviceLock {
 public:
  DeviceLock(File* f, int device, int64_t timeout_ns = 0, std::atomic<int64_t>* wedged = nullptr)
      : ctx_{f, device} {
    pthread_mutex_t* m = &f->devices[device].mutex;
    if (timeout_ns > 0) {
      guard_.emplace(m, RepairDevice, &ctx_, timeout_ns);
      if (wedged != nullptr && guard_->timed_out()) {
        wedged->store(timeout_ns, std::memory_order_relaxed);
      }
    } else {
      guard_.emplace(m, RepairDevice, &ctx_);
    }
  }
  bool locked() const { return guard_->locked(); }

 private:
  RepairContext ctx_;
  std::optional<RobustLockGuard> guard_;
};

// Who may still add to a slot whose usage is being returned.
enum class Writers {
  kNone,        // its owner is dead: a device it holds nothing on is skipped unlocked
  kOwnThreads,  // the caller's other threads may be inside Reserve: every device is locked
};

// Returns everything `s` holds on every device to the totals. Idempotent. Walks every
// device, not only the policy's count: Reserve takes any device of the layout.
// False when a device's lock could not be had (its usage is still the slot's).
bool ReturnSlotUsage(File* f, Slot& s, Writers writers, KillPointId kill_point,
                     int64_t timeout_ns = 0, std::atomic<int64_t>* wedged = nullptr) {
  bool all = true;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (writers == Writers::kNone && SlotDeviceTotal(s, d) == 0) continue;
    DeviceLock lock(f, d, timeout_ns, wedged == nullptr ? nullptr : &wedged[d]);
    if (!lock.locked()) {
      all = false;
      continue;
    }
    uint64_t total = SlotDeviceTotal(s, d);
    if (total == 0) continue;
    DeviceAccount& a = f->devices[d];
    BeginWrite(a);
    uint64_t used = a.used_bytes.load(std::memory_order_relaxed);
    a.used_bytes.store(used - std::min(used, total), std::memory_order_relaxed);
    for (int k = 0; k < kUsageKinds; ++k) s.usage[d][k].store(0, std::memory_order_relaxed);
    EndWrite(a);
    HAMI_KILL_POINT_AT(kill_point);
  }
  return all;
}

// What a slot held outside the device budget is nobody's once the slot is free: no total
// holds it (readers sum the slots), and a claimer of an earlier minor would not clear it.
void ForgetOutsideBudget(Slot& s) {
  s.host_bytes.store(0, std::memory_order_relaxed);
  s.imported_bytes.store(0, std::memory_order_relaxed);
}

// Fills a new region (zero bytes of its full size) with `p`; OpenVersionedFile publishes it.
Status FillRegion(File* f, const PolicySpec& p) {
  HAMI_KILL_POINT(kRegionCreateSized);
  Header& h = f->header;
  h.major = layout::kMajor;
  h.minor = layout::kMinor;
  h.header_size = sizeof(Header);
  h.total_size = sizeof(File);
  h.fingerprint = layout::kFingerprint;
  h.max_devices = layout::kMaxDevices;
  h.max_slots = layout::kMaxSlots;
  h.usage_kinds = layout::kUsageKinds;
  h.policy = ExpectedPolicy();
  h.devices = ExpectedDevices();
  h.slots = ExpectedSlots();
  h.created_realtime_ns = RealtimeNs();
  h.creator_pid = getpid();
  CopyString(h.creator_comm, sizeof(h.creator_comm), ProcessComm());
  layout::Policy& pol = f->policy;
  pol.device_count = uint32_t(p.device_count);
  pol.priority.store(p.priority);
  pol.core_policy.store(uint32_t(p.core_policy));
  pol.oversubscribe.store(p.oversubscribe ? 1 : 0);
  pol.host_limit.store(p.host_limit);
  for (int d = 0; d < kMaxDevices; ++d) {
    pol.memory_limit[d].store(p.memory_limit[size_t(d)]);
    pol.sm_limit[d].store(p.sm_limit[size_t(d)]);
    CopyString(pol.uuid[d], layout::kUuidBytes, p.uuid[size_t(d)]);
  }
  pol.stamped_realtime_ns = h.created_realtime_ns;
  pol.stamped_by_pid = h.creator_pid;
  std::memcpy(pol.stamped_by_comm, h.creator_comm, sizeof(pol.stamped_by_comm));
  pol.utilization_switch.store(1);
  for (DeviceAccount& a : f->devices) HAMI_TRY(InitRobustMutex(&a.mutex));
  // Slots are left zero: a claim fills every field it uses (touching 1.3 MB here would make
  // the creator, and everyone waiting for it, slow).
  // The magic last: a file its creator left with a zero magic is recognizably unfinished.
  std::memcpy(h.magic, layout::kMagic, sizeof(h.magic));
  HAMI_KILL_POINT(kRegionCreateFilled);
  return OkStatus();
}

// The region's file as common/versioned_file.h sees it.
constexpr VersionedFileSpec kRegionFile{
    .kind = "shared region",
    .size = sizeof(File),
    .header_size = sizeof(Header),
    .magic_size = sizeof(layout::kMagic),
    .initialized_offset = offsetof(Header, initialized),
    .initialized_value = layout::kInitialized,
    .init_lock = layout::kInitLock,
    .locking = InitLocking::kCreatorsOnly,
};

class RegionFormat final : public VersionedFileFormat {
 public:
  RegionFormat(const std::string& path, const PolicySpec* stamp) : path_(path), stamp_(stamp) {}
  Status Validate(const void* header, uint64_t file_size) const override {
    return ValidateHeader(*static_cast<const Header*>(header), file_size, path_);
  }
  Status Fill(void* file) const override {
    if (stamp_ == nullptr) {
      return Error(ErrorCode::kInternal, "creating shared region " + path_ + " without a policy");
    }
    return FillRegion(static_cast<File*>(file), *stamp_);
  }

 private:
  const std::string& path_;
  const PolicySpec* stamp_;
};

void Compare(const layout::Policy& r, const PolicySpec& mine, std::vector<PolicyDifference>* out) {
  // Text is made only for fields that differ: every opener runs this.
  auto num = [out](const char* field, int device, uint64_t region, uint64_t requested) {
    if (region == requested) return;
    std::string name = field;
    if (device >= 0) name += "[" + std::to_string(device) + "]";
    out->push_back({std::move(name), std::to_string(region), std::to_string(requested)});
  };
  num("device_count", -1, r.device_count, uint64_t(mine.device_count));
  int n = std::min(std::max<int>(int(r.device_count), mine.device_count), kMaxDevices);
  for (int d = 0; d < n; ++d) {
    num("memory_limit", d, r.memory_limit[d].load(), mine.memory_limit[size_t(d)]);
    num("sm_limit", d, r.sm_limit[d].load(), mine.sm_limit[size_t(d)]);
    std::string_view region_uuid(r.uuid[d], strnlen(r.uuid[d], layout::kUuidBytes));
    if (region_uuid != mine.uuid[size_t(d)]) {
      out->push_back(
          {"uuid[" + std::to_string(d) + "]", std::string(region_uuid), mine.uuid[size_t(d)]});
    }
  }
  num("priority", -1, uint64_t(int64_t(r.priority.load())), uint64_t(int64_t(mine.priority)));
  if (r.core_policy.load() != uint32_t(mine.core_policy)) {
    out->push_back({"core_policy", CorePolicyName(CorePolicy(r.core_policy.load())),
                    CorePolicyName(mine.core_policy)});
  }
  num("oversubscribe", -1, r.oversubscribe.load(), mine.oversubscribe ? 1 : 0);
  num("host_limit", -1, r.host_limit.load(), mine.host_limit);
}

// Records, once per field and device, where this process's own limits differ from the
// region's (the process holds to the stricter memory limit; the region's SM limit stands).
// Appends one conflict to the header's list (counted past kMaxConflicts, not kept).
void AppendConflict(File* f, layout::ConflictField field, int device, uint64_t region, uint64_t own,
                    const std::string& comm) {
  Header& h = f->header;
  const uint32_t i = h.conflict_count.fetch_add(1, std::memory_order_relaxed);
  if (i >= uint32_t(layout::kMaxConflicts)) return;
  layout::PolicyConflict& c = h.conflicts[i];
  uint32_t expected = 0;
  if (!c.state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) return;
  c.pid = getpid();
  c.field = uint32_t(field);
  c.device = device;
  c.region_value = region;
  c.process_value = own;
  c.realtime_ns = RealtimeNs();
  CopyString(c.comm, sizeof(c.comm), comm);
  c.state.store(2, std::memory_order_release);
}

void RecordConflicts(File* f, const PolicySpec& mine) {
  const layout::Policy& r = f->policy;
  const int n = std::min(std::max<int>(int(r.device_count), mine.device_count), kMaxDevices);
  std::string comm;  // asked of the kernel only when there is a conflict to record
  auto append = [&](layout::ConflictField field, int d, uint64_t region, uint64_t own) {
    if (comm.empty()) comm = ProcessComm();
    AppendConflict(f, field, d, region, own, comm);
  };
  for (int d = 0; d < n; ++d) {
    const uint64_t memory = r.memory_limit[d].load();
    const uint32_t sm = r.sm_limit[d].load();
    if (memory != mine.memory_limit[size_t(d)]) {
      append(layout::ConflictField::kMemoryLimit, d, memory, mine.memory_limit[size_t(d)]);
    }
    if (sm != mine.sm_limit[size_t(d)]) {
      append(layout::ConflictField::kSmLimit, d, sm, mine.sm_limit[size_t(d)]);
    }
  }
}

// A process that joins with a stricter memory limit than the region's lowers the region's to
// its own: two processes of a container started at once with different limits (whichever
// made the file stamped its own) both hold to the stricter from then on. A looser one never
// raises it (RecordConflicts notes the difference; the process holds to the region's). The
// zero budget of a process that could not read its limit is its own refusal, not a limit
// for its neighbours: it is never written into the region it joins.
void TightenToStricter(File* f, const PolicySpec& mine) {
  layout::Policy& r = f->policy;
  const int n = std::min(std::min<int>(int(r.device_count), mine.device_count), kMaxDevices);
  bool changed = false;
  for (int d = 0; d < n; ++d) {
    const uint64_t own = mine.memory_limit[size_t(d)];
    if (own == 0 || own == layout::kZeroBudgetBytes) continue;
    uint64_t cur = r.memory_limit[d].load();
    while ((cur == 0 || own < cur) && !r.memory_limit[d].compare_exchange_weak(cur, own)) {
    }
    changed |= cur == 0 || own < cur;
  }
  if (changed) {
    r.generation.fetch_add(1);
    r.changed_realtime_ns.store(RealtimeNs());
    r.changed_by_pid.store(getpid());
  }
}

}  // namespace

const char* SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kFree:
      return "free";
    case SlotState::kClaiming:
      return "claiming";
    case SlotState::kLive:
      return "live";
  }
  return "invalid";
}

const char* SlotStatusName(SlotStatus status) {
  switch (status) {
    case SlotStatus::kRunning:
      return "running";
    case SlotStatus::kSuspended:
      return "suspended";
  }
  return "invalid";
}

const char* InconsistencyKindName(Inconsistency::Kind kind) {
  switch (kind) {
    case Inconsistency::Kind::kSlotSumMismatch:
      return "slot_sum_mismatch";
    case Inconsistency::Kind::kDeadOwner:
      return "dead_owner";
    case Inconsistency::Kind::kOverLimit:
      return "over_limit";
    case Inconsistency::Kind::kWedgedLock:
      return "wedged_lock";
    case Inconsistency::Kind::kPolicyConflict:
      return "policy_conflict";
    case Inconsistency::Kind::kUnaccounted:
      return "unaccounted";
  }
  return "invalid";
}

const char* UsageKindName(UsageKind kind) {
  switch (kind) {
    case UsageKind::kContext:
      return "context";
    case UsageKind::kModule:
      return "module";
    case UsageKind::kData:
      return "data";
    case UsageKind::kPool:
      return "pool";
    case UsageKind::kGraph:
      return "graph";
    case UsageKind::kVmm:
      return "vmm";
    case UsageKind::kOther:
      return "other";
  }
  return "reserved";
}

const char* IdentitySourceName(IdentitySource source) {
  switch (source) {
    case IdentitySource::kUnknown:
      return "unknown";
    case IdentitySource::kSameNamespace:
      return "same-namespace";
    case IdentitySource::kBroker:
      return "broker";
    case IdentitySource::kProcfs:
      return "procfs";
    case IdentitySource::kNvmlProbe:
      return "nvml-probe";
    case IdentitySource::kFailed:
      return "failed";
  }
  return "invalid";
}

const char* IdentityReasonName(IdentityReason reason) {
  switch (reason) {
    case IdentityReason::kNone:
      return "none";
    case IdentityReason::kDisabled:
      return "disabled";
    case IdentityReason::kMissing:
      return "missing";
    case IdentityReason::kUntrusted:
      return "untrusted";
    case IdentityReason::kUnavailable:
      return "unavailable";
    case IdentityReason::kBadReply:
      return "bad-reply";
    case IdentityReason::kUnreadable:
      return "unreadable";
    case IdentityReason::kMalformed:
      return "malformed";
    case IdentityReason::kInconsistent:
      return "inconsistent";
    case IdentityReason::kOtherNamespace:
      return "other-namespace";
    case IdentityReason::kLockTimeout:
      return "lock-timeout";
    case IdentityReason::kNoDriver:
      return "no-driver";
    case IdentityReason::kNotFound:
      return "not-found";
    case IdentityReason::kAmbiguous:
      return "ambiguous";
    case IdentityReason::kDriverError:
      return "driver-error";
    case IdentityReason::kBusy:
      return "busy";
  }
  return "invalid";
}

const char* IdentityTierName(IdentityTier tier) {
  static_assert(layout::kIdentityTiers == limits::kIdentityTierCount);
  // A literal of the vocabulary's table: NUL-terminated.
  return limits::IdentityTierName(static_cast<int>(tier)).data();
}

const char* LimiterModeName(LimiterMode mode) {
  switch (mode) {
    case LimiterMode::kOff:
      return "off";
    case LimiterMode::kStarting:
      return "starting";
    case LimiterMode::kClosedLoop:
      return "closed-loop";
    case LimiterMode::kOpenLoop:
      return "open-loop";
  }
  return "invalid";
}

const char* CorePolicyName(CorePolicy policy) {
  // The vocabulary's names (literals: NUL-terminated).
  switch (policy) {
    case CorePolicy::kDefault:
      return limits::CorePolicyName(limits::CorePolicy::kDefault).data();
    case CorePolicy::kForce:
      return limits::CorePolicyName(limits::CorePolicy::kForce).data();
    case CorePolicy::kDisable:
      return limits::CorePolicyName(limits::CorePolicy::kDisable).data();
  }
  return "invalid";
}

Status ValidateHeader(const layout::Header& h, uint64_t file_size, const std::string& path) {
  auto bad = [&path](ErrorCode code, const std::string& why) {
    return Error(code, "shared region " + path + ": " + why + "; refusing to use it");
  };
  if (std::memcmp(h.magic, layout::kMagic, sizeof(h.magic)) != 0) {
    return bad(ErrorCode::kCorrupt, "not a shared region (bad magic)");
  }
  if (h.major != layout::kMajor) {
    return bad(ErrorCode::kIncompatible, "layout version " + std::to_string(h.major) + "." +
                                             std::to_string(h.minor) + ", this build reads " +
                                             std::to_string(layout::kMajor) + ".x");
  }
  if (h.header_size != sizeof(Header) || h.total_size != sizeof(File)) {
    return bad(ErrorCode::kIncompatible,
               "header says " + std::to_string(h.header_size) + "-byte header, " +
                   std::to_string(h.total_size) + " bytes in all; expected " +
                   std::to_string(sizeof(Header)) + " and " + std::to_string(sizeof(File)));
  }
  if (h.fingerprint != layout::kFingerprint) {
    return bad(ErrorCode::kIncompatible, "layout fingerprint " + FormatHex64(h.fingerprint) +
                                             ", expected " + FormatHex64(layout::kFingerprint));
  }
  if (h.max_devices != uint32_t(layout::kMaxDevices) ||
      h.max_slots != uint32_t(layout::kMaxSlots) ||
      h.usage_kinds != uint32_t(layout::kUsageKinds) || !SameSection(h.policy, ExpectedPolicy()) ||
      !SameSection(h.devices, ExpectedDevices()) || !SameSection(h.slots, ExpectedSlots())) {
    return bad(ErrorCode::kCorrupt, "its section table does not match its version");
  }
  if (file_size != h.total_size) {
    return bad(ErrorCode::kCorrupt, "the file is " + std::to_string(file_size) +
                                        " bytes but its header says " +
                                        std::to_string(h.total_size));
  }
  return OkStatus();
}

Region::Region(std::string path, UniqueFd fd, MappedFile map, Access access, bool anonymous)
    : path_(std::move(path)),
      fd_(std::move(fd)),
      map_(std::move(map)),
      file_(static_cast<File*>(map_.data())),
      access_(access),
      anonymous_(anonymous),
      opener_forks_(ForkCount()) {}

Region::~Region() {
  if (file_ == nullptr) return;
  Unregister();
}

Result<std::unique_ptr<Region>> Region::Open(const std::string& path, const PolicySpec* stamp,
                                             Create create,
                                             std::vector<PolicyDifference>* differences,
                                             Access access) {
  if (create == Create::kIfMissing && (stamp == nullptr || access == Access::kReadOnly)) {
    return Error(ErrorCode::kInvalidArgument, "creating a shared region needs a policy");
  }
  if (stamp != nullptr && (stamp->device_count < 0 || stamp->device_count > kMaxDevices)) {
    return Error(ErrorCode::kInvalidArgument, "shared region " + path + ": device count " +
                                                  std::to_string(stamp->device_count) +
                                                  " is not from 0 to 16");
  }
  const RegionFormat format(path, stamp);
  VersionedFile file = HAMI_TRY(OpenVersionedFile(
      path, kRegionFile, format,
      create == Create::kIfMissing ? FileCreate::kIfMissing : FileCreate::kNever,
      access == Access::kReadWrite ? MapAccess::kReadWrite : MapAccess::kReadOnly));
  std::unique_ptr<Region> r(new Region(path, std::move(file.fd), std::move(file.map), access));
  if (stamp != nullptr && differences != nullptr) Compare(r->file_->policy, *stamp, differences);
  if (stamp != nullptr && !file.initialized_here && access == Access::kReadWrite) {
    RecordConflicts(r->file_, *stamp);
    TightenToStricter(r->file_, *stamp);
  }
  return r;
}

Result<std::unique_ptr<Region>> Region::CreatePrivate(const PolicySpec& stamp) {
  if (stamp.device_count < 0 || stamp.device_count > kMaxDevices) {
    return Error(ErrorCode::kInvalidArgument, "a private shared region: device count " +
                                                  std::to_string(stamp.device_count) +
                                                  " is not from 0 to 16");
  }
  static constexpr char kName[] = "hami-vgpu-private";
  const std::string path = std::string("memfd:") + kName;
  const RegionFormat format(path, &stamp);
  VersionedFile file = HAMI_TRY(CreateAnonymousVersionedFile(kName, kRegionFile, format));
  return std::unique_ptr<Region>(
      new Region(path, std::move(file.fd), std::move(file.map), Access::kReadWrite, true));
}

// The file's word, bounded: every loop over devices indexes fixed arrays.
Status Region::Writable() const {
  if (access_ == Access::kReadOnly) {
    return Error(ErrorCode::kPermission, "shared region " + path_ + " is open read-only");
  }
  return OkStatus();
}

bool Region::OwnerAlive(int slot) const {
  if (slot == slot_.load(std::memory_order_acquire)) return true;
  return OfdByteLockedByOther(fd_.get(), SlotLock(slot));
}

bool Region::Inherited() const { return ForkCount() != opener_forks_; }

Result<int> Region::Register() {
  HAMI_TRY(Writable());
  if (Inherited()) {
    return Error(ErrorCode::kInvalidArgument,
                 "shared region " + path_ +
                     ": this handle came through fork(); call ReopenAfterFork() first");
  }
  std::lock_guard<std::mutex> membership(membership_mu_);
  if (int slot = slot_.load(std::memory_order_relaxed); slot >= 0) return slot;
  // Learn what the slot records before claiming one: the claim itself is a few stores.
  const pid_t pid = getpid();
  const std::string comm = ProcessComm();
  Header& h = file_->header;
  // No sweep of dead slots here unless every slot looks taken: a sweep reads every slot, and
  // a process that never admits anything has no use for the budget it frees (the first
  // admission, the views and the monitor sweep when one is due).
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint32_t start = h.claim_hint.load(std::memory_order_relaxed) % uint32_t(kMaxSlots);
    for (int k = 0; k < kMaxSlots; ++k) {
      int i = int((start + uint32_t(k)) % uint32_t(kMaxSlots));
      Slot& s = file_->slots[i];
      if (s.state.load(std::memory_order_acquire) != uint32_t(SlotState::kFree)) continue;
      if (OfdLockByte(fd_.get(), SlotLock(i), F_WRLCK, LockWait::kNo) != 0) continue;
      HAMI_KILL_POINT(kRegionRegisterLocked);
      uint32_t expected = uint32_t(SlotState::kFree);
      if (!s.state.compare_exchange_strong(expected, uint32_t(SlotState::kClaiming),
                                           std::memory_order_acq_rel)) {
        OfdLockByte(fd_.get(), SlotLock(i), F_UNLCK, LockWait::kNo);
        continue;
      }
      HAMI_KILL_POINT(kRegionRegisterClaimed);
      s.generation += 1;
      s.pid = pid;
      s.host_pid.store(0, std::memory_order_relaxed);
      std::atomic_ref<uint64_t>(s.start_time_ticks).store(0, std::memory_order_relaxed);
      s.pidns_inode = 0;  // the identity code fills it in when it needs it
      s.status.store(uint32_t(SlotStatus::kRunning), std::memory_order_relaxed);
      s.identity.store(uint32_t(IdentitySource::kUnknown), std::memory_order_relaxed);
      for (auto& r : s.identity_reason) r.store(0, std::memory_order_relaxed);
      s.identity_attempts.store(0, std::memory_order_relaxed);
      s.identity_ns.store(0, std::memory_order_relaxed);
      CopyString(s.comm, sizeof(s.comm), comm);
      s.registered_realtime_ns.store(RealtimeNs(), std::memory_order_relaxed);
      s.last_kernel_ns.store(0, std::memory_order_relaxed);
      s.launches.store(0, std::memory_order_relaxed);
      for (auto& u : s.sm_util) u.store(0, std::memory_order_relaxed);
      s.unaccounted_bytes.store(0, std::memory_order_relaxed);
      s.unaccounted_nvml_bytes.store(0, std::memory_order_relaxed);
      s.unaccounted_device.store(-1, std::memory_order_relaxed);
      s.unaccounted_devices.store(0, std::memory_order_relaxed);
      s.unaccounted_since_ns.store(0, std::memory_order_relaxed);
      s.host_bytes.store(0, std::memory_order_relaxed);
      s.imported_bytes.store(0, std::memory_order_relaxed);
      for (int d = 0; d < kMaxDevices; ++d) {
        s.own_sm_limit[d].store(uint8_t(std::min<uint32_t>(
                                    own_sm_limit_[size_t(d)].load(std::memory_order_relaxed), 100)),
                                std::memory_order_relaxed);
      }
      HAMI_KILL_POINT(kRegionRegisterFilled);
      s.state.store(uint32_t(SlotState::kLive), std::memory_order_release);
      h.claim_hint.store(uint32_t(i + 1), std::memory_order_relaxed);
      slot_generation_ = s.generation;
      slot_.store(i, std::memory_order_release);
      return i;
    }
    // Every slot looked taken: some owners may be dead.
    if (SweepDeadLocked() == 0) break;
  }
  return Error(ErrorCode::kBusy, "shared region " + path_ + ": all " + std::to_string(kMaxSlots) +
                                     " process slots are held by live processes");
}

void Region::Unregister() {
  if (Inherited()) {
    // A fork child that never reopened (exit handlers, say): the slot, its lock and the open
    // file are its parent's, which goes on using them.
    slot_.store(-1, std::memory_order_release);
    return;
  }
  std::lock_guard<std::mutex> membership(membership_mu_);
  const int slot = slot_.load(std::memory_order_relaxed);
  if (slot < 0) return;
  // First: a Reserve or Release of another thread that locks a device after this sees it
  // and stays out of the slot; one that locked before is seen by the return below.
  slot_.store(-1, std::memory_order_seq_cst);
  Slot& s = file_->slots[slot];
  ReturnSlotUsage(file_, s, Writers::kOwnThreads, KillPointId::kRegionUnregisterDevice);
  ForgetOutsideBudget(s);
  s.state.store(uint32_t(SlotState::kFree), std::memory_order_release);
  HAMI_KILL_POINT(kRegionUnregisterFreed);
  OfdLockByte(fd_.get(), SlotLock(slot), F_UNLCK, LockWait::kNo);
}

bool Region::ReclaimHeld(int slot) {
  Slot& s = file_->slots[slot];
  // A device whose lock cannot be had keeps the slot: freed, its usage would be lost.
  if (!ReturnSlotUsage(file_, s, Writers::kNone, KillPointId::kRegionReclaimDevice,
                       lock_timeout_ns_, wedged_ns_.data())) {
    return false;
  }
  ForgetOutsideBudget(s);
  s.state.store(uint32_t(SlotState::kFree), std::memory_order_release);
  return true;
}

int Region::SweepDead() {
  if (access_ == Access::kReadOnly || Inherited()) return 0;
  std::lock_guard<std::mutex> membership(membership_mu_);
  return SweepDeadLocked();
}

int Region::SweepDeadIfDue() {
  int64_t last = file_->header.last_sweep_ns.load(std::memory_order_relaxed);
  if (MonotonicNs() - last < kSweepIntervalNs) return 0;  // the common case: one clock read
  if (access_ == Access::kReadOnly || Inherited()) return 0;
  std::unique_lock<std::mutex> membership(membership_mu_, std::try_to_lock);
  if (!membership.owns_lock()) return 0;
  return SweepDeadIfDueLocked();
}

int Region::SweepDeadIfDueLocked() {
  Header& h = file_->header;
  int64_t now = MonotonicNs();
  int64_t last = h.last_sweep_ns.load(std::memory_order_relaxed);
  if (now - last < kSweepIntervalNs ||
      !h.last_sweep_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    return 0;
  }
  return SweepDeadLocked();
}

int Region::SweepDeadLocked() {
  const int own = slot_.load(std::memory_order_relaxed);
  int n = 0;
  for (int i = 0; i < kMaxSlots; ++i) {
    if (i == own) continue;
    Slot& s = file_->slots[i];
    if (s.state.load(std::memory_order_acquire) == uint32_t(SlotState::kFree)) continue;
    // Taking the lock proves its owner is gone (and keeps a claimer out while we work).
    if (OfdLockByte(fd_.get(), SlotLock(i), F_WRLCK, LockWait::kNo) != 0) continue;
    if (s.state.load(std::memory_order_acquire) != uint32_t(SlotState::kFree) && ReclaimHeld(i)) {
      ++n;
    }
    OfdLockByte(fd_.get(), SlotLock(i), F_UNLCK, LockWait::kNo);
  }
  file_->header.last_sweep_ns.store(MonotonicNs(), std::memory_order_relaxed);
  return n;
}

Status Region::ReopenAfterFork() {
  // The inherited descriptor shares the parent's open file (and so its locks): closing our
  // copy releases nothing of the parent's.
  slot_.store(-1, std::memory_order_relaxed);
  // The child runs one thread: a membership lock a parent thread held at fork() means
  // nothing here (std::mutex has no destructor to skip).
  std::construct_at(&membership_mu_);
  // The inherited mapping is of the same file and stays valid; only the open file (whose
  // locks are the parent's) must be our own. Until it is, the handle can read but not
  // register.
  const int flags = access_ == Access::kReadOnly ? O_RDONLY : O_RDWR;
  if (anonymous_) {
    // An open file of its own on the same memory: through the inherited descriptor's entry
    // in /proc (a link that must be followed), before that descriptor is let go.
    const std::string inherited = "/proc/self/fd/" + std::to_string(fd_.get());
    UniqueFd own(open(inherited.c_str(), flags | O_CLOEXEC));
    if (!own.valid()) return Error::FromErrno("reopening the private region " + inherited);
    fd_ = std::move(own);
  } else {
    // The same file, or none: a file put at the path since (replaced) is not this mapping's.
    UniqueFd own = HAMI_TRY(OpenRegularFile(path_, flags));
    struct stat mapped {
    }, opened{};
    if (fstat(fd_.get(), &mapped) != 0 || fstat(own.get(), &opened) != 0) {
      return Error::FromErrno("shared region " + path_ + ": fstat after fork");
    }
    if (mapped.st_dev != opened.st_dev || mapped.st_ino != opened.st_ino) {
      return Error(ErrorCode::kCorrupt, "shared region " + path_ +
                                            ": another file stands at the path now (the file "
                                            "the parent mapped was replaced)");
    }
    fd_ = std::move(own);
  }
  opener_forks_ = ForkCount();
  return OkStatus();
}

Admission Region::Reserve(int device, uint64_t bytes, UsageKind kind, Enforce enforce) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0) return Admission::kNotRegistered;
  if (device < 0 || device >= device_count()) return Admission::kNoSuchDevice;
  if (bytes == 0) return Admission::kOk;
  Slot& s = file_->slots[slot];
  DeviceAccount& a = file_->devices[device];
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      DeviceLock lock(file_, device, lock_timeout_ns_, &wedged_ns_[size_t(device)]);
      if (!lock.locked()) return Admission::kOverLimit;
      // Unregister (another thread) may have let the slot go since it was read.
      if (slot_.load(std::memory_order_acquire) != slot) return Admission::kNotRegistered;
      uint64_t limit = EffectiveMemoryLimit(device);
      uint64_t used = a.used_bytes.load(std::memory_order_relaxed);
      if (limit == 0 || enforce == Enforce::kNone || (used <= limit && bytes <= limit - used)) {
        BeginWrite(a);
        HAMI_KILL_POINT(kRegionReserveBegun);
        s.usage[device][uint32_t(kind)].fetch_add(bytes, std::memory_order_relaxed);
        HAMI_KILL_POINT(kRegionReserveSlot);
        a.used_bytes.store(used + bytes, std::memory_order_relaxed);
        if (a.peak_bytes.load(std::memory_order_relaxed) < used + bytes) {
          a.peak_bytes.store(used + bytes, std::memory_order_relaxed);
        }
        EndWrite(a);
        return Admission::kOk;
      }
    }
    // The budget looks full: memory of dead processes may still be counted.
    if (attempt == 0 && SweepDead() == 0) break;
  }
  a.rejected.fetch_add(1, std::memory_order_relaxed);
  return Admission::kOverLimit;
}

void Region::Release(int device, uint64_t bytes, UsageKind kind) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0 || device < 0 || device >= kMaxDevices || bytes == 0) return;
  Slot& s = file_->slots[slot];
  DeviceAccount& a = file_->devices[device];
  DeviceLock lock(file_, device, lock_timeout_ns_, &wedged_ns_[size_t(device)]);
  if (!lock.locked() || slot_.load(std::memory_order_acquire) != slot) return;
  uint64_t held = s.usage[device][uint32_t(kind)].load(std::memory_order_relaxed);
  uint64_t n = std::min(bytes, held);
  BeginWrite(a);
  HAMI_KILL_POINT(kRegionReleaseBegun);
  s.usage[device][uint32_t(kind)].store(held - n, std::memory_order_relaxed);
  HAMI_KILL_POINT(kRegionReleaseSlot);
  uint64_t used = a.used_bytes.load(std::memory_order_relaxed);
  a.used_bytes.store(used - std::min(used, n), std::memory_order_relaxed);
  EndWrite(a);
}

Admission Region::ReserveHost(uint64_t bytes) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0) return Admission::kNotRegistered;
  if (bytes == 0) return Admission::kOk;
  layout::Policy& p = file_->policy;
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::lock_guard<std::mutex> own(host_mu_);
      if (OfdLockByte(fd_.get(), layout::kHostLock, F_WRLCK, LockWait::kYes) != 0) {
        return Admission::kOverLimit;  // cannot serialize: refuse rather than guess
      }
      Cleanup unlock([this] { OfdLockByte(fd_.get(), layout::kHostLock, F_UNLCK, LockWait::kNo); });
      if (slot_.load(std::memory_order_acquire) != slot) return Admission::kNotRegistered;
      uint64_t held = 0;
      for (const Slot& s : file_->slots) {
        if (s.state.load(std::memory_order_acquire) != uint32_t(SlotState::kFree)) {
          held += s.host_bytes.load(std::memory_order_relaxed);
        }
      }
      const uint64_t limit = HostLimitInForce();
      if (held <= limit && bytes <= limit - held) {
        file_->slots[slot].host_bytes.fetch_add(bytes, std::memory_order_relaxed);
        if (p.host_peak_bytes.load(std::memory_order_relaxed) < held + bytes) {
          p.host_peak_bytes.store(held + bytes, std::memory_order_relaxed);
        }
        return Admission::kOk;
      }
    }
    // The budget looks spent: dead processes' slots may still hold some of it.
    if (attempt == 0 && SweepDead() == 0) break;
  }
  p.host_rejected.fetch_add(1, std::memory_order_relaxed);
  return Admission::kOverLimit;
}

void Region::ReleaseHost(uint64_t bytes) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0 || bytes == 0) return;
  std::atomic<uint64_t>& held = file_->slots[slot].host_bytes;
  uint64_t cur = held.load(std::memory_order_relaxed);
  while (!held.compare_exchange_weak(cur, cur - std::min(cur, bytes), std::memory_order_relaxed)) {
  }
}

void Region::AddImported(uint64_t bytes) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot >= 0) file_->slots[slot].imported_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void Region::SubtractImported(uint64_t bytes) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0 || bytes == 0) return;
  std::atomic<uint64_t>& held = file_->slots[slot].imported_bytes;
  uint64_t cur = held.load(std::memory_order_relaxed);
  while (!held.compare_exchange_weak(cur, cur - std::min(cur, bytes), std::memory_order_relaxed)) {
  }
}

void Region::RecordStartTime() {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0 || access_ == Access::kReadOnly) return;
  std::atomic_ref<uint64_t> ticks(file_->slots[slot].start_time_ticks);
  if (ticks.load(std::memory_order_relaxed) == 0) {
    ticks.store(ProcessStartTicks(), std::memory_order_relaxed);
  }
}

Region::HostUse Region::Host() const {
  const layout::Policy& p = file_->policy;
  HostUse u;
  u.limit_bytes = p.host_limit.load(std::memory_order_relaxed);
  u.peak_bytes = p.host_peak_bytes.load(std::memory_order_relaxed);
  u.rejected = p.host_rejected.load(std::memory_order_relaxed);
  for (const Slot& s : file_->slots) {
    if (s.state.load(std::memory_order_acquire) == uint32_t(SlotState::kFree)) continue;
    u.spilled_bytes += s.host_bytes.load(std::memory_order_relaxed);
    u.imported_bytes += s.imported_bytes.load(std::memory_order_relaxed);
  }
  return u;
}

DeviceSnapshot Region::Snapshot(int device) const {
  DeviceSnapshot out;
  if (device < 0 || device >= kMaxDevices) return out;
  DeviceAccount& a = file_->devices[device];
  auto read = [&] {
    out.used_bytes = a.used_bytes.load(std::memory_order_relaxed);
    out.peak_bytes = a.peak_bytes.load(std::memory_order_relaxed);
    out.slots.clear();
    out.slot_sum_bytes = 0;
    for (int i = 0; i < kMaxSlots; ++i) {
      const Slot& s = file_->slots[i];
      if (s.state.load(std::memory_order_acquire) == uint32_t(SlotState::kFree)) continue;
      std::array<uint64_t, kUsageKinds> u{};
      uint64_t sum = 0;
      for (int k = 0; k < kUsageKinds; ++k) {
        u[size_t(k)] = s.usage[device][k].load(std::memory_order_relaxed);
        sum += u[size_t(k)];
      }
      if (sum != 0) out.slots.push_back({i, u});
      out.slot_sum_bytes += sum;
    }
  };
  bool consistent = false;
  for (int attempt = 0; attempt < 64 && !consistent; ++attempt) {
    uint64_t s1 = a.seq.load(std::memory_order_acquire);
    if (s1 % 2 == 1) {
      sched_yield();
      continue;
    }
    read();
    std::atomic_thread_fence(std::memory_order_acquire);
    consistent = a.seq.load(std::memory_order_relaxed) == s1;
  }
  if (!consistent && access_ == Access::kReadWrite) {
    // A writer keeps the sequence moving, or died mid-write: read under the mutex, whose
    // acquisition repairs a dead writer's leftovers.
    DeviceLock lock(file_, device, lock_timeout_ns_, &wedged_ns_[size_t(device)]);
    read();
    consistent = lock.locked();
  }
  out.consistent = consistent;
  out.limit_bytes = file_->policy.memory_limit[device].load(std::memory_order_relaxed);
  out.rejected = a.rejected.load(std::memory_order_relaxed);
  return out;
}

PolicyView Region::Policy() const {
  const layout::Policy& p = file_->policy;
  PolicyView v{};
  v.generation = p.generation.load();
  v.device_count = int(p.device_count);
  for (int d = 0; d < kMaxDevices; ++d) {
    v.memory_limit[size_t(d)] = p.memory_limit[d].load();
    v.sm_limit[size_t(d)] = p.sm_limit[d].load();
    v.uuid[size_t(d)] = FixedString(p.uuid[d], layout::kUuidBytes);
  }
  v.priority = p.priority.load();
  v.core_policy = CorePolicy(p.core_policy.load());
  v.oversubscribe = p.oversubscribe.load() != 0;
  v.host_limit = p.host_limit.load();
  v.stamped_realtime_ns = p.stamped_realtime_ns;
  v.stamped_by_pid = p.stamped_by_pid;
  v.stamped_by_comm = FixedString(p.stamped_by_comm, sizeof(p.stamped_by_comm));
  v.utilization_switch = p.utilization_switch.load();
  v.paused = p.paused.load() != 0;
  return v;
}

std::vector<SlotView> Region::Slots() const {
  std::vector<SlotView> out;
  for (int i = 0; i < kMaxSlots; ++i) {
    const Slot& s = file_->slots[i];
    uint32_t state = s.state.load(std::memory_order_acquire);
    if (state == uint32_t(SlotState::kFree)) continue;
    SlotView v{};
    v.index = i;
    v.state = SlotState(state);
    v.alive = OwnerAlive(i);
    v.generation = s.generation;
    v.pid = s.pid;
    v.host_pid = s.host_pid.load();
    v.start_time_ticks = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(s.start_time_ticks))
                             .load(std::memory_order_relaxed);
    v.status = SlotStatus(s.status.load());
    v.identity = IdentitySource(s.identity.load());
    for (int t = 0; t < kIdentityTiers; ++t) {
      v.identity_reason[size_t(t)] = IdentityReason(s.identity_reason[t].load());
    }
    v.identity_attempts = s.identity_attempts.load();
    v.identity_ns = s.identity_ns.load();
    v.comm = FixedString(s.comm, sizeof(s.comm));
    v.registered_realtime_ns = s.registered_realtime_ns.load();
    v.launches = s.launches.load();
    for (int d = 0; d < kMaxDevices; ++d) v.used_bytes[size_t(d)] = SlotDeviceTotal(s, d);
    v.unaccounted_bytes = s.unaccounted_bytes.load(std::memory_order_relaxed);
    v.unaccounted_nvml_bytes = s.unaccounted_nvml_bytes.load(std::memory_order_relaxed);
    v.unaccounted_device = s.unaccounted_device.load(std::memory_order_relaxed);
    v.unaccounted_since_ns = s.unaccounted_since_ns.load(std::memory_order_relaxed);
    v.host_bytes = s.host_bytes.load(std::memory_order_relaxed);
    v.imported_bytes = s.imported_bytes.load(std::memory_order_relaxed);
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<Inconsistency> Region::Check() const {
  std::vector<Inconsistency> out;
  // A host tool's handle tries each device's lock once, bounded: a lock nobody releases is
  // reported, not waited on.
  if (access_ == Access::kReadWrite && lock_timeout_ns_ > 0) {
    for (int d = 0; d < device_count(); ++d) {
      DeviceLock probe(file_, d, lock_timeout_ns_, &wedged_ns_[size_t(d)]);
    }
  }
  for (int d = 0; d < kMaxDevices; ++d) {  // Reserve takes any device of the layout
    if (const int64_t waited = wedged_ns_[size_t(d)].load(std::memory_order_relaxed)) {
      const pid_t holder = RobustMutexHolder(&file_->devices[d].mutex);
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.1f s", double(waited) / 1e9);
      out.push_back({Inconsistency::Kind::kWedgedLock, d, -1,
                     "device " + std::to_string(d) + " locked by pid " + std::to_string(holder) +
                         " (in the locker's PID namespace) for " + seconds +
                         " or more (wedged? a process stopped inside the region, or a forged "
                         "lock word); not waited on further"});
    }
    DeviceSnapshot snap = Snapshot(d);
    if (snap.slot_sum_bytes != snap.used_bytes) {
      out.push_back({Inconsistency::Kind::kSlotSumMismatch, d, -1,
                     "device " + std::to_string(d) + ": slots add up to " +
                         std::to_string(snap.slot_sum_bytes) + " bytes but the total says " +
                         std::to_string(snap.used_bytes)});
    }
    if (snap.limit_bytes != 0 && snap.used_bytes > snap.limit_bytes) {
      // Every allocation and context is admitted under the limit; what can pass it is named.
      const bool changed = file_->policy.changed_realtime_ns.load(std::memory_order_relaxed) != 0;
      out.push_back({Inconsistency::Kind::kOverLimit, d, -1,
                     "device " + std::to_string(d) + ": " + std::to_string(snap.used_bytes) +
                         " bytes in use, above the limit of " + std::to_string(snap.limit_bytes) +
                         (changed ? " (the policy was changed by hami region set while the "
                                    "memory was in use)"
                                  : " (memory the driver had already handed out, a stream-ordered "
                                    "pool's or a graph's growth, was recorded past the limit; or "
                                    "the file was edited)")});
    }
  }
  const layout::Header& h = file_->header;
  const uint32_t conflicts = h.conflict_count.load(std::memory_order_relaxed);
  for (int i = 0; i < layout::kMaxConflicts && uint32_t(i) < conflicts; ++i) {
    const layout::PolicyConflict& c = h.conflicts[i];
    if (c.state.load(std::memory_order_acquire) != 2) continue;
    const bool memory = c.field == uint32_t(layout::ConflictField::kMemoryLimit);
    auto value = [memory](uint64_t v) {
      if (memory) return v == 0 ? std::string("unlimited") : std::to_string(v) + " bytes";
      return v == 0 || v >= 100 ? std::string("unlimited") : std::to_string(v) + "%";
    };
    const int device = c.device >= 0 && c.device < kMaxDevices ? c.device : -1;
    out.push_back({Inconsistency::Kind::kPolicyConflict, device, -1,
                   "pid " + std::to_string(c.pid) + " (" + FixedString(c.comm, sizeof(c.comm)) +
                       ") was given " + (memory ? "memory_limit[" : "sm_limit[") +
                       std::to_string(c.device) + "] = " + value(c.process_value) +
                       " but the region says " + value(c.region_value) +
                       "; it holds to the stricter"});
  }
  if (conflicts > uint32_t(layout::kMaxConflicts)) {
    out.push_back({Inconsistency::Kind::kPolicyConflict, -1, -1,
                   std::to_string(conflicts - uint32_t(layout::kMaxConflicts)) +
                       " more policy conflicts were counted and not kept"});
  }
  const int64_t now = MonotonicNs();
  for (const SlotView& s : Slots()) {
    if (s.alive && s.unaccounted_bytes != 0) {
      char age[32];
      std::snprintf(age, sizeof(age), "%.0f s", double(now - s.unaccounted_since_ns) / 1e9);
      out.push_back({Inconsistency::Kind::kUnaccounted, s.unaccounted_device, s.index,
                     "device " + std::to_string(s.unaccounted_device) + ": host pid " +
                         std::to_string(s.host_pid) + " (pid " + std::to_string(s.pid) + ", " +
                         s.comm + ") holds " + FormatBytes(s.unaccounted_nvml_bytes) +
                         " as NVML counts it but its books say " +
                         FormatBytes(s.unaccounted_nvml_bytes - s.unaccounted_bytes) + ": " +
                         FormatBytes(s.unaccounted_bytes) + " (" +
                         std::to_string(s.unaccounted_bytes) + " bytes) unaccounted, for " + age +
                         " (memory allocated past libvgpu: edited counters, a driver loaded "
                         "with dlmopen, a static binary or raw ioctls)"});
    }
    if (!s.alive) {
      out.push_back({Inconsistency::Kind::kDeadOwner, -1, s.index,
                     "slot " + std::to_string(s.index) + ": its owner (pid " +
                         std::to_string(s.pid) + ", " + s.comm +
                         ") is gone; its usage is still counted until reclaimed"});
    }
  }
  return out;
}

void Region::Touch() {
  file_->policy.generation.fetch_add(1);
  file_->policy.changed_realtime_ns.store(RealtimeNs());
  file_->policy.changed_by_pid.store(getpid());
}

Status Region::SetMemoryLimit(int device, uint64_t bytes) {
  HAMI_TRY(Writable());
  if (device < 0 || device >= device_count()) {
    return Error(ErrorCode::kInvalidArgument, "shared region " + path_ + " has no device " +
                                                  std::to_string(device) + " (it has " +
                                                  std::to_string(device_count()) + ")");
  }
  file_->policy.memory_limit[device].store(bytes);
  Touch();
  return OkStatus();
}

Status Region::LowerMemoryLimitAboveUse(int device, uint64_t bytes) {
  HAMI_TRY(Writable());
  if (device < 0 || device >= device_count() || bytes == 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "shared region " + path_ + ": no limit of " + std::to_string(bytes) +
                     " bytes to set on device " + std::to_string(device) + " (it has " +
                     std::to_string(device_count()) + " devices)");
  }
  {
    DeviceLock lock(file_, device, lock_timeout_ns_, &wedged_ns_[size_t(device)]);
    if (!lock.locked()) {
      return Error(ErrorCode::kTimeout, "shared region " + path_ + ": device " +
                                            std::to_string(device) +
                                            "'s lock is held; its memory limit is left as it is");
    }
    const uint64_t used = file_->devices[device].used_bytes.load(std::memory_order_relaxed);
    if (used > bytes) {
      return Error(ErrorCode::kBusy, "shared region " + path_ + ": device " +
                                         std::to_string(device) + " holds " + std::to_string(used) +
                                         " bytes, more than the limit of " + std::to_string(bytes));
    }
    file_->policy.memory_limit[device].store(bytes);
  }
  Touch();
  return OkStatus();
}

Status Region::SetSmLimit(int device, uint32_t percent) {
  HAMI_TRY(Writable());
  if (device < 0 || device >= device_count()) {
    return Error(ErrorCode::kInvalidArgument, "shared region " + path_ + " has no device " +
                                                  std::to_string(device) + " (it has " +
                                                  std::to_string(device_count()) + ")");
  }
  if (percent > 100) {
    return Error(ErrorCode::kInvalidArgument,
                 "SM limit " + std::to_string(percent) + " is not a percentage (0 to 100)");
  }
  file_->policy.sm_limit[device].store(percent);
  Touch();
  return OkStatus();
}

Status Region::SetPriority(int32_t priority) {
  HAMI_TRY(Writable());
  if (priority < 0 || priority > 1) {
    return Error(ErrorCode::kInvalidArgument,
                 "priority " + std::to_string(priority) + " is not 0 (high) or 1 (low)");
  }
  file_->policy.priority.store(priority);
  Touch();
  return OkStatus();
}

Status Region::SetCorePolicy(CorePolicy policy) {
  HAMI_TRY(Writable());
  file_->policy.core_policy.store(uint32_t(policy));
  Touch();
  return OkStatus();
}

Status Region::SetUtilizationSwitch(bool on) {
  HAMI_TRY(Writable());
  file_->policy.utilization_switch.store(on ? 1 : 0);
  Touch();
  return OkStatus();
}

Status Region::SetPaused(bool paused) {
  HAMI_TRY(Writable());
  file_->policy.paused.store(paused ? 1 : 0);
  WakeAll(&file_->policy.paused);
  Touch();
  return OkStatus();
}

Status Region::SetHostLimit(uint64_t bytes) {
  HAMI_TRY(Writable());
  file_->policy.host_limit.store(bytes);
  Touch();
  return OkStatus();
}

void Region::SetHostPid(pid_t host_pid, IdentitySource source) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0) return;
  Slot& s = file_->slots[slot];
  s.host_pid.store(host_pid, std::memory_order_relaxed);
  s.identity.store(uint32_t(source), std::memory_order_release);
}

void Region::RecordIdentity(pid_t host_pid, IdentitySource source,
                            const std::array<IdentityReason, kIdentityTiers>& reasons,
                            int64_t duration_ns) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0) return;
  Slot& s = file_->slots[slot];
  Header& h = file_->header;
  // A pending attempt (the probe waits for cuInit) has decided nothing: its tiers run again
  // when it ends, and only that outcome is counted.
  const bool decided = source != IdentitySource::kUnknown;
  for (int t = 0; t < kIdentityTiers; ++t) {
    const IdentityReason r = reasons[size_t(t)];
    s.identity_reason[t].store(uint8_t(r), std::memory_order_relaxed);
    if (decided && IsTierFailure(r)) {
      h.identity_reasons[uint8_t(r)].fetch_add(1, std::memory_order_relaxed);
    }
  }
  s.identity_attempts.fetch_add(1, std::memory_order_relaxed);
  s.identity_ns.store(duration_ns, std::memory_order_relaxed);
  if (decided && uint32_t(source) < uint32_t(layout::kIdentitySources)) {
    h.identity_by_source[uint32_t(source)].fetch_add(1, std::memory_order_relaxed);
  }
  s.host_pid.store(host_pid, std::memory_order_relaxed);
  s.identity.store(uint32_t(source), std::memory_order_release);
}

bool IsTierFailure(IdentityReason reason) {
  switch (reason) {
    case IdentityReason::kNone:
    case IdentityReason::kDisabled:
    case IdentityReason::kOtherNamespace:
      return false;
    default:
      return uint8_t(reason) < layout::kIdentityReasons;
  }
}

std::array<uint64_t, layout::kIdentitySources> Region::IdentityCounts() const {
  std::array<uint64_t, layout::kIdentitySources> out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = file_->header.identity_by_source[i].load();
  return out;
}

std::array<uint64_t, layout::kIdentityReasons> Region::IdentityReasonCounts() const {
  std::array<uint64_t, layout::kIdentityReasons> out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = file_->header.identity_reasons[i].load();
  return out;
}

void Region::RecordActivity(uint32_t launches, int64_t now_ns) {
  const int slot = slot_.load(std::memory_order_acquire);
  if (slot < 0) return;
  Slot& s = file_->slots[slot];
  s.launches.fetch_add(launches, std::memory_order_relaxed);
  s.last_kernel_ns.store(now_ns, std::memory_order_relaxed);
  file_->policy.last_kernel_ns.store(now_ns, std::memory_order_relaxed);
  std::atomic<uint32_t>& recent = file_->policy.recent_kernel;
  uint32_t cur = recent.load(std::memory_order_relaxed);
  while (cur < kRecentKernelOnLaunch &&
         !recent.compare_exchange_weak(cur, kRecentKernelOnLaunch, std::memory_order_relaxed)) {
  }
}

Result<uint32_t> Region::UpdateRecentKernel(uint32_t (*next)(uint32_t)) {
  HAMI_TRY(Writable());
  std::atomic<uint32_t>& recent = file_->policy.recent_kernel;
  uint32_t cur = recent.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t want = next(cur);
    if (want == cur) return cur;
    if (recent.compare_exchange_weak(cur, want, std::memory_order_relaxed)) return cur;
  }
}

Result<bool> AnyProcessAttached(const std::string& path) {
  UniqueFd fd = HAMI_TRY(OpenRegularFile(path, O_RDONLY | O_NONBLOCK));
  // Every lock a region's users take lies in [kInitLock, the last slot's lock].
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = layout::kInitLock;
  fl.l_len = SlotLock(kMaxSlots - 1) - layout::kInitLock + 1;
  if (fcntl(fd.get(), F_OFD_GETLK, &fl) != 0) return Error::FromErrno("F_OFD_GETLK " + path);
  return fl.l_type != F_UNLCK;
}

Status Region::SetSlotStatus(int slot, SlotStatus status) {
  HAMI_TRY(Writable());
  if (slot < 0 || slot >= kMaxSlots ||
      file_->slots[slot].state.load() == uint32_t(SlotState::kFree)) {
    return Error(ErrorCode::kNotFound,
                 "shared region " + path_ + ": slot " + std::to_string(slot) + " holds no process");
  }
  file_->slots[slot].status.store(uint32_t(status));
  WakeAll(&file_->slots[slot].status);
  return OkStatus();
}

bool Region::TryLeadLimiter(int device) {
  if (device < 0 || device >= kMaxDevices || Inherited()) return false;
  return OfdLockByte(fd_.get(), layout::kLimiterLockBase + device, F_WRLCK, LockWait::kNo) == 0;
}

void Region::SetOwnSmLimit(int device, uint32_t percent) {
  if (device < 0 || device >= kMaxDevices) return;
  own_sm_limit_[size_t(device)].store(percent, std::memory_order_relaxed);
  const int s = slot();
  if (s >= 0 && access_ == Access::kReadWrite) {
    file_->slots[s].own_sm_limit[device].store(uint8_t(std::min<uint32_t>(percent, 100)),
                                               std::memory_order_relaxed);
  }
}

uint32_t Region::ContainerSmLimit(int device) const {
  if (device < 0 || device >= kMaxDevices) return 0;
  uint32_t limit =
      StricterShare(SmLimit(device), own_sm_limit_[size_t(device)].load(std::memory_order_relaxed));
  for (int i = 0; i < kMaxSlots; ++i) {
    const Slot& s = file_->slots[i];
    if (s.state.load(std::memory_order_acquire) != uint32_t(SlotState::kLive)) continue;
    limit = StricterShare(limit, s.own_sm_limit[device].load(std::memory_order_relaxed));
  }
  return SmShareInForce(limit);
}

bool Region::TryLeadCrossCheck(int device) {
  if (device < 0 || device >= kMaxDevices || Inherited() || access_ != Access::kReadWrite) {
    return false;
  }
  return OfdLockByte(fd_.get(), layout::kCrossCheckLockBase + device, F_WRLCK, LockWait::kNo) == 0;
}

std::vector<AccountingGap> Region::RecordCrossCheck(const DeviceCrossCheck& check, int64_t now_ns) {
  std::vector<AccountingGap> fresh;
  const int d = check.device;
  if (d < 0 || d >= kMaxDevices || access_ != Access::kReadWrite) return fresh;
  const uint32_t bit = 1u << d;
  size_t next = 0;  // check.gaps is in slot order
  pid_t worst_pid = 0;
  uint64_t worst = 0;
  for (int i = 0; i < kMaxSlots; ++i) {
    Slot& s = file_->slots[i];
    while (next < check.gaps.size() && check.gaps[next].slot < i) ++next;
    const AccountingGap* g =
        next < check.gaps.size() && check.gaps[next].slot == i ? &check.gaps[next] : nullptr;
    const uint32_t had = s.unaccounted_devices.load(std::memory_order_relaxed);
    if (g == nullptr) {
      if ((had & bit) == 0) continue;
      s.unaccounted_devices.fetch_and(~bit, std::memory_order_relaxed);
      if (s.unaccounted_device.load(std::memory_order_relaxed) == d) {
        s.unaccounted_bytes.store(0, std::memory_order_relaxed);
        s.unaccounted_nvml_bytes.store(0, std::memory_order_relaxed);
      }
      if ((had & ~bit) == 0) s.unaccounted_since_ns.store(0, std::memory_order_relaxed);
      continue;
    }
    if ((had & bit) == 0) {
      fresh.push_back(*g);
      if (had == 0) s.unaccounted_since_ns.store(now_ns, std::memory_order_relaxed);
      s.unaccounted_devices.fetch_or(bit, std::memory_order_relaxed);
    }
    if (s.unaccounted_device.load(std::memory_order_relaxed) == d ||
        g->gap_bytes >= s.unaccounted_bytes.load(std::memory_order_relaxed)) {
      s.unaccounted_device.store(d, std::memory_order_relaxed);
      s.unaccounted_nvml_bytes.store(g->nvml_bytes, std::memory_order_relaxed);
      s.unaccounted_bytes.store(g->gap_bytes, std::memory_order_relaxed);
    }
    if (g->gap_bytes > worst) {
      worst = g->gap_bytes;
      worst_pid = g->host_pid;
    }
  }
  DeviceAccount& a = file_->devices[d];
  a.unaccounted_host_pid.store(worst_pid, std::memory_order_relaxed);
  a.crosscheck_unchecked.store(check.unchecked, std::memory_order_relaxed);
  a.crosscheck_ns.store(now_ns, std::memory_order_relaxed);
  a.unaccounted_bytes.store(check.TotalGap(), std::memory_order_release);
  file_->header.unaccounted_found.fetch_add(fresh.size(), std::memory_order_relaxed);
  file_->header.crosscheck_pid.store(getpid(), std::memory_order_relaxed);
  return fresh;
}

void Region::RecordPolicyConflict(layout::ConflictField field, int device, uint64_t region_value,
                                  uint64_t own_value) {
  if (access_ != Access::kReadWrite || device < 0 || device >= kMaxDevices) return;
  AppendConflict(file_, field, device, region_value, own_value, ProcessComm());
}

Region::CrossCheckState Region::CrossCheck(int device) const {
  CrossCheckState out;
  if (device < 0 || device >= kMaxDevices) return out;
  const DeviceAccount& a = file_->devices[device];
  out.unaccounted_bytes = a.unaccounted_bytes.load(std::memory_order_acquire);
  out.host_pid = a.unaccounted_host_pid.load(std::memory_order_relaxed);
  out.checked_ns = a.crosscheck_ns.load(std::memory_order_relaxed);
  out.unchecked = a.crosscheck_unchecked.load(std::memory_order_relaxed);
  return out;
}

Status Region::VerifyOwnSlot() const {
  const int i = slot();
  if (i < 0) return OkStatus();
  const Slot& s = file_->slots[i];
  const uint32_t state = s.state.load(std::memory_order_acquire);
  if (state != uint32_t(SlotState::kLive) || s.generation != slot_generation_ ||
      s.pid != getpid()) {
    // Unregister lets the slot_ go before it frees the slot: a slot freed by this process.
    if (slot() != i) return OkStatus();
    return Error(ErrorCode::kCorrupt,
                 "shared region " + path_ + ": this process's slot " + std::to_string(i) + " was " +
                     (state == uint32_t(SlotState::kFree) ? "freed" : "taken over") +
                     " by someone else (the file was edited): its usage is no longer in the books");
  }
  return OkStatus();
}

Status Region::VerifyFile() const {
  if (anonymous_) return OkStatus();
  struct stat mapped {};
  if (fstat(fd_.get(), &mapped) != 0) return Error::FromErrno("shared region " + path_ + ": fstat");
  struct stat at_path {};
  if (lstat(path_.c_str(), &at_path) != 0) {
    return Error(ErrorCode::kNotFound, "shared region " + path_ +
                                           ": the file this process mapped is no longer at that "
                                           "path (removed or renamed: " +
                                           std::strerror(errno) + ")");
  }
  if (S_ISLNK(at_path.st_mode)) {
    return Error(ErrorCode::kCorrupt, "shared region " + path_ +
                                          ": the path is now a symbolic link, not the file this "
                                          "process mapped");
  }
  if (at_path.st_dev != mapped.st_dev || at_path.st_ino != mapped.st_ino) {
    return Error(ErrorCode::kCorrupt, "shared region " + path_ +
                                          ": another file stands at the path now (the file this "
                                          "process mapped was replaced)");
  }
  if (uint64_t(mapped.st_size) < sizeof(File)) {
    return Error(ErrorCode::kCorrupt, "shared region " + path_ + ": the file was truncated to " +
                                          std::to_string(mapped.st_size) + " bytes (it has " +
                                          std::to_string(sizeof(File)) + ")");
  }
  return OkStatus();
}

}  // namespace hami::region
