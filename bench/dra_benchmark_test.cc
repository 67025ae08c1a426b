// Smoke test of hami_bench_dra: a --quick run (10 claims, 2 health changes) finishes with every
// answer and file checked by the benchmark, the plugin stopped cleanly, and the JSON carrying
// every figure. Without root the benchmark reports itself skipped, with the reason. The speed
// goal is reported by the benchmark, never tested here (it depends on the machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(DraBenchmarkTest, QuickRunPreparesRepeatsAndUnpreparesEveryClaimAndTimesTheSlice) {
  BenchmarkRun bench("dra");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_DRA, {"--quick"}));
  const Json& j = bench.json();
  EXPECT_EQ(j.value("benchmark", ""), "dra");
  if (geteuid() != 0) {
    EXPECT_THAT(j.value("skipped", ""), HasSubstr("needs root"));
    EXPECT_THAT(bench.output(), HasSubstr("skipped: needs root"));
    return;
  }
  EXPECT_EQ(j.value("skipped", std::string("missing")), "");
  EXPECT_EQ(j.value("error", std::string("missing")), "") << bench.output();
  EXPECT_THAT(bench.output(),
              AllOf(HasSubstr("NodePrepareResources"), HasSubstr("NodeUnprepareResources"),
                    HasSubstr("slice with the taint after an Xid")));
  EXPECT_EQ(j.value("claims", 0), 10);
  EXPECT_EQ(j.value("gpus", 0), 8);
  EXPECT_EQ(j.value("health_changes", 0), 2);
  EXPECT_EQ(j.value("plugin_exit_status", -1), 0);
  EXPECT_GT(j.value("start_to_slice_ns", int64_t(0)), 0);
  for (const char* figure : {"prepare_ns", "repeat_prepare_ns", "unprepare_ns"}) {
    EXPECT_EQ(j[figure].value("count", 0), 10) << figure;
  }
  EXPECT_EQ(j["slice_publication_ns"].value("count", 0), 2);
  for (const char* figure :
       {"prepare_ns", "repeat_prepare_ns", "unprepare_ns", "slice_publication_ns"}) {
    for (const char* p : {"p50", "p95", "p99", "max"}) {
      ASSERT_TRUE(j[figure][p].is_number_integer()) << figure << " " << p;
      EXPECT_GT(j[figure][p].get<int64_t>(), 0) << figure << " " << p;
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectGoals(j["goals"], 1, kGoalFields, GoalsMeasured::kEvery));
  EXPECT_EQ(j["goals"][0].value("name", ""), "NodePrepareResources p99");
  EXPECT_EQ(j["goals"][0].value("conditions_match", true), false);  // 10 claims, not 100
}

}  // namespace
}  // namespace hami::testing
