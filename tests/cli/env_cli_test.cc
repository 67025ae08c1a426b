// `hami env` as a user runs it: the configuration libvgpu.so would resolve from a limits
// file and an environment, each value with its source, the problems, and the exit status.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/temp_dir.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

struct Outcome {
  int status;
  std::string out;
};

// Runs build/bin/hami env `args` with exactly `env` as its environment (nothing inherited);
// stderr is merged into stdout.
Outcome HamiEnv(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", "/usr/bin/env",
                                   "-i"};
  for (const auto& [k, v] : env) argv.push_back(k + "=" + v);
  argv.push_back(std::string(HAMI_BIN_DIR) + "/hami");
  argv.push_back("env");
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p(argv, {});
  std::string out = p.ReadAll(20000);
  return {p.Wait(20000), out};
}

// The "options" entry named `name` of `hami env --json` output; null when absent.
json Option(const json& report, const std::string& name) {
  for (const json& o : report["options"]) {
    if (o["name"] == name) return o;
  }
  return nullptr;
}

class HamiEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  std::string LimitsFile(const std::string& text) {
    std::string path = dir_.File("limits");
    auto fd = OpenRegularFile(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    EXPECT_TRUE(fd.ok());
    if (fd.ok()) {
      EXPECT_TRUE(WriteAll(fd->get(), text).ok());
    }
    return path;
  }

  // `hami env --json` parsed; fails the test when the output is not JSON.
  json Report(const Outcome& o) {
    json j = json::parse(o.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << o.out;
    return j;
  }

  TempDir dir_{"hami-env-test"};
};

TEST_F(HamiEnvTest, EachValueComesWithItsSource) {
  std::string file = LimitsFile(
      "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_LIMIT_1=3000m\nHAMI_LIMITS_FORMAT=1\n");
  Outcome o = HamiEnv({"--limits-file", file, "--json"}, {{"CUDA_DEVICE_MEMORY_LIMIT", "2g"},
                                                          {"CUDA_DEVICE_SM_LIMIT_0", "20"},
                                                          {"CUDA_TASK_PRIORITY", "0"}});
  EXPECT_EQ(o.status, 0) << o.out;
  json r = Report(o);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["limits_file"]["path"], file);
  EXPECT_EQ(r["limits_file"]["present"], true);
  EXPECT_EQ(r["limits_file"]["entries"], 3);
  EXPECT_THAT(r["problems"], IsEmpty());

  json all = Option(r, "CUDA_DEVICE_MEMORY_LIMIT");
  EXPECT_EQ(all["value"], "1g") << "the file's value beats the environment's";
  EXPECT_EQ(all["source"], "limits file");
  EXPECT_EQ(all["bytes"], kGiB);
  json one = Option(r, "CUDA_DEVICE_MEMORY_LIMIT_1");
  EXPECT_EQ(one["source"], "limits file");
  EXPECT_EQ(one["bytes"], 3000 * kMiB);
  json sm0 = Option(r, "CUDA_DEVICE_SM_LIMIT_0");
  EXPECT_EQ(sm0["source"], "environment");
  EXPECT_EQ(sm0["percent"], 20);
  json priority = Option(r, "CUDA_TASK_PRIORITY");
  EXPECT_EQ(priority["value"], "0");
  EXPECT_EQ(priority["source"], "environment");
  json policy = Option(r, "GPU_CORE_UTILIZATION_POLICY");
  EXPECT_TRUE(policy["value"].is_null());
  EXPECT_EQ(policy["source"], "default");
  EXPECT_EQ(policy["resolved"], "default");
  json sm = Option(r, "CUDA_DEVICE_SM_LIMIT");
  EXPECT_EQ(sm["source"], "default");
  EXPECT_EQ(sm["percent"], 0);
  EXPECT_EQ(Option(r, "CUDA_DEVICE_MEMORY_SHARED_CACHE")["resolved"], "/tmp/cudevshr.cache");
}

