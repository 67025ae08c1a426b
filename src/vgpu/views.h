// What the container is shown of device memory through CUDA (NVML's views are nvml_entry.cc's,
// over the same LimitedView).
//
// cuMemGetInfo gives the current context's device as LimitedView (runtime.h) computes it:
// total = min(limit, physical), free = min(physical free, total - what the container uses).
// cuDeviceTotalMem gives min(limit, physical). A device without a limit, or a driver error,
// is the driver's answer as it is.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace hami::vgpu {

struct Runtime;

// After the driver's cuMemGetInfo returned `real_result` with the physical figures in
// `*free_bytes` and `*total_bytes`: the container's figures in their place.
CUresult ContainerMemInfo(Runtime& rt, size_t* free_bytes, size_t* total_bytes,
                          CUresult real_result);

// The container's total memory of CUDA device `dev`, given its physical total.
size_t ContainerTotalMem(Runtime& rt, CUdevice dev, size_t physical_total);

}  // namespace hami::vgpu
