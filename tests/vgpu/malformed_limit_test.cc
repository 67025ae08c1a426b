// A memory limit that cannot be read fails closed under libvgpu.so: the device gets a zero
// budget (every accounted allocation refused with CUDA_ERROR_OUT_OF_MEMORY, as a full GPU
// would refuse it), the process says so on stderr whatever LIBCUDA_LOG_LEVEL is, and a
// region made with a looser limit does not loosen it. Each test case is a process of its
// own (CTest runs them one by one), started with CUDA_DEVICE_MEMORY_LIMIT='3000 m'.
#include <gmock/gmock.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "vgpu_fixture.h"
#include "vgpu_raw.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;
constexpr char kMalformed[] = "3000 m";

TEST(MalformedLimit, GivesAZeroBudgetAndSaysSoEvenWithTheLogOff) {
  setenv("LIBCUDA_LOG_LEVEL", "0", 1);
  VgpuEnv::Get(kMalformed);
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  CapturedStderr err;
  // Not even a context fits a zero budget, as on a full GPU.
  ExpectNothingAdmitted();
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_LE(total, region::layout::kZeroBudgetBytes);
  EXPECT_LE(free, region::layout::kZeroBudgetBytes);
  const std::string text = err.Take();
  EXPECT_THAT(text, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT='3000 m'"));
  EXPECT_THAT(text, HasSubstr("no allocation is admitted (a zero memory budget)"));
  // The region it made carries the zero budget, for every later process and for inspect.
  auto view = OpenRegionReadOnly(VgpuEnv::Get().region);
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view->MemoryLimit(0), region::layout::kZeroBudgetBytes);
  EXPECT_EQ(view->UsedBytes(0), 0u) << "the refused context left nothing charged";
  HAMI_RAW_CUDA(cuDevicePrimaryCtxRelease_v2)(0);
}

// The container's region was made by a process that read its limit (1 GiB); this one could
// not read its own. It holds to the stricter: nothing.
TEST(MalformedLimit, ARegionWithALooserLimitDoesNotLoosenIt) {
  VgpuEnv& env = VgpuEnv::Get(kMalformed);
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  region::PolicySpec spec;
  spec.device_count = 2;
  spec.memory_limit[0] = spec.memory_limit[1] = kGiB;
  auto made = region::Region::Open(env.region, &spec, region::Create::kIfMissing, nullptr);
  ASSERT_TRUE(made.ok()) << made.error().message();
  ExpectNothingAdmitted();
  EXPECT_EQ((*made)->MemoryLimit(0), kGiB) << "the region's own limit is left as it was";
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_LE(free, region::layout::kZeroBudgetBytes);
  HAMI_RAW_CUDA(cuDevicePrimaryCtxRelease_v2)(0);
}

}  // namespace
}  // namespace hami::testing
