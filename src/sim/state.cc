#include "sim/state.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <map>

#include "common/clock.h"
#include "common/futex.h"
#include "common/ofd_lock.h"
#include "common/robust_mutex.h"
#include "common/strings.h"
#include "common/versioned_file.h"
#include "sim/host_pid.h"
#include "sim/procfs.h"

namespace hami::sim {

namespace {

using state::File;
using state::Header;

int OfdLock(int fd, off_t offset, short type, bool wait) {
  return OfdLockByte(fd, offset, type, wait ? LockWait::kYes : LockWait::kNo);
}

bool OfdLockedByOther(int fd, off_t offset, short type) {
  return OfdByteLockedByOther(fd, offset, type);
}

void CopyString(char* dst, size_t cap, std::string_view src) {
  size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

struct DeviceRepair {
  File* file;
  int device;
};

// After a holder of a device mutex died: the aggregate may disagree with the slots by the
// one update it was making. The slots are the truth (each field is written by one store).
void RepairDevice(void* arg) {
  auto* r = static_cast<DeviceRepair*>(arg);
  uint64_t sum = 0;
  for (const state::Slot& s : r->file->slots) {
    if (s.state.load(std::memory_order_acquire) == state::kSlotLive) sum += s.used_bytes[r->device];
  }
  r->file->devices[r->device].used_bytes = sum;
}

// Fills a new state file (zero bytes of its full size); OpenVersionedFile publishes it.
Status FillFile(File* f, std::string_view profile_spec, std::string_view node,
                std::span<const DeviceSpec> devices) {
  Header& h = f->header;
  std::memcpy(h.magic, state::kMagic, sizeof(h.magic));
  h.version = state::kVersion;
  h.header_size = sizeof(Header);
  h.total_size = sizeof(File);
  h.layout_fingerprint = state::LayoutFingerprint();
  h.config_fingerprint = ConfigFingerprint(devices);
  h.device_count = uint32_t(devices.size());
  h.host_pidns_inode = procfs::PidNsInode();
  h.created_realtime_ns = RealtimeNs();
  CopyString(h.profile_spec, sizeof(h.profile_spec), profile_spec);
  CopyString(h.node, sizeof(h.node), node);
  HAMI_TRY(InitRobustMutex(&h.slots_mutex));
  HAMI_TRY(InitRobustMutex(&h.ctx_create_mutex));
  for (state::Device& d : f->devices) HAMI_TRY(InitRobustMutex(&d.mutex));
  for (state::AccountingLog& a : f->accounting) a.enabled = 1;
  return OkStatus();
}

// Checks a header read from `path` against this build's layout. `what` names the file.
Status ValidateHeader(const Header& h, off_t file_size, const std::string& path) {
  if (std::memcmp(h.magic, state::kMagic, sizeof(h.magic)) != 0) {
    return Error(ErrorCode::kCorrupt,
                 "state file " + path +
                     " is not a simulated-GPU state file (bad magic); "
                     "refusing to use it. Remove it or set HAMI_SIM_STATE to another path");
  }
  if (h.version != state::kVersion) {
    return Error(ErrorCode::kIncompatible, "state file " + path + " has layout version " +
                                               std::to_string(h.version) + ", this build uses " +
                                               std::to_string(state::kVersion));
  }
  if (h.header_size != sizeof(Header) || h.total_size != sizeof(File) ||
      h.layout_fingerprint != state::LayoutFingerprint()) {
    return Error(ErrorCode::kIncompatible,
                 "state file " + path + " has a different layout (header " +
                     std::to_string(h.header_size) + " bytes, total " +
                     std::to_string(h.total_size) + ", fingerprint " +
                     FormatHex64(h.layout_fingerprint) + "; expected " +
                     std::to_string(sizeof(Header)) + ", " + std::to_string(sizeof(File)) + ", " +
                     FormatHex64(state::LayoutFingerprint()) + ")");
  }
  if (uint64_t(file_size) != h.total_size) {
    return Error(ErrorCode::kCorrupt, "state file " + path + " is " + std::to_string(file_size) +
                                          " bytes but its header says " +
                                          std::to_string(h.total_size));
  }
  if (h.device_count > uint32_t(kMaxDevices) ||
      std::memchr(h.profile_spec, '\0', sizeof(h.profile_spec)) == nullptr ||
      std::memchr(h.node, '\0', sizeof(h.node)) == nullptr) {
    return Error(ErrorCode::kCorrupt, "state file " + path + " has a malformed device table");
  }
  return OkStatus();
}

// The state file as common/versioned_file.h sees it. Every opener holds the init lock while
// it decides what to do with the file and until it holds the users lock.
constexpr VersionedFileSpec kStateFile{
    .kind = "state file",
    .size = sizeof(File),
    .header_size = sizeof(Header),
    .magic_size = sizeof(state::kMagic),
    .initialized_offset = offsetof(Header, initialized),
    .initialized_value = state::kInitialized,
    .init_lock = state::kInitLock,
    .locking = InitLocking::kEveryOpener,
};

class StateFormat final : public VersionedFileFormat {
 public:
  StateFormat(const std::string& path, std::string_view profile_spec, std::string_view node,
              std::span<const DeviceSpec> devices)
      : path_(path), profile_spec_(profile_spec), node_(node), devices_(devices) {}
  Status Validate(const void* header, uint64_t file_size) const override {
    return ValidateHeader(*static_cast<const Header*>(header), off_t(file_size), path_);
  }
  Status Fill(void* file) const override {
    return FillFile(static_cast<File*>(file), profile_spec_, node_, devices_);
  }

 private:
  const std::string& path_;
  std::string_view profile_spec_;
  std::string_view node_;
  std::span<const DeviceSpec> devices_;
};

}  // namespace

uint64_t ConfigFingerprint(std::span<const DeviceSpec> devices) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::string_view s) {
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull;
  };
  for (const DeviceSpec& d : devices) {
    mix(d.profile->key);
    mix(d.uuid);
  }
  return h ^ devices.size();
}

