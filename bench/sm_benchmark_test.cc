// Smoke test of hami_bench_sm: a --quick run (cells and every scenario) finishes with no failed
// worker, every cell and scenario is measured, and the JSON and the plot carry every field.
// How close the limiter holds its targets is what the benchmark reports against its goals;
// this test asserts none of it (wall-clock accuracy is not a test's to assert).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "benchmark_test_support.h"
#include "common/sanitizers.h"

namespace hami::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The scenarios that carry what tests/vgpu/sm_limit_test.cc leaves to the benchmark, in the
// benchmark's order, with the figures each reports.
const std::vector<std::pair<std::string, size_t>> kScenarios = {
    {"shared-device", 2}, {"path-ex", 1},      {"path-coop", 1}, {"path-graph", 1},
    {"limit-change", 3},  {"region-raise", 2}, {"open-loop", 1}, {"policy-disable", 1},
    {"policy-force", 1},  {"pause", 3},        {"suspend", 3},   {"policy-default", 2},
    {"cudart-launch", 1}};

// The scenarios whose container has a limits file bound at /overrideEnv: they need root, and
// say so when skipped.
bool NeedsRoot(const std::string& scenario) { return scenario == "limit-change"; }

TEST(SmBenchmarkTest, QuickRunHasNoFailedWorkerAndMeasuresEveryCellAndScenario) {
  BenchmarkRun bench("sm");
  const std::string svg_path = bench.File("sm.svg");
  std::vector<std::string> args = {"--quick", "--svg", svg_path};
  auto scenarios = kScenarios;
#if HAMI_TSAN
  // cudart-launch runs an nvcc-built program, in which ThreadSanitizer's runtime cannot start
  // (tests/cudart skips its programs in this build too): the TSan build runs the others.
  std::erase_if(scenarios, [](const auto& sc) { return sc.first == "cudart-launch"; });
  std::string list;
  for (const auto& sc : scenarios) list += (list.empty() ? "" : ",") + sc.first;
  args.insert(args.end(), {"--scenarios", list});
#endif
  ASSERT_NO_FATAL_FAILURE(bench.Run(HAMI_BENCH_SM, args));
  const std::string& out = bench.output();
  EXPECT_THAT(out, AllOf(HasSubstr("achieved %"), HasSubstr("settle s"), HasSubstr("meets"),
                         HasSubstr("scenario"), HasSubstr("window s")));
  const Json& j = bench.json();

  EXPECT_EQ(j.value("benchmark", ""), "sm");
  for (const char* field : {"gpu", "gpu_model", "sim_profile", "cpus", "worker",
                            "worker_environment", "measurement", "percentiles"}) {
    EXPECT_TRUE(j["environment"].contains(field)) << field;
  }
  const Json& config = j["config"];
  EXPECT_EQ(config.value("quick", false), true);
  EXPECT_EQ(config["targets"], Json::array({30, 70}));
  EXPECT_EQ(config["processes"], Json::array({1, 2}));
  ASSERT_EQ(config["kernels"].size(), 1u);
  EXPECT_EQ(config["kernels"][0].value("name", ""), "short");
  for (const char* field : {"parallel", "sample_ms", "moving_average_ms", "band_points",
                            "window_from_ms", "window_to_ms", "worker_ms"}) {
    EXPECT_TRUE(config[field].is_number()) << field;
  }
  EXPECT_EQ(config.value("sample_ms", 0), 100);
  EXPECT_EQ(config.value("window_from_ms", 0), 1000);
  EXPECT_EQ(config.value("window_to_ms", 0), 2500);

  ASSERT_TRUE(j["rounds"].is_array());
  ASSERT_EQ(j["rounds"].size(), 1u) << "four cells fit one round of eight devices";
  for (const char* field : {"round", "cells", "workers", "start_ms", "start_spread_ms"}) {
    EXPECT_TRUE(j["rounds"][0].contains(field)) << field;
  }

  ASSERT_TRUE(j["cells"].is_array());
  ASSERT_EQ(j["cells"].size(), 4u);
  for (const Json& c : j["cells"]) {
    const int target = c.value("target", -1);
    const int processes = c.value("processes", -1);
    SCOPED_TRACE("target " + std::to_string(target) + ", " + std::to_string(processes) +
                 " processes");
    for (const char* field :
         {"index",     "round",     "device",    "kernel",     "grid",           "block",
          "wave_ns",   "processes", "target",    "measured",   "achieved",       "abs_error",
          "window_ms", "settled",   "settle_ms", "workers_ok", "workers_failed", "launches",
          "errors",    "limiter",   "workers",   "samples"}) {
      EXPECT_TRUE(c.contains(field)) << field;
    }
    EXPECT_EQ(c.value("kernel", ""), "short");
    EXPECT_EQ(c.value("measured", false), true) << c["errors"].dump();
    EXPECT_EQ(c.value("workers_failed", -1), 0) << c["workers"].dump(2);
    EXPECT_EQ(c.value("workers_ok", -1), processes);
    EXPECT_TRUE(c["errors"].is_array() && c["errors"].empty()) << c["errors"].dump();
    EXPECT_GT(c.value("launches", uint64_t(0)), 0u);
    const double achieved = c.value("achieved", -1.0);
    EXPECT_GE(achieved, 0.0);
    EXPECT_LE(achieved, 100.0 * processes);
    EXPECT_DOUBLE_EQ(c.value("abs_error", -1.0), std::fabs(achieved - target));
    EXPECT_EQ(c["settle_ms"].is_null(), !c.value("settled", false));
    for (const char* field : {"mode", "rate_milli_waves_per_s", "measured_percent", "waited_ms",
                              "admitted_milli_waves"}) {
      EXPECT_TRUE(c["limiter"].contains(field)) << field;
    }
    ASSERT_TRUE(c["workers"].is_array());
    ASSERT_EQ(c["workers"].size(), size_t(processes));
    for (const Json& w : c["workers"]) {
      EXPECT_EQ(w.value("ok", false), true) << w.dump();
      EXPECT_EQ(w.value("ended", ""), "exit 0");
      EXPECT_GT(w.value("launches", uint64_t(0)), 0u);
    }
    ASSERT_TRUE(c["samples"].is_array());
    ASSERT_EQ(c["samples"].size(), 25u) << "one per 100 ms to 2.5 s";
    for (size_t i = 0; i < c["samples"].size(); ++i) {
      const Json& s = c["samples"][i];
      EXPECT_EQ(s.value("t_ms", 0), int64_t(i + 1) * 100);
      EXPECT_TRUE(s["util"].is_number());
      EXPECT_EQ(s["moving_average"].is_null(), i < 4) << i;
    }
  }

  const Json& s = j["summary"];
  for (const char* field : {"cells", "measured", "mean_abs_error", "p95_abs_error", "max_abs_error",
                            "max_settle_ms", "unsettled_cells", "workers_ok", "workers_failed"}) {
    EXPECT_TRUE(s.contains(field)) << field;
  }
  EXPECT_EQ(s.value("cells", 0), 4);
  EXPECT_EQ(s.value("measured", 0), 4);
  EXPECT_EQ(s.value("workers_ok", 0), 6);
  EXPECT_EQ(s.value("workers_failed", -1), 0);
  EXPECT_EQ(s.value("scenario_workers_failed", -1), 0);

  // Every scenario the benchmark lists runs; these are the ones the SM-limit test leaves to
  // it, each with its figures (others may follow them).
  ASSERT_TRUE(j["scenarios"].is_array());
  ASSERT_GE(j["scenarios"].size(), scenarios.size());
  EXPECT_EQ(s.value("scenarios", size_t(0)), j["scenarios"].size());
  size_t figures = 0, containers = 0, skipped_figures = 0;
  for (size_t i = 0; i < j["scenarios"].size(); ++i) {
    const Json& sc = j["scenarios"][i];
    SCOPED_TRACE("scenario " + sc.value("name", std::string("?")));
    if (i < scenarios.size()) {
      EXPECT_EQ(sc.value("name", ""), scenarios[i].first);
      EXPECT_EQ(sc["figures"].size(), scenarios[i].second);
    }
    for (const char* field : {"what", "round", "device", "run_ms", "measured", "workers_ok",
                              "workers_failed", "errors", "actions", "containers", "figures"}) {
      EXPECT_TRUE(sc.contains(field)) << field;
    }
    if (geteuid() != 0 && NeedsRoot(sc.value("name", ""))) {
      EXPECT_THAT(sc.value("skipped", ""), StartsWith("needs root")) << sc.dump();
      skipped_figures += sc["figures"].size();
      continue;
    }
    EXPECT_TRUE(sc["skipped"].is_null()) << sc["skipped"].dump();
    EXPECT_EQ(sc.value("measured", false), true) << sc["errors"].dump();
    EXPECT_EQ(sc.value("workers_failed", -1), 0) << sc["errors"].dump();
    EXPECT_TRUE(sc["errors"].is_array() && sc["errors"].empty()) << sc["errors"].dump();
    const int64_t run_ms = sc.value("run_ms", int64_t(0));
    ASSERT_TRUE(sc["containers"].is_array());
    for (const Json& c : sc["containers"]) {
      for (const char* field :
           {"sm_limit", "env", "worker_args", "limiter_mode", "workers", "cpu", "samples"}) {
        EXPECT_TRUE(c.contains(field)) << field;
      }
      EXPECT_EQ(c["samples"].size(), size_t(run_ms / 100)) << "one sample per 100 ms";
      ++containers;
    }
    ASSERT_TRUE(sc["figures"].is_array());
    EXPECT_FALSE(sc["figures"].empty());
    for (const Json& f : sc["figures"]) {
      for (const std::string& field : kGoalFields) EXPECT_TRUE(f.contains(field)) << field;
      EXPECT_TRUE(f.contains("window_ms"));
      EXPECT_EQ(f.value("measured_ok", false), true) << f.dump();
    }
    figures += sc["figures"].size();
  }
  EXPECT_EQ(s.value("scenario_workers_ok", size_t(0)), containers) << "one worker per container";
  for (const Json& sc : j["scenarios"]) {
    if (sc.value("name", "") != "open-loop") continue;
    EXPECT_EQ(sc["containers"][0].value("limiter_mode", ""), "open-loop")
        << "no host PID: the open loop";
  }

  // The cells' four goals, then every scenario figure (unmeasured where skipped).
  ExpectGoals(j["goals"], 4 + figures + skipped_figures, kGoalFields,
              skipped_figures == 0 ? GoalsMeasured::kEvery : GoalsMeasured::kNotChecked);

  std::ifstream svg_in(svg_path);
  ASSERT_TRUE(svg_in.good()) << "no plot at " << svg_path;
  std::stringstream svg;
  svg << svg_in.rdbuf();
  EXPECT_THAT(svg.str(), StartsWith("<svg"));
  EXPECT_THAT(svg.str(), AllOf(HasSubstr("<circle"), HasSubstr("stroke-dasharray"),
                               HasSubstr("short kernels, 2 processes")));
}

}  // namespace
}  // namespace hami::testing
