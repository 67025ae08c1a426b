// The policy in-process, against a fake driver: the driver's typed tables (driver.h) are
// filled with functions of this test, and the region is a real one in a temporary file. No
// process is started and nothing sleeps.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>

#include "common/temp_dir.h"
#include "vgpu/accounting.h"
#include "vgpu/limiter.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {
namespace {

constexpr uint64_t kGranule = 2ull << 20;
constexpr uint64_t kLimit = 64ull << 20;

// The fake driver: one device, one current context.
CUcontext g_current = reinterpret_cast<CUcontext>(0x100);
CUdeviceptr g_next = 0x10000000;

CUresult FakeCtxGetCurrent(CUcontext* ctx) {
  *ctx = g_current;
  return CUDA_SUCCESS;
}
CUresult FakeCtxGetDevice(CUdevice* dev) {
  *dev = 0;
  return CUDA_SUCCESS;
}
CUresult FakeGranularity(size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) {
  *g = kGranule;
  return CUDA_SUCCESS;
}
CUresult FakeDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult FakeDeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult FakeUuid(CUuuid* u, CUdevice) {
  std::memset(u->bytes, 0x5a, sizeof(u->bytes));
  return CUDA_SUCCESS;
}

class PolicyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static TempDir dir("hami-policy-test");
    static const std::string region = dir.File("usage.cache");
    setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", region.c_str(), 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT", "64m", 1);
    setenv("HAMI_IDENTITY_TIERS", "none", 1);
    static CudaDriver fake;
    fake.aux.cuCtxGetCurrent = FakeCtxGetCurrent;
    fake.aux.cuCtxGetDevice = FakeCtxGetDevice;
    fake.aux.cuMemGetAllocationGranularity = FakeGranularity;
    fake.aux.cuDeviceGetCount = FakeDeviceGetCount;
    fake.aux.cuDeviceGet = FakeDeviceGet;
    fake.aux.cuDeviceGetUuid_v2 = FakeUuid;
    internal::g_cuda.store(&fake);
    internal::g_nvml.store(&internal::kNoNvml);
    LearnDevicesFromCuda();
    ASSERT_EQ(JoinRegion(), JoinState::kJoined);
  }

  static uint64_t Used() { return ViewRegion()->UsedBytes(RegionIndex(0)); }

  // An allocation through the admission path, with the driver call faked.
  static CUresult Alloc(CUdeviceptr* p, uint64_t bytes, CUresult driver = CUDA_SUCCESS) {
    return AdmitAllocation(p, bytes, UsageKind::kData, [&] {
      if (driver == CUDA_SUCCESS) *p = (g_next += 0x10000000);
      return driver;
    });
  }
  static void Free(CUdeviceptr p) {
    ASSERT_EQ(FreeAllocation(p, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  }
};

// A launch tells a node agent's feedback loop that the container is active: the first one,
// then one per kActivityBatch, and the first one after the loop decayed the container's
// recent-kernel counter to 0, however few launches came between.
TEST_F(PolicyTest, ALaunchAfterTheDecayToIdleIsRecordedAtOnce) {
  region::Region* reg = ViewRegion();
  int ordinal = -1;
  auto launches = [&] {
    for (const region::SlotView& s : reg->Slots()) {
      if (s.pid == getpid()) return s.launches;
    }
    return uint64_t(0);
  };
  auto decay_to_idle = [&] {
    ASSERT_TRUE(reg->UpdateRecentKernel([](uint32_t) -> uint32_t { return 0; }).ok());
    ASSERT_EQ(reg->RecentKernel(), 0u);
  };
  decay_to_idle();
  LimitedDevice(reg, nullptr, &ordinal);
  EXPECT_EQ(reg->RecentKernel(), region::kRecentKernelOnLaunch);
  // The loop decays it again; of the next three launches the first says so at once, with
  // itself as the one launch not yet counted, and the other two wait for a later flush.
  decay_to_idle();
  const uint64_t before = launches();
  for (int i = 0; i < 3; ++i) LimitedDevice(reg, nullptr, &ordinal);
  EXPECT_EQ(reg->RecentKernel(), region::kRecentKernelOnLaunch);
  EXPECT_EQ(launches() - before, 1u);
}

TEST_F(PolicyTest, TheRegionHoldsTheDeviceWithTheLimit) {
  ASSERT_GE(RegionIndex(0), 0);
  EXPECT_EQ(LimitOf(0), kLimit);
  EXPECT_EQ(BooksFor(0), Books::kAccounted);
  EXPECT_EQ(BooksFor(5), Books::kNotAccounted) << "a device the region does not hold";
}

TEST_F(PolicyTest, LargeAllocationsAreChargedInWholeGranules) {
  const uint64_t before = Used();
  CUdeviceptr p = 0;
  ASSERT_EQ(Alloc(&p, 3ull << 20), CUDA_SUCCESS);
  EXPECT_EQ(Used() - before, 2 * kGranule);
  Free(p);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, SmallAllocationsShareOnePage) {
  const uint64_t before = Used();
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(Alloc(&a, 4096), CUDA_SUCCESS);
  EXPECT_EQ(Used() - before, kGranule);
  ASSERT_EQ(Alloc(&b, 4096), CUDA_SUCCESS);
  EXPECT_EQ(Used() - before, kGranule) << "the second shares the first's page";
  Free(a);
  EXPECT_EQ(Used() - before, kGranule);
  Free(b);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, PastTheLimitIsRefusedAndTheDriverIsNotAsked) {
  const uint64_t before = Used();
  CUdeviceptr p = 0;
  bool asked = false;
  CUresult r = AdmitAllocation(&p, kLimit + 1, UsageKind::kData, [&] {
    asked = true;
    return CUDA_SUCCESS;
  });
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(asked);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, AFailedDriverCallGivesTheReservationBack) {
  const uint64_t before = Used();
  CUdeviceptr p = 0;
  EXPECT_EQ(Alloc(&p, 8ull << 20, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Alloc(&p, 512, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, TheBudgetIsExactlyTheLimit) {
  const uint64_t before = Used();
  std::vector<CUdeviceptr> held;
  for (;;) {
    CUdeviceptr p = 0;
    if (Alloc(&p, kGranule) != CUDA_SUCCESS) break;
    held.push_back(p);
  }
  EXPECT_EQ(before + held.size() * kGranule, kLimit);
  for (CUdeviceptr p : held) Free(p);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, AnEndedContextReturnsWhatWasAllocatedInIt) {
  const uint64_t before = Used();
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(Alloc(&a, 8ull << 20), CUDA_SUCCESS);
  ASSERT_EQ(Alloc(&b, 1024), CUDA_SUCCESS);
  ContextEnded(g_current);
  EXPECT_EQ(Used(), before);
  // Freeing afterwards is the driver's business only: nothing is returned twice.
  Free(a);
  Free(b);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, WithoutACurrentContextTheDriverAnswers) {
  CUcontext saved = g_current;
  g_current = nullptr;
  CUdeviceptr p = 0;
  bool asked = false;
  CUresult r = AdmitAllocation(&p, 4096, UsageKind::kData, [&] {
    asked = true;
    return CUDA_ERROR_INVALID_CONTEXT;
  });
  g_current = saved;
  EXPECT_EQ(r, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_TRUE(asked);
}

}  // namespace
}  // namespace hami::vgpu
