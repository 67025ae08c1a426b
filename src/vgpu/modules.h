// Modules and libraries (cuModuleLoad*, cuLibraryLoad*).
//
// What is charged: the device memory a load takes, measured as the drop in the device's free
// memory across the load, and admitted like any allocation once the load is done: past the
// limit the load is undone (the module or library unloaded) and the call fails with
// CUDA_ERROR_OUT_OF_MEMORY. Loads are measured one at a time (module_mu, held across the
// load); a load that overlapped another allocating or freeing call of this process (counted
// by Allocating) is not measured, and so not charged. A module goes with its context; a
// library is tied to none. Given back when it is unloaded (or its context ends). A NULL
// output, no current context, or a driver that cannot say its free memory goes to the driver
// alone.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "vgpu/accounting.h"

namespace hami::vgpu {

// Whether a load is tied to the context current when it was made.
enum class LoadScope { kContext, kProcess };

// One load's measurement.
struct LoadWindow {
  int device = -1;
  CUcontext ctx = nullptr;  // what the charge goes with (null: the process)
  CallCensus::Count calls;  // Runtime::allocation_calls at the first reading
  size_t before = 0;        // free bytes before the load
  bool measured = false;    // both readings were made, with no other call in between
  uint64_t bytes = 0;       // what the load took (0: nothing to charge)
};

// Before the lock: the current context's device. False: nothing can be measured (no current
// context, or the driver cannot say its free memory).
bool BeginLoad(Runtime& rt, LoadScope scope, LoadWindow* w);
// With module_mu held, before the load: the first reading.
void ReadBefore(Runtime& rt, LoadWindow* w) REQUIRES(rt.module_mu);
// With module_mu held, after a successful load: the second reading and what the load took.
void ReadAfter(Runtime& rt, LoadWindow* w) REQUIRES(rt.module_mu);

// Load + measurement + admission. `unload(handle)` undoes a load past the limit; a load that
// could not be undone (a null `unload`: the driver lacks it) is not measured.
template <typename Handle, typename Call, typename Unload>
CUresult MeasuredLoad(Runtime& rt, Handle* out, LoadScope scope, Call call, Unload unload) {
  if constexpr (std::is_pointer_v<Unload>) {
    if (unload == nullptr) return call();
  }
  LoadWindow w;
  if (out == nullptr || !BeginLoad(rt, scope, &w)) return call();
  {
    MutexLock l(&rt.module_mu);
    ReadBefore(rt, &w);
    CUresult r = call();
    if (r != CUDA_SUCCESS) return r;
    ReadAfter(rt, &w);
  }
  if (w.bytes == 0) return CUDA_SUCCESS;
  // Admitted with module_mu released: the region's mutex is never taken under it.
  if (!Admit(rt, w.device, w.bytes, UsageKind::kModule)) {
    unload(*out);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  TrackObject(rt, *out, Held{w.device, w.bytes, UsageKind::kModule, w.ctx});
  return CUDA_SUCCESS;
}

// Says, at every level, that code loaded into a context took memory past the limit.
void RefuseLazyLoad(int device, uint64_t bytes);

// A library's or module's code made ready in the current context (`call`, which names
// what it made ready in *key). With lazy loading (CUDA's default) this is where the driver
// loads the code into the context; left to the first launch it would happen inside the
// launch, unmeasured. Measured as a load is, and charged to *key, going with the context and
// with `owner` (the library or module) when that is unloaded. The memory is already the
// driver's: past the limit it is recorded all the same and the call fails with
// CUDA_ERROR_OUT_OF_MEMORY, as a lazy load fails on a full GPU.
template <typename Call>
CUresult MeasuredInstance(Runtime& rt, const void* owner, Call call) {
  const void* key = nullptr;
  LoadWindow w;
  if (!BeginLoad(rt, LoadScope::kContext, &w)) return call(&key);
  {
    MutexLock l(&rt.module_mu);
    ReadBefore(rt, &w);
    CUresult r = call(&key);
    if (r != CUDA_SUCCESS) return r;
    ReadAfter(rt, &w);
  }
  if (w.bytes == 0 || key == nullptr) return CUDA_SUCCESS;
  const Held held{w.device, w.bytes, UsageKind::kModule, w.ctx, owner};
  if (Admit(rt, w.device, w.bytes, UsageKind::kModule)) {
    TrackObject(rt, key, held);
    return CUDA_SUCCESS;
  }
  Record(rt, w.device, w.bytes, UsageKind::kModule);
  TrackObject(rt, key, held);
  RefuseLazyLoad(w.device, w.bytes);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

}  // namespace hami::vgpu
