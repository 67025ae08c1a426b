#include "vgpu/limiter.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/futex.h"
#include "vgpu/accounting.h"

namespace hami::vgpu {
namespace {

using region::LimiterMode;
using region::layout::kMilliUnitsPerWave;
using region::layout::LimiterDevice;

// Before the first measurement a milli-unit is taken to cost this much device time: a
// 100 us wave, longer than most, so that a new container starts under its limit.
constexpr double kInitialNsPerMilliUnit = 100.0;

struct DeviceShape {
  uint32_t sms = 0;
  uint32_t threads_per_sm = 0;
};

DeviceShape ShapeOf(int ordinal) {
  Runtime& rt = Rt();
  if (ordinal < 0 || ordinal >= kMaxDevices) return {};
  uint64_t packed = rt.device_shape[size_t(ordinal)].load(std::memory_order_relaxed);
  if (packed == 0) {
    int sms = 0, threads = 0;
    const CudaDriver* d = CudaIfLoaded();
    if (d != nullptr && d->aux.cuDeviceGetAttribute != nullptr) {
      const CudaDriver& drv = *d;
      drv.aux.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal);
      drv.aux.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                   ordinal);
    }
    packed = (uint64_t(std::max(sms, 1)) << 32) | uint32_t(std::max(threads, 32));
    rt.device_shape[size_t(ordinal)].store(packed, std::memory_order_relaxed);
  }
  return {uint32_t(packed >> 32), uint32_t(packed)};
}

uint64_t InitialRate(uint32_t limit_percent) {
  return uint64_t(double(limit_percent) / 100.0 * 1e9 / kInitialNsPerMilliUnit);
}

