#include "kube/selector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace hami::kube {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Labels = std::map<std::string, std::string>;
using Op = LabelSelector::Op;

LabelSelector MustParse(std::string_view text) {
  auto s = LabelSelector::Parse(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.error().message();
  return s.ok() ? *s : LabelSelector();
}

FieldSelector MustParseField(std::string_view text) {
  auto s = FieldSelector::Parse(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.error().message();
  return s.ok() ? *s : FieldSelector();
}

TEST(LabelSelector, EmptyOrBlankSelectsEverything) {
  for (const char* text : {"", "  ", "\t\n"}) {
    LabelSelector s = MustParse(text);
    EXPECT_TRUE(s.empty());
    EXPECT_TRUE(s.Matches(Labels{}));
    EXPECT_TRUE(s.Matches(nlohmann::json::object()));
    EXPECT_EQ(s.String(), "");
  }
}

TEST(LabelSelector, ParsesEveryOperator) {
  LabelSelector s = MustParse("a=1,b==2,c!=3,d in (x,y),e notin (z),f,!g");
  const auto& r = s.requirements();
  ASSERT_EQ(r.size(), 7u);
  EXPECT_EQ(r[0].key, "a");
  EXPECT_EQ(r[0].op, Op::kEquals);
  EXPECT_THAT(r[0].values, ElementsAre("1"));
  EXPECT_EQ(r[1].op, Op::kEquals);
  EXPECT_THAT(r[1].values, ElementsAre("2"));
  EXPECT_EQ(r[2].op, Op::kNotEquals);
  EXPECT_EQ(r[3].op, Op::kIn);
  EXPECT_THAT(r[3].values, ElementsAre("x", "y"));
  EXPECT_EQ(r[4].op, Op::kNotIn);
  EXPECT_THAT(r[4].values, ElementsAre("z"));
  EXPECT_EQ(r[5].op, Op::kExists);
  EXPECT_TRUE(r[5].values.empty());
  EXPECT_EQ(r[6].key, "g");
  EXPECT_EQ(r[6].op, Op::kDoesNotExist);
  EXPECT_EQ(s.String(), "a=1,b=2,c!=3,d in (x,y),e notin (z),f,!g");
}

TEST(LabelSelector, ToleratesWhitespaceAroundOperatorsParenthesesAndCommas) {
  LabelSelector s = MustParse("  a = 1 , b  !=  2,c in(x , y ) ,d notin( z),  ! e ,f  ");
  EXPECT_EQ(s.String(), "a=1,b!=2,c in (x,y),d notin (z),!e,f");
}

TEST(LabelSelector, AcceptsPrefixedKeysAndTheFullValueSyntax) {
  LabelSelector s = MustParse("hami.io/vgpu-node=node-1,app.kubernetes.io/name in (A_b.c-9,x)");
  EXPECT_EQ(s.requirements()[0].key, "hami.io/vgpu-node");
  EXPECT_THAT(s.requirements()[1].values, ElementsAre("A_b.c-9", "x"));
  MustParse(std::string(63, 'k') + "=" + std::string(63, 'v'));
  std::string prefix = std::string(63, 'p') + "." + std::string(63, 'p') + "." +
                       std::string(63, 'p') + "." + std::string(61, 'p');  // 253 characters
  MustParse(prefix + "/k");
}

TEST(LabelSelector, AcceptsEmptyValuesAsTheApiServerDoes) {
  EXPECT_THAT(MustParse("a=").requirements()[0].values, ElementsAre(""));
  EXPECT_THAT(MustParse("a!=,b=c").requirements()[0].values, ElementsAre(""));
  EXPECT_THAT(MustParse("a in ()").requirements()[0].values, ElementsAre(""));
  EXPECT_THAT(MustParse("a in (,x)").requirements()[0].values, ElementsAre("", "x"));
  EXPECT_THAT(MustParse("a in (x,)").requirements()[0].values, ElementsAre("", "x"));
  EXPECT_THAT(MustParse("a in (x,,y)").requirements()[0].values, ElementsAre("", "x", "y"));
  EXPECT_TRUE(MustParse("a=").Matches(Labels{{"a", ""}}));
  EXPECT_FALSE(MustParse("a=").Matches(Labels{}));
}

TEST(LabelSelector, KeepsSetsSortedWithoutDuplicates) {
  LabelSelector s = MustParse("a in (y,x,y,x)");
  EXPECT_THAT(s.requirements()[0].values, ElementsAre("x", "y"));
  EXPECT_EQ(s.String(), "a in (x,y)");
}

TEST(LabelSelector, KeywordsAreValuesInsideSetsAndAfterEquals) {
  EXPECT_THAT(MustParse("a=in").requirements()[0].values, ElementsAre("in"));
  EXPECT_THAT(MustParse("a in (in,notin)").requirements()[0].values, ElementsAre("in", "notin"));
}

TEST(LabelSelector, MatchesAsTheApiServerDoes) {
  const Labels labels{{"env", "prod"}, {"tier", "web"}, {"hami.io/gpu", "a100"}};
  struct Case {
    const char* selector;
    bool matches;
  };
  for (const Case& c : {
           Case{"env=prod", true},
           Case{"env==prod", true},
           Case{"env=dev", false},
           Case{"missing=x", false},
           Case{"env!=dev", true},
           Case{"env!=prod", false},
           Case{"missing!=x", true},
           Case{"env in (dev,prod)", true},
           Case{"env in (dev,qa)", false},
           Case{"missing in (x)", false},
           Case{"env notin (dev,qa)", true},
           Case{"env notin (prod)", false},
           Case{"missing notin (x)", true},
           Case{"env", true},
           Case{"missing", false},
           Case{"!missing", true},
           Case{"!env", false},
           Case{"hami.io/gpu=a100,tier=web,env", true},
           Case{"hami.io/gpu=a100,tier=db", false},
       }) {
    LabelSelector s = MustParse(c.selector);
    EXPECT_EQ(s.Matches(labels), c.matches) << c.selector;
    nlohmann::json object = {{"metadata", {{"labels", labels}}}};
    EXPECT_EQ(s.Matches(object), c.matches) << c.selector;
  }
}

TEST(LabelSelector, ObjectsWithoutUsableLabelsHaveNoLabels) {
  LabelSelector absent = MustParse("!a");
  LabelSelector present = MustParse("a");
  for (const nlohmann::json& object : {
           nlohmann::json::object(),
           nlohmann::json{{"metadata", nullptr}},
           nlohmann::json{{"metadata", {{"labels", "a=b"}}}},
           nlohmann::json{{"metadata", {{"labels", {{"a", 1}}}}}},
           nlohmann::json::array(),
       }) {
    EXPECT_TRUE(absent.Matches(object)) << object.dump();
    EXPECT_FALSE(present.Matches(object)) << object.dump();
  }
}

TEST(LabelSelector, StringParsesBackToTheSameRequirements) {
  for (const char* text : {"a=1", "a in (,b)", "!x/y", "a.b/c notin (d,e),f!=,g=h"}) {
    LabelSelector s = MustParse(text);
    LabelSelector again = MustParse(s.String());
    EXPECT_EQ(again.String(), s.String()) << text;
    ASSERT_EQ(again.requirements().size(), s.requirements().size());
    for (size_t i = 0; i < s.requirements().size(); ++i) {
      EXPECT_EQ(again.requirements()[i].key, s.requirements()[i].key);
      EXPECT_EQ(again.requirements()[i].op, s.requirements()[i].op);
      EXPECT_EQ(again.requirements()[i].values, s.requirements()[i].values);
    }
  }
}

void ExpectLabelError(std::string_view text, std::string_view why) {
  auto s = LabelSelector::Parse(text);
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.error().message(),
              HasSubstr("invalid label selector \"" + std::string(text) + "\""));
  EXPECT_THAT(s.error().message(), HasSubstr(why)) << text;
}

TEST(LabelSelector, RejectsMisplacedCommasAndOperators) {
  ExpectLabelError("a=b,", "expected a label key, found the end");
  ExpectLabelError(",a=b", "expected a label key, found ','");
  ExpectLabelError("a=b,,c=d", "expected a label key, found ','");
  ExpectLabelError("!", "expected a label key after '!', found the end");
  ExpectLabelError("!=a", "expected a label key, found '!='");
  ExpectLabelError("!a=b", "expected ',' or the end after \"!a\", found '='");
  ExpectLabelError("a=b c", "expected ',' or the end after \"a=b\", found 'c'");
  ExpectLabelError("a=b=c", "expected ',' or the end after \"a=b\", found '='");
  ExpectLabelError("a in (b))", "expected ',' or the end after \"a in (b)\", found ')'");
  ExpectLabelError("a b", "expected an operator (=, ==, !=, in, notin) after key \"a\", found 'b'");
  ExpectLabelError("a(b)", "after key \"a\", found '('");
  ExpectLabelError("a!b", "after key \"a\", found '!'");
  ExpectLabelError("a=(b)", "expected a value after \"a=\", found '('");
  ExpectLabelError("a===b", "expected a value after \"a==\", found '='");
  ExpectLabelError("a!=!b", "expected a value after \"a!=\", found '!'");
}

TEST(LabelSelector, RejectsOperatorsItDoesNotSupportAndKeywordsAsKeys) {
  ExpectLabelError("a>1", "operator '>' after key \"a\" is not supported");
  ExpectLabelError("a<1", "operator '<' after key \"a\" is not supported");
  ExpectLabelError("in=a", "'in' is an operator, not a label key");
  ExpectLabelError("!notin", "'notin' is an operator, not a label key");
}

TEST(LabelSelector, RejectsMalformedSets) {
  ExpectLabelError("a in b", "expected '(' after \"a in\", found 'b'");
  ExpectLabelError("a notin", "expected '(' after \"a notin\", found the end");
  ExpectLabelError("a in (b", "expected ',' or ')' in the set of key \"a\", found the end");
  ExpectLabelError("a in (b c)", "expected ',' or ')' in the set of key \"a\", found 'c'");
  ExpectLabelError("a in (=)", "expected ',' or ')' in the set of key \"a\", found '='");
  ExpectLabelError("a in ((b))", "expected ',' or ')' in the set of key \"a\", found '('");
}

TEST(LabelSelector, RejectsKeysOutsideTheLabelSyntax) {
  ExpectLabelError("-a=b", "key \"-a\": the name must begin and end with [A-Za-z0-9]");
  ExpectLabelError("a-=b", "key \"a-\": the name must begin and end");
  ExpectLabelError("a*b=c", "key \"a*b\": the name may hold only [-A-Za-z0-9_.]");
  ExpectLabelError(std::string(64, 'k') + "=v", "the name is longer than 63 characters");
  ExpectLabelError("/x=1", "the prefix before '/' is empty");
  ExpectLabelError("hami.io/=1", "key \"hami.io/\": the name is empty");
  ExpectLabelError("a/b/c=1", "a key has at most one '/'");
  ExpectLabelError("Hami.io/x=1", "the prefix must be a lowercase DNS subdomain");
  ExpectLabelError("hami..io/x=1", "the prefix must be a lowercase DNS subdomain");
  ExpectLabelError("-hami.io/x=1", "the prefix must be a lowercase DNS subdomain");
  ExpectLabelError("hami_x.io/x=1", "the prefix must be a lowercase DNS subdomain");
  ExpectLabelError("hami.io./x=1", "the prefix must be a lowercase DNS subdomain");
  ExpectLabelError(std::string(254, 'p') + "/x", "the prefix is longer than 253 characters");
}

TEST(LabelSelector, RejectsValuesOutsideTheLabelSyntax) {
  ExpectLabelError("a=-b", "value \"-b\" of key \"a\" must begin and end with [A-Za-z0-9]");
  ExpectLabelError("a!=b*c", "value \"b*c\" of key \"a\" may hold only [-A-Za-z0-9_.]");
  ExpectLabelError("a=hami.io/x", "value \"hami.io/x\" of key \"a\" may hold only");
  ExpectLabelError("a in (ok,-bad)", "value \"-bad\" of key \"a\"");
  ExpectLabelError("a=" + std::string(64, 'v'), "is longer than 63 characters");
}

TEST(FieldSelector, EmptyTermsAreSkipped) {
  EXPECT_TRUE(MustParseField("").empty());
  EXPECT_TRUE(MustParseField(",").empty());
  FieldSelector s = MustParseField("a=1,,b=2,");
  ASSERT_EQ(s.requirements().size(), 2u);
  EXPECT_EQ(s.requirements()[1].field, "b");
  EXPECT_TRUE(MustParseField("").Matches(nlohmann::json::object()));
}

TEST(FieldSelector, ParsesEveryOperatorAndTheEmptyValue) {
  FieldSelector s = MustParseField("spec.nodeName=,status.phase!=Running,metadata.name==p1");
  const auto& r = s.requirements();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].field, "spec.nodeName");
  EXPECT_TRUE(r[0].equals);
  EXPECT_EQ(r[0].value, "");
  EXPECT_EQ(r[1].field, "status.phase");
  EXPECT_FALSE(r[1].equals);
  EXPECT_EQ(r[1].value, "Running");
  EXPECT_TRUE(r[2].equals);
  EXPECT_EQ(r[2].value, "p1");
}

