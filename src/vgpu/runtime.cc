#include "vgpu/runtime.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "common/check.h"
#include "common/proc.h"
#include "common/visible_devices.h"
#include "limits/vocabulary.h"
#include "vgpu/identity.h"
#include "vgpu/spill.h"
#include "vgpu/watch.h"

namespace hami::vgpu {

RawLogger g_log("hami-vgpu", LogLevel::kWarn);
constinit std::atomic<Runtime*> g_runtime{nullptr};

Runtime& MakeRuntime() {
  static Runtime* const rt = [] {
    auto* r = new Runtime();
    g_runtime.store(r, std::memory_order_release);
    return r;
  }();
  return *rt;
}

namespace {

// In a fork child: the process is new. Its parent's registration, allocations and contexts
// are not its own; a mutex may have been held by a thread that does not exist here. Only this
// thread runs, so nothing below needs a lock.
void ChildAfterFork() NO_THREAD_SAFETY_ANALYSIS {
  Runtime& rt = Rt();
  rt.config_mu.ResetInForkChild();
  rt.devices_mu.ResetInForkChild();
  rt.module_mu.ResetInForkChild();
  rt.pool_mu.ResetInForkChild();
  rt.graph_mu.ResetInForkChild();
  rt.identity_mu.ResetInForkChild();
  rt.graph_kernels_mu.ResetInForkChild();
  rt.ledger.ResetInForkChild();
  rt.allocation_calls.ResetInForkChild();
  rt.spills.ResetInForkChild();
  rt.imports.ResetInForkChild();
  rt.contexts_epoch.fetch_add(1);
  rt.pools.clear();
  rt.any_pools.store(false);
  rt.graph_charged = {};
  rt.graph_execs.clear();
  rt.any_graph_memory.store(false);
  if (rt.region) {
    Status s = rt.region->ReopenAfterFork();
    if (!s.ok()) {
      // The parent's budget cannot be shared: refused, never a fresh one (Join).
      g_log.Always(LogLevel::kError, "after fork: %s", s.error().c_str());
      rt.region_replaced.store(true);
      rt.region_fast.store(nullptr);
      rt.region.reset();
    }
  }
  // Registers again at its next cuInit (CUDA does not survive fork).
  rt.join_state.store(uint32_t(JoinState::kNotYet));
  rt.refusal_logged.store(false);
  // The child has a PID of its own.
  if (rt.broker_query_started) {  // the parent's connection: the parent reads its answer
    broker::AbandonQuery(&rt.broker_query);
    rt.broker_query_started = false;
  }
  rt.identity_state.store(int(IdentityState::kNotStarted));
  rt.identity_retry_ns.store(0);
  rt.identity_backoff_ns = 0;
  rt.identity_logged = false;
  rt.cuda_initialized.store(false);
  // Threads do not survive fork: the child starts its own controller when it needs one.
  rt.controller_started.store(false);
  rt.watcher_started.store(false);
  rt.limits_generation.store(~uint64_t(0));
}

// NVML's devices as (UUID, handle), read with no lock held. Empty when NVML cannot say.
struct NvmlDeviceList {
  std::vector<std::string> uuids;
  std::vector<nvmlDevice_t> handles;
};

std::optional<NvmlDeviceList> ReadNvmlDevices(Runtime& rt) {
  const NvmlDriver* n = rt.NvmlIfLoaded();
  if (n == nullptr || n->nvml.nvmlDeviceGetCount_v2 == nullptr ||
      n->nvml.nvmlDeviceGetHandleByIndex_v2 == nullptr || n->aux.nvmlDeviceGetUUID == nullptr) {
    return std::nullopt;
  }
  unsigned count = 0;
  if (n->nvml.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) return std::nullopt;
  NvmlDeviceList list;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t h = nullptr;
    char uuid[96] = {};
    if (n->nvml.nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS ||
        n->aux.nvmlDeviceGetUUID(h, uuid, sizeof(uuid)) != NVML_SUCCESS) {
      uuid[0] = '\0';
      h = nullptr;
    }
    list.uuids.push_back(uuid);
    list.handles.push_back(h);
  }
  return list;
}

// Maps each CUDA-visible device to its NVML index by UUID.
void MapToNvmlLocked(Runtime& rt, const NvmlDeviceList& list) REQUIRES(rt.devices_mu) {
  rt.nvml_mapped_in = ForkCount();
  for (VisibleDevice& d : rt.devices) {
    d.nvml_index = -1;
    d.nvml = nullptr;
    for (size_t i = 0; i < list.uuids.size(); ++i) {
      if (list.handles[i] != nullptr && d.uuid == list.uuids[i]) {
        d.nvml_index = int(i);
        d.nvml = list.handles[i];
      }
    }
  }
}

// With NVML but no CUDA initialization yet: which devices CUDA would show, from
// CUDA_VISIBLE_DEVICES over NVML's list.
void LearnDevicesFromNvmlLocked(Runtime& rt, const NvmlDeviceList& list) REQUIRES(rt.devices_mu) {
  if (rt.devices_from_cuda || !rt.devices.empty()) return;
  const auto& cvd = rt.config.visible_devices;
  VisibleDevices v =
      ParseVisibleDevices(cvd ? std::optional<std::string_view>(*cvd) : std::nullopt, list.uuids);
  // Said once: with no device visible this runs again at every NVML call.
  if (v.stopped_at && !rt.warned_visible) {
    rt.warned_visible = true;
    g_log.Log(LogLevel::kWarn,
              "%s='%s': entry '%s' names no device (or repeats one); the devices after it are "
              "not visible",
              limits::KeyName(limits::Key::kVisibleDevices), cvd->c_str(), v.stopped_at->c_str());
  }
  for (int p : v.physical) rt.devices.push_back({list.uuids[size_t(p)], -1, nullptr});
  MapToNvmlLocked(rt, list);
}

// Which region device each CUDA ordinal is: by UUID, so a process that orders or narrows
// CUDA_VISIBLE_DEVICES differently from the container still charges the right device. A
// region stamped without UUIDs is taken to be in this process's order.
void MapToRegionLocked(Runtime& rt, region::Region& reg) REQUIRES(rt.devices_mu) {
  region::PolicyView policy = reg.Policy();
  bool have_uuids = false;
  for (int i = 0; i < policy.device_count; ++i) have_uuids |= !policy.uuid[size_t(i)].empty();
  for (size_t o = 0; o < rt.devices.size() && o < size_t(kMaxDevices); ++o) {
    int index = -1;
    if (!have_uuids) {
      index = int(o) < policy.device_count ? int(o) : -1;
    } else {
      for (int i = 0; i < policy.device_count; ++i) {
        if (policy.uuid[size_t(i)] == rt.devices[o].uuid) index = i;
      }
    }
    if (index < 0) {
      std::string held;
      for (int i = 0; i < policy.device_count; ++i) {
        held +=
            (i == 0 ? "" : ", ") + (policy.uuid[size_t(i)].empty() ? "device " + std::to_string(i)
                                                                   : policy.uuid[size_t(i)]);
      }
      g_log.Always(LogLevel::kError,
                   "CUDA device %zu (%s) is not one of the shared region %s's devices (%s); "
                   "every allocation on it is refused (CUDA_ERROR_OUT_OF_MEMORY)",
                   o, rt.devices[o].uuid.c_str(), reg.path().c_str(),
                   held.empty() ? "none" : held.c_str());
    }
    rt.region_index[o].store(index, std::memory_order_relaxed);
  }
  // The limits this process was given hold with the region's: the stricter is enforced. A
  // per-device limit names a device by the container's ordinal, which is the region's order
  // (its creator's), whatever order this process's CUDA_VISIBLE_DEVICES gives.
  for (int i = 0; i < policy.device_count && i < kMaxDevices; ++i) {
    reg.SetOwnMemoryLimit(i, rt.own_memory_limit[size_t(i)].load(std::memory_order_relaxed));
    reg.SetOwnSmLimit(i, rt.own_sm_limit[size_t(i)].load(std::memory_order_relaxed));
  }
  reg.SetOwnHostLimit(HostBudget(rt.config, policy.device_count));
}

// Whether the device table holds NVML handles of this process (not a fork parent's).
bool NvmlMappedLocked(const Runtime& rt) REQUIRES(rt.devices_mu) {
  return !rt.devices.empty() && rt.devices.front().nvml != nullptr &&
         rt.nvml_mapped_in == ForkCount();
}

// Asks NVML for its devices (with no lock held) and maps the table to them.
void MapNvmlDevices(Runtime& rt) EXCLUDES(rt.devices_mu) {
  std::optional<NvmlDeviceList> list = ReadNvmlDevices(rt);
  if (!list) return;
  MutexLock l(&rt.devices_mu);
  if (rt.devices.empty()) {
    LearnDevicesFromNvmlLocked(rt, *list);
  } else {
    MapToNvmlLocked(rt, *list);
  }
}

// The visible devices with NVML handles current for this process: NVML is asked (with no
// lock held) only when the table is empty or was mapped by another process (a fork parent).
void RefreshNvmlDevices(Runtime& rt) EXCLUDES(rt.devices_mu) {
  {
    MutexLock l(&rt.devices_mu);
    if (NvmlMappedLocked(rt)) return;
  }
  MapNvmlDevices(rt);
}

// Holds devices_mu over a device table current for this process: one lock when it already
// is (the views' common case), else NVML is asked first with the lock let go.
class SCOPED_CAPABILITY CurrentNvmlDevices {
 public:
  explicit CurrentNvmlDevices(Runtime& rt) ACQUIRE(rt.devices_mu) : rt_(rt) {
    rt.devices_mu.Lock();
    if (NvmlMappedLocked(rt)) return;
    rt.devices_mu.Unlock();
    MapNvmlDevices(rt);
    rt.devices_mu.Lock();
  }
  ~CurrentNvmlDevices() RELEASE() { rt_.devices_mu.Unlock(); }
  CurrentNvmlDevices(const CurrentNvmlDevices&) = delete;
  CurrentNvmlDevices& operator=(const CurrentNvmlDevices&) = delete;

