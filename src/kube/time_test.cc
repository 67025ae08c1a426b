#include "kube/time.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace hami::kube {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

// 2026-12-01T09:15:39Z, worked out by hand: 20788 days after 1970-01-01, plus 33339 s.
constexpr int64_t kExampleSeconds = 20788LL * 86400 + 9 * 3600 + 15 * 60 + 39;

WallTime Example(nanoseconds extra = nanoseconds(0)) {
  return WallTime(seconds(kExampleSeconds)) + extra;
}

TEST(FormatTime, WritesSecondsInUtcWithZ) {
  EXPECT_EQ(FormatTime(Example()), "2026-12-01T09:15:39Z");
  EXPECT_EQ(FormatTime(WallTime(seconds(0))), "1970-01-01T00:00:00Z");
}

TEST(FormatTime, TruncatesTheFractionInsteadOfRounding) {
  EXPECT_EQ(FormatTime(Example(nanoseconds(999'999'999))), "2026-12-01T09:15:39Z");
}

TEST(FormatTime, HandlesTimesBeforeTheEpochAndLeapDays) {
  EXPECT_EQ(FormatTime(WallTime(seconds(-1))), "1969-12-31T23:59:59Z");
  EXPECT_EQ(FormatTime(WallTime(nanoseconds(-1))), "1969-12-31T23:59:59Z");
  // 2024-02-29T12:00:00Z: 19782 days after the epoch.
  EXPECT_EQ(FormatTime(WallTime(seconds(19782LL * 86400 + 12 * 3600))), "2024-02-29T12:00:00Z");
}

TEST(FormatMicroTime, WritesSixFractionDigits) {
  EXPECT_EQ(FormatMicroTime(Example(microseconds(169933))), "2026-12-01T09:15:39.169933Z");
  EXPECT_EQ(FormatMicroTime(Example()), "2026-12-01T09:15:39.000000Z");
  EXPECT_EQ(FormatMicroTime(Example(nanoseconds(1999))), "2026-12-01T09:15:39.000001Z");
  EXPECT_EQ(FormatMicroTime(WallTime(microseconds(-1))), "1969-12-31T23:59:59.999999Z");
}

TEST(ParseTime, ReadsWhatFormatWrites) {
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39Z"), Example());
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39.169933Z"), Example(microseconds(169933)));
  const WallTime now = std::chrono::time_point_cast<microseconds>(std::chrono::system_clock::now());
  EXPECT_EQ(*ParseTime(FormatMicroTime(now)), now);
  EXPECT_EQ(*ParseTime(FormatTime(now)), std::chrono::floor<seconds>(now));
}

TEST(ParseTime, AcceptsLowercaseZAndOffsets) {
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39z"), Example());
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39+00:00"), Example());
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39-00:00"), Example());
  EXPECT_EQ(*ParseTime("2026-12-01T11:45:39+02:30"), Example());
  EXPECT_EQ(*ParseTime("2026-12-01T02:15:39-07:00"), Example());
  EXPECT_EQ(*ParseTime("2026-11-30T23:15:39-10:00"), Example());
  EXPECT_EQ(*ParseTime("2026-12-02T00:15:39+15:00"), Example());
}

TEST(ParseTime, AcceptsFractionsOfAnyLength) {
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39.1Z"), Example(nanoseconds(100'000'000)));
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39.169933+00:00"), Example(microseconds(169933)));
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39.123456789Z"), Example(nanoseconds(123456789)));
  // Beyond nanoseconds the digits are dropped (truncation).
  EXPECT_EQ(*ParseTime("2026-12-01T09:15:39.1234567899999Z"), Example(nanoseconds(123456789)));
}

TEST(ParseTime, AcceptsLeapDaysAndRejectsDaysThatDoNotExist) {
  EXPECT_TRUE(ParseTime("2024-02-29T00:00:00Z").ok());
  EXPECT_TRUE(ParseTime("2000-02-29T00:00:00Z").ok());
  for (const char* bad : {"2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
                          "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-01-00T00:00:00Z"}) {
    auto r = ParseTime(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.error().message(), HasSubstr("no such date")) << bad;
  }
}

