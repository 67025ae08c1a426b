#include "vgpu/ledger.h"

#include <algorithm>

namespace hami::vgpu {

Ledger::SmallPages& Ledger::PagesOf(CUcontext ctx, int device, uint64_t granule) {
  for (SmallPages& sp : small_pages_) {
    if (sp.ctx == ctx) return sp;
  }
  return small_pages_.emplace_back(SmallPages{ctx, device, 0, 0, granule});
}

uint64_t Ledger::PagesNeeded(CUcontext ctx, int device, uint64_t size, uint64_t granule) {
  MutexLock l(&mu_);
  SmallPages& sp = PagesOf(ctx, device, granule);
  const uint64_t pages = CeilDiv(sp.bytes + size, sp.granule);
  return pages > sp.pages ? pages - sp.pages : 0;
}

bool Ledger::TakeSmall(CUcontext ctx, int device, uint64_t size, uint64_t granule) {
  MutexLock l(&mu_);
  SmallPages& sp = PagesOf(ctx, device, granule);
  if (CeilDiv(sp.bytes + size, sp.granule) > sp.pages) return false;
  sp.bytes += size;
  return true;
}

Returns Ledger::TakeSmallWithPages(CUcontext ctx, int device, uint64_t size, uint64_t pages,
                                   uint64_t granule) {
  MutexLock l(&mu_);
  SmallPages& sp = PagesOf(ctx, device, granule);
  sp.bytes += size;
  sp.pages += pages;
  Returns out;
  const uint64_t needed = CeilDiv(sp.bytes, sp.granule);
  if (sp.pages > needed) {
    out.Add(device, (sp.pages - needed) * sp.granule, UsageKind::kData);
    sp.pages = needed;
  }
  return out;
}

void Ledger::ReleaseLocked(const Allocation& a, Returns* out) {
  if (a.device < 0) return;
  if (!a.small) {
    out->Add(a.device, a.charge, a.kind);
    return;
  }
  for (SmallPages& sp : small_pages_) {
    if (sp.ctx != a.ctx) continue;
    sp.bytes -= std::min(sp.bytes, a.charge);
    const uint64_t pages = CeilDiv(sp.bytes, sp.granule);
    if (pages < sp.pages) {
      out->Add(sp.device, (sp.pages - pages) * sp.granule, UsageKind::kData);
      sp.pages = pages;
    }
    return;
  }
}

void Ledger::Track(CUdeviceptr ptr, const Allocation& a) {
  MutexLock l(&mu_);
  allocations_.Insert(ptr, a);
}

std::optional<Returns> Ledger::Forget(CUdeviceptr ptr) {
  MutexLock l(&mu_);
  Allocation a;
  if (!allocations_.Erase(ptr, &a)) return std::nullopt;
  Returns out;
  ReleaseLocked(a, &out);
  return out;
}

Returns Ledger::Release(const Allocation& a) {
  MutexLock l(&mu_);
  Returns out;
  ReleaseLocked(a, &out);
  return out;
}

size_t Ledger::allocation_count() {
  MutexLock l(&mu_);
  return allocations_.size();
}

void Ledger::AddContext(CUcontext ctx, const ContextCharge& charge) {
  MutexLock l(&mu_);
  contexts_[ctx] = charge;
}

std::optional<int> Ledger::DeviceOfContext(CUcontext ctx) {
  MutexLock l(&mu_);
  auto it = contexts_.find(ctx);
  if (it == contexts_.end()) return std::nullopt;
  return it->second.device;
}

CUcontext Ledger::PrimaryOn(int device) {
  MutexLock l(&mu_);
  for (const auto& [ctx, c] : contexts_) {
    if (c.device == device && c.primary) return ctx;
  }
  return nullptr;
}

bool Ledger::AnyContext() {
  MutexLock l(&mu_);
  return !contexts_.empty();
}

uint64_t Ledger::ContextBytes(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  MutexLock l(&mu_);
  return context_bytes_[size_t(device)];
}

void Ledger::SetContextBytes(int device, uint64_t bytes) {
  if (device < 0 || device >= kMaxDevices) return;
  MutexLock l(&mu_);
  context_bytes_[size_t(device)] = bytes;
}

Returns Ledger::EndContext(CUcontext ctx) {
  MutexLock l(&mu_);
  Returns out;
  if (auto c = contexts_.find(ctx); c != contexts_.end()) {
    out.Add(c->second.device, c->second.bytes, UsageKind::kContext);
    contexts_.erase(c);
  }
  // Everything the context held is gone with it.
  allocations_.EraseIf([&](CUdeviceptr, const Allocation& a) {
    if (a.ctx != ctx) return false;
    if (!a.small) out.Add(a.device, a.charge, a.kind);
    return true;
  });
  std::erase_if(small_pages_, [&](const SmallPages& sp) {
    if (sp.ctx != ctx) return false;
    out.Add(sp.device, sp.pages * sp.granule, UsageKind::kData);
    return true;
  });
  for (auto it = objects_.begin(); it != objects_.end();) {
    if (it->second.ctx == ctx) {
      out.Add(it->second.device, it->second.bytes, it->second.kind);
      it = DropObjectLocked(it);
    } else {
      ++it;
    }
  }
  return out;
}

void Ledger::TrackObject(const void* handle, const Held& held) {
  MutexLock l(&mu_);
  if (auto it = objects_.find(handle); it != objects_.end()) DropObjectLocked(it);
  objects_[handle] = held;
  if (held.owner != nullptr) ++owners_[held.owner];
}

std::optional<Returns> Ledger::ForgetObject(const void* handle) {
  MutexLock l(&mu_);
  Returns out;
  bool found = false;
  if (auto it = objects_.find(handle); it != objects_.end()) {
    out.Add(it->second.device, it->second.bytes, it->second.kind);
    DropObjectLocked(it);
    found = true;
  }
  // What it owns: looked for only when it owns something.
  if (owners_.contains(handle)) {
    for (auto it = objects_.begin(); it != objects_.end();) {
      if (it->second.owner == handle) {
        out.Add(it->second.device, it->second.bytes, it->second.kind);
        it = DropObjectLocked(it);
        found = true;
      } else {
        ++it;
      }
    }
  }
  if (!found) return std::nullopt;
  return out;
}

std::unordered_map<const void*, Held>::iterator Ledger::DropObjectLocked(
    std::unordered_map<const void*, Held>::iterator it) {
  if (const void* owner = it->second.owner; owner != nullptr) {
    auto o = owners_.find(owner);
    if (o != owners_.end() && --o->second == 0) owners_.erase(o);
  }
  return objects_.erase(it);
}

void Ledger::AddPhysical(CUmemGenericAllocationHandle handle, int device, uint64_t bytes) {
  MutexLock l(&mu_);
  physical_[handle] = Physical{device, bytes, 1, 0};
}

void Ledger::DropIfUnused(CUmemGenericAllocationHandle handle, Returns* out) {
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.refs > 0 || it->second.mappings > 0) return;
  out->Add(it->second.device, it->second.bytes, UsageKind::kVmm);
  physical_.erase(it);
}

