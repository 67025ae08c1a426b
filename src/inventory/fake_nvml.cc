// A stand-in libnvidia-ml.so.1 for the inventory's tests: two devices whose queries can be
// made to fail, one by one, to exercise what the simulated GPU never does.
//   HAMI_FAKE_NVML_INIT=fail          nvmlInit_v2 returns NVML_ERROR_DRIVER_NOT_LOADED
//   HAMI_FAKE_NVML_FAIL=<call>:<i>    <call> (e.g. nvmlDeviceGetMemoryInfo) returns
//                                     NVML_ERROR_GPU_IS_LOST for device i
//   HAMI_FAKE_NVML_NO_NUMA=1          nvmlDeviceGetNumaNodeId is not supported
// Device 0 is MIG-capable (disabled), device 1 reports MIG enabled.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nvml/nvml.h"

struct nvmlDevice_st {
  unsigned index;
};

namespace {

nvmlDevice_st g_devices[2] = {{0}, {1}};
int g_refs = 0;

bool Fails(const char* call, const nvmlDevice_st* d) {
  const char* f = std::getenv("HAMI_FAKE_NVML_FAIL");
  return f != nullptr && std::string(f) == std::string(call) + ":" + std::to_string(d->index);
}

nvmlReturn_t Check(nvmlDevice_t d) {
  if (g_refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (d != &g_devices[0] && d != &g_devices[1]) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

}  // namespace

#define HAMI_FAKE_CHECK(call, d)                              \
  if (nvmlReturn_t r = Check(d); r != NVML_SUCCESS) return r; \
  if (Fails(call, d)) return NVML_ERROR_GPU_IS_LOST

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  const char* init = std::getenv("HAMI_FAKE_NVML_INIT");
  if (init != nullptr && std::strcmp(init, "fail") == 0) return NVML_ERROR_DRIVER_NOT_LOADED;
  ++g_refs;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  if (g_refs == 0) return NVML_ERROR_UNINITIALIZED;
  --g_refs;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  std::snprintf(version, length, "%s", "999.1");
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (g_refs == 0) return NVML_ERROR_UNINITIALIZED;
  *count = 2;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (g_refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (index >= 2) return NVML_ERROR_INVALID_ARGUMENT;
  if (Fails("nvmlDeviceGetHandleByIndex_v2", &g_devices[index])) return NVML_ERROR_GPU_IS_LOST;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int length) {
  HAMI_FAKE_CHECK("nvmlDeviceGetUUID", d);
  std::snprintf(uuid, length, "GPU-00000000-0000-0000-0000-00000000000%u", d->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int length) {
  HAMI_FAKE_CHECK("nvmlDeviceGetName", d);
  std::snprintf(name, length, "Fake GPU %u", d->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* memory) {
  HAMI_FAKE_CHECK("nvmlDeviceGetMemoryInfo", d);
  memory->total = (16ull << 30) * (d->index + 1);
  memory->free = memory->total;
  memory->used = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  HAMI_FAKE_CHECK("nvmlDeviceGetPciInfo_v3", d);
  *pci = nvmlPciInfo_t{};
  pci->domain = 0;
  pci->bus = 0x3b + d->index;
  pci->device = 0;
  std::snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", pci->bus);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major, int* minor) {
  HAMI_FAKE_CHECK("nvmlDeviceGetCudaComputeCapability", d);
  *major = 9;
  *minor = int(d->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int* node) {
  HAMI_FAKE_CHECK("nvmlDeviceGetNumaNodeId", d);
  const char* no = std::getenv("HAMI_FAKE_NVML_NO_NUMA");
  if (no != nullptr && std::strcmp(no, "1") == 0) return NVML_ERROR_NOT_SUPPORTED;
  *node = d->index;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current, unsigned int* pending) {
  HAMI_FAKE_CHECK("nvmlDeviceGetMigMode", d);
  *current = *pending = d->index == 1 ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}

}  // extern "C"
