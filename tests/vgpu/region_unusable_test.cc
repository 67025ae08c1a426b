// A configured shared region that cannot be used fails closed: every accounted allocation of
// the process is refused with CUDA_ERROR_OUT_OF_MEMORY (never a fresh budget of its own that
// would add to the container's), and it says so whatever LIBCUDA_LOG_LEVEL is. Only with no
// region configured and the default one unusable (a read-only /tmp) is the process held to
// its limits alone, in a private region in memory that its fork children share. Each test
// case is a process of its own (CTest runs them one by one).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/file.h"
#include "vgpu_fixture.h"
#include "vgpu_raw.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

region::PolicySpec OneGiB() {
  region::PolicySpec spec;
  spec.device_count = 2;
  spec.memory_limit[0] = spec.memory_limit[1] = kGiB;
  return spec;
}

// The process starts with the configured path already unusable; nothing it allocates is
// admitted, and the log says why at level 0.
void ExpectEverythingRefused(const std::string& why) {
  setenv("LIBCUDA_LOG_LEVEL", "0", 1);
  CapturedStderr err;
  ExpectNothingAdmitted();
  const std::string text = err.Take();
  EXPECT_THAT(text, HasSubstr(VgpuEnv::Get().region));
  EXPECT_THAT(text, HasSubstr(why));
  EXPECT_THAT(text, HasSubstr("the container's shared region cannot be used, so every "
                              "allocation this process makes on an accounted device is refused"));
  HAMI_RAW_CUDA(cuDevicePrimaryCtxRelease_v2)(0);
}

TEST(RegionUnusable, ASymlinkIsRefusedNotReplacedByAFreshBudget) {
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  const std::string real = env.dir.File("real.cache");
  const region::PolicySpec spec = OneGiB();
  ASSERT_TRUE(region::Region::Open(real, &spec, region::Create::kIfMissing, nullptr).ok());
  ASSERT_EQ(symlink(real.c_str(), env.region.c_str()), 0) << std::strerror(errno);
  ExpectEverythingRefused("symbolic link");
}

TEST(RegionUnusable, AFileThatIsNotARegionIsRefused) {
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  UniqueFd fd(open(env.region.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666));
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(WriteAll(fd.get(), std::string(1 << 20, 'q')).ok());
  ExpectEverythingRefused("not a shared region");
}

TEST(RegionUnusable, ATruncatedRegionIsRefused) {
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  const region::PolicySpec spec = OneGiB();
  ASSERT_TRUE(region::Region::Open(env.region, &spec, region::Create::kIfMissing, nullptr).ok());
  ASSERT_EQ(truncate(env.region.c_str(), off_t(sizeof(region::layout::File) / 2)), 0);
  ExpectEverythingRefused("bytes but its header says");
}

// No region configured and /tmp read-only: the default region cannot be made, and the
// process is held to its own limits in a private region in memory, which a fork child
// shares: together they never pass the limit.
TEST(RegionUnusable, WithNoRegionConfiguredAReadOnlyTmpGivesAPrivateRegionInMemory) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: makes /tmp read-only in a mount namespace";
  setenv("HAMI_SIM_CONTEXT_SIZE", "64m", 1);  // two contexts and the allocations below fit
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  unsetenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");  // read at the first CUDA call, below
  ASSERT_EQ(unshare(CLONE_NEWNS), 0) << std::strerror(errno);
  ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
  // /tmp read-only, but for the simulated GPU's state directory.
  ASSERT_EQ(mount("/tmp", "/tmp", nullptr, MS_BIND | MS_REC, nullptr), 0) << std::strerror(errno);
  const std::string sim_dir = env.dir.path();
  ASSERT_EQ(mount(sim_dir.c_str(), sim_dir.c_str(), nullptr, MS_BIND, nullptr), 0);
  ASSERT_EQ(mount(nullptr, "/tmp", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  ASSERT_NE(access("/tmp", W_OK), 0) << "/tmp is still writable";

  CapturedStderr err;
  StartPrimaryContext();
  const std::string text = err.Take();
  EXPECT_THAT(text, HasSubstr("enforced for it alone, in a private region"));
  CUdeviceptr mine = 0;
  ASSERT_EQ(cuMemAlloc_v2(&mine, 512 * kMiB), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 600 * kMiB), CUDA_ERROR_OUT_OF_MEMORY) << "the limit holds";
  pid_t child = fork();
  if (child == 0) {
    CUcontext c = nullptr;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(c) != CUDA_SUCCESS) {
      _exit(2);
    }
    CUdeviceptr q = 0;
    // The parent's 512 MiB is in the same budget.
    if (cuMemAlloc_v2(&q, 600 * kMiB) != CUDA_ERROR_OUT_OF_MEMORY) _exit(3);
    if (cuMemAlloc_v2(&q, 128 * kMiB) != CUDA_SUCCESS) _exit(4);
    _exit(0);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(cuMemFree_v2(mine), CUDA_SUCCESS);
  cuDevicePrimaryCtxRelease_v2(0);
}

}  // namespace
}  // namespace hami::testing