// Adds what the rate has earned since the latest refill, up to kBurstNs of it.
void Refill(LimiterDevice& lim, int64_t now) {
  int64_t last = lim.refill_ns.load(std::memory_order_relaxed);
  if (now <= last || !lim.refill_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    return;
  }
  const uint64_t rate = lim.rate.load(std::memory_order_relaxed);
  const int64_t elapsed = std::min<int64_t>(now - last, 10'000'000'000);
  const int64_t earned = int64_t(double(elapsed) * double(rate) / 1e9);
  const int64_t cap = int64_t(double(rate) * double(kBurstNs) / 1e9);
  int64_t t = lim.tokens.load(std::memory_order_relaxed);
  for (;;) {
    if (t >= cap) return;
    const int64_t next = std::min(t + earned, cap);
    if (lim.tokens.compare_exchange_weak(t, next, std::memory_order_relaxed)) return;
  }
}

// ---- graph kernels ----

using KernelShape = std::pair<uint64_t, uint64_t>;  // blocks, threads per block

void AddKernels(CUgraph graph, std::vector<KernelShape>* out) {
  static const CudaAux kNone{};
  const CudaDriver* d = CudaIfLoaded();
  const CudaAux& a = d != nullptr ? d->aux : kNone;
  ForEachGraphNode(graph, [&](CUgraphNode node, CUgraphNodeType type) {
    if (type != CU_GRAPH_NODE_TYPE_KERNEL || a.cuGraphKernelNodeGetParams_v2 == nullptr) return;
    CUDA_KERNEL_NODE_PARAMS p{};
    if (a.cuGraphKernelNodeGetParams_v2(node, &p) == CUDA_SUCCESS) {
      out->emplace_back(uint64_t(p.gridDimX) * p.gridDimY * p.gridDimZ,
                        uint64_t(p.blockDimX) * p.blockDimY * p.blockDimZ);
    }
  });
}

// ---- the controller ----

struct ControllerDevice {
  bool leading = false;
  int64_t prev_ns = 0;
  uint64_t prev_admitted = 0;
  unsigned long long last_seen_us = 0;
  double ns_per_mu = 0;  // 0: not measured yet
  bool warned_open = false;
};

// The CUDA ordinal this process sees region device `index` as, or -1.
int OrdinalOf(int index) {
  for (int o = 0; o < kMaxDevices; ++o) {
    if (RegionIndex(o) == index) return o;
  }
  return -1;
}

// One period of device `index`: measure, estimate, set the rate.
void Control(region::Region* reg, int index, ControllerDevice& c) {
  const NvmlDriver* nvml = NvmlIfLoaded();
  if (nvml == nullptr) return;
  const NvmlDriver& nv = *nvml;
  LimiterDevice& lim = reg->Limiter(index);
  const uint32_t limit = reg->SmLimitInForce(index);
  if (limit == 0) {
    lim.mode.store(uint32_t(LimiterMode::kOff), std::memory_order_relaxed);
    c.ns_per_mu = 0;
    c.prev_ns = 0;
    return;
  }
  const int ordinal = OrdinalOf(index);
  nvmlDevice_t h = ordinal >= 0 ? NvmlHandleOf(ordinal) : nullptr;
  if (h == nullptr) return;
  if (!c.leading) {
    if (!reg->TryLeadLimiter(index)) return;
    c.leading = true;
  }
  const int64_t now = MonotonicNs();
  const uint64_t admitted = lim.admitted.load(std::memory_order_relaxed);
  const unsigned long long now_us = static_cast<unsigned long long>(RealtimeNs() / 1000);
  if (c.prev_ns == 0) {
    c.prev_ns = now;
    c.prev_admitted = admitted;
    c.last_seen_us = now_us;
    lim.controller_pid.store(getpid(), std::memory_order_relaxed);
    return;
  }
  const int64_t period = now - c.prev_ns;
  const uint64_t launched = admitted - c.prev_admitted;

  // The period's SM utilization by process (averaged over each process's samples).
  nvmlProcessUtilizationSample_t samples[256];
  unsigned n = 256;
  nvmlReturn_t r = nv.aux.nvmlDeviceGetProcessUtilization != nullptr
                       ? nv.aux.nvmlDeviceGetProcessUtilization(h, samples, &n, c.last_seen_us)
                       : NVML_ERROR_FUNCTION_NOT_FOUND;
  c.prev_ns = now;
  c.prev_admitted = admitted;
  c.last_seen_us = now_us;
  // Without per-process samples (a driver or mode that has none), the device's utilization
  // stands in, as in open loop.
  double device_rate = -1;
  if (r == NVML_ERROR_NOT_FOUND) {
    n = 0;  // nobody ran
  } else if (r != NVML_SUCCESS) {
    nvmlUtilization_t u{};
    if (nv.aux.nvmlDeviceGetUtilizationRates == nullptr ||
        nv.aux.nvmlDeviceGetUtilizationRates(h, &u) != NVML_SUCCESS) {
      return;
    }
    n = 0;
    device_rate = u.gpu;
  }
  struct PidUse {
    unsigned pid;
    double sum;
    int count;
  };
  std::vector<PidUse> uses;
  for (unsigned i = 0; i < std::min(n, 256u); ++i) {
    auto it = std::find_if(uses.begin(), uses.end(),
                           [&](const PidUse& u) { return u.pid == samples[i].pid; });
    if (it == uses.end()) {
      uses.push_back({samples[i].pid, double(samples[i].smUtil), 1});
    } else {
      it->sum += samples[i].smUtil;
      it->count += 1;
    }
  }
  double device_total = 0, container_total = 0;
  bool closed = true;
  int unknown_pid = 0;
  const region::layout::File& f = reg->file();
  for (const PidUse& u : uses) device_total += u.sum / u.count;
  for (int s = 0; s < region::kMaxSlots; ++s) {
    const region::layout::Slot& slot = f.slots[s];
    if (slot.state.load(std::memory_order_acquire) != uint32_t(region::layout::SlotState::kLive)) {
      continue;
    }
    const pid_t host = slot.host_pid.load(std::memory_order_relaxed);
    if (host == 0) {
      if (slot.launches.load(std::memory_order_relaxed) != 0) {
        closed = false;
        unknown_pid = slot.pid;
      }
      continue;
    }
    for (const PidUse& u : uses) {
      if (u.pid == unsigned(host)) {
        container_total += u.sum / u.count;
        reg->RecordSlotSmUtil(s, index, uint32_t(u.sum / u.count + 0.5));
      }
    }
  }
  if (device_rate >= 0) {
    closed = false;
    device_total = device_rate;
  }
  const double used = (closed ? container_total : device_total) / 100.0;  // fraction
  if (launched > 0 && used > 0.005 && period > 0) {
    const double sample = used * double(period) / double(launched);
    c.ns_per_mu = c.ns_per_mu == 0 ? sample : 0.5 * c.ns_per_mu + 0.5 * sample;
  }
  if (admitted == 0) return;  // nothing launched on it yet: nothing to say
  const double per_mu = c.ns_per_mu > 0 ? c.ns_per_mu : kInitialNsPerMilliUnit;
  lim.rate.store(uint64_t(double(limit) / 100.0 * 1e9 / per_mu), std::memory_order_relaxed);
  lim.measured.store(uint32_t(used * 10000 + 0.5), std::memory_order_relaxed);
  lim.mode.store(uint32_t(c.ns_per_mu == 0 ? LimiterMode::kStarting
                          : closed         ? LimiterMode::kClosedLoop
                                           : LimiterMode::kOpenLoop),
                 std::memory_order_relaxed);
  lim.updated_ns.store(now, std::memory_order_relaxed);
  lim.controller_pid.store(getpid(), std::memory_order_relaxed);
  reg->RecordDeviceSmUtil(index, uint32_t(used * 100 + 0.5));
  if (!closed && !c.warned_open) {
    c.warned_open = true;
    g_log.Log(LogLevel::kWarn,
              "compute limit on device %d: the host PID of pid %d is unknown, so the whole "
              "device's utilization stands in for the container's (open loop: it can only "
              "limit more)",
              index, unknown_pid);
  } else if (closed) {
    c.warned_open = false;
  }
}

void* ControllerMain(void*) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  ControllerDevice devices[kMaxDevices];
  for (;;) {
    SleepForNs(kPeriodNs);
    Runtime& rt = Rt();
    region::Region* reg = rt.region_fast.load(std::memory_order_acquire);
    if (reg == nullptr || !NvmlReady()) continue;
    const int count = int(std::min<uint32_t>(reg->file().policy.device_count, kMaxDevices));
    for (int i = 0; i < count; ++i) Control(reg, i, devices[i]);
  }
  return nullptr;
}

