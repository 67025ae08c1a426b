// NVML as the container should see it: only its visible devices, in CUDA's order, its
// memory limits, in the same numbers cuMemGetInfo gives, and only its own processes.
#include <sys/types.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "vgpu/nvml_list.h"
#include "vgpu/prologue.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace {

nvmlReturn_t AfterInit(Runtime& rt, nvmlReturn_t r) {
  if (r == NVML_SUCCESS) {
    NvmlVisibleCount(rt);
    JoinRegion(rt);  // where an NVML process joins its region
  }
  return r;
}

nvmlReturn_t Count(Runtime& rt, unsigned int* count, nvmlReturn_t r) {
  if (r != NVML_SUCCESS || count == nullptr) return r;
  *count = unsigned(NvmlVisibleCount(rt));
  return r;
}

template <typename GetByIndex>
nvmlReturn_t ByIndex(Runtime& rt, unsigned int index, nvmlDevice_t* device, GetByIndex get) {
  if (device == nullptr) return get(index);
  int nvml_index = index <= unsigned(kMaxDevices) ? NvmlIndexOf(rt, int(index)) : -1;
  if (nvml_index < 0) return NVML_ERROR_INVALID_ARGUMENT;
  return get(unsigned(nvml_index));
}

// Handles found another way (UUID, PCI bus id) must name a visible device.
nvmlReturn_t OnlyVisible(Runtime& rt, nvmlReturn_t r, nvmlDevice_t* device) {
  if (r != NVML_SUCCESS || device == nullptr) return r;
  return NvmlOrdinalOf(rt, *device) >= 0 ? r : NVML_ERROR_NOT_FOUND;
}

// The container's view of a visible device's memory (see LimitedView).
bool Limited(Runtime& rt, nvmlDevice_t h, uint64_t physical_total, uint64_t physical_free,
             uint64_t* total, uint64_t* free) {
  int ordinal = NvmlOrdinalOf(rt, h);
  return ordinal >= 0 && LimitedView(rt, ordinal, physical_total, physical_free, total, free);
}

// The kind of work a running-process query asks about.
enum class Work { kCompute, kGraphics, kMps };

// A process of the container, as its slot in the region records it.
struct Member {
  pid_t pid;       // in the container's PID namespace
  pid_t host_pid;  // 0: not known
  uint64_t used_bytes;
  bool listed;
};

// The container's live processes on region device `index`, after the dead are swept.
std::vector<Member> ContainerMembers(region::Region& reg, int index) {
  reg.SweepDead();
  std::vector<Member> members;
  for (const region::SlotView& s : reg.Slots()) {
    if (s.alive && s.state == region::layout::SlotState::kLive) {
      members.push_back({s.pid, s.host_pid, s.used_bytes[size_t(index)], false});
    }
  }
  return members;
}

// The driver's pid of a list entry: its pid field, or the entry itself in a list of pids.
template <typename T>
unsigned PidOf(const T& entry) {
  return entry.pid;
}
unsigned PidOf(unsigned pid) { return pid; }

// The member the driver's `pid` is, or null: its host pid, or while that is unknown the pid
// its slot records (see RunningProcesses).
Member* MemberFor(std::vector<Member>& members, unsigned pid) {
  auto m = std::find_if(members.begin(), members.end(), [&](const Member& c) {
    return !c.listed && pid_t(pid) == (c.host_pid != 0 ? c.host_pid : c.pid);
  });
  return m == members.end() ? nullptr : &*m;
}

// Keeps, of the driver's `listed` entries for `device`, the container's: those whose pid
// (PidOf) is a member's (MemberFor), each marked listed in `members` and passed to
// `fill(entry, member)`.
// What the dead left is returned first (not only once per sweep interval, as the memory view
// does): these queries are rare, and a list then adds up to the "used" after it. Without a
// region holding the device, the driver's list stands and `members` stays empty. False when
// the device is not one the container sees.
template <typename T, typename Fill>
bool KeepContainers(Runtime& rt, nvmlDevice_t device, std::vector<T>* listed,
                    std::vector<Member>* members, Fill fill) {
  int ordinal = NvmlOrdinalOf(rt, device);
  if (ordinal < 0) return false;
  region::Region* reg = ViewRegion(rt);
  int index = RegionIndex(rt, ordinal);
  if (reg == nullptr || index < 0) return true;
  *members = ContainerMembers(*reg, index);
  std::vector<T> kept;
  for (T& e : *listed) {
    Member* m = MemberFor(*members, PidOf(e));
    if (m == nullptr) continue;
    m->listed = true;
    fill(e, *m);
    kept.push_back(e);
  }
  *listed = std::move(kept);
  return true;
}