 private:
  Runtime& rt_;
};

}  // namespace

void EnsureConfigured(Runtime& rt) {
  if (rt.configured_fast.load(std::memory_order_acquire)) return;
  MutexLock l(&rt.config_mu);
  if (rt.configured) return;
  rt.configured = true;
  LimitsFile file = ReadLimitsFile(kLimitsFilePath);
  rt.configured_limits_state = LimitsFileState(file);
  Resolution res = ResolveConfig(file, [](const char* name) { return std::getenv(name); });
  rt.config = std::move(res.config);
  for (size_t i = 0; i < size_t(kMaxDevices); ++i) {
    rt.own_memory_limit[i].store(rt.config.memory_limit[i], std::memory_order_relaxed);
    rt.own_sm_limit[i].store(rt.config.sm_limit[i], std::memory_order_relaxed);
  }
  g_log.set_level(LogLevel(rt.config.log_level));
  SetCheckLogger(&g_log);  // HAMI_BUG lines carry this library's tag and level
  // A limit held closed is said whatever the log level: the process runs, but refused.
  for (const std::string& c : res.closed) g_log.Always(LogLevel::kError, "%s", c.c_str());
  for (const std::string& p : res.problems) g_log.Log(LogLevel::kError, "%s", p.c_str());
  for (const std::string& n : res.notes) g_log.Log(LogLevel::kInfo, "%s", n.c_str());
  // The driver reads CUDA_VISIBLE_DEVICES from the environment when it starts (after this):
  // a value from the limits file must reach it there too, or a login that lost the variable
  // would see every device, and per-device limits would land on the wrong ones.
  for (const Setting& s : rt.config.settings) {
    if (s.name == limits::Name(limits::Key::kVisibleDevices) && s.source == Source::kLimitsFile) {
      setenv(limits::KeyName(limits::Key::kVisibleDevices), s.value.c_str(), 1);
    }
  }
  static std::once_flag atfork;
  std::call_once(atfork, [] {
    ForkCount();  // its counter first: ChildAfterFork must see the child's count
    pthread_atfork(nullptr, nullptr, ChildAfterFork);
  });
  rt.configured_fast.store(true, std::memory_order_release);
}

