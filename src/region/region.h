// Region: one process's handle on a container's shared region (layout.h).
//
// Protocols (all survive a process killed at any instruction):
// - Creation: the first opener of an empty file takes the file's init lock, sizes and fills
//   it, writes the magic, and publishes `initialized` last (release); everyone else maps the
//   file and waits on the init lock only while the file is not yet published. A published
//   file is never rewritten; a file a creator left half-done (full size with no magic yet,
//   or a valid header never published) is made again by the next opener that may create.
//   This is common/versioned_file.h's kCreatorsOnly discipline.
// - Membership (lock-free): to claim slot i a process first takes the OFD byte lock of
//   slot i (so at most one process can be claiming it and a dead claimer's lock is gone),
//   then CASes the slot from free to claiming, fills it and stores live. The lock, held for
//   the process's life, is the liveness signal: a non-free slot whose lock nobody holds
//   belongs to a dead process and is reclaimed — its usage returned, the slot freed — by
//   SweepDeadIfDue (at most one sweep per kSweepInterval across the container: libvgpu's
//   first admission and its views, the monitor), by an admission that would fail, by a
//   registration that finds every slot taken and by `hami inspect --repair`. A registration
//   otherwise reads only the slots from the claim hint to the first free one. No live slot ever
//   moves. The threads of a process share one open file description, whose byte locks do not
//   exclude each other: a process-local mutex serializes the process's own takes and releases of
//   slot locks.
// - Admission (exact): Reserve checks the device's total plus the request against the
//   limit and records it in the caller's slot and in the total, all under the device's
//   robust mutex, so concurrent reservations can never pass the limit together. The
//   caller reserves before it allocates and releases when the allocation fails or is
//   freed. A holder that dies inside the mutex leaves it to the next locker, which
//   rebuilds the total from the slots (each slot field is written by one store).
// - Reading: Snapshot follows the device's seqlock (one writer at a time: writers hold
//   the mutex) and so never blocks an admission; if a dead writer left the sequence odd,
//   it takes the mutex, which repairs it.
//
// Thread safety: every method may be called from any thread of the process.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/file.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "region/crosscheck.h"
#include "region/layout.h"

