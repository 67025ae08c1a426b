// Entry points of the CUDA driver API: initialization, symbol lookup through
// cuGetProcAddress, the memory views, and contexts.
#include <algorithm>

#include "common/clock.h"
#include "vgpu/accounting.h"
#include "vgpu/identity.h"
#include "vgpu/runtime.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace {

// Substitutes our wrapper for the pointer the driver's own cuGetProcAddress returned, so
// that whichever ABI the driver chose for the requested version and flags, the caller gets
// the wrapper of that same ABI: the hook whose real function it is, or else (a driver that
// hands out internal entry points) the ABI the toolkit's table gives for that version.
// Functions we do not intercept are returned as they are.
void SubstituteWrapper(const char* symbol, int cuda_version, cuuint64_t flags, void** pfn) {
  if (pfn == nullptr || *pfn == nullptr) return;
  for (const HookInfo& h : AllHooks()) {
    if (h.cuda && RealOf(h) == *pfn) {
      *pfn = WrapperOf(h);
      return;
    }
  }
  if (symbol == nullptr) return;
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  if (const HookInfo* h = HookForProc(symbol, cuda_version, per_thread); h != nullptr) {
    *pfn = WrapperOf(*h);
  }
}

CUresult MemGetInfo(size_t* free_bytes, size_t* total_bytes, CUresult real_result) {
  if (real_result != CUDA_SUCCESS) return real_result;
  int dev;
  if (CurrentDevice(&dev) != CUDA_SUCCESS) return real_result;
  uint64_t total, free;
  if (LimitedView(dev, *total_bytes, *free_bytes, &total, &free)) {
    *total_bytes = size_t(total);
    *free_bytes = size_t(free);
  }
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned int Flags) {
  HookScope scope;
  // No driver at all: the driver's own "no device" answer, never a crash.
  HAMI_CUDA_REAL(cuInit, CUDA_ERROR_NO_DEVICE);
  if (!scope.nested()) BeginIdentity();
  CUresult r = drv.cuda.cuInit(Flags);
  if (r == CUDA_SUCCESS && !scope.nested()) {
    Rt().cuda_initialized.store(true, std::memory_order_release);
    LearnDevicesFromCuda();
    // The one place a CUDA process joins its region.
    if (JoinRegion() == JoinState::kJoined) ResolveIdentity(true);  // the probe, if needed
  }
  return r;
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGetProcAddress, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS) SubstituteWrapper(symbol, cudaVersion, flags, pfn);
  return r;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGetProcAddress_v2, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
  if (r == CUDA_SUCCESS) SubstituteWrapper(symbol, cudaVersion, flags, pfn);
  return r;
}

// ---- views ----

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemGetInfo_v2, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuMemGetInfo_v2(free, total);
  if (scope.nested()) return r;
  return MemGetInfo(free, total, r);
}

CUresult CUDAAPI cuMemGetInfo(unsigned int* free, unsigned int* total) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemGetInfo, CUDA_ERROR_NOT_INITIALIZED);
  if (free == nullptr || total == nullptr || drv.cuda.cuMemGetInfo_v2 == nullptr) {
    return drv.cuda.cuMemGetInfo(free, total);
  }
  // The same view through the 64-bit call, then narrowed as the old ABI does.
  size_t f = 0, t = 0;
  CUresult r = drv.cuda.cuMemGetInfo_v2(&f, &t);
  if (!scope.nested()) r = MemGetInfo(&f, &t, r);
  if (r == CUDA_SUCCESS) {
    *free = unsigned(std::min<size_t>(f, 0xffffffffu));
    *total = unsigned(std::min<size_t>(t, 0xffffffffu));
  }
  return r;
}

// No re-entry guard: applying the limit twice gives the same answer.
CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  HAMI_CUDA_REAL(cuDeviceTotalMem_v2, CUDA_ERROR_NOT_INITIALIZED);
  const uint64_t limit = LimitOf(dev);
  if (limit == 0) return drv.cuda.cuDeviceTotalMem_v2(bytes, dev);  // a plain tail call
  CUresult r = drv.cuda.cuDeviceTotalMem_v2(bytes, dev);
  if (r == CUDA_SUCCESS) *bytes = size_t(std::min<uint64_t>(limit, *bytes));
  return r;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  HAMI_CUDA_REAL(cuDeviceTotalMem, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuDeviceTotalMem(bytes, dev);
  if (r != CUDA_SUCCESS) return r;
  if (uint64_t limit = LimitOf(dev); limit != 0)
    *bytes = unsigned(std::min<uint64_t>(limit, *bytes));
  return r;
}

// ---- contexts ----

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuDevicePrimaryCtxRetain, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuDevicePrimaryCtxRetain(pctx, dev);
  return CreateContext(dev, pctx, true,
                       [&] { return drv.cuda.cuDevicePrimaryCtxRetain(pctx, dev); });
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuDevicePrimaryCtxRelease, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuDevicePrimaryCtxRelease(dev);
  if (r == CUDA_SUCCESS && !scope.nested()) PrimaryMayHaveEnded(dev);
  return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuDevicePrimaryCtxRelease_v2, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuDevicePrimaryCtxRelease_v2(dev);
  if (r == CUDA_SUCCESS && !scope.nested()) PrimaryMayHaveEnded(dev);
  return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuDevicePrimaryCtxReset, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuDevicePrimaryCtxReset(dev);
  if (r == CUDA_SUCCESS && !scope.nested()) PrimaryMayHaveEnded(dev);
  return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuDevicePrimaryCtxReset_v2, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuDevicePrimaryCtxReset_v2(dev);
  if (r == CUDA_SUCCESS && !scope.nested()) PrimaryMayHaveEnded(dev);
  return r;
}

CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuCtxCreate, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuCtxCreate(pctx, flags, dev);
  return CreateContext(dev, pctx, false, [&] { return drv.cuda.cuCtxCreate(pctx, flags, dev); });
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuCtxCreate_v2, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuCtxCreate_v2(pctx, flags, dev);
  return CreateContext(dev, pctx, false, [&] { return drv.cuda.cuCtxCreate_v2(pctx, flags, dev); });
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n,
                                unsigned int flags, CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuCtxCreate_v3, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuCtxCreate_v3(pctx, params, n, flags, dev);
  return CreateContext(dev, pctx, false,
                       [&] { return drv.cuda.cuCtxCreate_v3(pctx, params, n, flags, dev); });
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                CUdevice dev) {
  HookScope scope;
  HAMI_CUDA_REAL(cuCtxCreate_v4, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuCtxCreate_v4(pctx, params, flags, dev);
  return CreateContext(dev, pctx, false,
                       [&] { return drv.cuda.cuCtxCreate_v4(pctx, params, flags, dev); });
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) {
  HookScope scope;
  HAMI_CUDA_REAL(cuCtxDestroy, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuCtxDestroy(ctx);
  if (r == CUDA_SUCCESS && !scope.nested()) ContextEnded(ctx);
  return r;
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  HookScope scope;
  HAMI_CUDA_REAL(cuCtxDestroy_v2, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuCtxDestroy_v2(ctx);
  if (r == CUDA_SUCCESS && !scope.nested()) ContextEnded(ctx);
  return r;
}

}  // extern "C"
