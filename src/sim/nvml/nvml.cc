// The simulated NVML (libnvidia-ml.so.1). It shows every device of the simulated machine
// whose device node the process has (sim/device_nodes.h: on the host every device; in a
// container its own, indexed from 0) whatever CUDA_VISIBLE_DEVICES says, and reads memory,
// processes, utilization and per-process accounting from the machine's shared state, so what
// it reports covers every process on the machine.
// Xid errors recorded in that state (`hami sim xid DEVICE CODE`) are delivered as
// nvmlEventTypeXidCriticalError events to every event set that registered for them.
#include "nvml/nvml.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "common/clock.h"
#include "common/raw_log.h"
#include "sim/device_nodes.h"
#include "sim/host_pid.h"
#include "sim/nvml/stubs.h"
#include "sim/options.h"
#include "sim/state.h"

struct nvmlDevice_st {
  int index;
};

struct nvmlEventSet_st {
  unsigned long long registered[hami::sim::kMaxDevices];
  // Per device, the sequence number of the next Xid this set delivers: events recorded
  // before the set was created are not delivered.
  uint64_t xid_next[hami::sim::kMaxDevices];
  int next_device;  // where the next wait starts looking, so no device starves another
};

namespace hami::sim {

namespace {

RawLogger g_nvml_log("hami-sim-nvml", LogLevel::kWarn);

struct Nvml {
  std::mutex mu;
  int refs = 0;
  SimOptions options;
  std::unique_ptr<SharedState> state;
  nvmlDevice_st handles[kMaxDevices];  // by physical index
  // The devices whose nodes this process has, by physical index in the machine's order: NVML
  // index -> physical index. Only these are counted and found.
  std::vector<int> accessible;
  bool is_accessible[kMaxDevices] = {};
};

Nvml* g_nvml = new Nvml();  // leaked on purpose: usable during static destruction

void AtForkPrepare() { g_nvml->mu.lock(); }
void AtForkParent() { g_nvml->mu.unlock(); }
void AtForkChild() {
  Nvml* old = g_nvml;
  old->mu.unlock();
  if (old->state) old->state->AbandonAfterFork();
  g_nvml = new Nvml();  // the child initializes NVML afresh
}

nvmlReturn_t Init() {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild); });
  Nvml& n = *g_nvml;
  std::lock_guard<std::mutex> l(n.mu);
  if (n.refs > 0) {
    ++n.refs;
    return NVML_SUCCESS;
  }
  auto options = LoadSimOptionsFromEnvironment();
  if (!options.ok()) {
    g_nvml_log.Log(LogLevel::kError, "%s", options.error().message().c_str());
    return NVML_ERROR_UNKNOWN;
  }
  n.options = std::move(options).value();
  g_nvml_log.set_level(LogLevel(n.options.log_level));
  auto state = SharedState::Open(n.options.state_path, n.options.profile_spec, n.options.node,
                                 n.options.kill_point);
  if (!state.ok()) {
    g_nvml_log.Log(LogLevel::kError, "%s", state.error().message().c_str());
    return NVML_ERROR_UNKNOWN;
  }
  n.state = std::move(state).value();
  // A process of the host namespace tells processes that cannot see it their host PID.
  ServeHostPids(n.options.state_path, n.state->host_pidns_inode());
  for (int i = 0; i < kMaxDevices; ++i) n.handles[i].index = i;
  Result<std::vector<int>> accessible =
      ReadDeviceNodes(n.options.device_nodes_path, n.state->devices());
  if (!accessible.ok()) {
    g_nvml_log.Log(LogLevel::kError, "%s; this process sees no device", accessible.error().c_str());
  }
  n.accessible = accessible.ok() ? *std::move(accessible) : std::vector<int>();
  std::fill(std::begin(n.is_accessible), std::end(n.is_accessible), false);
  for (int p : n.accessible) n.is_accessible[p] = true;
  n.refs = 1;
  return NVML_SUCCESS;
}

// Holds the library for one call: checks initialization, applies the call latency knob.
class Call {
 public:
  Call() : lock_(g_nvml->mu) {
    if (g_nvml->refs == 0) {
      status_ = NVML_ERROR_UNINITIALIZED;
      return;
    }
    if (g_nvml->options.nvml_us > 0) {
      lock_.unlock();
      SleepForNs(int64_t(g_nvml->options.nvml_us) * 1000);
      lock_.lock();
      if (g_nvml->refs == 0) status_ = NVML_ERROR_UNINITIALIZED;
    }
  }
  nvmlReturn_t status() const { return status_; }
  Nvml& n() { return *g_nvml; }
  SharedState& state() { return *g_nvml->state; }
  // Every device of the machine, by physical index.
  const std::vector<DeviceSpec>& devices() { return g_nvml->state->devices(); }
  // The devices this process has the nodes of (physical indices), in NVML's index order.
  const std::vector<int>& accessible() { return g_nvml->accessible; }
  // The same devices' specs.
  std::vector<const DeviceSpec*> Accessible() {
    std::vector<const DeviceSpec*> out;
    for (int p : accessible()) out.push_back(&devices()[size_t(p)]);
    return out;
  }

