#include "kube/quantity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace hami::kube {
namespace {

Quantity Q(std::string_view text) {
  auto q = ParseQuantity(text, "test");
  EXPECT_TRUE(q.ok()) << text << ": " << q.error().message();
  return q.ok() ? *q : Quantity();
}

struct Case {
  std::string_view text;
  int64_t value;
  int64_t milli;
  std::string_view canonical;
};

class QuantityParse : public ::testing::TestWithParam<Case> {};

TEST_P(QuantityParse, ReadsValueMilliValueAndCanonicalForm) {
  const Case& c = GetParam();
  auto q = ParseQuantity(c.text, "test");
  ASSERT_TRUE(q.ok()) << c.text << ": " << q.error().message();
  EXPECT_EQ(q->Value(), c.value) << c.text;
  EXPECT_EQ(q->MilliValue(), c.milli) << c.text;
  EXPECT_EQ(q->ToString(), c.canonical) << c.text;
}

INSTANTIATE_TEST_SUITE_P(
    Grammar, QuantityParse,
    ::testing::Values(
        Case{"0", 0, 0, "0"}, Case{"1", 1, 1000, "1"}, Case{"32768", 32768, 32768000, "32768"},
        Case{"+5", 5, 5000, "5"}, Case{"-5", -5, -5000, "-5"}, Case{"00012", 12, 12000, "12"},
        Case{"1.000", 1, 1000, "1"}, Case{".5", 1, 500, "500m"}, Case{"5.", 5, 5000, "5"},
        // decimal SI
        Case{"1500m", 2, 1500, "1500m"}, Case{"-1500m", -2, -1500, "-1500m"},
        Case{"1.5", 2, 1500, "1500m"}, Case{"0.1", 1, 100, "100m"}, Case{"100m", 1, 100, "100m"},
        Case{"1n", 1, 1, "1n"}, Case{"1u", 1, 1, "1u"}, Case{"2500u", 1, 3, "2500u"},
        Case{"1k", 1000, 1000000, "1k"}, Case{"1000", 1000, 1000000, "1k"},
        Case{"1M", 1000000, 1000000000, "1M"}, Case{"1G", 1000000000, 1000000000000, "1G"},
        Case{"1T", 1000000000000, 1000000000000000, "1T"},
        Case{"1P", 1000000000000000, 1000000000000000000, "1P"},
        Case{"1E", 1000000000000000000, std::numeric_limits<int64_t>::max(), "1E"},
        // binary SI
        Case{"1Ki", 1024, 1024000, "1Ki"}, Case{"3000Mi", 3145728000, 3145728000000, "3000Mi"},
        Case{"1.5Gi", 1610612736, 1610612736000, "1536Mi"}, Case{"0.5Ki", 512, 512000, "512"},
        Case{"1.5Ki", 1536, 1536000, "1536"}, Case{"1536Ki", 1572864, 1572864000, "1536Ki"},
        Case{"1024Ki", 1048576, 1048576000, "1Mi"}, Case{"0.1Ki", 103, 102400, "102400m"},
        Case{"1Ti", int64_t{1} << 40, (int64_t{1} << 40) * 1000, "1Ti"},
        Case{"1Pi", int64_t{1} << 50, (int64_t{1} << 50) * 1000, "1Pi"},
        Case{"1Ei", int64_t{1} << 60, std::numeric_limits<int64_t>::max(), "1Ei"},
        Case{"7Ei", int64_t{7} << 60, std::numeric_limits<int64_t>::max(), "7Ei"},
        Case{"-1Mi", -1048576, -1048576000, "-1Mi"},
        // decimal exponent
        Case{"1e3", 1000, 1000000, "1e3"}, Case{"1E3", 1000, 1000000, "1e3"},
        Case{"1e+3", 1000, 1000000, "1e3"}, Case{"1e-3", 1, 1, "1e-3"},
        Case{"1.5e3", 1500, 1500000, "1500"}, Case{"2E-9", 1, 1, "2e-9"},
        Case{"1e18", 1000000000000000000, std::numeric_limits<int64_t>::max(), "1e18"},
        Case{"0e999999999", 0, 0, "0"},
        // finer than 1n: rounded up, away from zero, to the next nano unit
        Case{"0.1n", 1, 1, "1n"}, Case{"-0.1n", -1, -1, "-1n"}, Case{"1e-10", 1, 1, "1e-9"},
        Case{"1e-999999", 1, 1, "1e-9"}, Case{"1.0000000001", 2, 1001, "1000000001n"},
        // the largest magnitude
        Case{"9223372036854775807", std::numeric_limits<int64_t>::max(),
             std::numeric_limits<int64_t>::max(), "9223372036854775807"},
        Case{"-9223372036854775807", -std::numeric_limits<int64_t>::max(),
             std::numeric_limits<int64_t>::min(), "-9223372036854775807"}));

struct Bad {
  std::string_view text;
  std::string_view problem;  // a part of the message
};

class QuantityReject : public ::testing::TestWithParam<Bad> {};

TEST_P(QuantityReject, NamesSourceTextAndProblem) {
  const Bad& b = GetParam();
  auto q = ParseQuantity(b.text, "pods default/x container main limits nvidia.com/gpumem");
  ASSERT_FALSE(q.ok()) << b.text << " parsed as " << q->ToString();
  EXPECT_EQ(q.error().code(), ErrorCode::kInvalidArgument);
  const std::string& msg = q.error().message();
  EXPECT_EQ(msg.rfind("pods default/x container main limits nvidia.com/gpumem: quantity '", 0), 0u)
      << msg;
  EXPECT_NE(msg.find(b.problem), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Grammar, QuantityReject,
    ::testing::Values(Bad{"", "is empty"}, Bad{"1.5.3", "more than one decimal point"},
                      Bad{"10 Mi", "unknown suffix ' Mi' (no spaces are allowed)"},
                      Bad{"Mb", "expected a number"}, Bad{"1Mb", "unknown suffix 'Mb'"},
                      Bad{"1Kii", "unknown suffix 'Kii'"}, Bad{"1K", "unknown suffix 'K'"},
                      Bad{"1mi", "unknown suffix 'mi'"}, Bad{"1KiB", "unknown suffix 'KiB'"},
                      Bad{"1m2", "unknown suffix 'm2'"}, Bad{"abc", "expected a number"},
                      Bad{"-", "expected a number"}, Bad{".", "expected a number"},
                      Bad{"--1", "expected a number"}, Bad{"Ki", "expected a number"},
                      Bad{" 1", "expected a number"}, Bad{"1 ", "unknown suffix ' '"},
                      Bad{"1e", "unknown suffix 'e'"}, Bad{"1e+", "exponent 'e+' has no digits"},
                      Bad{"1e3x", "exponent 'e3x' is not an integer"},
                      Bad{"1e1.5", "exponent 'e1.5' is not an integer"},
                      Bad{"8Ei", "exceeds 2^63-1"}, Bad{"9223372036854775808", "exceeds 2^63-1"},
                      Bad{"9223372036854775807.1", "exceeds 2^63-1"}, Bad{"-8Ei", "exceeds 2^63-1"},
                      Bad{"10E", "exceeds 2^63-1"}, Bad{"1e19", "exceeds 2^63-1"},
                      Bad{"1e999999999999", "exceeds 2^63-1"},
                      Bad{"1.0000000000000000000000000000000000000001",
                          "more than 40 significant digits"}));

TEST(Quantity, ParsesTheLargestBinarySuffixOfEveryPower) {
  EXPECT_EQ(Q("1Gi").Value(), int64_t{1} << 30);
  EXPECT_EQ(Q("1Ti").ToString(), "1Ti");
  EXPECT_EQ(Q("1Ti").MilliValue(), (int64_t{1} << 40) * 1000);
  EXPECT_EQ(Q("2Pi").ToString(), "2Pi");
}

TEST(Quantity, RejectsTheSuffixTooBigEvenAsThousand) {
  EXPECT_FALSE(ParseQuantity("1000E", "x").ok());
  EXPECT_TRUE(ParseQuantity("9E", "x").ok());
}

TEST(Quantity, ErrorMessageIsExactAndQuotesUnprintableBytes) {
  auto q = ParseQuantity("10 Mi", "pods default/x container main limits nvidia.com/gpumem");
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.error().message(),
            "pods default/x container main limits nvidia.com/gpumem: quantity '10 Mi': unknown "
            "suffix ' Mi' (no spaces are allowed) (expected Ki Mi Gi Ti Pi Ei, n u m k M G T P "
            "E, or e<exponent>)");
  auto ctl = ParseQuantity(std::string_view("1\x01", 2), "");
  ASSERT_FALSE(ctl.ok());
  EXPECT_EQ(ctl.error().message().rfind("quantity '1\\x01': unknown suffix '\\x01'", 0), 0u)
      << ctl.error().message();
}

TEST(Quantity, ComparesByValueWhateverTheFormat) {
  EXPECT_EQ(Q("1Ki"), Q("1024"));
  EXPECT_EQ(Q("1k"), Q("1e3"));
  EXPECT_EQ(Q("0.5"), Q("500m"));
  EXPECT_LT(Q("1500m"), Q("2"));
  EXPECT_GT(Q("1Gi"), Q("1G"));
  EXPECT_LT(Q("-1"), Q("0"));
  EXPECT_LT(Q("1n"), Q("1u"));
  EXPECT_NE(Q("1n"), Q("0"));
  std::vector<Quantity> v = {Q("1Gi"), Q("-2"), Q("1500m"), Q("1e3"), Q("0")};
  std::sort(v.begin(), v.end());
  std::vector<std::string> s;
  for (const Quantity& q : v) s.push_back(q.ToString());
  EXPECT_EQ(s, (std::vector<std::string>{"-2", "0", "1500m", "1e3", "1Gi"}));
}

TEST(Quantity, KeepsTheFormatItWasWrittenIn) {
  EXPECT_EQ(Q("1Ki").format(), QuantityFormat::kBinarySI);
  EXPECT_EQ(Q("1k").format(), QuantityFormat::kDecimalSI);
  EXPECT_EQ(Q("5").format(), QuantityFormat::kDecimalSI);
  EXPECT_EQ(Q("1e3").format(), QuantityFormat::kDecimalExponent);
  EXPECT_EQ(Q("0Mi").format(), QuantityFormat::kBinarySI);
}

TEST(Quantity, CanonicalFormParsesBackToTheSameValueAndForm) {
  for (std::string_view text :
       {"1.5Gi", "0.5Ki", "100m", "1e-3", "-7Ei", "12345678901234567.891", "3.14159", "1e17",
        "0.000000001", "123456789n", "1023Ki", "1.0000000001"}) {
    Quantity q = Q(text);
    std::string canonical = q.ToString();
    Quantity back = Q(canonical);
    EXPECT_EQ(back, q) << text << " -> " << canonical;
    EXPECT_EQ(back.ToString(), canonical) << text;
  }
}

TEST(Quantity, BuildsFromIntegersAndThousandths) {
  EXPECT_EQ(Quantity::FromInt(3000).ToString(), "3k");
  EXPECT_EQ(Quantity::FromInt(1024, QuantityFormat::kBinarySI).ToString(), "1Ki");
  EXPECT_EQ(Quantity::FromInt(-7).Value(), -7);
  EXPECT_EQ(Quantity::FromMilli(1500).ToString(), "1500m");
  EXPECT_EQ(Quantity::FromMilli(1500).Value(), 2);
  EXPECT_EQ(Quantity::FromInt(std::numeric_limits<int64_t>::min()).Value(),
            -std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(Quantity().IsZero());
  EXPECT_EQ(Quantity().ToString(), "0");
  EXPECT_EQ(Q("-3").Sign(), -1);
  EXPECT_EQ(Q("3n").Sign(), 1);
}

}  // namespace
}  // namespace hami::kube
