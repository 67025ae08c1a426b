#include "common/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace hami::prometheus {
namespace {

std::string Text(double v) {
  std::string out;
  Number(out, v);
  return out;
}

TEST(Number, PrintsTheShortestTextThatReadsBackExactly) {
  EXPECT_EQ(Text(0.4), "0.4");
  EXPECT_EQ(Text(0.3), "0.3");
  EXPECT_EQ(Text(30 / 100.0), "0.3");
  EXPECT_EQ(Text(0.1 + 0.2), "0.30000000000000004") << "a different double keeps its digits";
  EXPECT_EQ(Text(1.5e-7), "1.5e-07");
  for (double v : {0.4, 0.1 + 0.2, 1.0 / 3, 123.456, 1e-300, 6.02214076e23,
                   std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max()}) {
    EXPECT_EQ(std::strtod(Text(v).c_str(), nullptr), v) << Text(v);
  }
}

TEST(Number, PrintsIntegersWithoutExponentUpTo2To53) {
  EXPECT_EQ(Text(0), "0");
  EXPECT_EQ(Text(-0.0), "0");
  EXPECT_EQ(Text(3145728000.0), "3145728000");
  EXPECT_EQ(Text(1e15), "1000000000000000");
  EXPECT_EQ(Text(-42), "-42");
  EXPECT_EQ(Text(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(Text(1e20), "1e+20");
}

TEST(Number, SpellsTheSpecialValuesAsTheExpositionFormatDoes) {
  EXPECT_EQ(Text(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(Text(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(Text(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(Sample, WritesNameLabelsAndValueOnOneLine) {
  std::string out;
  Sample(out, "hami_vgpu_core_limit_ratio", "pod=\"a\"", 0.4);
  Sample(out, "hami_build_info", "", 1);
  EXPECT_EQ(out, "hami_vgpu_core_limit_ratio{pod=\"a\"} 0.4\nhami_build_info 1\n");
}

}  // namespace
}  // namespace hami::prometheus