TEST(ParseTime, RejectsTimesOfDayAndOffsetsOutOfRange) {
  for (const char* bad : {"2026-12-01T24:00:00Z", "2026-12-01T09:60:00Z", "2026-12-01T09:15:60Z"}) {
    auto r = ParseTime(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.error().message(), HasSubstr("no such time of day")) << bad;
  }
  for (const char* bad : {"2026-12-01T09:15:39+24:00", "2026-12-01T09:15:39+01:60"}) {
    auto r = ParseTime(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.error().message(), HasSubstr("no such offset")) << bad;
  }
}

TEST(ParseTime, RejectsMalformedTextNamingIt) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c : {
           Case{"", "the date is not YYYY-MM-DD"},
           Case{"2026-12-1T09:15:39Z", "the date is not YYYY-MM-DD"},
           Case{"26-12-01T09:15:39Z", "the date is not YYYY-MM-DD"},
           Case{"2026/12/01T09:15:39Z", "the date is not YYYY-MM-DD"},
           Case{"-026-12-01T09:15:39Z", "the date is not YYYY-MM-DD"},
           Case{"2026-12-01", "expected 'T'"},
           Case{"2026-12-01 09:15:39Z", "expected 'T'"},
           Case{"2026-12-01t09:15:39Z", "expected 'T'"},
           Case{"2026-12-01T9:15:39Z", "hh:mm:ss"},
           Case{"2026-12-01T09:15Z", "hh:mm:ss"},
           Case{"2026-12-01T09:15:3xZ", "hh:mm:ss"},
           Case{"2026-12-01T09:15:39", "expected 'Z' or an offset"},
           Case{"2026-12-01T09:15:39.169933", "expected 'Z' or an offset"},
           Case{"2026-12-01T09:15:39 Z", "expected 'Z' or an offset"},
           Case{"2026-12-01T09:15:39UTC", "expected 'Z' or an offset"},
           Case{"2026-12-01T09:15:39.Z", "no digits after the decimal point"},
           Case{"2026-12-01T09:15:39,5Z", "expected 'Z' or an offset"},
           Case{"2026-12-01T09:15:39+0200", "+hh:mm"},
           Case{"2026-12-01T09:15:39+02", "+hh:mm"},
           Case{"2026-12-01T09:15:39+2:00", "+hh:mm"},
           Case{"2026-12-01T09:15:39ZZ", "unexpected text after the offset"},
           Case{"2026-12-01T09:15:39Z ", "unexpected text after the offset"},
           Case{"2026-12-01T09:15:39+02:00:00", "unexpected text after the offset"},
       }) {
    auto r = ParseTime(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message(), HasSubstr(std::string("\"") + c.text + "\"")) << c.text;
    EXPECT_THAT(r.error().message(), HasSubstr(c.why)) << c.text;
  }
}

TEST(ParseTime, RejectsYearsThisClockCannotRepresent) {
  // The clock counts nanoseconds in 64 bits: about 1677 to 2262.
  for (const char* bad : {"9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"}) {
    auto r = ParseTime(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.error().message(), HasSubstr("outside the range")) << bad;
  }
  EXPECT_TRUE(ParseTime("2200-01-01T00:00:00Z").ok());
  EXPECT_TRUE(ParseTime("1700-01-01T00:00:00Z").ok());
}

TEST(Time, FormatsAndParsesFromManyThreadsAtOnce) {
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < 2000; ++i) {
        const WallTime when = Example(microseconds((t * 7919 + i) * 1'000'003LL));
        auto back = ParseTime(FormatMicroTime(when));
        if (!back.ok() || *back != when) ++failures[size_t(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

}  // namespace
}  // namespace hami::kube
