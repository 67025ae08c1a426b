#include "cli/option_words.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hami::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The shapes `hami run` has: flags with and without a short name, options with a value.
class OptionWordsTest : public ::testing::Test {
 protected:
  OptionWordsTest() : app_("run") {
    app_.add_flag("-q,--quiet", quiet_);
    app_.add_flag("--limits-file-mount", mount_);
    app_.add_option("--memory", memory_);
    app_.add_option("--sm", sm_);
    app_.add_option("-d,--devices", devices_);
    app_.add_option("command", command_);
  }
  std::string Check(std::vector<std::string> words) { return CheckOptionWords(app_, words); }

  CLI::App app_;
  bool quiet_ = false, mount_ = false;
  std::string memory_, sm_, devices_;
  std::vector<std::string> command_;
};

TEST_F(OptionWordsTest, AcceptsEveryWayCli11TakesAKnownOption) {
  EXPECT_THAT(Check({"--memory=2g", "--", "echo"}), IsEmpty());
  EXPECT_THAT(Check({"--memory", "2g", "--sm", "30", "echo", "--memroy"}), IsEmpty());
  EXPECT_THAT(Check({"-q", "--limits-file-mount", "--", "x"}), IsEmpty());
  EXPECT_THAT(Check({"-qd0", "x"}), IsEmpty());
  EXPECT_THAT(Check({"-qd", "0", "x"}), IsEmpty());
  EXPECT_THAT(Check({"--help"}), IsEmpty());
  EXPECT_THAT(Check({"-h"}), IsEmpty());
  EXPECT_THAT(Check({}), IsEmpty());
}

TEST_F(OptionWordsTest, StopsAtTheProgramOrAtDoubleDash) {
  // What follows the program, or "--", is the program's: its options are not ours.
  EXPECT_THAT(Check({"python3", "--memroy", "-x"}), IsEmpty());
  EXPECT_THAT(Check({"--", "--memroy"}), IsEmpty());
  EXPECT_THAT(Check({"-", "--memroy"}), IsEmpty());
}

TEST_F(OptionWordsTest, AValueThatLooksLikeAnOptionIsAValue) {
  EXPECT_THAT(Check({"--devices", "-1", "--", "x"}), IsEmpty());
}

TEST_F(OptionWordsTest, RefusesAMisspeltLongOptionInBothForms) {
  std::string joined = Check({"--sm", "30", "--memroy=2g", "--", "echo", "hello"});
  EXPECT_THAT(joined, HasSubstr("unknown option '--memroy=2g'"));
  EXPECT_THAT(joined, HasSubstr("did you mean --memory?"));
  std::string spaced = Check({"--memroy", "2g", "./grab"});
  EXPECT_THAT(spaced, HasSubstr("unknown option '--memroy'"));
  EXPECT_THAT(spaced, HasSubstr("did you mean --memory?"));
}

TEST_F(OptionWordsTest, SuggestsOnlyWhatIsNear) {
  EXPECT_EQ(ClosestOption(app_, "--memroy"), "--memory");
  EXPECT_EQ(ClosestOption(app_, "--mem"), "--memory");
  EXPECT_EQ(ClosestOption(app_, "--smm"), "--sm");
  EXPECT_EQ(ClosestOption(app_, "--quite"), "--quiet");
  EXPECT_EQ(ClosestOption(app_, "--limit-file-mount"), "--limits-file-mount");
  EXPECT_EQ(ClosestOption(app_, "--frobnicate"), "");
  std::string far = Check({"--frobnicate", "--", "x"});
  EXPECT_THAT(far, HasSubstr("unknown option '--frobnicate'"));
  EXPECT_THAT(far, ::testing::Not(HasSubstr("did you mean")));
}

TEST_F(OptionWordsTest, RefusesUnknownShortNames) {
  EXPECT_THAT(Check({"-m", "2g", "--", "x"}), HasSubstr("unknown option '-m'"));
  EXPECT_THAT(Check({"-qz", "x"}), HasSubstr("unknown option '-z' in '-qz'"));
}

TEST_F(OptionWordsTest, AnOptionWithoutItsValueIsNamed) {
  EXPECT_THAT(Check({"--memory"}), HasSubstr("option --memory needs a value"));
  EXPECT_THAT(Check({"-d"}), HasSubstr("option -d needs a value"));
}

}  // namespace
}  // namespace hami::cli
