// Arrays and mipmapped arrays.
//
// What is charged: the array's estimated bytes, the elements of every mip level (each level
// halves every dimension, at least 1, but the layer count of a layered or cube-map array),
// rounded up to the allocation granularity, on the current context's device. The estimate is
// an upper bound: a packed or block-compressed format counts a whole element per texel, and
// a format this build does not know counts the widest element (16 bytes). Admitted before
// the driver creates the array, refused with CUDA_ERROR_OUT_OF_MEMORY past the limit (the
// driver is not asked), given back when the array is destroyed or its context ends.
// A NULL descriptor or handle, or no current context, goes to the driver, which answers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "vgpu/accounting.h"

namespace hami::vgpu {

// Bytes per element of `format` with `channels` channels (the channel count multiplies only
// the plain formats, whose elements it describes).
uint64_t ElementBytes(CUarray_format format, unsigned channels);

struct ArrayShape {
  uint64_t width = 0;
  uint64_t height = 0;  // 0 for a 1D array: counts as 1
  uint64_t depth = 0;   // 0 for a 1D or 2D array: counts as 1; the layers of a layered one
  CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT8;
  unsigned channels = 1;
  unsigned flags = 0;  // CUDA_ARRAY3D_*
};

ArrayShape ShapeOf(const CUDA_ARRAY_DESCRIPTOR& d);
ArrayShape ShapeOf(const CUDA_ARRAY_DESCRIPTOR_v1& d);
ArrayShape ShapeOf(const CUDA_ARRAY3D_DESCRIPTOR& d);
ArrayShape ShapeOf(const CUDA_ARRAY3D_DESCRIPTOR_v1& d);

// The estimated bytes of `levels` mip levels of `shape` (1: a plain array; 0: nothing).
// Saturates at kUnfittableBytes, which no device holds.
inline constexpr uint64_t kUnfittableBytes = 1ull << 62;
uint64_t ArrayBytes(const ArrayShape& shape, unsigned levels);

// Admission + driver call + tracking of an array (levels 1) or a mipmapped array.
template <typename Handle, typename Desc, typename Call>
CUresult CreateArray(Runtime& rt, Handle* handle, const Desc* desc, unsigned levels, Call call) {
  if (desc == nullptr) return call();
  return AdmitObject(rt, handle, ArrayBytes(ShapeOf(*desc), levels), UsageKind::kData, call);
}

// Driver call, then what `handle` (an array, a module, a library) held is given back; one
// this process did not charge is the driver's business alone.
template <typename Handle, typename Call>
CUresult DestroyObject(Runtime& rt, Handle handle, Call call) {
  CUresult r;
  {
    Allocating allocating(rt);
    r = call();
  }
  if (r == CUDA_SUCCESS) ForgetObject(rt, handle);
  return r;
}

}  // namespace hami::vgpu
