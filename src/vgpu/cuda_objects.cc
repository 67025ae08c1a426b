// Virtual memory management, arrays, mipmapped arrays, modules and libraries.
#include <algorithm>

#include "vgpu/accounting.h"
#include "vgpu/runtime.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace {

// ---- arrays ----

// Bytes per element, an upper bound for packed and compressed formats (the channel count
// multiplies only the plain formats, whose elements it describes).
uint64_t ElementBytes(CUarray_format format, unsigned channels) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return channels;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2ull * channels;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4ull * channels;
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
    case CU_AD_FORMAT_BC1_UNORM:  // 8 or 16 bytes per 4x4 block: at most one per texel
    case CU_AD_FORMAT_BC1_UNORM_SRGB:
    case CU_AD_FORMAT_BC2_UNORM:
    case CU_AD_FORMAT_BC2_UNORM_SRGB:
    case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB:
    case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
    case CU_AD_FORMAT_BC5_UNORM:
    case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16:
    case CU_AD_FORMAT_BC6H_SF16:
    case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
      return 1;
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
    case CU_AD_FORMAT_NV12:  // 1.5 bytes per texel
    case CU_AD_FORMAT_NV16:
    case CU_AD_FORMAT_YUY2:
      return 2;
    case CU_AD_FORMAT_P010:
    case CU_AD_FORMAT_P016:
    case CU_AD_FORMAT_Y444_PLANAR8:
    case CU_AD_FORMAT_YUV444_8bit_SemiPlanar:
      return 3;
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
    case CU_AD_FORMAT_P210:
    case CU_AD_FORMAT_P216:
    case CU_AD_FORMAT_Y210:
    case CU_AD_FORMAT_Y216:
    case CU_AD_FORMAT_AYUV:
    case CU_AD_FORMAT_Y410:
    case CU_AD_FORMAT_UNORM_INT_101010_2:
      return 4;
    case CU_AD_FORMAT_Y444_PLANAR10:
    case CU_AD_FORMAT_YUV444_16bit_SemiPlanar:
      return 6;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
    case CU_AD_FORMAT_Y416:
      return 8;
    default:
      return 16;  // a format this build does not know: the widest element
  }
}

struct ArrayShape {
  uint64_t width, height, depth;
  CUarray_format format;
  unsigned channels;
  unsigned flags;
};