SharedState::SharedState(std::string path, UniqueFd fd, MappedFile map,
                         std::vector<DeviceSpec> devices, std::optional<KillPointId> kill_point)
    : path_(std::move(path)),
      fd_(std::move(fd)),
      map_(std::move(map)),
      file_(static_cast<File*>(map_.data())),
      devices_(std::move(devices)),
      kill_point_(kill_point) {}

SharedState::~SharedState() {
  if (file_ == nullptr) return;  // abandoned after fork
  std::vector<int> own;
  {
    std::lock_guard<std::mutex> l(own_mu_);
    own.swap(own_slots_);
  }
  if (!own.empty()) {
    RobustLockGuard g(&file_->header.slots_mutex, nullptr, nullptr);
    for (int s : own) {
      if (g.locked()) ReclaimLocked(s);
      OfdLock(fd_.get(), state::kSlotLockBase + s, F_UNLCK, false);
    }
  }
}

Result<std::unique_ptr<SharedState>> SharedState::Open(const std::string& path,
                                                       std::string_view profile_spec,
                                                       std::string_view node,
                                                       std::string_view kill_point) {
  return OpenImpl(path, profile_spec, node, true, kill_point);
}

Result<std::unique_ptr<SharedState>> SharedState::OpenExisting(const std::string& path) {
  return OpenImpl(path, "", "", false, "");
}