namespace hami::region {

using layout::CorePolicy;
using layout::IdentityReason;
using layout::IdentitySource;
using layout::IdentityTier;
using layout::LimiterMode;
using layout::SlotStatus;
using layout::UsageKind;

inline constexpr int kMaxDevices = layout::kMaxDevices;
inline constexpr int kMaxSlots = layout::kMaxSlots;
inline constexpr int kUsageKinds = layout::kUsageKinds;
inline constexpr int kIdentityTiers = layout::kIdentityTiers;
inline constexpr int64_t kSweepIntervalNs = 100'000'000;
// What a launch raises the container's recent-kernel counter to (HAMi-core's launches set it
// to 2); the monitor's feedback loop takes one off per pass (monitor/feedback.h).
inline constexpr uint32_t kRecentKernelOnLaunch = 2;

// The limits a process read (variables, the limits file) and stamps on a new region.
struct PolicySpec {
  int device_count = 0;
  std::array<uint64_t, kMaxDevices> memory_limit{};  // bytes; 0 = unlimited
  std::array<uint32_t, kMaxDevices> sm_limit{};      // percent; 0 or 100 = unlimited
  int32_t priority = 1;
  CorePolicy core_policy = CorePolicy::kDefault;
  bool oversubscribe = false;
  uint64_t host_limit = 0;  // bytes of host memory for allocations past the device budget
  std::array<std::string, kMaxDevices> uuid;
};

// A field where the region's stamped value differs from what this process read.
struct PolicyDifference {
  std::string field;   // "memory_limit[0]"
  std::string region;  // the value that stands
  std::string mine;
};

enum class Create { kIfMissing, kNever };
enum class Access { kReadWrite, kReadOnly };

enum class Admission {
  kOk,
  kOverLimit,      // the device's total plus the request would pass its limit
  kNotRegistered,  // Register() first
  kNoSuchDevice,   // the region's policy has no such device
};

struct DeviceSnapshot {
  uint64_t used_bytes = 0;
  uint64_t limit_bytes = 0;  // 0 = unlimited
  uint64_t peak_bytes = 0;
  uint64_t rejected = 0;
  uint64_t slot_sum_bytes = 0;  // the slots' usage added up (equals used_bytes)
  // False when no consistent read was possible: a read-only handle kept finding a write in
  // progress (or left half-done by a dead writer, which only a read-write handle repairs).
  bool consistent = true;
  std::vector<std::pair<int, std::array<uint64_t, kUsageKinds>>> slots;  // non-zero only
};

struct SlotView {
  int index;
  layout::SlotState state;
  bool alive;  // its owner still holds the slot's lock
  uint32_t generation;
  pid_t pid;
  pid_t host_pid;
  uint64_t start_time_ticks;  // 0: not recorded yet (RecordStartTime)
  SlotStatus status;
  IdentitySource identity;
  std::array<IdentityReason, kIdentityTiers> identity_reason;  // by IdentityTier
  uint32_t identity_attempts;
  int64_t identity_ns;  // the latest attempt's duration
  std::string comm;
  int64_t registered_realtime_ns;
  uint64_t launches;
  std::array<uint64_t, kMaxDevices> used_bytes;  // per device, all kinds
  // The NVML cross-check's latest finding (0 bytes: none): the largest gap and its device.
  uint64_t unaccounted_bytes;
  uint64_t unaccounted_nvml_bytes;
  int unaccounted_device;
  int64_t unaccounted_since_ns;  // CLOCK_MONOTONIC
  // Outside the device budget (layout minor 5): its allocations served from host memory, and
  // other processes' memory it has mapped.
  uint64_t host_bytes;
  uint64_t imported_bytes;
};

struct PolicyView {
  uint64_t generation;
  int device_count;
  std::array<uint64_t, kMaxDevices> memory_limit;
  std::array<uint32_t, kMaxDevices> sm_limit;
  int32_t priority;
  CorePolicy core_policy;
  bool oversubscribe;
  uint64_t host_limit;  // bytes; 0: none (layout minor 5; a file of an earlier minor: 0)
  std::array<std::string, kMaxDevices> uuid;
  int64_t stamped_realtime_ns;
  pid_t stamped_by_pid;
  std::string stamped_by_comm;
  uint32_t utilization_switch;
  bool paused;
};

// What `hami inspect` reports as wrong.
struct Inconsistency {
  enum class Kind {
    kSlotSumMismatch,
    kDeadOwner,
    kOverLimit,
    kWedgedLock,
    kPolicyConflict,
    kUnaccounted,  // NVML shows a live process holding more than its books (crosscheck.h)
  };
  Kind kind;
  int device;  // -1 when not about one device
  int slot;    // -1 when not about one slot
  std::string message;
};

class Region {
 public:
  // Opens the region at `path`. With Create::kIfMissing an empty or absent file is made
  // and stamped with `stamp` (required then); when the region exists, the differences
  // between its policy and `stamp` are appended to `differences` (the region's stand).
  // Refuses, naming the file and the mismatch: a symlink or non-regular file, a file
  // smaller than a header, another magic, major version, size or fingerprint.
  static Result<std::unique_ptr<Region>> Open(const std::string& path, const PolicySpec* stamp,
                                              Create create,
                                              std::vector<PolicyDifference>* differences,
                                              Access access = Access::kReadWrite);
  // A region of this process alone, made in memory (memfd_create) and stamped with `stamp`:
  // for a process whose container configured no region and whose default one cannot be had
  // (a read-only /tmp). Fork children share it (ReopenAfterFork reopens the inherited memory
  // file); nothing else can open it. path() is "memfd:hami-vgpu-private".
  static Result<std::unique_ptr<Region>> CreatePrivate(const PolicySpec& stamp);

  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  const std::string& path() const { return path_; }
  int device_count() const {
    return int(std::min<uint32_t>(file_->policy.device_count, uint32_t(kMaxDevices)));
  }

  // ---- membership ----
  // Claims a slot for the calling process. kBusy when every slot is held by a live process.
  Result<int> Register();
  // Returns everything the slot holds and frees it. Idempotent. In a fork child that has not
  // called ReopenAfterFork() (say, from exit handlers) it only forgets the parent's slot.
  void Unregister();
  int slot() const { return slot_.load(std::memory_order_acquire); }
  // In a fork child: lets go of the parent's registration and file handle without touching
  // them (the parent still owns its slot) and opens the file afresh. Call Register() again;
  // until then Register() is refused and SweepDead() does nothing (the inherited open file
  // and its slot locks are the parent's).
  Status ReopenAfterFork();

