// The `hami` command as a user runs it: exit codes, messages that name bad input, and
// what `hami run` sets up for the program it runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Outcome {
  int status;
  std::string out;
};

// Runs build/bin/hami with `args`; stderr is merged into stdout.
Outcome Hami(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                   std::string(HAMI_BIN_DIR) + "/hami"};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p(argv, env);
  // Bounds, not expectations: under a sanitizer and a loaded machine a run takes a while.
  std::string out = p.ReadAll(120000);
  return {p.Wait(120000), out};
}

class HamiCliTest : public ::testing::Test {
 protected:
  void SetUp() override { state_ = SimEnv::NewStatePath(); }
  std::map<std::string, std::string> Env() {
    return {{"HAMI_SIM_STATE", state_}, {"HAMI_SIM_PROFILE", ""}};
  }
  std::string state_;
};

TEST_F(HamiCliTest, VersionNamesTheCudaHeaders) {
  Outcome o = Hami({"--version"});
  EXPECT_EQ(o.status, 0);
  EXPECT_THAT(o.out, StartsWith("hami "));
  EXPECT_THAT(o.out, HasSubstr("CUDA headers"));
}

TEST_F(HamiCliTest, SimListsEveryProfileAsTextAndJson) {
  Outcome text = Hami({"sim"});
  EXPECT_EQ(text.status, 0);
  EXPECT_THAT(text.out, HasSubstr("h100-80g"));
  EXPECT_THAT(text.out, HasSubstr("NVIDIA A100-SXM4-40GB"));
  Outcome json = Hami({"sim", "profiles", "--json"});
  ASSERT_EQ(json.status, 0);
  auto parsed = nlohmann::json::parse(json.out);
  ASSERT_TRUE(parsed.is_array());
  bool h200 = false;
  for (const auto& p : parsed) h200 |= p["profile"] == "h200-141g" && p["memory_mib"] == 143771;
  EXPECT_TRUE(h200);
}

TEST_F(HamiCliTest, SimOptionsListsEveryVariableWithItsValue) {
  Outcome o = Hami({"sim", "options"}, {{"HAMI_SIM_WAVE_NS", "777"}});
  EXPECT_EQ(o.status, 0);
  EXPECT_THAT(o.out, HasSubstr("HAMI_SIM_STATE"));
  EXPECT_THAT(o.out, HasSubstr("HAMI_SIM_CTX_SERIALIZE"));
  EXPECT_THAT(o.out, HasSubstr("set: 777"));
}

TEST_F(HamiCliTest, RunStartsTheCommandOnTheSimulatedGpu) {
  // hami-demo has no RPATH: it finds libcuda.so.1 only where `hami run` points it.
  Outcome o = Hami({"run", "--sim", "a100-40g:3", "--sim-state", state_, "--",
                    std::string(HAMI_BIN_DIR) + "/hami-demo"},
                   Env());
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("running on the simulated GPU (a100-40g:3"));
  EXPECT_THAT(o.out, HasSubstr("3 device(s)"));
  EXPECT_THAT(o.out, HasSubstr("NVIDIA A100-SXM4-40GB"));
  EXPECT_THAT(o.out, HasSubstr("hami-demo: all checks passed"));
}

TEST_F(HamiCliTest, RunPassesTheCommandsOwnOptionsThrough) {
  Outcome o = Hami(
      {"run", "-q", "--sim", "h100-80g:2", "--", "/bin/sh", "-c", "echo \"$LD_LIBRARY_PATH\" -x"},
      Env());
  EXPECT_EQ(o.status, 0);
  EXPECT_THAT(o.out, HasSubstr("/lib/sim"));
  EXPECT_THAT(o.out, HasSubstr("-x"));
  EXPECT_THAT(o.out, ::testing::Not(HasSubstr("running on")));
}

TEST_F(HamiCliTest, RunRefusesAnUnknownProfileNamingIt) {
  Outcome o = Hami({"run", "--sim", "h100-8g", "--", "/bin/true"}, Env());
  EXPECT_EQ(o.status, 2);
  // The simulated GPU itself refuses the profile, naming it; hami names the option.
  EXPECT_THAT(o.out, HasSubstr("HAMI_SIM_PROFILE='h100-8g': unknown profile 'h100-8g'"));
  EXPECT_THAT(o.out, HasSubstr("hami run: --sim='h100-8g': the simulated GPU does not start"));
}

TEST_F(HamiCliTest, RunReportsACommandThatCannotStart) {
  Outcome o = Hami({"run", "-q", "--", "/nonexistent/program"}, Env());
  EXPECT_EQ(o.status, 127);
  EXPECT_THAT(o.out, HasSubstr("cannot run '/nonexistent/program'"));
}

TEST_F(HamiCliTest, RunReturnsTheCommandsExitStatus) {
  EXPECT_EQ(Hami({"run", "-q", "--", "/bin/sh", "-c", "exit 7"}, Env()).status, 7);
}

