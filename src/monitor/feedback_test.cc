#include "monitor/feedback.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.h"

namespace hami::monitor {
namespace {

using region::CorePolicy;

constexpr char kGpuA[] = "GPU-aaaaaaaa-0000-4000-8000-000000000000";
constexpr char kGpuB[] = "GPU-bbbbbbbb-0000-4000-8000-000000000000";

// A container that launched just before the pass (or not), of `priority`, on `devices`.
FeedbackInput Container(int32_t priority, bool launched, std::vector<std::string> devices,
                        CorePolicy policy = CorePolicy::kDefault) {
  FeedbackInput in;
  in.priority = priority;
  in.core_policy = policy;
  in.recent_kernel = launched ? region::kRecentKernelOnLaunch : 0;
  in.devices = std::move(devices);
  return in;
}

TEST(DecayRecentKernel, TakesOneOffALaunchsValueAndBoundsLargerOnes) {
  EXPECT_EQ(DecayRecentKernel(0), 0u);
  EXPECT_EQ(DecayRecentKernel(1), 0u);
  EXPECT_EQ(DecayRecentKernel(2), 1u);
  EXPECT_EQ(DecayRecentKernel(7), 1u) << "an older writer's count does not keep it active";
  EXPECT_EQ(DecayRecentKernel(UINT32_MAX), 1u);
}

TEST(DecideFeedback, AContainerIsActiveInThePassAfterALaunchAndNotTheOneAfter) {
  FeedbackInput c = Container(1, true, {kGpuA});
  FeedbackDecision first = DecideFeedback(std::span(&c, 1))[0];
  EXPECT_EQ(first.recent_kernel, 1u);
  EXPECT_TRUE(first.active);
  c.recent_kernel = first.recent_kernel;
  FeedbackDecision second = DecideFeedback(std::span(&c, 1))[0];
  EXPECT_EQ(second.recent_kernel, 0u);
  EXPECT_FALSE(second.active);
}

TEST(DecideFeedback, AContainerAloneIsNeitherPausedNorSwitchedOnAndOnlyForceLimitsIt) {
  for (CorePolicy policy : {CorePolicy::kDefault, CorePolicy::kForce, CorePolicy::kDisable}) {
    FeedbackInput c = Container(1, true, {kGpuA}, policy);
    c.utilization_switch = true;  // as a new region starts
    FeedbackDecision d = DecideFeedback(std::span(&c, 1))[0];
    EXPECT_FALSE(d.paused) << region::CorePolicyName(policy);
    EXPECT_FALSE(d.utilization_switch) << region::CorePolicyName(policy);
    EXPECT_EQ(d.sm_limit_applies, policy == CorePolicy::kForce) << region::CorePolicyName(policy);
  }
}

TEST(DecideFeedback, AnActiveHighPriorityContainerPausesTheLowOneOnItsGpuAndRunsUnthrottled) {
  std::vector<FeedbackInput> in = {Container(0, true, {kGpuA}), Container(1, true, {kGpuA})};
  auto d = DecideFeedback(in);
  EXPECT_FALSE(d[0].paused);
  EXPECT_FALSE(d[0].utilization_switch) << "the low one is paused: it does not compete";
  EXPECT_FALSE(d[0].sm_limit_applies);
  EXPECT_TRUE(d[1].paused);
  EXPECT_TRUE(d[1].utilization_switch);
}

TEST(DecideFeedback, AnIdleHighPriorityContainerNeitherPausesNorThrottlesTheLowOne) {
  std::vector<FeedbackInput> in = {Container(0, false, {kGpuA}), Container(1, true, {kGpuA})};
  in[1].paused = true;  // paused while the high one was active
  in[1].utilization_switch = true;
  auto d = DecideFeedback(in);
  EXPECT_FALSE(d[1].paused) << "unpaused once the high one is idle";
  EXPECT_FALSE(d[1].utilization_switch);
  EXPECT_FALSE(d[0].utilization_switch) << "a lower-priority container does not throttle it";
}

TEST(DecideFeedback, ActiveContainersOfOnePriorityOnOneGpuAreAllSwitchedOnAndNonePaused) {
  std::vector<FeedbackInput> in = {Container(1, true, {kGpuA}), Container(1, true, {kGpuA}),
                                   Container(1, false, {kGpuA})};
  auto d = DecideFeedback(in);
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_FALSE(d[i].paused) << i;
    EXPECT_TRUE(d[i].utilization_switch) << i << ": another one competes on its GPU";
    EXPECT_TRUE(d[i].sm_limit_applies) << i;
  }
}

TEST(DecideFeedback, ContainersOnDifferentGpusDoNotAffectEachOther) {
  std::vector<FeedbackInput> in = {Container(0, true, {kGpuA}), Container(1, true, {kGpuB})};
  auto d = DecideFeedback(in);
  EXPECT_FALSE(d[1].paused);
  EXPECT_FALSE(d[0].utilization_switch);
  EXPECT_FALSE(d[1].utilization_switch);
}

TEST(DecideFeedback, OneSharedGpuOfSeveralIsEnoughToPause) {
  std::vector<FeedbackInput> in = {Container(0, true, {kGpuB}), Container(1, true, {kGpuA, kGpuB})};
  auto d = DecideFeedback(in);
  EXPECT_TRUE(d[1].paused);
}

TEST(DecideFeedback, EmptyUuidsAreNoGpuAndAreNotShared) {
  std::vector<FeedbackInput> in = {Container(0, true, {""}), Container(1, true, {"", ""})};
  auto d = DecideFeedback(in);
  EXPECT_FALSE(d[1].paused);
  EXPECT_FALSE(d[0].utilization_switch);
  EXPECT_FALSE(d[1].utilization_switch);
}

TEST(DecideFeedback, APausedContainerNeitherPausesNorThrottlesOthers) {
  // The high one on A pauses the low one on A and B; the low one on B alone is untouched.
  std::vector<FeedbackInput> in = {Container(0, true, {kGpuA}), Container(1, true, {kGpuA, kGpuB}),
                                   Container(1, true, {kGpuB}), Container(2, true, {kGpuB})};
  auto d = DecideFeedback(in);
  EXPECT_TRUE(d[1].paused);
  EXPECT_FALSE(d[2].paused);
  EXPECT_FALSE(d[2].utilization_switch) << "its only neighbour of its priority is paused";
  EXPECT_TRUE(d[3].paused) << "the competing priority-1 container on B pauses priority 2";
  EXPECT_TRUE(d[3].utilization_switch);
}

TEST(DecideFeedback, AnIdleContainerIsSwitchedOnBesideACompetingPeerSoItsFirstLaunchIsPaced) {
  std::vector<FeedbackInput> in = {Container(1, false, {kGpuA}), Container(1, true, {kGpuA})};
  auto d = DecideFeedback(in);
  EXPECT_TRUE(d[0].utilization_switch);
  EXPECT_FALSE(d[1].utilization_switch) << "the idle one does not compete";
}

TEST(DecideFeedback, NoContainersNoDecisions) { EXPECT_TRUE(DecideFeedback({}).empty()); }

// ---- the pass over real region files ----

class FeedbackPassTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(tmp_.ok()); }

  region::Region* Make(const std::string& name, int32_t priority, std::vector<std::string> gpus,
                       CorePolicy policy = CorePolicy::kDefault) {
    region::PolicySpec spec;
    spec.device_count = int(gpus.size());
    spec.priority = priority;
    spec.core_policy = policy;
    for (size_t i = 0; i < gpus.size(); ++i) {
      spec.uuid[i] = gpus[i];
      spec.sm_limit[i] = 30;
    }
    auto r = region::Region::Open(tmp_.File(name), &spec, region::Create::kIfMissing, nullptr);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
    if (!r.ok()) return nullptr;
    EXPECT_TRUE((*r)->Register().ok());
    owned_.push_back(std::move(r).value());
    return owned_.back().get();
  }

  TempDir tmp_{"hami-feedback-test"};
  std::vector<std::unique_ptr<region::Region>> owned_;
};

