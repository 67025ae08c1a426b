// Smoke test of hami_bench_monitor: a --quick run finishes, the monitor shows every container
// and stops cleanly, and the JSON carries every field. The speed goal is reported by the
// benchmark, never tested here (it depends on the machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(MonitorBenchmarkTest, QuickRunScrapesEveryContainerAndReportsEveryFigure) {
  BenchmarkRun bench("monitor");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_MONITOR, {"--quick"}));
  EXPECT_THAT(bench.output(), AllOf(HasSubstr("GET /metrics"), HasSubstr("meets")));
  const Json& j = bench.json();
  EXPECT_EQ(j.value("benchmark", ""), "monitor");
  EXPECT_EQ(j.value("containers", 0), 20);
  EXPECT_EQ(j.value("scrapes", 0), 20);
  EXPECT_GT(j.value("body_bytes", 0), 0);
  EXPECT_EQ(j.value("monitor_exit_status", -1), 0);
  EXPECT_EQ(j["scrape_ns"].value("count", 0), 20);
  for (const char* p : {"p50", "p95", "p99", "max"}) {
    ASSERT_TRUE(j["scrape_ns"][p].is_number_integer()) << p;
    EXPECT_GT(j["scrape_ns"][p].get<int64_t>(), 0) << p;
  }
  for (const char* f : {"rss_start_bytes", "rss_bytes", "rss_anon_bytes", "rss_file_bytes",
                        "hwm_bytes"}) {
    EXPECT_GT(j.value(f, int64_t(0)), 0) << f;
  }
  ASSERT_EQ(j["goals"].size(), 1u);
  EXPECT_EQ(j["goals"][0].value("name", ""), "scrape p99");
  EXPECT_EQ(j["goals"][0].value("measured_ok", false), true);
}

}  // namespace
}  // namespace hami::testing
