// Smoke test of hami_bench_cluster: a --quick run (6 pods on a cluster of 2 nodes of its own)
// finishes, times every pod from the apply to Running, finds each one's `event=started` line in
// the node logs, and writes every JSON field. The goal (p99 <= 2 s) is reported by the
// benchmark, never tested here (it depends on the machine). Root and kubectl; skipped otherwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

bool KubectlInPath() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && access((dir + "/kubectl").c_str(), X_OK) == 0) return true;
  }
  return false;
}

void ExpectSummary(const Json& s, size_t count, const char* what) {
  EXPECT_EQ(s.value("count", size_t(0)), count) << what;
  for (const char* p : {"p50", "p90", "p99", "max"}) {
    ASSERT_TRUE(s[p].is_number()) << what << " " << p;
  }
  EXPECT_LE(s["p50"].get<double>(), s["p99"].get<double>()) << what;
  EXPECT_LE(s["p99"].get<double>(), s["max"].get<double>()) << what;
}

TEST(ClusterBenchmarkTest, QuickRunTimesEveryPodAndFindsTheNodesShare) {
  if (geteuid() != 0) GTEST_SKIP() << "starting a simulated cluster needs root";
  if (!KubectlInPath()) GTEST_SKIP() << "kubectl is not in PATH (scripts/setup.sh installs it)";
  BenchmarkRun bench("cluster");
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_CLUSTER, {"--quick"}));
  EXPECT_THAT(bench.output(), AllOf(HasSubstr("apply -> Running"), HasSubstr("RunPodSandbox"),
                                    HasSubstr("StartContainer"), HasSubstr("The goal was")));
  const Json& j = bench.json();
  EXPECT_EQ(j.value("benchmark", ""), "cluster");
  EXPECT_EQ(j.value("pods", 0), 6);
  EXPECT_EQ(j.value("repeat", 0), 1);
  EXPECT_EQ(j.value("pods_timed", 0), 6);
  EXPECT_EQ(j["cluster"].value("started", false), true);
  EXPECT_EQ(j["cluster"].value("nodes", 0), 2);
  ASSERT_EQ(j["batches"].size(), 1u);
  EXPECT_EQ(j["batches"][0].value("running", 0), 6);
  EXPECT_GT(j["batches"][0].value("apply_ms", 0.0), 0.0);
  for (const char* f : {"apply_to_created_ms", "apply_to_scheduled_ms", "apply_to_running_ms",
                        "scheduled_to_running_ms"}) {
    ExpectSummary(j[f], 6, f);
  }
  for (const char* f : {"admit_ms", "sandbox_ms", "create_ms", "start_ms", "cri_ms", "sum_ms"}) {
    ExpectSummary(j["node"][f], 6, f);
  }
  EXPECT_GT(j["node"].value("cri_share", 0.0), 0.0);
  EXPECT_LE(j["node"].value("share", 2.0), 1.0);
  EXPECT_TRUE(j["cpu"]["by_program"].is_object());
  ASSERT_EQ(j["per_pod"].size(), 6u);
  std::set<std::string> nodes;
  for (const Json& p : j["per_pod"]) {
    const std::string name = p.value("name", "");
    EXPECT_GT(p.value("running_ms", -1.0), 0.0) << name;
    EXPECT_LE(p.value("created_ms", -1.0), p.value("scheduled_ms", -1.0)) << name;
    EXPECT_LE(p.value("scheduled_ms", -1.0), p.value("running_ms", -1.0)) << name;
    for (const char* f : {"admit_ms", "sandbox_ms", "create_ms", "start_ms"}) {
      EXPECT_TRUE(p[f].is_number_integer()) << name << " " << f;
    }
    nodes.insert(p.value("node", ""));
  }
  EXPECT_EQ(nodes.count(""), 0u);
  ExpectGoals(j["goals"], 1, kGoalFields, GoalsMeasured::kEvery);
}

}  // namespace
}  // namespace hami::testing
