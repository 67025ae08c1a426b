// The health watcher against the simulated GPU's NVML (opened by path), with Xids recorded in
// the simulated machine's state by `hami sim xid` or directly; and against the inventory's
// fake NVML, which has no event API.
#include "inventory/health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "sim/state.h"
#include "support/subprocess.h"

namespace hami::inventory {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// Bounds the waits of a broken build only; never reached when the code works.
constexpr std::chrono::milliseconds kBound{60000};

// Collects the callbacks; Wait blocks until `n` arrived.
class Changes {
 public:
  std::function<void(const HealthChange&)> Callback() {
    return [this](const HealthChange& c) {
      std::lock_guard<std::mutex> l(mu_);
      changes_.push_back(c);
      cv_.notify_all();
    };
  }
  std::vector<HealthChange> Wait(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, kBound, [&] { return changes_.size() >= n; });
    return changes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<HealthChange> changes_;
};

class SimulatedHealth : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    state_path_ = dir_.File("sim.state");
    setenv("HAMI_SIM_STATE", state_path_.c_str(), 1);
    setenv("HAMI_SIM_PROFILE", "h100-80g:2", 1);
    unsetenv("HAMI_SIM_NODE");
    options_.nvml_library = std::string(HAMI_SIM_LIB_DIR) + "/libnvidia-ml.so.1";
    options_.on_change = changes_.Callback();
  }

  std::unique_ptr<HealthWatcher> MustStart() {
    auto w = HealthWatcher::Start(options_);
    EXPECT_TRUE(w.ok()) << w.error().message();
    if (!w.ok()) return nullptr;
    state_ = std::move(sim::SharedState::OpenExisting(state_path_)).value();
    return std::move(w).value();
  }
  std::string Uuid(int device) const { return state_->devices()[size_t(device)].uuid; }
  void Xid(int device, uint64_t code) { ASSERT_TRUE(state_->RecordXid(device, code).ok()); }

  TempDir dir_{"hami-health-test"};
  std::string state_path_;
  HealthOptions options_;
  Changes changes_;
  std::unique_ptr<sim::SharedState> state_;
};

TEST_F(SimulatedHealth, AnXidFromHamiSimXidMarksItsGpuUnhealthy) {
  auto w = MustStart();
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->health(),
              UnorderedElementsAre(std::pair(Uuid(0), true), std::pair(Uuid(1), true)));
  testing::Subprocess xid({std::string(HAMI_BIN_DIR) + "/hami-sim", "xid", Uuid(1), "79"}, {});
  ASSERT_EQ(xid.Wait(60000), 0);
  EXPECT_THAT(changes_.Wait(1), ElementsAre(HealthChange{Uuid(1), false, "Xid 79"}));
  EXPECT_THAT(w->health(),
              UnorderedElementsAre(std::pair(Uuid(0), true), std::pair(Uuid(1), false)));
}

TEST_F(SimulatedHealth, ApplicationXidsAreIgnoredAndAGpuIsReportedUnhealthyOnce) {
  auto w = MustStart();
  ASSERT_NE(w, nullptr);
  for (uint64_t code : XidPolicy::ApplicationXids()) Xid(0, code);
  Xid(0, 48);  // double-bit ECC error
  Xid(0, 79);
  const uint64_t sent = XidPolicy::ApplicationXids().size() + 2;
  ASSERT_TRUE(w->WaitForEvents(sent, kBound));
  EXPECT_THAT(changes_.Wait(1), ElementsAre(HealthChange{Uuid(0), false, "Xid 48"}));
  EXPECT_FALSE(w->health().at(Uuid(0)));
  EXPECT_TRUE(w->health().at(Uuid(1)));
}

TEST_F(SimulatedHealth, OnlyTheNamedGpusAreWatched) {
  options_.uuids = {"GPU-not-on-this-machine"};
  {
    auto probe = MustStart();  // learns the UUIDs
    ASSERT_NE(probe, nullptr);
    EXPECT_THAT(probe->health(), IsEmpty());
  }
  options_.uuids = {Uuid(1)};
  auto w = MustStart();
  ASSERT_NE(w, nullptr);
  Xid(0, 79);
  Xid(1, 94);
  ASSERT_TRUE(w->WaitForEvents(1, kBound));
  EXPECT_THAT(changes_.Wait(1), ElementsAre(HealthChange{Uuid(1), false, "Xid 94"}));
  EXPECT_THAT(w->health(), ElementsAre(std::pair(Uuid(1), false)));
}

