// The NVML cross-check's arithmetic (pure), how the region records and reports what it finds,
// and the region's check that its path still names the file it maps.
#include "region/crosscheck.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "region/region.h"

namespace hami::region {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kTolerance = kDefaultUnaccountedToleranceBytes;

SlotView Live(int index, pid_t pid, pid_t host_pid, uint64_t used0) {
  SlotView s{};
  s.index = index;
  s.state = layout::SlotState::kLive;
  s.alive = true;
  s.pid = pid;
  s.host_pid = host_pid;
  s.used_bytes[0] = used0;
  s.unaccounted_device = -1;
  return s;
}

TEST(UnaccountedGap, CountsOnlyPastTheTolerance) {
  EXPECT_EQ(UnaccountedGap(100 * kMiB, 100 * kMiB, kTolerance), 0u);
  EXPECT_EQ(UnaccountedGap(50 * kMiB, 100 * kMiB, kTolerance), 0u) << "books above NVML: no gap";
  EXPECT_EQ(UnaccountedGap(100 * kMiB + kTolerance, 100 * kMiB, kTolerance), 0u);
  EXPECT_EQ(UnaccountedGap(100 * kMiB + kTolerance + 1, 100 * kMiB, kTolerance), kTolerance + 1);
  EXPECT_EQ(UnaccountedGap(2048 * kMiB, 0, 0), 2048 * kMiB);
}

TEST(CrossCheckDevice, FindsTheProcessesNvmlShowsPastTheirBooks) {
  const std::vector<SlotView> slots = {
      Live(0, 1, 1001, 512 * kMiB),   // agrees with NVML
      Live(3, 7, 1007, 100 * kMiB),   // NVML shows 2 GiB more (dlmopen, zeroed counters)
      Live(5, 9, 0, 0),               // no host PID yet: not checkable
      Live(6, 11, 1011, 300 * kMiB),  // not listed by NVML: nothing to compare
  };
  const std::vector<NvmlProcessUse> nvml = {
      {1001, 512 * kMiB},
      {1007, 100 * kMiB + 1024 * kMiB},
      {1007, 1024 * kMiB},  // listed twice (another instance): added up
      {4242, 9000 * kMiB},  // not the container's: none of its slots
  };
  const DeviceCrossCheck c = CrossCheckDevice(0, slots, nvml, kTolerance);
  ASSERT_EQ(c.gaps.size(), 1u);
  EXPECT_EQ(c.gaps[0].slot, 3);
  EXPECT_EQ(c.gaps[0].pid, 7);
  EXPECT_EQ(c.gaps[0].host_pid, 1007);
  EXPECT_EQ(c.gaps[0].nvml_bytes, 2148 * kMiB);
  EXPECT_EQ(c.gaps[0].accounted_bytes, 100 * kMiB);
  EXPECT_EQ(c.gaps[0].gap_bytes, 2048 * kMiB);
  EXPECT_EQ(c.unchecked, 1u);
  EXPECT_EQ(c.TotalGap(), 2048 * kMiB);
}

TEST(CrossCheckDevice, ADeadOwnersSlotIsNotCheckedAndTwoSlotsOfOnePidShareTheirBooks) {
  SlotView dead = Live(1, 3, 1003, 0);
  dead.alive = false;
  const std::vector<SlotView> slots = {dead, Live(2, 4, 1004, 600 * kMiB),
                                       Live(8, 5, 1004, 600 * kMiB)};
  const std::vector<NvmlProcessUse> nvml = {{1003, 4096 * kMiB}, {1004, 1200 * kMiB}};
  const DeviceCrossCheck c = CrossCheckDevice(0, slots, nvml, 0);
  EXPECT_TRUE(c.gaps.empty()) << "both slots of host pid 1004 account for its 1200 MiB";
  EXPECT_EQ(c.unchecked, 0u);
}

class CrossCheckRegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    path_ = tmp_.File("usage.cache");
    PolicySpec spec;
    spec.device_count = 2;
    spec.memory_limit[0] = spec.memory_limit[1] = 1ull << 30;
    auto r = Region::Open(path_, &spec, Create::kIfMissing, nullptr);
    ASSERT_TRUE(r.ok()) << r.error().message();
    region_ = std::move(r).value();
    ASSERT_TRUE(region_->Register().ok());
    region_->SetHostPid(getpid(), IdentitySource::kSameNamespace);
  }

  DeviceCrossCheck CheckWith(int device, uint64_t nvml_bytes) {
    const std::vector<SlotView> slots = region_->Slots();
    const std::vector<NvmlProcessUse> nvml = {{getpid(), nvml_bytes}};
    return CrossCheckDevice(device, slots, nvml, kTolerance);
  }

  std::vector<Inconsistency> Unaccounted() {
    std::vector<Inconsistency> out;
    for (const Inconsistency& i : region_->Check()) {
      if (i.kind == Inconsistency::Kind::kUnaccounted) out.push_back(i);
    }
    return out;
  }

  TempDir tmp_{"hami-crosscheck-test"};
  std::string path_;
  std::unique_ptr<Region> region_;
};

