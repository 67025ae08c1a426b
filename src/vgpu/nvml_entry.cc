// NVML as the container should see it: only its visible devices, in CUDA's order, and its
// memory limits, in the same numbers cuMemGetInfo gives.
#include <algorithm>
#include <cstring>

#include "vgpu/runtime.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace {

// The CUDA ordinal of an NVML handle, or -1 when the container does not see that device.
int OrdinalOf(nvmlDevice_t h, const std::vector<VisibleDevice>& devices) {
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].nvml == h) return int(i);
  }
  return -1;
}

nvmlReturn_t AfterInit(nvmlReturn_t r) {
  if (r == NVML_SUCCESS) {
    VisibleDevicesForNvml();
    EnsureRegion();
  }
  return r;
}

nvmlReturn_t Count(unsigned int* count, nvmlReturn_t r) {
  if (r != NVML_SUCCESS || count == nullptr) return r;
  *count = unsigned(VisibleDevicesForNvml().size());
  return r;
}

template <typename GetByIndex>
nvmlReturn_t ByIndex(unsigned int index, nvmlDevice_t* device, GetByIndex get) {
  if (device == nullptr) return get(index);
  std::vector<VisibleDevice> devices = VisibleDevicesForNvml();
  if (index >= devices.size() || devices[index].nvml_index < 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return get(unsigned(devices[index].nvml_index));
}

// Handles found another way (UUID, PCI bus id) must name a visible device.
nvmlReturn_t OnlyVisible(nvmlReturn_t r, nvmlDevice_t* device) {
  if (r != NVML_SUCCESS || device == nullptr) return r;
  return OrdinalOf(*device, VisibleDevicesForNvml()) >= 0 ? r : NVML_ERROR_NOT_FOUND;
}

// The container's view of a visible device's memory (see LimitedView).
bool Limited(nvmlDevice_t h, uint64_t physical_total, uint64_t physical_free, uint64_t* total,
             uint64_t* free) {
  int ordinal = OrdinalOf(h, VisibleDevicesForNvml());
  return ordinal >= 0 && LimitedView(ordinal, physical_total, physical_free, total, free);
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  HAMI_NVML_REAL(nvmlInit_v2);
  return AfterInit(rt.nvml.nvmlInit_v2());
}

nvmlReturn_t nvmlInit(void) {
  HAMI_NVML_REAL(nvmlInit);
  return AfterInit(rt.nvml.nvmlInit());
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  HAMI_NVML_REAL(nvmlInitWithFlags);
  return AfterInit(rt.nvml.nvmlInitWithFlags(flags));
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  HAMI_NVML_REAL(nvmlDeviceGetCount_v2);
  return Count(count, rt.nvml.nvmlDeviceGetCount_v2(count));
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  HAMI_NVML_REAL(nvmlDeviceGetCount);
  return Count(count, rt.nvml.nvmlDeviceGetCount(count));
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  HAMI_NVML_REAL(nvmlDeviceGetHandleByIndex_v2);
  return ByIndex(index, device,
                 [&](unsigned i) { return rt.nvml.nvmlDeviceGetHandleByIndex_v2(i, device); });
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  HAMI_NVML_REAL(nvmlDeviceGetHandleByIndex);
  return ByIndex(index, device,
                 [&](unsigned i) { return rt.nvml.nvmlDeviceGetHandleByIndex(i, device); });
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  HAMI_NVML_REAL(nvmlDeviceGetHandleByUUID);
  return OnlyVisible(rt.nvml.nvmlDeviceGetHandleByUUID(uuid, device), device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  HAMI_NVML_REAL(nvmlDeviceGetHandleByPciBusId_v2);
  return OnlyVisible(rt.nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id, device), device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  HAMI_NVML_REAL(nvmlDeviceGetHandleByPciBusId);
  return OnlyVisible(rt.nvml.nvmlDeviceGetHandleByPciBusId(bus_id, device), device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  HAMI_NVML_REAL(nvmlDeviceGetIndex);
  nvmlReturn_t r = rt.nvml.nvmlDeviceGetIndex(device, index);
  if (r != NVML_SUCCESS || index == nullptr) return r;
  int ordinal = OrdinalOf(device, VisibleDevicesForNvml());
  if (ordinal < 0) return NVML_ERROR_NOT_FOUND;
  *index = unsigned(ordinal);
  return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  HAMI_NVML_REAL(nvmlDeviceGetMemoryInfo);
  nvmlReturn_t r = rt.nvml.nvmlDeviceGetMemoryInfo(device, memory);
  if (r != NVML_SUCCESS || memory == nullptr) return r;
  uint64_t total, free;
  if (Limited(device, memory->total, memory->free, &total, &free)) {
    memory->total = total;
    memory->free = free;
    memory->used = total - free;
  }
  return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  HAMI_NVML_REAL(nvmlDeviceGetMemoryInfo_v2);
  nvmlReturn_t r = rt.nvml.nvmlDeviceGetMemoryInfo_v2(device, memory);
  if (r != NVML_SUCCESS || memory == nullptr) return r;
  uint64_t total, free;
  // The physical total less the driver's reservation is what CUDA calls total.
  uint64_t usable = memory->total > memory->reserved ? memory->total - memory->reserved : 0;
  if (Limited(device, usable, memory->free, &total, &free)) {
    memory->total = total;
    memory->reserved = 0;
    memory->free = free;
    memory->used = total - free;
  }
  return r;
}

}  // extern "C"
