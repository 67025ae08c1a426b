// Contexts are admitted like any memory under libvgpu.so: a context the container's budget
// cannot hold fails with CUDA_ERROR_OUT_OF_MEMORY (as a full GPU answers) and leaves nothing
// behind, however many a process creates and however many processes create them. The
// simulated driver's own count of the process's memory is the judge. Each test case is a
// process of its own (CTest runs them one by one).
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "vgpu_fixture.h"
#include "vgpu_raw.h"

namespace hami::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// What the simulated driver counts for process `pid` on device 0 (through its NVML, past
// libvgpu's filtering): the memory it really holds.
uint64_t DriverCountedBytes(pid_t pid) {
  auto init = HAMI_RAW_NVML(nvmlInit_v2);
  auto handle = HAMI_RAW_NVML(nvmlDeviceGetHandleByIndex_v2);
  auto list = HAMI_RAW_NVML(nvmlDeviceGetComputeRunningProcesses_v3);
  nvmlDevice_t h = nullptr;
  if (init == nullptr || handle == nullptr || list == nullptr || init() != NVML_SUCCESS ||
      handle(0, &h) != NVML_SUCCESS) {
    ADD_FAILURE() << "the simulated NVML is not reachable past libvgpu";
    return 0;
  }
  nvmlProcessInfo_t infos[64];
  unsigned n = 64;
  if (list(h, &n, infos) != NVML_SUCCESS) return 0;
  for (unsigned i = 0; i < n; ++i) {
    if (infos[i].pid == unsigned(pid)) return infos[i].usedGpuMemory;
  }
  return 0;
}

// 40 contexts under a 1 GiB budget held 20,000 MiB before contexts were admitted.
TEST(Contexts, OneProcessCannotPassItsBudgetWithContexts) {
  setenv("HAMI_SIM_CONTEXT_SIZE", "300m", 1);
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  StartPrimaryContext();
  auto view = OpenRegionReadOnly(env.region);
  ASSERT_NE(view, nullptr);
  const uint64_t one = view->UsedBytes(0);
  ASSERT_GT(one, 0u) << "the primary context is charged";
  std::vector<CUcontext> made;
  CUresult last = CUDA_SUCCESS;
  for (int i = 0; i < 40 && last == CUDA_SUCCESS; ++i) {
    CUcontext c = nullptr;
    last = cuCtxCreate_v4(&c, nullptr, 0, 0);
    if (last == CUDA_SUCCESS) made.push_back(c);
  }
  EXPECT_EQ(last, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(made.size(), size_t(kGiB / one) - 1) << "as many as fit, and no more";
  EXPECT_LE(view->UsedBytes(0), kGiB);
  EXPECT_LE(DriverCountedBytes(getpid()), kGiB) << "the driver holds no more than the budget";
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, kGiB);
  EXPECT_LT(free, one);
  for (CUcontext c : made) EXPECT_EQ(cuCtxDestroy_v2(c), CUDA_SUCCESS);
  EXPECT_EQ(view->UsedBytes(0), one);
  cuDevicePrimaryCtxRelease_v2(0);
}

// Two processes whose contexts alone exceed the budget: the second one's is refused.
TEST(Contexts, TwoProcessesWhoseContextsExceedTheBudgetDoNotBothStart) {
  setenv("HAMI_SIM_CONTEXT_SIZE", "600m", 1);
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  StartPrimaryContext();
  pid_t child = fork();
  if (child == 0) {
    CUcontext c = nullptr;
    if (cuInit(0) != CUDA_SUCCESS) _exit(2);
    const CUresult primary = cuDevicePrimaryCtxRetain(&c, 0);
    const CUresult created = cuCtxCreate_v4(&c, nullptr, 0, 0);
    _exit(primary == CUDA_ERROR_OUT_OF_MEMORY && created == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 3);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the second process's contexts were not both refused (status " << status << ")";
  auto view = OpenRegionReadOnly(env.region);
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view->UsedBytes(0), 600 * kMiB) << "only the first process's context is charged";
  cuDevicePrimaryCtxRelease_v2(0);
}

}  // namespace
}  // namespace hami::testing