TEST_F(HamiEnvTest, EveryVariableIsListedOnceEvenWhenUnset) {
  std::string file = LimitsFile("HAMI_LIMITS_FORMAT=1\n");
  Outcome o = HamiEnv({"--limits-file", file, "--json"}, {});
  EXPECT_EQ(o.status, 0) << o.out;
  json r = Report(o);
  for (const char* name :
       {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_<i>", "CUDA_DEVICE_SM_LIMIT",
        "CUDA_DEVICE_SM_LIMIT_<i>", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        "GPU_CORE_UTILIZATION_POLICY", "CUDA_TASK_PRIORITY", "LIBCUDA_LOG_LEVEL",
        "CUDA_OVERSUBSCRIBE", "LIBVGPU_HOSTPID_BROKER", "LIBVGPU_HOST_PROCFS", "HAMI_LIMITS_FORMAT",
        "CUDA_VISIBLE_DEVICES"}) {
    json entry = Option(r, name);
    ASSERT_FALSE(entry.is_null()) << name << " missing\n" << o.out;
    if (std::string(name) != "HAMI_LIMITS_FORMAT") {
      EXPECT_EQ(entry["source"], "default") << name;
    }
  }
  EXPECT_EQ(Option(r, "HAMI_LIMITS_FORMAT")["source"], "limits file");
  std::set<std::string> names;
  for (const json& entry : r["options"]) {
    EXPECT_TRUE(names.insert(entry["name"].get<std::string>()).second) << entry["name"];
  }
}

TEST_F(HamiEnvTest, MalformedLinesAreProblemsAndAMalformedLimitIsHeldClosed) {
  std::string file = LimitsFile(
      "CUDA_DEVICE_MEMORY_LIMIT=1g\ngarbage\nCUDA_DEVICE_SM_LIMIT=150\nHAMI_LIMITS_FORMAT=1\n");
  Outcome o = HamiEnv({"--limits-file", file, "--json"}, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  EXPECT_EQ(o.status, 1) << "a problem was found\n" << o.out;
  json r = Report(o);
  std::vector<std::string> problems = r["problems"].get<std::vector<std::string>>();
  EXPECT_THAT(problems, Contains(file + " line 2 'garbage': not KEY=VALUE; skipped"));
  std::vector<std::string> closed = r["closed"].get<std::vector<std::string>>();
  EXPECT_THAT(closed, ElementsAre(AllOf(StartsWith("CUDA_DEVICE_SM_LIMIT='150'"),
                                        HasSubstr("the compute share is the strictest, 1%"))));
  EXPECT_EQ(Option(r, "CUDA_DEVICE_MEMORY_LIMIT")["bytes"], kGiB);
  json sm = Option(r, "CUDA_DEVICE_SM_LIMIT");
  EXPECT_EQ(sm["source"], "limits file") << "the environment's 30 never stands in for it";
  EXPECT_EQ(sm["percent"], 1);
  EXPECT_EQ(sm["closed"], true);
}

TEST_F(HamiEnvTest, AMalformedMemoryLimitIsAZeroBudgetAndExitsOne) {
  Outcome o = HamiEnv({"--limits-file", LimitsFile("HAMI_LIMITS_FORMAT=1\n")},
                      {{"CUDA_DEVICE_MEMORY_LIMIT", "3000 m"}});
  EXPECT_EQ(o.status, 1) << o.out;
  EXPECT_THAT(o.out, HasSubstr("limits that could not be read, held closed (1):\n  "
                               "CUDA_DEVICE_MEMORY_LIMIT='3000 m'"));
  EXPECT_THAT(o.out, ContainsRegex("\nCUDA_DEVICE_MEMORY_LIMIT +environment +3000 m \\(could not "
                                   "be read; held closed: a zero budget \\(1 byte: nothing "
                                   "fits\\)\\)\n"));
}

TEST_F(HamiEnvTest, TheSummaryCountsALimitHeldClosedAsTheExitStatusDoes) {
  Outcome o = HamiEnv({"--limits-file", LimitsFile("HAMI_LIMITS_FORMAT=1\n")},
                      {{"CUDA_DEVICE_MEMORY_LIMIT", "3000 m"}});
  EXPECT_EQ(o.status, 1) << o.out;
  EXPECT_THAT(o.out, Not(HasSubstr("problems: none"))) << "the exit status says a problem";
  EXPECT_THAT(o.out, HasSubstr("\nproblems (1):\n  1 limit(s) held closed, listed above\n"));
}

TEST_F(HamiEnvTest, TextShowsRowsProblemsAndNotes) {
  std::string file = LimitsFile("CUDA_DEVICE_MEMORY_LIMIT=3000m\nbad line\n");
  Outcome o = HamiEnv({"--limits-file", file}, {{"CUDA_DEVICE_SM_LIMIT", "30"}});
  EXPECT_EQ(o.status, 1) << o.out;
  EXPECT_THAT(o.out, HasSubstr("limits file  " + file + " (1 entries)"));
  EXPECT_THAT(o.out, ContainsRegex("\nCUDA_DEVICE_MEMORY_LIMIT +limits file +3000m \\(2\\.9 GiB, "
                                   "3145728000 bytes\\)\n"));
  EXPECT_THAT(o.out, ContainsRegex("\nCUDA_DEVICE_SM_LIMIT +environment +30"));
  EXPECT_THAT(o.out, ContainsRegex("\nCUDA_DEVICE_SM_LIMIT_<i> +default +each device uses "
                                   "CUDA_DEVICE_SM_LIMIT\n"));
  EXPECT_THAT(o.out, HasSubstr("problems (1):\n  " + file + " line 2 'bad line'"));
  EXPECT_THAT(o.out, HasSubstr("has no HAMI_LIMITS_FORMAT line"));
}

TEST_F(HamiEnvTest, CleanConfigurationSaysSoAndExitsZero) {
  std::string file = LimitsFile("CUDA_DEVICE_MEMORY_LIMIT=1g\nHAMI_LIMITS_FORMAT=1\n");
  Outcome o = HamiEnv({"--limits-file", file}, {});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("\nproblems: none\n"));
}