Result<std::unique_ptr<SharedState>> SharedState::OpenImpl(const std::string& path,
                                                           std::string_view profile_spec,
                                                           std::string_view node, bool create,
                                                           std::string_view kill_point) {
  std::vector<DeviceSpec> devices;
  if (create) devices = HAMI_TRY(ParseProfileSpec(profile_spec, node));
  std::optional<KillPointId> armed;
  if (!kill_point.empty()) {
    armed = HAMI_TRY(ParseKillPoint(kill_point, KillPointOwner::kSim, "the state's kill point"));
  }
  const StateFormat format(path, profile_spec, node, devices);
  VersionedFile file = HAMI_TRY(OpenVersionedFile(
      path, kStateFile, format, create ? FileCreate::kIfMissing : FileCreate::kNever,
      MapAccess::kReadWrite));
  // We hold the init lock: nobody else is deciding about the file.
  const Header& h = static_cast<const File*>(file.map.data())->header;
  if (!create) {
    devices = HAMI_TRY(ParseProfileSpec(h.profile_spec, h.node));
    if (ConfigFingerprint(devices) != h.config_fingerprint) {
      return Error(ErrorCode::kCorrupt,
                   "state file " + path + ": its device table does not match its fingerprint");
    }
  } else if (!file.initialized_here && h.config_fingerprint != ConfigFingerprint(devices)) {
    if (OfdLock(file.fd.get(), state::kUsersLock, F_WRLCK, false) != 0) {
      return Error(ErrorCode::kBusy,
                   "state file " + path + " is in use by processes of a machine with devices '" +
                       std::string(h.profile_spec) + "' (node '" + h.node +
                       "'), but this process asks for '" + std::string(profile_spec) + "' (node '" +
                       std::string(node) +
                       "'). Use the same HAMI_SIM_PROFILE and HAMI_SIM_NODE, or another "
                       "HAMI_SIM_STATE");
    }
    // Nobody uses it: make it again for this machine.
    HAMI_TRY(ReinitializeVersionedFile(file, path, kStateFile, format));
  }

  if (int err = OfdLock(file.fd.get(), state::kUsersLock, F_RDLCK, false); err != 0) {
    return Error::FromErrno("taking the users lock of state file " + path, err);
  }
  file.init_lock.Reset();
  return std::unique_ptr<SharedState>(
      new SharedState(path, std::move(file.fd), std::move(file.map), std::move(devices), armed));
}

std::string SharedState::profile_spec() const { return file_->header.profile_spec; }

bool SharedState::OwnerAlive(int slot) const {
  {
    std::lock_guard<std::mutex> l(own_mu_);
    if (std::find(own_slots_.begin(), own_slots_.end(), slot) != own_slots_.end()) return true;
  }
  return OfdLockedByOther(fd_.get(), state::kSlotLockBase + slot, F_WRLCK);
}

void SharedState::ReclaimLocked(int slot) {
  state::Slot& s = file_->slots[slot];
  for (size_t d = 0; d < devices_.size(); ++d) {
    state::Device& dev = file_->devices[d];
    DeviceRepair repair{file_, int(d)};
    RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
    if (!g.locked()) continue;
    if (state::AccountingRecord* a = RunningRecordLocked(slot, int(d), false)) {
      if (pid_t h = s.host_pid.load(std::memory_order_relaxed); h != 0) a->host_pid = h;
      a->busy_ns = s.busy_ns[d];
      a->end_realtime_ns = RealtimeNs();
    }
    dev.used_bytes -= std::min(dev.used_bytes, s.used_bytes[d]);
    s.used_bytes[d] = 0;
    s.contexts[d] = 0;
  }
  s.state.store(state::kSlotFree, std::memory_order_release);
}

Result<int> SharedState::ClaimSlot() {
  RobustLockGuard g(&file_->header.slots_mutex, nullptr, nullptr);
  if (!g.locked()) {
    return Error(ErrorCode::kInternal, "state file " + path_ + ": slot lock unrecoverable");
  }
  auto try_take = [&](int i) -> bool {
    return OfdLock(fd_.get(), state::kSlotLockBase + i, F_WRLCK, false) == 0;
  };
  int chosen = -1;
  for (int i = 0; i < state::kMaxSlots && chosen < 0; ++i) {
    if (file_->slots[i].state.load(std::memory_order_acquire) == state::kSlotFree && try_take(i)) {
      chosen = i;
    }
  }
  for (int i = 0; i < state::kMaxSlots && chosen < 0; ++i) {
    if (!OwnerAlive(i) && try_take(i)) {
      ReclaimLocked(i);
      chosen = i;
    }
  }
  if (chosen < 0) {
    return Error(ErrorCode::kBusy, "state file " + path_ + ": all " +
                                       std::to_string(state::kMaxSlots) +
                                       " process slots are held by live processes");
  }
  state::Slot& s = file_->slots[chosen];
  s.ns_pid = getpid();
  s.host_pid.store(PidInNamespace(file_->header.host_pidns_inode, path_),
                   std::memory_order_relaxed);
  s.generation += 1;
  s.pidns_inode = procfs::PidNsInode();
  s.start_time_ticks = procfs::StartTicks();
  CopyString(s.comm, sizeof(s.comm), procfs::Comm());
  std::memset(s.used_bytes, 0, sizeof(s.used_bytes));
  std::memset(s.contexts, 0, sizeof(s.contexts));
  std::memset(s.busy_ns, 0, sizeof(s.busy_ns));
  s.state.store(state::kSlotLive, std::memory_order_release);
  std::lock_guard<std::mutex> l(own_mu_);
  own_slots_.push_back(chosen);
  return chosen;
}

