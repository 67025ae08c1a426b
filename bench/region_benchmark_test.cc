// Smoke test of hami_bench_region: a --quick run finishes, no worker of either burst fails,
// and the JSON carries every field. The speed goals are reported by the benchmark, never
// tested here (they depend on the machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/subprocess.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

class RegionBenchmarkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hami-bench-region-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    unlink((dir_ + "/region.json").c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(RegionBenchmarkTest, QuickRunHasNoFailedWorkerAndReportsEveryFigure) {
  const std::string json_path = dir_ + "/region.json";
  Subprocess bench({HAMI_BENCH_REGION, "--quick", "--json", json_path}, {});
  std::string out = bench.ReadAll(240000);
  ASSERT_EQ(bench.Wait(60000), 0) << out;
  EXPECT_THAT(out, HasSubstr("metric"));
  EXPECT_THAT(out, HasSubstr("meets"));

  std::ifstream in(json_path);
  ASSERT_TRUE(in.good()) << "no JSON at " << json_path;
  const Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "the JSON does not parse";

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

  ASSERT_TRUE(j["goals"].is_array());
  ASSERT_EQ(j["goals"].size(), 3u);
  for (const Json& g : j["goals"]) {
    for (const char* field : {"name", "measured", "unit", "goal", "bound", "meets", "measured_ok",
                              "conditions", "conditions_match"}) {
      EXPECT_TRUE(g.contains(field)) << field;
    }
    EXPECT_TRUE(g["meets"].is_boolean());
    EXPECT_EQ(g.value("measured_ok", false), true) << g.value("name", "");
  }
}

}  // namespace
}  // namespace hami::testing