TEST_F(CrossCheckRegionTest, AGapIsRecordedReportedAndClearedWhenItCloses) {
  ASSERT_EQ(region_->Reserve(0, 100 * kMiB, UsageKind::kData), Admission::kOk);
  EXPECT_FALSE(region_->UnaccountedInForce(0));

  const std::vector<AccountingGap> fresh =
      region_->RecordCrossCheck(CheckWith(0, 2148 * kMiB), MonotonicNs());
  ASSERT_EQ(fresh.size(), 1u) << "a new gap is returned once, to be said once";
  EXPECT_TRUE(region_->UnaccountedInForce(0));
  EXPECT_FALSE(region_->UnaccountedInForce(1));
  const Region::CrossCheckState state = region_->CrossCheck(0);
  EXPECT_EQ(state.unaccounted_bytes, 2048 * kMiB);
  EXPECT_EQ(state.host_pid, getpid());
  EXPECT_EQ(region_->file().header.unaccounted_found.load(), 1u);

  std::vector<Inconsistency> found = Unaccounted();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].device, 0);
  EXPECT_EQ(found[0].slot, region_->slot());
  EXPECT_THAT(found[0].message, HasSubstr("host pid " + std::to_string(getpid())));
  EXPECT_THAT(found[0].message, HasSubstr("its books say 100.0 MiB"));
  EXPECT_THAT(found[0].message, HasSubstr(std::to_string(2048 * kMiB) + " bytes) unaccounted"));

  // The same gap again is not new.
  EXPECT_TRUE(region_->RecordCrossCheck(CheckWith(0, 2148 * kMiB), MonotonicNs()).empty());
  // Closed: cleared in the slot and the device.
  EXPECT_TRUE(region_->RecordCrossCheck(CheckWith(0, 100 * kMiB), MonotonicNs()).empty());
  EXPECT_FALSE(region_->UnaccountedInForce(0));
  EXPECT_TRUE(Unaccounted().empty());
  EXPECT_EQ(region_->Slots()[0].unaccounted_bytes, 0u);
}

TEST_F(CrossCheckRegionTest, AFindingNobodyRenewsStopsHoldingAllocationsBack) {
  region_->RecordCrossCheck(CheckWith(0, 2048 * kMiB), MonotonicNs() - kCrossCheckStaleNs - 1);
  EXPECT_EQ(region_->CrossCheck(0).unaccounted_bytes, 2048 * kMiB);
  EXPECT_FALSE(region_->UnaccountedInForce(0)) << "its checker is gone";
  EXPECT_EQ(Unaccounted().size(), 1u) << "inspect still names it while the process lives";
}

TEST_F(CrossCheckRegionTest, AGapOnOneDeviceIsNotClearedByAnotherDevicesCheck) {
  region_->RecordCrossCheck(CheckWith(0, 2048 * kMiB), MonotonicNs());
  region_->RecordCrossCheck(CheckWith(1, 0), MonotonicNs());
  EXPECT_TRUE(region_->UnaccountedInForce(0));
  const SlotView s = region_->Slots()[0];
  EXPECT_EQ(s.unaccounted_device, 0);
  EXPECT_EQ(s.unaccounted_bytes, 2048 * kMiB);
}

TEST_F(CrossCheckRegionTest, TheFileStaysVerifiedWhileNothingChangesIt) {
  EXPECT_TRUE(region_->VerifyFile().ok());
}

TEST_F(CrossCheckRegionTest, AFileRenamedOverThePathIsNoLongerTheRegion) {
  const std::string other = tmp_.File("other.cache");
  PolicySpec spec;
  spec.device_count = 1;
  ASSERT_TRUE(Region::Open(other, &spec, Create::kIfMissing, nullptr).ok());
  ASSERT_EQ(rename(other.c_str(), path_.c_str()), 0);
  Status s = region_->VerifyFile();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr(path_));
  EXPECT_THAT(s.error().message(), HasSubstr("another file stands at the path now"));
}

TEST_F(CrossCheckRegionTest, ARemovedOrSymlinkedOrTruncatedFileIsNoLongerTheRegion) {
  const std::string moved = tmp_.File("moved.cache");
  ASSERT_EQ(rename(path_.c_str(), moved.c_str()), 0);
  Status s = region_->VerifyFile();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("no longer at that path"));

  ASSERT_EQ(symlink(moved.c_str(), path_.c_str()), 0);
  s = region_->VerifyFile();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("symbolic link"));

  ASSERT_EQ(unlink(path_.c_str()), 0);
  ASSERT_EQ(rename(moved.c_str(), path_.c_str()), 0);
  EXPECT_TRUE(region_->VerifyFile().ok()) << "the same file back at its path";
  // Truncated (checked from the descriptor alone: touching the mapping past the end would
  // fault).
  ASSERT_EQ(truncate(path_.c_str(), 4096), 0);
  s = region_->VerifyFile();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("truncated to 4096 bytes"));
  ASSERT_EQ(truncate(path_.c_str(), off_t(sizeof(layout::File))), 0);  // for the teardown
}

TEST_F(CrossCheckRegionTest, AForkChildDoesNotReopenAFileThatReplacedItsParents) {
  const std::string other = tmp_.File("other.cache");
  PolicySpec spec;
  spec.device_count = 1;
  ASSERT_TRUE(Region::Open(other, &spec, Create::kIfMissing, nullptr).ok());
  ASSERT_EQ(rename(other.c_str(), path_.c_str()), 0);
  const pid_t child = fork();
  if (child == 0) {
    Status s = region_->ReopenAfterFork();
    _exit(!s.ok() && s.error().message().find("was replaced") != std::string::npos ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(CrossCheckRegionTest, AProcessGivenOtherLimitsLaterIsRecordedAsAConflict) {
  region_->RecordPolicyConflict(layout::ConflictField::kMemoryLimit, 0, 0, 1ull << 30);
  bool found = false;
  for (const Inconsistency& i : region_->Check()) {
    if (i.kind != Inconsistency::Kind::kPolicyConflict) continue;
    found = true;
    EXPECT_THAT(i.message, HasSubstr("was given memory_limit[0] = 1073741824 bytes but the "
                                     "region says unlimited"));
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace hami::region
