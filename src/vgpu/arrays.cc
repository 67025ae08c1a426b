#include "vgpu/arrays.h"

#include <algorithm>

namespace hami::vgpu {

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

ArrayShape ShapeOf(const CUDA_ARRAY_DESCRIPTOR& d) {
  return {d.Width, d.Height, 0, d.Format, d.NumChannels, 0};
}
ArrayShape ShapeOf(const CUDA_ARRAY_DESCRIPTOR_v1& d) {
  return {d.Width, d.Height, 0, d.Format, d.NumChannels, 0};
}
ArrayShape ShapeOf(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  return {d.Width, d.Height, d.Depth, d.Format, d.NumChannels, d.Flags};
}
ArrayShape ShapeOf(const CUDA_ARRAY3D_DESCRIPTOR_v1& d) {
  return {d.Width, d.Height, d.Depth, d.Format, d.NumChannels, d.Flags};
}

uint64_t ArrayBytes(const ArrayShape& s, unsigned levels) {
  const uint64_t elem = ElementBytes(s.format, s.channels);
  const bool layers = (s.flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  uint64_t total = 0;
  for (unsigned l = 0; l < levels && l < 64; ++l) {
    const uint64_t w = std::max<uint64_t>(s.width >> l, 1);
    const uint64_t h = std::max<uint64_t>(s.height >> l, 1);
    const uint64_t d =
        layers ? std::max<uint64_t>(s.depth, 1) : std::max<uint64_t>(s.depth >> l, 1);
    total = SaturatingAdd(total, SaturatingMul(SaturatingMul(w, h), SaturatingMul(d, elem)));
  }
  return std::min(total, kUnfittableBytes);
}

}  // namespace hami::vgpu
