#include "vgpu/imports.h"

namespace hami::vgpu {

namespace {

void Add(Runtime& rt, uint64_t bytes) {
  if (region::Region* reg = ViewRegion(rt); reg != nullptr && bytes != 0) reg->AddImported(bytes);
}

void Subtract(Runtime& rt, uint64_t bytes) {
  if (region::Region* reg = ViewRegion(rt); reg != nullptr && bytes != 0) {
    reg->SubtractImported(bytes);
  }
}

}  // namespace

void RecordImportedPointer(Runtime& rt, CUdeviceptr ptr, CUmemoryPool pool) {
  const CudaDriver* d = rt.CudaIfLoaded();
  if (d == nullptr || d->aux.cuMemGetAddressRange_v2 == nullptr) return;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (d->aux.cuMemGetAddressRange_v2(&base, &size, ptr) != CUDA_SUCCESS || size == 0) return;
  CUcontext ctx = nullptr;
  if (d->aux.cuCtxGetCurrent != nullptr) d->aux.cuCtxGetCurrent(&ctx);
  // Opened twice, the same address is one mapping: the later record replaces the earlier.
  Subtract(rt, rt.imports.TakePointer(ptr));
  rt.imports.AddPointer(ptr, size, ctx, pool);
  Add(rt, size);
}

void ForgetImportedPointerSlow(Runtime& rt, CUdeviceptr ptr) {
  Subtract(rt, rt.imports.TakePointer(ptr));
}

void ImportsEndedWithPool(Runtime& rt, CUmemoryPool pool) {
  if (!rt.imports.empty()) Subtract(rt, rt.imports.TakePool(pool));
}

void ImportsEndedWithContext(Runtime& rt, CUcontext ctx) {
  if (!rt.imports.empty()) Subtract(rt, rt.imports.TakeContext(ctx));
}

void RecordImportedHandle(Runtime& rt, CUmemGenericAllocationHandle handle) {
  rt.imports.AddHandle(handle);
}

void RetainedImportedHandle(Runtime& rt, CUmemGenericAllocationHandle handle) {
  if (!rt.imports.empty()) rt.imports.RetainHandle(handle);
}

void ReleasedImportedHandle(Runtime& rt, CUmemGenericAllocationHandle handle) {
  if (!rt.imports.empty()) rt.imports.ReleaseHandle(handle);
}

void ImportedHandleIsMulticast(Runtime& rt, CUmemGenericAllocationHandle handle) {
  if (!rt.imports.empty()) rt.imports.ForgetHandle(handle);
}

void MappedImport(Runtime& rt, CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle) {
  if (!rt.imports.empty()) Add(rt, rt.imports.AddMapping(ptr, size, handle));
}

void UnmappedImports(Runtime& rt, CUdeviceptr ptr, size_t size) {
  if (!rt.imports.empty()) Subtract(rt, rt.imports.TakeMappings(ptr, size));
}

}  // namespace hami::vgpu
