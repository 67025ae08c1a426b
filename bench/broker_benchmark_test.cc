// Smoke test of hami_bench_broker: a --quick run finishes, every query and every burst client
// is answered with its own PID, at least 99% of the queries through the flood are, and the
// JSON carries every field. The speed goals are reported
// by the benchmark, never tested here (they depend on the machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(BrokerBenchmarkTest, QuickRunServesEveryClientAndReportsEveryFigure) {
  BenchmarkRun bench("broker");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_BROKER, {"--quick"}));
  EXPECT_THAT(bench.output(), AllOf(HasSubstr("metric"), HasSubstr("meets")));
  const Json& j = bench.json();

  EXPECT_EQ(j.value("benchmark", ""), "broker");
  EXPECT_EQ(j["config"].value("quick", false), true);
  EXPECT_EQ(j["config"].value("queries", 0), 200);
  EXPECT_EQ(j["config"].value("burst_clients", 0), 50);
  EXPECT_EQ(j["config"].value("flood_connections", 0), 2000);
  EXPECT_EQ(j["config"].value("flood_queries", 0), 200);

  for (const char* series : {"sequential", "baseline"}) {
    SCOPED_TRACE(series);
    const Json& s = j[series];
    EXPECT_EQ(s.value("ok", -1), 200);
    EXPECT_EQ(s.value("failed", -1), 0);
    EXPECT_EQ(s["latency_ns"].value("count", 0), 200);
    for (const char* p : {"p50", "p95", "p99", "max"}) {
      ASSERT_TRUE(s["latency_ns"][p].is_number_integer()) << p;
      EXPECT_GT(s["latency_ns"][p].get<int64_t>(), 0) << p;
    }
  }

  const Json& b = j["burst"];
  EXPECT_EQ(b.value("clients", -1), 50);
  EXPECT_EQ(b.value("spawned", -1), 50);
  EXPECT_EQ(b.value("ok", -1), 50);
  EXPECT_EQ(b.value("failed", -1), 0);
  EXPECT_EQ(b.value("timed_out", true), false);
  EXPECT_EQ(b.value("error", std::string("missing")), "");
  EXPECT_TRUE(b["failures"].is_object() && b["failures"].empty()) << b["failures"].dump();
  EXPECT_GT(b.value("wall_span_ns", int64_t(0)), 0);
  for (const char* d : {"latency_ns", "completion_ns"}) {
    EXPECT_EQ(b[d].value("count", 0), 50) << d;
    for (const char* p : {"p50", "p95", "p99", "max"}) {
      EXPECT_TRUE(b[d][p].is_number_integer()) << d << " " << p;
    }
  }

  // The server answered every query of all three phases (warm-up included), and nothing else.
  const Json& c = j["server_counters"];
  for (const char* name : {"accepted", "ok", "bad_magic", "bad_version", "bad_command", "truncated",
                           "peer_credential_failures", "timeouts", "evicted", "write_failures",
                           "accept_failures", "active"}) {
    ASSERT_TRUE(c.contains(name)) << name;
    EXPECT_TRUE(c[name].is_number_unsigned()) << name;
  }
  EXPECT_EQ(c.value("ok", 0), 50 + 200 + 50);
  EXPECT_EQ(c.value("accepted", 0), c.value("ok", 0));
  EXPECT_EQ(c.value("evicted", 1), 0);
  EXPECT_EQ(c.value("timeouts", 1), 0);

  // The flood's broker: its own counters; the queries were answered through the flood.
  const Json& f = j["flood"];
  EXPECT_EQ(f.value("connections", 0), 2000);
  EXPECT_EQ(f.value("queries", 0), 200);
  EXPECT_EQ(f.value("error", std::string("missing")), "");
  EXPECT_EQ(f.value("ok", 0) + f.value("failed", 0), 200);
  EXPECT_GE(f.value("ok", 0) * 100, 200 * 99) << f.dump();
  EXPECT_GT(f.value("evicted_while_querying", uint64_t(0)), 0u) << "the flood was not on";
  EXPECT_EQ(f.value("max_per_uid", 0), 128);
  EXPECT_EQ(f["latency_ns"].value("count", 0), 200);
  const Json& fc = f["server_counters"];
  ASSERT_TRUE(fc.contains("evicted"));
  EXPECT_GE(fc.value("ok", 0), f.value("ok", 0));

  ExpectGoals(j["goals"], 3, kGoalFields, GoalsMeasured::kEvery);
}

}  // namespace
}  // namespace hami::testing