// The estimated bytes of `levels` mip levels (1 for a plain array): each level halves
// every dimension (at least 1) but the layers of a layered or cube map array.
uint64_t ArrayBytes(const ArrayShape& s, unsigned levels) {
  uint64_t elem = ElementBytes(s.format, s.channels);
  bool layers = (s.flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  uint64_t total = 0;
  for (unsigned l = 0; l < levels && l < 64; ++l) {
    uint64_t w = std::max<uint64_t>(s.width >> l, 1);
    uint64_t h = std::max<uint64_t>(s.height >> l, 1);
    uint64_t d = layers ? std::max<uint64_t>(s.depth, 1) : std::max<uint64_t>(s.depth >> l, 1);
    total += w * h * d * elem;
  }
  return total;
}

template <typename Desc>
ArrayShape Shape2D(const Desc& d) {
  return {d.Width, d.Height, 0, d.Format, d.NumChannels, 0};
}

template <typename Desc>
ArrayShape Shape3D(const Desc& d) {
  return {d.Width, d.Height, d.Depth, d.Format, d.NumChannels, d.Flags};
}

// ---- modules and libraries ----

// Loads with the device's free memory read on both sides; what it dropped by is the load's
// own memory, admitted like any allocation (past the limit the load is undone and fails
// with CUDA_ERROR_OUT_OF_MEMORY). A load that overlapped another allocation or free of this
// process is not measured, and so not charged. Libraries are not tied to a context.
template <typename Handle, typename Call, typename Unload>
CUresult MeasuredLoad(Handle* out, bool per_context, Call call, Unload unload) {
  const CudaDriver& drv = CudaOrEmpty();
  Runtime& rt = Rt();
  int dev;
  CUcontext ctx;
  if (out == nullptr || drv.cuda.cuMemGetInfo_v2 == nullptr ||
      CurrentDevice(&dev, &ctx) != CUDA_SUCCESS) {
    return call();
  }
  CUresult r;
  size_t before = 0, after = 0, total = 0;
  bool measured;
  {
    MutexLock l(&rt.module_mu);
    const uint64_t calls = rt.allocation_calls.load();
    measured =
        (calls & 0xffffffffu) == 0 && drv.cuda.cuMemGetInfo_v2(&before, &total) == CUDA_SUCCESS;
    r = call();
    if (r != CUDA_SUCCESS) return r;
    // Nothing else of this process allocated or freed in between (none in flight, none
    // begun).
    measured = measured && drv.cuda.cuMemGetInfo_v2(&after, &total) == CUDA_SUCCESS &&
               rt.allocation_calls.load() == calls;
  }
  if (!measured || after >= before) return r;
  const uint64_t bytes = before - after;
  // Admitted with the lock released: the region's mutex is never taken under it.
  if (!Admit(dev, bytes, UsageKind::kModule)) {
    unload(*out);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  TrackObject(*out, Held{dev, bytes, UsageKind::kModule, per_context ? ctx : nullptr});
  return r;
}

template <typename Handle, typename Call>
CUresult Unloaded(Handle handle, Call call) {
  CUresult r = call();
  if (r == CUDA_SUCCESS) ForgetObject(handle);
  return r;
}

}  // namespace

extern "C" {

// ---- VMM: a physical allocation on a device is charged its size; host ones are not ----

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemCreate, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuMemCreate(handle, size, prop, flags); };
  if (scope.nested() || handle == nullptr || prop == nullptr || size == 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return call();
  }
  const int device = prop->location.id;
  if (!Admit(device, size, UsageKind::kVmm)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r;
  {
    Allocating allocating;
    r = call();
  }
  if (r != CUDA_SUCCESS) {
    Return(device, size, UsageKind::kVmm);
    return r;
  }
  Rt().ledger.AddPhysical(*handle, device, size);
  return r;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemRelease, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r;
  {
    Allocating allocating;
    r = drv.cuda.cuMemRelease(handle);
  }
  if (r != CUDA_SUCCESS || scope.nested()) return r;
  Apply(Rt().ledger.ReleasePhysical(handle));
  return r;
}

// Another handle to the same memory: it must be released too.
CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemRetainAllocationHandle, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuMemRetainAllocationHandle(handle, addr);
  if (r != CUDA_SUCCESS || scope.nested() || handle == nullptr) return r;
  Rt().ledger.RetainPhysical(*handle);
  return r;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemMap, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuMemMap(ptr, size, offset, handle, flags);
  if (r != CUDA_SUCCESS || scope.nested()) return r;
  Rt().ledger.Map(ptr, size, handle);
  return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMemUnmap, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r;
  {
    Allocating allocating;
    r = drv.cuda.cuMemUnmap(ptr, size);
  }
  if (r != CUDA_SUCCESS || scope.nested()) return r;
  Apply(Rt().ledger.Unmap(ptr, size));
  return r;
}

// ---- arrays: charged their estimated bytes, rounded to the allocation granularity ----

CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  HookScope scope;
  HAMI_CUDA_REAL(cuArrayCreate_v2, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuArrayCreate_v2(pHandle, desc); };
  if (scope.nested() || desc == nullptr) return call();
  return AdmitObject(pHandle, ArrayBytes(Shape2D(*desc), 1), UsageKind::kData, call);
}

CUresult CUDAAPI cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* desc) {
  HookScope scope;
  HAMI_CUDA_REAL(cuArrayCreate, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuArrayCreate(pHandle, desc); };
  if (scope.nested() || desc == nullptr) return call();
  return AdmitObject(pHandle, ArrayBytes(Shape2D(*desc), 1), UsageKind::kData, call);
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  HookScope scope;
  HAMI_CUDA_REAL(cuArray3DCreate_v2, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuArray3DCreate_v2(pHandle, desc); };
  if (scope.nested() || desc == nullptr) return call();
  return AdmitObject(pHandle, ArrayBytes(Shape3D(*desc), 1), UsageKind::kData, call);
}

