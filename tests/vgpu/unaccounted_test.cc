// What interposition cannot stop is detected: memory allocated past libvgpu.so (a driver
// loaded with dlmopen, counters zeroed in the region) is found by the watcher's NVML
// cross-check, recorded in the region for `hami inspect` and said at every log level; with
// HAMI_UNACCOUNTED_POLICY=suspend the container's allocations are refused while it lasts. A
// region file replaced under a running process makes its next admissions fail closed. The
// simulated driver's NVML, which counts every byte whatever loaded it, is the judge. Each
// test case is a process of its own (CTest runs them one by one).
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/file.h"
#include "common/sanitizers.h"
#include "region/crosscheck.h"
#include "support/subprocess.h"
#include "vgpu_fixture.h"
#include "vgpu_raw.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;
// Two cross-check periods and a margin: the watcher's first check runs one period after the
// process joins, and it may have to take the lead first.
constexpr int kFindMs = 4 * int(region::kCrossCheckPeriodNs / 1'000'000) + 5000;

// A helper (hidden_alloc_lib.c) loaded with dlmopen into a link-map namespace of its own,
// with the driver it links: the preload does not reach that namespace, so nothing it does
// passes through libvgpu.
class HiddenDriver {
 public:
  HiddenDriver() {
    handle_ = dlmopen(LM_ID_NEWLM, HAMI_HIDDEN_ALLOC, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) return;
    alloc_ = reinterpret_cast<AllocFn>(dlsym(handle_, "hami_hidden_alloc"));
    free_ = reinterpret_cast<FreeFn>(dlsym(handle_, "hami_hidden_free"));
  }
  bool ok() const { return handle_ != nullptr && alloc_ != nullptr && free_ != nullptr; }
  std::string error() const { return handle_ == nullptr ? dlerror() : "a symbol is missing"; }
  // Allocates `bytes` on device 0, unseen by libvgpu; the driver's error otherwise.
  ::testing::AssertionResult Allocate(uint64_t bytes, CUdeviceptr* p) {
    if (int r = alloc_(bytes, p); r != CUDA_SUCCESS) {
      return ::testing::AssertionFailure() << "the hidden driver says " << r;
    }
    return ::testing::AssertionSuccess();
  }
  // Frees `p` and lets the hidden context go: nothing is left past libvgpu.
  bool Free(CUdeviceptr p) { return free_(p) == CUDA_SUCCESS; }

 private:
  using AllocFn = int (*)(unsigned long long, CUdeviceptr*);
  using FreeFn = int (*)(CUdeviceptr);
  void* handle_ = nullptr;
  AllocFn alloc_ = nullptr;
  FreeFn free_ = nullptr;
};

// A sanitizer's runtime cannot be loaded into a second link-map namespace, so under one the
// helper cannot be loaded: those tests say so and skip.
constexpr bool kSanitized = kThreadSanitizer || kAddressSanitizer;
#define SKIP_WHERE_DLMOPEN_CANNOT_LOAD()                                      \
  if (kSanitized)                                                             \
  GTEST_SKIP() << "a sanitizer build cannot load its runtime into a dlmopen " \
                  "namespace"

// This process's slot in `r`, or -1.
int OwnSlot(const region::Region& r) {
  for (const region::SlotView& s : r.Slots()) {
    if (s.pid == getpid()) return s.index;
  }
  return -1;
}