  // Resolves a device handle; NVML_ERROR_INVALID_ARGUMENT for anything not ours.
  nvmlReturn_t Device(nvmlDevice_t h, const DeviceSpec** out) {
    if (status_ != NVML_SUCCESS) return status_;
    Nvml& nv = *g_nvml;
    if (h < nv.handles || h >= nv.handles + devices().size() || !nv.is_accessible[h - nv.handles]) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = &devices()[size_t(h - nv.handles)];
    return NVML_SUCCESS;
  }

 private:
  std::unique_lock<std::mutex> lock_;
  nvmlReturn_t status_ = NVML_SUCCESS;
};

nvmlReturn_t CopyString(const std::string& s, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < s.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

std::string DriverVersionString(int cuda_version) {
  if (cuda_version >= 13000) return "580.95.05";
  if (cuda_version >= 12080) return "570.172.08";
  if (cuda_version >= 12040) return "550.127.08";
  return "535.247.01";
}

std::string Serial(const DeviceSpec& d) {
  char buf[32];
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | d.uuid_bytes[i];
  std::snprintf(buf, sizeof(buf), "1%012llu",
                static_cast<unsigned long long>(v % 1000000000000ull));
  return buf;
}

bool MigCapable(const DeviceSpec& d) {
  return d.profile->cc_major >= 8 && d.profile->memory_bus_width >= 5120;
}

// Percent of the last `window_ns` the device spent in kernels.
unsigned UtilPercent(SharedState& state, int device, int64_t window_ns) {
  int64_t now = MonotonicNs();
  BusyWindow w = state.DeviceBusy(device, now - window_ns, now);
  if (w.covered_ns <= 0) return 0;
  return unsigned(std::min<int64_t>(100, (w.busy_ns * 100 + w.covered_ns / 2) / w.covered_ns));
}

// One process's share of a device's time, as both per-process utilization queries give it.
struct ProcessSample {
  unsigned pid;
  unsigned long long time_us;  // CLOCK_REALTIME
  unsigned sm_util;            // percent; memory utilization is modelled as half of it
};

// A sample per process holding a context or memory on `d`, covering (last_seen, now]; without
// a last_seen, the utilization window. NVML_ERROR_NOT_FOUND when there is none, or when
// `last_seen_us` is not in the past.
nvmlReturn_t ProcessSamples(Call& c, const DeviceSpec& d, unsigned long long last_seen_us,
                            std::vector<ProcessSample>* out) {
  int64_t now_mono = MonotonicNs(), now_real = RealtimeNs();
  int64_t window = int64_t(c.n().options.util_window_ms) * 1000000;
  int64_t from = now_mono - window;
  if (last_seen_us != 0) {
    int64_t since = int64_t(last_seen_us) * 1000 - (now_real - now_mono);
    if (since >= now_mono) return NVML_ERROR_NOT_FOUND;
    from = std::max(since, now_mono - 10 * window);
  }
  std::vector<ProcessView> procs = c.state().Processes(d.index);
  std::vector<ProcessBusy> busy = c.state().ProcessesBusy(d.index, from, now_mono);
  if (procs.empty()) return NVML_ERROR_NOT_FOUND;
  int64_t span = now_mono - from;
  for (const ProcessView& p : procs) {
    int64_t ns = 0;
    for (const ProcessBusy& b : busy) {
      if (b.host_pid == p.host_pid) ns += b.busy_ns;
    }
    unsigned sm = unsigned(std::min<int64_t>(100, span > 0 ? (ns * 100 + span / 2) / span : 0));
    out->push_back({unsigned(p.host_pid), static_cast<unsigned long long>(now_real / 1000), sm});
  }
  return NVML_SUCCESS;
}

template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* count, Info* infos, bool compute) {
  Call c;
  const DeviceSpec* d;
  if (nvmlReturn_t r = c.Device(device, &d); r != NVML_SUCCESS) return r;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<ProcessView> procs;
  if (compute) procs = c.state().Processes(d->index);
  if (*count < procs.size() || (infos == nullptr && !procs.empty())) {
    *count = unsigned(procs.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    Info info{};
    info.pid = unsigned(procs[i].host_pid);
    info.usedGpuMemory = procs[i].used_bytes;
    if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
      info.gpuInstanceId = 0xFFFFFFFFu;  // not a MIG device
      info.computeInstanceId = 0xFFFFFFFFu;
    }
    infos[i] = info;
  }
  *count = unsigned(procs.size());
  return NVML_SUCCESS;
}

