#include "vgpu/views.h"

#include <algorithm>
#include <cstdint>

#include "vgpu/runtime.h"

namespace hami::vgpu {

CUresult ContainerMemInfo(Runtime& rt, size_t* free_bytes, size_t* total_bytes,
                          CUresult real_result) {
  if (real_result != CUDA_SUCCESS || free_bytes == nullptr || total_bytes == nullptr) {
    return real_result;
  }
  int dev;
  if (CurrentDevice(rt, &dev) != CUDA_SUCCESS) return real_result;
  uint64_t total, free;
  if (LimitedView(rt, dev, *total_bytes, *free_bytes, &total, &free)) {
    *total_bytes = size_t(total);
    *free_bytes = size_t(free);
  }
  return CUDA_SUCCESS;
}

size_t ContainerTotalMem(Runtime& rt, CUdevice dev, size_t physical_total) {
  const uint64_t limit = LimitOf(rt, dev);
  return limit == 0 ? physical_total : size_t(std::min<uint64_t>(limit, physical_total));
}

}  // namespace hami::vgpu
