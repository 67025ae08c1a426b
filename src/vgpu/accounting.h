// Memory admission and accounting against the container's shared region.
//
// Every allocation family follows one rule: reserve in the region *before* the driver
// allocates (so concurrent processes can never pass the limit together), release when the
// driver fails or the memory is freed. What a family charges is documented with its wrapper;
// for linear memory the charge follows how the driver itself hands out memory: an allocation
// larger than half the allocation granularity (2 MiB on current GPUs) is charged rounded up
// to whole granules; smaller ones share granule pages per context and device, and a page is
// charged while anything uses it. A context's own memory is measured once per device and
// charged per context, counted against the budget but never refused.
//
// Calls that cannot be accounted (no current context, NULL output pointers, a zero size) go
// straight to the driver, which gives its own error. Freeing a pointer we do not know goes
// to the driver and returns its result.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "vgpu/runtime.h"

namespace hami::vgpu {

// The charge of an allocation, computed and recorded (for small ones, the page share)
// before the driver is asked.
struct Charge {
  int device = -1;
  CUcontext ctx = nullptr;
  uint64_t reserved = 0;  // bytes reserved in the region for this allocation now
  uint64_t size = 0;      // what the allocation counts for (small: rounded to 512 bytes)
  bool small = false;
};

// Reserves for `bytes` of `kind` on the current context's device. CUDA_ERROR_OUT_OF_MEMORY
// past the limit; the driver's error when there is no current context; CUDA_SUCCESS with
// charge->device == -1 when there is nothing to account against (no region).
CUresult Reserve(uint64_t bytes, region::UsageKind kind, Charge* charge);
// Undoes Reserve (the driver call failed).
void Unreserve(const Charge& charge, region::UsageKind kind);
// Records a successful allocation at `ptr`.
void Track(CUdeviceptr ptr, const Charge& charge, region::UsageKind kind);
// Forgets `ptr` and releases its charge; false if it was not ours.
bool Forget(CUdeviceptr ptr);
// Whether `ptr` is an allocation we track.
bool Tracked(CUdeviceptr ptr);

// Reserve + driver call + Track, for calls that produce one device pointer.
template <typename Call>
CUresult AdmitAllocation(CUdeviceptr* dptr, uint64_t bytes, region::UsageKind kind, Call call) {
  if (dptr == nullptr || bytes == 0) return call();
  Charge charge;
  CUresult r = Reserve(bytes, kind, &charge);
  if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_INITIALIZED ||
      r == CUDA_ERROR_CONTEXT_IS_DESTROYED) {
    return call();  // the driver's own answer for a thread without a usable context
  }
  if (r != CUDA_SUCCESS) return r;
  r = call();
  if (r != CUDA_SUCCESS) {
    Unreserve(charge, kind);
    return r;
  }
  Track(*dptr, charge, kind);
  return CUDA_SUCCESS;
}

// Driver call, then release what `ptr` held (unknown pointers: the driver's result alone).
template <typename Call>
CUresult FreeAllocation(CUdeviceptr ptr, Call call) {
  CUresult r = call();
  if (r == CUDA_SUCCESS) Forget(ptr);
  return r;
}

// Contexts: charge a newly created context (primary or not).
template <typename Call>
CUresult CreateContext(CUdevice dev, CUcontext* pctx, bool primary, Call call);
// A primary context may have gone (last release, reset): release it if so.
void PrimaryMayHaveEnded(CUdevice dev);
// A context was destroyed: release its charge and everything allocated in it.
void ContextEnded(CUcontext ctx);

// ---- implementation details of CreateContext ----
bool PrimaryActive(CUdevice dev);
// NVML's memory used on CUDA device `dev`, or UINT64_MAX when unknown.
uint64_t DeviceUsedBytes(CUdevice dev);
void ChargeContext(CUdevice dev, CUcontext ctx, bool primary, uint64_t used_before);

template <typename Call>
CUresult CreateContext(CUdevice dev, CUcontext* pctx, bool primary, Call call) {
  if (pctx == nullptr || (primary && PrimaryActive(dev))) return call();
  uint64_t before = DeviceUsedBytes(dev);
  CUresult r = call();
  if (r == CUDA_SUCCESS) ChargeContext(dev, *pctx, primary, before);
  return r;
}

}  // namespace hami::vgpu
