// CUDA_OVERSUBSCRIBE under libvgpu.so on the simulated GPU: an allocation the device budget
// refuses is served from host memory mapped into the device's address space, usable as
// device memory, counted in the region as spilled (never as device memory), within the host
// budget (CUDA_OVERSUBSCRIBE_HOST_LIMIT), given back when freed; both budgets spent, and
// oversubscription off, it fails with CUDA_ERROR_OUT_OF_MEMORY exactly as without it; a host
// budget that cannot be read allows no host memory and says so naming the variable. Each
// test case is a process of its own (CTest runs them one by one): the environment is set
// before the first CUDA call.
#include <gmock/gmock.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "vgpu_fixture.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// Sets the oversubscription variables (a null host budget: unset), then the fixture's
// machine (two devices, 2 GiB each) and region, then starts CUDA on device 0.
void Start(const char* oversubscribe, const char* host_limit) {
  if (oversubscribe != nullptr) setenv("CUDA_OVERSUBSCRIBE", oversubscribe, 1);
  if (host_limit != nullptr) setenv("CUDA_OVERSUBSCRIBE_HOST_LIMIT", host_limit, 1);
  VgpuEnv::Get();
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  StartPrimaryContext();
}

// This process's slot: its bytes on device 0, served from host memory, imported.
struct Books {
  uint64_t device = 0;
  uint64_t spilled = 0;
  uint64_t imported = 0;
};
Books MyBooks() {
  Books b;
  auto reg = OpenRegionReadOnly(VgpuEnv::Get().region);
  if (reg == nullptr) return b;
  for (const region::SlotView& s : reg->Slots()) {
    if (s.pid != getpid() || !s.alive) continue;
    b.device = s.used_bytes[0];
    b.spilled = s.host_bytes;
    b.imported = s.imported_bytes;
  }
  return b;
}

region::Region::HostUse ContainerHost() {
  auto reg = OpenRegionReadOnly(VgpuEnv::Get().region);
  return reg == nullptr ? region::Region::HostUse{} : reg->Host();
}

// Takes what is left of the device budget, in one allocation.
CUdeviceptr FillTheDeviceBudget() {
  CUdeviceptr p = 0;
  const uint64_t free = VgpuTest::FreeBytes();
  EXPECT_EQ(cuMemAlloc_v2(&p, free), CUDA_SUCCESS);
  EXPECT_EQ(VgpuTest::FreeBytes(), 0u);
  return p;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 7 + seed);
  return v;
}

