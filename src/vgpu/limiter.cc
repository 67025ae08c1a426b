#include "vgpu/limiter.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <span>
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

struct DeviceShape {
  uint32_t sms = 0;
  uint32_t threads_per_sm = 0;
};

DeviceShape ShapeOf(Runtime& rt, int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return {};
  uint64_t packed = rt.device_shape[size_t(ordinal)].load(std::memory_order_relaxed);
  if (packed == 0) {
    int sms = 0, threads = 0;
    const CudaDriver* d = rt.CudaIfLoaded();
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

// ---- graph kernels ----

using KernelShape = std::pair<uint64_t, uint64_t>;  // blocks, threads per block

void AddKernels(Runtime& rt, CUgraph graph, std::vector<KernelShape>* out) {
  static const CudaAux kNone{};
  const CudaDriver* d = rt.CudaIfLoaded();
  const CudaAux& a = d != nullptr ? d->aux : kNone;
  ForEachGraphNode(rt, graph, [&](CUgraphNode node, CUgraphNodeType type) {
    if (type != CU_GRAPH_NODE_TYPE_KERNEL || a.cuGraphKernelNodeGetParams_v2 == nullptr) return;
    CUDA_KERNEL_NODE_PARAMS p{};
    if (a.cuGraphKernelNodeGetParams_v2(node, &p) == CUDA_SUCCESS) {
      out->emplace_back(uint64_t(p.gridDimX) * p.gridDimY * p.gridDimZ,
                        uint64_t(p.blockDimX) * p.blockDimY * p.blockDimZ);
    }
  });
}

// ---- the controller ----

constexpr unsigned kMaxSamples = 256;  // NVML samples read per period

struct ControllerDevice {
  bool leading = false;
  int64_t prev_ns = 0;
  uint64_t prev_admitted = 0;
  unsigned long long last_seen_us = 0;
  ControlEstimate estimate;
  bool warned_open = false;
  std::vector<ContainerProcess> processes;  // reused from period to period
  std::vector<double> sm_percent;
};

// One period of device `index`: gather the samples, take the step, publish its decision.
void Control(Runtime& rt, region::Region* reg, int index, ControllerDevice& c) {
  const NvmlDriver* nvml = rt.NvmlIfLoaded();
  if (nvml == nullptr) return;
  const NvmlDriver& nv = *nvml;
  LimiterDevice& lim = reg->Limiter(index);
  const uint32_t limit = reg->ContainerSmLimit(index);
  if (limit == 0) {
    ControlInput off;
    const ControlDecision d = ControlStep(off, &c.estimate);
    lim.mode.store(uint32_t(d.mode), std::memory_order_relaxed);
    c.prev_ns = 0;
    return;
  }
  const int ordinal = OrdinalOf(rt, index);
  nvmlDevice_t h = ordinal >= 0 ? NvmlHandleOf(rt, ordinal) : nullptr;
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
  ControlInput in;
  in.limit_percent = limit;
  in.period_ns = now - c.prev_ns;
  in.launched_mu = admitted - c.prev_admitted;
  in.admitted_mu = admitted;

  // The period's SM utilization by process.
  nvmlProcessUtilizationSample_t raw[kMaxSamples];
  unsigned n = kMaxSamples;
  nvmlReturn_t r = nv.nvml.nvmlDeviceGetProcessUtilization != nullptr
                       ? nv.nvml.nvmlDeviceGetProcessUtilization(h, raw, &n, c.last_seen_us)
                       : NVML_ERROR_FUNCTION_NOT_FOUND;
  c.prev_ns = now;
  c.prev_admitted = admitted;
  c.last_seen_us = now_us;
  // Without per-process samples (a driver or mode that has none), the device's utilization
  // stands in, as in open loop.
  double device_percent = -1;
  if (r == NVML_ERROR_NOT_FOUND) {
    n = 0;  // nobody ran
  } else if (r != NVML_SUCCESS) {
    nvmlUtilization_t u{};
    if (nv.aux.nvmlDeviceGetUtilizationRates == nullptr ||
        nv.aux.nvmlDeviceGetUtilizationRates(h, &u) != NVML_SUCCESS) {
      return;
    }
    n = 0;
    device_percent = u.gpu;
  }
  UtilSample samples[kMaxSamples];
  n = std::min(n, kMaxSamples);
  for (unsigned i = 0; i < n; ++i) samples[i] = {raw[i].pid, raw[i].smUtil};
  c.processes.clear();
  const region::layout::File& f = reg->file();
  for (int s = 0; s < region::kMaxSlots; ++s) {
    const region::layout::Slot& slot = f.slots[s];
    if (slot.state.load(std::memory_order_acquire) != uint32_t(region::layout::SlotState::kLive)) {
      continue;
    }
    c.processes.push_back({s, slot.pid, slot.host_pid.load(std::memory_order_relaxed),
                           slot.launches.load(std::memory_order_relaxed) != 0});
  }
  c.sm_percent.assign(c.processes.size(), -1);
  in.use = MeasurePeriod(std::span(samples, n), c.processes, device_percent, c.sm_percent);
  for (size_t i = 0; i < c.processes.size(); ++i) {
    if (c.sm_percent[i] >= 0) {
      reg->RecordSlotSmUtil(c.processes[i].slot, index, uint32_t(c.sm_percent[i] + 0.5));
    }
  }

  const ControlDecision d = ControlStep(in, &c.estimate);
  if (!d.publish) return;  // nothing launched on it yet: nothing to say
  lim.rate.store(d.rate, std::memory_order_relaxed);
  lim.measured.store(d.measured, std::memory_order_relaxed);
  lim.mode.store(uint32_t(d.mode), std::memory_order_relaxed);
  lim.updated_ns.store(now, std::memory_order_relaxed);
  lim.controller_pid.store(getpid(), std::memory_order_relaxed);
  reg->RecordDeviceSmUtil(index, uint32_t(in.use.used * 100 + 0.5));
  if (!in.use.closed && !c.warned_open) {
    c.warned_open = true;
    g_log.Log(LogLevel::kWarn,
              "compute limit on device %d: the host PID of pid %d is unknown, so the whole "
              "device's utilization stands in for the container's (open loop: it can only "
              "limit more)",
              index, int(in.use.unknown_pid));
  } else if (in.use.closed) {
    c.warned_open = false;
  }
}

// The controller thread's body; `arg` is the process's state.
void* ControllerMain(void* arg) {
  Runtime& rt = *static_cast<Runtime*>(arg);
  ControllerDevice devices[kMaxDevices];
  for (;;) {
    SleepForNs(kPeriodNs);
    region::Region* reg = rt.region_fast.load(std::memory_order_acquire);
    if (reg == nullptr || !rt.NvmlReady()) continue;
    const int count = int(std::min<uint32_t>(reg->file().policy.device_count, kMaxDevices));
    for (int i = 0; i < count; ++i) Control(rt, reg, i, devices[i]);
  }
  return nullptr;
}

void EnsureController(Runtime& rt) {
  if (!rt.owns_process) return;
  if (!StartThreadOnce(rt.controller_started, ControllerMain, &rt)) {
    g_log.Log(LogLevel::kWarn,
              "cannot start the compute controller thread; limits hold on the first estimate");
  }
}

}  // namespace

int64_t WaveCost(uint32_t sms, uint32_t threads_per_sm, uint64_t blocks, uint64_t threads) {
  const uint64_t warp_threads = std::max<uint64_t>(32, (threads + 31) / 32 * 32);
  const uint64_t per_sm = std::max<uint64_t>(1, threads_per_sm / warp_threads);
  const uint64_t per_wave = std::max<uint64_t>(1, uint64_t(sms) * per_sm);
  const uint64_t waves = std::max<uint64_t>(1, (blocks + per_wave - 1) / per_wave);
  return int64_t(waves) * kMilliUnitsPerWave;
}

int64_t LaunchCost(Runtime& rt, int ordinal, uint64_t blocks, uint64_t threads) {
  const DeviceShape shape = ShapeOf(rt, ordinal);
  return WaveCost(shape.sms, shape.threads_per_sm, blocks, threads);
}

PeriodUse MeasurePeriod(std::span<const UtilSample> samples,
                        std::span<const ContainerProcess> processes, double device_percent,
                        std::span<double> sm_percent_out) {
  struct PidUse {
    unsigned pid;
    double sum;
    int count;
  };
  PidUse uses[kMaxSamples];
  size_t distinct = 0;
  for (const UtilSample& s : samples.first(std::min<size_t>(samples.size(), kMaxSamples))) {
    PidUse* u =
        std::find_if(uses, uses + distinct, [&](const PidUse& x) { return x.pid == s.pid; });
    if (u == uses + distinct) {
      uses[distinct++] = {s.pid, double(s.sm_percent), 1};
    } else {
      u->sum += s.sm_percent;
      u->count += 1;
    }
  }
  PeriodUse out;
  double device_total = 0, container_total = 0;
  for (size_t i = 0; i < distinct; ++i) device_total += uses[i].sum / uses[i].count;
  for (size_t p = 0; p < processes.size(); ++p) {
    const ContainerProcess& proc = processes[p];
    if (p < sm_percent_out.size()) sm_percent_out[p] = -1;
    if (proc.host_pid == 0) {
      if (proc.launched) {
        out.closed = false;
        out.unknown_pid = proc.pid;
      }
      continue;
    }
    for (size_t i = 0; i < distinct; ++i) {
      if (uses[i].pid == unsigned(proc.host_pid)) {
        const double average = uses[i].sum / uses[i].count;
        container_total += average;
        if (p < sm_percent_out.size()) sm_percent_out[p] = average;
      }
    }
  }
  if (device_percent >= 0) {
    out.closed = false;
    device_total = device_percent;
  }
  out.used = (out.closed ? container_total : device_total) / 100.0;
  return out;
}

ControlDecision ControlStep(const ControlInput& in, ControlEstimate* estimate) {
  ControlDecision d;
  if (in.limit_percent == 0) {
    estimate->ns_per_mu = 0;
    return d;  // kOff
  }
  const double used = in.use.used;
  if (in.launched_mu > 0 && used > kMinMeasurableUse && in.period_ns > 0) {
    const double sample = used * double(in.period_ns) / double(in.launched_mu);
    estimate->ns_per_mu = estimate->ns_per_mu == 0
                              ? sample
                              : (1 - kEstimateGain) * estimate->ns_per_mu + kEstimateGain * sample;
  }
  if (in.admitted_mu == 0) return d;  // nothing launched on it yet: nothing to say
  const double per_mu = estimate->ns_per_mu > 0 ? estimate->ns_per_mu : kInitialNsPerMilliUnit;
  d.publish = true;
  // At least 1: to the launch path, 0 means no rate yet (and starts over at InitialRate).
  d.rate = std::max<uint64_t>(1, uint64_t(double(in.limit_percent) / 100.0 * 1e9 / per_mu));
  d.measured = uint32_t(used * 10000 + 0.5);
  d.mode = estimate->ns_per_mu == 0 ? LimiterMode::kStarting
           : in.use.closed          ? LimiterMode::kClosedLoop
                                    : LimiterMode::kOpenLoop;
  return d;
}

uint64_t InitialRate(uint32_t limit_percent) {
  return uint64_t(double(limit_percent) / 100.0 * 1e9 / kInitialNsPerMilliUnit);
}

void RefillBucket(LimiterDevice& lim, int64_t now) {
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

bool AnyLimitSlow(Runtime& rt, region::Region* reg, uint64_t generation) {
  bool any = false;
  for (int i = 0; i < kMaxDevices; ++i) any |= reg->SmLimitInForce(i) != 0;
  rt.any_sm_limit.store(any, std::memory_order_relaxed);
  rt.limits_generation.store(generation, std::memory_order_release);
  if (any) EnsureController(rt);
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

int64_t PayForLaunch(region::Region* reg, int index, int64_t cost, const PaceClock& clock) {
  auto now_ns = [&clock] {
    return clock.now_ns != nullptr ? clock.now_ns(clock.arg) : MonotonicNs();
  };
  LimiterDevice& lim = reg->Limiter(index);
  uint64_t expected = 0;
  const uint32_t limit = reg->SmLimitInForce(index);
  lim.rate.compare_exchange_strong(expected, InitialRate(limit), std::memory_order_relaxed);
  const int64_t start = now_ns();
  int64_t now = start;
  RefillBucket(lim, now);
  const uint64_t rate0 = std::max<uint64_t>(1, lim.rate.load(std::memory_order_relaxed));
  const int64_t allowed_debt = int64_t(double(rate0) * double(kDebtNs) / 1e9);
  if (lim.tokens.load(std::memory_order_relaxed) < -allowed_debt) {
    // Owed past the allowance: wait until the whole debt is paid.
    for (;;) {
      const int64_t tokens = lim.tokens.load(std::memory_order_relaxed);
      if (tokens >= 0 || reg->SmLimitInForce(index) == 0) break;
      const uint64_t rate = std::max<uint64_t>(1, lim.rate.load(std::memory_order_relaxed));
      const int64_t need = int64_t(double(-tokens) * 1e9 / double(rate));
      const int64_t sleep = std::clamp<int64_t>(need, kMinSleepNs, kMaxSleepNs);
      if (clock.sleep_ns != nullptr) {
        clock.sleep_ns(clock.arg, sleep);
      } else {
        SleepForNs(sleep);
      }
      if (reg->PausedWord().load(std::memory_order_relaxed) != 0) WaitWhileHeld(reg, true);
      now = now_ns();
      RefillBucket(lim, now);
    }
  }
  lim.admitted.fetch_add(uint64_t(cost), std::memory_order_relaxed);
  const int64_t waited = std::max<int64_t>(0, now - start);
  if (region::layout::Slot* slot = reg->OwnSlot()) {
    slot->sm_mode.store(lim.mode.load(std::memory_order_relaxed), std::memory_order_relaxed);
    if (waited > 0) slot->sm_waited_ns.fetch_add(waited, std::memory_order_relaxed);
  }
  if (waited > 0) lim.waited_ns.fetch_add(waited, std::memory_order_relaxed);
  return waited;
}

void PaceSlow(Runtime& rt, region::Region* reg, int index, int64_t cost) {
  EnsureController(rt);
  PayForLaunch(reg, index, cost);
}

int64_t GraphLaunchCost(Runtime& rt, CUgraphExec exec, int ordinal) {
  MutexLock l(&rt.graph_kernels_mu);
  auto it = rt.graph_kernels.find(exec);
  if (it == rt.graph_kernels.end()) return 0;
  int64_t cost = 0;
  for (const KernelShape& k : it->second) cost += LaunchCost(rt, ordinal, k.first, k.second);
  return cost;
}

void LearnGraphKernels(Runtime& rt, CUgraphExec exec, CUgraph graph) {
  std::vector<KernelShape> kernels;
  AddKernels(rt, graph, &kernels);
  MutexLock l(&rt.graph_kernels_mu);
  if (kernels.empty()) {
    rt.graph_kernels.erase(exec);
  } else {
    rt.graph_kernels[exec] = std::move(kernels);
  }
}

void ForgetGraphKernels(Runtime& rt, CUgraphExec exec) {
  MutexLock l(&rt.graph_kernels_mu);
  rt.graph_kernels.erase(exec);
}

void PaceGraphLaunch(Runtime& rt, CUgraphExec exec, CUstream stream) {
  region::Region* reg = rt.region_fast.load(std::memory_order_acquire);
  if (reg == nullptr) return;
  int ordinal;
  const int index = LimitedDevice(rt, reg, stream, &ordinal);
  if (index < 0) return;
  if (const int64_t cost = GraphLaunchCost(rt, exec, ordinal); cost > 0)
    ChargeLaunch(rt, reg, index, cost);
}

}  // namespace hami::vgpu