  // ---- host tools ----
  // Device locks are given up after `timeout_ns` (> 0; 0, the default, waits as libvgpu
  // does): a host tool (inspect, top, region set, the monitor) must not hang on a container's
  // region whose lock a process holds forever or whose lock word was forged. Check() then
  // reports each such device. A dead slot whose device lock cannot be had is not reclaimed.
  void SetLockTimeout(int64_t timeout_ns) { lock_timeout_ns_ = timeout_ns; }
  // How long the host tools give a device lock.
  static constexpr int64_t kHostLockTimeoutNs = 2'000'000'000;

  // ---- this process's own limits ----
  // A process never enforces more than it was given: a reservation must fit under the
  // region's memory limit and under the one this process resolved itself (0 = none of its
  // own). Process-local, never written to the file; set before the first reservation.
  void SetOwnMemoryLimit(int device, uint64_t bytes) {
    if (device >= 0 && device < kMaxDevices) {
      own_memory_limit_[size_t(device)].store(bytes, std::memory_order_relaxed);
    }
  }
  // The limit in force for this process on `device`: the stricter of the two (0 = unlimited).
  uint64_t EffectiveMemoryLimit(int device) const {
    if (device < 0 || device >= kMaxDevices) return 0;
    return StricterLimit(MemoryLimit(device),
                         own_memory_limit_[size_t(device)].load(std::memory_order_relaxed));
  }
  // The stricter of two memory limits, where 0 is none.
  static constexpr uint64_t StricterLimit(uint64_t a, uint64_t b) {
    return a == 0 ? b : b == 0 ? a : std::min(a, b);
  }

  // ---- admission ----
  // kNone records the bytes whatever the limit (memory the process cannot do without, such
  // as a context's own); everything else is refused past the limit in force
  // (EffectiveMemoryLimit).
  enum class Enforce { kLimit, kNone };
  Admission Reserve(int device, uint64_t bytes, UsageKind kind, Enforce enforce = Enforce::kLimit);
  void Release(int device, uint64_t bytes, UsageKind kind);
  // Reclaims the slots of dead processes; returns how many.
  int SweepDead();
  // SweepDead at most once per kSweepIntervalNs across the container, and never waiting
  // for another thread of this process that is registering or sweeping (for the views).
  int SweepDeadIfDue();

  // ---- memory outside the device budget (layout minor 5) ----
  // Oversubscription: an allocation the device budget refuses may be served from host memory,
  // within the container's host budget (the policy's host_limit, all devices together).
  // ReserveHost records `bytes` of it in this process's slot unless what every slot holds of
  // it plus the request would pass the budget in force (HostLimitInForce): kOverLimit, after
  // reclaiming dead processes' slots once. Exact across the container: the sum and the record
  // are made under the region's host lock (an OFD byte lock, which the kernel lets go when its
  // holder dies) and, within this process, a mutex; the record is one store in the slot, so a
  // holder that dies leaves nothing to repair. Never on a read-only handle.
  Admission ReserveHost(uint64_t bytes);
  void ReleaseHost(uint64_t bytes);
  // This process's own host budget (bytes), held with the region's: the smaller stands.
  // Process-local, never written to the file; none of its own until set.
  void SetOwnHostLimit(uint64_t bytes) { own_host_limit_.store(bytes, std::memory_order_relaxed); }
  uint64_t HostLimitInForce() const {
    return std::min(file_->policy.host_limit.load(std::memory_order_relaxed),
                    own_host_limit_.load(std::memory_order_relaxed));
  }
  // Memory of other processes this process has mapped (imports): recorded in its slot, never
  // limited and never charged to the container.
  void AddImported(uint64_t bytes);
  void SubtractImported(uint64_t bytes);
  // The container's memory outside its device budget, from the slots (each read once).
  struct HostUse {
    uint64_t limit_bytes = 0;     // the policy's host budget
    uint64_t spilled_bytes = 0;   // served from host memory, every slot's
    uint64_t imported_bytes = 0;  // mapped from other processes, every slot's
    uint64_t peak_bytes = 0;      // the most spilled at once
    uint64_t rejected = 0;        // spills refused: both budgets were spent
  };
  HostUse Host() const;

