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
#pragma once

#include <cuda.h>

#include <map>

#include "vgpu/accounting.h"
#include "vgpu/limiter.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {

using PoolIt = std::map<CUmemoryPool, Runtime::PoolCharge>::iterator;

// A pool attribute from the driver; false when it cannot say.
bool PoolAttribute(Runtime& rt, CUmemoryPool pool, CUmemPool_attribute attr, uint64_t* value);
// The ledger entry of `pool`: a pool this process created, or the current or default pool
// of a device it sees. Device -1 (not charged) for any other pool.
PoolIt FindPoolLocked(Runtime& rt, CUmemoryPool pool) REQUIRES(rt.pool_mu);
// Brings the charge of one pool to its reserved memory (pool_mu held).
void ReconcilePoolLocked(Runtime& rt, PoolIt it);
// Asks every other pool of this process on `device` to give back what it caches.
void TrimIdlePoolsLocked(Runtime& rt, int device, CUmemoryPool except) REQUIRES(rt.pool_mu);

// A pool this process created (after a successful cuMemPoolCreate): it holds nothing yet;
// its device is remembered (a pool of host memory is not charged).
void PoolCreated(Runtime& rt, CUmemoryPool pool, const CUmemPoolProps& props);
// After a successful cuMemPoolTrimTo: the pool's charge is brought to what it still holds.
void PoolTrimmed(Runtime& rt, CUmemoryPool pool);
// After a successful cuMemPoolDestroy: what the pool held goes back with it.
void PoolDestroyed(Runtime& rt, CUmemoryPool pool);

// Admission + driver call + reconciliation of a stream-ordered allocation.
template <typename Call>
CUresult PoolAlloc(Runtime& rt, CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream,
                   bool per_thread, Call call) {
  const CudaDriver& drv = rt.CudaOrEmpty();
  if (dptr == nullptr || bytes == 0) return call();
  auto capturing = per_thread ? drv.aux.cuStreamIsCapturing_ptsz : drv.aux.cuStreamIsCapturing;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (capturing != nullptr && capturing(stream, &status) != CUDA_SUCCESS) return call();
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) return call();  // a graph node: see above
  if (pool == nullptr) {
    int device;
    if (StreamDevice(rt, stream, &device) != CUDA_SUCCESS ||
        drv.aux.cuDeviceGetMemPool == nullptr ||
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
  PoolAttribute(rt, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
  PoolAttribute(rt, pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  uint64_t cached = reserved > used ? reserved - used : 0;
  uint64_t growth = bytes > cached ? RoundUp(bytes - cached, Granularity(rt, device)) : 0;
  if (!Admit(rt, device, growth, UsageKind::kPool)) {
    TrimIdlePoolsLocked(rt, device, pool);
    if (!Admit(rt, device, growth, UsageKind::kPool)) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  it->second.charged += growth;
  CUresult r;
  {
    Allocating allocating(rt);
    r = call();
  }
  ReconcilePoolLocked(rt, it);
  return r;
}

}  // namespace hami::vgpu
