// Entry points of the CUDA driver API: initialization, symbol lookup through
// cuGetProcAddress, the memory views, and contexts.
#include <algorithm>

#include "vgpu/accounting.h"
#include "vgpu/identity.h"
#include "vgpu/prologue.h"
#include "vgpu/views.h"

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

}  // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned int Flags) {
  HAMI_CUDA_PROLOGUE(cuInit, Flags);  // no driver at all: "no device", never a crash
  BeginIdentity(rt);
  CUresult r = drv.cuda.cuInit(Flags);
  if (r == CUDA_SUCCESS) {
    rt.cuda_initialized.store(true, std::memory_order_release);
    LearnDevicesFromCuda(rt);
    // The one place a CUDA process joins its region.
    if (JoinRegion(rt) == JoinState::kJoined) ResolveIdentity(rt, true);  // the probe, if needed
  }
  return r;
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags) {
  HAMI_CUDA_PROLOGUE(cuGetProcAddress, symbol, pfn, cudaVersion, flags);
  CUresult r = drv.cuda.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS) SubstituteWrapper(symbol, cudaVersion, flags, pfn);
  return r;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  HAMI_CUDA_PROLOGUE(cuGetProcAddress_v2, symbol, pfn, cudaVersion, flags, status);
  CUresult r = drv.cuda.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
  if (r == CUDA_SUCCESS) SubstituteWrapper(symbol, cudaVersion, flags, pfn);
  return r;
}

// ---- views ----

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  HAMI_CUDA_PROLOGUE(cuMemGetInfo_v2, free, total);
  return ContainerMemInfo(rt, free, total, drv.cuda.cuMemGetInfo_v2(free, total));
}

CUresult CUDAAPI cuMemGetInfo(unsigned int* free, unsigned int* total) {
  HAMI_CUDA_PROLOGUE(cuMemGetInfo, free, total);
  if (free == nullptr || total == nullptr || drv.cuda.cuMemGetInfo_v2 == nullptr) {
    return drv.cuda.cuMemGetInfo(free, total);
  }
  // The same view through the 64-bit call, then narrowed as the old ABI does.
  size_t f = 0, t = 0;
  CUresult r = ContainerMemInfo(rt, &f, &t, drv.cuda.cuMemGetInfo_v2(&f, &t));
  if (r == CUDA_SUCCESS) {
    *free = unsigned(std::min<size_t>(f, 0xffffffffu));
    *total = unsigned(std::min<size_t>(t, 0xffffffffu));
  }
  return r;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuDeviceTotalMem_v2, bytes, dev);
  CUresult r = drv.cuda.cuDeviceTotalMem_v2(bytes, dev);
  if (r == CUDA_SUCCESS && bytes != nullptr) *bytes = ContainerTotalMem(rt, dev, *bytes);
  return r;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuDeviceTotalMem, bytes, dev);
  CUresult r = drv.cuda.cuDeviceTotalMem(bytes, dev);
  if (r == CUDA_SUCCESS && bytes != nullptr) *bytes = unsigned(ContainerTotalMem(rt, dev, *bytes));
  return r;
}

// ---- contexts ----

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuDevicePrimaryCtxRetain, pctx, dev);
  return CreateContext(rt, dev, pctx, true,
                       [&] { return drv.cuda.cuDevicePrimaryCtxRetain(pctx, dev); });
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuDevicePrimaryCtxRelease, dev);
  CUresult r = drv.cuda.cuDevicePrimaryCtxRelease(dev);
  if (r == CUDA_SUCCESS) PrimaryMayHaveEnded(rt, dev);
  return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuDevicePrimaryCtxRelease_v2, dev);
  CUresult r = drv.cuda.cuDevicePrimaryCtxRelease_v2(dev);
  if (r == CUDA_SUCCESS) PrimaryMayHaveEnded(rt, dev);
  return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuDevicePrimaryCtxReset, dev);
  CUresult r = drv.cuda.cuDevicePrimaryCtxReset(dev);
  if (r == CUDA_SUCCESS) PrimaryMayHaveEnded(rt, dev);
  return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuDevicePrimaryCtxReset_v2, dev);
  CUresult r = drv.cuda.cuDevicePrimaryCtxReset_v2(dev);
  if (r == CUDA_SUCCESS) PrimaryMayHaveEnded(rt, dev);
  return r;
}

CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuCtxCreate, pctx, flags, dev);
  return CreateContext(rt, dev, pctx, false,
                       [&] { return drv.cuda.cuCtxCreate(pctx, flags, dev); });
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuCtxCreate_v2, pctx, flags, dev);
  return CreateContext(rt, dev, pctx, false,
                       [&] { return drv.cuda.cuCtxCreate_v2(pctx, flags, dev); });
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n,
                                unsigned int flags, CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuCtxCreate_v3, pctx, params, n, flags, dev);
  return CreateContext(rt, dev, pctx, false,
                       [&] { return drv.cuda.cuCtxCreate_v3(pctx, params, n, flags, dev); });
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuCtxCreate_v4, pctx, params, flags, dev);
  return CreateContext(rt, dev, pctx, false,
                       [&] { return drv.cuda.cuCtxCreate_v4(pctx, params, flags, dev); });
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) {
  HAMI_CUDA_PROLOGUE(cuCtxDestroy, ctx);
  CUresult r = drv.cuda.cuCtxDestroy(ctx);
  if (r == CUDA_SUCCESS) ContextEnded(rt, ctx);
  return r;
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  HAMI_CUDA_PROLOGUE(cuCtxDestroy_v2, ctx);
  CUresult r = drv.cuda.cuCtxDestroy_v2(ctx);
  if (r == CUDA_SUCCESS) ContextEnded(rt, ctx);
  return r;
}

}  // extern "C"
