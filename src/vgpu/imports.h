// Memory another process created, mapped into this one: a CUDA IPC handle opened
// (cuIpcOpenMemHandle), a pool pointer imported (cuMemPoolImportPointer), a VMM allocation
// imported from a shareable handle (cuMemImportFromShareableHandle) and mapped (cuMemMap). A
// multicast object imported the same way is not memory and is not recorded: libvgpu learns
// that a handle is one when a device is added or memory bound to it (cuMulticastAddDevice,
// cuMulticastBindMem, cuMulticastBindAddr), which a process does before it maps the object.
// It is its creator's and charged to its creator's container, never to the importer's
// budget; it is recorded here and in the process's region slot (imported_bytes), so that
// `hami inspect` and hami-monitor show how much of a container's address space is other
// processes' memory. A pointer counts from its opening to its close or free (or its context's
// end, or its pool's destruction); a VMM mapping of an imported handle from cuMemMap to
// cuMemUnmap.
//
// The hooks call the driver first and record only what it granted. Each recording function
// costs one load when nothing was ever imported.
#pragma once

#include <cuda.h>

#include "vgpu/runtime.h"

namespace hami::vgpu {

// A pointer the driver mapped from another process's memory (IPC, pool import): its size is
// asked of the driver (cuMemGetAddressRange) and recorded. `pool`: the importing pool (null
// for IPC).
void RecordImportedPointer(Runtime& rt, CUdeviceptr ptr, CUmemoryPool pool);
// The pointer was closed or freed: what it recorded goes.
void ForgetImportedPointerSlow(Runtime& rt, CUdeviceptr ptr);
inline void ForgetImportedPointer(Runtime& rt, CUdeviceptr ptr) {
  if (__builtin_expect(!rt.imports.empty(), 0)) ForgetImportedPointerSlow(rt, ptr);
}
// A pool was destroyed, a context ended: their imported pointers go.
void ImportsEndedWithPool(Runtime& rt, CUmemoryPool pool);
void ImportsEndedWithContext(Runtime& rt, CUcontext ctx);

// VMM: a handle imported from a shareable handle, another handle to it, its release.
void RecordImportedHandle(Runtime& rt, CUmemGenericAllocationHandle handle);
void RetainedImportedHandle(Runtime& rt, CUmemGenericAllocationHandle handle);
void ReleasedImportedHandle(Runtime& rt, CUmemGenericAllocationHandle handle);
// `handle` is a multicast object (a device was added to it, memory bound to it): it holds no
// memory, and a mapping of it is not another process's memory. An imported one is forgotten.
void ImportedHandleIsMulticast(Runtime& rt, CUmemGenericAllocationHandle handle);
// A mapping of `size` bytes at `ptr`: recorded when `handle` was imported.
void MappedImport(Runtime& rt, CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle);
// [ptr, ptr + size) was unmapped: the imported mappings that start in it go.
void UnmappedImports(Runtime& rt, CUdeviceptr ptr, size_t size);

}  // namespace hami::vgpu
