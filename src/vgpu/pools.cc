#include "vgpu/pools.h"

#include <algorithm>

#include "vgpu/accounting.h"

namespace hami::vgpu {

bool PoolAttribute(Runtime& rt, CUmemoryPool pool, CUmemPool_attribute attr, uint64_t* value) {
  const CudaDriver& drv = rt.CudaOrEmpty();
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
  const CudaDriver& drv = rt.CudaOrEmpty();
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
void ReconcilePoolLocked(Runtime& rt, PoolIt it) NO_THREAD_SAFETY_ANALYSIS {  // with pool_mu held
  Runtime::PoolCharge& c = it->second;
  uint64_t reserved;
  if (c.device < 0 ||
      !PoolAttribute(rt, it->first, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved)) {
    return;
  }
  if (reserved > c.charged) {
    Record(rt, c.device, reserved - c.charged, UsageKind::kPool);
  } else {
    Return(rt, c.device, c.charged - reserved, UsageKind::kPool);
  }
  c.charged = reserved;
}

// Asks every other pool of this process on `device` to give back what it caches.
void TrimIdlePoolsLocked(Runtime& rt, int device, CUmemoryPool except) REQUIRES(rt.pool_mu) {
  const CudaDriver& drv = rt.CudaOrEmpty();
  if (drv.cuda.cuMemPoolTrimTo == nullptr) return;
  for (auto it = rt.pools.begin(); it != rt.pools.end(); ++it) {
    if (it->first == except || it->second.device != device || it->second.charged == 0) continue;
    drv.cuda.cuMemPoolTrimTo(it->first, 0);
    ReconcilePoolLocked(rt, it);
  }
}

void PoolCreated(Runtime& rt, CUmemoryPool pool, const CUmemPoolProps& props) {
  const int device = props.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? props.location.id : -1;
  MutexLock l(&rt.pool_mu);
  rt.pools[pool] = Runtime::PoolCharge{device, 0};
  rt.any_pools.store(true, std::memory_order_relaxed);
}

void PoolTrimmed(Runtime& rt, CUmemoryPool pool) {
  MutexLock l(&rt.pool_mu);
  if (auto it = rt.pools.find(pool); it != rt.pools.end()) ReconcilePoolLocked(rt, it);
}

void PoolDestroyed(Runtime& rt, CUmemoryPool pool) {
  MutexLock l(&rt.pool_mu);
  if (auto it = rt.pools.find(pool); it != rt.pools.end()) {
    Return(rt, it->second.device, it->second.charged, UsageKind::kPool);
    rt.pools.erase(it);
  }
}

void ReconcilePools(Runtime& rt) {
  if (!rt.any_pools.load(std::memory_order_relaxed)) return;
  MutexLock l(&rt.pool_mu);
  for (auto it = rt.pools.begin(); it != rt.pools.end(); ++it) ReconcilePoolLocked(rt, it);
}

}  // namespace hami::vgpu
