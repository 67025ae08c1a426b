// Smoke test of hami_bench_scheduler: a --quick run seeds the cluster, starts hami-scheduler,
// measures filter, prioritize and preempt (also the same preemptor again, and the transport
// alone), schedules its burst end to end through the kube-scheduler stand-in, restarts the
// scheduler, and writes every figure. The speed goals are reported by the benchmark, never
// tested here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(SchedulerBenchmarkTest, QuickRunCompletesEveryPhaseAndReportsEveryFigure) {
  BenchmarkRun bench("scheduler");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_SCHEDULER, {"--quick"}));
  EXPECT_THAT(bench.output(), AllOf(HasSubstr("filter p50"), HasSubstr("meets")));
  const Json& j = bench.json();
  EXPECT_EQ(j.value("benchmark", ""), "scheduler");
  EXPECT_EQ(j.value("error", std::string("missing")), "");
  EXPECT_EQ(j["config"].value("nodes", 0), 100);
  EXPECT_EQ(j["config"].value("pods", 0), 500);
  EXPECT_EQ(j["e2e"].value("bound", 0), 200);
  EXPECT_EQ(j["filter"].value("nodes_kept", 0), 100);
  EXPECT_EQ(j["filter"]["latency_us"].value("count", 0), 100);
  EXPECT_EQ(j["preempt"].value("nodes_answered", 0), 100);
  EXPECT_EQ(j["preempt"].value("victims", 0), 500);
  EXPECT_EQ(j["preempt"]["latency_us"].value("count", 0), 25);
  EXPECT_EQ(j["preempt"]["again_latency_us"].value("count", 0), 25);
  EXPECT_EQ(j["preempt"].value("again_nodes_answered", -1), 0);
  EXPECT_EQ(j["preempt"]["transport_latency_us"].value("count", 0), 25);
  for (const auto& [section, field] :
       std::vector<std::pair<std::string, std::string>>{{"start", "ready_seconds"},
                                                        {"e2e", "pods_per_s"},
                                                        {"restart", "ready_seconds"},
                                                        {"memory", "peak_rss_bytes"}}) {
    ASSERT_TRUE(j[section][field].is_number()) << section << "." << field;
    EXPECT_GT(j[section][field].get<double>(), 0) << section << "." << field;
  }
  ExpectGoals(j["goals"], 6, kGoalFields, GoalsMeasured::kEvery);
}

}  // namespace
}  // namespace hami::testing