void LearnDevicesFromCuda(Runtime& rt) {
  const CudaDriver* d = rt.CudaIfLoaded();
  if (d == nullptr || d->aux.cuDeviceGetCount == nullptr || d->aux.cuDeviceGet == nullptr) return;
  {
    MutexLock l(&rt.devices_mu);
    if (rt.devices_from_cuda) return;
  }
  // Asked with no lock held.
  int count = 0;
  if (d->aux.cuDeviceGetCount(&count) != CUDA_SUCCESS) return;
  std::vector<VisibleDevice> devices;
  devices.reserve(size_t(std::clamp(count, 0, kMaxDevices)));
  for (int i = 0; i < count && i < kMaxDevices; ++i) {
    CUdevice dev;
    CUuuid uuid{};
    if (d->aux.cuDeviceGet(&dev, i) != CUDA_SUCCESS) return;
    CUresult r = d->aux.cuDeviceGetUuid_v2 != nullptr ? d->aux.cuDeviceGetUuid_v2(&uuid, dev)
                 : d->aux.cuDeviceGetUuid != nullptr  ? d->aux.cuDeviceGetUuid(&uuid, dev)
                                                      : CUDA_ERROR_NOT_SUPPORTED;
    if (r != CUDA_SUCCESS) return;
    devices.push_back({GpuUuidText(uuid.bytes), -1, nullptr});
  }
  std::optional<NvmlDeviceList> list = ReadNvmlDevices(rt);
  MutexLock l(&rt.devices_mu);
  if (rt.devices_from_cuda) return;
  rt.devices = std::move(devices);
  rt.devices_from_cuda = true;
  if (list) MapToNvmlLocked(rt, *list);
  if (region::Region* reg = rt.region_fast.load(std::memory_order_acquire)) {
    MapToRegionLocked(rt, *reg);
  }
}