TEST(FieldSelector, UnescapesValuesAndKeepsThemLiteral) {
  FieldSelector s = MustParseField(R"(a=x\,y,b=p\=q,c=back\\slash, d = spaced )");
  const auto& r = s.requirements();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].value, "x,y");
  EXPECT_EQ(r[1].value, "p=q");
  EXPECT_EQ(r[2].value, R"(back\slash)");
  EXPECT_EQ(r[3].field, "d");
  EXPECT_EQ(r[3].value, " spaced ");
  EXPECT_EQ(s.String(), R"(a=x\,y,b=p\=q,c=back\\slash,d= spaced )");
  EXPECT_EQ(MustParseField(s.String()).String(), s.String());
}

void ExpectFieldError(std::string_view text, std::string_view why) {
  auto s = FieldSelector::Parse(text);
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.error().message(),
              HasSubstr("invalid field selector \"" + std::string(text) + "\""));
  EXPECT_THAT(s.error().message(), HasSubstr(why)) << text;
}

TEST(FieldSelector, RejectsTermsWithoutOperatorOrField) {
  ExpectFieldError("spec.nodeName", "can't understand \"spec.nodeName\"");
  ExpectFieldError("a=1,b!", "can't understand \"b!\"");
  ExpectFieldError("=x", "missing field name in \"=x\"");
  ExpectFieldError("  !=x", "missing field name");
  ExpectFieldError("a b=c", "field name \"a b\" may hold only");
  ExpectFieldError("a! =b", "field name \"a!\" may hold only");
}