TEST_F(HamiCliTest, SimStatusShowsProcessesHoldingContexts) {
  Subprocess worker({TestProgram("sim_worker"), "alloc", "1g", "hold"},
                    {{"HAMI_SIM_STATE", state_}});
  ASSERT_TRUE(worker.WaitForLine("holding"));
  Outcome o = Hami({"sim", "status", "--state", state_, "--json"});
  ASSERT_EQ(o.status, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["devices"].size(), 2u);
  ASSERT_EQ(j["devices"][0]["processes"].size(), 1u);
  EXPECT_EQ(j["devices"][0]["processes"][0]["host_pid"], worker.pid());
  EXPECT_EQ(j["devices"][0]["processes"][0]["name"], "sim_worker");
  EXPECT_EQ(j["devices"][0]["memory_used_bytes"], (1ull << 30) + (500ull << 20));
  Outcome text = Hami({"sim", "status", "--state", state_});
  EXPECT_THAT(text.out, HasSubstr("sim_worker"));
  worker.CloseStdin();
  EXPECT_EQ(worker.Wait(), 0);
}

// hami links nothing of the simulator: its option table (a string of every HAMI_SIM_*
// variable) is in hami-sim, which `hami sim` runs, and not in hami.
TEST_F(HamiCliTest, HamiLinksNothingOfTheSimulatorAndHamiSimDoes) {
  auto contains = [](const std::string& path, const std::string& needle) {
    // One read of the whole file: a sanitizer build's binaries are hundreds of MiB, too
    // many for a character-at-a-time iterator.
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    std::string bytes(size_t(std::max<std::streamoff>(in.tellg(), 0)), '\0');
    in.seekg(0);
    in.read(bytes.data(), std::streamsize(bytes.size()));
    EXPECT_TRUE(in && !bytes.empty()) << path;
    return bytes.find(needle) != std::string::npos;
  };
  EXPECT_FALSE(contains(std::string(HAMI_BIN_DIR) + "/hami", "HAMI_SIM_CTX_SERIALIZE"));
  EXPECT_TRUE(contains(std::string(HAMI_BIN_DIR) + "/hami-sim", "HAMI_SIM_CTX_SERIALIZE"));
}

TEST_F(HamiCliTest, SimSubcommandsAreHamiSimsAndItsHelpSaysHamiSim) {
  Outcome help = Hami({"sim", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("Usage: hami sim"));
  for (const char* sub : {"profiles", "options", "status", "apiserver", "kube-scheduler"}) {
    EXPECT_THAT(help.out, HasSubstr(std::string("\n  ") + sub + " ")) << sub;
  }
  Outcome bad = Hami({"sim", "no-such-subcommand"});
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.out, HasSubstr("no-such-subcommand"));
}

TEST_F(HamiCliTest, SimStatusRefusesAForeignFileNamingIt) {
  { std::ofstream(state_) << std::string(8192, 'z'); }
  Outcome o = Hami({"sim", "status", "--state", state_});
  EXPECT_EQ(o.status, 1);
  EXPECT_THAT(o.out, HasSubstr(state_));
  EXPECT_THAT(o.out, HasSubstr("not a simulated-GPU state file"));
}

TEST_F(HamiCliTest, BenchListsItsBenchmarks) {
  Outcome o = Hami({"bench", "--list"});
  EXPECT_EQ(o.status, 0);
  EXPECT_THAT(o.out, HasSubstr("sim_api"));
  Outcome bad = Hami({"bench", "no_such_benchmark"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.out, HasSubstr("unknown benchmark 'no_such_benchmark'"));
}

TEST_F(HamiCliTest, BenchPassesEverythingAfterTheNamesToTheBenchmark) {
  // The benchmark itself rejects the flag and its value: both reached it as written.
  for (std::vector<std::string> argv :
       {std::vector<std::string>{"bench", "broker", "--no-such-flag", "1,4"},
        std::vector<std::string>{"bench", "broker", "--", "--no-such-flag", "1,4"}}) {
    Outcome o = Hami(argv);
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_THAT(o.out, HasSubstr("== hami bench broker"));
    EXPECT_THAT(o.out, HasSubstr("unknown flag --no-such-flag"));
    EXPECT_THAT(o.out, Not(HasSubstr("unknown benchmark")));
  }
}

// A misspelt option of `hami bench` itself, before any benchmark name, is refused and runs
// nothing; after a name or "--" an option is the benchmarks' (above).
TEST_F(HamiCliTest, BenchRefusesAMisspeltOptionOfItsOwn) {
  for (std::vector<std::string> argv : {std::vector<std::string>{"bench", "--lsit"},
                                        std::vector<std::string>{"bench", "--lits", "broker"}}) {
    Outcome o = Hami(argv);
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_THAT(o.out, HasSubstr("hami bench: unknown option '" + argv[1] + "'"));
    EXPECT_THAT(o.out, HasSubstr("did you mean --list?"));
    EXPECT_THAT(o.out, Not(HasSubstr("== hami bench")));
  }
}

}  // namespace
}  // namespace hami::testing
