// The identity's retry schedule in-process, on an injected clock: a failed attempt is retried
// once its backoff has passed and not before, the backoff doubles from 1 s to 60 s, and a
// retry that finds the host PID settles it. The tiers are the real ones: the procfs tier reads
// a root that the test points at a plain directory (not a procfs: it fails) and later at this
// process's /proc (it answers); the probe has no NVML here and fails. Nothing sleeps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/temp_dir.h"
#include "region/region.h"
#include "vgpu/accounting.h"
#include "vgpu/identity.h"
#include "vgpu/runtime.h"
#include "vgpu/test_state.h"

namespace hami::vgpu {
namespace {

using region::IdentityReason;
using region::IdentitySource;
using region::IdentityTier;

// The injected clock: far ahead of CLOCK_MONOTONIC, so that no caller on the real clock (the
// admission path's MaybeRetryIdentity) ever finds a retry due.
std::atomic<int64_t> g_now{0};
int64_t FakeNow() { return g_now.load(); }

// The fake driver: one device (for the region's device table).
CUresult FakeDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult FakeDeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult FakeUuid(CUuuid* u, CUdevice) {
  std::memset(u->bytes, 0x3c, sizeof(u->bytes));
  return CUDA_SUCCESS;
}

const CudaDriver& FakeCuda() {
  static const CudaDriver cuda = [] {
    CudaDriver d;
    d.aux.cuDeviceGetCount = FakeDeviceGetCount;
    d.aux.cuDeviceGet = FakeDeviceGet;
    d.aux.cuDeviceGetUuid_v2 = FakeUuid;
    return d;
  }();
  return cuda;
}

// A state of its own whose identity tiers are procfs (at a root the test points) and the
// probe (no NVML: it fails).
class IdentityRetryTest : public ::testing::Test {
 protected:
  IdentityRetryTest()
      : state_(testing::MakeState({{limits::Key::kSharedCache, dir_.File("usage.cache")},
                                   {limits::Key::kMemoryLimit, "64m"},
                                   {limits::Key::kIdentityTiers, "procfs,probe"},
                                   {limits::Key::kHostProcfs, root_}},
                                  &FakeCuda())),
        rt(*state_) {}

  void SetUp() override {
    std::filesystem::create_directory(plain_);
    std::filesystem::create_directory_symlink(plain_, root_);
    LearnDevicesFromCuda(rt);
    ASSERT_EQ(JoinRegion(rt), JoinState::kJoined);
  }

  // Points the procfs tier's root at `target`.
  void PointRootAt(const std::string& target) {
    std::filesystem::remove(root_);
    std::filesystem::create_directory_symlink(target, root_);
  }

  // This process's slot as the region records it.
  std::optional<region::SlotView> Own() {
    region::Region* reg = ViewRegion(rt);
    if (reg == nullptr) return std::nullopt;
    for (const region::SlotView& s : reg->Slots()) {
      if (s.index == reg->slot()) return s;
    }
    return std::nullopt;
  }
  uint32_t Attempts() {
    auto s = Own();
    return s ? s->identity_attempts : 0;
  }

  TempDir dir_{"hami-identity-retry-test"};
  const std::string plain_ = dir_.File("plain");
  const std::string root_ = dir_.File("root");
  std::unique_ptr<Runtime> state_;
  Runtime& rt;
};

// One test: each step of the schedule depends on the one before.
TEST_F(IdentityRetryTest, AFailureIsRetriedAfterADoublingBackoffUntilAnAttemptAnswers) {
  // Registration tried the fast tiers; the probe waits for CUDA (not a failure yet).
  auto joined = Own();
  ASSERT_TRUE(joined);
  EXPECT_EQ(joined->identity_attempts, 1u);
  EXPECT_EQ(joined->identity_reason[size_t(IdentityTier::kProcfs)], IdentityReason::kUnreadable);
  EXPECT_EQ(rt.identity_state.load(), int(IdentityState::kAwaitingCuda));

  // CUDA is up (as the cuInit hook records it): the probe runs and fails (no NVML), and every
  // tier has failed.
  const int64_t start = MonotonicNs() + 3'600'000'000'000;
  g_now = start;
  rt.cuda_initialized.store(true);
  ResolveIdentity(rt, true, FakeNow);
  auto failed = Own();
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->identity_attempts, 2u);
  EXPECT_EQ(failed->identity, IdentitySource::kFailed);
  EXPECT_EQ(failed->identity_reason[size_t(IdentityTier::kProbe)], IdentityReason::kNoDriver);
  EXPECT_EQ(rt.identity_state.load(), int(IdentityState::kRetryLater));

  // Each retry is due exactly when its backoff has passed: not a nanosecond before.
  const int64_t backoffs_s[] = {1, 2, 4, 8, 16, 32, 60, 60};
  int64_t failed_at = start;
  uint32_t attempts = 2;
  for (const int64_t backoff_s : backoffs_s) {
    const int64_t due = failed_at + backoff_s * 1'000'000'000;
    g_now = due - 1;
    RetryIdentitySlow(rt, FakeNow);
    MaybeRetryIdentity(rt);  // on the real clock: never due
    ASSERT_EQ(Attempts(), attempts) << "retried before its " << backoff_s << " s backoff";
    g_now = due;
    RetryIdentitySlow(rt, FakeNow);
    ASSERT_EQ(Attempts(), ++attempts) << "not retried after its " << backoff_s << " s backoff";
    failed_at = due;
  }

  // The procfs root is now a procfs: the next retry answers, and nothing is retried after it.
  PointRootAt("/proc");
  g_now = failed_at + 60'000'000'000;
  RetryIdentitySlow(rt, FakeNow);
  auto resolved = Own();
  ASSERT_TRUE(resolved);
  EXPECT_EQ(resolved->identity_attempts, attempts + 1);
  EXPECT_EQ(resolved->identity, IdentitySource::kProcfs);
  EXPECT_GT(resolved->host_pid, 0);
  EXPECT_EQ(resolved->identity_reason[size_t(IdentityTier::kProcfs)], IdentityReason::kNone);
  EXPECT_EQ(rt.identity_state.load(), int(IdentityState::kResolved));
  g_now = failed_at + 3600'000'000'000;
  RetryIdentitySlow(rt, FakeNow);
  ResolveIdentity(rt, true, FakeNow);
  EXPECT_EQ(Attempts(), attempts + 1);
}

TEST(IdentityBackoff, DoublesFromOneSecondToAMinute) {
  static_assert(NextIdentityBackoffNs(0) == 1'000'000'000);
  static_assert(NextIdentityBackoffNs(1'000'000'000) == 2'000'000'000);
  static_assert(NextIdentityBackoffNs(16'000'000'000) == 32'000'000'000);
  static_assert(NextIdentityBackoffNs(32'000'000'000) == 60'000'000'000);
  static_assert(NextIdentityBackoffNs(60'000'000'000) == 60'000'000'000);
  SUCCEED();
}

}  // namespace
}  // namespace hami::vgpu
