// Memory admission and accounting against the container's shared region.
//
// Every allocation family follows one rule: reserve in the region *before* the driver
// allocates (so concurrent processes can never pass the limit together), release when the
// driver fails or the memory is freed. What each family charges is documented with its
// wrappers (and in docs/vgpu.md). For linear memory the charge follows how the driver itself
// hands out memory: an allocation larger than half the allocation granularity (2 MiB on
// current GPUs) is charged rounded up to whole granules; smaller ones share granule pages per
// context and device, and a page is charged while anything uses it. A context's own memory
// is measured once per device and charged per context, counted against the budget but never
// refused.
//
// Calls that cannot be accounted (no current context, NULL output pointers, a zero size) go
// straight to the driver, which gives its own error. Freeing a pointer we do not know goes
// to the driver and returns its result.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <limits>

#include "common/strings.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {

using region::UsageKind;

// Arithmetic on sizes that saturates at UINT64_MAX instead of wrapping to a small charge.
constexpr uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}
constexpr uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

// ---- the region's books, by CUDA ordinal; none of these joins the region ----
// How an allocation on a device is booked.
enum class Books {
  kAccounted,  // charged to the region
  kRefused,    // the process could not join the region, or the region does not hold the
               // device (a limit nobody set for it is not no limit): refused
};
// Waits (holding nothing) while another thread joins.
Books BooksFor(Runtime& rt, int ordinal);
// Reserves `bytes` unless that would pass the limit, or the process is refused (false). Waits
// first while this process is suspended. Must be called with no lock of libvgpu held, except
// the pool, graph and module locks (runtime.h).
bool Admit(Runtime& rt, int ordinal, uint64_t bytes, UsageKind kind);
// Records memory the driver already holds (never refused: the truth is recorded).
void Record(Runtime& rt, int ordinal, uint64_t bytes, UsageKind kind);
void Return(Runtime& rt, int ordinal, uint64_t bytes, UsageKind kind);
// Hands back everything in `returns`.
void Apply(Runtime& rt, const Returns& returns);
// The device's allocation granularity (asked once; 2 MiB when the driver cannot say).
uint64_t Granularity(Runtime& rt, int ordinal);
// The CUDA ordinal of a stream's device (the current context's for the NULL and per-thread
// streams), or the driver's error.
CUresult StreamDevice(Runtime& rt, CUstream stream, int* ordinal);

// ---- linear memory ----
// The charge of an allocation, computed and recorded (for small ones, the page share)
// before the driver is asked.
struct Charge {
  int device = -1;
  CUcontext ctx = nullptr;
  uint64_t reserved = 0;  // bytes reserved in the region for this allocation now
  uint64_t size = 0;      // what the allocation counts for (small: rounded to 512 bytes)
  bool small = false;
};

// Reserves for `bytes` of `kind` on the current context's device. CUDA_ERROR_OUT_OF_MEMORY
// past the limit or when the process is refused; the driver's error when there is no current
// context.
CUresult Reserve(Runtime& rt, uint64_t bytes, UsageKind kind, Charge* charge);
// Undoes Reserve (the driver call failed).
void Unreserve(Runtime& rt, const Charge& charge, UsageKind kind);
// Records a successful allocation at `ptr`.
void Track(Runtime& rt, CUdeviceptr ptr, const Charge& charge, UsageKind kind);
// Forgets `ptr` and releases its charge; false if it was not ours.
bool Forget(Runtime& rt, CUdeviceptr ptr);

// Marks a driver call that allocates or frees as in flight: module loads are measured only
// across a window in which none ran.
class Allocating {
 public:
  explicit Allocating(Runtime& rt) : calls_(rt.allocation_calls) { calls_.Enter(); }
  ~Allocating() { calls_.Exit(); }
  Allocating(const Allocating&) = delete;
  Allocating& operator=(const Allocating&) = delete;

 private:
  CallCensus& calls_;
};

