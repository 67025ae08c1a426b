// Memory of other processes mapped here: the hooks (the policy is imports.h). Each calls the
// driver first and records only what it granted; nothing is charged to the device budget.
#include "vgpu/imports.h"
#include "vgpu/prologue.h"
#include "vgpu/spill.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

extern "C" {

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
  HAMI_CUDA_PROLOGUE(cuMemImportFromShareableHandle, handle, osHandle, shHandleType);
  CUresult r = drv.cuda.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
  if (r == CUDA_SUCCESS && handle != nullptr) RecordImportedHandle(rt, *handle);
  return r;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  HAMI_CUDA_PROLOGUE(cuIpcOpenMemHandle, pdptr, handle, Flags);
  CUresult r = drv.cuda.cuIpcOpenMemHandle(pdptr, handle, Flags);
  if (r == CUDA_SUCCESS && pdptr != nullptr) RecordImportedPointer(rt, *pdptr, nullptr);
  return r;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                       unsigned int Flags) {
  HAMI_CUDA_PROLOGUE(cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
  CUresult r = drv.cuda.cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
  if (r == CUDA_SUCCESS && pdptr != nullptr) RecordImportedPointer(rt, *pdptr, nullptr);
  return r;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  HAMI_CUDA_PROLOGUE(cuIpcCloseMemHandle, dptr);
  CUresult r = drv.cuda.cuIpcCloseMemHandle(dptr);
  if (r == CUDA_SUCCESS) ForgetImportedPointer(rt, dptr);
  return r;
}

CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool,
                                        CUmemPoolPtrExportData* shareData) {
  HAMI_CUDA_PROLOGUE(cuMemPoolImportPointer, ptr_out, pool, shareData);
  CUresult r = drv.cuda.cuMemPoolImportPointer(ptr_out, pool, shareData);
  if (r == CUDA_SUCCESS && ptr_out != nullptr) RecordImportedPointer(rt, *ptr_out, pool);
  return r;
}

// An imported pool pointer is freed like any pool allocation; the pool's own memory is
// reconciled at the next synchronization (pools.h), as without this hook. A pointer served from
// host memory (CUDA_OVERSUBSCRIBE, spill.h) is not stream-ordered memory to the driver: its free
// waits for the stream's work before it, then frees it as cuMemFree_v2 does. A stream that
// cannot be waited for fails the free and keeps the memory.
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuMemFreeAsync, dptr, hStream);
  if (CUresult freed;
      FreeIfSpilledOnStream(rt, dptr, hStream, drv.cuda.cuStreamSynchronize, &freed)) {
    return freed;
  }
  CUresult r = drv.cuda.cuMemFreeAsync(dptr, hStream);
  if (r == CUDA_SUCCESS) ForgetImportedPointer(rt, dptr);
  return r;
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuMemFreeAsync_ptsz, dptr, hStream);
  if (CUresult freed;
      FreeIfSpilledOnStream(rt, dptr, hStream, drv.cuda.cuStreamSynchronize_ptsz, &freed)) {
    return freed;
  }
  CUresult r = drv.cuda.cuMemFreeAsync_ptsz(dptr, hStream);
  if (r == CUDA_SUCCESS) ForgetImportedPointer(rt, dptr);
  return r;
}

// ---- multicast objects: not memory ----

CUresult CUDAAPI cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev) {
  HAMI_CUDA_PROLOGUE(cuMulticastAddDevice, mcHandle, dev);
  CUresult r = drv.cuda.cuMulticastAddDevice(mcHandle, dev);
  if (r == CUDA_SUCCESS) ImportedHandleIsMulticast(rt, mcHandle);
  return r;
}

CUresult CUDAAPI cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                    CUmemGenericAllocationHandle memHandle, size_t memOffset,
                                    size_t size, unsigned long long flags) {
  HAMI_CUDA_PROLOGUE(cuMulticastBindMem, mcHandle, mcOffset, memHandle, memOffset, size, flags);
  CUresult r = drv.cuda.cuMulticastBindMem(mcHandle, mcOffset, memHandle, memOffset, size, flags);
  if (r == CUDA_SUCCESS) ImportedHandleIsMulticast(rt, mcHandle);
  return r;
}

CUresult CUDAAPI cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                     CUdeviceptr memptr, size_t size, unsigned long long flags) {
  HAMI_CUDA_PROLOGUE(cuMulticastBindAddr, mcHandle, mcOffset, memptr, size, flags);
  CUresult r = drv.cuda.cuMulticastBindAddr(mcHandle, mcOffset, memptr, size, flags);
  if (r == CUDA_SUCCESS) ImportedHandleIsMulticast(rt, mcHandle);
  return r;
}

}  // extern "C"