ChargeResult SharedState::Charge(int slot, int device, uint64_t bytes) {
  uint64_t usable = devices_[size_t(device)].usable_bytes();
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      state::Device& dev = file_->devices[device];
      DeviceRepair repair{file_, device};
      RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
      if (!g.locked()) return ChargeResult::kOutOfMemory;
      if (dev.used_bytes <= usable && bytes <= usable - dev.used_bytes) {
        file_->slots[slot].used_bytes[device] += bytes;
        KillPoint(KillPointId::kSimDeviceLockHeld);
        dev.used_bytes += bytes;
        if (state::AccountingRecord* a = RunningRecordLocked(slot, device, true)) {
          a->max_used_bytes = std::max(a->max_used_bytes, file_->slots[slot].used_bytes[device]);
        }
        return ChargeResult::kOk;
      }
    }
    // Full: memory of processes that died may still be counted. Reclaim, then retry once.
    if (attempt == 0 && SweepDead() == 0) break;
  }
  return ChargeResult::kOutOfMemory;
}

void SharedState::Uncharge(int slot, int device, uint64_t bytes) {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  if (!g.locked()) return;
  state::Slot& s = file_->slots[slot];
  uint64_t n = std::min(bytes, s.used_bytes[device]);
  s.used_bytes[device] -= n;
  dev.used_bytes -= std::min(n, dev.used_bytes);
}

void SharedState::AddContexts(int slot, int device, int delta) {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  uint32_t& c = file_->slots[slot].contexts[device];
  c = delta < 0 && uint32_t(-delta) > c ? 0 : uint32_t(int64_t(c) + delta);
  if (delta > 0 && g.locked()) RunningRecordLocked(slot, device, true);
}

uint64_t SharedState::UsedBytes(int device) const {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  return dev.used_bytes;
}

int64_t SharedState::ReserveBusy(int slot, int device, int64_t earliest_ns, int64_t duration_ns) {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  // Saturate rather than overflow: a timeline of ~292 years is as good as forever.
  constexpr int64_t kForever = INT64_MAX / 2;
  int64_t start = std::min(std::max(earliest_ns, dev.next_free_ns), kForever);
  int64_t end = start + std::min(duration_ns, kForever);
  dev.next_free_ns = end;
  state::Slot& s = file_->slots[slot];
  s.busy_ns[device] += uint64_t(duration_ns);
  if (dev.busy_count > 0) {
    state::BusyRecord& last = dev.ring[(dev.busy_count - 1) % state::kBusyRing];
    if (last.slot == slot && last.generation == s.generation && last.end_ns == start) {
      last.end_ns = end;
      return end;
    }
  }
  dev.ring[dev.busy_count % state::kBusyRing] = {start, end, slot, s.generation};
  dev.busy_count += 1;
  return end;
}

namespace {

// Walks a device's busy records from the newest back, calling f(record, overlap_ns) for
// those overlapping [from, to). Returns the start of the covered part of the window.
template <typename F>
int64_t ScanBusy(const state::Device& dev, int64_t from, int64_t to, F&& f) {
  uint64_t n = std::min<uint64_t>(dev.busy_count, state::kBusyRing);
  int64_t covered_from = from;
  for (uint64_t i = 0; i < n; ++i) {
    const state::BusyRecord& r = dev.ring[(dev.busy_count - 1 - i) % state::kBusyRing];
    if (r.end_ns <= from) return from;
    int64_t lo = std::max(r.start_ns, from), hi = std::min(r.end_ns, to);
    if (hi > lo) f(r, hi - lo);
    covered_from = std::max(from, r.start_ns);
  }
  // Ran out of records: older history was overwritten unless the ring never filled.
  return dev.busy_count > state::kBusyRing ? covered_from : from;
}

}  // namespace