// Whether a 1 MiB allocation is refused within kFindMs (each one admitted meanwhile is freed):
// the watcher's finding reaches admission through no event the test can wait on.
bool RefusedInTime() {
  return PollUntil(
      [] {
        CUdeviceptr q = 0;
        if (cuMemAlloc_v2(&q, 1 * kMiB) != CUDA_SUCCESS) return true;
        cuMemFree_v2(q);
        return false;
      },
      kFindMs, 20'000);
}

// This process's slot as the region records it, once the cross-check has found a gap there
// (false when none was found in time).
bool WaitForGap(const region::Region& r, region::SlotView* found) {
  return PollUntil(
      [&] {
        for (const region::SlotView& s : r.Slots()) {
          if (s.pid == getpid() && s.unaccounted_bytes != 0) {
            *found = s;
            return true;
          }
        }
        return false;
      },
      kFindMs, 20'000);
}

TEST(Unaccounted, ADriverLoadedWithDlmopenIsFoundAndReported) {
  SKIP_WHERE_DLMOPEN_CANNOT_LOAD();
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  setenv("LIBCUDA_LOG_LEVEL", "0", 1);  // said whatever the level
  CapturedStderr err;
  StartPrimaryContext();
  HiddenDriver hidden;
  ASSERT_TRUE(hidden.ok()) << hidden.error();
  CUdeviceptr p = 0;
  ASSERT_TRUE(hidden.Allocate(2048 * kMiB, &p)) << "past libvgpu, the 1 GiB limit cannot refuse";

  auto r = OpenRegionReadOnly(env.region);
  ASSERT_NE(r, nullptr);
  region::SlotView slot{};
  ASSERT_TRUE(WaitForGap(*r, &slot)) << "no gap was recorded within " << kFindMs << " ms";
  EXPECT_EQ(slot.unaccounted_device, 0);
  EXPECT_GE(slot.unaccounted_bytes, 2048 * kMiB) << "the hidden allocation and its context";
  EXPECT_EQ(slot.host_pid, getpid());
  EXPECT_GE(r->CrossCheck(0).unaccounted_bytes, 2048 * kMiB);
  EXPECT_EQ(r->CrossCheck(0).host_pid, getpid());

  bool reported = false;
  for (const region::Inconsistency& i : r->Check()) {
    if (i.kind != region::Inconsistency::Kind::kUnaccounted) continue;
    reported = true;
    EXPECT_EQ(i.device, 0);
    EXPECT_THAT(i.message, HasSubstr("host pid " + std::to_string(getpid())));
    EXPECT_THAT(i.message,
                HasSubstr(std::to_string(slot.unaccounted_bytes) + " bytes) unaccounted"));
  }
  EXPECT_TRUE(reported) << "Check() (hami inspect) names the gap";
  const std::string text = err.Take();
  EXPECT_THAT(text, HasSubstr("MiB were allocated past libvgpu"));
  EXPECT_THAT(text, HasSubstr("host pid " + std::to_string(getpid())));

  // The default policy only reports: libvgpu's own allocations under the limit go on.
  CUdeviceptr q = 0;
  EXPECT_EQ(cuMemAlloc_v2(&q, 64 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
  EXPECT_TRUE(hidden.Free(p));
}

TEST(Unaccounted, CountersZeroedInTheRegionAreFound) {
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  StartPrimaryContext();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 512 * kMiB), CUDA_SUCCESS);
  // What a tenant can do to the file it can write: zero its own books.
  auto rw = region::Region::Open(env.region, nullptr, region::Create::kNever, nullptr);
  ASSERT_TRUE(rw.ok()) << rw.error().message();
  auto& file = const_cast<region::layout::File&>((*rw)->file());
  const int mine = OwnSlot(**rw);
  ASSERT_GE(mine, 0);
  for (auto& u : file.slots[mine].usage[0]) u.store(0);
  file.devices[0].used_bytes.store(0);

  region::SlotView slot{};
  ASSERT_TRUE(WaitForGap(**rw, &slot));
  EXPECT_GE(slot.unaccounted_bytes, 512 * kMiB);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST(Unaccounted, TheSuspendPolicyRefusesAllocationsWhileTheGapLasts) {
  SKIP_WHERE_DLMOPEN_CANNOT_LOAD();
  setenv("HAMI_UNACCOUNTED_POLICY", "suspend", 1);
  VgpuEnv& env = VgpuEnv::Get("4g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  StartPrimaryContext();
  HiddenDriver hidden;
  ASSERT_TRUE(hidden.ok()) << hidden.error();
  CUdeviceptr p = 0;
  ASSERT_TRUE(hidden.Allocate(1024 * kMiB, &p));
  auto r = OpenRegionReadOnly(env.region);
  ASSERT_NE(r, nullptr);
  region::SlotView slot{};
  ASSERT_TRUE(WaitForGap(*r, &slot));

  CapturedStderr err;
  CUdeviceptr q = 0;
  EXPECT_EQ(cuMemAlloc_v2(&q, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY)
      << "under the limit by the books, but the gap holds the container back";
  EXPECT_THAT(err.Take(), HasSubstr("HAMI_UNACCOUNTED_POLICY=suspend"));

  // The hidden memory given back: the next check clears the gap, and allocations go on.
  ASSERT_TRUE(hidden.Free(p));
  ASSERT_TRUE(PollUntil([&] { return r->CrossCheck(0).unaccounted_bytes == 0; }, kFindMs, 20'000))
      << "the gap was not cleared";
  EXPECT_EQ(cuMemAlloc_v2(&q, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
}

TEST(Unaccounted, ARegionFileReplacedUnderTheProcessFailsClosed) {
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  setenv("LIBCUDA_LOG_LEVEL", "0", 1);
  StartPrimaryContext();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 512 * kMiB), CUDA_SUCCESS);
  // A fresh region with an empty budget put at the path by a rename over it, as a tenant
  // would to start new processes on a clean slate.
  const std::string fresh = env.dir.File("fresh.cache");
  region::PolicySpec spec;
  spec.device_count = 2;
  spec.memory_limit[0] = spec.memory_limit[1] = 1ull << 30;
  ASSERT_TRUE(region::Region::Open(fresh, &spec, region::Create::kIfMissing, nullptr).ok());
  CapturedStderr err;
  ASSERT_EQ(rename(fresh.c_str(), env.region.c_str()), 0) << std::strerror(errno);

  // From the watcher's next look on (inotify wakes it), nothing more is admitted.
  CUdeviceptr q = 0;
  ASSERT_TRUE(RefusedInTime())
      << "allocations are still admitted after the region file was replaced";
  EXPECT_EQ(cuMemAlloc_v2(&q, 4 << 10), CUDA_ERROR_OUT_OF_MEMORY);
  const std::string text = err.Take();
  EXPECT_THAT(text, HasSubstr("another file stands at the path now"));
  EXPECT_THAT(text, HasSubstr("every allocation it makes on an accounted device is refused"));
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS) << "what it holds can still be given back";
}

TEST(Unaccounted, ALimitEditedInTheFileFreesNothingAndIsRecorded) {
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  StartPrimaryContext();
  auto rw = region::Region::Open(env.region, nullptr, region::Create::kNever, nullptr);
  ASSERT_TRUE(rw.ok()) << rw.error().message();
  // One store into the mapped file, as a tenant could: the limit reads "unlimited".
  const_cast<region::layout::File&>((*rw)->file()).policy.memory_limit[0].store(0);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 1100 * kMiB), CUDA_ERROR_OUT_OF_MEMORY)
      << "the process holds to the limit it was given";
  // Its watcher records the edit for hami inspect (a policy conflict: exit 3).
  auto conflict = [&] {
    for (const region::Inconsistency& i : (*rw)->Check()) {
      if (i.kind == region::Inconsistency::Kind::kPolicyConflict &&
          i.message.find("memory_limit[0] = 1073741824 bytes but the region says unlimited") !=
              std::string::npos &&
          i.message.find("pid " + std::to_string(getpid())) != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(PollUntil(conflict, kFindMs, 20'000)) << "the edit was not recorded";
}

TEST(Unaccounted, ASlotFreedByAnEditOfTheFileFailsItsProcessClosed) {
  VgpuEnv& env = VgpuEnv::Get("1g");
  ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
  setenv("LIBCUDA_LOG_LEVEL", "0", 1);
  StartPrimaryContext();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 512 * kMiB), CUDA_SUCCESS);
  auto rw = region::Region::Open(env.region, nullptr, region::Create::kNever, nullptr);
  ASSERT_TRUE(rw.ok()) << rw.error().message();
  auto& file = const_cast<region::layout::File&>((*rw)->file());
  const int mine = OwnSlot(**rw);
  ASSERT_GE(mine, 0);
  CapturedStderr err;
  // What a tenant could write to drop a process's books: its slot marked free.
  file.slots[mine].state.store(uint32_t(region::layout::SlotState::kFree));
  ASSERT_TRUE(RefusedInTime())
      << "allocations are still admitted after the process's slot was freed";
  EXPECT_THAT(err.Take(), HasSubstr("this process's slot " + std::to_string(mine) + " was freed"));
}

}  // namespace
}  // namespace hami::testing
