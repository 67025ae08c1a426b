// The 1,025th process: with every slot of the container's region held by a live owner, a
// process that starts cannot register. Every allocation it makes on an accounted device is
// refused at once with CUDA_ERROR_OUT_OF_MEMORY, its contexts first: it never waits for a
// slot (the test's own timeout is the hang detector) and never runs unaccounted.
#include <vector>

#include "common/proc.h"
#include "vgpu_fixture.h"
#include "vgpu_raw.h"

namespace hami::testing {
namespace {

TEST(RegionFull, EveryAccountedAllocationIsRefusedWithoutWaiting) {
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  if (!RaiseOpenFileLimit(region::kMaxSlots + 64)) {
    GTEST_SKIP() << "RLIMIT_NOFILE's hard limit is below " << region::kMaxSlots + 64
                 << ": one process cannot hold every slot";
  }
  region::PolicySpec spec;
  spec.device_count = 2;
  spec.memory_limit[0] = spec.memory_limit[1] = 1ull << 30;
  std::vector<std::unique_ptr<region::Region>> holders;
  for (int i = 0; i < region::kMaxSlots; ++i) {
    auto r = region::Region::Open(env.region, &spec, region::Create::kIfMissing, nullptr);
    ASSERT_TRUE(r.ok()) << r.error().message();
    auto slot = (*r)->Register();
    ASSERT_TRUE(slot.ok()) << "holder " << i << ": " << slot.error().message();
    holders.push_back(std::move(r).value());
  }
  auto view = OpenRegionReadOnly(env.region);
  ASSERT_NE(view, nullptr);
  const uint64_t used_before = view->UsedBytes(0);

  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  // A context is memory too: refused, and left undone.
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
  // A context libvgpu did not make (the driver's own, past the wrappers) gets no further.
  ASSERT_TRUE(RawPrimaryContext());

  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 4 << 10), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc_v2(&p, 8 << 20), CUDA_ERROR_OUT_OF_MEMORY);
  size_t pitch = 0;
  EXPECT_EQ(cuMemAllocPitch_v2(&p, &pitch, 4096, 64, 4), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocManaged(&p, 8 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocAsync(&p, 8 << 20, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 4096;
  desc.Height = 1024;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray array = nullptr;
  EXPECT_EQ(cuArrayCreate_v2(&array, &desc), CUDA_ERROR_OUT_OF_MEMORY);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMemCreate(&handle, 2 << 20, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);

  // Nothing was charged, and the slots are still exactly the holders'.
  EXPECT_EQ(view->UsedBytes(0), used_before);
  int live = 0;
  for (const region::SlotView& s : view->Slots())
    live += s.state == region::layout::SlotState::kLive;
  EXPECT_EQ(live, region::kMaxSlots);
  // A slot given up later does not change that: the process was refused for its life.
  holders.pop_back();
  EXPECT_EQ(cuMemAlloc_v2(&p, 4 << 10), CUDA_ERROR_OUT_OF_MEMORY);
  HAMI_RAW_CUDA(cuDevicePrimaryCtxRelease_v2)(0);
}

}  // namespace
}  // namespace hami::testing