// Reserve + driver call + Track, for calls that produce one device pointer.
template <typename Call>
CUresult AdmitAllocation(Runtime& rt, CUdeviceptr* dptr, uint64_t bytes, UsageKind kind,
                         Call call) {
  if (dptr == nullptr || bytes == 0) return call();
  Charge charge;
  CUresult r = Reserve(rt, bytes, kind, &charge);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) {
    return call();  // the driver's own answer for a thread without a usable context
  }
  if (r != CUDA_SUCCESS) return r;
  {
    Allocating allocating(rt);
    r = call();
  }
  if (r != CUDA_SUCCESS) {
    Unreserve(rt, charge, kind);
    return r;
  }
  Track(rt, *dptr, charge, kind);
  return CUDA_SUCCESS;
}

// Driver call, then release what `ptr` held (unknown pointers: the driver's result alone).
template <typename Call>
CUresult FreeAllocation(Runtime& rt, CUdeviceptr ptr, Call call) {
  CUresult r;
  {
    Allocating allocating(rt);
    r = call();
  }
  if (r == CUDA_SUCCESS) Forget(rt, ptr);
  return r;
}

// ---- pitched memory ----
// The driver picks the pitch, so the reservation is for the widest it may choose: the width
// rounded up to kPitchAlign bytes, times the height (saturating). Once the driver answered,
// the charge settles on the real pitch times the height; should that be wider than reserved
// (rare), the real size is charged, or, past the limit, the memory is freed again and the
// call fails with CUDA_ERROR_OUT_OF_MEMORY.
inline constexpr uint64_t kPitchAlign = 512;
constexpr uint64_t PitchEstimate(uint64_t width, uint64_t height) {
  return SaturatingMul(RoundUp(width, kPitchAlign), height);
}
// Settles `charge` (reserved for the estimate) on the real size `actual` of the allocation at
// `ptr`. False: the real size did not fit, the memory was freed and nothing is charged.
bool SettlePitch(Runtime& rt, CUdeviceptr ptr, uint64_t actual, Charge* charge);

// Reserve + driver call + settle + Track of a pitched allocation. A NULL output or an empty
// shape goes to the driver.
template <typename Size, typename Call>
CUresult AllocPitch(Runtime& rt, CUdeviceptr* dptr, Size* pitch, uint64_t width, uint64_t height,
                    Call call) {
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) return call();
  Charge charge;
  if (CUresult r = Reserve(rt, PitchEstimate(width, height), UsageKind::kData, &charge);
      r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return r;
    return call();  // the driver's own answer for a thread without a usable context
  }
  CUresult r;
  {
    Allocating allocating(rt);
    r = call();
  }
  if (r != CUDA_SUCCESS) {
    Unreserve(rt, charge, UsageKind::kData);
    return r;
  }
  if (!SettlePitch(rt, *dptr, SaturatingMul(uint64_t(*pitch), height), &charge)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Track(rt, *dptr, charge, UsageKind::kData);
  return CUDA_SUCCESS;
}

// ---- objects: arrays, mipmapped arrays, modules, libraries (arrays.h, modules.h) ----
void TrackObject(Runtime& rt, const void* handle, const Held& held);
// Releases what `handle` held; false if it was not ours.
bool ForgetObject(Runtime& rt, const void* handle);