BusyWindow SharedState::DeviceBusy(int device, int64_t from_ns, int64_t to_ns) const {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  int64_t busy = 0;
  int64_t covered_from =
      ScanBusy(dev, from_ns, to_ns, [&](const state::BusyRecord&, int64_t ns) { busy += ns; });
  return {busy, std::max<int64_t>(0, to_ns - covered_from)};
}

std::vector<ProcessBusy> SharedState::ProcessesBusy(int device, int64_t from_ns, int64_t to_ns) {
  std::map<std::pair<int, uint32_t>, int64_t> per_slot;
  {
    state::Device& dev = file_->devices[device];
    DeviceRepair repair{file_, device};
    RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
    ScanBusy(dev, from_ns, to_ns, [&](const state::BusyRecord& r, int64_t ns) {
      per_slot[{r.slot, r.generation}] += ns;
    });
  }
  std::vector<ProcessBusy> out;
  for (const auto& [key, ns] : per_slot) {
    state::Slot& s = file_->slots[key.first];
    if (s.state.load(std::memory_order_acquire) != state::kSlotLive || s.generation != key.second) {
      continue;
    }
    out.push_back({HostPidOf(s), ns});
  }
  return out;
}

pid_t SharedState::HostPidOf(state::Slot& s) {
  pid_t h = s.host_pid.load(std::memory_order_relaxed);
  if (h != 0) return h;
  if (procfs::PidNsInode() == file_->header.host_pidns_inode) {
    h = FindPidByNamespacePid(s.pidns_inode, s.ns_pid, s.start_time_ticks);
    if (h != 0) {
      s.host_pid.store(h, std::memory_order_relaxed);
      return h;
    }
  }
  return s.ns_pid;  // best effort when the host view cannot be reached from here
}

state::AccountingRecord* SharedState::RunningRecordLocked(int slot, int device, bool make) {
  state::AccountingLog& log = file_->accounting[device];
  if (log.enabled == 0) return nullptr;
  const state::Slot& s = file_->slots[slot];
  const uint64_t kept = std::min<uint64_t>(log.count, state::kAccountingRing);
  for (uint64_t i = 0; i < kept; ++i) {  // newest first: a running process's is recent
    state::AccountingRecord& a = log.ring[(log.count - 1 - i) % state::kAccountingRing];
    if (a.slot == slot && a.generation == s.generation && a.end_realtime_ns == 0) return &a;
  }
  if (!make) return nullptr;
  state::AccountingRecord& a = log.ring[log.count % state::kAccountingRing];
  a = state::AccountingRecord{};
  a.host_pid = s.host_pid.load(std::memory_order_relaxed);
  a.ns_pid = s.ns_pid;
  a.slot = slot;
  a.generation = s.generation;
  a.start_realtime_ns = RealtimeNs();
  log.count += 1;
  return &a;
}

bool SharedState::AccountingEnabled(int device) const {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  return file_->accounting[device].enabled != 0;
}

void SharedState::SetAccounting(int device, bool enabled) {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  if (!g.locked()) return;
  state::AccountingLog& log = file_->accounting[device];
  if (!enabled) log.count = 0;
  log.enabled = enabled ? 1 : 0;
}

std::vector<AccountingView> SharedState::Accounting(int device) {
  SweepDead();
  std::vector<state::AccountingRecord> records;
  std::vector<uint64_t> busy;
  {
    state::Device& dev = file_->devices[device];
    DeviceRepair repair{file_, device};
    RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
    const state::AccountingLog& log = file_->accounting[device];
    if (!g.locked() || log.enabled == 0) return {};
    const uint64_t kept = std::min<uint64_t>(log.count, state::kAccountingRing);
    for (uint64_t seq = log.count - kept; seq < log.count; ++seq) {
      const state::AccountingRecord& a = log.ring[seq % state::kAccountingRing];
      records.push_back(a);
      busy.push_back(a.end_realtime_ns == 0 ? file_->slots[a.slot].busy_ns[device] : a.busy_ns);
    }
  }
  std::vector<AccountingView> out;
  for (size_t i = 0; i < records.size(); ++i) {
    const state::AccountingRecord& a = records[i];
    const bool running = a.end_realtime_ns == 0;
    pid_t pid = a.host_pid != 0 ? a.host_pid : a.ns_pid;
    if (running) {
      state::Slot& s = file_->slots[a.slot];
      if (s.state.load(std::memory_order_acquire) == state::kSlotLive &&
          s.generation == a.generation) {
        pid = HostPidOf(s);
      }
    }
    out.push_back(
        {pid, running, a.max_used_bytes, busy[i], a.start_realtime_ns, a.end_realtime_ns});
  }
  return out;
}