TEST_F(FeedbackPassTest, PausesTheLowPriorityRegionWhileTheHighOneLaunchesAndThenReleasesIt) {
  region::Region* high = Make("high.cache", 0, {kGpuA});
  region::Region* low = Make("low.cache", 1, {kGpuA});
  ASSERT_TRUE(high && low);
  high->RecordActivity(1, 1);
  low->RecordActivity(1, 1);
  std::vector<region::Region*> regions = {high, low};

  FeedbackStats s = RunFeedbackPass(regions);
  EXPECT_EQ(s.regions, 2);
  EXPECT_EQ(s.active, 2);
  EXPECT_EQ(s.paused, 1);
  EXPECT_EQ(s.switched_on, 1);
  EXPECT_EQ(s.writes, 2) << "low paused, high's switch turned off (low's stays on)";
  EXPECT_EQ(s.errors, 0);
  EXPECT_TRUE(low->Policy().paused);
  EXPECT_EQ(low->PausedWord().load(), 1u);
  EXPECT_EQ(low->Policy().utilization_switch, 1u);
  EXPECT_FALSE(high->Policy().paused);
  EXPECT_EQ(high->Policy().utilization_switch, 0u);
  EXPECT_EQ(high->SmLimitInForce(0), 0u) << "the high one runs unthrottled";
  EXPECT_EQ(high->RecentKernel(), 1u);

  // No launches since: both go idle, the low one is released.
  s = RunFeedbackPass(regions);
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.paused, 0);
  EXPECT_EQ(s.switched_on, 0);
  EXPECT_EQ(s.writes, 2) << "low unpaused and its switch turned off";
  EXPECT_FALSE(low->Policy().paused);
  EXPECT_EQ(low->Policy().utilization_switch, 0u);
  EXPECT_EQ(high->RecentKernel(), 0u);

  // Nothing changes: nothing is written, the policy generations stay.
  const uint64_t high_gen = high->Policy().generation;
  const uint64_t low_gen = low->Policy().generation;
  s = RunFeedbackPass(regions);
  EXPECT_EQ(s.writes, 0);
  EXPECT_EQ(high->Policy().generation, high_gen);
  EXPECT_EQ(low->Policy().generation, low_gen);
}

