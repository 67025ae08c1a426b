// What one process holds of its container's budget, by what it is: linear allocations (and
// the granule pages small ones share), contexts, objects (arrays, modules, libraries) and
// VMM physical allocations with their mappings.
//
// The ledger is arithmetic only: it never calls the driver or the region. Operations that
// give memory back return a Returns (what to hand back to the region, by device and kind),
// which the caller applies after the ledger's lock is released, so that no lock of the
// interposer is ever held across the region's cross-process mutex.
//
// Thread safety: every method may be called from any thread (one internal mutex, never held
// across a call out). ResetInForkChild() only from a pthread_atfork child handler.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/strings.h"
#include "common/thread_annotations.h"
#include "region/region.h"
#include "vgpu/config.h"
#include "vgpu/pointer_map.h"

namespace hami::vgpu {

using region::UsageKind;

using region::kUsageKinds;

// Bytes to give back to the region, summed by CUDA ordinal and kind. Most hold one sum (a
// free); the first few live inline, so that the common case neither allocates nor clears a
// table; more (a context's end) spill into a vector.
class Returns {
 public:
  void Add(int device, uint64_t bytes, UsageKind kind) {
    if (device < 0 || device >= kMaxDevices || bytes == 0) return;
    for (size_t i = 0; i < size(); ++i) {
      Entry& e = at(i);
      if (e.device == device && e.kind == kind) {
        e.bytes += bytes;
        return;
      }
    }
    if (inline_count_ < kInline) {
      inline_[inline_count_++] = Entry{device, kind, bytes};
    } else {
      spill_.push_back(Entry{device, kind, bytes});
    }
  }
  bool empty() const { return inline_count_ == 0; }
  uint64_t of(int device, UsageKind kind) const {
    uint64_t sum = 0;
    ForEach([&](int d, uint64_t b, UsageKind k) { sum += d == device && k == kind ? b : 0; });
    return sum;
  }
  // Calls fn(device, bytes, kind) for every non-zero sum.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (size_t i = 0; i < inline_count_; ++i)
      fn(inline_[i].device, inline_[i].bytes, inline_[i].kind);
    for (const Entry& e : spill_) fn(e.device, e.bytes, e.kind);
  }

 private:
  struct Entry {
    int device;
    UsageKind kind;
    uint64_t bytes;
  };
  static constexpr size_t kInline = 4;
  size_t size() const { return inline_count_ + spill_.size(); }
  Entry& at(size_t i) { return i < kInline ? inline_[i] : spill_[i - kInline]; }

  Entry inline_[kInline];
  size_t inline_count_ = 0;
  std::vector<Entry> spill_;
};

// A linear allocation: what it counts for, on which device and context.
struct Allocation {
  int device = -1;
  uint64_t charge = 0;  // bytes (small ones: their share, rounded to kSmallAlign)
  UsageKind kind = UsageKind::kData;
  CUcontext ctx = nullptr;
  bool small = false;  // shares granule pages
};

// Something held that is not linear memory (an array, a module), by handle.
struct Held {
  int device = -1;
  uint64_t bytes = 0;
  UsageKind kind = UsageKind::kData;
  CUcontext ctx = nullptr;  // goes with its context (null: with the process)
  // Goes also when this object is forgotten (a library's code loaded into a context goes
  // when the library is unloaded).
  const void* owner = nullptr;
};

struct ContextCharge {
  int device = -1;
  uint64_t bytes = 0;
  bool primary = false;
};

// Small allocations are rounded to this before they share pages.
inline constexpr uint64_t kSmallAlign = 512;

class Ledger {
 public:
  // ---- small allocations (at most half a granule): they share granule pages per context ----
  // Takes `size` bytes (already rounded to kSmallAlign) into the context's pages if the pages
  // already admitted hold them; false when a new page is needed (nothing changed).
  bool TakeSmall(CUcontext ctx, int device, uint64_t size, uint64_t granule) EXCLUDES(mu_);
  // After `pages` new pages were admitted in the region: takes `size` bytes with them.
  // Returns the pages no longer needed (another thread admitted one at the same time), to be
  // returned to the region.
  Returns TakeSmallWithPages(CUcontext ctx, int device, uint64_t size, uint64_t pages,
                             uint64_t granule) EXCLUDES(mu_);
  // Pages a context needs beyond those admitted for `size` more bytes (0: TakeSmall fits).
  uint64_t PagesNeeded(CUcontext ctx, int device, uint64_t size, uint64_t granule) EXCLUDES(mu_);

