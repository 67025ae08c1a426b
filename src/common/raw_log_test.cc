#include "common/raw_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/captured_log.h"

namespace hami {
namespace {

using ::testing::HasSubstr;

class RawLogTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(log_.ok()); }
  CapturedLog log_;
};

TEST_F(RawLogTest, WritesOneTaggedLinePerCallAtOrAboveTheLevel) {
  log_.logger().Log(LogLevel::kError, "bad value %d", 7);
  log_.logger().Log(LogLevel::kInfo, "hidden");
  std::string out = log_.Drain();
  EXPECT_THAT(out, HasSubstr("[test pid="));
  EXPECT_THAT(out, HasSubstr("ERROR] bad value 7\n"));
  EXPECT_EQ(out.find("hidden"), std::string::npos);
}

TEST_F(RawLogTest, TruncatesLongLinesAndKeepsTheNewline) {
  std::string big(5000, 'x');
  log_.logger().Log(LogLevel::kError, "%s", big.c_str());
  std::string out = log_.Drain();
  EXPECT_EQ(out.size(), size_t(RawLogger::kMaxLine));
  EXPECT_EQ(out.substr(out.size() - 4), "...\n");
}

TEST_F(RawLogTest, LevelCanBeChanged) {
  log_.logger().set_level(LogLevel::kDebug);
  log_.logger().Log(LogLevel::kDebug, "now visible");
  EXPECT_THAT(log_.Drain(), HasSubstr("DEBUG] now visible"));
}

TEST_F(RawLogTest, AlwaysWritesEvenWhenTheLogIsOff) {
  log_.logger().set_level(LogLevel::kOff);
  log_.logger().Log(LogLevel::kError, "dropped");
  log_.logger().Always(LogLevel::kError, "limit %s unreadable", "X");
  std::string out = log_.Drain();
  EXPECT_THAT(out, HasSubstr("ERROR] limit X unreadable\n"));
  EXPECT_EQ(out.find("dropped"), std::string::npos);
}

}  // namespace
}  // namespace hami
