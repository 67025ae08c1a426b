#include "sim/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;

TEST(IsManifest, RecognizesTheMagicLineOnly) {
  EXPECT_TRUE(IsManifest("hami-sim-module\nkernel k\n"));
  EXPECT_TRUE(IsManifest("hami-sim-module"));
  EXPECT_FALSE(IsManifest("hami-sim-modul"));
  EXPECT_FALSE(
      IsManifest("\x7f"
                 "ELF\x02\x01\x01"));
  EXPECT_FALSE(IsManifest(""));
  EXPECT_FALSE(IsManifest(" hami-sim-module"));
}

TEST(ParseManifest, ReadsKernelsWithAndWithoutTheirOwnWaveTime) {
  auto m = ParseManifest("hami-sim-module\nkernel busy wave_ns=50000\nkernel copy\n");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_THAT(m->kernels, ElementsAre(Pair("busy", 50000u), Pair("copy", 0u)));
  EXPECT_TRUE(m->globals.empty());
}

TEST(ParseManifest, ReadsGlobalsInDeclarationOrderWithSizeSuffixes) {
  auto m =
      ParseManifest("hami-sim-module\nglobal z bytes=4k\nglobal a bytes=16\nglobal m bytes=1m");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_THAT(m->globals,
              ElementsAre(Pair("z", 4096u), Pair("a", 16u), Pair("m", uint64_t(1) << 20)));
}

TEST(ParseManifest, IgnoresCommentsBlankLinesTabsAndCarriageReturns) {
  auto m = ParseManifest(
      "hami-sim-module\r\n"
      "# a comment\r\n"
      "\r\n"
      "   \t  \n"
      "\tkernel \t k1   wave_ns=7\r\n"
      "  #kernel not_me\n"
      "global g bytes=8\r\n");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_THAT(m->kernels, ElementsAre(Pair("k1", 7u)));
  EXPECT_THAT(m->globals, ElementsAre(Pair("g", 8u)));
}

TEST(ParseManifest, AcceptsAManifestWithNothingDeclared) {
  auto m = ParseManifest("hami-sim-module\n");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_TRUE(m->kernels.empty());
}

TEST(ParseManifest, RejectsAnEmptyText) {
  auto m = ParseManifest("");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(m.error().message(), "module manifest: empty");
}

TEST(ParseManifest, RejectsAWrongFirstLineNamingIt) {
  for (const char* text : {"hami-sim-module v2\nkernel k\n", "hami-sim-modules\n", "kernel k\n"}) {
    auto m = ParseManifest(text);
    ASSERT_FALSE(m.ok()) << text;
    std::string first(text, std::string_view(text).find('\n'));
    EXPECT_THAT(m.error().message(), StartsWith("module manifest line 1 '" + first + "'"));
    EXPECT_THAT(m.error().message(), HasSubstr("the first line must be 'hami-sim-module'"));
  }
}

struct BadLine {
  const char* line;
  const char* why;
};

class ParseManifestRejects : public ::testing::TestWithParam<BadLine> {};

TEST_P(ParseManifestRejects, NamingTheLineNumberTheLineAndTheReason) {
  const BadLine& c = GetParam();
  auto m = ParseManifest("hami-sim-module\n# header\nkernel ok\n" + std::string(c.line) + "\n");
  ASSERT_FALSE(m.ok()) << c.line;
  EXPECT_EQ(m.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(m.error().message(),
              StartsWith("module manifest line 4 '" + std::string(c.line) + "': "));
  EXPECT_THAT(m.error().message(), HasSubstr(c.why));
}

INSTANTIATE_TEST_SUITE_P(
    Lines, ParseManifestRejects,
    ::testing::Values(BadLine{"kernel", "expected 'kernel NAME [wave_ns=N]'"},
                      BadLine{"global", "expected 'kernel NAME [wave_ns=N]' or 'global NAME"},
                      BadLine{"kernel k wave_ns", "expected key=value, got 'wave_ns'"},
                      BadLine{"kernel k wave_ns=0", "wave_ns must be a positive integer"},
                      BadLine{"kernel k wave_ns=", "wave_ns must be a positive integer"},
                      BadLine{"kernel k wave_ns=1us", "wave_ns must be a positive integer"},
                      BadLine{"kernel k wave_ns=-5", "wave_ns must be a positive integer"},
                      BadLine{"kernel k bytes=4", "unknown option 'bytes'"},
                      BadLine{"global g wave_ns=4", "unknown option 'wave_ns'"},
                      BadLine{"global g", "a global needs bytes=N"},
                      BadLine{"global g bytes=0", "bytes must be a positive size"},
                      BadLine{"global g bytes=4x", "bytes must be a positive size"},
                      BadLine{"kernel ok", "kernel 'ok' declared twice"},
                      BadLine{"texture t", "unknown entry 'texture' (expected kernel or global)"},
                      BadLine{"texture t size=4", "unknown entry 'texture'"},
                      BadLine{"Kernel k", "unknown entry 'Kernel'"}));

TEST(ParseManifest, RejectsAGlobalDeclaredTwice) {
  auto m = ParseManifest("hami-sim-module\nglobal g bytes=4\nglobal g bytes=8\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.error().message(),
              StartsWith("module manifest line 3 'global g bytes=8': global 'g' declared twice"));
}

TEST(ParseManifest, AKernelAndAGlobalMayShareAName) {
  auto m = ParseManifest("hami-sim-module\nkernel x\nglobal x bytes=4\n");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->kernels.count("x"), 1u);
  EXPECT_EQ(m->globals.size(), 1u);
}

}  // namespace
}  // namespace hami::sim
