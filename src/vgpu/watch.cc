#include "vgpu/watch.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/unique_fd.h"
#include "limits/vocabulary.h"
#include "region/crosscheck.h"
#include "vgpu/config.h"
#include "vgpu/nvml_list.h"
#include "vgpu/runtime.h"
#include "vgpu/spill.h"

namespace hami::vgpu {

namespace {

using region::layout::ConflictField;

constexpr unsigned long long kMiB = 1ull << 20;
// What inotify reports of the region's file: unlinked or renamed over (its link count),
// renamed away, truncated.
constexpr uint32_t kFileEvents = IN_ATTRIB | IN_MODIFY | IN_MOVE_SELF | IN_DELETE_SELF;
// What inotify reports of the limits file: rewritten in place (the node's resize), replaced.
constexpr uint32_t kLimitsEvents =
    IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF;

struct WatchState {
  std::array<bool, kMaxDevices> leading{};
  // Per device, the region's limit last recorded as a conflict with this process's own, + 1
  // (0: none), for memory and SM: each differing value is recorded once.
  std::array<uint64_t, kMaxDevices> memory_seen{};
  std::array<uint64_t, kMaxDevices> sm_seen{};
  std::vector<nvmlProcessInfo_t> listed;
  std::vector<region::NvmlProcessUse> uses;
  std::vector<region::SlotView> slots;
  // The limits file's state (LimitsFileState) as last followed, or as the process was
  // configured from until the first change: no change, nothing to do.
  std::string limits_state;
  // The host budget last applied (an oversubscribing process); unset until the file changes.
  std::optional<uint64_t> host_budget;
};

void Replaced(Runtime& rt, const Status& why) {
  if (rt.region_replaced.exchange(true, std::memory_order_relaxed)) return;
  g_log.Always(LogLevel::kError,
               "%s; this process no longer shares one budget with its container, so every "
               "allocation it makes on an accounted device is refused from now on "
               "(CUDA_ERROR_OUT_OF_MEMORY)",
               why.error().c_str());
}

// Records each limit of the region that differs from this process's own, once per value.
// What differed when the process joined was recorded then (Region::Open): it starts as seen.
void SeeJoinedPolicy(Runtime& rt, WatchState& w) {
  for (size_t i = 0; i < size_t(kMaxDevices); ++i) {
    if (rt.joined_memory_limit[i] != rt.config.memory_limit[i]) {
      w.memory_seen[i] = rt.joined_memory_limit[i] + 1;
    }
    if (rt.joined_sm_limit[i] != rt.config.sm_limit[i]) {
      w.sm_seen[i] = uint64_t(rt.joined_sm_limit[i]) + 1;
    }
  }
}

void CheckPolicy(Runtime& rt, region::Region* reg, WatchState& w) {
  const int count = reg->device_count();
  for (int i = 0; i < count; ++i) {
    const uint64_t memory = reg->MemoryLimit(i);
    const uint64_t own_memory = rt.own_memory_limit[size_t(i)].load(std::memory_order_relaxed);
    if (memory == own_memory) {
      w.memory_seen[size_t(i)] = 0;
    } else if (w.memory_seen[size_t(i)] != memory + 1) {
      w.memory_seen[size_t(i)] = memory + 1;
      reg->RecordPolicyConflict(ConflictField::kMemoryLimit, i, memory, own_memory);
    }
    const uint32_t sm = reg->SmLimit(i);
    const uint32_t own_sm = rt.own_sm_limit[size_t(i)].load(std::memory_order_relaxed);
    if (sm == own_sm) {
      w.sm_seen[size_t(i)] = 0;
    } else if (w.sm_seen[size_t(i)] != uint64_t(sm) + 1) {
      w.sm_seen[size_t(i)] = uint64_t(sm) + 1;
      reg->RecordPolicyConflict(ConflictField::kSmLimit, i, sm, own_sm);
    }
  }
}

// Follows the root-owned limits file: when what it says of a device's memory or SM limit
// differs from this process's own, the own limit becomes the file's (raised or lowered) and is
// held with the region's from the next admission or launch on. The environment is never read
// again, and a limit raised in the region alone stays under this process's own.
void FollowLimitsFile(Runtime& rt, region::Region* reg, WatchState& w) {
  LimitsFile file = ReadLimitsFile(kLimitsFilePath);
  std::string state = LimitsFileState(file);
  if (state == w.limits_state) return;
  w.limits_state = std::move(state);
  const FileLimits limits = LimitsFromFile(file);
  for (const std::string& c : limits.closed) g_log.Always(LogLevel::kError, "%s", c.c_str());
  const int count = reg->device_count();
  for (int i = 0; i < count && i < kMaxDevices; ++i) {
    if (const auto& m = limits.memory_limit[size_t(i)]) {
      const uint64_t was = rt.own_memory_limit[size_t(i)].exchange(*m, std::memory_order_relaxed);
      if (was != *m) {
        reg->SetOwnMemoryLimit(i, *m);
        g_log.Log(LogLevel::kInfo,
                  "%s: device %d memory limit %llu -> %llu bytes (0: none), held with the "
                  "region's from the next allocation",
                  kLimitsFilePath, i, static_cast<unsigned long long>(was),
                  static_cast<unsigned long long>(*m));
      }
    }
    if (const auto& sm = limits.sm_limit[size_t(i)]) {
      const uint32_t was = rt.own_sm_limit[size_t(i)].exchange(*sm, std::memory_order_relaxed);
      if (was != *sm) {
        reg->SetOwnSmLimit(i, *sm);
        g_log.Log(LogLevel::kInfo,
                  "%s: device %d SM limit %u -> %u percent (0 or 100: none), held from the next "
                  "launch",
                  kLimitsFilePath, i, was, *sm);
      }
    }
  }
  // An oversubscribing process's host budget: the file's when it sets one, else as at start
  // (the environment's, or the device limits added up, now the followed ones).
  if (rt.config.oversubscribe) {
    std::array<uint64_t, kMaxDevices> own{};
    const size_t n = size_t(std::clamp(count, 0, int(kMaxDevices)));
    for (size_t i = 0; i < n; ++i) own[i] = rt.own_memory_limit[i].load(std::memory_order_relaxed);
    const uint64_t budget = HostBudgetOf(
        limits.host_limit ? limits.host_limit : rt.config.host_limit, std::span(own).first(n));
    const uint64_t was = w.host_budget.value_or(HostBudget(rt.config, count));
    if (budget != was) {
      reg->SetOwnHostLimit(budget);
      g_log.Log(LogLevel::kInfo,
                "%s: host budget %llu -> %llu bytes (%s), held with the region's from the next "
                "allocation past the device budget",
                kLimitsFilePath, static_cast<unsigned long long>(was),
                static_cast<unsigned long long>(budget),
                limits::KeyName(limits::Key::kOversubscribeHostLimit));
    }
    w.host_budget = budget;
  }
}

// One round of the NVML cross-check over the devices with a memory limit that this process
// sees and leads.
void CrossCheck(Runtime& rt, region::Region* reg, WatchState& w) {
  const int count = reg->device_count();
  bool any = false;
  for (int i = 0; i < count; ++i) any |= reg->EffectiveMemoryLimit(i) != 0;
  if (!any || !rt.NvmlReady()) return;
  const NvmlDriver* nvml = rt.NvmlIfLoaded();
  if (nvml == nullptr || nvml->nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) return;
  const auto list = nvml->nvml.nvmlDeviceGetComputeRunningProcesses_v3;
  bool have_slots = false;
  for (int i = 0; i < count; ++i) {
    if (reg->EffectiveMemoryLimit(i) == 0) continue;
    const int ordinal = OrdinalOf(rt, i);
    nvmlDevice_t h = ordinal >= 0 ? NvmlHandleOf(rt, ordinal) : nullptr;
    if (h == nullptr) continue;
    if (!w.leading[size_t(i)]) {
      if (!reg->TryLeadCrossCheck(i)) continue;
      w.leading[size_t(i)] = true;
    }
    if (WholeList(&w.listed, [&](unsigned* n, nvmlProcessInfo_t* a) { return list(h, n, a); }) !=
        NVML_SUCCESS) {
      continue;  // asked again next period
    }
    w.uses.clear();
    for (const nvmlProcessInfo_t& p : w.listed) {
      if (p.usedGpuMemory != static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) {
        w.uses.push_back({pid_t(p.pid), p.usedGpuMemory});
      }
    }
    if (!have_slots) {
      w.slots = reg->Slots();
      have_slots = true;
    }
    const region::DeviceCrossCheck check =
        region::CrossCheckDevice(i, w.slots, w.uses, rt.config.unaccounted_tolerance);
    const bool suspend = rt.config.unaccounted_policy == UnaccountedPolicy::kSuspend;
    for (const region::AccountingGap& g : reg->RecordCrossCheck(check, MonotonicNs())) {
      g_log.Always(LogLevel::kError,
                   "device %d: host pid %d (pid %d) holds %llu MiB as NVML counts it, but its "
                   "books in the shared region %s say %llu MiB: %llu MiB were allocated past "
                   "libvgpu (edited counters, a driver loaded with dlmopen, a static helper or "
                   "raw ioctls); recorded in the region%s%s%s",
                   i, int(g.host_pid), int(g.pid),
                   static_cast<unsigned long long>(g.nvml_bytes) / kMiB, reg->path().c_str(),
                   static_cast<unsigned long long>(g.accounted_bytes) / kMiB,
                   static_cast<unsigned long long>(g.gap_bytes) / kMiB,
                   suspend ? "; the container's allocations on the device are refused while it "
                             "lasts ("
                           : "",
                   suspend ? limits::KeyName(limits::Key::kUnaccountedPolicy) : "",
                   suspend ? "=suspend)" : "");
    }
  }
}

// Waits up to `ns` for inotify to report a change of the region's file or of the limits file
// (each drained), or sleeps when there is no watch. True when the limits file changed.
bool WaitForChange(const UniqueFd& events, const UniqueFd& limits_events, int64_t ns) {
  if (!events.valid() && !limits_events.valid()) {
    SleepForNs(ns);
    return false;
  }
  pollfd p[2] = {{events.get(), POLLIN, 0}, {limits_events.get(), POLLIN, 0}};
  const int ms = int((ns + 999'999) / 1'000'000);
  if (poll(p, 2, ms) <= 0) return false;
  alignas(inotify_event) char buf[4096];
  for (const UniqueFd* fd : {&events, &limits_events}) {
    if (!fd->valid()) continue;
    while (read(fd->get(), buf, sizeof(buf)) > 0) {
    }
  }
  return (p[1].revents & POLLIN) != 0;
}

// The watcher thread's body; `arg` is the process's state.
void* WatcherMain(void* arg) {
  Runtime& rt = *static_cast<Runtime*>(arg);
  region::Region* reg = rt.region_fast.load(std::memory_order_acquire);
  if (reg == nullptr) return nullptr;
  WatchState w;
  w.limits_state = rt.configured_limits_state;
  SeeJoinedPolicy(rt, w);
  UniqueFd events;
  if (!reg->anonymous()) {
    events = UniqueFd(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (events.valid() &&
        inotify_add_watch(events.get(), reg->path().c_str(), kFileEvents | IN_DONT_FOLLOW) < 0) {
      events.Reset();  // checked once a period instead
    }
  }
  // The limits file is watched by its inode: a container's bind mount of it changes only in
  // place (limits/limits_file.h, UpdateLimitsFileInPlace). Without a watch it is read once a
  // period.
  UniqueFd limits_events(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (limits_events.valid() &&
      inotify_add_watch(limits_events.get(), kLimitsFilePath, kLimitsEvents | IN_DONT_FOLLOW) < 0) {
    limits_events.Reset();
  }
  // A change made between this process's configuration and the watch is followed now.
  FollowLimitsFile(rt, reg, w);
  int64_t next = MonotonicNs() + region::kCrossCheckPeriodNs;
  for (;;) {
    if (!rt.region_replaced.load(std::memory_order_relaxed)) {
      if (Status s = reg->VerifyFile(); !s.ok()) {
        Replaced(rt, s);
        events.Reset();  // nothing more to learn from it
      } else if (Status own = reg->VerifyOwnSlot(); !own.ok()) {
        Replaced(rt, own);
      }
    }
    const int64_t now = MonotonicNs();
    if (now >= next) {
      FollowLimitsFile(rt, reg, w);
      CheckPolicy(rt, reg, w);
      CrossCheck(rt, reg, w);
      next = MonotonicNs() + region::kCrossCheckPeriodNs;
      continue;
    }
    if (WaitForChange(events, limits_events, next - now)) FollowLimitsFile(rt, reg, w);
  }
  return nullptr;
}

}  // namespace

void StartWatcherForAdmission(Runtime& rt) {
  if (!rt.owns_process || rt.watcher_started.load(std::memory_order_acquire)) return;
  // What the thread would have seen had it run since the join: the region's file replaced
  // in the meantime is refused from this very admission on.
  if (region::Region* reg = rt.region_fast.load(std::memory_order_acquire);
      reg != nullptr && !rt.region_replaced.load(std::memory_order_relaxed)) {
    if (Status s = reg->VerifyFile(); !s.ok()) {
      Replaced(rt, s);
    } else if (Status own = reg->VerifyOwnSlot(); !own.ok()) {
      Replaced(rt, own);
    }
    // The join swept nothing and read no start time (Region::Register): what dead
    // processes still hold goes back before this process's first admission counts on the
    // budget, and the slot gets its start time.
    reg->SweepDeadIfDue();
    reg->RecordStartTime();
  }
  StartWatcher(rt);
}

void StartWatcher(Runtime& rt) {
  if (!rt.owns_process) return;
  if (!StartThreadOnce(rt.watcher_started, WatcherMain, &rt)) {
    g_log.Always(LogLevel::kError,
                 "cannot start the watcher thread: a replaced region file and memory allocated "
                 "past libvgpu go undetected in this process (its allocations are still held "
                 "to the limit)");
  }
}

bool WatcherRefuses(Runtime& rt, int index) {
  if (__builtin_expect(rt.region_replaced.load(std::memory_order_relaxed), 0)) return true;
  if (rt.config.unaccounted_policy != UnaccountedPolicy::kSuspend) return false;
  region::Region* reg = ViewRegion(rt);
  if (reg == nullptr || !reg->UnaccountedInForce(index)) {
    if (rt.unaccounted_refusal_logged.load(std::memory_order_relaxed)) {
      rt.unaccounted_refusal_logged.store(false, std::memory_order_relaxed);
    }
    return false;
  }
  if (!rt.unaccounted_refusal_logged.exchange(true, std::memory_order_relaxed)) {
    const region::Region::CrossCheckState c = reg->CrossCheck(index);
    g_log.Always(LogLevel::kError,
                 "device %d: an allocation is refused (CUDA_ERROR_OUT_OF_MEMORY) while NVML shows "
                 "%llu MiB held past the container's books (host pid %d has the most); %s=%s",
                 index, static_cast<unsigned long long>(c.unaccounted_bytes) / kMiB,
                 int(c.host_pid), limits::KeyName(limits::Key::kUnaccountedPolicy),
                 limits::UnaccountedPolicyName(limits::UnaccountedPolicy::kSuspend).data());
  }
  return true;
}

}  // namespace hami::vgpu
