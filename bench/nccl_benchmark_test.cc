// Smoke test of hami_bench_nccl: a --quick run (2 and 4 ranks) completes on both sides and the
// JSON carries every figure. The goal (a ratio) is reported by the benchmark, never tested here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

TEST(NcclBenchmarkTest, QuickRunTimesEveryRankCountAloneAndUnderLibvgpu) {
  const std::string ranks =
      std::string(HAMI_BENCH_NCCL).substr(0, std::string(HAMI_BENCH_NCCL).rfind('/')) +
      "/../tests/nccl_ranks";
  if (access(ranks.c_str(), X_OK) != 0) {
    GTEST_SKIP() << ranks << " was not built (nvcc or NCCL was missing when the build was "
                 << "configured)";
  }
  BenchmarkRun bench("nccl");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_NCCL, {"--quick"}));
  EXPECT_THAT(bench.output(), ::testing::HasSubstr("goal <= 1.1"));
  const Json& j = bench.json();
  EXPECT_EQ(j.value("benchmark", ""), "nccl");
  EXPECT_EQ(j.value("failed", true), false);
  for (const char* n : {"2", "4"}) {
    ASSERT_TRUE(j["ranks"].contains(n)) << n;
    const Json& r = j["ranks"][n];
    EXPECT_EQ(r["alone_ms"].size(), 2u) << n;
    EXPECT_EQ(r["vgpu_ms"].size(), 2u) << n;
    EXPECT_GT(r.value("alone_median_ms", 0.0), 0.0) << n;
    EXPECT_GT(r.value("vgpu_median_ms", 0.0), 0.0) << n;
    EXPECT_GT(r.value("ratio", 0.0), 0.0) << n;
  }
}

}  // namespace
}  // namespace hami::testing