TEST(Oversubscribe, AnAllocationPastTheDeviceBudgetIsServedFromHostMemoryAndWorks) {
  Start("true", "1g");
  CUdeviceptr full = FillTheDeviceBudget();
  const Books before = MyBooks();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 256 * kMiB), CUDA_SUCCESS);
  ASSERT_NE(p, 0u);
  // Counted as spilled, not as device memory; the device's view is unchanged.
  EXPECT_EQ(MyBooks().device, before.device);
  EXPECT_EQ(MyBooks().spilled, 256 * kMiB);
  EXPECT_EQ(VgpuTest::FreeBytes(), 0u);
  EXPECT_EQ(ContainerHost().spilled_bytes, 256 * kMiB);
  EXPECT_EQ(ContainerHost().limit_bytes, kGiB);
  // Usable as device memory: copies in and out, device to device, a set.
  const std::vector<uint8_t> data = Pattern(256 * kMiB, 3);
  ASSERT_EQ(cuMemcpyHtoD_v2(p, data.data(), data.size()), CUDA_SUCCESS);
  std::vector<uint8_t> back(data.size());
  ASSERT_EQ(cuMemcpyDtoH_v2(back.data(), p, back.size()), CUDA_SUCCESS);
  EXPECT_TRUE(back == data) << "the data round-trips";
  ASSERT_EQ(cuMemcpyDtoD_v2(full, p, 4 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(p, 0x11, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(back.data(), full, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(back.data(), data.data(), 4 * kMiB), 0);
  // Freed, the host budget comes back and the device's is untouched.
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(MyBooks().spilled, 0u);
  EXPECT_EQ(MyBooks().device, before.device);
  EXPECT_EQ(ContainerHost().peak_bytes, 256 * kMiB);
  // Device memory freed is the device's again: the next allocation is on the device.
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&p, 64 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(MyBooks().spilled, 0u);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

// The per-thread default stream's form, which cuda.h declares only for a build that asks for
// that stream everywhere (cudart resolves it by name).
extern "C" CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);

// Freed in stream order (cuMemFreeAsync, as cudaFreeAsync does for cudaMalloc memory): the free
// waits for the stream and then gives the host memory and its budget back, on the legacy and
// the per-thread default streams and on a stream of the application's own.
TEST(Oversubscribe, ASpilledPointerFreedInStreamOrderGivesItsHostBudgetBack) {
  Start("true", "1g");
  CUdeviceptr full = FillTheDeviceBudget();
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  for (int way = 0; way < 3; ++way) {
    SCOPED_TRACE(way == 0 ? "own stream" : way == 1 ? "legacy default stream" : "per-thread");
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAlloc_v2(&p, 64 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(MyBooks().spilled, 64 * kMiB);
    ASSERT_EQ(cuMemsetD8Async(p, 0x5a, 64 * kMiB, way == 0 ? stream : nullptr), CUDA_SUCCESS);
    const CUresult freed = way == 0   ? cuMemFreeAsync(p, stream)
                           : way == 1 ? cuMemFreeAsync(p, nullptr)
                                      : cuMemFreeAsync_ptsz(p, nullptr);
    EXPECT_EQ(freed, CUDA_SUCCESS);
    EXPECT_EQ(MyBooks().spilled, 0u);
    EXPECT_EQ(ContainerHost().spilled_bytes, 0u);
    EXPECT_EQ(cuMemFreeAsync(p, stream), CUDA_ERROR_INVALID_VALUE) << "freed once only";
  }
  ASSERT_EQ(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
}

TEST(Oversubscribe, APitchedAllocationSpillsWithAPitchTheApplicationCanUse) {
  Start("true", "1g");
  CUdeviceptr full = FillTheDeviceBudget();
  CUdeviceptr p = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 1024, 4), CUDA_SUCCESS);
  EXPECT_GE(pitch, 1000u);
  EXPECT_EQ(pitch % 512, 0u);
  EXPECT_GE(MyBooks().spilled, pitch * 1024);
  std::vector<uint8_t> row = Pattern(1000, 9), back(1000);
  ASSERT_EQ(cuMemcpyHtoD_v2(p + 1023 * pitch, row.data(), row.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(back.data(), p + 1023 * pitch, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, row);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(MyBooks().spilled, 0u);
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
}

TEST(Oversubscribe, BothBudgetsSpentIsOutOfMemoryAndAFreeMakesRoomAgain) {
  Start("true", "64m");
  CUdeviceptr full = FillTheDeviceBudget();
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 48 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&b, 32 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(MyBooks().spilled, 48 * kMiB) << "a refusal leaves nothing behind";
  ASSERT_EQ(cuMemAlloc_v2(&b, 16 * kMiB), CUDA_SUCCESS) << "exactly what is left fits";
  CUdeviceptr c = 0;
  EXPECT_EQ(cuMemAlloc_v2(&c, 4096), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(ContainerHost().rejected, 2u);
  ASSERT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&c, 32 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(MyBooks().spilled, 48 * kMiB);
  ASSERT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(c), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
  EXPECT_EQ(MyBooks().spilled, 0u);
}

TEST(Oversubscribe, OffTheDeviceLimitRefusesExactlyAsBefore) {
  Start(nullptr, "1g");
  const uint64_t free = VgpuTest::FreeBytes();
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, free + 1), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr full = FillTheDeviceBudget();
  EXPECT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY);
  size_t pitch = 0;
  EXPECT_EQ(cuMemAllocPitch_v2(&p, &pitch, 1024, 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(MyBooks().spilled, 0u);
  EXPECT_EQ(ContainerHost().limit_bytes, 0u) << "no host budget without oversubscription";
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
}

// The families host memory cannot serve keep failing at the device budget.
TEST(Oversubscribe, ManagedStreamOrderedAndVirtualMemoryAreNotServedFromTheHost) {
  Start("true", "1g");
  CUdeviceptr full = FillTheDeviceBudget();
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocManaged(&p, 8 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocAsync(&p, 8 * kMiB, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, 8 * kMiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(MyBooks().spilled, 0u);
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
}

// Unset, the host budget is the device limits added up: 2 GiB on each of two devices.
TEST(Oversubscribe, UnsetTheHostBudgetIsTheDeviceLimitsAddedUp) {
  Start("true", nullptr);
  EXPECT_EQ(ContainerHost().limit_bytes, 4 * kGiB);
}

// What the driver frees with a context gives its host budget back.
TEST(Oversubscribe, AContextsEndGivesBackItsSpilledMemory) {
  Start("true", "1g");
  CUdeviceptr full = FillTheDeviceBudget();
  CUcontext primary = nullptr, ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&primary), CUDA_SUCCESS);
  // A second context needs device memory of its own: make room for it first.
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0, 0), CUDA_SUCCESS);
  full = FillTheDeviceBudget();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 32 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(MyBooks().spilled, 32 * kMiB);
  ASSERT_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(MyBooks().spilled, 0u);
  ASSERT_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
}

TEST(Oversubscribe, AHostBudgetThatCannotBeReadAllowsNoHostMemoryAndSaysSoEvenWithTheLogOff) {
  setenv("LIBCUDA_LOG_LEVEL", "0", 1);
  CapturedStderr err;
  Start("true", "1.5g");
  const std::string text = err.Take();
  EXPECT_THAT(text, HasSubstr("CUDA_OVERSUBSCRIBE_HOST_LIMIT='1.5g'"));
  EXPECT_THAT(text, HasSubstr("nothing is served from host memory"));
  CUdeviceptr full = FillTheDeviceBudget();
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(MyBooks().spilled, 0u);
  EXPECT_EQ(ContainerHost().limit_bytes, 0u) << "the region it made allows none either";
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
}

// A region made without oversubscription stands: a process that asks for it alone gets none.
TEST(Oversubscribe, ARegionMadeWithoutItIsNotOversubscribedByOneProcess) {
  VgpuEnv& env = VgpuEnv::Get();
  region::PolicySpec spec;
  spec.device_count = 2;
  spec.memory_limit[0] = spec.memory_limit[1] = 2 * kGiB;
  auto made = region::Region::Open(env.region, &spec, region::Create::kIfMissing, nullptr);
  ASSERT_TRUE(made.ok()) << made.error().message();
  Start("true", "1g");
  CUdeviceptr full = FillTheDeviceBudget();
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(MyBooks().spilled, 0u);
  ASSERT_EQ(cuMemFree_v2(full), CUDA_SUCCESS);
}

}  // namespace
}  // namespace hami::testing