template <typename Pci>
nvmlReturn_t PciInfo(nvmlDevice_t device, Pci* pci) {
  Call c;
  const DeviceSpec* d;
  if (nvmlReturn_t r = c.Device(device, &d); r != NVML_SUCCESS) return r;
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pci = Pci{};
  char legacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  std::snprintf(legacy, sizeof(legacy), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, unsigned(d->pci_domain),
                unsigned(d->pci_bus), unsigned(d->pci_device));
  pci->domain = unsigned(d->pci_domain);
  pci->bus = unsigned(d->pci_bus);
  pci->device = unsigned(d->pci_device);
  pci->pciDeviceId = d->profile->pci_device_id;
  pci->pciSubSystemId = (d->profile->pci_device_id & 0xffff0000u) | 0x10de;
  if constexpr (std::is_same_v<Pci, nvmlPciInfo_t>) {
    std::memcpy(pci->busIdLegacy, legacy, sizeof(legacy));
    std::snprintf(pci->busId, sizeof(pci->busId), "%s", d->pci_bus_id.c_str());
  } else {
    std::memcpy(pci->busId, legacy, sizeof(legacy));
  }
  return NVML_SUCCESS;
}

// CPUs of a NUMA node: the host's CPUs split evenly across the nodes the devices use.
void NodeCpus(const std::vector<DeviceSpec>& devices, int node, unsigned int words,
              unsigned long* set) {
  int nodes = 1;
  for (const DeviceSpec& d : devices) nodes = std::max(nodes, d.numa_node + 1);
  long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_CONF));
  long per = std::max(1L, cpus / nodes);
  long first = per * node, last = node == nodes - 1 ? cpus : first + per;
  std::memset(set, 0, words * sizeof(unsigned long));
  constexpr long kBits = long(sizeof(unsigned long) * 8);
  for (long cpu = first; cpu < last && cpu < long(words) * kBits; ++cpu) {
    set[cpu / kBits] |= 1ul << (cpu % kBits);
  }
}

// Fills `data` with the next Xid event of a device `set` registered for, waiting up to
// `timeout_ms` for one. The library lock is not held while waiting: the state's event epoch
// wakes the wait when any process records an event. (Shutting NVML down while another
// thread waits is undefined, as with the real library.)
template <typename Data>
nvmlReturn_t WaitEvent(nvmlEventSet_t set, Data* data, unsigned int timeout_ms) {
  if (set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  SharedState* state;
  int device_count;
  nvmlDevice_st* handles;
  {
    Call c;
    if (c.status() != NVML_SUCCESS) return c.status();
    state = &c.state();
    device_count = int(c.devices().size());
    handles = c.n().handles;
  }
  const int64_t deadline = MonotonicNs() + int64_t(timeout_ms) * 1000000;
  for (;;) {
    const uint32_t epoch = state->EventEpoch();
    for (int k = 0; k < device_count; ++k) {
      const int d = (set->next_device + k) % device_count;
      if ((set->registered[d] & nvmlEventTypeXidCriticalError) == 0) continue;
      std::optional<XidEvent> e = state->XidFrom(d, set->xid_next[d]);
      if (!e) continue;
      set->xid_next[d] = e->sequence + 1;
      set->next_device = (d + 1) % device_count;
      *data = Data{};
      data->device = &handles[d];
      data->eventType = nvmlEventTypeXidCriticalError;
      data->eventData = e->code;
      if constexpr (std::is_same_v<Data, nvmlEventData_t>) {
        data->gpuInstanceId = 0xFFFFFFFFu;  // a whole GPU, not a MIG instance
        data->computeInstanceId = 0xFFFFFFFFu;
      }
      return NVML_SUCCESS;
    }
    const int64_t left = deadline - MonotonicNs();
    if (left <= 0) return NVML_ERROR_TIMEOUT;
    state->WaitForEvent(epoch, left);
  }
}

}  // namespace

int NvmlNotModelled(const char* name) {
  g_nvml_log.Log(LogLevel::kInfo,
                 "%s is not modelled by the simulated GPU: NVML_ERROR_NOT_SUPPORTED", name);
  return NVML_ERROR_NOT_SUPPORTED;
}

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

