// Virtual memory management, arrays, mipmapped arrays, modules and libraries: the hooks (the
// policy is vmm.h, arrays.h and modules.h).
#include "vgpu/arrays.h"
#include "vgpu/imports.h"
#include "vgpu/modules.h"
#include "vgpu/prologue.h"
#include "vgpu/vmm.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace {

// A library's globals live in its code's instance in the context: made ready (measured)
// before the lookup.
template <typename Lookup>
CUresult LibraryGlobal(hami::vgpu::Runtime& rt, const hami::vgpu::CudaDriver& drv,
                       CUlibrary library, Lookup lookup) {
  if (drv.cuda.cuLibraryGetModule != nullptr) {
    CUresult ready = MeasuredInstance(rt, library, [&](const void** key) {
      CUmodule m = nullptr;
      CUresult r = drv.cuda.cuLibraryGetModule(&m, library);
      *key = r == CUDA_SUCCESS ? m : nullptr;
      return r;
    });
    if (ready == CUDA_ERROR_OUT_OF_MEMORY) return ready;
  }
  return lookup();
}

}  // namespace

extern "C" {

// ---- VMM ----

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  HAMI_CUDA_PROLOGUE(cuMemCreate, handle, size, prop, flags);
  return CreatePhysical(rt, handle, size, prop,
                        [&] { return drv.cuda.cuMemCreate(handle, size, prop, flags); });
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  HAMI_CUDA_PROLOGUE(cuMemRelease, handle);
  CUresult r = ReleasePhysical(rt, handle, [&] { return drv.cuda.cuMemRelease(handle); });
  if (r == CUDA_SUCCESS) ReleasedImportedHandle(rt, handle);
  return r;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  HAMI_CUDA_PROLOGUE(cuMemRetainAllocationHandle, handle, addr);
  CUresult r = RetainPhysical(rt, handle,
                              [&] { return drv.cuda.cuMemRetainAllocationHandle(handle, addr); });
  if (r == CUDA_SUCCESS && handle != nullptr) RetainedImportedHandle(rt, *handle);
  return r;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  HAMI_CUDA_PROLOGUE(cuMemMap, ptr, size, offset, handle, flags);
  CUresult r = MapPhysical(rt, ptr, size, handle,
                           [&] { return drv.cuda.cuMemMap(ptr, size, offset, handle, flags); });
  if (r == CUDA_SUCCESS) MappedImport(rt, ptr, size, handle);
  return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  HAMI_CUDA_PROLOGUE(cuMemUnmap, ptr, size);
  CUresult r = UnmapPhysical(rt, ptr, size, [&] { return drv.cuda.cuMemUnmap(ptr, size); });
  if (r == CUDA_SUCCESS) UnmappedImports(rt, ptr, size);
  return r;
}

// ---- arrays ----

CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  HAMI_CUDA_PROLOGUE(cuArrayCreate_v2, pHandle, desc);
  return CreateArray(rt, pHandle, desc, 1,
                     [&] { return drv.cuda.cuArrayCreate_v2(pHandle, desc); });
}

CUresult CUDAAPI cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* desc) {
  HAMI_CUDA_PROLOGUE(cuArrayCreate, pHandle, desc);
  return CreateArray(rt, pHandle, desc, 1, [&] { return drv.cuda.cuArrayCreate(pHandle, desc); });
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  HAMI_CUDA_PROLOGUE(cuArray3DCreate_v2, pHandle, desc);
  return CreateArray(rt, pHandle, desc, 1,
                     [&] { return drv.cuda.cuArray3DCreate_v2(pHandle, desc); });
}

CUresult CUDAAPI cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc) {
  HAMI_CUDA_PROLOGUE(cuArray3DCreate, pHandle, desc);
  return CreateArray(rt, pHandle, desc, 1, [&] { return drv.cuda.cuArray3DCreate(pHandle, desc); });
}

CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  HAMI_CUDA_PROLOGUE(cuArrayDestroy, hArray);
  return DestroyObject(rt, hArray, [&] { return drv.cuda.cuArrayDestroy(hArray); });
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                        const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                        unsigned int numMipmapLevels) {
  HAMI_CUDA_PROLOGUE(cuMipmappedArrayCreate, pHandle, desc, numMipmapLevels);
  return CreateArray(rt, pHandle, desc, numMipmapLevels, [&] {
    return drv.cuda.cuMipmappedArrayCreate(pHandle, desc, numMipmapLevels);
  });
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  HAMI_CUDA_PROLOGUE(cuMipmappedArrayDestroy, hMipmappedArray);
  return DestroyObject(rt, hMipmappedArray,
                       [&] { return drv.cuda.cuMipmappedArrayDestroy(hMipmappedArray); });
}

// ---- modules and libraries ----

CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  HAMI_CUDA_PROLOGUE(cuModuleLoad, module, fname);
  return MeasuredLoad(
      rt, module, LoadScope::kContext, [&] { return drv.cuda.cuModuleLoad(module, fname); },
      drv.cuda.cuModuleUnload);
}

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  HAMI_CUDA_PROLOGUE(cuModuleLoadData, module, image);
  return MeasuredLoad(
      rt, module, LoadScope::kContext, [&] { return drv.cuda.cuModuleLoadData(module, image); },
      drv.cuda.cuModuleUnload);
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  HAMI_CUDA_PROLOGUE(cuModuleLoadDataEx, module, image, numOptions, options, optionValues);
  return MeasuredLoad(
      rt, module, LoadScope::kContext,
      [&] { return drv.cuda.cuModuleLoadDataEx(module, image, numOptions, options, optionValues); },
      drv.cuda.cuModuleUnload);
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  HAMI_CUDA_PROLOGUE(cuModuleLoadFatBinary, module, fatCubin);
  return MeasuredLoad(
      rt, module, LoadScope::kContext,
      [&] { return drv.cuda.cuModuleLoadFatBinary(module, fatCubin); }, drv.cuda.cuModuleUnload);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  HAMI_CUDA_PROLOGUE(cuModuleUnload, hmod);
  return DestroyObject(rt, hmod, [&] { return drv.cuda.cuModuleUnload(hmod); });
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                   unsigned int numLibraryOptions) {
  HAMI_CUDA_PROLOGUE(cuLibraryLoadData, library, code, jitOptions, jitOptionsValues, numJitOptions,
                     libraryOptions, libraryOptionValues, numLibraryOptions);
  auto call = [&] {
    return drv.cuda.cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions,
                                      libraryOptions, libraryOptionValues, numLibraryOptions);
  };
  return MeasuredLoad(rt, library, LoadScope::kProcess, call, drv.cuda.cuLibraryUnload);
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                       CUjit_option* jitOptions, void** jitOptionsValues,
                                       unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                       void** libraryOptionValues, unsigned int numLibraryOptions) {
  HAMI_CUDA_PROLOGUE(cuLibraryLoadFromFile, library, fileName, jitOptions, jitOptionsValues,
                     numJitOptions, libraryOptions, libraryOptionValues, numLibraryOptions);
  auto call = [&] {
    return drv.cuda.cuLibraryLoadFromFile(library, fileName, jitOptions, jitOptionsValues,
                                          numJitOptions, libraryOptions, libraryOptionValues,
                                          numLibraryOptions);
  };
  return MeasuredLoad(rt, library, LoadScope::kProcess, call, drv.cuda.cuLibraryUnload);
}

// Code made ready in the current context: where lazy loading loads it (modules.h,
// MeasuredInstance).

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  HAMI_CUDA_PROLOGUE(cuModuleGetFunction, hfunc, hmod, name);
  if (hfunc == nullptr) return drv.cuda.cuModuleGetFunction(hfunc, hmod, name);
  return MeasuredInstance(rt, hmod, [&](const void** key) {
    CUresult r = drv.cuda.cuModuleGetFunction(hfunc, hmod, name);
    *key = r == CUDA_SUCCESS ? *hfunc : nullptr;
    return r;
  });
}

CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  HAMI_CUDA_PROLOGUE(cuLibraryGetModule, pMod, library);
  if (pMod == nullptr) return drv.cuda.cuLibraryGetModule(pMod, library);
  return MeasuredInstance(rt, library, [&](const void** key) {
    CUresult r = drv.cuda.cuLibraryGetModule(pMod, library);
    *key = r == CUDA_SUCCESS ? *pMod : nullptr;
    return r;
  });
}

// The runtime looks a kernel up just before its first use: its code is made ready in the
// current context here, measured, rather than inside the launch that follows.
CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  HAMI_CUDA_PROLOGUE(cuLibraryGetKernel, pKernel, library, name);
  CUresult r = drv.cuda.cuLibraryGetKernel(pKernel, library, name);
  if (r != CUDA_SUCCESS || pKernel == nullptr || drv.cuda.cuKernelGetFunction == nullptr) return r;
  CUcontext ctx = nullptr;
  if (drv.aux.cuCtxGetCurrent == nullptr || drv.aux.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS ||
      ctx == nullptr) {
    return r;  // no context: the first use loads it, unmeasured
  }
  CUresult ready = MeasuredInstance(rt, library, [&](const void** key) {
    CUfunction f = nullptr;
    CUresult got = drv.cuda.cuKernelGetFunction(&f, *pKernel);
    *key = got == CUDA_SUCCESS ? f : nullptr;
    return got;
  });
  // Only a refusal is the caller's to know; anything else the launch will say again.
  return ready == CUDA_ERROR_OUT_OF_MEMORY ? ready : r;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  HAMI_CUDA_PROLOGUE(cuKernelGetFunction, pFunc, kernel);
  if (pFunc == nullptr) return drv.cuda.cuKernelGetFunction(pFunc, kernel);
  CUlibrary library = nullptr;
  if (drv.aux.cuKernelGetLibrary != nullptr) drv.aux.cuKernelGetLibrary(&library, kernel);
  return MeasuredInstance(rt, library, [&](const void** key) {
    CUresult r = drv.cuda.cuKernelGetFunction(pFunc, kernel);
    *key = r == CUDA_SUCCESS ? *pFunc : nullptr;
    return r;
  });
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                    const char* name) {
  HAMI_CUDA_PROLOGUE(cuLibraryGetGlobal, dptr, bytes, library, name);
  return LibraryGlobal(rt, drv, library,
                       [&] { return drv.cuda.cuLibraryGetGlobal(dptr, bytes, library, name); });
}

CUresult CUDAAPI cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                     const char* name) {
  HAMI_CUDA_PROLOGUE(cuLibraryGetManaged, dptr, bytes, library, name);
  return LibraryGlobal(rt, drv, library,
                       [&] { return drv.cuda.cuLibraryGetManaged(dptr, bytes, library, name); });
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  HAMI_CUDA_PROLOGUE(cuLibraryUnload, library);
  return DestroyObject(rt, library, [&] { return drv.cuda.cuLibraryUnload(library); });
}

}  // extern "C"
