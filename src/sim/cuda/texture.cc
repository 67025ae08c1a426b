// Texture and surface objects: handles over arrays, mipmapped arrays and linear or pitched
// device memory. Kernels run no code, so nothing ever samples them; the model keeps what
// was described and validates the resource behind it.
#include <cstring>

#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

// The resource must exist, be of this process and cover what the description says.
CUresult CheckResource(const CUDA_RESOURCE_DESC& r) {
  Driver& d = D();
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      return d.Live(r.res.array.hArray, HandleKind::kArray) ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_HANDLE;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      return d.Live(r.res.mipmap.hMipmappedArray, HandleKind::kMipmappedArray)
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_HANDLE;
    case CU_RESOURCE_TYPE_LINEAR:
      if (r.res.linear.devPtr == 0 || r.res.linear.sizeInBytes == 0 ||
          !d.DeviceAccessible(uintptr_t(r.res.linear.devPtr), r.res.linear.sizeInBytes,
                              Driver::Access::kRead)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D: {
      const auto& p = r.res.pitch2D;
      if (p.devPtr == 0 || p.width == 0 || p.height == 0 || p.pitchInBytes == 0 ||
          !d.DeviceAccessible(uintptr_t(p.devPtr), p.pitchInBytes * p.height,
                              Driver::Access::kRead)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CreateObject(unsigned long long* out, const CUDA_RESOURCE_DESC* res,
                      const CUDA_TEXTURE_DESC* tex, const CUDA_RESOURCE_VIEW_DESC* view,
                      bool surface) {
  if (out == nullptr || res == nullptr || (!surface && tex == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckResource(*res); r != CUDA_SUCCESS) return r;
  if (surface) {
    // Surfaces are arrays made for load/store.
    if (res->resType != CU_RESOURCE_TYPE_ARRAY ||
        (res->res.array.hArray->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST) == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (view != nullptr && res->resType != CU_RESOURCE_TYPE_ARRAY &&
      res->resType != CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    return CUDA_ERROR_INVALID_VALUE;  // views apply to arrays only
  }
  Driver& d = D();
  TextureObject o;
  o.surface = surface;
  o.ctx = ctx;
  o.res = *res;
  if (tex != nullptr) o.tex = *tex;
  if (view != nullptr) {
    o.view = *view;
    o.has_view = true;
  }
  unsigned long long id = d.next_texture++;
  d.textures[id] = o;
  *out = id;
  return CUDA_SUCCESS;
}

TextureObject* Find(unsigned long long id, bool surface) {
  auto it = D().textures.find(id);
  return it == D().textures.end() || it->second.surface != surface ? nullptr : &it->second;
}

}  // namespace

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

CUresult CUDAAPI cuTexObjectCreate(CUtexObject* pTexObject, const CUDA_RESOURCE_DESC* pResDesc,
                                   const CUDA_TEXTURE_DESC* pTexDesc,
                                   const CUDA_RESOURCE_VIEW_DESC* pResViewDesc) {
  return CreateObject(pTexObject, pResDesc, pTexDesc, pResViewDesc, false);
}

CUresult CUDAAPI cuTexObjectDestroy(CUtexObject texObject) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (Find(texObject, false) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  D().textures.erase(texObject);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc, CUtexObject texObject) {
  if (pResDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  TextureObject* o = Find(texObject, false);
  if (o == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pResDesc = o->res;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* pTexDesc, CUtexObject texObject) {
  if (pTexDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  TextureObject* o = Find(texObject, false);
  if (o == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pTexDesc = o->tex;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* pResViewDesc,
                                                CUtexObject texObject) {
  if (pResViewDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  TextureObject* o = Find(texObject, false);
  if (o == nullptr || !o->has_view) return CUDA_ERROR_INVALID_VALUE;
  *pResViewDesc = o->view;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject* pSurfObject, const CUDA_RESOURCE_DESC* pResDesc) {
  return CreateObject(pSurfObject, pResDesc, nullptr, nullptr, true);
}

CUresult CUDAAPI cuSurfObjectDestroy(CUsurfObject surfObject) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (Find(surfObject, true) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  D().textures.erase(surfObject);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc,
                                             CUsurfObject surfObject) {
  if (pResDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  TextureObject* o = Find(surfObject, true);
  if (o == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pResDesc = o->res;
  return CUDA_SUCCESS;
}

}  // extern "C"