nvmlReturn_t nvmlInit_v2(void) { return Init(); }
nvmlReturn_t nvmlInit(void) { return Init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  if ((flags & ~unsigned(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH)) != 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return Init();
}

nvmlReturn_t nvmlShutdown(void) {
  Nvml& n = *g_nvml;
  std::lock_guard<std::mutex> l(n.mu);
  if (n.refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (--n.refs == 0) n.state.reset();
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    case NVML_ERROR_NOT_READY:
      return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "GPU not found";
    case NVML_ERROR_INVALID_STATE:
      return "Invalid state";
    default:
      return "Unknown Error";
  }
}

// ---- system ----

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  return CopyString(DriverVersionString(c.n().options.driver_version), version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  int v = c.n().options.driver_version;
  return CopyString(std::to_string(v / 1000) + "." + DriverVersionString(v), version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (v == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *v = c.n().options.driver_version;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) { return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (name == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  for (int d : c.accessible()) {
    for (const ProcessView& p : c.state().Processes(d)) {
      if (unsigned(p.host_pid) == pid) {
        std::snprintf(name, length, "%s", p.comm.c_str());
        return NVML_SUCCESS;
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

// ---- devices ----

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = unsigned(c.accessible().size());
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (device == nullptr || index >= c.accessible().size()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &c.n().handles[c.accessible()[index]];
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (const DeviceSpec* d : c.Accessible()) {
    if (d->uuid == uuid) {
      *device = &c.n().handles[d->index];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (bus_id == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) {
    domain = 0;
    if (std::sscanf(bus_id, "%x:%x.%x", &bus, &dev, &fn) != 3) return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (const DeviceSpec* d : c.Accessible()) {
    if (unsigned(d->pci_domain) == domain && unsigned(d->pci_bus) == bus &&
        unsigned(d->pci_device) == dev && fn == 0) {
      *device = &c.n().handles[d->index];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (serial == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (const DeviceSpec* d : c.Accessible()) {
    if (Serial(*d) == serial) {
      *device = &c.n().handles[d->index];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

#define HAMI_NVML_DEVICE(c, device, d) \
  Call c;                              \
  const DeviceSpec* d;                 \
  if (nvmlReturn_t r_ = c.Device(device, &d); r_ != NVML_SUCCESS) return r_

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  HAMI_NVML_DEVICE(c, device, d);
  return CopyString(std::string(d->profile->name), name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  HAMI_NVML_DEVICE(c, device, d);
  return CopyString(d->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length) {
  HAMI_NVML_DEVICE(c, device, d);
  return CopyString(Serial(*d), serial, length);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  HAMI_NVML_DEVICE(c, device, d);
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::vector<int>& accessible = c.accessible();
  *index = unsigned(std::find(accessible.begin(), accessible.end(), d->index) - accessible.begin());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  HAMI_NVML_DEVICE(c, device, d);
  if (minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *minor = unsigned(d->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
  HAMI_NVML_DEVICE(c, device, d);
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *type = NVML_BRAND_NVIDIA;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  HAMI_NVML_DEVICE(c, device, d);
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *arch = nvmlDeviceArchitecture_t(d->profile->nvml_architecture);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  HAMI_NVML_DEVICE(c, device, d);
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = d->profile->cc_major;
  *minor = d->profile->cc_minor;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int* cores) {
  HAMI_NVML_DEVICE(c, device, d);
  if (cores == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *cores = unsigned(d->profile->sm_count * d->profile->cores_per_sm);
  return NVML_SUCCESS;
}

// ---- memory and utilization ----

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  HAMI_NVML_DEVICE(c, device, d);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  c.state().SweepDead();
  uint64_t used = c.state().UsedBytes(d->index) + d->reserved_bytes();
  memory->total = d->total_bytes();
  memory->used = std::min(used, d->total_bytes());
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  HAMI_NVML_DEVICE(c, device, d);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  c.state().SweepDead();
  uint64_t used = std::min(c.state().UsedBytes(d->index), d->usable_bytes());
  memory->total = d->total_bytes();
  memory->reserved = d->reserved_bytes();
  memory->used = used;
  memory->free = d->usable_bytes() - used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1) {
  HAMI_NVML_DEVICE(c, device, d);
  if (bar1 == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  bar1->bar1Total = uint64_t(1) << 37;  // 128 GiB aperture
  bar1->bar1Used = 32ull << 20;
  bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* util) {
  HAMI_NVML_DEVICE(c, device, d);
  if (util == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned gpu = UtilPercent(c.state(), d->index, int64_t(c.n().options.util_window_ms) * 1000000);
  util->gpu = gpu;
  util->memory = gpu / 2;  // the model: kernels keep the memory controller half as busy
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* samples,
                                             unsigned int* count, unsigned long long last_seen_us) {
  HAMI_NVML_DEVICE(c, device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<ProcessSample> got;
  if (nvmlReturn_t r = ProcessSamples(c, *d, last_seen_us, &got); r != NVML_SUCCESS) return r;
  if (samples == nullptr || *count < got.size()) {
    *count = unsigned(got.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    samples[i] = nvmlProcessUtilizationSample_t{
        got[i].pid, got[i].time_us, got[i].sm_util, got[i].sm_util / 2, 0, 0};
  }
  *count = unsigned(got.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                   nvmlProcessesUtilizationInfo_t* info) {
  HAMI_NVML_DEVICE(c, device, d);
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != nvmlProcessesUtilizationInfo_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  std::vector<ProcessSample> got;
  if (nvmlReturn_t r = ProcessSamples(c, *d, info->lastSeenTimeStamp, &got); r != NVML_SUCCESS) {
    return r;
  }
  if (info->procUtilArray == nullptr || info->processSamplesCount < got.size()) {
    info->processSamplesCount = unsigned(got.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    info->procUtilArray[i] = nvmlProcessUtilizationInfo_v1_t{
        got[i].time_us, got[i].pid, got[i].sm_util, got[i].sm_util / 2, 0, 0, 0, 0};
  }
  info->processSamplesCount = unsigned(got.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                  nvmlProcessInfo_v1_t* infos) {
  return RunningProcesses(device, count, infos, true);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_v2_t* infos) {
  return RunningProcesses(device, count, infos, true);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_t* infos) {
  return RunningProcesses(device, count, infos, true);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                   nvmlProcessInfo_v1_t* infos) {
  return RunningProcesses(device, count, infos, false);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                      nvmlProcessInfo_v2_t* infos) {
  return RunningProcesses(device, count, infos, false);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                      nvmlProcessInfo_t* infos) {
  return RunningProcesses(device, count, infos, false);
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_v1_t* infos) {
  return RunningProcesses(device, count, infos, false);
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                        nvmlProcessInfo_v2_t* infos) {
  return RunningProcesses(device, count, infos, false);
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                        nvmlProcessInfo_t* infos) {
  return RunningProcesses(device, count, infos, false);
}

nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                   nvmlProcessDetailList_t* list) {
  if (list == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (list->version != nvmlProcessDetailList_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (list->mode != NVML_PROCESS_MODE_COMPUTE) {
    unsigned zero = 0;
    nvmlReturn_t r = RunningProcesses<nvmlProcessDetail_v1_t>(device, &zero, nullptr, false);
    list->numProcArrayEntries = 0;
    return r;
  }
  unsigned count = list->numProcArrayEntries;
  nvmlReturn_t r = RunningProcesses(device, &count, list->procArray, true);
  list->numProcArrayEntries = count;
  return r;
}

// ---- accounting: on when the machine is made; a record per process that used a device ----

nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
  HAMI_NVML_DEVICE(c, device, d);
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = c.state().AccountingEnabled(d->index) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetAccountingMode(nvmlDevice_t device, nvmlEnableState_t mode) {
  HAMI_NVML_DEVICE(c, device, d);
  if (mode != NVML_FEATURE_DISABLED && mode != NVML_FEATURE_ENABLED) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (geteuid() != 0) return NVML_ERROR_NO_PERMISSION;
  c.state().SetAccounting(d->index, mode == NVML_FEATURE_ENABLED);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int* size) {
  HAMI_NVML_DEVICE(c, device, d);
  if (size == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *size = unsigned(state::kAccountingRing);
  return NVML_SUCCESS;
}

// Each PID with a record once, oldest record first.
nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int* count,
                                         unsigned int* pids) {
  HAMI_NVML_DEVICE(c, device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!c.state().AccountingEnabled(d->index)) return NVML_ERROR_NOT_SUPPORTED;
  std::vector<unsigned> listed;
  for (const AccountingView& a : c.state().Accounting(d->index)) {
    if (std::find(listed.begin(), listed.end(), unsigned(a.host_pid)) == listed.end()) {
      listed.push_back(unsigned(a.host_pid));
    }
  }
  if (*count < listed.size() || (pids == nullptr && !listed.empty())) {
    *count = unsigned(listed.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(listed.begin(), listed.end(), pids);
  *count = unsigned(listed.size());
  return NVML_SUCCESS;
}

// The newest record of `pid`: of processes that had the same PID, the last one.
nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid,
                                          nvmlAccountingStats_t* stats) {
  HAMI_NVML_DEVICE(c, device, d);
  if (stats == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!c.state().AccountingEnabled(d->index)) return NVML_ERROR_NOT_SUPPORTED;
  std::vector<AccountingView> records = c.state().Accounting(d->index);
  auto a = std::find_if(records.rbegin(), records.rend(),
                        [&](const AccountingView& r) { return unsigned(r.host_pid) == pid; });
  if (a == records.rend()) return NVML_ERROR_NOT_FOUND;
  const int64_t end = a->running ? RealtimeNs() : a->end_realtime_ns;
  const int64_t life = std::max<int64_t>(1, end - a->start_realtime_ns);
  const int64_t busy = int64_t(std::min<uint64_t>(a->busy_ns, uint64_t(life)));
  const unsigned gpu = unsigned((busy * 100 + life / 2) / life);
  *stats = nvmlAccountingStats_t{};
  stats->gpuUtilization = gpu;
  stats->memoryUtilization = gpu / 2;  // as nvmlDeviceGetUtilizationRates models it
  stats->maxMemoryUsage = a->max_used_bytes;
  stats->time = a->running ? 0 : static_cast<unsigned long long>(life / 1000000);
  stats->startTime = static_cast<unsigned long long>(a->start_realtime_ns / 1000);
  stats->isRunning = a->running ? 1 : 0;
  return NVML_SUCCESS;
}

// ---- PCI and topology ----

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, hamiNvmlPciInfoLegacy_t* pci) {
  return PciInfo(device, pci);
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, hamiNvmlPciInfoLegacy_t* pci) {
  return PciInfo(device, pci);
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo(device, pci);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int* gen) {
  HAMI_NVML_DEVICE(c, device, d);
  if (gen == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *gen = unsigned(d->profile->pcie_gen);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int* width) {
  HAMI_NVML_DEVICE(c, device, d);
  if (width == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *width = unsigned(d->profile->pcie_width);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  HAMI_NVML_DEVICE(c, device, d);
  if (node == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *node = unsigned(d->numa_node);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int size, unsigned long* set) {
  HAMI_NVML_DEVICE(c, device, d);
  if (set == nullptr || size == 0) return NVML_ERROR_INVALID_ARGUMENT;
  NodeCpus(c.devices(), d->numa_node, size, set);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int size,
                                                 unsigned long* set, nvmlAffinityScope_t scope) {
  if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return nvmlDeviceGetCpuAffinity(device, size, set);
}

nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int size, unsigned long* set,
                                         nvmlAffinityScope_t scope) {
  HAMI_NVML_DEVICE(c, device, d);
  if (set == nullptr || size == 0 ||
      (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  std::memset(set, 0, size * sizeof(unsigned long));
  set[0] = 1ul << d->numa_node;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b,
                                                 nvmlGpuTopologyLevel_t* level) {
  Call c;
  const DeviceSpec *da, *db;
  if (nvmlReturn_t r = c.Device(a, &da); r != NVML_SUCCESS) return r;
  if (nvmlReturn_t r = c.Device(b, &db); r != NVML_SUCCESS) return r;
  if (level == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *level = da == db                         ? NVML_TOPOLOGY_INTERNAL
           : da->numa_node == db->numa_node ? NVML_TOPOLOGY_NODE
                                            : NVML_TOPOLOGY_SYSTEM;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t index,
                                    nvmlGpuP2PStatus_t* status) {
  Call c;
  const DeviceSpec *da, *db;
  if (nvmlReturn_t r = c.Device(a, &da); r != NVML_SUCCESS) return r;
  if (nvmlReturn_t r = c.Device(b, &db); r != NVML_SUCCESS) return r;
  if (status == nullptr || int(index) < 0 || index >= NVML_P2P_CAPS_INDEX_UNKNOWN) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *status = NVML_P2P_STATUS_OK;
  return NVML_SUCCESS;
}

// ---- MIG: capable models report it disabled ----

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                  unsigned int* pending) {
  HAMI_NVML_DEVICE(c, device, d);
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!MigCapable(*d)) return NVML_ERROR_NOT_SUPPORTED;
  *current = *pending = NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  HAMI_NVML_DEVICE(c, device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = MigCapable(*d) ? 7 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* is_mig) {
  HAMI_NVML_DEVICE(c, device, d);
  if (is_mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *is_mig = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int,
                                                 nvmlDevice_t* mig) {
  HAMI_NVML_DEVICE(c, device, d);
  if (mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return MigCapable(*d) ? NVML_ERROR_NOT_FOUND : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t* device) {
  HAMI_NVML_DEVICE(c, mig, d);
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_INVALID_ARGUMENT;  // not a MIG device handle
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  HAMI_NVML_DEVICE(c, device, d);
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  HAMI_NVML_DEVICE(c, device, d);
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_INVALID_ARGUMENT;
}

// ---- modes and sensors ----

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
  HAMI_NVML_DEVICE(c, device, d);
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  HAMI_NVML_DEVICE(c, device, d);
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = NVML_COMPUTEMODE_DEFAULT;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current,
                                  nvmlEnableState_t* pending) {
  HAMI_NVML_DEVICE(c, device, d);
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = MigCapable(*d) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned int* temp) {
  HAMI_NVML_DEVICE(c, device, d);
  if (temp == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *temp = 30 + UtilPercent(c.state(), d->index, 1000000000) / 3;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* mw) {
  HAMI_NVML_DEVICE(c, device, d);
  if (mw == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned idle = unsigned(d->profile->power_limit_w) / 6;
  unsigned util = UtilPercent(c.state(), d->index, 1000000000);
  *mw = (idle + (unsigned(d->profile->power_limit_w) - idle) * util / 100) * 1000;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* mw) {
  HAMI_NVML_DEVICE(c, device, d);
  if (mw == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mw = unsigned(d->profile->power_limit_w) * 1000;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int* mhz) {
  HAMI_NVML_DEVICE(c, device, d);
  if (mhz == nullptr || int(type) < 0 || type >= NVML_CLOCK_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *mhz = unsigned(type == NVML_CLOCK_MEM ? d->profile->memory_clock_mhz : d->profile->clock_mhz);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* mhz) {
  return nvmlDeviceGetMaxClockInfo(device, type, mhz);
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* state) {
  HAMI_NVML_DEVICE(c, device, d);
  if (state == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *state = NVML_PSTATE_0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  HAMI_NVML_DEVICE(c, device, d);
  if (speed == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_SUPPORTED;  // passively cooled data-center boards
}

// ---- events: supported types can be registered; Xids recorded in the state are raised ----

constexpr unsigned long long kSupportedEvents =
    nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState |
    nvmlEventTypeXidCriticalError | nvmlEventTypeClock;

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* types) {
  HAMI_NVML_DEVICE(c, device, d);
  if (types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *types = kSupportedEvents;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = new nvmlEventSet_st{};
  for (size_t d = 0; d < c.devices().size(); ++d) {
    (*set)->xid_next[d] = c.state().XidCount(int(d));
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                      nvmlEventSet_t set) {
  HAMI_NVML_DEVICE(c, device, d);
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if ((types & ~kSupportedEvents) != 0) return NVML_ERROR_NOT_SUPPORTED;
  set->registered[d->index] |= types;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int ms) {
  return sim::WaitEvent(set, data, ms);
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, hamiNvmlEventDataLegacy_t* data,
                              unsigned int ms) {
  return sim::WaitEvent(set, data, ms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  Call c;
  if (c.status() != NVML_SUCCESS) return c.status();
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  return NVML_SUCCESS;
}

// ---- NVLink ----
//
// On a board whose GPUs sit on NVLink switches (a profile with nvlink_switch) every link of the
// GPU (18 on Hopper) is up, P2P-capable, NVLink 4, and leads to one of the board's four
// switches; elsewhere these calls answer NVML_ERROR_NOT_SUPPORTED, as on a PCIe board.
// nvml.h (src/nvml) does not declare this part of NVML's ABI: its declarations and types,
// NVML's own, are restated here.

typedef enum {
  HAMI_NVML_NVLINK_CAP_P2P_SUPPORTED = 0,
  HAMI_NVML_NVLINK_CAP_SYSMEM_ACCESS = 1,
  HAMI_NVML_NVLINK_CAP_P2P_ATOMICS = 2,
  HAMI_NVML_NVLINK_CAP_SYSMEM_ATOMICS = 3,
  HAMI_NVML_NVLINK_CAP_SLI_BRIDGE = 4,
  HAMI_NVML_NVLINK_CAP_VALID = 5,
} hamiNvmlNvLinkCapability_t;

typedef union {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} hamiNvmlValue_t;

typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;  // nvmlValueType_t
  nvmlReturn_t nvmlReturn;
  hamiNvmlValue_t value;
} hamiNvmlFieldValue_t;
static_assert(sizeof(hamiNvmlFieldValue_t) == 40, "nvmlFieldValue_t's layout");

inline constexpr unsigned kHamiNvmlFieldNvLinkGetState = 165;  // NVML_FI_DEV_NVLINK_GET_STATE
inline constexpr int kHamiNvmlValueTypeUnsignedInt = 1;        // NVML_VALUE_TYPE_UNSIGNED_INT
inline constexpr int kHamiNvmlNvLinkDeviceTypeSwitch = 2;      // NVML_NVLINK_DEVICE_TYPE_SWITCH
inline constexpr unsigned kHamiNvLinks = 18;                   // NVML_NVLINK_MAX_LINKS, Hopper's

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t* isActive);
nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link,
                                        unsigned int* version);
nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                           hamiNvmlNvLinkCapability_t capability,
                                           unsigned int* capResult);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                              hamiNvmlPciInfoLegacy_t* pci);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, int* type);
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      hamiNvmlFieldValue_t* values);

}  // extern "C"

namespace hami::sim {
namespace {

// NVML_SUCCESS when `d` has NVLink (it sits on a switch) and `link` is one of its links.
nvmlReturn_t NvLinkOf(const DeviceSpec* d, unsigned link) {
  if (!d->profile->nvlink_switch) return NVML_ERROR_NOT_SUPPORTED;
  return link < kHamiNvLinks ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

// The PCI identity of the switch at the other end of `link`: four switches, the links spread
// over them in order.
template <typename Pci>
void SwitchPci(unsigned link, Pci* pci) {
  *pci = Pci{};
  // One byte, as a PCI bus number is (and as the formats below are sized for).
  const unsigned bus = (0xc0 + link * 4 / kHamiNvLinks) & 0xffu;
  char legacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  std::snprintf(legacy, sizeof(legacy), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, 0u, bus, 0u);
  pci->bus = bus;
  pci->pciDeviceId = 0x22a310de;  // NVSwitch (third generation)
  if constexpr (std::is_same_v<Pci, nvmlPciInfo_t>) {
    std::memcpy(pci->busIdLegacy, legacy, sizeof(legacy));
    std::snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", bus);
  } else {
    std::memcpy(pci->busId, legacy, sizeof(legacy));
  }
}

template <typename Pci>
nvmlReturn_t RemotePci(nvmlDevice_t device, unsigned link, Pci* pci) {
  HAMI_NVML_DEVICE(c, device, d);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = NvLinkOf(d, link); r != NVML_SUCCESS) return r;
  SwitchPci(link, pci);
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace hami::sim

extern "C" {

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t* isActive) {
  HAMI_NVML_DEVICE(c, device, d);
  if (isActive == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = sim::NvLinkOf(d, link); r != NVML_SUCCESS) return r;
  *isActive = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link,
                                        unsigned int* version) {
  HAMI_NVML_DEVICE(c, device, d);
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = sim::NvLinkOf(d, link); r != NVML_SUCCESS) return r;
  *version = 4;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                           hamiNvmlNvLinkCapability_t capability,
                                           unsigned int* capResult) {
  HAMI_NVML_DEVICE(c, device, d);
  if (capResult == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = sim::NvLinkOf(d, link); r != NVML_SUCCESS) return r;
  switch (int(capability)) {
    case HAMI_NVML_NVLINK_CAP_P2P_SUPPORTED:
    case HAMI_NVML_NVLINK_CAP_P2P_ATOMICS:
    case HAMI_NVML_NVLINK_CAP_VALID:
      *capResult = 1;
      return NVML_SUCCESS;
    case HAMI_NVML_NVLINK_CAP_SYSMEM_ACCESS:
    case HAMI_NVML_NVLINK_CAP_SYSMEM_ATOMICS:
    case HAMI_NVML_NVLINK_CAP_SLI_BRIDGE:
      *capResult = 0;
      return NVML_SUCCESS;
    default:
      return NVML_ERROR_INVALID_ARGUMENT;
  }
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                              hamiNvmlPciInfoLegacy_t* pci) {
  return sim::RemotePci(device, link, pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t* pci) {
  return sim::RemotePci(device, link, pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 int* type) {
  HAMI_NVML_DEVICE(c, device, d);
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t r = sim::NvLinkOf(d, link); r != NVML_SUCCESS) return r;
  *type = kHamiNvmlNvLinkDeviceTypeSwitch;
  return NVML_SUCCESS;
}

// The one field modelled is a link's state, on a device with NVLink; every other field of
// such a device answers NVML_ERROR_NOT_SUPPORTED in its value, and a device without NVLink
// refuses the call as before.
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      hamiNvmlFieldValue_t* values) {
  HAMI_NVML_DEVICE(c, device, d);
  if (!d->profile->nvlink_switch) return NVML_ERROR_NOT_SUPPORTED;
  if (values == nullptr || valuesCount < 0) return NVML_ERROR_INVALID_ARGUMENT;
  const long long now_us = static_cast<long long>(RealtimeNs() / 1000);
  for (int i = 0; i < valuesCount; ++i) {
    hamiNvmlFieldValue_t& v = values[i];
    v.timestamp = now_us;
    v.latencyUsec = 0;
    v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    if (v.fieldId == kHamiNvmlFieldNvLinkGetState && v.scopeId < kHamiNvLinks) {
      v.valueType = kHamiNvmlValueTypeUnsignedInt;
      v.value.uiVal = NVML_FEATURE_ENABLED;
      v.nvmlReturn = NVML_SUCCESS;
    }
  }
  return NVML_SUCCESS;
}

}  // extern "C"
