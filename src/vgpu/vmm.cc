#include "vgpu/vmm.h"

namespace hami::vgpu {

int PhysicalDevice(const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return -1;
  return prop->location.id;
}

}  // namespace hami::vgpu
