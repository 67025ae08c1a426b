// Stream-ordered allocation and memory pools: the hooks (the policy is pools.h).
#include "vgpu/pools.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace {

// After a synchronization: pools may have released memory down to their threshold.
CUresult AfterSync(CUresult r, const HookScope& scope) {
  if (!scope.nested()) ReconcilePools();
  return r;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAllocAsync, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuMemAllocAsync(dptr, bytesize, hStream); };
  if (scope.nested()) return call();
  return PoolAlloc(dptr, bytesize, nullptr, hStream, false, call);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAllocAsync_ptsz, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuMemAllocAsync_ptsz(dptr, bytesize, hStream); };
  if (scope.nested()) return call();
  return PoolAlloc(dptr, bytesize, nullptr, hStream, true, call);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAllocFromPoolAsync, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream); };
  if (scope.nested() || pool == nullptr) return call();
  return PoolAlloc(dptr, bytesize, pool, hStream, false, call);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemAllocFromPoolAsync_ptsz, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream); };
  if (scope.nested() || pool == nullptr) return call();
  return PoolAlloc(dptr, bytesize, pool, hStream, true, call);
}

// A new pool holds nothing yet; remember its device (host pools are not charged).
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemPoolCreate, CUDA_ERROR_NOT_INITIALIZED);
  Runtime& rt = Rt();
  CUresult r = drv.cuda.cuMemPoolCreate(pool, poolProps);
  if (r != CUDA_SUCCESS || scope.nested() || pool == nullptr || poolProps == nullptr) return r;
  int device =
      poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? poolProps->location.id : -1;
  MutexLock l(&rt.pool_mu);
  rt.pools[*pool] = Runtime::PoolCharge{device, 0};
  rt.any_pools.store(true, std::memory_order_relaxed);
  return r;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemPoolTrimTo, CUDA_ERROR_NOT_INITIALIZED);
  Runtime& rt = Rt();
  CUresult r = drv.cuda.cuMemPoolTrimTo(pool, minBytesToKeep);
  if (r != CUDA_SUCCESS || scope.nested()) return r;
  MutexLock l(&rt.pool_mu);
  if (auto it = rt.pools.find(pool); it != rt.pools.end()) ReconcilePoolLocked(it);
  return r;
}

// A destroyed pool's memory goes back to the device with it.
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemPoolDestroy, CUDA_ERROR_NOT_INITIALIZED);
  Runtime& rt = Rt();
  CUresult r = drv.cuda.cuMemPoolDestroy(pool);
  if (r != CUDA_SUCCESS || scope.nested()) return r;
  MutexLock l(&rt.pool_mu);
  if (auto it = rt.pools.find(pool); it != rt.pools.end()) {
    Return(it->second.device, it->second.charged, UsageKind::kPool);
    rt.pools.erase(it);
  }
  return r;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  HookScope scope;
  HAMI_CUDA_REAL(cuCtxSynchronize, CUDA_ERROR_NOT_INITIALIZED);
  return AfterSync(drv.cuda.cuCtxSynchronize(), scope);
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  HookScope scope;
  HAMI_CUDA_REAL(cuCtxSynchronize_v2, CUDA_ERROR_NOT_INITIALIZED);
  return AfterSync(drv.cuda.cuCtxSynchronize_v2(ctx), scope);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuStreamSynchronize, CUDA_ERROR_NOT_INITIALIZED);
  return AfterSync(drv.cuda.cuStreamSynchronize(hStream), scope);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuStreamSynchronize_ptsz, CUDA_ERROR_NOT_INITIALIZED);
  return AfterSync(drv.cuda.cuStreamSynchronize_ptsz(hStream), scope);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  HookScope scope;
  HAMI_CUDA_REAL(cuEventSynchronize, CUDA_ERROR_NOT_INITIALIZED);
  return AfterSync(drv.cuda.cuEventSynchronize(hEvent), scope);
}

}  // extern "C"
