// Oversubscription (CUDA_OVERSUBSCRIBE): an allocation the device budget refuses is served
// from host memory the device can still use, within a host budget, instead of failing.
//
// How: pinned host memory mapped into the device's address space (cuMemHostAlloc with
// CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE, then cuMemHostGetDevicePointer). It is
// never device memory, whatever the application does afterwards (a prefetch or an advice
// cannot move it onto the GPU, as they could managed memory), so the device budget stays
// exact; docs/vgpu.md says why this and not managed memory.
//
// Which calls: cuMemAlloc_v2 and cuMemAllocPitch_v2, and only when the device budget refused
// the allocation (the driver was not asked): a process or device held closed, a refused
// region, the watcher's suspension and the driver's own refusals all stay refusals. The
// 32-bit ABIs cannot hold a host-mapped pointer; managed, stream-ordered, VMM and array
// allocations have semantics host memory cannot keep; they fail with
// CUDA_ERROR_OUT_OF_MEMORY as before.
//
// The host budget is the container's, all devices together (region::Region::ReserveHost):
// exact across processes, recorded in the process's slot, refused with
// CUDA_ERROR_OUT_OF_MEMORY when spent. A spilled pointer is given back by cuMemFree_v2
// (cuMemFreeHost underneath, and the host budget, never the device's) or with its context.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <span>

#include "vgpu/runtime.h"

namespace hami::vgpu {

// The host budget a process brings to its container's region: 0 when oversubscription is
// off; CUDA_OVERSUBSCRIBE_HOST_LIMIT when set (0 when it could not be read: held closed);
// else the memory limits of its first `device_count` devices added up (a device without a
// limit, or held closed, adds nothing).
uint64_t HostBudget(const Config& config, int device_count);
// The host budget of a process that oversubscribes: `host_limit` when set, else
// `memory_limits` added up (a device without a limit, or held closed, adds nothing). What the
// watcher applies when the limits file changes either.
uint64_t HostBudgetOf(const std::optional<uint64_t>& host_limit,
                      std::span<const uint64_t> memory_limits);

// What cuMemAlloc_v2 (and cuMemAllocPitch_v2, for pitch x height bytes) answers once the
// device budget refused `bytes` on the current context's device: CUDA_SUCCESS with *dptr a
// device pointer to host memory, when oversubscription is on (the process's and the region's)
// and the host budget holds it; else CUDA_ERROR_OUT_OF_MEMORY.
CUresult SpillAllocation(Runtime& rt, CUdeviceptr* dptr, uint64_t bytes);

// cuMemFree_v2 of a spilled pointer: frees its host memory and gives back its host budget.
// False when `dptr` was not spilled (the caller frees it as device memory).
bool FreeSpilled(Runtime& rt, CUdeviceptr dptr, CUresult* result);
inline bool FreeIfSpilled(Runtime& rt, CUdeviceptr dptr, CUresult* result) {
  if (__builtin_expect(rt.spills.empty(), 1)) return false;  // one load when nothing spilled
  return FreeSpilled(rt, dptr, result);
}

// cuMemFreeAsync of a spilled pointer: the driver does not know it as stream-ordered memory, so
// the free waits for `stream` with `sync` (cuStreamSynchronize or its _ptsz form) and then frees
// it as FreeSpilled does; a wait that fails is the answer, and the memory stays. False when
// `dptr` was not spilled (one load when nothing was).
bool FreeSpilledOnStream(Runtime& rt, CUdeviceptr dptr, CUstream stream, CUresult (*sync)(CUstream),
                         CUresult* result);
inline bool FreeIfSpilledOnStream(Runtime& rt, CUdeviceptr dptr, CUstream stream,
                                  CUresult (*sync)(CUstream), CUresult* result) {
  if (__builtin_expect(rt.spills.empty(), 1)) return false;
  return FreeSpilledOnStream(rt, dptr, stream, sync, result);
}

// A context ended: the driver freed the host memory of its spills; their budget goes back.
void SpillsEndedWithContext(Runtime& rt, CUcontext ctx);

}  // namespace hami::vgpu
