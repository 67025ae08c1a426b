// Device memory: the hooks (the policy is accounting.h: admission before the driver
// allocates, release when it frees).
#include "vgpu/accounting.h"
#include "vgpu/imports.h"
#include "vgpu/prologue.h"
#include "vgpu/spill.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT
using hami::region::UsageKind;

extern "C" {

// Linear memory: charged as the driver hands it out (see accounting.h). Refused by the device
// budget (the driver not asked), it may be served from host memory (spill.h).
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  HAMI_CUDA_PROLOGUE(cuMemAlloc_v2, dptr, bytesize);
  bool asked = false;
  CUresult r = AdmitAllocation(rt, dptr, bytesize, UsageKind::kData, [&] {
    asked = true;
    return drv.cuda.cuMemAlloc_v2(dptr, bytesize);
  });
  if (r == CUDA_ERROR_OUT_OF_MEMORY && !asked && rt.config.oversubscribe) {
    r = SpillAllocation(rt, dptr, bytesize);
  }
  return r;
}

// The 32-bit ABI: the same rule.
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  HAMI_CUDA_PROLOGUE(cuMemAlloc, dptr, bytesize);
  if (dptr == nullptr) return drv.cuda.cuMemAlloc(dptr, bytesize);
  CUdeviceptr wide = 0;
  return AdmitAllocation(rt, &wide, bytesize, UsageKind::kData, [&] {
    CUresult r = drv.cuda.cuMemAlloc(dptr, bytesize);
    wide = *dptr;
    return r;
  });
}

// Managed memory: charged like device memory (it is resident on the device when used).
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  HAMI_CUDA_PROLOGUE(cuMemAllocManaged, dptr, bytesize, flags);
  return AdmitAllocation(rt, dptr, bytesize, UsageKind::kData,
                         [&] { return drv.cuda.cuMemAllocManaged(dptr, bytesize, flags); });
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes) {
  HAMI_CUDA_PROLOGUE(cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  bool asked = false;
  CUresult r = AllocPitch(rt, dptr, pPitch, WidthInBytes, Height, [&] {
    asked = true;
    return drv.cuda.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  });
  if (r == CUDA_ERROR_OUT_OF_MEMORY && !asked && rt.config.oversubscribe &&
      (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16)) {
    // The widest pitch the driver may choose, as the reservation assumed.
    const uint64_t pitch = RoundUp(WidthInBytes, kPitchAlign);
    r = SpillAllocation(rt, dptr, SaturatingMul(pitch, Height));
    if (r == CUDA_SUCCESS) *pPitch = size_t(pitch);
  }
  return r;
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch,
                                 unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes) {
  HAMI_CUDA_PROLOGUE(cuMemAllocPitch, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  if (dptr == nullptr) {
    return drv.cuda.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  }
  CUdeviceptr wide = 0;
  return AllocPitch(rt, &wide, pPitch, WidthInBytes, Height, [&] {
    CUresult r = drv.cuda.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r == CUDA_SUCCESS) wide = *dptr;
    return r;
  });
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  HAMI_CUDA_PROLOGUE(cuMemFree_v2, dptr);
  if (CUresult spilled = CUDA_SUCCESS; FreeIfSpilled(rt, dptr, &spilled)) return spilled;
  CUresult r = FreeAllocation(rt, dptr, [&] { return drv.cuda.cuMemFree_v2(dptr); });
  if (r == CUDA_SUCCESS) ForgetImportedPointer(rt, dptr);  // a pool pointer imported here
  return r;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr) {
  HAMI_CUDA_PROLOGUE(cuMemFree, dptr);
  return FreeAllocation(rt, dptr, [&] { return drv.cuda.cuMemFree(dptr); });
}

}  // extern "C"
