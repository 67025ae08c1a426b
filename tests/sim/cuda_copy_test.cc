// The simulated driver's memory family, data movement: linear, 2D, 3D and array copies,
// synchronous and on streams, memsets of every width and pointer queries, failures
// included. Allocations are in cuda_memory_test.cc.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cuda_device_fixture.h"

namespace hami::testing {
namespace {

// Checks every byte of `rows` rows of `pitch` bytes against `want(x, y)`.
void ExpectGrid(const std::vector<uint8_t>& got, size_t pitch, size_t rows,
                const std::function<uint8_t(size_t x, size_t y)>& want) {
  ASSERT_GE(got.size(), pitch * rows);
  for (size_t y = 0; y < rows; ++y) {
    for (size_t x = 0; x < pitch; ++x) {
      ASSERT_EQ(got[y * pitch + x], want(x, y)) << "x=" << x << " y=" << y;
    }
  }
}

// One side of a pitched copy: host or device memory, `pitch` bytes a row, `height` rows a
// slice, starting at (x, y).
struct Side {
  CUmemorytype type;
  uintptr_t address;
  size_t pitch;
  size_t height = 0;
  size_t x = 0, y = 0;
};
Side Host(const void* p, size_t pitch, size_t height = 0) {
  return {CU_MEMORYTYPE_HOST, reinterpret_cast<uintptr_t>(p), pitch, height};
}
Side Device(CUdeviceptr p, size_t pitch, size_t height = 0) {
  return {CU_MEMORYTYPE_DEVICE, uintptr_t(p), pitch, height};
}

// The fields CUDA_MEMCPY2D and CUDA_MEMCPY3D share.
template <typename Params>
Params CopyParams(Side src, Side dst, size_t width, size_t rows) {
  Params c{};
  c.srcMemoryType = src.type;
  c.srcHost = reinterpret_cast<const void*>(src.address);
  c.srcDevice = CUdeviceptr(src.address);
  c.srcPitch = src.pitch;
  c.srcXInBytes = src.x;
  c.srcY = src.y;
  c.dstMemoryType = dst.type;
  c.dstHost = reinterpret_cast<void*>(dst.address);
  c.dstDevice = CUdeviceptr(dst.address);
  c.dstPitch = dst.pitch;
  c.dstXInBytes = dst.x;
  c.dstY = dst.y;
  c.WidthInBytes = width;
  c.Height = rows;
  return c;
}
CUDA_MEMCPY2D Copy2D(Side src, Side dst, size_t width, size_t rows) {
  return CopyParams<CUDA_MEMCPY2D>(src, dst, width, rows);
}
CUDA_MEMCPY3D Copy3D(Side src, Side dst, size_t width, size_t rows, size_t depth) {
  auto c = CopyParams<CUDA_MEMCPY3D>(src, dst, width, rows);
  c.srcHeight = src.height;
  c.dstHeight = dst.height;
  c.Depth = depth;
  return c;
}

// ---- copies ----

class CopyTest : public SimDeviceTest {};

TEST_F(CopyTest, EveryLinearCopyMovesTheBytesExactly) {
  constexpr size_t kBytes = 100000;
  auto data = Pattern(kBytes, 11);
  CUdeviceptr a = Alloc(kBytes), b = Alloc(kBytes), c = Alloc(kBytes);
  ASSERT_EQ(cuMemcpyHtoD_v2(a, data.data(), kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(b, a, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpy(c, b, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(Download(c, kBytes), data);

  auto other = Pattern(kBytes, 12);
  std::vector<uint8_t> out(kBytes);
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(a, other.data(), kBytes, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync_v2(b, a, kBytes, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyAsync(c, b, kBytes, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), c, kBytes, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(out, other);
  Free({a, b, c});
}

TEST_F(CopyTest, Copy2DHonoursBothPitchesAndLeavesThePaddingAlone) {
  constexpr size_t kRows = 12, kSrcPitch = 100, kWidth = 80, kOutPitch = 70;
  CUdeviceptr dev = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&dev, &pitch, kWidth, kRows, 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(dev, 0xee, pitch * kRows), CUDA_SUCCESS);
  auto src = Pattern(kSrcPitch * kRows, 21);
  CUDA_MEMCPY2D up = Copy2D(Host(src.data(), kSrcPitch), Device(dev, pitch), kWidth, kRows);
  ASSERT_EQ(cuMemcpy2D_v2(&up), CUDA_SUCCESS);
  ExpectGrid(Download(dev, pitch * kRows), pitch, kRows, [&](size_t x, size_t y) {
    return x < kWidth ? src[y * kSrcPitch + x] : uint8_t(0xee);
  });

  // Back down, from (8, 2), into a host buffer with a third pitch.
  std::vector<uint8_t> out(kOutPitch * 10, 0);
  Side from = Device(dev, pitch);
  from.x = 8;
  from.y = 2;
  CUDA_MEMCPY2D down = Copy2D(from, Host(out.data(), kOutPitch), 64, 10);
  ASSERT_EQ(cuMemcpy2DAsync_v2(&down, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  ExpectGrid(out, kOutPitch, 10, [&](size_t x, size_t y) {
    return x < 64 ? src[(y + 2) * kSrcPitch + x + 8] : uint8_t(0);
  });

  down.Height = 11;  // one row past the allocation
  EXPECT_EQ(cuMemcpy2D_v2(&down), CUDA_ERROR_INVALID_VALUE);
  up.WidthInBytes = pitch + 1;  // wider than the destination pitch
  EXPECT_EQ(cuMemcpy2D_v2(&up), CUDA_ERROR_INVALID_VALUE);
  Free({dev});
}

TEST_F(CopyTest, Copy3DMovesEverySliceExactly) {
  constexpr size_t kW = 32, kH = 4, kD = 3;
  constexpr size_t kSrcPitch = 40, kSrcHeight = 5;  // padded rows and slices
  constexpr size_t kDevPitch = 64, kDevHeight = 6;
  auto src = Pattern(kSrcPitch * kSrcHeight * kD, 33);
  CUdeviceptr dev = Alloc(kDevPitch * kDevHeight * kD);
  CUDA_MEMCPY3D up = Copy3D(Host(src.data(), kSrcPitch, kSrcHeight),
                            Device(dev, kDevPitch, kDevHeight), kW, kH, kD);
  ASSERT_EQ(cuMemcpy3D_v2(&up), CUDA_SUCCESS);
  std::vector<uint8_t> out(kW * kH * kD);
  CUDA_MEMCPY3D down =
      Copy3D(Device(dev, kDevPitch, kDevHeight), Host(out.data(), kW, kH), kW, kH, kD);
  ASSERT_EQ(cuMemcpy3DAsync_v2(&down, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  // Row r of the dense result is row r % kH of slice r / kH of the source.
  ExpectGrid(out, kW, kH * kD, [&](size_t x, size_t r) {
    return src[((r / kH) * kSrcHeight + r % kH) * kSrcPitch + x];
  });
  down.Depth = kD + 1;
  EXPECT_EQ(cuMemcpy3D_v2(&down), CUDA_ERROR_INVALID_VALUE);
  Free({dev});
}

TEST_F(CopyTest, Copy2DIntoAnArrayFillsOnlyTheAddressedRectangle) {
  constexpr size_t kRowBytes = 64 * 4;  // a 64 x 16 array of floats
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = 64;
  d.Height = 16;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 1;
  CUarray array = nullptr;
  ASSERT_EQ(cuArrayCreate_v2(&array, &d), CUDA_SUCCESS);
  std::vector<uint8_t> all(kRowBytes * 16, 0xee);
  ASSERT_EQ(cuMemcpyHtoA_v2(array, 0, all.data(), all.size()), CUDA_SUCCESS);
  auto src = Pattern(40 * 4, 5);  // 4 rows of 40 bytes, 16 copied from each
  CUDA_MEMCPY2D c = Copy2D(Host(src.data(), 40), Host(nullptr, 0), 16, 4);
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = array;
  c.dstXInBytes = 8;
  c.dstY = 3;
  ASSERT_EQ(cuMemcpy2D_v2(&c), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyAtoH_v2(all.data(), array, 0, all.size()), CUDA_SUCCESS);
  ExpectGrid(all, kRowBytes, 16, [&](size_t x, size_t y) -> uint8_t {
    bool inside = y >= 3 && y < 7 && x >= 8 && x < 24;
    return inside ? src[(y - 3) * 40 + (x - 8)] : 0xee;
  });
  c.dstY = 14;  // rows 14..17 of a 16-row array
  EXPECT_EQ(cuMemcpy2D_v2(&c), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArrayDestroy(array), CUDA_SUCCESS);
}

TEST_F(CopyTest, CopiesOutsideOrBeyondAnAllocationAreInvalidValue) {
  CUdeviceptr a = Alloc(4096), b = Alloc(4096);
  ASSERT_EQ(cuMemsetD8_v2(a, 0, 4096), CUDA_SUCCESS);
  std::vector<uint8_t> host(8192, 1);
  EXPECT_EQ(cuMemcpyHtoD_v2(Outside(), host.data(), 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(a + 4000, host.data(), 200), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH_v2(host.data(), a + 4000, 200), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD_v2(b, a + 1, 4096), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy(a + 4000, b, 200), CUDA_ERROR_INVALID_VALUE);  // unified, into device
  EXPECT_EQ(cuMemcpy(b, a + 4000, 200), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoDAsync_v2(a + 1, host.data(), 4096, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(a, nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  Free({b});
  EXPECT_EQ(cuMemcpyDtoD_v2(a, b, 16), CUDA_ERROR_INVALID_VALUE);  // freed
  EXPECT_EQ(Download(a, 4096), std::vector<uint8_t>(4096, 0));     // nothing landed
  Free({a});
}

// ---- sets ----

class MemsetTest : public SimDeviceTest {
 protected:
  static CUdeviceptr Zeroed(size_t bytes) {
    CUdeviceptr p = Alloc(bytes);
    EXPECT_EQ(cuMemsetD8_v2(p, 0, bytes), CUDA_SUCCESS);
    return p;
  }
  // `count` little-endian elements of `elem` bytes holding `value`, at `offset`.
  static std::vector<uint8_t> Expect(size_t bytes, size_t offset, uint32_t value, size_t elem,
                                     size_t count) {
    std::vector<uint8_t> v(bytes, 0);
    for (size_t i = 0; i < count * elem; ++i) v[offset + i] = uint8_t(value >> (8 * (i % elem)));
    return v;
  }
};

TEST_F(MemsetTest, LinearSetsWriteExactlyTheirElements) {
  CUdeviceptr p = Zeroed(64);
  ASSERT_EQ(cuMemsetD8_v2(p + 3, 0xab, 10), CUDA_SUCCESS);
  EXPECT_EQ(Download(p, 64), Expect(64, 3, 0xab, 1, 10));
  ASSERT_EQ(cuMemsetD8_v2(p, 0, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD16_v2(p + 4, 0xbeef, 5), CUDA_SUCCESS);
  EXPECT_EQ(Download(p, 64), Expect(64, 4, 0xbeef, 2, 5));
  ASSERT_EQ(cuMemsetD8_v2(p, 0, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32_v2(p + 8, 0xdeadbeef, 3), CUDA_SUCCESS);
  EXPECT_EQ(Download(p, 64), Expect(64, 8, 0xdeadbeef, 4, 3));
  ASSERT_EQ(cuMemsetD8_v2(p, 0, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32Async(p + 16, 0x01020304, 4, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(Download(p, 64), Expect(64, 16, 0x01020304, 4, 4));
  Free({p});
}

TEST_F(MemsetTest, TwoDimensionalSetsWriteOnlyTheRectangle) {
  constexpr size_t kRows = 5;
  CUdeviceptr p = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&p, &pitch, 100, kRows, 4), CUDA_SUCCESS);
  struct Case {
    size_t elem;
    uint32_t value;
  };
  for (Case c : {Case{1, 0x5a}, Case{2, 0x1234}, Case{4, 0xcafef00d}}) {
    ASSERT_EQ(cuMemsetD8_v2(p, 0, pitch * kRows), CUDA_SUCCESS);
    CUresult r = c.elem == 1   ? cuMemsetD2D8_v2(p, pitch, uint8_t(c.value), 20, kRows - 1)
                 : c.elem == 2 ? cuMemsetD2D16_v2(p, pitch, uint16_t(c.value), 20, kRows - 1)
                               : cuMemsetD2D32_v2(p, pitch, c.value, 20, kRows - 1);
    ASSERT_EQ(r, CUDA_SUCCESS);
    std::vector<uint8_t> row = Expect(pitch, 0, c.value, c.elem, 20);
    ExpectGrid(Download(p, pitch * kRows), pitch, kRows,
               [&](size_t x, size_t y) { return y < kRows - 1 ? row[x] : uint8_t(0); });
  }
  EXPECT_EQ(cuMemsetD2D8_v2(p, 10, 0, 20, 2), CUDA_ERROR_INVALID_VALUE);         // pitch < width
  EXPECT_EQ(cuMemsetD2D32_v2(p, pitch + 2, 0, 4, 2), CUDA_ERROR_INVALID_VALUE);  // misaligned
  EXPECT_EQ(cuMemsetD2D8_v2(p, pitch, 0, 20, kRows + 1), CUDA_ERROR_INVALID_VALUE);
  Free({p});
}

TEST_F(MemsetTest, MisalignedOrOverrunningSetsAreInvalidValue) {
  CUdeviceptr p = Zeroed(64);
  EXPECT_EQ(cuMemsetD16_v2(p + 1, 0xffff, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD32_v2(p + 2, 0xffffffff, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD32_v2(p, 0xffffffff, 17), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8_v2(p + 60, 0xff, 5), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8_v2(Outside(), 0xff, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Download(p, 64), std::vector<uint8_t>(64, 0));  // nothing was written
  Free({p});
}

// ---- pointer queries ----

class MemoryPointerTest : public SimDeviceTest {
 protected:
  template <typename T>
  static T Attribute(CUpointer_attribute attr, CUdeviceptr p) {
    T value{};
    EXPECT_EQ(cuPointerGetAttribute(&value, attr, p), CUDA_SUCCESS) << attr;
    return value;
  }
};

TEST_F(MemoryPointerTest, DeviceMemoryDescribesItsContextDeviceAndRange) {
  CUdeviceptr p = Alloc(10000);
  CUdeviceptr inner = p + 1234;
  EXPECT_EQ(Attribute<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, inner), ctx_);
  EXPECT_EQ(Attribute<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, inner),
            unsigned(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(Attribute<CUdeviceptr>(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, inner), inner);
  EXPECT_EQ(Attribute<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, inner), p);
  EXPECT_EQ(Attribute<size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, inner), 10000u);
  EXPECT_EQ(Attribute<int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, inner), 0);
  EXPECT_EQ(Attribute<unsigned>(CU_POINTER_ATTRIBUTE_IS_MANAGED, inner), 0u);
  void* host = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_CONTEXT, p + 10000),
            CUDA_ERROR_INVALID_VALUE);  // one past the end
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_CONTEXT, p),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryPointerTest, ManagedAndPoolMemoryAreRecognised) {
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(Attribute<unsigned>(CU_POINTER_ATTRIBUTE_IS_MANAGED, m), 1u);
  EXPECT_EQ(Attribute<void*>(CU_POINTER_ATTRIBUTE_HOST_POINTER, m), reinterpret_cast<void*>(m));
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);

  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, dev_), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&p, 4096, pool, stream_), CUDA_SUCCESS);
  EXPECT_EQ(Attribute<CUmemoryPool>(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p), pool);
  EXPECT_EQ(cuMemFreeAsync(p, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
}

TEST_F(MemoryPointerTest, MemoryOfTheSecondDeviceReportsOrdinalOne) {
  CUcontext ctx1 = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx1, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent_v2(ctx1), CUDA_SUCCESS);
  CUdeviceptr p = Alloc(4096);
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(Attribute<int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), 1);
  EXPECT_EQ(Attribute<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, p), ctx1);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
}

// Unlike cuPointerGetAttribute, it accepts any pointer: unknown ones get NULL values.
TEST_F(MemoryPointerTest, GetAttributesDescribesKnownPointersAndNullsUnknownOnes) {
  struct {
    CUcontext ctx;
    unsigned type, managed;
    CUdeviceptr start;
  } out;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
  void* data[] = {&out.ctx, &out.type, &out.managed, &out.start};
  CUdeviceptr p = Alloc(4096);
  std::memset(&out, 0x7f, sizeof(out));
  ASSERT_EQ(cuPointerGetAttributes(4, attrs, data, p + 100), CUDA_SUCCESS);
  EXPECT_EQ(out.ctx, ctx_);
  EXPECT_EQ(out.type, unsigned(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(out.managed, 0u);
  EXPECT_EQ(out.start, p);
  std::memset(&out, 0x7f, sizeof(out));
  ASSERT_EQ(cuPointerGetAttributes(4, attrs, data, Outside()), CUDA_SUCCESS);
  EXPECT_EQ(out.ctx, nullptr);
  EXPECT_EQ(out.type, 0u);
  EXPECT_EQ(out.managed, 0u);
  EXPECT_EQ(out.start, 0u);
  Free({p});
}

}  // namespace
}  // namespace hami::testing
