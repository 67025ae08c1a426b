#include "common/parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami {
namespace {

using ::testing::HasSubstr;

TEST(ParseUint64, AcceptsDecimalDigits) {
  EXPECT_EQ(*ParseUint64("0", "X"), 0u);
  EXPECT_EQ(*ParseUint64("18446744073709551615", "X"), UINT64_MAX);
}

TEST(ParseUint64, RejectsEmptySignsSpacesJunkAndOverflowNamingTheInput) {
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1x", "0x10", "18446744073709551616"}) {
    auto r = ParseUint64(bad, "HAMI_X");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message(), HasSubstr("HAMI_X='"));
    EXPECT_THAT(r.error().message(), HasSubstr(bad));
  }
}

TEST(ParseInt64, AcceptsTheFullRange) {
  EXPECT_EQ(*ParseInt64("-9223372036854775808", "X"), INT64_MIN);
  EXPECT_EQ(*ParseInt64("9223372036854775807", "X"), INT64_MAX);
  EXPECT_EQ(*ParseInt64("-5", "X"), -5);
}

TEST(ParseInt64, RejectsOutOfRangeAndJunk) {
  EXPECT_FALSE(ParseInt64("9223372036854775808", "X").ok());
  EXPECT_FALSE(ParseInt64("-9223372036854775809", "X").ok());
  EXPECT_FALSE(ParseInt64("-", "X").ok());
  EXPECT_FALSE(ParseInt64("--1", "X").ok());
}

TEST(ParseSize, UsesBinarySuffixes) {
  EXPECT_EQ(*ParseSize("4096", "X"), 4096u);
  EXPECT_EQ(*ParseSize("1k", "X"), 1024u);
  EXPECT_EQ(*ParseSize("3000m", "X"), 3000ull << 20);
  EXPECT_EQ(*ParseSize("2G", "X"), 2ull << 30);
  EXPECT_EQ(*ParseSize("1t", "X"), 1ull << 40);
  EXPECT_EQ(*ParseSize("0", "X"), 0u);
}

TEST(ParseSize, RejectsUnknownSuffixesDoubleSuffixesAndOverflow) {
  EXPECT_THAT(ParseSize("3x", "LIMIT").error().message(), HasSubstr("unknown size suffix"));
  EXPECT_FALSE(ParseSize("3mb", "LIMIT").ok());
  EXPECT_FALSE(ParseSize("m", "LIMIT").ok());
  EXPECT_FALSE(ParseSize("-1m", "LIMIT").ok());
  EXPECT_THAT(ParseSize("17179869184g", "LIMIT").error().message(), HasSubstr("too large"));
}

TEST(ParseBool, AcceptsCommonSpellings) {
  EXPECT_TRUE(*ParseBool("1", "X"));
  EXPECT_TRUE(*ParseBool("TRUE", "X"));
  EXPECT_TRUE(*ParseBool("on", "X"));
  EXPECT_FALSE(*ParseBool("0", "X"));
  EXPECT_FALSE(*ParseBool("No", "X"));
  EXPECT_FALSE(ParseBool("2", "X").ok());
  EXPECT_FALSE(ParseBool("", "X").ok());
}

TEST(FormatBytes, PicksAReadableUnit) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3ull << 20), "3.0 MiB");
  EXPECT_EQ(FormatBytes(80ull << 30), "80.0 GiB");
}

}  // namespace
}  // namespace hami
