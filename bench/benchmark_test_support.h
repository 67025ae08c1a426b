// What the benchmarks' smoke tests share: running a benchmark to its end in a fresh directory
// and reading the JSON it wrote there, and checking the goals that JSON reports.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/temp_dir.h"
#include "support/subprocess.h"

namespace hami::testing {

using Json = nlohmann::json;

// One run of a benchmark, in a directory of its own (removed with the object).
class BenchmarkRun {
 public:
  // The directory: /tmp/hami-bench-<name>-test-XXXXXX; the JSON: <name>.json in it.
  explicit BenchmarkRun(std::string_view name)
      : name_(name), dir_("hami-bench-" + name_ + "-test") {}

  std::string File(std::string_view name) const { return dir_.File(name); }

  // Runs `binary` with `flags` and "--json <the JSON's path>" to its end, and reads the JSON.
  // A fatal failure (call it under ASSERT_NO_FATAL_FAILURE) when the directory could not be
  // made, or the benchmark does not exit 0 within four minutes, or its JSON is missing or does
  // not parse.
  void Run(const char* binary, std::vector<std::string> flags) {
    ASSERT_TRUE(dir_.ok());
    const std::string json_path = File(name_ + ".json");
    flags.insert(flags.begin(), binary);
    flags.insert(flags.end(), {"--json", json_path});
    Subprocess bench(flags, {});
    output_ = bench.ReadAll(240000);
    ASSERT_EQ(bench.Wait(60000), 0) << output_;
    std::ifstream in(json_path);
    ASSERT_TRUE(in.good()) << "no JSON at " << json_path << "\n" << output_;
    json_ = Json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(json_.is_discarded()) << "the JSON does not parse";
  }

  const std::string& output() const { return output_; }  // its stdout
  const Json& json() const { return json_; }

 private:
  std::string name_;
  TempDir dir_;
  std::string output_;
  Json json_;
};

// The fields of each goal in region.json and broker.json.
inline const std::vector<std::string> kGoalFields = {
    "name",       "measured",        "unit", "goal", "bound", "meets", "measured_ok",
    "conditions", "conditions_match"};

// Whether every goal must have been measured.
enum class GoalsMeasured { kEvery, kNotChecked };

// `goals` is an array of `count` goals, each with every one of `fields` and a boolean "meets";
// with GoalsMeasured::kEvery, each one's "measured_ok" is true.
inline void ExpectGoals(const Json& goals, size_t count, const std::vector<std::string>& fields,
                        GoalsMeasured measured) {
  ASSERT_TRUE(goals.is_array());
  ASSERT_EQ(goals.size(), count);
  for (const Json& g : goals) {
    for (const std::string& field : fields) EXPECT_TRUE(g.contains(field)) << field;
    EXPECT_TRUE(g["meets"].is_boolean());
    if (measured == GoalsMeasured::kEvery) {
      EXPECT_EQ(g.value("measured_ok", false), true) << g.value("name", "");
    }
  }
}

}  // namespace hami::testing