TEST_F(SimulatedHealth, EnabledApplicationXidsCountAndDisablingAllTurnsTheWatcherOff) {
  options_.xids = XidPolicy("", "13");
  auto w = MustStart();
  ASSERT_NE(w, nullptr);
  Xid(0, 13);
  EXPECT_THAT(changes_.Wait(1), ElementsAre(HealthChange{Uuid(0), false, "Xid 13"}));
  w->Stop();

  HealthOptions off;
  off.nvml_library = "/nonexistent/libnvidia-ml.so.1";  // never opened
  off.xids = XidPolicy("all", nullptr);
  auto idle = HealthWatcher::Start(off);
  ASSERT_TRUE(idle.ok()) << idle.error().message();
  EXPECT_THAT((*idle)->health(), IsEmpty());
}

TEST_F(SimulatedHealth, StopEndsAWaitingWatcherAndIsIdempotent) {
  options_.wait_timeout = std::chrono::milliseconds(200);
  auto w = MustStart();
  ASSERT_NE(w, nullptr);
  w->Stop();  // returns once the pending wait ran out
  w->Stop();
  EXPECT_EQ(w->events_handled(), 0u);
  EXPECT_THAT(changes_.Wait(0), IsEmpty());
}

TEST(Health, ALibraryWithoutTheEventApiLeavesEveryGpuHealthyAndUnwatched) {
  HealthOptions o;
  o.nvml_library = HAMI_FAKE_NVML;
  auto w = HealthWatcher::Start(o);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ((*w)->health().size(), 2u);
  for (const auto& [uuid, healthy] : (*w)->health()) EXPECT_TRUE(healthy) << uuid;
  EXPECT_EQ((*w)->unwatched().size(), 2u);
}

TEST(Health, StartFailsNamingTheLibraryThatCannotBeOpenedOrInitialized) {
  HealthOptions o;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  auto w = HealthWatcher::Start(o);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(w.error().message(), HasSubstr("/nonexistent/libnvidia-ml.so.1"));
  setenv("HAMI_FAKE_NVML_INIT", "fail", 1);
  o.nvml_library = HAMI_FAKE_NVML;
  w = HealthWatcher::Start(o);
  unsetenv("HAMI_FAKE_NVML_INIT");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(w.error().message(), HasSubstr("nvmlInit_v2"));
}

TEST(XidPolicy, IgnoresNvidiasApplicationXidsByDefault) {
  XidPolicy p;
  for (uint64_t x : {13u, 31u, 43u, 45u, 68u, 109u}) EXPECT_TRUE(p.Ignores(x)) << x;
  for (uint64_t x : {48u, 62u, 63u, 64u, 74u, 79u, 92u, 94u, 95u}) EXPECT_FALSE(p.Ignores(x)) << x;
  EXPECT_FALSE(p.all_disabled());
  EXPECT_EQ(p.Describe(), "ignored Xids: 13,31,43,45,68,109");
  EXPECT_THAT(p.warnings(), IsEmpty());
}

TEST(XidPolicy, DisableAddsXidsEnableRemovesThemAndMalformedEntriesAreReported) {
  XidPolicy p(" 79 ,48,,nope", "13,79");
  EXPECT_TRUE(p.Ignores(48));
  EXPECT_FALSE(p.Ignores(79));  // enabling wins
  EXPECT_FALSE(p.Ignores(13));
  EXPECT_TRUE(p.Ignores(31));
  EXPECT_THAT(p.warnings(), ElementsAre(HasSubstr("DP_DISABLE_HEALTHCHECKS: ignoring 'nope'")));
}

TEST(XidPolicy, AllDisablesEverythingUnlessSomeAreEnabled) {
  EXPECT_TRUE(XidPolicy("all", nullptr).all_disabled());
  EXPECT_TRUE(XidPolicy("XIDS", "").all_disabled());
  XidPolicy some("all", "79");
  EXPECT_FALSE(some.all_disabled());
  EXPECT_FALSE(some.Ignores(79));
  EXPECT_TRUE(some.Ignores(48));
  XidPolicy every(nullptr, "all");
  EXPECT_FALSE(every.Ignores(13));
  EXPECT_EQ(every.Describe(), "ignored Xids: none");
}

}  // namespace
}  // namespace hami::inventory
