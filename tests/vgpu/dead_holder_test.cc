// A process killed while it holds device 0's mutex in the region (SIGKILL inside Reserve)
// does not stop anyone else: the next allocation of a process under libvgpu repairs the
// mutex (robust, EOWNERDEAD) and goes on, every family, small and large; the dead process's
// reservation is swept, not left charged.
#include <signal.h>

#include "support/subprocess.h"
#include "vgpu_fixture.h"

namespace hami::testing {
namespace {

class DeadHolder : public VgpuTest {};

TEST_F(DeadHolder, AllocationsRepairTheMutexAndProceed) {
  VgpuEnv& env = VgpuEnv::Get();
  // Registered by the fixture's cuInit: the region exists. The worker joins with no limit
  // of its own (a stricter one would lower the container's).
  Subprocess worker(
      {TestProgram("region_worker"), env.region, "limit", "0", "open", "register", "reserve", "0",
       "64m"},
      {{"HAMI_KILL_POINT", "region.reserve.begun"}});
  ASSERT_EQ(worker.Wait(), 128 + SIGKILL) << "the worker was to die holding device 0's mutex";

  CUdeviceptr small = 0, large = 0, pitched = 0, managed = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAlloc_v2(&small, 4 << 10), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&large, 8 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocPitch_v2(&pitched, &pitch, 4096, 64, 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&managed, 8 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cuMemCreate(&handle, 2 << 20, &prop, 0), CUDA_SUCCESS);

  auto view = OpenRegionReadOnly(env.region);
  ASSERT_NE(view, nullptr);
  // Only this process's memory is charged: the worker died before its reservation counted.
  uint64_t ours = 0;
  for (const region::SlotView& s : view->Slots()) {
    if (s.state == region::layout::SlotState::kLive && s.alive) {
      EXPECT_EQ(s.pid, getpid()) << "slot " << s.index;
      ours += s.used_bytes[0];
    } else if (s.state == region::layout::SlotState::kLive) {
      EXPECT_EQ(s.used_bytes[0], 0u) << "the dead worker's slot " << s.index;
    }
  }
  EXPECT_EQ(view->UsedBytes(0), ours);

  EXPECT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(managed), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(pitched), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(large), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(small), CUDA_SUCCESS);
}

}  // namespace
}  // namespace hami::testing