// Admission + driver call + TrackObject for a created object of `bytes` on the current
// context's device.
template <typename Handle, typename Call>
CUresult AdmitObject(Runtime& rt, Handle* handle, uint64_t bytes, UsageKind kind, Call call) {
  int dev;
  CUcontext ctx;
  if (handle == nullptr || bytes == 0 || CurrentDevice(rt, &dev, &ctx) != CUDA_SUCCESS) {
    return call();
  }
  uint64_t charge = RoundUp(bytes, Granularity(rt, dev));
  if (!Admit(rt, dev, charge, kind)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r;
  {
    Allocating allocating(rt);
    r = call();
  }
  if (r != CUDA_SUCCESS) {
    Return(rt, dev, charge, kind);
    return r;
  }
  TrackObject(rt, *handle, Held{dev, charge, kind, ctx});
  return CUDA_SUCCESS;
}

// ---- pools and graph memory (pools.h, graphs.h) ----
// Calls `fn` for every node of `graph` and of its child graphs (not the child-graph nodes
// themselves), at most 16 levels deep.
void ForEachGraphNode(Runtime& rt, CUgraph graph,
                      const std::function<void(CUgraphNode, CUgraphNodeType)>& fn);
// Brings what the region holds for each pool this process uses to the pool's reserved
// memory now.
void ReconcilePools(Runtime& rt);
// The same for graph memory on CUDA ordinal `ordinal` (-1: every device).
void ReconcileGraphMemory(Runtime& rt, int ordinal);

// ---- contexts ----
// Charges a newly created context (primary or not).
template <typename Call>
CUresult CreateContext(Runtime& rt, CUdevice dev, CUcontext* pctx, bool primary, Call call);
// A primary context may have gone (last release, reset): release it if so.
void PrimaryMayHaveEnded(Runtime& rt, CUdevice dev);
// A context was destroyed: release its charge and everything allocated in it.
void ContextEnded(Runtime& rt, CUcontext ctx);

// ---- implementation details of CreateContext ----
bool PrimaryActive(Runtime& rt, CUdevice dev);
// What NVML says is in use on CUDA device `dev`: by the whole device, and by this process
// (its own entry in the running-process list, 0 when not listed). UINT64_MAX when unknown.
struct DeviceUse {
  uint64_t device = UINT64_MAX;
  uint64_t process = 0;
  bool process_listed = false;
};
DeviceUse MeasureUse(Runtime& rt, CUdevice dev);
// NVML's list of compute processes on `h`: up to kMaxListedProcesses entries. False when NVML
// cannot say.
inline constexpr unsigned kMaxListedProcesses = 512;
struct ListedProcesses {
  unsigned count = 0;
  nvmlProcessInfo_t infos[kMaxListedProcesses];
  const nvmlProcessInfo_t* Find(unsigned pid) const;
};
bool ListProcesses(Runtime& rt, nvmlDevice_t h, ListedProcesses* out);
// An entry's memory, 0 when NVML does not know it.
uint64_t UsedMemory(const nvmlProcessInfo_t& p);
// The context size measured on `dev` so far (0 = not yet).
uint64_t KnownContextBytes(Runtime& rt, CUdevice dev);
// A context of a known size, admitted before the driver is asked: false when the budget
// cannot hold it (or the process or device is refused).
bool AdmitContext(Runtime& rt, CUdevice dev, uint64_t bytes);
// Books a context just made: `admitted` bytes were admitted before (AdmitContext); with 0,
// its size is measured now (from `before`) and admitted. False when that admission is
// refused: the caller undoes the context.
bool ChargeContext(Runtime& rt, CUdevice dev, CUcontext ctx, bool primary, const DeviceUse& before,
                   uint64_t admitted);
// Gives back a context the budget could not hold (the driver's destroy, or the primary's
// release), so that the failed call leaves nothing behind.
void UndoContext(Runtime& rt, CUdevice dev, CUcontext ctx, bool primary);

// Every new context is admitted like any memory: by its measured size before the driver is
// asked, or (its size not known yet) measured once made and undone when the budget cannot
// hold it. Over the budget: CUDA_ERROR_OUT_OF_MEMORY, as a full GPU answers.
template <typename Call>
CUresult CreateContext(Runtime& rt, CUdevice dev, CUcontext* pctx, bool primary, Call call) {
  if (pctx == nullptr || (primary && PrimaryActive(rt, dev))) return call();
  const uint64_t known = KnownContextBytes(rt, dev);
  DeviceUse before;
  if (known != 0) {
    if (!AdmitContext(rt, dev, known)) return CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    before = MeasureUse(rt, dev);
  }
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    if (known != 0) Return(rt, int(dev), known, UsageKind::kContext);
    return r;
  }
  if (!ChargeContext(rt, dev, *pctx, primary, before, known)) {
    UndoContext(rt, dev, *pctx, primary);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return r;
}

}  // namespace hami::vgpu