  // ---- reading ----
  // One lock-free load each (inline): for the hot paths of the views.
  uint64_t UsedBytes(int device) const {
    if (device < 0 || device >= kMaxDevices) return 0;
    return file_->devices[device].used_bytes.load(std::memory_order_relaxed);
  }
  uint64_t MemoryLimit(int device) const {  // 0 = unlimited
    if (device < 0 || device >= kMaxDevices) return 0;
    return file_->policy.memory_limit[device].load(std::memory_order_relaxed);
  }
  uint32_t SmLimit(int device) const {  // percent; 0 or 100 = unlimited
    if (device < 0 || device >= kMaxDevices) return 0;
    return file_->policy.sm_limit[device].load(std::memory_order_relaxed);
  }
  // The SM share in force on `device` for this process's launches, in percent: the stricter
  // of the region's limit and this process's own (SetOwnSmLimit), when the core policy says
  // to limit (force; default while the utilization switch is on), else 0 (unlimited).
  uint32_t SmLimitInForce(int device) const {
    if (device < 0 || device >= kMaxDevices) return 0;
    return SmShareInForce(StricterShare(
        SmLimit(device), own_sm_limit_[size_t(device)].load(std::memory_order_relaxed)));
  }
  // The SM share the container's controller holds the container to on `device`: the region's
  // limit and every live process's own share (published in its slot), the strictest, gated by
  // the core policy as SmLimitInForce. Reads every slot's state: for the controller's period,
  // not for a launch.
  uint32_t ContainerSmLimit(int device) const;
  // The stricter of two SM shares, where 0 and 100 or more are none.
  static constexpr uint32_t StricterShare(uint32_t a, uint32_t b) {
    const bool none_a = a == 0 || a >= 100, none_b = b == 0 || b >= 100;
    return none_a ? (none_b ? 0 : b) : none_b ? a : std::min(a, b);
  }
  // A process never runs looser than it was given, for compute too: its own SM share on
  // `device` (percent; 0 or 100: none of its own) holds with the region's, and is published in
  // its slot (now, or when it registers) for the container's controller. Never written to the
  // policy.
  void SetOwnSmLimit(int device, uint32_t percent);

  // ---- the compute limiter (libvgpu's launch path and controller; read-write handles) ----
  // The container's shared limiter state of `device` (0 <= device < kMaxDevices).
  layout::LimiterDevice& Limiter(int device) { return file_->policy.limiter[device]; }
  // The controller's measurements: a slot's and the whole container's SM utilization on
  // `device`, in percent.
  void RecordSlotSmUtil(int slot, int device, uint32_t percent) {
    file_->slots[slot].sm_util[device].store(percent, std::memory_order_relaxed);
  }
  void RecordDeviceSmUtil(int device, uint32_t percent) {
    file_->devices[device].sm_util.store(percent, std::memory_order_relaxed);
  }
  // Words a launch or allocation waits on (futex) while the container is paused or this
  // process is suspended; SetPaused and SetSlotStatus wake the waiters.
  std::atomic<uint32_t>& PausedWord() { return file_->policy.paused; }
  std::atomic<uint32_t>* OwnStatusWord() {
    const int s = slot();
    return s >= 0 ? &file_->slots[s].status : nullptr;
  }
  layout::Slot* OwnSlot() {
    const int s = slot();
    return s >= 0 ? &file_->slots[s] : nullptr;
  }
  // Takes (without waiting) the lock that makes this process the container's compute
  // controller on `device`; true while held (a second call by the holder is true too). The
  // kernel releases it when the process dies.
  bool TryLeadLimiter(int device);

  // ---- the NVML cross-check (crosscheck.h; libvgpu's watcher, read-write handles) ----
  // As TryLeadLimiter, for the process that runs the cross-check of `device`.
  bool TryLeadCrossCheck(int device);
  // Publishes one device's check, made at `now_ns` (CLOCK_MONOTONIC): each slot's gap on the
  // device (cleared on the slots that have none now), the device's total and its largest
  // gap's host PID. Returns the gaps that are new (their slot had none on the device before).
  std::vector<AccountingGap> RecordCrossCheck(const DeviceCrossCheck& check, int64_t now_ns);
  // What the latest check of `device` found.
  struct CrossCheckState {
    uint64_t unaccounted_bytes = 0;
    pid_t host_pid = 0;      // the process with the largest gap
    int64_t checked_ns = 0;  // CLOCK_MONOTONIC; 0: never checked
    uint32_t unchecked = 0;  // live processes with no host PID
  };
  CrossCheckState CrossCheck(int device) const;
  // Whether a gap stands on `device` now: found by a check at most kCrossCheckStaleNs old (a
  // finding nobody renews, its checker gone, stops counting). One relaxed load when there is
  // none.
  bool UnaccountedInForce(int device) const {
    if (device < 0 || device >= kMaxDevices) return false;
    const layout::DeviceAccount& a = file_->devices[device];
    if (__builtin_expect(a.unaccounted_bytes.load(std::memory_order_relaxed) == 0, 1)) {
      return false;
    }
    return MonotonicNs() - a.crosscheck_ns.load(std::memory_order_relaxed) <= kCrossCheckStaleNs;
  }
  // Records that this process was given `own_value` for `field` of `device` where the region
  // says `region_value` (as Open does for a stamp that differs), for `hami inspect`.
  void RecordPolicyConflict(layout::ConflictField field, int device, uint64_t region_value,
                            uint64_t own_value);