std::vector<ProcessView> SharedState::Processes(int device) {
  SweepDead();
  std::vector<ProcessView> out;
  for (int i = 0; i < state::kMaxSlots; ++i) {
    state::Slot& s = file_->slots[i];
    if (s.state.load(std::memory_order_acquire) != state::kSlotLive) continue;
    uint64_t used;
    uint32_t contexts;
    {
      state::Device& dev = file_->devices[device];
      DeviceRepair repair{file_, device};
      RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
      used = s.used_bytes[device];
      contexts = s.contexts[device];
    }
    if (contexts == 0 && used == 0) continue;
    out.push_back({i, HostPidOf(s), s.ns_pid, used, contexts, s.comm});
  }
  return out;
}

int SharedState::SweepDead() {
  RobustLockGuard g(&file_->header.slots_mutex, nullptr, nullptr);
  if (!g.locked()) return 0;
  int n = 0;
  for (int i = 0; i < state::kMaxSlots; ++i) {
    if (file_->slots[i].state.load(std::memory_order_acquire) != state::kSlotLive) continue;
    if (OwnerAlive(i)) continue;
    ReclaimLocked(i);
    ++n;
  }
  return n;
}

Status SharedState::RecordXid(int device, uint64_t code) {
  if (device < 0 || size_t(device) >= devices_.size()) {
    return Error(ErrorCode::kInvalidArgument, "state file " + path_ + ": no device " +
                                                  std::to_string(device) + " (the machine has " +
                                                  std::to_string(devices_.size()) + ")");
  }
  {
    state::Device& dev = file_->devices[device];
    DeviceRepair repair{file_, device};
    RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
    if (!g.locked()) {
      return Error(ErrorCode::kInternal, "state file " + path_ + ": device " +
                                             std::to_string(device) + " lock unrecoverable");
    }
    state::XidLog& log = file_->xids[device];
    log.ring[log.count % state::kXidRing] = {code, RealtimeNs()};
    log.count += 1;
  }
  file_->header.event_epoch.fetch_add(1, std::memory_order_release);
  WakeAll(&file_->header.event_epoch);
  return OkStatus();
}

uint64_t SharedState::XidCount(int device) const {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  return file_->xids[device].count;
}

std::optional<XidEvent> SharedState::XidFrom(int device, uint64_t from) const {
  state::Device& dev = file_->devices[device];
  DeviceRepair repair{file_, device};
  RobustLockGuard g(&dev.mutex, RepairDevice, &repair);
  const state::XidLog& log = file_->xids[device];
  if (from >= log.count) return std::nullopt;
  const uint64_t oldest = log.count > uint64_t(state::kXidRing) ? log.count - state::kXidRing : 0;
  const uint64_t seq = std::max(from, oldest);
  const state::XidRecord& r = log.ring[seq % state::kXidRing];
  return XidEvent{seq, r.code, r.realtime_ns};
}

uint32_t SharedState::EventEpoch() const {
  return file_->header.event_epoch.load(std::memory_order_acquire);
}

void SharedState::WaitForEvent(uint32_t seen, int64_t timeout_ns) const {
  if (timeout_ns <= 0) return;
  WaitWhileEqual(&file_->header.event_epoch, seen, timeout_ns);
}

std::unique_ptr<SharedState::ContextCreationLock> SharedState::LockContextCreation() {
  return std::make_unique<ContextCreationLock>(&file_->header.ctx_create_mutex);
}

void SharedState::AbandonAfterFork() {
  {
    std::lock_guard<std::mutex> l(own_mu_);
    own_slots_.clear();
  }
  fd_.Reset();
  map_.Reset();
  file_ = nullptr;
}

void SharedState::KillPoint(KillPointId id) const {
  if (kill_point_ == id) raise(SIGKILL);
}

}  // namespace hami::sim
