// Smoke test of hami_bench_region: a --quick run finishes, no worker of either burst fails,
// and the JSON carries every field. The speed goals are reported by the benchmark, never
// tested here (they depend on the machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(RegionBenchmarkTest, QuickRunHasNoFailedWorkerAndReportsEveryFigure) {
  BenchmarkRun bench("region");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_REGION, {"--quick"}));
  EXPECT_THAT(bench.output(), AllOf(HasSubstr("metric"), HasSubstr("meets")));
  const Json& j = bench.json();

  for (const char* run : {"control", "region", "region_precreated"}) {
    SCOPED_TRACE(run);
    ASSERT_TRUE(j.contains(Json::json_pointer(std::string("/burst/") + run + "/registration_ns")));
    const Json& b = j["burst"][run];
    EXPECT_EQ(b.value("workers", -1), 64);
    EXPECT_EQ(b.value("ok", -1), 64);
    EXPECT_EQ(b.value("failed", -1), 0);
    EXPECT_EQ(b.value("timed_out", true), false);
    EXPECT_EQ(b.value("error", std::string("missing")), "");
    EXPECT_TRUE(b["wall_span_ns"].is_number_integer());
    EXPECT_GT(b.value("wall_span_ns", int64_t(0)), 0);
    for (const char* p : {"p50", "p95", "p99", "max"}) {
      EXPECT_TRUE(b["registration_ns"][p].is_number_integer()) << p;
    }
    EXPECT_EQ(b["registration_ns"].value("count", 0), 64);
  }

  const char* numbers[] = {
      "/burst/wall_ratio",
      "/burst/wall_ratio_precreated",
      "/membership_warm/create_us",
      "/membership_warm/open_us",
      "/membership_warm/register_us",
      "/membership_warm/unregister_us",
      "/membership_warm/close_us",
      "/membership_warm/register_procfs_us",
      "/reserve_release/uncontended_ns_per_pair",
      "/reserve_release/reserve_ns",
      "/reserve_release/release_ns",
      "/reserve_release/contended/ns_per_pair_per_thread",
      "/reserve_release/contended/pairs_per_second",
      "/reserve_release/baselines/atomic_fetch_add_pair_ns",
      "/reserve_release/baselines/robust_mutex_lock_unlock_ns",
      "/reserve_release/ratios/pair_vs_atomic_pair",
      "/reserve_release/ratios/pair_vs_robust_mutex",
  };
  for (const char* pointer : numbers) {
    const Json::json_pointer p(pointer);
    ASSERT_TRUE(j.contains(p)) << pointer;
    EXPECT_TRUE(j[p].is_number()) << pointer;
    EXPECT_GT(j[p].get<double>(), 0.0) << pointer;
  }
  ASSERT_TRUE(j.contains(Json::json_pointer("/reserve_release/contended/processes")));
  EXPECT_EQ(j["reserve_release"].value("ok", false), true);
  EXPECT_EQ(j["reserve_release"]["contended"].value("processes", 0), 2);
  EXPECT_EQ(j["reserve_release"]["contended"].value("threads_per_process", 0), 4);

  ExpectGoals(j["goals"], 3, kGoalFields, GoalsMeasured::kEvery);
}

}  // namespace
}  // namespace hami::testing