void EnsureController() {
  Runtime& rt = Rt();
  bool started = rt.controller_started.load(std::memory_order_acquire);
  if (started || !rt.controller_started.compare_exchange_strong(started, true)) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  if (pthread_create(&thread, &attr, ControllerMain, nullptr) != 0) {
    g_log.Log(LogLevel::kWarn,
              "cannot start the compute controller thread; limits hold on the first estimate");
  }
  pthread_attr_destroy(&attr);
}

}  // namespace

int64_t LaunchCost(int ordinal, uint64_t blocks, uint64_t threads) {
  const DeviceShape shape = ShapeOf(ordinal);
  const uint64_t warp_threads = std::max<uint64_t>(32, (threads + 31) / 32 * 32);
  const uint64_t per_sm = std::max<uint64_t>(1, shape.threads_per_sm / warp_threads);
  const uint64_t per_wave = std::max<uint64_t>(1, uint64_t(shape.sms) * per_sm);
  const uint64_t waves = std::max<uint64_t>(1, (blocks + per_wave - 1) / per_wave);
  return int64_t(waves) * kMilliUnitsPerWave;
}

bool AnyLimitSlow(region::Region* reg, uint64_t generation) {
  Runtime& rt = Rt();
  bool any = false;
  for (int i = 0; i < kMaxDevices; ++i) any |= reg->SmLimitInForce(i) != 0;
  rt.any_sm_limit.store(any, std::memory_order_relaxed);
  rt.limits_generation.store(generation, std::memory_order_release);
  if (any) EnsureController();
  return any;
}

void NoteActivity(region::Region* reg, uint32_t launches) {
  reg->RecordActivity(launches, MonotonicNs());
}