TEST_F(HamiEnvTest, MissingFileNamedOnTheCommandLineIsAProblem) {
  std::string missing = dir_.File("no-such-file");
  Outcome o = HamiEnv({"--limits-file", missing, "--json"}, {{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  EXPECT_EQ(o.status, 1) << o.out;
  json r = Report(o);
  EXPECT_EQ(r["limits_file"]["present"], false);
  EXPECT_THAT(r["problems"].get<std::vector<std::string>>(),
              Contains(AllOf(HasSubstr(missing), HasSubstr("No such file"))));
  EXPECT_EQ(Option(r, "CUDA_DEVICE_MEMORY_LIMIT")["source"], "environment");
}

TEST_F(HamiEnvTest, EmptyFileIsNoLimitsFileAsForTheLibrary) {
  std::string file = LimitsFile("");
  Outcome o = HamiEnv({"--limits-file", file, "--json"}, {{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  EXPECT_EQ(o.status, 0) << o.out;
  json r = Report(o);
  EXPECT_EQ(r["limits_file"]["present"], false);
  EXPECT_THAT(r["notes"].get<std::vector<std::string>>(), Contains(HasSubstr("is empty")));
  json all = Option(r, "CUDA_DEVICE_MEMORY_LIMIT");
  EXPECT_EQ(all["source"], "environment");
  EXPECT_EQ(all["bytes"], 2 * kGiB);
}

TEST_F(HamiEnvTest, WithoutAnOptionItReadsTheLibrarysCompiledInPath) {
  Outcome o = HamiEnv({"--json"}, {});
  json r = Report(o);
  EXPECT_EQ(r["limits_file"]["path"], "/overrideEnv");
}

// The table of docs/configuration.md between its markers is generated: it must be exactly
// what `hami env --markdown` prints, so the page cannot drift from src/vgpu/options.def.
TEST_F(HamiEnvTest, ConfigurationPageHoldsTheGeneratedOptionsTable) {
  Outcome o = HamiEnv({"--markdown"}, {});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, StartsWith("| variable | default | meaning |\n| --- | --- | --- |\n"));
  auto page = ReadFileToString(HAMI_CONFIGURATION_DOC);
  ASSERT_TRUE(page.ok()) << page.error().message();
  const std::string begin = "<!-- BEGIN options table: generated by `hami env --markdown`";
  const std::string end = "<!-- END options table -->";
  size_t b = page->find(begin);
  ASSERT_NE(b, std::string::npos) << "docs/configuration.md has no begin marker: " << begin;
  b = page->find('\n', b);
  ASSERT_NE(b, std::string::npos);
  size_t e = page->find(end, b);
  ASSERT_NE(e, std::string::npos) << "docs/configuration.md has no end marker: " << end;
  EXPECT_EQ(page->substr(b + 1, e - b - 1), o.out)
      << "docs/configuration.md's options table differs from `hami env --markdown`: replace "
         "the lines between its markers with the output of `build/bin/hami env --markdown`";
}

TEST_F(HamiEnvTest, HelpDocumentsTheExitStatus) {
  Outcome o = HamiEnv({"--help"}, {});
  EXPECT_EQ(o.status, 0);
  EXPECT_THAT(o.out, HasSubstr("Exit status: 0 no problems; 1 a problem was found"));
  EXPECT_THAT(o.out, HasSubstr("--limits-file"));
  EXPECT_THAT(o.out, HasSubstr("--json"));
  EXPECT_THAT(o.out, HasSubstr("--markdown"));
}

}  // namespace
}  // namespace hami::testing
