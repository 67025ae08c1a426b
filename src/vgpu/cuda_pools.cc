// Stream-ordered allocation and memory pools.
//
// What is charged: each pool's reserved memory, in use or cached for reuse, since that is
// what the device has given the process. An allocation that fits in what its pool caches
// costs nothing new; one that does not is admitted for the growth it needs (the shortfall
// rounded up to the allocation granularity, the way a pool grows) before the driver is
// asked, and refused with CUDA_ERROR_OUT_OF_MEMORY past the limit once this process's other
// pools on the device have given back what they cache (as the driver itself does when the
// device is full). After the call, and whenever a pool can have given memory back
// (synchronization: its release threshold; cuMemPoolTrimTo; cuMemPoolDestroy; the end of a
// context), the charge is brought to the pool's reserved memory as the driver reports it;
// should a pool ever grow by more than the shortfall, the excess is recorded as it is.
//
// Allocations made on a capturing stream become graph memory nodes: they are charged when
// the graph runs (cuda_graphs.cc). Pools imported from another process and pools of host
// memory are not charged here: their device memory, if any, is the exporter's.
#include <algorithm>

#include "vgpu/accounting.h"
#include "vgpu/runtime.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace hami::vgpu {

namespace {

using PoolIt = std::map<CUmemoryPool, Runtime::PoolCharge>::iterator;

bool PoolAttribute(CUmemoryPool pool, CUmemPool_attribute attr, uint64_t* value) {
  const CudaDriver& drv = CudaOrEmpty();
  cuuint64_t v = 0;
  if (drv.aux.cuMemPoolGetAttribute == nullptr ||
      drv.aux.cuMemPoolGetAttribute(pool, attr, &v) != CUDA_SUCCESS) {
    return false;
  }
  *value = v;
  return true;
}

// The ledger entry of `pool`: a pool this process created, or the current or default pool
// of a device it sees. Device -1 (not charged) for any other pool. Caller holds pool_mu.
PoolIt FindPoolLocked(Runtime& rt, CUmemoryPool pool) REQUIRES(rt.pool_mu) {
  const CudaDriver& drv = CudaOrEmpty();
  auto it = rt.pools.find(pool);
  if (it != rt.pools.end()) return it;
  int device = -1;
  int count = 0;
  if (drv.aux.cuDeviceGetCount != nullptr && drv.aux.cuDeviceGetCount(&count) == CUDA_SUCCESS) {
    for (int d = 0; d < count && d < kMaxDevices && device < 0; ++d) {
      CUmemoryPool p = nullptr;
      if ((drv.aux.cuDeviceGetMemPool(&p, d) == CUDA_SUCCESS && p == pool) ||
          (drv.aux.cuDeviceGetDefaultMemPool(&p, d) == CUDA_SUCCESS && p == pool)) {
        device = d;
      }
    }
  }
  rt.any_pools.store(true, std::memory_order_relaxed);
  return rt.pools.emplace(pool, Runtime::PoolCharge{device, 0}).first;
}

// Brings the charge of one pool to its reserved memory. Caller holds pool_mu.
void ReconcileLocked(PoolIt it) NO_THREAD_SAFETY_ANALYSIS {  // with pool_mu held
  Runtime::PoolCharge& c = it->second;
  uint64_t reserved;
  if (c.device < 0 || !PoolAttribute(it->first, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved)) {
    return;
  }
  if (reserved > c.charged) {
    Record(c.device, reserved - c.charged, UsageKind::kPool);
  } else {
    Return(c.device, c.charged - reserved, UsageKind::kPool);
  }
  c.charged = reserved;
}

// Asks every other pool of this process on `device` to give back what it caches.
void TrimIdlePoolsLocked(Runtime& rt, int device, CUmemoryPool except) REQUIRES(rt.pool_mu) {
  const CudaDriver& drv = CudaOrEmpty();
  if (drv.cuda.cuMemPoolTrimTo == nullptr) return;
  for (auto it = rt.pools.begin(); it != rt.pools.end(); ++it) {
    if (it->first == except || it->second.device != device || it->second.charged == 0) continue;
    drv.cuda.cuMemPoolTrimTo(it->first, 0);
    ReconcileLocked(it);
  }
}

template <typename Call>
CUresult PoolAlloc(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream,
                   bool per_thread, Call call) {
  Runtime& rt = Rt();
  const CudaDriver& drv = CudaOrEmpty();
  if (dptr == nullptr || bytes == 0) return call();
  auto capturing = per_thread ? drv.aux.cuStreamIsCapturing_ptsz : drv.aux.cuStreamIsCapturing;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (capturing != nullptr && capturing(stream, &status) != CUDA_SUCCESS) return call();
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) return call();  // a graph node: see above
  if (pool == nullptr) {
    int device;
    if (StreamDevice(stream, &device) != CUDA_SUCCESS || drv.aux.cuDeviceGetMemPool == nullptr ||
        drv.aux.cuDeviceGetMemPool(&pool, device) != CUDA_SUCCESS) {
      return call();  // the driver's own answer
    }
  }
  // One pool allocation at a time in this process, so that two estimates never count the
  // same cached bytes.
  MutexLock l(&rt.pool_mu);
  PoolIt it = FindPoolLocked(rt, pool);
  const int device = it->second.device;
  if (device < 0) return call();
  uint64_t reserved = 0, used = 0;
  PoolAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
  PoolAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  uint64_t cached = reserved > used ? reserved - used : 0;
  uint64_t growth = bytes > cached ? RoundUp(bytes - cached, Granularity(device)) : 0;
  if (!Admit(device, growth, UsageKind::kPool)) {
    TrimIdlePoolsLocked(rt, device, pool);
    if (!Admit(device, growth, UsageKind::kPool)) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  it->second.charged += growth;
  CUresult r;
  {
    Allocating allocating;
    r = call();
  }
  ReconcileLocked(it);
  return r;
}

}  // namespace

void ReconcilePools() {
  Runtime& rt = Rt();
  if (!rt.any_pools.load(std::memory_order_relaxed)) return;
  MutexLock l(&rt.pool_mu);
  for (auto it = rt.pools.begin(); it != rt.pools.end(); ++it) ReconcileLocked(it);
}

}  // namespace hami::vgpu

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
  if (auto it = rt.pools.find(pool); it != rt.pools.end()) ReconcileLocked(it);
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