int NvmlVisibleCount(Runtime& rt) {
  CurrentNvmlDevices l(rt);
  return int(rt.devices.size());
}

int NvmlOrdinalOf(Runtime& rt, nvmlDevice_t h) {
  CurrentNvmlDevices l(rt);
  for (size_t i = 0; i < rt.devices.size(); ++i) {
    if (rt.devices[i].nvml == h) return int(i);
  }
  return -1;
}

int NvmlIndexOf(Runtime& rt, int ordinal) {
  CurrentNvmlDevices l(rt);
  return ordinal >= 0 && size_t(ordinal) < rt.devices.size()
             ? rt.devices[size_t(ordinal)].nvml_index
             : -1;
}

nvmlDevice_t NvmlHandleOf(Runtime& rt, int ordinal) {
  CurrentNvmlDevices l(rt);
  return ordinal >= 0 && size_t(ordinal) < rt.devices.size() ? rt.devices[size_t(ordinal)].nvml
                                                             : nullptr;
}

bool StartThreadOnce(std::atomic<bool>& started, void* (*body)(void*), void* arg) {
  bool was = started.load(std::memory_order_acquire);
  if (was || !started.compare_exchange_strong(was, true)) return true;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  // Created with every signal blocked (it inherits this thread's mask, restored after): the
  // application's handlers never run on it.
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  pthread_t thread;
  const bool ok = pthread_create(&thread, &attr, body, arg) == 0;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  pthread_attr_destroy(&attr);
  return ok;
}

int OrdinalOf(Runtime& rt, int index) {
  for (int o = 0; o < kMaxDevices; ++o) {
    if (RegionIndex(rt, o) == index) return o;
  }
  return -1;
}

pid_t OwnHostPid(Runtime& rt) {
  region::Region* reg = ViewRegion(rt);
  int slot = reg != nullptr ? reg->slot() : -1;
  return slot >= 0 ? reg->file().slots[slot].host_pid.load(std::memory_order_relaxed) : 0;
}

