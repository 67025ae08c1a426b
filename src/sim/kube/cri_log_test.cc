// pods/log's reading of CRI log files: entries back into the container's output, the
// timestamps, since, tail and limit options, malformed lines, and the choice of a container's
// current and previous file.
#include "sim/kube/cri_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hami::sim::kube {
namespace {

hami::kube::WallTime Time(std::string_view text) {
  auto t = hami::kube::ParseTime(text);
  EXPECT_TRUE(t.ok()) << text;
  return t.ok() ? *t : hami::kube::WallTime{};
}

std::string Decode(std::string_view file, const CriLogOptions& options = {}) {
  return DecodeCriLog(file, options).text;
}

constexpr char kThreeLines[] =
    "2026-12-07T10:00:01.000000001Z stdout F one\n"
    "2026-12-07T10:00:02.5Z stderr F two\n"
    "2026-12-07T10:00:03Z stdout F three\n";

TEST(CriLog, FullEntriesEndWithANewlineAndPartialOnesJoinTheNext) {
  EXPECT_EQ(Decode("2026-12-07T10:00:00.123456789Z stdout F hello\n"), "hello\n");
  EXPECT_EQ(Decode("2026-12-07T10:00:00.1Z stdout P hel\n"
                   "2026-12-07T10:00:00.2Z stdout P l\n"
                   "2026-12-07T10:00:00.3Z stdout F o\n"
                   "2026-12-07T10:00:00.4Z stdout F world\n"),
            "hello\nworld\n");
  EXPECT_EQ(Decode("2026-12-07T10:00:00Z stdout P no newline yet\n"), "no newline yet");
  EXPECT_EQ(Decode(""), "");
}

TEST(CriLog, StdoutAndStderrInterleaveInFileOrder) {
  EXPECT_EQ(Decode(kThreeLines), "one\ntwo\nthree\n");
}

TEST(CriLog, ContentIsTheRestOfTheLineSpacesIncludedAndMayBeEmpty) {
  EXPECT_EQ(Decode("2026-12-07T10:00:00Z stdout F  two  spaces \n"
                   "2026-12-07T10:00:00Z stdout F \n"
                   "2026-12-07T10:00:00Z stderr F a b c\n"),
            " two  spaces \n\na b c\n");
}

TEST(CriLog, TagFieldsAfterAColonAreIgnored) {
  EXPECT_EQ(Decode("2026-12-07T10:00:00Z stdout P:x a\n2026-12-07T10:00:00Z stdout F:y:z b\n"),
            "ab\n");
}

TEST(CriLog, UnterminatedLastEntryIsDecoded) {
  EXPECT_EQ(Decode("2026-12-07T10:00:00Z stdout F one\n2026-12-07T10:00:01Z stdout F two"),
            "one\ntwo\n");
}

TEST(CriLog, SkipsMalformedLinesCountsThemAndNamesTheFirst) {
  const CriLogOutput out = DecodeCriLog(
      "2026-12-07T10:00:00Z stdout F kept 1\n"
      "2026-12-07T10:00:00Z stdout F\n"  // two spaces only
      "2026-12-07T10:00:00Z stdout\n"    // one
      "no-spaces-at-all\n"               // none
      "\n"                               // empty
      "2026-12-07T10:00:00Z stdin F wrong stream\n"
      "2026-12-07T10:00:00Z stdout X wrong tag\n"
      "2026-12-07T10:00:00Z stdout f lower-case tag\n"
      "2026-12-07T10:00:00Z stdout  empty tag\n"
      "yesterday stdout F bad time\n"
      "2026-12-07 stdout F date without time\n"
      "2026-12-07T10:00:00Z stdout F kept 2\n",
      {});
  EXPECT_EQ(out.text, "kept 1\nkept 2\n");
  EXPECT_EQ(out.malformed_lines, 10u);
  EXPECT_EQ(out.first_malformed_line, 2u);
  EXPECT_EQ(DecodeCriLog(kThreeLines, {}).malformed_lines, 0u);
  EXPECT_EQ(DecodeCriLog(kThreeLines, {}).first_malformed_line, 0u);
}

TEST(CriLog, MalformedLineBetweenPartialsDoesNotEndTheLine) {
  EXPECT_EQ(Decode("2026-12-07T10:00:00Z stdout P a\ngarbage\n2026-12-07T10:00:00Z stdout F b\n"),
            "ab\n");
}

TEST(CriLog, TimestampsPrefixEachLineWithTheEntryThatBeganIt) {
  CriLogOptions o;
  o.timestamps = LogTimestamps::kPrefix;
  EXPECT_EQ(Decode(kThreeLines, o),
            "2026-12-07T10:00:01.000000001Z one\n"
            "2026-12-07T10:00:02.5Z two\n"
            "2026-12-07T10:00:03Z three\n");
  EXPECT_EQ(Decode("2026-12-07T10:00:00.123456789Z stdout P hel\n"
                   "2026-12-07T10:00:09Z stdout F lo\n",
                   o),
            "2026-12-07T10:00:00.123456789Z hello\n");
  // Go's RFC3339Nano: trailing zeros dropped, no fraction when it is zero, UTC.
  EXPECT_EQ(Decode("2026-12-07T10:00:00.120000000Z stdout F a\n"
                   "2026-12-07T10:00:00.000000000Z stdout F b\n"
                   "2026-12-07T11:30:00.5+01:30 stdout F c\n",
                   o),
            "2026-12-07T10:00:00.12Z a\n2026-12-07T10:00:00Z b\n2026-12-07T10:00:00.5Z c\n");
}

TEST(CriLog, SinceLeavesOutEntriesStampedBeforeIt) {
  CriLogOptions o;
  o.since = Time("2026-12-07T10:00:02.5Z");
  EXPECT_EQ(Decode(kThreeLines, o), "two\nthree\n");
  o.since = Time("2026-12-07T10:00:02.500000001Z");
  EXPECT_EQ(Decode(kThreeLines, o), "three\n");
  o.since = Time("2026-12-08T00:00:00Z");
  EXPECT_EQ(Decode(kThreeLines, o), "");
}

TEST(CriLog, TailCountsDecodedLines) {
  constexpr char kPartials[] =
      "2026-12-07T10:00:00Z stdout P a\n"
      "2026-12-07T10:00:00Z stdout F b\n"
      "2026-12-07T10:00:00Z stdout P c\n"
      "2026-12-07T10:00:00Z stdout F d\n";
  CriLogOptions o;
  o.tail_lines = 1;
  EXPECT_EQ(Decode(kPartials, o), "cd\n");
  o.tail_lines = 2;
  EXPECT_EQ(Decode(kThreeLines, o), "two\nthree\n");
  o.tail_lines = 0;
  EXPECT_EQ(Decode(kThreeLines, o), "");
  o.tail_lines = 9;
  EXPECT_EQ(Decode(kThreeLines, o), "one\ntwo\nthree\n");
  o.tail_lines = 1;
  EXPECT_EQ(Decode("2026-12-07T10:00:00Z stdout F a\n2026-12-07T10:00:00Z stdout P b\n", o), "b");
  o.timestamps = LogTimestamps::kPrefix;
  EXPECT_EQ(Decode(kThreeLines, o), "2026-12-07T10:00:03Z three\n");
}

TEST(CriLog, LimitBytesCutsTheOutputAfterTimestampsAndTail) {
  CriLogOptions o;
  o.limit_bytes = 5;
  EXPECT_EQ(Decode(kThreeLines, o), "one\nt");
  o.limit_bytes = 100;
  EXPECT_EQ(Decode(kThreeLines, o), "one\ntwo\nthree\n");
  o.limit_bytes = 10;
  o.timestamps = LogTimestamps::kPrefix;
  o.tail_lines = 1;
  EXPECT_EQ(Decode(kThreeLines, o), "2026-12-07");
}

TEST(CriLog, RestartLogNamesAreTheKubeletsDecimalCounts) {
  EXPECT_EQ(ParseRestartLogName("0.log"), 0);
  EXPECT_EQ(ParseRestartLogName("1.log"), 1);
  EXPECT_EQ(ParseRestartLogName("12.log"), 12);
  for (const char* other :
       {"01.log", "-1.log", "-0.log", "+1.log", ".log", "x.log", "1x.log", "1.log.gz",
        "0.log.20261207-100000", "1.txt", "1", "", "99999999999999999999.log", " 1.log"}) {
    EXPECT_EQ(ParseRestartLogName(other), std::nullopt) << other;
  }
  EXPECT_EQ(RestartLogName(3), "3.log");
}

TEST(CriLog, CurrentIsTheHighestCountAndPreviousTheHighestBelowIt) {
  auto pick = [](std::vector<std::string> names) { return PickContainerLogFiles(names); };
  ContainerLogFiles f = pick({"0.log", "10.log", "2.log", "9.log", "11.log.gz", "x"});
  EXPECT_EQ(f.current, 10);
  EXPECT_EQ(f.previous, 9);
  f = pick({"3.log", "0.log"});
  EXPECT_EQ(f.current, 3);
  EXPECT_EQ(f.previous, 0) << "a gap in the counts is skipped";
  f = pick({"0.log"});
  EXPECT_EQ(f.current, 0);
  EXPECT_EQ(f.previous, std::nullopt);
  f = pick({"0.log.20261207-100000", "notes"});
  EXPECT_EQ(f.current, std::nullopt);
  EXPECT_EQ(f.previous, std::nullopt);
  EXPECT_EQ(pick({}).current, std::nullopt);
}

}  // namespace
}  // namespace hami::sim::kube
