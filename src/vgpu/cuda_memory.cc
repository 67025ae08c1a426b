// Device memory: admission before the driver allocates, release when it frees.
#include "vgpu/accounting.h"
#include "vgpu/runtime.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT
using hami::region::UsageKind;

namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// Pitched memory: the driver picks the pitch, so reserve for the widest it may choose
// (the width rounded to 512 bytes per row), then settle on the real pitch x height.
template <typename Size, typename Call>
CUresult AllocPitch(CUdeviceptr* dptr, Size* pitch, uint64_t width, uint64_t height, Call call) {
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) return call();
  uint64_t estimate = RoundUp(width, 512) * height;
  Charge charge;
  if (CUresult r = Reserve(estimate, UsageKind::kData, &charge); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return r;
    return call();
  }
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    Unreserve(charge, UsageKind::kData);
    return r;
  }
  uint64_t actual = uint64_t(*pitch) * height;
  if (charge.device >= 0 && actual > charge.size) {
    // Wider than estimated (rare): charge the real size, or give the memory back.
    Unreserve(charge, UsageKind::kData);
    if (Reserve(actual, UsageKind::kData, &charge) != CUDA_SUCCESS) {
      if (const CudaDriver* d = CudaIfLoaded()) d->cuda.cuMemFree_v2(*dptr);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  Track(*dptr, charge, UsageKind::kData);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

// Linear memory: charged as the driver hands it out (see accounting.h).
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAlloc_v2, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuMemAlloc_v2(dptr, bytesize);
  return AdmitAllocation(dptr, bytesize, UsageKind::kData,
                         [&] { return drv.cuda.cuMemAlloc_v2(dptr, bytesize); });
}

// The 32-bit ABI: the same rule.
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAlloc, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested() || dptr == nullptr) return drv.cuda.cuMemAlloc(dptr, bytesize);
  CUdeviceptr wide = 0;
  return AdmitAllocation(&wide, bytesize, UsageKind::kData, [&] {
    CUresult r = drv.cuda.cuMemAlloc(dptr, bytesize);
    wide = *dptr;
    return r;
  });
}

// Managed memory: charged like device memory (it is resident on the device when used).
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAllocManaged, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuMemAllocManaged(dptr, bytesize, flags);
  return AdmitAllocation(dptr, bytesize, UsageKind::kData,
                         [&] { return drv.cuda.cuMemAllocManaged(dptr, bytesize, flags); });
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAllocPitch_v2, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] {
    return drv.cuda.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  };
  if (scope.nested()) return call();
  return AllocPitch(dptr, pPitch, WidthInBytes, Height, call);
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch,
                                 unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAllocPitch, CUDA_ERROR_NOT_INITIALIZED);
  CUdeviceptr wide = 0;
  auto call = [&] {
    CUresult r = drv.cuda.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r == CUDA_SUCCESS) wide = *dptr;
    return r;
  };
  if (scope.nested() || dptr == nullptr) return call();
  return AllocPitch(&wide, pPitch, WidthInBytes, Height, call);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemFree_v2, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuMemFree_v2(dptr);
  return FreeAllocation(dptr, [&] { return drv.cuda.cuMemFree_v2(dptr); });
}

CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemFree, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuMemFree(dptr);
  return FreeAllocation(dptr, [&] { return drv.cuda.cuMemFree(dptr); });
}

}  // extern "C"
