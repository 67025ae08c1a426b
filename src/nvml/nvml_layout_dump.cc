// Prints the layout of every struct src/nvml/nvml.h declares, as the compiler lays it out:
//   size <struct> <bytes>
//   field <struct> <field> <offset> <bytes>
// nvml_layout_test.py compares it with pynvml's ctypes structures, an independent reading of
// the same ABI, and checks against nvml.h's text that no struct or field is missing here.
#include <cstddef>
#include <cstdio>

#include "nvml/nvml.h"

namespace {

#define HAMI_LAYOUT_SIZE(S) std::printf("size %s %zu\n", #S, sizeof(S))
#define HAMI_LAYOUT_FIELD(S, f) \
  std::printf("field %s %s %zu %zu\n", #S, #f, offsetof(S, f), sizeof(S::f))

void PrintLayouts() {
  HAMI_LAYOUT_SIZE(nvmlMemory_t);
  HAMI_LAYOUT_FIELD(nvmlMemory_t, total);
  HAMI_LAYOUT_FIELD(nvmlMemory_t, free);
  HAMI_LAYOUT_FIELD(nvmlMemory_t, used);

  HAMI_LAYOUT_SIZE(nvmlMemory_v2_t);
  HAMI_LAYOUT_FIELD(nvmlMemory_v2_t, version);
  HAMI_LAYOUT_FIELD(nvmlMemory_v2_t, total);
  HAMI_LAYOUT_FIELD(nvmlMemory_v2_t, reserved);
  HAMI_LAYOUT_FIELD(nvmlMemory_v2_t, free);
  HAMI_LAYOUT_FIELD(nvmlMemory_v2_t, used);

  HAMI_LAYOUT_SIZE(nvmlUtilization_t);
  HAMI_LAYOUT_FIELD(nvmlUtilization_t, gpu);
  HAMI_LAYOUT_FIELD(nvmlUtilization_t, memory);

  HAMI_LAYOUT_SIZE(nvmlBAR1Memory_t);
  HAMI_LAYOUT_FIELD(nvmlBAR1Memory_t, bar1Total);
  HAMI_LAYOUT_FIELD(nvmlBAR1Memory_t, bar1Free);
  HAMI_LAYOUT_FIELD(nvmlBAR1Memory_t, bar1Used);

  HAMI_LAYOUT_SIZE(nvmlProcessInfo_v1_t);
  HAMI_LAYOUT_FIELD(nvmlProcessInfo_v1_t, pid);
  HAMI_LAYOUT_FIELD(nvmlProcessInfo_v1_t, usedGpuMemory);

  HAMI_LAYOUT_SIZE(nvmlProcessInfo_v2_t);
  HAMI_LAYOUT_FIELD(nvmlProcessInfo_v2_t, pid);
  HAMI_LAYOUT_FIELD(nvmlProcessInfo_v2_t, usedGpuMemory);
  HAMI_LAYOUT_FIELD(nvmlProcessInfo_v2_t, gpuInstanceId);
  HAMI_LAYOUT_FIELD(nvmlProcessInfo_v2_t, computeInstanceId);

  HAMI_LAYOUT_SIZE(nvmlProcessDetail_v1_t);
  HAMI_LAYOUT_FIELD(nvmlProcessDetail_v1_t, pid);
  HAMI_LAYOUT_FIELD(nvmlProcessDetail_v1_t, usedGpuMemory);
  HAMI_LAYOUT_FIELD(nvmlProcessDetail_v1_t, gpuInstanceId);
  HAMI_LAYOUT_FIELD(nvmlProcessDetail_v1_t, computeInstanceId);
  HAMI_LAYOUT_FIELD(nvmlProcessDetail_v1_t, usedGpuCcProtectedMemory);

  HAMI_LAYOUT_SIZE(nvmlProcessDetailList_v1_t);
  HAMI_LAYOUT_FIELD(nvmlProcessDetailList_v1_t, version);
  HAMI_LAYOUT_FIELD(nvmlProcessDetailList_v1_t, mode);
  HAMI_LAYOUT_FIELD(nvmlProcessDetailList_v1_t, numProcArrayEntries);
  HAMI_LAYOUT_FIELD(nvmlProcessDetailList_v1_t, procArray);

  HAMI_LAYOUT_SIZE(nvmlProcessUtilizationSample_t);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationSample_t, pid);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationSample_t, timeStamp);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationSample_t, smUtil);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationSample_t, memUtil);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationSample_t, encUtil);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationSample_t, decUtil);

  HAMI_LAYOUT_SIZE(nvmlProcessUtilizationInfo_v1_t);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationInfo_v1_t, timeStamp);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationInfo_v1_t, pid);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationInfo_v1_t, smUtil);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationInfo_v1_t, memUtil);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationInfo_v1_t, encUtil);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationInfo_v1_t, decUtil);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationInfo_v1_t, jpgUtil);
  HAMI_LAYOUT_FIELD(nvmlProcessUtilizationInfo_v1_t, ofaUtil);

  HAMI_LAYOUT_SIZE(nvmlProcessesUtilizationInfo_v1_t);
  HAMI_LAYOUT_FIELD(nvmlProcessesUtilizationInfo_v1_t, version);
  HAMI_LAYOUT_FIELD(nvmlProcessesUtilizationInfo_v1_t, processSamplesCount);
  HAMI_LAYOUT_FIELD(nvmlProcessesUtilizationInfo_v1_t, lastSeenTimeStamp);
  HAMI_LAYOUT_FIELD(nvmlProcessesUtilizationInfo_v1_t, procUtilArray);

  HAMI_LAYOUT_SIZE(nvmlAccountingStats_t);
  HAMI_LAYOUT_FIELD(nvmlAccountingStats_t, gpuUtilization);
  HAMI_LAYOUT_FIELD(nvmlAccountingStats_t, memoryUtilization);
  HAMI_LAYOUT_FIELD(nvmlAccountingStats_t, maxMemoryUsage);
  HAMI_LAYOUT_FIELD(nvmlAccountingStats_t, time);
  HAMI_LAYOUT_FIELD(nvmlAccountingStats_t, startTime);
  HAMI_LAYOUT_FIELD(nvmlAccountingStats_t, isRunning);
  HAMI_LAYOUT_FIELD(nvmlAccountingStats_t, reserved);

  HAMI_LAYOUT_SIZE(nvmlPciInfo_t);
  HAMI_LAYOUT_FIELD(nvmlPciInfo_t, busIdLegacy);
  HAMI_LAYOUT_FIELD(nvmlPciInfo_t, domain);
  HAMI_LAYOUT_FIELD(nvmlPciInfo_t, bus);
  HAMI_LAYOUT_FIELD(nvmlPciInfo_t, device);
  HAMI_LAYOUT_FIELD(nvmlPciInfo_t, pciDeviceId);
  HAMI_LAYOUT_FIELD(nvmlPciInfo_t, pciSubSystemId);
  HAMI_LAYOUT_FIELD(nvmlPciInfo_t, busId);

  HAMI_LAYOUT_SIZE(hamiNvmlPciInfoLegacy_t);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, busId);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, domain);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, bus);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, device);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, pciDeviceId);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, pciSubSystemId);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, reserved0);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, reserved1);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, reserved2);
  HAMI_LAYOUT_FIELD(hamiNvmlPciInfoLegacy_t, reserved3);

  HAMI_LAYOUT_SIZE(nvmlEventData_t);
  HAMI_LAYOUT_FIELD(nvmlEventData_t, device);
  HAMI_LAYOUT_FIELD(nvmlEventData_t, eventType);
  HAMI_LAYOUT_FIELD(nvmlEventData_t, eventData);
  HAMI_LAYOUT_FIELD(nvmlEventData_t, gpuInstanceId);
  HAMI_LAYOUT_FIELD(nvmlEventData_t, computeInstanceId);

  HAMI_LAYOUT_SIZE(hamiNvmlEventDataLegacy_t);
  HAMI_LAYOUT_FIELD(hamiNvmlEventDataLegacy_t, device);
  HAMI_LAYOUT_FIELD(hamiNvmlEventDataLegacy_t, eventType);
  HAMI_LAYOUT_FIELD(hamiNvmlEventDataLegacy_t, eventData);
}

}  // namespace

int main() {
  PrintLayouts();
  return std::fflush(stdout) == 0 ? 0 : 1;
}
