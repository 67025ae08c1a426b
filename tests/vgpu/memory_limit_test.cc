// The memory limit on the direct route, and the views, under libvgpu.so.
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "vgpu_fixture.h"

namespace hami::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

using MemoryLimitTest = VgpuTest;

TEST_F(MemoryLimitTest, TheContainerSeesItsLimitAsTheDevicesMemory) {
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 2 * kGiB);
  EXPECT_LT(free, 2 * kGiB) << "the context's own memory is counted";
  size_t device_total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&device_total, 0), CUDA_SUCCESS);
  EXPECT_EQ(device_total, 2 * kGiB);
}

TEST_F(MemoryLimitTest, AllocationsPastTheLimitFailWithOutOfMemoryAndLeakNothing) {
  uint64_t before = FreeBytes();
  std::vector<CUdeviceptr> held;
  CUdeviceptr p;
  while (cuMemAlloc_v2(&p, 64 * kMiB) == CUDA_SUCCESS) held.push_back(p);
  EXPECT_EQ(cuMemAlloc_v2(&p, 64 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(held.size(), before / (64 * kMiB));
  EXPECT_LT(FreeBytes(), 64 * kMiB);
  for (CUdeviceptr q : held) EXPECT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
}

// Code a lazily loaded library makes ready in a context is the driver's before it can be
// admitted: past the limit it is recorded all the same (the budget shows the truth), and
// the call that made it ready fails with CUDA_ERROR_OUT_OF_MEMORY.
TEST_F(MemoryLimitTest, CodeMadeReadyPastTheLimitIsRecordedAndItsLookupRefused) {
  const uint64_t before = FreeBytes();
  std::vector<CUdeviceptr> held;
  CUdeviceptr p;
  while (cuMemAlloc_v2(&p, 2 * kMiB) == CUDA_SUCCESS) held.push_back(p);
  ASSERT_LT(FreeBytes(), 2 * kMiB);
  CUlibrary lib = nullptr;
  ASSERT_EQ(cuLibraryLoadData(&lib, "hami-sim-module\nkernel busy\n", nullptr, nullptr, 0, nullptr,
                              nullptr, 0),
            CUDA_SUCCESS)
      << "loaded lazily: it takes nothing yet";
  CUkernel k = nullptr;
  EXPECT_EQ(cuLibraryGetKernel(&k, lib, "busy"), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(FreeBytes(), 0u) << "what the code took is recorded: the budget is spent";
  for (CUdeviceptr q : held) EXPECT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
  const uint64_t code = before - FreeBytes();
  EXPECT_GE(code, 2 * kMiB) << "still held by the library, and charged";
  EXPECT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(MemoryLimitTest, FreeingAPointerWeDoNotKnowIsTheDriversAnswer) {
  EXPECT_EQ(cuMemFree_v2(CUdeviceptr(0x1234)), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryLimitTest, NullArgumentsGetTheDriversErrors) {
  EXPECT_EQ(cuMemAlloc_v2(nullptr, 1024), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemGetInfo_v2(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceTotalMem_v2(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryLimitTest, TwoProcessesShareOneBudget) {
  uint64_t before = FreeBytes();
  CUdeviceptr mine;
  ASSERT_EQ(cuMemAlloc_v2(&mine, 256 * kMiB), CUDA_SUCCESS);
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  pid_t child = fork();
  if (child == 0) {
    // A new process: it initializes afresh and joins the same region.
    close(up[0]);
    close(down[1]);
    CUcontext c;
    CUdeviceptr p;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(c) != CUDA_SUCCESS) {
      _exit(2);
    }
    size_t free = 0, total = 0;
    cuMemGetInfo_v2(&free, &total);
    // The parent's 256 MiB and both contexts are already counted.
    if (cuMemAlloc_v2(&p, free + 64 * kMiB) != CUDA_ERROR_OUT_OF_MEMORY) _exit(3);
    if (cuMemAlloc_v2(&p, 128 * kMiB) != CUDA_SUCCESS) _exit(4);
    char go = 0;
    if (write(up[1], &go, 1) != 1 || read(down[0], &go, 1) < 0) _exit(5);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  char go;
  if (read(up[0], &go, 1) != 1) {
    int st = 0;
    waitpid(child, &st, 0);
    FAIL() << "the child failed at step " << WEXITSTATUS(st);
  }
  EXPECT_LE(FreeBytes(), before - 384 * kMiB) << "the child's memory counts here too";
  close(down[1]);
  close(up[0]);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(cuMemFree_v2(mine), CUDA_SUCCESS);
  // The child left with _exit (no exit handlers, as if killed): its slot is reclaimed.
  EXPECT_EQ(FreeBytesAfterSweep(), before) << "the child's exit returned its memory";
}

}  // namespace
}  // namespace hami::testing