// The running-process queries, all versions and kinds. `real(device, &n, array)` is the
// driver's query with the caller's struct.
//
// The container's processes are those with a live slot in its shared region. The driver
// checks the handle and initialization and gives its list; we keep the entries of the
// container's processes, with the driver's pid and MIG placement, and set usedGpuMemory to
// what the region charges the process on the device, so that the entries add up to what the
// container uses there (the "used" of the limited memory view, where the limit binds).
//
// An entry is a process's when its pid is the host pid the slot records. While that is
// unknown (0), the pid the slot records is used instead: it is the driver's number for the
// process when the container shares the host's PID namespace (with a PID namespace of its
// own, a host process that happens to have that number would be taken for it; knowing host
// pids avoids this). A process the region charges on the device that no driver entry
// matches still appears in the compute list, under its host pid if known, else under its pid
// in the container's namespace: the only number known for it, and one a caller inside the
// container can use. The graphics and MPS lists are only filtered: the region does not know
// what kind of work a process does.
//
// Without a region holding the device there is nothing to tell the container's processes
// by, and the driver's list stands (as the physical memory figures do then).
template <typename Info, typename Real>
nvmlReturn_t RunningProcesses(Runtime& rt, nvmlDevice_t device, unsigned int* count, Info* infos,
                              Work work, Real real) {
  if (count == nullptr) return real(device, count, infos);
  std::vector<Info> listed;
  if (nvmlReturn_t r = WholeList(&listed, [&](unsigned* n, Info* a) { return real(device, n, a); });
      r != NVML_SUCCESS) {
    return r;
  }
  std::vector<Member> members;
  if (!KeepContainers(rt, device, &listed, &members,
                      [](Info& e, const Member& m) { e.usedGpuMemory = m.used_bytes; })) {
    return NVML_ERROR_NOT_FOUND;
  }
  for (const Member& m : members) {
    if (work != Work::kCompute || m.listed || m.used_bytes == 0) continue;
    Info info{};
    info.pid = unsigned(m.host_pid != 0 ? m.host_pid : m.pid);
    info.usedGpuMemory = m.used_bytes;
    if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
      info.gpuInstanceId = 0xFFFFFFFFu;  // what the driver gives on a device without MIG
      info.computeInstanceId = 0xFFFFFFFFu;
    }
    listed.push_back(info);
  }
  return AnswerList(listed, count, infos);
}

// The per-process utilization queries: the driver's samples of the container's processes
// only, `query(&n, array)` asking the driver with an array of n. Without a region holding the
// device the driver's samples stand, as for the process lists.
template <typename Sample, typename Query>
nvmlReturn_t ProcessSamples(Runtime& rt, nvmlDevice_t device, unsigned int* count, Sample* samples,
                            Query query) {
  std::vector<Sample> got;
  if (nvmlReturn_t r = WholeList(&got, query); r != NVML_SUCCESS) return r;
  std::vector<Member> members;
  if (!KeepContainers(rt, device, &got, &members, [](Sample&, const Member&) {})) {
    return NVML_ERROR_NOT_FOUND;
  }
  if (got.empty()) return NVML_ERROR_NOT_FOUND;  // the driver's answer for no samples
  return AnswerList(got, count, samples);
}

// The accounting queries. The driver keeps a record of every process that ran on the device,
// terminated ones included; the container's are those of its live members (KeepContainers):
// a member that has ended has no slot left to tell it from another tenant's process, and its
// record is no longer shown. A PID that is not the container's has no stats to give, as the
// driver answers for a PID it holds no record of.
template <typename Real>
nvmlReturn_t AccountingPids(Runtime& rt, nvmlDevice_t device, unsigned int* count,
                            unsigned int* pids, Real real) {
  if (count == nullptr) return real(device, count, pids);
  std::vector<unsigned> listed;
  if (nvmlReturn_t r =
          WholeList(&listed, [&](unsigned* n, unsigned* a) { return real(device, n, a); });
      r != NVML_SUCCESS) {
    return r;
  }
  std::vector<Member> members;
  if (!KeepContainers(rt, device, &listed, &members, [](unsigned&, const Member&) {})) {
    return NVML_ERROR_NOT_FOUND;
  }
  return AnswerList(listed, count, pids);
}

