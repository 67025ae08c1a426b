#include "common/check.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "common/raw_log.h"

namespace hami {
namespace {

using ::testing::HasSubstr;

std::string Drain(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
  return out;
}

class CheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pipe2(fds_, O_NONBLOCK | O_CLOEXEC), 0);
    logger_.set_fd(fds_[1]);
    SetCheckLogger(&logger_);
  }
  void TearDown() override {
    SetCheckLogger(nullptr);
    close(fds_[0]);
    close(fds_[1]);
  }
  int fds_[2];
  RawLogger logger_{"test", LogLevel::kWarn};
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
  std::string out = Drain(fds_[0]);
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
  EXPECT_EQ(Drain(fds_[0]), "");
}

TEST(CheckDeathTest, CheckLogsTheLiteralAndAborts) {
  EXPECT_DEATH(HAMI_CHECK(false, "slot table is not sorted"),
               "check failed: slot table is not sorted .*; aborting");
}

}  // namespace
}  // namespace hami
