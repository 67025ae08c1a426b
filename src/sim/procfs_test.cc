#include "sim/procfs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace hami::sim::procfs {
namespace {

TEST(SimProcfs, ReadsTheInodeOfAPidNamespaceLink) {
  EXPECT_EQ(ParsePidNsLink("pid:[4026531836]"), 4026531836u);
  EXPECT_EQ(ParsePidNsLink("pid:[1]"), 1u);
}

TEST(SimProcfs, RejectsAnyOtherNamespaceLinkText) {
  for (const char* bad : {"", "pid:[]", "pid:[12", "pid:12]", "net:[4026531836]", "pid:[12a]",
                          "pid:[-1]", "pid:[ 12]", "pid:[12] ", "pid:[99999999999999999999]"}) {
    EXPECT_EQ(ParsePidNsLink(bad), 0u) << bad;
  }
}

constexpr char kStatus[] =
    "Name:\tworker\n"
    "Tgid:\t7\n"
    "NStgid:\t4242\t17\t7\n"
    "Pid:\t7\n"
    "PPid:\t3\n"
    "NSpid:\t4243\t18\t8\n";

TEST(SimProcfs, ReadsEveryLevelOfTheNamespacePidLines) {
  EXPECT_EQ(ParseStatusPids(kStatus, "NStgid"), (std::vector<pid_t>{4242, 17, 7}));
  EXPECT_EQ(ParseStatusPids(kStatus, "NSpid"), (std::vector<pid_t>{4243, 18, 8}));
  EXPECT_EQ(ParseStatusPids("NStgid:\t5", "NStgid"), (std::vector<pid_t>{5}))
      << "the last line needs no newline";
  EXPECT_EQ(ParseStatusParent(kStatus), 3);
}

TEST(SimProcfs, RejectsANamespacePidLineThatIsMissingEmptyOrMalformed) {
  EXPECT_TRUE(ParseStatusPids("Name:\tx\nTgid:\t7\n", "NStgid").empty()) << "missing";
  EXPECT_TRUE(ParseStatusPids("NStgid:\t\n", "NStgid").empty()) << "empty";
  EXPECT_TRUE(ParseStatusPids("NStgid:\t12\tx\n", "NStgid").empty()) << "not a number";
  EXPECT_TRUE(ParseStatusPids("NStgid:\t12\t0\n", "NStgid").empty()) << "PID 0";
  EXPECT_TRUE(ParseStatusPids("NStgid:\t-3\n", "NStgid").empty()) << "negative";
  EXPECT_TRUE(ParseStatusPids("NStgid:\t2147483648\n", "NStgid").empty()) << "past pid_t";
  EXPECT_TRUE(ParseStatusPids("XNStgid:\t12\n", "NStgid").empty()) << "another key's suffix";
  EXPECT_TRUE(ParseStatusPids("NStgidx:\t12\n", "NStgid").empty()) << "a longer key";
  EXPECT_EQ(ParseStatusParent("PPid:\tx\n"), 0);
  EXPECT_EQ(ParseStatusParent("Name:\tx\n"), 0);
}

TEST(SimProcfs, FindsTheStartTimeAfterACommandNameWithSpacesAndParentheses) {
  std::string stat = "42 (a b) c) S";
  for (int field = 4; field <= 21; ++field) stat += " " + std::to_string(field);
  stat += " 987654 23 24\n";
  EXPECT_EQ(ParseStatStartTicks(stat), 987654u);
  EXPECT_EQ(ParseStatStartTicks("42 (x) S 1 2 3\n"), 0u) << "too few fields";
  EXPECT_EQ(ParseStatStartTicks("42 x S 1 2 3\n"), 0u) << "no command name";
}

TEST(SimProcfs, ReadsThisProcessAsTheKernelShowsIt) {
  struct stat st;
  ASSERT_EQ(stat("/proc/self/ns/pid", &st), 0);
  EXPECT_EQ(PidNsInode(), uint64_t(st.st_ino));
  EXPECT_EQ(PidNsInode(getpid()), uint64_t(st.st_ino));
  std::vector<pid_t> ids = NsTgids();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), getpid());
  EXPECT_EQ(ParentPid(), getppid());
  EXPECT_GT(StartTicks(), 0u);
  EXPECT_EQ(StartTicks(), StartTicks(getpid()));
  EXPECT_FALSE(Comm().empty());
  EXPECT_EQ(Comm().find('\n'), std::string::npos);
}

TEST(SimProcfs, AProcessThatDoesNotExistReadsAsUnknown) {
  const pid_t none = 0x7ffffffe;  // above any pid_max the kernel allows
  EXPECT_EQ(PidNsInode(none), 0u);
  EXPECT_TRUE(NsTgids(none).empty());
  EXPECT_EQ(ParentPid(none), 0);
  EXPECT_EQ(StartTicks(none), 0u);
}

}  // namespace
}  // namespace hami::sim::procfs