  // ---- the file's identity ----
  // Whether the path still names the file this handle maps, whole: an error naming the path
  // and what changed when it was removed, renamed, replaced (another file or a symbolic link
  // stands there now) or truncated. A private region (CreatePrivate) has no path: always ok.
  Status VerifyFile() const;
  // Whether this process's slot is still its own (live, its PID, the generation it claimed):
  // an error naming the slot when the file was edited to free it or give it to another.
  Status VerifyOwnSlot() const;
  // The open file's descriptor (the watcher watches it for changes); -1 for none.
  int fd() const { return fd_.get(); }
  bool anonymous() const { return anonymous_; }

  DeviceSnapshot Snapshot(int device) const;
  PolicyView Policy() const;
  std::vector<SlotView> Slots() const;  // every non-free slot
  std::vector<Inconsistency> Check() const;

  // ---- policy changes (operator actions) ----
  Status SetMemoryLimit(int device, uint64_t bytes);
  // As SetMemoryLimit, unless the container holds more than `bytes` (> 0) on the device:
  // checked and set under the device's lock, which every reservation takes, so no admission
  // slips between the check and the change. Refused with kBusy, naming both amounts and
  // changing nothing; kTimeout when the device lock cannot be had (SetLockTimeout).
  Status LowerMemoryLimitAboveUse(int device, uint64_t bytes);
  Status SetSmLimit(int device, uint32_t percent);
  Status SetPriority(int32_t priority);
  Status SetCorePolicy(CorePolicy policy);
  Status SetUtilizationSwitch(bool on);
  Status SetPaused(bool paused);
  // The container's host budget (oversubscription, bytes; 0: none). A running process holds
  // to the smaller of it and its own, so a raise reaches only processes started since.
  Status SetHostLimit(uint64_t bytes);

  // ---- the calling process's slot (identity, limiter, monitor fill these) ----
  // Records the process's start time (/proc/self/stat) in its slot, once. A registration
  // leaves it 0: the procfs read costs a starting process more than its claim does, and the
  // field is for people and tools (libvgpu records it at the process's first admission).
  void RecordStartTime();
  void SetHostPid(pid_t host_pid, IdentitySource source);
  // One identity attempt: its outcome (a host PID with its source, or 0 with kFailed /
  // kUnknown), why each tier gave none, and how long it took. Every reason is kept in the slot;
  // the header counts a decided attempt's source and its tiers' failures (IsTierFailure). A
  // pending one (kUnknown: the probe waits for cuInit) is counted when it is decided.
  void RecordIdentity(pid_t host_pid, IdentitySource source,
                      const std::array<IdentityReason, kIdentityTiers>& reasons,
                      int64_t duration_ns);
  // The header's counts: resolutions by source, tier failures by reason.
  std::array<uint64_t, layout::kIdentitySources> IdentityCounts() const;
  std::array<uint64_t, layout::kIdentityReasons> IdentityReasonCounts() const;
  // `launches` more launches of this process (counted in batches), the latest at `now_ns`:
  // the slot's count and time, the container's latest-kernel time, and the container's
  // recent-kernel counter raised to kRecentKernelOnLaunch (never lowered; a CAS, so a
  // concurrent decay by the monitor cannot undo it).
  void RecordActivity(uint32_t launches, int64_t now_ns);