TEST_F(FeedbackPassTest, AContainerAloneIsLimitedOnlyUnderForce) {
  region::Region* plain = Make("plain.cache", 1, {kGpuA});
  region::Region* forced = Make("forced.cache", 1, {kGpuB}, CorePolicy::kForce);
  ASSERT_TRUE(plain && forced);
  plain->RecordActivity(1, 1);
  forced->RecordActivity(1, 1);
  ASSERT_EQ(plain->SmLimitInForce(0), 30u) << "a new region starts with the switch on";
  std::vector<region::Region*> regions = {plain, forced};
  FeedbackStats s = RunFeedbackPass(regions);
  EXPECT_EQ(s.switched_on, 0);
  EXPECT_EQ(plain->SmLimitInForce(0), 0u);
  EXPECT_EQ(forced->SmLimitInForce(0), 30u);
}

TEST_F(FeedbackPassTest, TwoActiveRegionsOnOneGpuBothGetTheirLimit) {
  region::Region* a = Make("a.cache", 1, {kGpuA});
  region::Region* b = Make("b.cache", 1, {kGpuA});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->SetUtilizationSwitch(false).ok());
  a->RecordActivity(1, 1);
  b->RecordActivity(1, 1);
  std::vector<region::Region*> regions = {a, b};
  FeedbackStats s = RunFeedbackPass(regions);
  EXPECT_EQ(s.switched_on, 2);
  EXPECT_EQ(s.writes, 1) << "only a's switch was off";
  EXPECT_EQ(a->SmLimitInForce(0), 30u);
  EXPECT_EQ(b->SmLimitInForce(0), 30u);
}

TEST_F(FeedbackPassTest, PassesRunningBesideLaunchingThreadsNeverLoseALaunch) {
  region::Region* high = Make("high.cache", 0, {kGpuA});
  region::Region* low = Make("low.cache", 1, {kGpuA});
  ASSERT_TRUE(high && low);
  std::atomic<bool> stop{false};
  std::vector<std::thread> launchers;
  for (region::Region* r : {high, low}) {
    launchers.emplace_back([r, &stop] {
      for (int64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) r->RecordActivity(1, i);
    });
  }
  std::vector<region::Region*> regions = {high, low};
  for (int i = 0; i < 200; ++i) {
    FeedbackStats s = RunFeedbackPass(regions);
    EXPECT_EQ(s.regions, 2);
    EXPECT_EQ(s.errors, 0);
  }
  stop = true;
  for (auto& t : launchers) t.join();
  // The last launches of both land before this pass: both active, the low one paused.
  high->RecordActivity(1, 0);
  low->RecordActivity(1, 0);
  FeedbackStats s = RunFeedbackPass(regions);
  EXPECT_EQ(s.active, 2);
  EXPECT_TRUE(low->Policy().paused);
  EXPECT_FALSE(high->Policy().paused);
}

TEST_F(FeedbackPassTest, AReadOnlyRegionIsCountedAsAnErrorAndLeftAlone) {
  region::Region* rw = Make("rw.cache", 1, {kGpuA});
  ASSERT_NE(rw, nullptr);
  rw->RecordActivity(1, 1);
  auto ro = region::Region::Open(tmp_.File("rw.cache"), nullptr, region::Create::kNever, nullptr,
                                 region::Access::kReadOnly);
  ASSERT_TRUE(ro.ok());
  std::vector<region::Region*> regions = {ro->get()};
  FeedbackStats s = RunFeedbackPass(regions);
  EXPECT_EQ(s.errors, 1);
  EXPECT_EQ(s.regions, 0);
  EXPECT_EQ(rw->RecentKernel(), region::kRecentKernelOnLaunch);
}

}  // namespace
}  // namespace hami::monitor
