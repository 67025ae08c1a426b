#include "vgpu/nstgid.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hami::vgpu {
namespace {

// "" for a success, else the Error's text.
struct Parsed {
  std::string error;
  std::vector<pid_t> pids;
};

Parsed Parse(std::string_view text, size_t capacity = kMaxPidNamespaceLevels) {
  pid_t pids[kMaxPidNamespaceLevels + 1] = {};
  size_t n = 99;
  Status s = ParseNStgid(text, pids, capacity, &n);
  return {s.ok() ? "" : std::string(s.error().text()), std::vector<pid_t>(pids, pids + n)};
}

constexpr std::string_view kStatus =
    "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t37\nNgid:\t0\nPid:\t37\n"
    "PPid:\t1\nNStgid:\t8011\t37\nNSpid:\t8011\t37\nNSpgid:\t8011\t37\n";

TEST(NStgid, TakesEveryLevelOfARealStatusFileFirstIsTheOutermost) {
  Parsed p = Parse(kStatus);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.pids, (std::vector<pid_t>{8011, 37}));
}

TEST(NStgid, OneLevelAndTheLastLineWithoutANewline) {
  EXPECT_EQ(Parse("Tgid:\t5\nNStgid:\t5").pids, (std::vector<pid_t>{5}));
  EXPECT_EQ(Parse("NStgid:\t2147483647\n").pids, (std::vector<pid_t>{2147483647}));
  EXPECT_EQ(Parse("NStgid: 7  8\t 9 \n").pids, (std::vector<pid_t>{7, 8, 9}));
}

TEST(NStgid, RejectsWhatIsNotExactlyTheField) {
  EXPECT_EQ(Parse("").error, "no NStgid field");
  EXPECT_EQ(Parse("Tgid:\t5\nNSpid:\t5\n").error, "no NStgid field");
  EXPECT_EQ(Parse("nstgid:\t5\n").error, "no NStgid field");
  EXPECT_EQ(Parse(" NStgid:\t5\n").error, "no NStgid field");
  EXPECT_EQ(Parse("XNStgid:\t5\n").error, "no NStgid field");
  EXPECT_EQ(Parse("NStgid\t5\n").error, "no NStgid field");
  EXPECT_EQ(Parse("NStgid:\t5\nNStgid:\t6\n").error, "NStgid field repeated");
}

TEST(NStgid, RejectsAnEmptyList) {
  EXPECT_EQ(Parse("NStgid:\n").error, "NStgid field empty");
  EXPECT_EQ(Parse("NStgid:\t \t\nTgid:\t5\n").error, "NStgid field empty");
  EXPECT_EQ(Parse("NStgid:").error, "NStgid field empty");
}

TEST(NStgid, RejectsZeroNegativeSignsAndLeadingZeros) {
  EXPECT_EQ(Parse("NStgid:\t0\n").error, "NStgid field holds PID 0");
  EXPECT_EQ(Parse("NStgid:\t8011\t0\n").error, "NStgid field holds PID 0");
  EXPECT_EQ(Parse("NStgid:\t-5\n").error, "NStgid field holds something other than PIDs");
  EXPECT_EQ(Parse("NStgid:\t+5\n").error, "NStgid field holds something other than PIDs");
  EXPECT_EQ(Parse("NStgid:\t05\n").error, "NStgid field holds something other than PIDs");
  EXPECT_EQ(Parse("NStgid:\t0x10\n").error, "NStgid field holds something other than PIDs");
}

TEST(NStgid, RejectsValuesAboveIntMax) {
  EXPECT_EQ(Parse("NStgid:\t2147483648\n").error, "NStgid field holds a PID above INT_MAX");
  EXPECT_EQ(Parse("NStgid:\t99999999999999999999999\n").error,
            "NStgid field holds a PID above INT_MAX");
}

TEST(NStgid, RejectsTrailingJunk) {
  EXPECT_EQ(Parse("NStgid:\t8011abc\n").error, "NStgid field holds something other than PIDs");
  EXPECT_EQ(Parse("NStgid:\t8011\t37 x\n").error, "NStgid field holds something other than PIDs");
  EXPECT_EQ(Parse("NStgid:\t8011\r\n").error, "NStgid field holds something other than PIDs");
  EXPECT_EQ(Parse(std::string_view("NStgid:\t8011\0\n", 14)).error,
            "NStgid field holds something other than PIDs");
}

TEST(NStgid, RejectsMoreLevelsThanFit) {
  EXPECT_EQ(Parse("NStgid:\t1\t2\t3\n", 2).error,
            "NStgid field lists more PID namespace levels than fit");
  EXPECT_EQ(Parse("NStgid:\t1\t2\n", 2).pids, (std::vector<pid_t>{1, 2}));
  EXPECT_EQ(Parse("NStgid:\t1\n", 0).error,
            "NStgid field lists more PID namespace levels than fit");
}

TEST(NStgid, TooManyLevelsIsUnsupportedNotMalformed) {
  pid_t pids[2];
  size_t n = 0;
  Status s = ParseNStgid("NStgid:\t1\t2\t3\n", pids, 2, &n);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kUnsupported);
}

TEST(NStgid, ErrorLeavesNoCount) {
  pid_t pids[4];
  size_t n = 7;
  Status s = ParseNStgid("NStgid:\t5\t6x\n", pids, 4, &n);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(n, 0u);
}

}  // namespace
}  // namespace hami::vgpu
