#include "common/check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/captured_log.h"
#include "common/raw_log.h"

namespace hami {
namespace {

using ::testing::HasSubstr;

class CheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(log_.ok());
    SetCheckLogger(&log_.logger());
  }
  void TearDown() override { SetCheckLogger(nullptr); }
  CapturedLog log_;
};

// A fail-closed caller, as the interposer writes one.
int LimitOrRefuse(int limit) {
  if (HAMI_BUG(limit < 0, "negative limit in the device table")) return 0;
  return limit;
}

TEST_F(CheckTest, BugYieldsTheConditionCountsEveryTimeAndLogsOncePerSite) {
  uint64_t before = BugCount();
  EXPECT_EQ(LimitOrRefuse(7), 7);
  EXPECT_EQ(BugCount(), before);
  EXPECT_EQ(LimitOrRefuse(-1), 0);
  EXPECT_EQ(LimitOrRefuse(-2), 0);
  EXPECT_EQ(BugCount(), before + 2);
  std::string out = log_.Drain();
  EXPECT_THAT(out, HasSubstr("bug: negative limit in the device table (" __FILE__ ":"));
  EXPECT_EQ(out.find("bug:"), out.rfind("bug:")) << "logged once: " << out;
}

TEST_F(CheckTest, BugEvaluatesItsConditionOnce) {
  int evaluations = 0;
  bool fired = HAMI_BUG(++evaluations == 1, "first evaluation");
  EXPECT_TRUE(fired);
  EXPECT_EQ(evaluations, 1);
}

TEST_F(CheckTest, CheckPassesSilentlyWhenTheInvariantHolds) {
  HAMI_CHECK(1 + 1 == 2, "arithmetic");
  EXPECT_EQ(log_.Drain(), "");
}

TEST(CheckDeathTest, CheckLogsTheLiteralAndAborts) {
  EXPECT_DEATH(HAMI_CHECK(false, "slot table is not sorted"),
               "check failed: slot table is not sorted .*; aborting");
}

}  // namespace
}  // namespace hami
