// Stream-ordered allocation and memory pools: the hooks (the policy is pools.h).
#include "vgpu/imports.h"
#include "vgpu/pools.h"
#include "vgpu/prologue.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace {

// After a synchronization: pools may have released memory down to their threshold.
CUresult AfterSync(Runtime& rt, CUresult r) {
  ReconcilePools(rt);
  return r;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuMemAllocAsync, dptr, bytesize, hStream);
  return PoolAlloc(rt, dptr, bytesize, nullptr, hStream, false,
                   [&] { return drv.cuda.cuMemAllocAsync(dptr, bytesize, hStream); });
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuMemAllocAsync_ptsz, dptr, bytesize, hStream);
  return PoolAlloc(rt, dptr, bytesize, nullptr, hStream, true,
                   [&] { return drv.cuda.cuMemAllocAsync_ptsz(dptr, bytesize, hStream); });
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
  auto call = [&] { return drv.cuda.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream); };
  if (pool == nullptr) return call();  // the driver's own answer
  return PoolAlloc(rt, dptr, bytesize, pool, hStream, false, call);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
  auto call = [&] { return drv.cuda.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream); };
  if (pool == nullptr) return call();  // the driver's own answer
  return PoolAlloc(rt, dptr, bytesize, pool, hStream, true, call);
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  HAMI_CUDA_PROLOGUE(cuMemPoolCreate, pool, poolProps);
  CUresult r = drv.cuda.cuMemPoolCreate(pool, poolProps);
  if (r == CUDA_SUCCESS && pool != nullptr && poolProps != nullptr)
    PoolCreated(rt, *pool, *poolProps);
  return r;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  HAMI_CUDA_PROLOGUE(cuMemPoolTrimTo, pool, minBytesToKeep);
  CUresult r = drv.cuda.cuMemPoolTrimTo(pool, minBytesToKeep);
  if (r == CUDA_SUCCESS) PoolTrimmed(rt, pool);
  return r;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  HAMI_CUDA_PROLOGUE(cuMemPoolDestroy, pool);
  CUresult r = drv.cuda.cuMemPoolDestroy(pool);
  if (r == CUDA_SUCCESS) {
    PoolDestroyed(rt, pool);
    ImportsEndedWithPool(rt, pool);
  }
  return r;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  HAMI_CUDA_PROLOGUE(cuCtxSynchronize);
  return AfterSync(rt, drv.cuda.cuCtxSynchronize());
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  HAMI_CUDA_PROLOGUE(cuCtxSynchronize_v2, ctx);
  return AfterSync(rt, drv.cuda.cuCtxSynchronize_v2(ctx));
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuStreamSynchronize, hStream);
  return AfterSync(rt, drv.cuda.cuStreamSynchronize(hStream));
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuStreamSynchronize_ptsz, hStream);
  return AfterSync(rt, drv.cuda.cuStreamSynchronize_ptsz(hStream));
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  HAMI_CUDA_PROLOGUE(cuEventSynchronize, hEvent);
  return AfterSync(rt, drv.cuda.cuEventSynchronize(hEvent));
}

}  // extern "C"