  // ---- linear allocations ----
  void Track(CUdeviceptr ptr, const Allocation& a) EXCLUDES(mu_);
  // Forgets `ptr`; nullopt if it was not tracked. The Returns hold what to give back.
  std::optional<Returns> Forget(CUdeviceptr ptr) EXCLUDES(mu_);
  // Undoes an allocation that was charged but never tracked (the driver call failed).
  Returns Release(const Allocation& a) EXCLUDES(mu_);
  size_t allocation_count() EXCLUDES(mu_);

  // ---- contexts ----
  void AddContext(CUcontext ctx, const ContextCharge& charge) EXCLUDES(mu_);
  std::optional<int> DeviceOfContext(CUcontext ctx) EXCLUDES(mu_);
  // The primary context this process charged on `device`, or null.
  CUcontext PrimaryOn(int device) EXCLUDES(mu_);
  bool AnyContext() EXCLUDES(mu_);
  // The context size measured on `device` (0: not yet) and its recording.
  uint64_t ContextBytes(int device) EXCLUDES(mu_);
  void SetContextBytes(int device, uint64_t bytes) EXCLUDES(mu_);
  // A context ended: its own charge and everything allocated in it, to return.
  Returns EndContext(CUcontext ctx) EXCLUDES(mu_);

  // ---- objects ----
  void TrackObject(const void* handle, const Held& held) EXCLUDES(mu_);
  // Forgets `handle` and every object it owns; nullopt when there was neither.
  std::optional<Returns> ForgetObject(const void* handle) EXCLUDES(mu_);

  // ---- VMM: a physical allocation is charged until every handle is released and every
  // mapping of it unmapped ----
  void AddPhysical(CUmemGenericAllocationHandle handle, int device, uint64_t bytes) EXCLUDES(mu_);
  Returns ReleasePhysical(CUmemGenericAllocationHandle handle) EXCLUDES(mu_);
  void RetainPhysical(CUmemGenericAllocationHandle handle) EXCLUDES(mu_);
  void Map(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle) EXCLUDES(mu_);
  // Every mapping that starts inside [ptr, ptr + size) is gone.
  Returns Unmap(CUdeviceptr ptr, size_t size) EXCLUDES(mu_);

  // A fork child holds nothing of its parent's.
  void ResetInForkChild() NO_THREAD_SAFETY_ANALYSIS;

 private:
  // Erases an object, and its count in owners_.
  std::unordered_map<const void*, Held>::iterator DropObjectLocked(
      std::unordered_map<const void*, Held>::iterator it) REQUIRES(mu_);

  struct SmallPages {
    CUcontext ctx = nullptr;
    int device = -1;
    uint64_t bytes = 0;
    uint64_t pages = 0;    // admitted in the region
    uint64_t granule = 0;  // the device's allocation granularity
  };
  struct Physical {
    int device;
    uint64_t bytes;
    int refs;
    int mappings;
  };
  struct Mapping {
    CUmemGenericAllocationHandle handle;
    size_t size;
  };

  SmallPages& PagesOf(CUcontext ctx, int device, uint64_t granule) REQUIRES(mu_);
  // Returns what `a` still holds.
  void ReleaseLocked(const Allocation& a, Returns* out) REQUIRES(mu_);
  void DropIfUnused(CUmemGenericAllocationHandle handle, Returns* out) REQUIRES(mu_);

  Mutex mu_;
  PointerMap<Allocation> allocations_ GUARDED_BY(mu_);
  std::vector<SmallPages> small_pages_ GUARDED_BY(mu_);
  std::map<CUcontext, ContextCharge> contexts_ GUARDED_BY(mu_);
  std::array<uint64_t, kMaxDevices> context_bytes_ GUARDED_BY(mu_) = {};
  std::unordered_map<const void*, Held> objects_ GUARDED_BY(mu_);
  // Handles that own objects (Held::owner), and how many.
  std::unordered_map<const void*, int> owners_ GUARDED_BY(mu_);
  std::map<CUmemGenericAllocationHandle, Physical> physical_ GUARDED_BY(mu_);
  std::map<CUdeviceptr, Mapping> mapped_ GUARDED_BY(mu_);
};

}  // namespace hami::vgpu
