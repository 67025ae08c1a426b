#include "vgpu/outside_budget.h"

namespace hami::vgpu {

void Spills::Add(CUdeviceptr dptr, const Spill& spill) {
  MutexLock l(&mu_);
  by_ptr_[dptr] = spill;
  count_.store(by_ptr_.size(), std::memory_order_relaxed);
}

std::optional<Spill> Spills::Take(CUdeviceptr dptr) {
  MutexLock l(&mu_);
  auto it = by_ptr_.find(dptr);
  if (it == by_ptr_.end()) return std::nullopt;
  Spill out = it->second;
  by_ptr_.erase(it);
  count_.store(by_ptr_.size(), std::memory_order_relaxed);
  return out;
}

bool Spills::Contains(CUdeviceptr dptr) const {
  MutexLock l(&mu_);
  return by_ptr_.count(dptr) != 0;
}

std::vector<Spill> Spills::TakeContext(CUcontext ctx) {
  MutexLock l(&mu_);
  std::vector<Spill> out;
  for (auto it = by_ptr_.begin(); it != by_ptr_.end();) {
    if (it->second.ctx == ctx) {
      out.push_back(it->second);
      it = by_ptr_.erase(it);
    } else {
      ++it;
    }
  }
  count_.store(by_ptr_.size(), std::memory_order_relaxed);
  return out;
}

void Spills::ResetInForkChild() {
  mu_.ResetInForkChild();
  by_ptr_.clear();
  count_.store(0, std::memory_order_relaxed);
  spilling_said.store(false, std::memory_order_relaxed);
  refusal_said.store(false, std::memory_order_relaxed);
}

void Imports::AddPointer(CUdeviceptr ptr, uint64_t bytes, CUcontext ctx, CUmemoryPool pool) {
  MutexLock l(&mu_);
  pointers_[ptr] = Pointer{bytes, ctx, pool};
  Recount();
}

uint64_t Imports::TakePointer(CUdeviceptr ptr) {
  MutexLock l(&mu_);
  auto it = pointers_.find(ptr);
  if (it == pointers_.end()) return 0;
  const uint64_t bytes = it->second.bytes;
  pointers_.erase(it);
  Recount();
  return bytes;
}

uint64_t Imports::TakeContext(CUcontext ctx) {
  MutexLock l(&mu_);
  uint64_t bytes = 0;
  for (auto it = pointers_.begin(); it != pointers_.end();) {
    if (it->second.ctx == ctx) {
      bytes += it->second.bytes;
      it = pointers_.erase(it);
    } else {
      ++it;
    }
  }
  Recount();
  return bytes;
}

uint64_t Imports::TakePool(CUmemoryPool pool) {
  MutexLock l(&mu_);
  uint64_t bytes = 0;
  for (auto it = pointers_.begin(); it != pointers_.end();) {
    if (pool != nullptr && it->second.pool == pool) {
      bytes += it->second.bytes;
      it = pointers_.erase(it);
    } else {
      ++it;
    }
  }
  Recount();
  return bytes;
}

void Imports::AddHandle(CUmemGenericAllocationHandle handle) {
  MutexLock l(&mu_);
  handles_[handle] += 1;
  Recount();
}

void Imports::RetainHandle(CUmemGenericAllocationHandle handle) {
  MutexLock l(&mu_);
  if (auto it = handles_.find(handle); it != handles_.end()) it->second += 1;
}

void Imports::ReleaseHandle(CUmemGenericAllocationHandle handle) {
  MutexLock l(&mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) return;
  if (--it->second <= 0) handles_.erase(it);
  Recount();
}

void Imports::ForgetHandle(CUmemGenericAllocationHandle handle) {
  MutexLock l(&mu_);
  handles_.erase(handle);
  Recount();
}

uint64_t Imports::AddMapping(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle) {
  MutexLock l(&mu_);
  if (!handles_.contains(handle)) return 0;
  mappings_[ptr] = size;
  Recount();
  return size;
}

uint64_t Imports::TakeMappings(CUdeviceptr ptr, size_t size) {
  MutexLock l(&mu_);
  uint64_t bytes = 0;
  for (auto it = mappings_.lower_bound(ptr); it != mappings_.end() && it->first < ptr + size;) {
    bytes += it->second;
    it = mappings_.erase(it);
  }
  Recount();
  return bytes;
}

void Imports::ResetInForkChild() {
  mu_.ResetInForkChild();
  pointers_.clear();
  handles_.clear();
  mappings_.clear();
  count_.store(0, std::memory_order_relaxed);
}

}  // namespace hami::vgpu