template <typename Real>
nvmlReturn_t AccountingStats(Runtime& rt, nvmlDevice_t device, unsigned int pid,
                             nvmlAccountingStats_t* stats, Real real) {
  if (stats == nullptr) return real(device, pid, stats);
  nvmlAccountingStats_t got{};
  if (nvmlReturn_t r = real(device, pid, &got); r != NVML_SUCCESS) return r;
  std::vector<unsigned> asked{pid};
  std::vector<Member> members;
  if (!KeepContainers(rt, device, &asked, &members, [](unsigned&, const Member&) {}) ||
      asked.empty()) {
    return NVML_ERROR_NOT_FOUND;
  }
  *stats = got;
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

// Without a real NVML the answer is the one NVML's own loader gives: no library (prologue.h).
nvmlReturn_t nvmlInit_v2(void) {
  HAMI_NVML_PROLOGUE(nvmlInit_v2);
  return AfterInit(rt, nv.nvml.nvmlInit_v2());
}

nvmlReturn_t nvmlInit(void) {
  HAMI_NVML_PROLOGUE(nvmlInit);
  return AfterInit(rt, nv.nvml.nvmlInit());
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  HAMI_NVML_PROLOGUE(nvmlInitWithFlags, flags);
  return AfterInit(rt, nv.nvml.nvmlInitWithFlags(flags));
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetCount_v2, count);
  return Count(rt, count, nv.nvml.nvmlDeviceGetCount_v2(count));
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetCount, count);
  return Count(rt, count, nv.nvml.nvmlDeviceGetCount(count));
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetHandleByIndex_v2, index, device);
  return ByIndex(rt, index, device,
                 [&](unsigned i) { return nv.nvml.nvmlDeviceGetHandleByIndex_v2(i, device); });
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetHandleByIndex, index, device);
  return ByIndex(rt, index, device,
                 [&](unsigned i) { return nv.nvml.nvmlDeviceGetHandleByIndex(i, device); });
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetHandleByUUID, uuid, device);
  return OnlyVisible(rt, nv.nvml.nvmlDeviceGetHandleByUUID(uuid, device), device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetHandleByPciBusId_v2, bus_id, device);
  return OnlyVisible(rt, nv.nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id, device), device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetHandleByPciBusId, bus_id, device);
  return OnlyVisible(rt, nv.nvml.nvmlDeviceGetHandleByPciBusId(bus_id, device), device);
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetHandleBySerial, serial, device);
  return OnlyVisible(rt, nv.nvml.nvmlDeviceGetHandleBySerial(serial, device), device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetIndex, device, index);
  nvmlReturn_t r = nv.nvml.nvmlDeviceGetIndex(device, index);
  if (r != NVML_SUCCESS || index == nullptr) return r;
  int ordinal = NvmlOrdinalOf(rt, device);
  if (ordinal < 0) return NVML_ERROR_NOT_FOUND;
  *index = unsigned(ordinal);
  return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetMemoryInfo, device, memory);
  nvmlReturn_t r = nv.nvml.nvmlDeviceGetMemoryInfo(device, memory);
  if (r != NVML_SUCCESS || memory == nullptr) return r;
  uint64_t total, free;
  if (Limited(rt, device, memory->total, memory->free, &total, &free)) {
    memory->total = total;
    memory->free = free;
    memory->used = total - free;
  }
  return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetMemoryInfo_v2, device, memory);
  nvmlReturn_t r = nv.nvml.nvmlDeviceGetMemoryInfo_v2(device, memory);
  if (r != NVML_SUCCESS || memory == nullptr) return r;
  uint64_t total, free;
  // The physical total less the driver's reservation is what CUDA calls total.
  uint64_t usable = memory->total > memory->reserved ? memory->total - memory->reserved : 0;
  if (Limited(rt, device, usable, memory->free, &total, &free)) {
    memory->total = total;
    memory->reserved = 0;
    memory->free = free;
    memory->used = total - free;
  }
  return r;
}

