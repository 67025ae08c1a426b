#include "log/log.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <string>

#include "log/flags.h"

namespace hami::log {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Lines go to a pipe; each test starts from the defaults and restores them.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pipe2(fds_, O_NONBLOCK | O_CLOEXEC), 0);
    SetFd(fds_[1]);
    Configure({"hami-test", Level::kInfo, 0});
  }
  void TearDown() override {
    SetFd(2);
    Configure({"", Level::kInfo, 0});
    close(fds_[0]);
    close(fds_[1]);
  }
  std::string Drain() {
    std::string out;
    char buf[8192];
    ssize_t n;
    while ((n = read(fds_[0], buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
    return out;
  }
  int fds_[2] = {-1, -1};
};

TEST_F(LogTest, ALineIsLogfmtWithTimeLevelComponentAndPid) {
  HAMI_LOG(kWarn, "event=bad_node node=%s", "n1");
  std::string line = Drain();
  std::regex shape(
      "ts=\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z level=warn component=hami-test "
      "pid=\\d+ event=bad_node node=n1\n");
  EXPECT_TRUE(std::regex_match(line, shape)) << line;
}

TEST_F(LogTest, DefaultShowsErrorsWarningsAndInfoButNoVerbosityLine) {
  HAMI_LOG(kError, "event=e");
  HAMI_LOG(kWarn, "event=w");
  HAMI_LOG(kInfo, "event=i");
  HAMI_VLOG(2, "event=v2");
  HAMI_LOG(kDebug, "event=d");
  std::string out = Drain();
  EXPECT_THAT(out, HasSubstr("level=error component=hami-test"));
  EXPECT_THAT(out, HasSubstr("event=w\n"));
  EXPECT_THAT(out, HasSubstr("event=i\n"));
  EXPECT_THAT(out, Not(HasSubstr("event=v2")));
  EXPECT_THAT(out, Not(HasSubstr("event=d")));
}

TEST_F(LogTest, VerbosityFollowsKlog) {
  Configure({"hami-test", Level::kInfo, 2});
  HAMI_VLOG(2, "event=v2");
  HAMI_VLOG(3, "event=v3");
  HAMI_LOG(kDebug, "event=d");
  std::string out = Drain();
  EXPECT_THAT(out, HasSubstr("level=info component=hami-test"));
  EXPECT_THAT(out, HasSubstr("v=2 event=v2\n"));
  EXPECT_THAT(out, Not(HasSubstr("event=v3")));
  EXPECT_THAT(out, Not(HasSubstr("event=d")));

  Configure({"hami-test", Level::kInfo, 4});
  HAMI_LOG(kDebug, "event=d");
  HAMI_LOG(kTrace, "event=t");
  out = Drain();
  EXPECT_THAT(out, HasSubstr("level=debug component=hami-test"));
  EXPECT_THAT(out, HasSubstr("v=4 event=d\n"));
  EXPECT_THAT(out, Not(HasSubstr("event=t")));
}

TEST_F(LogTest, DebugAndTraceLevelsRaiseTheVerbosity) {
  Configure({"hami-test", Level::kDebug, 0});
  EXPECT_TRUE(V(4));
  EXPECT_FALSE(V(5));
  Configure({"hami-test", Level::kTrace, 0});
  EXPECT_TRUE(V(5));
  EXPECT_FALSE(V(6));
  Configure({"hami-test", Level::kTrace, 7});
  EXPECT_TRUE(V(7));
}

TEST_F(LogTest, AHigherLevelDropsInfoAndVerbosityLinesWhateverVSays) {
  Configure({"hami-test", Level::kWarn, 9});
  HAMI_LOG(kError, "event=e");
  HAMI_LOG(kWarn, "event=w");
  HAMI_LOG(kInfo, "event=i");
  HAMI_VLOG(1, "event=v1");
  std::string out = Drain();
  EXPECT_THAT(out, HasSubstr("event=e"));
  EXPECT_THAT(out, HasSubstr("event=w"));
  EXPECT_THAT(out, Not(HasSubstr("event=i")));
  EXPECT_THAT(out, Not(HasSubstr("event=v1")));
  Configure({"hami-test", Level::kError, 0});
  HAMI_LOG(kWarn, "event=w");
  EXPECT_THAT(Drain(), IsEmpty());
}

TEST_F(LogTest, ALineThatIsNotWrittenDoesNotEvaluateItsArguments) {
  int calls = 0;
  auto count = [&calls] { return ++calls; };
  HAMI_VLOG(4, "event=x n=%d", count());
  EXPECT_EQ(calls, 0);
  HAMI_LOG(kInfo, "event=x n=%d", count());
  EXPECT_EQ(calls, 1);
}

TEST_F(LogTest, ALongLineIsCutAndMarked) {
  std::string big(2 * kMaxLine, 'x');
  HAMI_LOG(kInfo, "event=big value=%s", big.c_str());
  std::string out = Drain();
  ASSERT_EQ(out.size(), size_t(kMaxLine));
  EXPECT_EQ(out.substr(out.size() - 4), "...\n");
}

TEST(LogQuoted, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(Quoted("plain-word_1.2"), "plain-word_1.2");
  EXPECT_EQ(Quoted(""), "\"\"");
  EXPECT_EQ(Quoted("two words"), "\"two words\"");
  EXPECT_EQ(Quoted("a=b"), "\"a=b\"");
  EXPECT_EQ(Quoted("say \"hi\"\\"), "\"say \\\"hi\\\"\\\\\"");
  EXPECT_EQ(Quoted("line\nnext\x01"), "\"line\\nnext\\x01\"");
}

TEST(LogLevels, ParseNamesEveryLevelAndRefusesTheRest) {
  EXPECT_EQ(*ParseLevel("error"), Level::kError);
  EXPECT_EQ(*ParseLevel("warn"), Level::kWarn);
  EXPECT_EQ(*ParseLevel("warning"), Level::kWarn);
  EXPECT_EQ(*ParseLevel("info"), Level::kInfo);
  EXPECT_EQ(*ParseLevel("debug"), Level::kDebug);
  EXPECT_EQ(*ParseLevel("trace"), Level::kTrace);
  auto bad = ParseLevel("verbose");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("--log-level='verbose': not a log level"));
}

TEST(LogFlags, TheFlagsConfigureTheProcessAndRefuseBadValues) {
  CLI::App app("daemon");
  Flags flags;
  AddFlags(app, flags);
  app.parse(std::vector<std::string>{"--log-level=debug", "--v=2"});  // reversed: CLI11's order
  ASSERT_TRUE(ApplyFlags(flags, "hami-flagtest").ok());
  Settings s = Current();
  EXPECT_EQ(s.component, "hami-flagtest");
  EXPECT_EQ(s.level, Level::kDebug);
  EXPECT_EQ(s.verbosity, 2);
  EXPECT_TRUE(V(4));

  Flags too_verbose;
  too_verbose.verbosity = 11;
  auto status = ApplyFlags(too_verbose, "x");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.error().message(), HasSubstr("--v=11: must be from 0 to 10"));
  Flags wrong;
  wrong.level = "loud";
  EXPECT_FALSE(ApplyFlags(wrong, "x").ok());
  Configure({"", Level::kInfo, 0});
}

}  // namespace
}  // namespace hami::log