Returns Ledger::ReleasePhysical(CUmemGenericAllocationHandle handle) {
  MutexLock l(&mu_);
  Returns out;
  if (auto it = physical_.find(handle); it != physical_.end()) {
    it->second.refs -= 1;
    DropIfUnused(handle, &out);
  }
  return out;
}

void Ledger::RetainPhysical(CUmemGenericAllocationHandle handle) {
  MutexLock l(&mu_);
  if (auto it = physical_.find(handle); it != physical_.end()) it->second.refs += 1;
}

void Ledger::Map(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle) {
  MutexLock l(&mu_);
  if (auto it = physical_.find(handle); it != physical_.end()) {
    it->second.mappings += 1;
    mapped_[ptr] = Mapping{handle, size};
  }
}

Returns Ledger::Unmap(CUdeviceptr ptr, size_t size) {
  MutexLock l(&mu_);
  Returns out;
  for (auto it = mapped_.lower_bound(ptr); it != mapped_.end() && it->first < ptr + size;) {
    CUmemGenericAllocationHandle handle = it->second.handle;
    it = mapped_.erase(it);
    if (auto p = physical_.find(handle); p != physical_.end()) {
      p->second.mappings -= 1;
      DropIfUnused(handle, &out);
    }
  }
  return out;
}

void Ledger::ResetInForkChild() {
  mu_.ResetInForkChild();
  allocations_.Clear();
  small_pages_.clear();
  contexts_.clear();
  objects_.clear();
  owners_.clear();
  physical_.clear();
  mapped_.clear();
  // context_bytes_ stays: a measurement of the device, not of the process.
}

}  // namespace hami::vgpu