TEST(FieldSelector, RejectsBadEscapesAndUnescapedEquals) {
  ExpectFieldError(R"(a=b\x)", R"(invalid escape sequence "\x" in "a=b\x")");
  ExpectFieldError(R"(a=b\)", R"(a lone '\' ends the value of "a=b\")");
  ExpectFieldError("a=b=c", "unescaped '=' in the value of \"a=b=c\"");
  ExpectFieldError("a!==b", "unescaped '=' in the value of \"a!==b\"");
  ExpectFieldError(R"(a=b\,c=d)", "unescaped '='");
}

TEST(FieldSelector, ChecksSupportedFieldsInTheApiServersWords) {
  const std::vector<std::string_view> pods = {"metadata.name", "metadata.namespace",
                                              "spec.nodeName", "status.phase"};
  EXPECT_TRUE(MustParseField("spec.nodeName=n1,status.phase=Running").CheckSupported(pods).ok());
  Status st = MustParseField("spec.nodeName=n1,bogus=1").CheckSupported(pods);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.error().message(), "field label not supported: bogus");
}

TEST(FieldSelector, MatchesDottedPathsAndReadsMissingFieldsAsEmpty) {
  const nlohmann::json bound = {
      {"metadata", {{"name", "p1"}, {"namespace", "default"}}},
      {"spec", {{"nodeName", "node-1"}, {"priority", 5}, {"hostNetwork", true}}},
      {"status", {{"phase", "Running"}}}};
  const nlohmann::json unbound = {{"metadata", {{"name", "p2"}, {"namespace", "default"}}},
                                  {"spec", nlohmann::json::object()}};
  struct Case {
    const char* selector;
    bool bound_matches;
    bool unbound_matches;
  };
  for (const Case& c : {
           Case{"spec.nodeName=node-1", true, false},
           Case{"spec.nodeName=", false, true},
           Case{"spec.nodeName!=", true, false},
           Case{"status.phase=Running", true, false},
           Case{"status.phase!=Running", false, true},
           Case{"metadata.namespace=default,metadata.name=p2", false, true},
           Case{"metadata.name!=p1,metadata.name!=p2", false, false},
           Case{"spec.priority=5", true, false},
           Case{"spec.hostNetwork=true", true, false},
           Case{"spec=", true, true},  // an object reads as ""
           Case{"spec.nodeName.x=", true, true},
           Case{"no.such.field=", true, true},
       }) {
    FieldSelector s = MustParseField(c.selector);
    EXPECT_EQ(s.Matches(bound), c.bound_matches) << c.selector;
    EXPECT_EQ(s.Matches(unbound), c.unbound_matches) << c.selector;
  }
}

}  // namespace
}  // namespace hami::kube