  // ---- the monitor's feedback loop ----
  // The container's recent-kernel counter (one relaxed load).
  uint32_t RecentKernel() const {
    return file_->policy.recent_kernel.load(std::memory_order_relaxed);
  }
  // Replaces the counter's value v by next(v) with a compare-and-swap, retried (next called
  // again on the new value) when a launch changed it in between, so a launch is never lost;
  // nothing is written when next(v) == v. Returns the value it replaced. `next` must be pure.
  // kPermission on a read-only handle.
  Result<uint32_t> UpdateRecentKernel(uint32_t (*next)(uint32_t));
  // Any slot (hami suspend/resume, the monitor).
  Status SetSlotStatus(int slot, SlotStatus status);

  // The mapped file, for the monitor's lock-free reads of observation fields.
  const layout::File& file() const { return *file_; }

 private:
  Region(std::string path, UniqueFd fd, MappedFile map, Access access, bool anonymous = false);
  bool OwnerAlive(int slot) const;
  bool Inherited() const;      // fd_ is a fork parent's (no ReopenAfterFork() yet)
  int SweepDeadLocked();       // the caller holds membership_mu_
  int SweepDeadIfDueLocked();  // the caller holds membership_mu_
  bool ReclaimHeld(int slot);  // the caller holds slot `slot`'s lock; false: not reclaimed
  Status Writable() const;
  void Touch();  // records an operator change

  std::string path_;
  UniqueFd fd_;
  MappedFile map_;  // the whole file
  layout::File* file_;
  Access access_;
  bool anonymous_;  // made by CreatePrivate: on no file system
  std::atomic<int> slot_{-1};
  uint32_t slot_generation_ = 0;  // the slot's generation when this process claimed it
  std::array<std::atomic<uint64_t>, kMaxDevices> own_memory_limit_{};
  std::array<std::atomic<uint32_t>, kMaxDevices> own_sm_limit_{};
  std::atomic<uint64_t> own_host_limit_{UINT64_MAX};
  // Serializes this process's threads around the host lock (an OFD lock does not exclude
  // another thread of the same open file).
  std::mutex host_mu_;
  // `limit` (percent) as the core policy lets it stand: 0 when the policy does not limit now.
  uint32_t SmShareInForce(uint32_t limit) const {
    if (limit == 0 || limit >= 100) return 0;
    const auto policy = CorePolicy(file_->policy.core_policy.load(std::memory_order_relaxed));
    if (policy == CorePolicy::kDisable) return 0;
    if (policy == CorePolicy::kDefault &&
        file_->policy.utilization_switch.load(std::memory_order_relaxed) == 0) {
      return 0;
    }
    return limit;
  }
  int64_t lock_timeout_ns_ = 0;
  // Per device: how long a lock attempt waited before it gave up (0: none did).
  mutable std::array<std::atomic<int64_t>, kMaxDevices> wedged_ns_{};
  uint64_t opener_forks_;  // ForkCount() when fd_ was opened: fd_ is this process's own
                           // while the count is unchanged (cheaper than getpid())
  // Every thread of the process shares one open file description, so the slot byte locks do
  // not exclude one thread from another: this does, around every take and release of them
  // (Register, Unregister, SweepDead). Taken before a device mutex, never while holding one.
  std::mutex membership_mu_;
};

const char* UsageKindName(UsageKind kind);
const char* SlotStateName(layout::SlotState state);
const char* SlotStatusName(SlotStatus status);
const char* InconsistencyKindName(Inconsistency::Kind kind);
const char* IdentitySourceName(IdentitySource source);
const char* IdentityReasonName(IdentityReason reason);
// Whether a tier's reason is a failure the header counts. kNone (answered or not reached),
// kDisabled (off) and kOtherNamespace (the namespace tier does not apply to a process outside
// the initial PID namespace: every container's) are not.
bool IsTierFailure(IdentityReason reason);
const char* IdentityTierName(IdentityTier tier);
const char* CorePolicyName(CorePolicy policy);
const char* LimiterModeName(LimiterMode mode);

// Whether a live process is attached to the region file at `path`: some open of the file
// holds one of the region's OFD locks (a registered process's slot lock, the init lock of a
// creator or a waiter, a compute controller's lock). One lock query; the file's contents are
// not read or validated, so a file of another format answers false. The final component is
// never followed: a symlink or non-regular file is an error naming the path (kPermission);
// a file that cannot be opened is an error naming it, with its errno (ENOENT: missing).
Result<bool> AnyProcessAttached(const std::string& path);

// Checks a header read from `path` (of `file_size` bytes) against this build's layout.
// Pure; the fuzz target drives it.
Status ValidateHeader(const layout::Header& header, uint64_t file_size, const std::string& path);

}  // namespace hami::region
