#include "vgpu/modules.h"

namespace hami::vgpu {

bool BeginLoad(Runtime& rt, LoadScope scope, LoadWindow* w) {
  if (rt.CudaOrEmpty().cuda.cuMemGetInfo_v2 == nullptr) return false;
  CUcontext ctx = nullptr;
  if (CurrentDevice(rt, &w->device, &ctx) != CUDA_SUCCESS) return false;
  w->ctx = scope == LoadScope::kContext ? ctx : nullptr;
  return true;
}

void ReadBefore(Runtime& rt, LoadWindow* w) {
  size_t total = 0;
  w->calls = rt.allocation_calls.Read();
  // Nothing allocating or freeing may be in flight while the load is measured.
  w->measured = w->calls.in_flight == 0 &&
                rt.CudaOrEmpty().cuda.cuMemGetInfo_v2(&w->before, &total) == CUDA_SUCCESS;
}

void ReadAfter(Runtime& rt, LoadWindow* w) {
  size_t after = 0, total = 0;
  // Nothing else of this process allocated or freed in between (none in flight, none begun).
  w->measured = w->measured &&
                rt.CudaOrEmpty().cuda.cuMemGetInfo_v2(&after, &total) == CUDA_SUCCESS &&
                rt.allocation_calls.Read() == w->calls;
  w->bytes = w->measured && after < w->before ? w->before - after : 0;
}

void RefuseLazyLoad(int device, uint64_t bytes) {
  g_log.Log(LogLevel::kError,
            "kernel code loaded into a context on device %d took %llu bytes past the memory "
            "limit (the driver loads it at first use, before it can be admitted): recorded, and "
            "the call fails with CUDA_ERROR_OUT_OF_MEMORY",
            device, static_cast<unsigned long long>(bytes));
}

}  // namespace hami::vgpu