namespace {

// The policy this process brings to a region it creates.
region::PolicySpec SpecFor(const Config& c, const std::vector<VisibleDevice>& devices) {
  region::PolicySpec spec;
  spec.device_count = int(std::min<size_t>(devices.size(), kMaxDevices));
  for (int d = 0; d < spec.device_count; ++d) {
    spec.memory_limit[size_t(d)] = c.memory_limit[size_t(d)];
    spec.sm_limit[size_t(d)] = c.sm_limit[size_t(d)];
    spec.uuid[size_t(d)] = devices[size_t(d)].uuid;
  }
  spec.priority = c.priority;
  spec.core_policy = c.core_policy;
  spec.oversubscribe = c.oversubscribe;
  spec.host_limit = HostBudget(c, spec.device_count);
  return spec;
}

// Whether the container named its region (CUDA_DEVICE_MEMORY_SHARED_CACHE in the limits file
// or the environment), rather than leaving the default.
bool RegionConfigured(const Config& c) {
  return std::any_of(c.settings.begin(), c.settings.end(), [](const Setting& s) {
    return s.name == limits::Name(limits::Key::kSharedCache);
  });
}

// Opens the container's region. A configured region that cannot be used (a symlink, another
// kind of file, bad magic, truncated, another version, a full file system) is refused: its
// processes share one budget, and a fresh budget of this process's own would add to it.
// Only when none was configured and the default cannot be had (a read-only /tmp) is this
// process held to its limits alone, in a private region in memory. Null: neither; every
// accounted allocation is then refused.
std::unique_ptr<region::Region> OpenRegion(const Config& c, const region::PolicySpec& spec) {
  std::vector<region::PolicyDifference> diffs;
  auto opened = region::Region::Open(c.shared_cache, &spec, region::Create::kIfMissing, &diffs);
  if (!opened.ok() && RegionConfigured(c)) {
    g_log.Always(LogLevel::kError,
                 "%s; the container's shared region cannot be used, so every allocation this "
                 "process makes on an accounted device is refused (CUDA_ERROR_OUT_OF_MEMORY)",
                 opened.error().c_str());
    return nullptr;
  }
  if (!opened.ok()) {
    // Limits must not silently turn off: hold this process to them on its own.
    g_log.Log(LogLevel::kError,
              "%s; no shared region was configured (%s) and the default cannot be used, so "
              "this process's limits are enforced for it alone, in a private region",
              opened.error().c_str(), limits::KeyName(limits::Key::kSharedCache));
    opened = region::Region::CreatePrivate(spec);
    if (!opened.ok()) {
      g_log.Always(LogLevel::kError,
                   "cannot make a private region either: %s; every allocation this process "
                   "makes on an accounted device is refused (CUDA_ERROR_OUT_OF_MEMORY)",
                   opened.error().c_str());
      return nullptr;
    }
  }
  for (const region::PolicyDifference& d : diffs) {
    const bool limit = d.field.starts_with("memory_limit") || d.field.starts_with("sm_limit") ||
                       d.field == "host_limit";
    g_log.Log(
        LogLevel::kWarn, "shared region %s: %s is %s there but %s here; %s", c.shared_cache.c_str(),
        d.field.c_str(), d.region.c_str(), d.mine.c_str(),
        limit ? "this process holds to the stricter of the two" : "the region's value stands");
  }
  return std::move(opened).value();
}

// The joining thread's work; returns the state to publish.
JoinState Join(Runtime& rt) {
  if (rt.region_replaced.load()) {
    g_log.Always(LogLevel::kError,
                 "the shared region this process's parent joined is no longer the file at its "
                 "path; every allocation this process makes on an accounted device is refused "
                 "(CUDA_ERROR_OUT_OF_MEMORY)");
    return JoinState::kRefused;
  }
  std::vector<VisibleDevice> devices;
  {
    MutexLock l(&rt.devices_mu);
    devices = rt.devices;
  }
  if (devices.empty() && rt.region == nullptr) {
    g_log.Always(LogLevel::kError,
                 "no device is visible to this process, so no shared region can be joined; "
                 "every allocation is refused");
    return JoinState::kRefused;
  }
  if (rt.region == nullptr) {
    std::unique_ptr<region::Region> opened = OpenRegion(rt.config, SpecFor(rt.config, devices));
    if (opened == nullptr) return JoinState::kRefused;
    for (int d = 0; d < kMaxDevices; ++d) {
      rt.joined_memory_limit[size_t(d)] = opened->MemoryLimit(d);
      rt.joined_sm_limit[size_t(d)] = opened->SmLimit(d);
    }
    rt.region = std::move(opened);
    // A normal exit gives the slot back (a killed process is reclaimed by the others).
    static std::once_flag at_exit;
    if (rt.owns_process) {
      std::call_once(at_exit, [] {
        atexit([] {
          if (region::Region* r = Rt().region_fast.load(std::memory_order_acquire)) r->Unregister();
        });
      });
    }
  }
  {
    MutexLock l(&rt.devices_mu);
    MapToRegionLocked(rt, *rt.region);
  }
  rt.region_fast.store(rt.region.get(), std::memory_order_release);
  if (rt.region->slot() >= 0) return JoinState::kJoined;
  auto slot = rt.region->Register();
  if (!slot.ok()) {
    g_log.Always(LogLevel::kError,
                 "%s; this process could not register in the shared region %s, so every "
                 "allocation it makes on an accounted device is refused "
                 "(CUDA_ERROR_OUT_OF_MEMORY)",
                 slot.error().c_str(), rt.region->path().c_str());
    return JoinState::kRefused;
  }
  return JoinState::kJoined;
}

}  // namespace