void WaitWhileHeld(region::Region* reg, bool launch) {
  for (;;) {
    if (launch) {
      std::atomic<uint32_t>& paused = reg->PausedWord();
      const uint32_t p = paused.load(std::memory_order_acquire);
      if (p != 0) {
        WaitWhileEqual(&paused, p, 100'000'000);
        continue;
      }
    }
    std::atomic<uint32_t>* status = reg->OwnStatusWord();
    if (status == nullptr) return;
    const uint32_t s = status->load(std::memory_order_acquire);
    if (s == uint32_t(region::SlotStatus::kRunning)) return;
    WaitWhileEqual(status, s, 100'000'000);
  }
}

void PaceSlow(region::Region* reg, int index, int64_t cost) {
  EnsureController();
  LimiterDevice& lim = reg->Limiter(index);
  uint64_t expected = 0;
  const uint32_t limit = reg->SmLimitInForce(index);
  lim.rate.compare_exchange_strong(expected, InitialRate(limit), std::memory_order_relaxed);
  const int64_t start = MonotonicNs();
  int64_t now = start;
  Refill(lim, now);
  const uint64_t rate0 = std::max<uint64_t>(1, lim.rate.load(std::memory_order_relaxed));
  const int64_t allowed_debt = int64_t(double(rate0) * double(kDebtNs) / 1e9);
  if (lim.tokens.load(std::memory_order_relaxed) < -allowed_debt) {
    // Owed past the allowance: wait until the whole debt is paid.
    for (;;) {
      const int64_t tokens = lim.tokens.load(std::memory_order_relaxed);
      if (tokens >= 0 || reg->SmLimitInForce(index) == 0) break;
      const uint64_t rate = std::max<uint64_t>(1, lim.rate.load(std::memory_order_relaxed));
      const int64_t need = int64_t(double(-tokens) * 1e9 / double(rate));
      SleepForNs(std::clamp<int64_t>(need, 20'000, kMaxSleepNs));
      if (reg->PausedWord().load(std::memory_order_relaxed) != 0) WaitWhileHeld(reg, true);
      now = MonotonicNs();
      Refill(lim, now);
    }
  }
  lim.admitted.fetch_add(uint64_t(cost), std::memory_order_relaxed);
  if (region::layout::Slot* slot = reg->OwnSlot()) {
    slot->sm_mode.store(lim.mode.load(std::memory_order_relaxed), std::memory_order_relaxed);
    if (now > start) slot->sm_waited_ns.fetch_add(now - start, std::memory_order_relaxed);
  }
  if (now > start) lim.waited_ns.fetch_add(now - start, std::memory_order_relaxed);
}

int64_t GraphLaunchCost(CUgraphExec exec, int ordinal) {
  Runtime& rt = Rt();
  MutexLock l(&rt.graph_kernels_mu);
  auto it = rt.graph_kernels.find(exec);
  if (it == rt.graph_kernels.end()) return 0;
  int64_t cost = 0;
  for (const KernelShape& k : it->second) cost += LaunchCost(ordinal, k.first, k.second);
  return cost;
}

void LearnGraphKernels(CUgraphExec exec, CUgraph graph) {
  std::vector<KernelShape> kernels;
  AddKernels(graph, &kernels);
  Runtime& rt = Rt();
  MutexLock l(&rt.graph_kernels_mu);
  if (kernels.empty()) {
    rt.graph_kernels.erase(exec);
  } else {
    rt.graph_kernels[exec] = std::move(kernels);
  }
}

void ForgetGraphKernels(CUgraphExec exec) {
  Runtime& rt = Rt();
  MutexLock l(&rt.graph_kernels_mu);
  rt.graph_kernels.erase(exec);
}

void PaceGraphLaunch(CUgraphExec exec, CUstream stream) {
  region::Region* reg = Rt().region_fast.load(std::memory_order_acquire);
  if (reg == nullptr) return;
  int ordinal;
  const int index = LimitedDevice(reg, stream, &ordinal);
  if (index < 0) return;
  if (const int64_t cost = GraphLaunchCost(exec, ordinal); cost > 0) ChargeLaunch(reg, index, cost);
}

}  // namespace hami::vgpu
