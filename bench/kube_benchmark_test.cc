// Smoke test of hami_bench_kube: a --quick run against the simulated API server completes
// every phase (the informer sees every change written), and the JSON carries every figure.
// The speed goals are reported by the benchmark, never tested here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(KubeBenchmarkTest, QuickRunCompletesEveryPhaseAndReportsEveryFigure) {
  BenchmarkRun bench("kube");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_KUBE, {"--quick"}));
  EXPECT_THAT(bench.output(), AllOf(HasSubstr("informer sync"), HasSubstr("meets")));
  const Json& j = bench.json();
  EXPECT_EQ(j.value("benchmark", ""), "kube");
  EXPECT_EQ(j.value("error", std::string("missing")), "");
  EXPECT_EQ(j["config"].value("nodes", 0), 100);
  EXPECT_EQ(j["config"].value("pods", 0), 500);
  EXPECT_EQ(j["watch"].value("events_seen", 0), 500);
  for (const auto& [section, field] :
       std::vector<std::pair<std::string, std::string>>{{"seed", "creates_per_s"},
                                                        {"list", "seconds"},
                                                        {"list", "pods_json_bytes"},
                                                        {"sync", "pods_seconds"},
                                                        {"sync", "nodes_seconds"},
                                                        {"sync", "over_list"},
                                                        {"watch", "written_per_s"},
                                                        {"watch", "delivered_per_s"},
                                                        {"round_trips", "patches_per_s"},
                                                        {"round_trips", "gets_per_s"}}) {
    ASSERT_TRUE(j[section][field].is_number()) << section << "." << field;
    EXPECT_GT(j[section][field].get<double>(), 0) << section << "." << field;
  }
  ASSERT_TRUE(j["memory"]["store_rss_bytes"].is_number());
  ExpectGoals(j["goals"], 4, kGoalFields, GoalsMeasured::kEvery);
}

}  // namespace
}  // namespace hami::testing