JoinState JoinRegion(Runtime& rt) {
  EnsureConfigured(rt);
  uint32_t state = rt.join_state.load(std::memory_order_acquire);
  for (;;) {
    if (state == uint32_t(JoinState::kJoined) || state == uint32_t(JoinState::kRefused)) {
      return JoinState(state);
    }
    if (state == uint32_t(JoinState::kNotYet)) {
      if (rt.join_state.compare_exchange_weak(state, uint32_t(JoinState::kJoining),
                                              std::memory_order_acq_rel)) {
        break;  // this thread joins
      }
      continue;
    }
    if (HAMI_BUG(state != uint32_t(JoinState::kJoining), "join state holds no JoinState")) {
      return JoinState::kRefused;  // fail closed: refuse rather than wait on a value nobody sets
    }
    rt.join_state.wait(state, std::memory_order_acquire);  // another thread is joining
    state = rt.join_state.load(std::memory_order_acquire);
  }
  if (rt.NvmlIfLoaded() != nullptr) RefreshNvmlDevices(rt);
  const JoinState reached = Join(rt);
  rt.join_state.store(uint32_t(reached), std::memory_order_release);
  rt.join_state.notify_all();
  // Registered now: learn this process's host PID (the fast tiers here, the probe once CUDA
  // is initialized).
  if (reached == JoinState::kJoined) {
    ResolveIdentity(rt, rt.cuda_initialized.load(std::memory_order_acquire));
    // The watcher starts at the first admission (watch.h).
  }
  return reached;
}

namespace {

// The calling thread's last answer: its current context and that context's device, valid
// while no context has ended since (contexts_epoch).
struct ThreadContext {
  CUcontext ctx;
  int device;
  uint64_t epoch;
};
__attribute__((tls_model("initial-exec"))) constinit thread_local ThreadContext t_context{nullptr,
                                                                                          -1, 0};

}  // namespace

CUresult CurrentDevice(Runtime& rt, int* ordinal, CUcontext* ctx) {
  const CudaDriver* d = rt.CudaIfLoaded();
  if (d == nullptr || d->aux.cuCtxGetCurrent == nullptr || d->aux.cuCtxGetDevice == nullptr) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUcontext current = nullptr;
  if (CUresult r = d->aux.cuCtxGetCurrent(&current); r != CUDA_SUCCESS) return r;
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t epoch = rt.contexts_epoch.load(std::memory_order_acquire);
  ThreadContext& t = t_context;
  if (t.ctx != current || t.epoch != epoch) {
    CUdevice dev;
    if (CUresult r = d->aux.cuCtxGetDevice(&dev); r != CUDA_SUCCESS) return r;
    t = ThreadContext{current, int(dev), epoch};
  }
  *ordinal = t.device;
  if (ctx != nullptr) *ctx = current;
  return CUDA_SUCCESS;
}

bool LimitedView(Runtime& rt, int ordinal, uint64_t physical_total, uint64_t physical_free,
                 uint64_t* total, uint64_t* free) {
  region::Region* reg = ViewRegion(rt);
  int index = RegionIndex(rt, ordinal);
  if (reg == nullptr || index < 0) return false;
  uint64_t limit = reg->EffectiveMemoryLimit(index);
  if (limit == 0) return false;
  reg->SweepDeadIfDue();
  uint64_t used = reg->UsedBytes(index);
  *total = std::min(limit, physical_total);
  *free = std::min(physical_free, *total > used ? *total - used : 0);
  return true;
}

}  // namespace hami::vgpu
