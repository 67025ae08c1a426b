// Smoke test of hami_bench_init: a --quick run at 1 and 4 workers finishes, no worker of any
// mode fails (the probe's direct-handoff baseline included), every worker learned its
// identity the way its mode says, no probe gave its identity up at the lock, and the JSON and
// the plot carry every field. The speed goals are reported by the benchmark, never tested here
// (they depend on the machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "benchmark_test_support.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Each mode's workers must all have learned their identity from this source (bare: the
// baseline without libvgpu.so, whose workers have no slot and so no source).
struct ModeExpectation {
  const char* mode;
  const char* source;
};

TEST(InitBenchmarkTest, QuickRunHasNoFailedWorkerAndEveryModeFindsItsIdentity) {
  BenchmarkRun bench("init");
  const std::string svg_path = bench.File("init.svg");
  ASSERT_NO_FATAL_FAILURE(
      bench.Run(HAMI_BENCH_INIT, {"--quick", "--workers", "1,4", "--svg", svg_path}));
  const std::string& out = bench.output();
  EXPECT_THAT(out, HasSubstr("p99 ms"));
  EXPECT_THAT(out, HasSubstr("slope(broker) / slope(probe)"));
  EXPECT_THAT(out, HasSubstr("p99(probe) / p99(handoff)"));
  EXPECT_THAT(out, HasSubstr("wall(broker) / wall(bare)"));
  const Json& j = bench.json();

  EXPECT_EQ(j.value("benchmark", ""), "init");

  for (const char* field : {"revision", "dirty", "hami_version", "gpu_model", "gpu_count",
                            "sim_profile", "driver_version", "cost_model", "pid_namespace",
                            "visible_devices", "cpus", "launch_barrier", "percentiles"}) {
    EXPECT_TRUE(j["environment"].contains(field)) << field;
  }
  EXPECT_EQ(j["environment"]["cost_model"].value("HAMI_SIM_INIT_US", 0), 20000);
  EXPECT_EQ(j["environment"]["cost_model"].value("HAMI_SIM_CTX_CREATE_US", 0), 50000);
  EXPECT_EQ(j["config"]["workers"], Json::array({1, 4}));

  const ModeExpectation expectations[] = {{"none", "failed"},    {"probe", "nvml-probe"},
                                          {"handoff", "failed"}, {"broker", "broker"},
                                          {"procfs", "procfs"},  {"bare", nullptr}};
  for (const ModeExpectation& e : expectations) {
    SCOPED_TRACE(e.mode);
    ASSERT_TRUE(j["modes"].contains(e.mode)) << out;
    const Json& m = j["modes"][e.mode];
    if (m.value("status", "") == "skipped") {
      EXPECT_EQ(std::string(e.mode), "broker") << "only the broker may be skipped";
      EXPECT_NE(geteuid(), 0u) << "as root the broker must run: " << m.value("skipped_reason", "");
      EXPECT_FALSE(m.value("skipped_reason", "").empty());
      continue;
    }
    EXPECT_EQ(m.value("status", ""), "ran");
    ASSERT_TRUE(m["runs"].is_array());
    ASSERT_EQ(m["runs"].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      const Json& r = m["runs"][i];
      const int workers = i == 0 ? 1 : 4;
      SCOPED_TRACE(workers);
      EXPECT_EQ(r.value("workers", -1), workers);
      EXPECT_EQ(r.value("ok", -1), workers) << r.dump(2);
      EXPECT_EQ(r.value("failed", -1), 0) << r.dump(2);
      EXPECT_EQ(r.value("timed_out", true), false);
      EXPECT_EQ(r.value("error", std::string("missing")), "");
      for (const char* p : {"p50", "p95", "p99", "max"}) {
        EXPECT_TRUE(r["latency_ns"][p].is_number_integer()) << p;
        EXPECT_GT(r["latency_ns"].value(p, int64_t(0)), 0) << p;
      }
      EXPECT_EQ(r["latency_ns"].value("count", 0), workers);
      EXPECT_GT(r.value("wall_span_ns", int64_t(0)), 0);
      EXPECT_TRUE(r["release_offset_ns"]["p50"].is_number_integer());
      EXPECT_TRUE(r["release_offset_ns"]["max"].is_number_integer());
      if (e.source != nullptr) {
        EXPECT_EQ(r["identity_sources"].value(e.source, 0), workers)
            << r["identity_sources"].dump();
        EXPECT_EQ(r["identity_sources"].size(), 1u) << r["identity_sources"].dump();
      } else {
        EXPECT_TRUE(r["identity_sources"].empty()) << r["identity_sources"].dump();
      }
      EXPECT_TRUE(r["cpu_ns"]["p50"].is_number_integer());
      EXPECT_TRUE(r["identity_ns"]["p99"].is_number_integer());
      EXPECT_EQ(r["broker_server_cpu_ns"].is_null(), std::string(e.mode) != "broker");
      EXPECT_EQ(r.value("probe_lock_give_ups", -1), 0);
      ASSERT_TRUE(r["records"].is_array());
      ASSERT_EQ(r["records"].size(), size_t(workers));
      for (const Json& w : r["records"]) {
        EXPECT_EQ(w.value("ok", false), true) << w.dump();
        EXPECT_EQ(w.value("cu_result", -1), 0);
        const bool no_identity = std::string(e.mode) == "none" ||
                                 std::string(e.mode) == "handoff" || std::string(e.mode) == "bare";
        EXPECT_EQ(w.value("host_pid", -1), no_identity ? 0 : w.value("pid", 0));
        // The baseline's latency runs to the end of its handed-over work, after cuInit.
        EXPECT_EQ(w["handoff_done_ns"].is_null(), std::string(e.mode) != "handoff") << w.dump();
        if (std::string(e.mode) == "handoff") {
          EXPECT_GE(w.value("handoff_done_ns", int64_t(0)),
                    w.value("cuinit_returned_ns", int64_t(0)));
        }
        for (const char* t : {"main_ns", "ready_ns", "released_ns", "cuinit_returned_ns", "cpu_ns",
                              "identity_ns", "voluntary_switches", "involuntary_switches"}) {
          EXPECT_TRUE(w[t].is_number_integer()) << t;
        }
        EXPECT_GE(w.value("released_ns", int64_t(-1)), 0);
        EXPECT_GT(w.value("latency_ns", int64_t(0)), 0);
      }
    }
  }

  for (const auto& [name, m] : j["modes"].items()) {
    if (m.value("status", "") != "ran") continue;
    SCOPED_TRACE(name);
    ASSERT_TRUE(m["summary"].is_array());
    ASSERT_EQ(m["summary"].size(), 2u);
    for (const Json& c : m["summary"]) {
      EXPECT_EQ(c.value("bursts", 0), 1);
      EXPECT_EQ(c.value("failed", -1), 0);
      EXPECT_EQ(c.value("complete", false), true);
      EXPECT_TRUE(c["latency_ns"]["p99"].is_number_integer());
    }
  }

  ExpectGoals(j["goals"], 5,
              {"name", "measured", "unit", "goal", "bound", "meets", "measured_ok", "workers"},
              GoalsMeasured::kNotChecked);

  std::ifstream svg_in(svg_path);
  ASSERT_TRUE(svg_in.good()) << "no plot at " << svg_path;
  std::stringstream svg;
  svg << svg_in.rdbuf();
  EXPECT_THAT(svg.str(), StartsWith("<svg"));
  EXPECT_THAT(svg.str(), HasSubstr("<polyline"));
  EXPECT_THAT(svg.str(), HasSubstr("probe"));
}

}  // namespace
}  // namespace hami::testing