CUresult CUDAAPI cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc) {
  HookScope scope;
  HAMI_CUDA_REAL(cuArray3DCreate, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuArray3DCreate(pHandle, desc); };
  if (scope.nested() || desc == nullptr) return call();
  return AdmitObject(pHandle, ArrayBytes(Shape3D(*desc), 1), UsageKind::kData, call);
}

CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  HookScope scope;
  HAMI_CUDA_REAL(cuArrayDestroy, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuArrayDestroy(hArray);
  return Unloaded(hArray, [&] { return drv.cuda.cuArrayDestroy(hArray); });
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                        const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                        unsigned int numMipmapLevels) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMipmappedArrayCreate, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuMipmappedArrayCreate(pHandle, desc, numMipmapLevels); };
  if (scope.nested() || desc == nullptr) return call();
  return AdmitObject(pHandle, ArrayBytes(Shape3D(*desc), numMipmapLevels), UsageKind::kData, call);
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  HookScope scope;
  HAMI_CUDA_REAL(cuMipmappedArrayDestroy, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuMipmappedArrayDestroy(hMipmappedArray);
  return Unloaded(hMipmappedArray,
                  [&] { return drv.cuda.cuMipmappedArrayDestroy(hMipmappedArray); });
}

// ---- modules and libraries: the memory a load takes, measured ----

CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  HookScope scope;
  HAMI_CUDA_REAL(cuModuleLoad, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuModuleLoad(module, fname); };
  if (scope.nested()) return call();
  return MeasuredLoad(module, true, call, drv.cuda.cuModuleUnload);
}

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  HookScope scope;
  HAMI_CUDA_REAL(cuModuleLoadData, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuModuleLoadData(module, image); };
  if (scope.nested()) return call();
  return MeasuredLoad(module, true, call, drv.cuda.cuModuleUnload);
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  HookScope scope;
  HAMI_CUDA_REAL(cuModuleLoadDataEx, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] {
    return drv.cuda.cuModuleLoadDataEx(module, image, numOptions, options, optionValues);
  };
  if (scope.nested()) return call();
  return MeasuredLoad(module, true, call, drv.cuda.cuModuleUnload);
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  HookScope scope;
  HAMI_CUDA_REAL(cuModuleLoadFatBinary, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuModuleLoadFatBinary(module, fatCubin); };
  if (scope.nested()) return call();
  return MeasuredLoad(module, true, call, drv.cuda.cuModuleUnload);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  HookScope scope;
  HAMI_CUDA_REAL(cuModuleUnload, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuModuleUnload(hmod);
  return Unloaded(hmod, [&] { return drv.cuda.cuModuleUnload(hmod); });
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                   unsigned int numLibraryOptions) {
  HookScope scope;
  HAMI_CUDA_REAL(cuLibraryLoadData, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] {
    return drv.cuda.cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions,
                                      libraryOptions, libraryOptionValues, numLibraryOptions);
  };
  if (scope.nested() || drv.cuda.cuLibraryUnload == nullptr) return call();
  return MeasuredLoad(library, false, call, drv.cuda.cuLibraryUnload);
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                       CUjit_option* jitOptions, void** jitOptionsValues,
                                       unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                       void** libraryOptionValues, unsigned int numLibraryOptions) {
  HookScope scope;
  HAMI_CUDA_REAL(cuLibraryLoadFromFile, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] {
    return drv.cuda.cuLibraryLoadFromFile(library, fileName, jitOptions, jitOptionsValues,
                                          numJitOptions, libraryOptions, libraryOptionValues,
                                          numLibraryOptions);
  };
  if (scope.nested() || drv.cuda.cuLibraryUnload == nullptr) return call();
  return MeasuredLoad(library, false, call, drv.cuda.cuLibraryUnload);
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  HookScope scope;
  HAMI_CUDA_REAL(cuLibraryUnload, CUDA_ERROR_NOT_INITIALIZED);
  if (scope.nested()) return drv.cuda.cuLibraryUnload(library);
  return Unloaded(library, [&] { return drv.cuda.cuLibraryUnload(library); });
}

}  // extern "C"
