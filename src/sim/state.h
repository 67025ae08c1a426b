// SharedState: one process's handle on the simulated machine's state file (state_layout.h).
//
// Thread-safe: every method may be called from any thread. Cross-process safety comes from
// the robust mutexes and OFD locks described in state_layout.h. A process killed at any
// point leaves a state the next user repairs: its slot is reclaimed (memory returned,
// removed from process lists) by the next claim, by a charge that would otherwise fail,
// and by every process listing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/file.h"
#include "common/kill_point.h"
#include "common/result.h"
#include "common/robust_mutex.h"
#include "common/unique_fd.h"
#include "sim/profiles.h"
#include "sim/state_layout.h"

namespace hami::sim {

struct ProcessView {
  int slot;
  pid_t host_pid;  // as seen in the state's PID namespace; 0 if not yet known
  pid_t ns_pid;    // as the process sees itself
  uint64_t used_bytes;
  uint32_t contexts;
  std::string comm;
};

struct ProcessBusy {
  pid_t host_pid;
  int64_t busy_ns;
};

struct BusyWindow {
  int64_t busy_ns;     // device time spent in kernels within [from, to)
  int64_t covered_ns;  // the part of the window the records cover (<= to - from)
};

// What accounting recorded of one process on one device.
struct AccountingView {
  pid_t host_pid;  // as in ProcessView
  bool running;
  uint64_t max_used_bytes;  // the most it held on the device
  uint64_t busy_ns;         // device time it consumed (so far, while it runs)
  int64_t start_realtime_ns;
  int64_t end_realtime_ns;  // 0 while it runs
};

enum class ChargeResult { kOk, kOutOfMemory };

// One Xid error recorded on a device (`hami sim xid`).
struct XidEvent {
  uint64_t sequence;  // its number on its device, counting from 0
  uint64_t code;      // the Xid
  int64_t realtime_ns;
};

class SharedState {
 public:
  // Opens the state file at `path`, creating and initializing it when absent, for the
  // machine `devices` (parsed from `profile_spec` with `node`). Refuses, naming the file
  // and the mismatch: a symlink or non-regular file, a wrong magic, version, size or layout
  // fingerprint, or a state in use by processes of a differently configured machine (an
  // unused one is re-initialized). `kill_point`, when not empty, names a kill point of the
  // simulated GPU (common/kill_points.def) at which this handle SIGKILLs its process; any
  // other name is refused.
  static Result<std::unique_ptr<SharedState>> Open(const std::string& path,
                                                   std::string_view profile_spec,
                                                   std::string_view node,
                                                   std::string_view kill_point = "");

  // Opens an existing state file for inspection, taking the machine from its header.
  static Result<std::unique_ptr<SharedState>> OpenExisting(const std::string& path);

  ~SharedState();
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<DeviceSpec>& devices() const { return devices_; }
  std::string profile_spec() const;
  uint64_t host_pidns_inode() const { return file_->header.host_pidns_inode; }

  // Claims a slot for the calling process; kBusy when all slots are held by live processes.
  Result<int> ClaimSlot();

  // Memory. Charge fails only when the device's usable memory would be exceeded.
  ChargeResult Charge(int slot, int device, uint64_t bytes);
  void Uncharge(int slot, int device, uint64_t bytes);
  void AddContexts(int slot, int device, int delta);
  uint64_t UsedBytes(int device) const;

  // Reserves `duration_ns` of device time starting no earlier than `earliest_ns` and after
  // everything reserved before; returns the end. Records the interval for utilization.
  int64_t ReserveBusy(int slot, int device, int64_t earliest_ns, int64_t duration_ns);

  BusyWindow DeviceBusy(int device, int64_t from_ns, int64_t to_ns) const;
  std::vector<ProcessBusy> ProcessesBusy(int device, int64_t from_ns, int64_t to_ns);

  // Xid errors. RecordXid appends one to `device`'s log (which keeps the last
  // state::kXidRing) and wakes every event waiter of every process; kInvalidArgument for a
  // device the machine does not have.
  Status RecordXid(int device, uint64_t code);
  // Events ever recorded on `device`: the sequence number the next one gets.
  uint64_t XidCount(int device) const;
  // The first event with sequence >= `from` still kept (later ones when older were
  // overwritten); nullopt when none has been recorded from there yet.
  std::optional<XidEvent> XidFrom(int device, uint64_t from) const;

  // The event epoch changes after every event recorded on any device. WaitForEvent sleeps
  // while it still equals `seen`, at most `timeout_ns`; it may return early (a signal, a
  // spurious wake-up), so callers re-check what they wait for. Read the epoch before
  // checking for events, then wait with it: an event in between ends the wait at once.
  uint32_t EventEpoch() const;
  void WaitForEvent(uint32_t seen, int64_t timeout_ns) const;

  // Per-process accounting, by device. The mode is on when the file is made; turning it off
  // drops the device's records. While it is on, a process gets a record on a device when it
  // first holds a context or memory there; the record outlives the process (ended when its
  // slot is reclaimed) until state::kAccountingRing newer records have been made.
  bool AccountingEnabled(int device) const;
  void SetAccounting(int device, bool enabled);
  // The records `device` keeps, oldest first, after reclaiming dead processes; none while
  // the mode is off.
  std::vector<AccountingView> Accounting(int device);

  // Live processes holding a context or memory on `device`, after reclaiming dead ones.
  std::vector<ProcessView> Processes(int device);

  // Reclaims every slot whose owner is gone; returns how many.
  int SweepDead();

  // Serializes context creation across processes (HAMI_SIM_CTX_SERIALIZE).
  class ContextCreationLock {
   public:
    explicit ContextCreationLock(pthread_mutex_t* m) : guard_(m, nullptr, nullptr) {}

   private:
    RobustLockGuard guard_;
  };
  std::unique_ptr<ContextCreationLock> LockContextCreation();

  // In a fork child: lets go of the parent's file handle (whose locks are the parent's)
  // without touching the parent's slots. The object is unusable afterwards.
  void AbandonAfterFork();

  // Test hook: SIGKILLs the process when `id` is the kill point it was opened with.
  void KillPoint(KillPointId id) const;

 private:
  SharedState(std::string path, UniqueFd fd, MappedFile map, std::vector<DeviceSpec> devices,
              std::optional<KillPointId> kill_point);
  static Result<std::unique_ptr<SharedState>> OpenImpl(const std::string& path,
                                                       std::string_view profile_spec,
                                                       std::string_view node, bool create,
                                                       std::string_view kill_point);

  bool OwnerAlive(int slot) const;
  void ReclaimLocked(int slot);
  pid_t HostPidOf(state::Slot& s);
  // The record of the process holding `slot` on `device` while it runs; one is made when
  // `make` says so. Null while the mode is off. Called with the device's mutex held.
  state::AccountingRecord* RunningRecordLocked(int slot, int device, bool make);

  std::string path_;
  UniqueFd fd_;
  MappedFile map_;
  state::File* file_;
  std::vector<DeviceSpec> devices_;
  std::optional<KillPointId> kill_point_;
  mutable std::mutex own_mu_;
  std::vector<int> own_slots_;  // slots this handle holds (their OFD lock is ours)
};

// The hash of a device table stored in the header, so a differently configured machine
// is detected.
uint64_t ConfigFingerprint(std::span<const DeviceSpec> devices);

}  // namespace hami::sim
