// Smoke test of hami_bench_plugin: a short run (5 paced pods, 3 back to back) starts the real
// hami-device-plugin against the simulated API server and kubelet, allocates every pod (the
// benchmark checks each answer, bind-phase success and the released node lock), and writes
// every figure. Without root the benchmark reports itself skipped, with the reason. The speed
// goals are reported by the benchmark, never tested here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(PluginBenchmarkTest, AShortRunAllocatesEveryPodAndReportsEveryFigure) {
  BenchmarkRun bench("plugin");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_PLUGIN, {"--pods", "5", "--burst", "3"}));
  const Json& j = bench.json();
  EXPECT_EQ(j.value("benchmark", ""), "plugin");
  EXPECT_EQ(j.value("error", std::string("missing")), "");
  EXPECT_EQ(j["config"].value("pods", 0), 5);
  EXPECT_EQ(j["config"].value("burst", 0), 3);
  if (geteuid() != 0) {
    EXPECT_THAT(j.value("skipped", ""), HasSubstr("needs root"));
    EXPECT_THAT(bench.output(), HasSubstr("skipped: needs root"));
    ExpectGoals(j["goals"], 3, kGoalFields, GoalsMeasured::kNotChecked);
    return;
  }
  EXPECT_EQ(j.value("skipped", std::string("missing")), "");
  EXPECT_THAT(bench.output(), AllOf(HasSubstr("Allocate RPC"), HasSubstr("the plugin's own work"),
                                    HasSubstr("plugin RSS after the run"), HasSubstr("meets")));
  EXPECT_EQ(j["config"].value("replicas", 0), 20);
  EXPECT_EQ(j.value("prefer_off_gpu", -1), 0) << "GetPreferredAllocation follows the scheduler";
  for (const auto& [phase, pods] :
       std::vector<std::pair<std::string, int>>{{"paced", 5}, {"back_to_back", 3}}) {
    const Json& p = j[phase];
    EXPECT_EQ(p.value("pods", 0), pods) << phase;
    for (const char* rpc : {"allocate", "prefer"}) {
      for (const char* field : {"latency_us", "api_us", "own_us"}) {
        EXPECT_EQ(p[rpc][field].value("count", 0), pods) << phase << "." << rpc << "." << field;
      }
      EXPECT_GT(p[rpc]["latency_us"].value("max", 0), 0) << phase << "." << rpc;
      // The API server was reached inside every call: the pod is found through it.
      EXPECT_GE(p[rpc].value("requests_per_call", 0.0), 2.0) << phase << "." << rpc;
    }
    // The plugin's own steps, between its requests: one more than the requests.
    ASSERT_TRUE(p["allocate"]["own_steps"].is_array()) << phase;
    EXPECT_EQ(p["allocate"]["own_steps"].size(), 6u) << p["allocate"]["own_steps"].dump();
    ASSERT_TRUE(p["allocate_requests"].is_array()) << phase;
    std::vector<std::string> kinds;
    for (const Json& r : p["allocate_requests"]) kinds.push_back(r.value("kind", ""));
    EXPECT_THAT(kinds, ::testing::IsSupersetOf({"GET node", "LIST pods", "PATCH pod"})) << phase;
  }
  EXPECT_GT(j["paced"].value("plugin_cpu_ms_per_pod", -1.0), -1.0);
  EXPECT_GT(j["limits_publish"]["latency_us"].value("count", 0), 0);
  // The plugin's container directories and limits files, one each per pod at least.
  EXPECT_GE(j.value("hook_container_entries", 0), 8);
  for (const char* field :
       {"rss_bytes_after_start", "peak_rss_bytes_after_start", "rss_bytes", "peak_rss_bytes"}) {
    ASSERT_TRUE(j["memory"][field].is_number()) << field;
    EXPECT_GT(j["memory"][field].get<double>(), 0) << field;
  }
  ExpectGoals(j["goals"], 3, kGoalFields, GoalsMeasured::kEvery);
}

}  // namespace
}  // namespace hami::testing
