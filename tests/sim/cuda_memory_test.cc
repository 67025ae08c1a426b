// The simulated driver's memory family, allocations: device, pitched, managed, legacy
// 32-bit, stream ordered and pool memory (pools shared between processes included), virtual
// memory management, arrays, pinned host memory and what a destroyed context gives back,
// failures included. Copies, sets and pointer queries are in cuda_copy_test.cc.
#include <cuda.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda_device_fixture.h"
#include "cudart/program_io.h"
#include "sim/state.h"
#include "sim_test_util.h"

namespace hami::testing {
namespace {

constexpr uint64_t kH100ContextBytes = 500ull << 20;  // h100-80g's context cost

// The 32-bit ABI of CUDA 2.x, which cuda.h declares only for the driver's own build.
using MemAllocV1 = CUresult (*)(unsigned int* dptr, unsigned int bytes);
using MemFreeV1 = CUresult (*)(unsigned int dptr);

// ---- device memory ----

class DeviceMemoryTest : public SimDeviceTest {};

TEST_F(DeviceMemoryTest, LargeAllocationsAreChargedInWholeGranules) {
  size_t before = FreeBytes();
  CUdeviceptr a = Alloc(g_ + 1);
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  CUdeviceptr b = Alloc(3 * g_);
  EXPECT_EQ(before - FreeBytes(), 5 * g_);
  Free({a, b});
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(DeviceMemoryTest, SmallAllocationsShareGranulePagesAndLargerOnesDoNot) {
  size_t before = FreeBytes();
  std::vector<CUdeviceptr> small;
  for (int i = 0; i < 100; ++i) small.push_back(Alloc(g_ / 256));
  EXPECT_EQ(before - FreeBytes(), g_);
  small.push_back(Alloc(g_ / 2));  // still fits the first page
  EXPECT_EQ(before - FreeBytes(), g_);
  CUdeviceptr large = Alloc(g_ / 2 + 1);  // above half a granule: a granule of its own
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  small.push_back(Alloc(g_ / 2));  // spills into a second page
  EXPECT_EQ(before - FreeBytes(), 3 * g_);
  Free({large});
  for (CUdeviceptr p : small) EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(DeviceMemoryTest, AllocRejectsZeroBytesNullOutputAndNoContext) {
  size_t before = FreeBytes();
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAlloc_v2(nullptr, 4096), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FreeBytes(), before);
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
  size_t free_bytes, total;
  EXPECT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cuCtxPushCurrent_v2(popped), CUDA_SUCCESS);
}

// A forked child starts with an uninitialized driver: nothing works before its own cuInit,
// and after it the child is a process of its own.
TEST_F(DeviceMemoryTest, AForkedChildAllocatesOnlyAfterItsOwnCuInit) {
  std::string state = SimEnv::NewStatePath();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("HAMI_SIM_STATE", state.c_str(), 1);  // a machine of its own
    CUcontext ctx = nullptr;
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 4096) != CUDA_ERROR_NOT_INITIALIZED) _exit(1);
    if (cuInit(0) != CUDA_SUCCESS) _exit(2);
    if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) _exit(3);
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) _exit(4);
    _exit(cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(DeviceMemoryTest, AllocBeyondCapacityIsOutOfMemoryAndChargesNothing) {
  size_t before = FreeBytes();
  CUdeviceptr p = 0;
  size_t pitch = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 100 * kGiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocManaged(&p, 100 * kGiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocPitch_v2(&p, &pitch, 1 << 20, 100 * 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(FreeBytes(), before);

  size_t all = before / g_ * g_;  // up to capacity works; the next granule does not
  CUdeviceptr big = Alloc(all);
  ASSERT_NE(big, 0u);
  EXPECT_LT(FreeBytes(), g_);
  EXPECT_EQ(cuMemAlloc_v2(&p, g_), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc_v2(&p, 512), CUDA_ERROR_OUT_OF_MEMORY);  // needs a page of its own
  EXPECT_EQ(FreeBytes(), before - all);
  Free({big});
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(DeviceMemoryTest, FreeOfAnythingButAnAllocationBaseIsInvalidValue) {
  size_t before = FreeBytes();
  CUdeviceptr p = Alloc(g_);
  EXPECT_EQ(cuMemFree_v2(Outside()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(p + 256), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(DeviceMemoryTest, LegacyAllocReturnsA32BitPointerThatHoldsData) {
  void* alloc_fn = nullptr;
  void* free_fn = nullptr;
  CUdriverProcAddressQueryResult status;
  ASSERT_EQ(cuGetProcAddress_v2("cuMemAlloc", &alloc_fn, 3000, 0, &status), CUDA_SUCCESS);
  ASSERT_EQ(cuGetProcAddress_v2("cuMemFree", &free_fn, 3000, 0, &status), CUDA_SUCCESS);
  ASSERT_NE(alloc_fn, reinterpret_cast<void*>(&cuMemAlloc_v2));
  auto mem_alloc = reinterpret_cast<MemAllocV1>(alloc_fn);
  auto mem_free = reinterpret_cast<MemFreeV1>(free_fn);

  size_t before = FreeBytes();
  unsigned int p = 0;
  EXPECT_EQ(mem_alloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(mem_alloc(&p, 3 * 1024 * 1024), CUDA_SUCCESS);
  ASSERT_NE(p, 0u);
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  auto data = Pattern(4096, 7);
  ASSERT_EQ(cuMemcpyHtoD_v2(CUdeviceptr(p), data.data(), data.size()), CUDA_SUCCESS);
  EXPECT_EQ(Download(CUdeviceptr(p), data.size()), data);
  EXPECT_EQ(mem_free(p), CUDA_SUCCESS);
  EXPECT_EQ(mem_free(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(DeviceMemoryTest, AllocPitchRoundsThePitchAndRejectsOddElementSizes) {
  size_t before = FreeBytes();
  CUdeviceptr p = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 2000, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(before - FreeBytes(), g_);  // pitch * height bytes
  Free({p});
  EXPECT_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 32), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch_v2(&p, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch_v2(&p, nullptr, 1000, 10, 4), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(DeviceMemoryTest, ManagedMemoryTakesAnAttachFlagAndIsHostAccessible) {
  size_t before = FreeBytes();
  auto data = Pattern(4096, 8);
  for (unsigned flags : {unsigned(CU_MEM_ATTACH_GLOBAL), unsigned(CU_MEM_ATTACH_HOST)}) {
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAllocManaged(&p, data.size(), flags), CUDA_SUCCESS);
    std::memcpy(reinterpret_cast<void*>(p), data.data(), data.size());
    EXPECT_EQ(Download(p, data.size()), data);
    Free({p});
  }
  EXPECT_EQ(FreeBytes(), before);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocManaged(&p, 4096, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(&p, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(DeviceMemoryTest, AddressRangeCoversExactlyTheAllocation) {
  CUdeviceptr p = Alloc(10000), base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, p + 9999), CUDA_SUCCESS);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 10000u);
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, Outside()), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, p + 10000), CUDA_ERROR_NOT_FOUND);
  Free({p});
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, p), CUDA_ERROR_NOT_FOUND);
}

// ---- stream-ordered allocation and pools ----

// A pool on `device` whose allocations may be exported as `types`.
CUmemoryPool CreatePool(int device, CUmemAllocationHandleType types = CU_MEM_HANDLE_TYPE_NONE) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = types;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  CUmemoryPool pool = nullptr;
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  return pool;
}

// Each test has a pool of its own on device 0.
class MemPoolTest : public SimDeviceTest {
 protected:
  void SetUp() override {
    SimDeviceTest::SetUp();
    pool_ = CreatePool(0);
  }
  void TearDown() override {
    EXPECT_EQ(cuMemPoolDestroy(pool_), CUDA_SUCCESS);
    SimDeviceTest::TearDown();
  }
  static uint64_t Attr(CUmemoryPool pool, CUmemPool_attribute attr) {
    cuuint64_t v = 0;
    EXPECT_EQ(cuMemPoolGetAttribute(pool, attr, &v), CUDA_SUCCESS);
    return v;
  }
  CUresult SetAttr(CUmemPool_attribute attr, cuuint64_t v) {
    return cuMemPoolSetAttribute(pool_, attr, &v);
  }
  uint64_t Reserved() { return Attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT); }
  uint64_t Used() { return Attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT); }
  CUdeviceptr AllocAsync(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAllocFromPoolAsync(&p, bytes, pool_, stream_), CUDA_SUCCESS);
    return p;
  }
  void FreeAsync(CUdeviceptr p) { EXPECT_EQ(cuMemFreeAsync(p, stream_), CUDA_SUCCESS); }

  CUmemoryPool pool_ = nullptr;
};

TEST_F(MemPoolTest, TheDefaultPoolServesAllocAsyncUntilAnotherIsSet) {
  CUmemoryPool def = nullptr, cur = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&def, dev_), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetMemPool(&cur, dev_), CUDA_SUCCESS);
  EXPECT_EQ(cur, def);
  CUmemoryPool pool = CreatePool(0);
  ASSERT_EQ(cuDeviceSetMemPool(dev_, pool), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetMemPool(&cur, dev_), CUDA_SUCCESS);
  EXPECT_EQ(cur, pool);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 4096, stream_), CUDA_SUCCESS);
  EXPECT_EQ(Attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 4096u);
  FreeAsync(p);
  EXPECT_EQ(Attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);

  CUmemoryPool other = CreatePool(1);
  EXPECT_NE(cuDeviceSetMemPool(dev_, other), CUDA_SUCCESS);  // not local to device 0
  EXPECT_EQ(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);  // the device falls back to its default
  ASSERT_EQ(cuDeviceGetMemPool(&cur, dev_), CUDA_SUCCESS);
  EXPECT_EQ(cur, def);
  EXPECT_EQ(cuMemPoolDestroy(other), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(other), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemPoolTest, FreedMemoryStaysReservedUntilASynchronizeTrimsIt) {
  size_t before = FreeBytes();
  CUdeviceptr p = AllocAsync(1 << 20);
  EXPECT_EQ(Used(), 1u << 20);
  EXPECT_EQ(Reserved(), g_);
  EXPECT_EQ(before - FreeBytes(), g_);
  FreeAsync(p);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(Reserved(), g_);
  EXPECT_EQ(before - FreeBytes(), g_);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);  // release threshold 0: all of it
  EXPECT_EQ(Reserved(), 0u);
  EXPECT_EQ(FreeBytes(), before);

  FreeAsync(AllocAsync(1 << 20));
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);  // a context synchronize trims as well
  EXPECT_EQ(Reserved(), 0u);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(MemPoolTest, ReleaseThresholdKeepsMemoryAcrossSynchronizeUntilTrimTo) {
  size_t before = FreeBytes();
  ASSERT_EQ(SetAttr(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, UINT64_MAX), CUDA_SUCCESS);
  EXPECT_EQ(Attr(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), UINT64_MAX);
  CUdeviceptr big = AllocAsync(3 * g_ / 2);
  FreeAsync(AllocAsync(g_ / 2));
  EXPECT_EQ(Reserved(), 2 * g_);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(Reserved(), 2 * g_);

  CUdeviceptr p = AllocAsync(g_ / 2);  // reused without growing
  EXPECT_EQ(Reserved(), 2 * g_);
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  FreeAsync(p);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 0), CUDA_SUCCESS);  // keeps what `big` uses
  EXPECT_EQ(Reserved(), 2 * g_);
  FreeAsync(big);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 0), CUDA_SUCCESS);
  EXPECT_EQ(Reserved(), 0u);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(MemPoolTest, HighWatermarksKeepThePeakUntilResetToCurrent) {
  FreeAsync(AllocAsync(3 * g_ / 2));
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(Reserved(), 0u);
  EXPECT_EQ(Attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 3 * g_ / 2);
  EXPECT_EQ(Attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 2 * g_);
  EXPECT_EQ(SetAttr(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 5), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(SetAttr(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0), CUDA_SUCCESS);
  EXPECT_EQ(SetAttr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0), CUDA_SUCCESS);
  EXPECT_EQ(Attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0u);
  EXPECT_EQ(Attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0u);
  EXPECT_EQ(SetAttr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemPoolTest, BadStreamOrderedRequestsFailWithoutCharging) {
  size_t before = FreeBytes();
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocAsync(&p, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocAsync(nullptr, 4096, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocFromPoolAsync(&p, 100 * kGiB, pool_, stream_), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Reserved(), 0u);
  EXPECT_EQ(cuMemFreeAsync(Outside(), stream_), CUDA_ERROR_INVALID_VALUE);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemoryPool bad = nullptr;
  EXPECT_EQ(cuMemPoolCreate(&bad, &props), CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool dead = CreatePool(0);
  EXPECT_EQ(cuMemPoolDestroy(dead), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAllocFromPoolAsync(&p, 4096, dead, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FreeBytes(), before);
}

// ---- virtual memory management ----

class VmmTest : public SimDeviceTest {
 protected:
  static CUmemGenericAllocationHandle Create(size_t size) {
    CUmemAllocationProp prop = DeviceProp(0);
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(cuMemCreate(&h, size, &prop, 0), CUDA_SUCCESS);
    return h;
  }
  static CUdeviceptr Reserve(size_t size) {
    CUdeviceptr va = 0;
    EXPECT_EQ(cuMemAddressReserve(&va, size, 0, 0, 0), CUDA_SUCCESS);
    return va;
  }
  static CUresult SetAccess(CUdeviceptr va, size_t size, CUmemAccess_flags flags) {
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = 0;
    desc.flags = flags;
    return cuMemSetAccess(va, size, &desc, 1);
  }
  // Reserves a range and maps all of `h` there, read-write.
  static CUdeviceptr MapReadWrite(CUmemGenericAllocationHandle h, size_t size) {
    CUdeviceptr va = Reserve(size);
    EXPECT_EQ(cuMemMap(va, size, 0, h, 0), CUDA_SUCCESS);
    EXPECT_EQ(SetAccess(va, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
    return va;
  }
};

TEST_F(VmmTest, CreateChargesWholeGranulesAndRejectsOtherSizes) {
  EXPECT_EQ(g_, 2u << 20);  // HAMI_SIM_ALLOC_GRANULARITY's default
  CUmemAllocationProp prop = DeviceProp(0);
  size_t recommended = 0;
  EXPECT_EQ(
      cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      CUDA_SUCCESS);
  EXPECT_EQ(recommended, g_);
  prop.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_EQ(cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;

  size_t before = FreeBytes();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, g_ + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, 100 * kGiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(FreeBytes(), before);
  h = Create(2 * g_);
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(VmmTest, MulticastObjectsAreRefusedWithoutAnNvlinkSwitch) {
  int supported = -1;
  ASSERT_EQ(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(supported, 0);
  CUmulticastObjectProp prop{};
  prop.numDevices = 2;
  prop.size = g_;
  size_t granularity = 0;
  EXPECT_EQ(cuMulticastGetGranularity(&granularity, &prop, CU_MULTICAST_GRANULARITY_MINIMUM),
            CUDA_ERROR_NOT_SUPPORTED);
  CUmemGenericAllocationHandle mc = 0;
  EXPECT_EQ(cuMulticastCreate(&mc, &prop), CUDA_ERROR_NOT_SUPPORTED);
  CUmemGenericAllocationHandle h = Create(g_);
  EXPECT_EQ(cuMulticastAddDevice(h, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastBindMem(h, 0, h, 0, g_, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastBindAddr(h, 0, Outside(), g_, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMulticastUnbind(h, 0, 0, g_), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(VmmTest, DataWrittenThroughOneMappingIsReadThroughAnother) {
  CUmemGenericAllocationHandle h = Create(g_);
  CUdeviceptr a = MapReadWrite(h, g_);
  CUdeviceptr b = MapReadWrite(h, g_);
  EXPECT_EQ(a % g_, 0u);
  EXPECT_NE(a, b);
  auto data = Pattern(8192, 3);
  ASSERT_EQ(cuMemcpyHtoD_v2(a + 4096, data.data(), data.size()), CUDA_SUCCESS);
  EXPECT_EQ(Download(b + 4096, data.size()), data);
  CUmemGenericAllocationHandle again = 0;
  EXPECT_EQ(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(b + 10)), CUDA_SUCCESS);
  EXPECT_EQ(again, h);
  for (CUdeviceptr va : {a, b}) {
    EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(VmmTest, MemoryReturnsOnlyOnceReleasedAndUnmapped) {
  size_t before = FreeBytes();
  CUmemGenericAllocationHandle h = Create(g_);
  CUdeviceptr va = MapReadWrite(h, g_);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(before - FreeBytes(), g_);  // still mapped
  ASSERT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);

  h = Create(g_);
  ASSERT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(before - FreeBytes(), g_);  // not released yet
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
}

// A pool that grew by mapping at its end is unmapped by one call over all of it; a range that
// cuts a mapping or spans a hole is refused and unmaps nothing.
TEST_F(VmmTest, OneUnmapTakesWholeMappingsBackToBack) {
  const size_t before = FreeBytes();
  CUdeviceptr va = Reserve(4 * g_);
  CUmemGenericAllocationHandle a = Create(g_), b = Create(2 * g_);
  ASSERT_EQ(cuMemMap(va, g_, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va + g_, 2 * g_, 0, b, 0), CUDA_SUCCESS);
  for (CUmemGenericAllocationHandle h : {a, b}) ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(before - FreeBytes(), 3 * g_);                           // the mappings keep them
  EXPECT_EQ(cuMemUnmap(va, 2 * g_), CUDA_ERROR_INVALID_VALUE);       // half of b
  EXPECT_EQ(cuMemUnmap(va, 4 * g_), CUDA_ERROR_INVALID_VALUE);       // past b
  EXPECT_EQ(cuMemUnmap(va + g_, g_), CUDA_ERROR_INVALID_VALUE);      // the start of b only
  EXPECT_EQ(cuMemUnmap(va + 2 * g_, g_), CUDA_ERROR_INVALID_VALUE);  // the end of b only
  EXPECT_EQ(before - FreeBytes(), 3 * g_);
  EXPECT_EQ(cuMemUnmap(va, 3 * g_), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);

  CUmemGenericAllocationHandle c = Create(g_), d = Create(g_);
  ASSERT_EQ(cuMemMap(va, g_, 0, c, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va + 2 * g_, g_, 0, d, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(va, 3 * g_), CUDA_ERROR_INVALID_VALUE);  // a hole between them
  for (CUdeviceptr at : {va, va + 2 * g_}) EXPECT_EQ(cuMemUnmap(at, g_), CUDA_SUCCESS);
  for (CUmemGenericAllocationHandle h : {c, d}) EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuMemAddressFree(va, 4 * g_), CUDA_SUCCESS);
}

TEST_F(VmmTest, CopiesIntoAMappedRangeWithoutAccessFail) {
  CUmemGenericAllocationHandle h = Create(g_);
  CUdeviceptr va = Reserve(g_);
  ASSERT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_SUCCESS);
  auto data = Pattern(256, 1);
  EXPECT_EQ(cuMemcpyHtoD_v2(va, data.data(), data.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8_v2(va, 0, 256), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(SetAccess(va, g_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(va, data.data(), data.size()), CUDA_SUCCESS);
  EXPECT_EQ(Download(va, data.size()), data);
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(va, data.data(), data.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(VmmTest, ARetainedHandleNeedsItsOwnRelease) {
  size_t before = FreeBytes();
  CUmemGenericAllocationHandle h = Create(g_);
  CUdeviceptr va = MapReadWrite(h, g_);
  CUmemGenericAllocationHandle again = 0;
  ASSERT_EQ(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va)), CUDA_SUCCESS);
  ASSERT_EQ(again, h);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(before - FreeBytes(), g_);  // the retained reference keeps it
  EXPECT_EQ(cuMemRelease(again), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
}

TEST_F(VmmTest, ReadOnlyAccessAllowsReadsButNotWrites) {
  CUmemGenericAllocationHandle h = Create(g_);
  CUdeviceptr va = Reserve(g_);
  ASSERT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(SetAccess(va, g_, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_SUCCESS);
  std::vector<uint8_t> out(256, 0xff);
  EXPECT_EQ(cuMemcpyDtoH_v2(out.data(), va, out.size()), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(va, out.data(), out.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(VmmTest, MisplacedMapsAndFreesAreRejected) {
  CUmemGenericAllocationHandle h = Create(2 * g_);
  CUdeviceptr va = 0;
  EXPECT_EQ(cuMemAddressReserve(&va, g_ + 1, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressReserve(&va, g_, 3, 0, 0), CUDA_ERROR_INVALID_VALUE);
  va = Reserve(2 * g_);
  EXPECT_EQ(cuMemMap(Outside() / g_ * g_, g_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(va, 3 * g_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);   // beyond both
  EXPECT_EQ(cuMemMap(va, g_, g_ / 2, h, 0), CUDA_ERROR_INVALID_VALUE);  // unaligned offset
  EXPECT_EQ(SetAccess(va, g_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(va, 2 * g_, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va + g_, g_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // already mapped
  EXPECT_EQ(cuMemAddressFree(va, 2 * g_), CUDA_ERROR_INVALID_VALUE);    // still mapped
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_ERROR_INVALID_VALUE);              // not the whole mapping
  ASSERT_EQ(cuMemUnmap(va, 2 * g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(va, 2 * g_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_ERROR_INVALID_VALUE);  // not the whole range
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, 2 * g_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // released
  EXPECT_EQ(cuMemAddressFree(va, 2 * g_), CUDA_SUCCESS);
}

// Passes a shareable handle's descriptor over a Unix socket (SCM_RIGHTS), as processes do;
// tests/cudart/program_io.h has the message.
void SendFd(int sock, int fd) { ASSERT_TRUE(cudart::SendFd(sock, fd, 0)); }

int ReceiveFd(int sock) {
  int fd = -1;
  uint64_t word = 0;
  return cudart::ReceiveFd(sock, &fd, &word) ? fd : -1;
}

// In an importing process: `mine` starts a range of `size` bytes where the creator wrote
// `data` at offset `at`. Writes 0x5a at its start, for the creator to read.
void ExpectTheCreatorsBytesAndMark(CUdeviceptr mine, size_t size, size_t at,
                                   const std::vector<uint8_t>& data) {
  std::vector<uint8_t> seen(data.size());
  ASSERT_EQ(cuMemcpyDtoH_v2(seen.data(), mine + at, seen.size()), CUDA_SUCCESS);
  EXPECT_EQ(seen, data) << "the creator's bytes";
  unsigned char mark = 0x5a;
  ASSERT_EQ(cuMemcpyHtoD_v2(mine, &mark, 1), CUDA_SUCCESS);
  CUdeviceptr base = 0;
  size_t range = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &range, mine + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, mine);
  EXPECT_EQ(range, size);
}

TEST_F(VmmTest, AnExportedDescriptorGivesAnotherProcessTheSamePagesChargedOnlyToItsCreator) {
  size_t before = FreeBytes();
  CUmemAllocationProp prop = DeviceProp(0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, 2 * g_, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va = MapReadWrite(h, 2 * g_);
  auto data = Pattern(8192, 9);
  ASSERT_EQ(cuMemcpyHtoD_v2(va + g_, data.data(), data.size()), CUDA_SUCCESS);
  int fd = -1;
  ASSERT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  SendFd(sv[0], fd);
  close(fd);  // the descriptor in flight keeps the pages
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  EXPECT_IN_CHILD({}, [&] {
    StartCudaWithManifest();
    size_t child_before = FreeBytes();
    int got = ReceiveFd(sv[1]);
    ASSERT_GE(got, 0);
    CUmemGenericAllocationHandle imported = 0;
    ASSERT_EQ(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(intptr_t(got)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_SUCCESS);
    close(got);  // the handle holds its own reference
    CUmemAllocationProp seen{};
    ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&seen, imported), CUDA_SUCCESS);
    EXPECT_EQ(seen.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    EXPECT_EQ(seen.location.id, 0);
    EXPECT_EQ(seen.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUdeviceptr mine = MapReadWrite(imported, 2 * g_);
    ExpectTheCreatorsBytesAndMark(mine, 2 * g_, g_, data);
    EXPECT_EQ(FreeBytes(), child_before) << "an import is charged to its creator, not again";
    EXPECT_EQ(cuMemUnmap(mine, 2 * g_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAddressFree(mine, 2 * g_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemRelease(imported), CUDA_SUCCESS);
    EXPECT_EQ(FreeBytes(), child_before);
  });
  close(sv[0]);
  close(sv[1]);
  unsigned char back = 0;
  ASSERT_EQ(cuMemcpyDtoH_v2(&back, va, 1), CUDA_SUCCESS);
  EXPECT_EQ(back, 0x5a) << "the other process wrote into the same pages";
  EXPECT_EQ(cuMemUnmap(va, 2 * g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, 2 * g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(VmmTest, OnlyARequestedHandleTypeExportsAndOnlyOurDescriptorsImport) {
  CUmemAllocationProp prop = DeviceProp(0);
  CUmemGenericAllocationHandle plain = Create(g_);
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE)
      << "created without requesting POSIX descriptors";
  EXPECT_EQ(
      cuMemExportToShareableHandle(nullptr, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemRelease(plain), CUDA_SUCCESS);
  // No NVLink fabric on the simulated machine: the device says so, and a fabric handle is
  // not supported.
  int fabric = -1;
  ASSERT_EQ(cuDeviceGetAttribute(&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(fabric, 0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, g_, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
  prop.requestedHandleTypes = CUmemAllocationHandleType(0x40);
  EXPECT_EQ(cuMemCreate(&h, g_, &prop, 0), CUDA_ERROR_INVALID_VALUE);

  // Descriptors that are not a shareable handle of this driver.
  CUmemGenericAllocationHandle out = 0;
  auto import = [&out](int descriptor) {
    return cuMemImportFromShareableHandle(&out, reinterpret_cast<void*>(intptr_t(descriptor)),
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  };
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  EXPECT_EQ(import(pipe_fds[0]), CUDA_ERROR_INVALID_VALUE) << "a pipe";
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  int other = memfd_create("someone-else", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(ftruncate(other, off_t(g_)), 0);
  EXPECT_EQ(import(other), CUDA_ERROR_INVALID_VALUE) << "a memfd of another program";
  close(other);
  EXPECT_EQ(import(-1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(import(987654), CUDA_ERROR_INVALID_VALUE) << "not open";
  EXPECT_EQ(
      cuMemImportFromShareableHandle(nullptr, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
      CUDA_ERROR_INVALID_VALUE);
}

TEST_F(VmmTest, HostLocatedMemoryMapsAndChargesNoDevice) {
  for (CUmemLocationType type : {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA,
                                 CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT}) {
    SCOPED_TRACE(int(type));
    size_t before = FreeBytes();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = type;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t granularity = 0;
    ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = 0;
    ASSERT_EQ(cuMemCreate(&h, granularity, &prop, 0), CUDA_SUCCESS);
    EXPECT_EQ(FreeBytes(), before);
    CUdeviceptr va = MapReadWrite(h, granularity);
    auto data = Pattern(4096, 5);
    ASSERT_EQ(cuMemcpyHtoD_v2(va, data.data(), data.size()), CUDA_SUCCESS);
    EXPECT_EQ(Download(va, data.size()), data);
    CUmemAllocationProp seen{};
    ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&seen, h), CUDA_SUCCESS);
    EXPECT_EQ(seen.location.type, CU_MEM_LOCATION_TYPE_HOST);
    EXPECT_EQ(cuMemUnmap(va, granularity), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAddressFree(va, granularity), CUDA_SUCCESS);
    EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
    EXPECT_EQ(FreeBytes(), before);
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop.location.id = 4096;  // no such node
  size_t granularity = 0;
  EXPECT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  for (CUdevice_attribute a : {CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED}) {
    int v = 0;
    ASSERT_EQ(cuDeviceGetAttribute(&v, a, 0), CUDA_SUCCESS);
    EXPECT_EQ(v, 1) << int(a);
  }
}

// ---- pool sharing ----

// Pools whose memory other processes import: created with POSIX descriptors, exported as a
// descriptor sent over a Unix socket, and their pointers exported as data.
class SharedPoolTest : public SimDeviceTest {
 protected:
  static CUmemoryPool CreateSharedPool() {
    return CreatePool(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  }
  static int ExportPool(CUmemoryPool pool) {
    int fd = -1;
    EXPECT_EQ(
        cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        CUDA_SUCCESS);
    return fd;
  }
  static CUresult ImportPool(CUmemoryPool* out, int fd) {
    return cuMemPoolImportFromShareableHandle(out, reinterpret_cast<void*>(intptr_t(fd)),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  }
  // Allocates from `pool` on the current context's NULL stream and waits for it.
  static CUdeviceptr AllocFrom(CUmemoryPool pool, size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAllocFromPoolAsync(&p, bytes, pool, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
    return p;
  }
  static CUmemPoolPtrExportData ExportPointer(CUdeviceptr p) {
    CUmemPoolPtrExportData data{};
    EXPECT_EQ(cuMemPoolExportPointer(&data, p), CUDA_SUCCESS);
    return data;
  }
  // Device 0's memory charged to process `pid` in the machine's state file (the per-process
  // view NVML reports).
  static uint64_t ProcessUsedBytes(pid_t pid) {
    auto state = sim::SharedState::OpenExisting(SimEnv::Setup());
    EXPECT_TRUE(state.ok()) << state.error().message();
    if (!state.ok()) return 0;
    for (const sim::ProcessView& v : (*state)->Processes(0)) {
      if (v.host_pid == pid) return v.used_bytes;
    }
    ADD_FAILURE() << "no process " << pid << " on device 0";
    return 0;
  }
  static CUmemAccess_flags Access(CUmemoryPool pool, int device) {
    CUmemLocation where{CU_MEM_LOCATION_TYPE_DEVICE, device};
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_MAX;
    EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &where), CUDA_SUCCESS);
    return flags;
  }
  static CUresult SetAccess(CUmemoryPool pool, int device, CUmemAccess_flags flags) {
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = device;
    desc.flags = flags;
    return cuMemPoolSetAccess(pool, &desc, 1);
  }
};

TEST_F(SharedPoolTest, AnImportedPoolGivesAnotherProcessThePagesChargedOnlyToTheirCreator) {
  size_t before = FreeBytes();
  uint64_t mine_before = ProcessUsedBytes(getpid());
  CUmemoryPool pool = CreateSharedPool();
  CUdeviceptr p = AllocFrom(pool, 3 * g_ / 2);
  EXPECT_EQ(before - FreeBytes(), 2 * g_) << "pool memory, reserved in whole granules";
  EXPECT_EQ(ProcessUsedBytes(getpid()) - mine_before, 2 * g_);
  auto data = Pattern(8192, 4);
  ASSERT_EQ(cuMemcpyHtoD_v2(p + g_, data.data(), data.size()), CUDA_SUCCESS);
  CUmemPoolPtrExportData exported = ExportPointer(p);
  int fd = ExportPool(pool);
  ASSERT_GE(fd, 0);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  SendFd(sv[0], fd);
  close(fd);
  const pid_t creator = getpid();
  EXPECT_IN_CHILD({}, [&] {
    StartCudaWithManifest();
    size_t child_before = FreeBytes();
    uint64_t child_used = ProcessUsedBytes(getpid());
    int got = ReceiveFd(sv[1]);
    ASSERT_GE(got, 0);
    CUmemoryPool imported = nullptr;
    ASSERT_EQ(ImportPool(&imported, got), CUDA_SUCCESS);
    close(got);  // the imported pool holds its own reference
    CUdeviceptr mine = 0;
    ASSERT_EQ(cuMemPoolImportPointer(&mine, imported, &exported), CUDA_SUCCESS);
    ExpectTheCreatorsBytesAndMark(mine, 3 * g_ / 2, g_, data);
    // A second import maps the same pages again; cuMemFree unmaps it.
    CUdeviceptr again = 0;
    ASSERT_EQ(cuMemPoolImportPointer(&again, imported, &exported), CUDA_SUCCESS);
    EXPECT_EQ(Download(again, 1), std::vector<uint8_t>{0x5a});
    EXPECT_EQ(cuMemFree_v2(again), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree_v2(again), CUDA_ERROR_INVALID_VALUE);

    EXPECT_EQ(FreeBytes(), child_before) << "an import is charged to its creator, not again";
    EXPECT_EQ(ProcessUsedBytes(getpid()), child_used);
    EXPECT_EQ(ProcessUsedBytes(creator) - mine_before, 2 * g_);
    cuuint64_t used = 1;
    ASSERT_EQ(cuMemPoolGetAttribute(imported, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
              CUDA_SUCCESS);
    EXPECT_EQ(used, 0u);

    // Nothing is allocated from an imported pool.
    CUdeviceptr q = 0;
    EXPECT_EQ(cuMemAllocFromPoolAsync(&q, 4096, imported, nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuDeviceSetMemPool(0, imported), CUDA_ERROR_INVALID_VALUE);
    CUmemLocation where{CU_MEM_LOCATION_TYPE_DEVICE, 0};
    EXPECT_EQ(cuMemSetMemPool(&where, CU_MEM_ALLOCATION_TYPE_PINNED, imported),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(FreeBytes(), child_before);

    EXPECT_EQ(cuMemFreeAsync(mine, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuMemPoolDestroy(imported), CUDA_SUCCESS);
    EXPECT_EQ(FreeBytes(), child_before);
  });
  close(sv[0]);
  close(sv[1]);
  EXPECT_EQ(Download(p, 1), std::vector<uint8_t>{0x5a}) << "the other process wrote here";
  EXPECT_EQ(Download(p + g_, data.size()), data) << "an importer's free keeps the bytes";
  EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

// The driver requires importers to free first. Here the creator frees while another process
// still maps the memory: the memory and its charge go at once, the importer's mapping stays
// valid and reads zeros, and the export data no longer imports.
TEST_F(SharedPoolTest, TheCreatorsFreeReleasesMemoryThatAnImporterStillMaps) {
  size_t before = FreeBytes();
  uint64_t mine_before = ProcessUsedBytes(getpid());
  CUmemoryPool pool = CreateSharedPool();
  CUdeviceptr p = AllocFrom(pool, g_);
  auto data = Pattern(4096, 6);
  ASSERT_EQ(cuMemcpyHtoD_v2(p, data.data(), data.size()), CUDA_SUCCESS);
  CUmemPoolPtrExportData exported = ExportPointer(p);
  int fd = ExportPool(pool);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  SendFd(sv[0], fd);
  close(fd);
  // The creator's side runs on a thread of this process while the importer runs: it frees
  // when the importer says it has mapped the memory, then answers.
  CUcontext ctx = ctx_;
  std::thread creator([&] {
    char byte = 0;
    if (read(sv[0], &byte, 1) != 1) return;
    EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(ProcessUsedBytes(getpid()), mine_before) << "released while imported";
    EXPECT_EQ(write(sv[0], "f", 1), 1);
  });
  EXPECT_IN_CHILD({}, [&] {
    StartCudaWithManifest();
    int got = ReceiveFd(sv[1]);
    CUmemoryPool imported = nullptr;
    ASSERT_EQ(ImportPool(&imported, got), CUDA_SUCCESS);
    close(got);
    CUdeviceptr mine = 0;
    ASSERT_EQ(cuMemPoolImportPointer(&mine, imported, &exported), CUDA_SUCCESS);
    EXPECT_EQ(Download(mine, data.size()), data);
    ASSERT_EQ(write(sv[1], "m", 1), 1);
    char byte = 0;
    ASSERT_EQ(read(sv[1], &byte, 1), 1);  // the creator has freed
    EXPECT_EQ(Download(mine, data.size()), std::vector<uint8_t>(data.size(), 0));
    CUdeviceptr stale = 0;
    EXPECT_EQ(cuMemPoolImportPointer(&stale, imported, &exported), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemFree_v2(mine), CUDA_SUCCESS);
    EXPECT_EQ(cuMemPoolDestroy(imported), CUDA_SUCCESS);
  });
  shutdown(sv[0], SHUT_RDWR);  // ends the creator's wait if the child failed early
  creator.join();
  close(sv[0]);
  close(sv[1]);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

TEST_F(SharedPoolTest, OnlyAPoolCreatedWithDescriptorsExportsAndOnlyItsDescriptorsImport) {
  auto export_pool = [](CUmemoryPool pool, CUmemAllocationHandleType type) {
    int fd = -1;
    return cuMemPoolExportToShareableHandle(&fd, pool, type, 0);
  };
  CUmemoryPool def = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&def, dev_), CUDA_SUCCESS);
  EXPECT_EQ(export_pool(def, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_ERROR_INVALID_VALUE)
      << "the default pool";
  CUmemoryPool plain = CreatePool(0);
  EXPECT_EQ(export_pool(plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_ERROR_INVALID_VALUE)
      << "created without handle types";
  CUmemoryPool shared = CreateSharedPool();
  EXPECT_EQ(export_pool(shared, CU_MEM_HANDLE_TYPE_FABRIC), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(export_pool(shared, CUmemAllocationHandleType(0x40)), CUDA_ERROR_INVALID_VALUE);
  int fd = -1;
  EXPECT_EQ(cuMemPoolExportToShareableHandle(nullptr, shared,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(
      cuMemPoolExportToShareableHandle(&fd, shared, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
      CUDA_ERROR_INVALID_VALUE);

  // Types cuMemCreate does not support either: no NVLink fabric, not Windows.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemoryPool pool = nullptr;
  for (CUmemAllocationHandleType t : {CU_MEM_HANDLE_TYPE_FABRIC, CU_MEM_HANDLE_TYPE_WIN32}) {
    props.handleTypes = t;
    EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED) << int(t);
  }
  props.handleTypes = CUmemAllocationHandleType(0x40);
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);

  // Descriptors that are not a pool's.
  CUmemoryPool out = nullptr;
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  EXPECT_EQ(ImportPool(&out, pipe_fds[0]), CUDA_ERROR_INVALID_VALUE) << "a pipe";
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  int other = memfd_create("someone-else", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(ftruncate(other, off_t(4 * g_)), 0);
  EXPECT_EQ(ImportPool(&out, other), CUDA_ERROR_INVALID_VALUE) << "a memfd of another program";
  close(other);
  CUmemAllocationProp prop = DeviceProp(0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle vmm = 0;
  ASSERT_EQ(cuMemCreate(&vmm, g_, &prop, 0), CUDA_SUCCESS);
  int vmm_fd = -1;
  ASSERT_EQ(cuMemExportToShareableHandle(&vmm_fd, vmm, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(ImportPool(&out, vmm_fd), CUDA_ERROR_INVALID_VALUE) << "a VMM allocation's handle";
  close(vmm_fd);
  EXPECT_EQ(cuMemRelease(vmm), CUDA_SUCCESS);
  fd = ExportPool(shared);
  CUmemGenericAllocationHandle as_vmm = 0;
  EXPECT_EQ(cuMemImportFromShareableHandle(&as_vmm, reinterpret_cast<void*>(intptr_t(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_INVALID_VALUE)
      << "a pool's handle is not a VMM allocation's";
  int read_only = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  EXPECT_EQ(ImportPool(&out, read_only), CUDA_ERROR_INVALID_VALUE) << "not open for writing";
  close(read_only);
  EXPECT_EQ(cuMemPoolImportFromShareableHandle(&out, reinterpret_cast<void*>(intptr_t(fd)),
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolImportFromShareableHandle(&out, reinterpret_cast<void*>(intptr_t(fd)),
                                               CU_MEM_HANDLE_TYPE_FABRIC, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemPoolImportFromShareableHandle(nullptr, reinterpret_cast<void*>(intptr_t(fd)),
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  close(fd);
  EXPECT_EQ(ImportPool(&out, -1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ImportPool(&out, 987654), CUDA_ERROR_INVALID_VALUE) << "not open";
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(cuMemPoolDestroy(plain), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(shared), CUDA_SUCCESS);
}

TEST_F(SharedPoolTest, OnlyAnExportablePoolsAllocationsExportAndImportsCheckTheData) {
  CUmemoryPool shared = CreateSharedPool();
  CUmemoryPool other = CreateSharedPool();
  CUmemoryPool plain = CreatePool(0);
  CUdeviceptr p = AllocFrom(shared, g_);
  CUdeviceptr freed = AllocFrom(shared, g_);
  CUdeviceptr elsewhere = AllocFrom(other, g_);
  CUdeviceptr from_plain = AllocFrom(plain, g_);
  CUdeviceptr device = Alloc(g_);
  CUmemPoolPtrExportData data{};
  for (CUdeviceptr bad : {from_plain, device, p + 4096, Outside(), CUdeviceptr(0)}) {
    EXPECT_EQ(cuMemPoolExportPointer(&data, bad), CUDA_ERROR_INVALID_VALUE) << bad;
  }
  EXPECT_EQ(cuMemPoolExportPointer(nullptr, p), CUDA_ERROR_INVALID_VALUE);
  CUmemPoolPtrExportData good = ExportPointer(p);
  CUmemPoolPtrExportData twice = ExportPointer(p);
  EXPECT_EQ(std::memcmp(&good, &twice, sizeof(good)), 0) << "the same data each time";
  CUmemPoolPtrExportData of_freed = ExportPointer(freed);
  CUmemPoolPtrExportData of_other = ExportPointer(elsewhere);
  EXPECT_EQ(cuMemFreeAsync(freed, nullptr), CUDA_SUCCESS);
  CUdeviceptr out = 0;
  EXPECT_EQ(cuMemPoolImportPointer(&out, shared, &good), CUDA_ERROR_INVALID_VALUE)
      << "a pool this process created is not an imported one";
  int fd = ExportPool(shared);
  EXPECT_IN_CHILD({}, [&] {
    StartCudaWithManifest();
    CUmemoryPool imported = nullptr;
    ASSERT_EQ(ImportPool(&imported, fd), CUDA_SUCCESS);
    CUdeviceptr q = 0;
    EXPECT_EQ(cuMemPoolImportPointer(&q, imported, &of_freed), CUDA_ERROR_INVALID_VALUE)
        << "freed by its creator";
    EXPECT_EQ(cuMemPoolImportPointer(&q, imported, &of_other), CUDA_ERROR_INVALID_VALUE)
        << "an allocation of another pool";
    CUmemPoolPtrExportData zero{};
    EXPECT_EQ(cuMemPoolImportPointer(&q, imported, &zero), CUDA_ERROR_INVALID_VALUE);
    // Each byte of the data matters: any one changed names no live allocation.
    for (size_t i = 0; i < sizeof(good.reserved); ++i) {
      CUmemPoolPtrExportData changed = good;
      changed.reserved[i] ^= 0x10;
      EXPECT_EQ(cuMemPoolImportPointer(&q, imported, &changed), CUDA_ERROR_INVALID_VALUE)
          << "byte " << i;
    }
    EXPECT_EQ(cuMemPoolImportPointer(nullptr, imported, &good), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemPoolImportPointer(&q, imported, nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(q, 0u);
    ASSERT_EQ(cuMemPoolImportPointer(&q, imported, &good), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
    EXPECT_EQ(cuMemPoolDestroy(imported), CUDA_SUCCESS);
    EXPECT_EQ(cuMemPoolImportPointer(&q, imported, &good), CUDA_ERROR_INVALID_VALUE)
        << "a destroyed pool";
  });
  close(fd);
  for (CUdeviceptr q : {p, elsewhere, from_plain}) {
    EXPECT_EQ(cuMemFreeAsync(q, nullptr), CUDA_SUCCESS);
  }
  Free({device});
  for (CUmemoryPool pool : {shared, other, plain}) EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

TEST_F(SharedPoolTest, AccessIsReadWriteOnThePoolsDeviceAndSetPerDeviceElsewhere) {
  CUmemoryPool pool = CreateSharedPool();
  CUmemoryPool def = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&def, dev_), CUDA_SUCCESS);
  for (CUmemoryPool p : {pool, def}) {
    EXPECT_EQ(Access(p, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(Access(p, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
  }
  for (CUmemAccess_flags f : {CU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                              CU_MEM_ACCESS_FLAGS_PROT_NONE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE}) {
    ASSERT_EQ(SetAccess(pool, 1, f), CUDA_SUCCESS);
    EXPECT_EQ(Access(pool, 1), f);
  }
  EXPECT_EQ(Access(def, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE) << "each pool has its own";
  EXPECT_EQ(SetAccess(pool, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  EXPECT_EQ(SetAccess(pool, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(SetAccess(pool, 0, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Access(pool, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

  // Bad requests change nothing, not even the good descriptors beside them.
  CUmemAccessDesc two[2] = {};
  two[0].location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  two[0].flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  two[1].location = {CU_MEM_LOCATION_TYPE_DEVICE, 7};
  two[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(cuMemPoolSetAccess(pool, two, 2), CUDA_ERROR_INVALID_DEVICE) << "no device 7";
  two[1].location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  EXPECT_EQ(cuMemPoolSetAccess(pool, two, 2), CUDA_ERROR_INVALID_VALUE);
  two[1].location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  two[1].flags = CUmemAccess_flags(5);
  EXPECT_EQ(cuMemPoolSetAccess(pool, two, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Access(pool, 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(cuMemPoolSetAccess(pool, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolSetAccess(pool, two, 0), CUDA_ERROR_INVALID_VALUE);
  CUmemAccess_flags flags;
  CUmemLocation where{CU_MEM_LOCATION_TYPE_DEVICE, 9};
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &where), CUDA_ERROR_INVALID_DEVICE);
  where = {CU_MEM_LOCATION_TYPE_HOST, 0};
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &where), CUDA_ERROR_INVALID_VALUE);
  where = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  EXPECT_EQ(cuMemPoolGetAccess(nullptr, pool, &where), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, nullptr), CUDA_ERROR_INVALID_VALUE);

  // An importer starts from the pool's own device alone, whatever the creator set.
  int fd = ExportPool(pool);
  EXPECT_IN_CHILD({}, [&] {
    StartCudaWithManifest();
    CUmemoryPool imported = nullptr;
    ASSERT_EQ(ImportPool(&imported, fd), CUDA_SUCCESS);
    EXPECT_EQ(Access(imported, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(Access(imported, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
    EXPECT_EQ(SetAccess(imported, 1, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_SUCCESS);
    EXPECT_EQ(Access(imported, 1), CU_MEM_ACCESS_FLAGS_PROT_READ);
    EXPECT_EQ(cuMemPoolDestroy(imported), CUDA_SUCCESS);
  });
  close(fd);
  EXPECT_EQ(Access(pool, 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE) << "the importer's is its own";
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &where), CUDA_ERROR_INVALID_VALUE) << "destroyed";
}

// ---- arrays ----

class ArrayTest : public SimDeviceTest {
 protected:
  void SetUp() override {
    SimDeviceTest::SetUp();
    CUDA_ARRAY_DESCRIPTOR d = Desc(64, 16, CU_AD_FORMAT_FLOAT, 1);
    ASSERT_EQ(cuArrayCreate_v2(&array_, &d), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuArrayDestroy(array_), CUDA_SUCCESS);
    SimDeviceTest::TearDown();
  }
  static CUDA_ARRAY_DESCRIPTOR Desc(size_t width, size_t height, CUarray_format format,
                                    unsigned channels) {
    CUDA_ARRAY_DESCRIPTOR d{};
    d.Width = width;
    d.Height = height;
    d.Format = format;
    d.NumChannels = channels;
    return d;
  }

  CUarray array_ = nullptr;
};

TEST_F(ArrayTest, ArraysKeepTheirDescriptorsAndChargeWholeGranules) {
  CUDA_ARRAY_DESCRIPTOR got{};
  ASSERT_EQ(cuArrayGetDescriptor_v2(&got, array_), CUDA_SUCCESS);
  EXPECT_EQ(got.Width, 64u);
  EXPECT_EQ(got.Height, 16u);
  EXPECT_EQ(got.Format, CU_AD_FORMAT_FLOAT);
  EXPECT_EQ(got.NumChannels, 1u);

  size_t before = FreeBytes();
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 1024;
  d3.Height = 512;
  d3.Depth = 3;
  d3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d3.NumChannels = 4;
  CUarray a3 = nullptr;
  ASSERT_EQ(cuArray3DCreate_v2(&a3, &d3), CUDA_SUCCESS);  // 6 MiB
  EXPECT_EQ(before - FreeBytes(), 3 * g_);
  CUDA_ARRAY3D_DESCRIPTOR got3{};
  ASSERT_EQ(cuArray3DGetDescriptor_v2(&got3, a3), CUDA_SUCCESS);
  EXPECT_EQ(got3.Depth, 3u);
  EXPECT_EQ(got3.NumChannels, 4u);
  EXPECT_EQ(cuArrayDestroy(a3), CUDA_SUCCESS);
  EXPECT_EQ(cuArrayDestroy(a3), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(ArrayTest, BadDescriptorsAreInvalidValue) {
  CUarray a = nullptr;
  CUDA_ARRAY_DESCRIPTOR d = Desc(64, 16, CUarray_format(0x7777), 1);
  EXPECT_EQ(cuArrayCreate_v2(&a, &d), CUDA_ERROR_INVALID_VALUE);
  d = Desc(64, 16, CU_AD_FORMAT_FLOAT, 3);
  EXPECT_EQ(cuArrayCreate_v2(&a, &d), CUDA_ERROR_INVALID_VALUE);
  d = Desc(0, 16, CU_AD_FORMAT_FLOAT, 1);
  EXPECT_EQ(cuArrayCreate_v2(&a, &d), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArrayCreate_v2(&a, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ArrayTest, LinearCopiesRoundTripThroughAnArray) {
  auto data = Pattern(1000, 9);
  std::vector<uint8_t> out(data.size());
  ASSERT_EQ(cuMemcpyHtoA_v2(array_, 96, data.data(), data.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyAtoH_v2(out.data(), array_, 96, out.size()), CUDA_SUCCESS);
  EXPECT_EQ(out, data);
  CUdeviceptr p = Alloc(1000);
  ASSERT_EQ(cuMemcpyAtoD_v2(p, array_, 96, 1000), CUDA_SUCCESS);
  EXPECT_EQ(Download(p, 1000), data);
  ASSERT_EQ(cuMemcpyDtoA_v2(array_, 3000, p, 1000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyAtoH_v2(out.data(), array_, 3000, out.size()), CUDA_SUCCESS);
  EXPECT_EQ(out, data);
  EXPECT_EQ(cuMemcpyHtoA_v2(array_, 3500, data.data(), data.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyAtoH_v2(out.data(), array_, 5000, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoA_v2(reinterpret_cast<CUarray>(p), 0, data.data(), 4),
            CUDA_ERROR_INVALID_HANDLE);
  Free({p});
}

// ---- pinned host memory ----

class HostMemoryTest : public SimDeviceTest {};

TEST_F(HostMemoryTest, PinnedHostMemoryIsHostMemoryAndChargesNoDeviceMemory) {
  size_t before = FreeBytes();
  void* host = nullptr;
  ASSERT_EQ(cuMemAllocHost_v2(&host, 1 << 20), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  auto data = Pattern(1 << 20, 2);
  std::memcpy(host, data.data(), data.size());
  CUdeviceptr dev = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&dev, host, 0), CUDA_SUCCESS);
  EXPECT_EQ(Download(dev, data.size()), data);
  unsigned type = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CUdeviceptr(host)),
            CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned(CU_MEMORYTYPE_HOST));
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&dev, host, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(CUdeviceptr(host)), CUDA_ERROR_INVALID_VALUE);  // not device memory
  EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(HostMemoryTest, HostAllocTakesItsFlagsAndFreeHostOnlyItsMemory) {
  void* host = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&host, 4096,
                           CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                               CU_MEMHOSTALLOC_WRITECOMBINED),
            CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostAlloc(&host, 4096, 0x80), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostAlloc(&host, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr dev = Alloc(4096);
  EXPECT_EQ(cuMemFreeHost(reinterpret_cast<void*>(dev)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(reinterpret_cast<void*>(Outside())), CUDA_ERROR_INVALID_VALUE);
  Free({dev});
}

// What libvgpu's oversubscription serves an allocation past the device budget with: pinned
// host memory mapped into the device's address space. The device uses it through its device
// pointer (copies, sets, device-to-device), and it never counts as device memory: not in
// cuMemGetInfo, not in what NVML shows for the process. A device allocation does, in both.
// The memory goes with its context.
TEST_F(HostMemoryTest, MappedHostMemoryServesTheDeviceAndNeverCountsAsDeviceMemory) {
  auto state = sim::SharedState::OpenExisting(SimEnv::Setup());
  ASSERT_TRUE(state.ok()) << state.error().message();
  auto process_bytes = [&] {
    for (const sim::ProcessView& p : (*state)->Processes(0)) {
      if (p.ns_pid == getpid()) return p.used_bytes;
    }
    return uint64_t(0);
  };
  const size_t free_before = FreeBytes();
  const uint64_t process_before = process_bytes();
  const uint64_t device_before = (*state)->UsedBytes(0);
  constexpr size_t kBytes = 64 << 20;
  void* host = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&host, kBytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
            CUDA_SUCCESS);
  CUdeviceptr mapped = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&mapped, host, 0), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), free_before);
  EXPECT_EQ(process_bytes(), process_before);
  EXPECT_EQ((*state)->UsedBytes(0), device_before);

  const std::vector<uint8_t> data = Pattern(kBytes, 7);
  ASSERT_EQ(cuMemcpyHtoD_v2(mapped, data.data(), kBytes), CUDA_SUCCESS);
  EXPECT_EQ(Download(mapped, kBytes), data);
  EXPECT_EQ(std::memcmp(host, data.data(), kBytes), 0) << "the same pages, seen from the host";
  CUdeviceptr device = Alloc(kBytes);
  EXPECT_EQ(FreeBytes(), free_before - kBytes);
  EXPECT_EQ(process_bytes(), process_before + kBytes);
  ASSERT_EQ(cuMemcpyDtoD_v2(device, mapped, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(Download(device, kBytes), data);
  ASSERT_EQ(cuMemsetD8_v2(mapped, 0x5a, 4096), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<uint8_t*>(host)[4095], 0x5a);
  Free({device});
  EXPECT_EQ(FreeBytes(), free_before);
  EXPECT_EQ(cuMemFree_v2(mapped), CUDA_ERROR_INVALID_VALUE) << "cuMemFreeHost frees it";
  EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);

  // Made in a context, it goes with the context.
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0, dev_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostAlloc(&host, kBytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
            CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&mapped, host, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(HostMemoryTest, HostGetFlagsReturnsTheFlagsOfTheAllocation) {
  void* host = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
            CUDA_SUCCESS);
  unsigned flags = 0;
  ASSERT_EQ(cuMemHostGetFlags(&flags, host), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
}

TEST_F(HostMemoryTest, RegisteredMemoryIsDeviceAccessibleUntilUnregistered) {
  constexpr size_t kBytes = 8192;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, kBytes));
  ASSERT_NE(buf, nullptr);
  auto data = Pattern(kBytes, 4);
  std::memcpy(buf, data.data(), kBytes);
  EXPECT_EQ(cuMemHostRegister_v2(buf, kBytes, 0x100), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemHostRegister_v2(buf, kBytes, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister_v2(buf, kBytes, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemHostRegister_v2(buf + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);

  CUdeviceptr dev = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&dev, buf + 100, 0), CUDA_SUCCESS);
  std::vector<uint8_t> want(data.begin() + 100, data.begin() + 1100);
  EXPECT_EQ(Download(dev, 1000), want);

  EXPECT_EQ(cuMemHostUnregister(buf + 4096), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  ASSERT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&dev, buf, 0), CUDA_ERROR_INVALID_VALUE);
  std::free(buf);
}

// ---- what a context owns ----

class ContextMemoryTest : public SimDeviceTest {};

TEST_F(ContextMemoryTest, DestroyingAContextReturnsAllOfItsMemory) {
  size_t before = FreeBytes();
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0, dev_), CUDA_SUCCESS);
  EXPECT_EQ(before - FreeBytes(), kH100ContextBytes);

  CUdeviceptr p = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 3 * g_ + 1), CUDA_SUCCESS);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(cuMemAlloc_v2(&p, 1000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocPitch_v2(&p, &pitch, 4000, 300, 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&p, g_, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  void* host = nullptr;
  ASSERT_EQ(cuMemAllocHost_v2(&host, 4096), CUDA_SUCCESS);
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = 256;
  d.Height = 256;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 1;
  CUarray array = nullptr;
  ASSERT_EQ(cuArrayCreate_v2(&array, &d), CUDA_SUCCESS);
  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, "hami-sim-module\nkernel busy\n"), CUDA_SUCCESS);
  // 4 granules for the large allocation, one each for the small ones' page, the pitched
  // and the managed allocation, the array and the module.
  EXPECT_EQ(before - FreeBytes(), kH100ContextBytes + 9 * g_);

  ASSERT_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  CUcontext current = nullptr;  // seen from the primary context, which stays
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx_);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuCtxDestroy_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
}

}  // namespace
}  // namespace hami::testing