// ---- running processes (see RunningProcesses) ----

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetComputeRunningProcesses, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kCompute,
                          nv.nvml.nvmlDeviceGetComputeRunningProcesses);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetComputeRunningProcesses_v2, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kCompute,
                          nv.nvml.nvmlDeviceGetComputeRunningProcesses_v2);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetComputeRunningProcesses_v3, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kCompute,
                          nv.nvml.nvmlDeviceGetComputeRunningProcesses_v3);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                   nvmlProcessInfo_v1_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetGraphicsRunningProcesses, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kGraphics,
                          nv.nvml.nvmlDeviceGetGraphicsRunningProcesses);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_v2_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetGraphicsRunningProcesses_v2, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kGraphics,
                          nv.nvml.nvmlDeviceGetGraphicsRunningProcesses_v2);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetGraphicsRunningProcesses_v3, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kGraphics,
                          nv.nvml.nvmlDeviceGetGraphicsRunningProcesses_v3);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v1_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetMPSComputeRunningProcesses, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kMps,
                          nv.nvml.nvmlDeviceGetMPSComputeRunningProcesses);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device,
                                                        unsigned int* infoCount,
                                                        nvmlProcessInfo_v2_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetMPSComputeRunningProcesses_v2, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kMps,
                          nv.nvml.nvmlDeviceGetMPSComputeRunningProcesses_v2);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                        unsigned int* infoCount,
                                                        nvmlProcessInfo_t* infos) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetMPSComputeRunningProcesses_v3, device, infoCount, infos);
  return RunningProcesses(rt, device, infoCount, infos, Work::kMps,
                          nv.nvml.nvmlDeviceGetMPSComputeRunningProcesses_v3);
}

// The same list in the detail layout. The request's mode is the driver's to check; a request
// of a version whose layout we do not know (none newer exists yet) is the driver's alone.
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                   nvmlProcessDetailList_t* plist) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetRunningProcessDetailList, device, plist);
  if (plist == nullptr || plist->version != nvmlProcessDetailList_v1) {
    return nv.nvml.nvmlDeviceGetRunningProcessDetailList(device, plist);
  }
  const nvmlProcessDetailList_t request = *plist;
  auto real = [&](nvmlDevice_t d, unsigned int* n, nvmlProcessDetail_v1_t* array) {
    nvmlProcessDetailList_t list = request;
    list.numProcArrayEntries = *n;
    list.procArray = array;
    nvmlReturn_t r = nv.nvml.nvmlDeviceGetRunningProcessDetailList(d, &list);
    *n = list.numProcArrayEntries;
    return r;
  };
  Work work = request.mode == NVML_PROCESS_MODE_COMPUTE    ? Work::kCompute
              : request.mode == NVML_PROCESS_MODE_GRAPHICS ? Work::kGraphics
                                                           : Work::kMps;
  unsigned int count = request.numProcArrayEntries;
  nvmlReturn_t r = RunningProcesses(rt, device, &count, request.procArray, work, real);
  if (r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE) plist->numProcArrayEntries = count;
  return r;
}

// ---- per-process utilization (see ProcessSamples) and accounting (see AccountingPids) ----

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetProcessUtilization, device, utilization, processSamplesCount,
                     lastSeenTimeStamp);
  if (processSamplesCount == nullptr) {
    return nv.nvml.nvmlDeviceGetProcessUtilization(device, utilization, processSamplesCount,
                                                   lastSeenTimeStamp);
  }
  return ProcessSamples(rt, device, processSamplesCount, utilization,
                        [&](unsigned* n, nvmlProcessUtilizationSample_t* a) {
                          return nv.nvml.nvmlDeviceGetProcessUtilization(device, a, n,
                                                                         lastSeenTimeStamp);
                        });
}

// The same samples in the newer layout. As for the detail list, a request of a version whose
// layout we do not know (none newer exists yet) is the driver's alone.
nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                   nvmlProcessesUtilizationInfo_t* info) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetProcessesUtilizationInfo, device, info);
  if (info == nullptr || info->version != nvmlProcessesUtilizationInfo_v1) {
    return nv.nvml.nvmlDeviceGetProcessesUtilizationInfo(device, info);
  }
  const nvmlProcessesUtilizationInfo_t request = *info;
  unsigned int count = request.processSamplesCount;
  nvmlReturn_t r = ProcessSamples(
      rt, device, &count, request.procUtilArray,
      [&](unsigned* n, nvmlProcessUtilizationInfo_v1_t* a) {
        nvmlProcessesUtilizationInfo_t asked = request;
        asked.processSamplesCount = *n;
        asked.procUtilArray = a;
        nvmlReturn_t got = nv.nvml.nvmlDeviceGetProcessesUtilizationInfo(device, &asked);
        *n = asked.processSamplesCount;
        return got;
      });
  if (r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE) info->processSamplesCount = count;
  return r;
}

nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int* count,
                                         unsigned int* pids) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetAccountingPids, device, count, pids);
  return AccountingPids(rt, device, count, pids, nv.nvml.nvmlDeviceGetAccountingPids);
}

nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid,
                                          nvmlAccountingStats_t* stats) {
  HAMI_NVML_PROLOGUE(nvmlDeviceGetAccountingStats, device, pid, stats);
  return AccountingStats(rt, device, pid, stats, nv.nvml.nvmlDeviceGetAccountingStats);
}

}  // extern "C"
