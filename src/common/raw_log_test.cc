#include "common/raw_log.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

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

class RawLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pipe2(fds_, O_NONBLOCK | O_CLOEXEC), 0);
    logger_.set_fd(fds_[1]);
  }
  void TearDown() override {
    close(fds_[0]);
    close(fds_[1]);
  }
  int fds_[2];
  RawLogger logger_{"test", LogLevel::kWarn};
};

TEST_F(RawLogTest, WritesOneTaggedLinePerCallAtOrAboveTheLevel) {
  logger_.Log(LogLevel::kError, "bad value %d", 7);
  logger_.Log(LogLevel::kInfo, "hidden");
  std::string out = Drain(fds_[0]);
  EXPECT_THAT(out, HasSubstr("[test pid="));
  EXPECT_THAT(out, HasSubstr("ERROR] bad value 7\n"));
  EXPECT_EQ(out.find("hidden"), std::string::npos);
}

TEST_F(RawLogTest, TruncatesLongLinesAndKeepsTheNewline) {
  std::string big(5000, 'x');
  logger_.Log(LogLevel::kError, "%s", big.c_str());
  std::string out = Drain(fds_[0]);
  EXPECT_EQ(out.size(), size_t(RawLogger::kMaxLine));
  EXPECT_EQ(out.substr(out.size() - 4), "...\n");
}

TEST_F(RawLogTest, LevelCanBeChanged) {
  logger_.set_level(LogLevel::kDebug);
  logger_.Log(LogLevel::kDebug, "now visible");
  EXPECT_THAT(Drain(fds_[0]), HasSubstr("DEBUG] now visible"));
}

TEST_F(RawLogTest, AlwaysWritesEvenWhenTheLogIsOff) {
  logger_.set_level(LogLevel::kOff);
  logger_.Log(LogLevel::kError, "dropped");
  logger_.Always(LogLevel::kError, "limit %s unreadable", "X");
  std::string out = Drain(fds_[0]);
  EXPECT_THAT(out, HasSubstr("ERROR] limit X unreadable\n"));
  EXPECT_EQ(out.find("dropped"), std::string::npos);
}

}  // namespace
}  // namespace hami
