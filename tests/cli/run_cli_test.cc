// `hami run` with limits, as a user runs it on the simulated GPU: what the command sees
// under --memory, --devices and --limits-file-mount, the messages that name bad input, the
// exit status, signals and the private region's cleanup.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "node/paths.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

// A sanitizer build's runtime options (the test harness's, not the workload's) survive the
// emptied environment.
#define HAMI_KEEP_SANITIZER_OPTIONS                  \
  "${ASAN_OPTIONS:+ASAN_OPTIONS=\"$ASAN_OPTIONS\"} " \
  "${TSAN_OPTIONS:+TSAN_OPTIONS=\"$TSAN_OPTIONS\"} " \
  "${UBSAN_OPTIONS:+UBSAN_OPTIONS=\"$UBSAN_OPTIONS\"} "

using ::testing::ContainerEq;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Outcome {
  int status;
  std::string out;
};

std::string Hami() { return std::string(HAMI_BIN_DIR) + "/hami"; }
std::string Worker() { return TestProgram("sim_worker"); }

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::string Dirname(const std::string& path) { return path.substr(0, path.rfind('/')); }

// The lines of `text` that start with `prefix`.
std::vector<std::string> Lines(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

// "meminfo FREE TOTAL DEVICE_TOTAL" lines: the TOTAL of each.
std::vector<uint64_t> Totals(const std::string& text) {
  std::vector<uint64_t> out;
  for (const std::string& line : Lines(text, "meminfo ")) {
    std::istringstream in(line.substr(8));
    uint64_t free = 0, total = 0;
    in >> free >> total;
    out.push_back(total);
  }
  return out;
}

class RunCliTest : public ::testing::Test {
 protected:
  void SetUp() override { state_ = SimEnv::NewStatePath(); }

  // The default simulated machine (two H100s) with a private state, nothing narrowed.
  std::map<std::string, std::string> Env() {
    return {{"HAMI_SIM_STATE", state_},
            {"HAMI_SIM_PROFILE", ""},
            {"CUDA_VISIBLE_DEVICES", ""},
            {"CUDA_DEVICE_MEMORY_LIMIT", ""},
            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", ""}};
  }

  // Runs `hami ARGS`; stderr is merged into stdout.
  Outcome Run(std::vector<std::string> args) {
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", Hami()};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess p(argv, Env());
    // Bounds, not expectations: under a sanitizer and a loaded machine a run takes a while.
    std::string out = p.ReadAll(120000);
    return {p.Wait(120000), out};
  }

  // The UUIDs of the simulated machine's devices, in order.
  std::vector<std::string> DeviceUuids() {
    Outcome o = Run({"run", "-q", "--", Worker(), "print-devices"});
    std::vector<std::string> uuids;
    for (const std::string& line : Lines(o.out, "device ")) {
      std::istringstream in(line);
      std::string word, ordinal, uuid;
      in >> word >> ordinal >> uuid;
      uuids.push_back(uuid);
    }
    return uuids;
  }

  std::string state_;
};

TEST_F(RunCliTest, MemoryLimitIsTheTotalTheCommandSeesAndAllocationsPastItFail) {
  Outcome o =
      Run({"run", "-q", "--memory", "1g", "--", Worker(), "context", "meminfo", "try-alloc", "2g"});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(Totals(o.out), ContainerEq(std::vector<uint64_t>{kGiB}));
  EXPECT_THAT(o.out, HasSubstr("try-alloc 2147483648 2\n"));  // CUDA_ERROR_OUT_OF_MEMORY
}

// --oversubscribe serves what the device budget refuses from host memory, up to --host-memory
// (by default the sum of the limits: 2 GiB for two devices at 1 GiB); past that it is refused.
TEST_F(RunCliTest, OversubscribeServesPastTheLimitFromHostMemoryUpToItsBudget) {
  Outcome o = Run({"run", "--memory", "1g", "--oversubscribe", "--", Worker(), "context", "meminfo",
                   "try-alloc", "2g"});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(Totals(o.out), ContainerEq(std::vector<uint64_t>{kGiB})) << "the device's budget";
  EXPECT_THAT(o.out, HasSubstr("try-alloc 2147483648 0\n"));  // CUDA_SUCCESS
  EXPECT_THAT(o.out, HasSubstr("then host memory up to 2.0 GiB (the sum of the limits)"));

  o = Run({"run", "--memory", "1g", "--oversubscribe", "--host-memory", "1Gi", "--", Worker(),
           "context", "try-alloc", "2g"});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("try-alloc 2147483648 2\n"));  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_THAT(o.out, HasSubstr("then host memory up to 1.0 GiB,"));
}

TEST_F(RunCliTest, OversubscribeWithoutAMemoryLimitOrHostMemoryAloneIsAUsageError) {
  Outcome o = Run({"run", "--oversubscribe", "--", "/bin/echo", "RAN"});
  EXPECT_EQ(o.status, 2);
  EXPECT_THAT(o.out, HasSubstr("--oversubscribe serves allocations past the memory limit"));
  o = Run({"run", "--memory", "1g", "--host-memory", "1g", "--", "/bin/echo", "RAN"});
  EXPECT_EQ(o.status, 2);
  EXPECT_THAT(o.out, HasSubstr("--host-memory is the budget of --oversubscribe"));
  o = Run({"run", "--memory", "1g", "--oversubscribe", "--host-memory", "lots", "--", "/bin/echo",
           "RAN"});
  EXPECT_EQ(o.status, 2);
  EXPECT_THAT(o.out, HasSubstr("--host-memory='lots': not a size"));
  EXPECT_THAT(o.out, Not(HasSubstr("RAN")));
}

TEST_F(RunCliTest, SaysWhatItSetsUpUnlessQuiet) {
  Outcome o = Run({"run", "--memory", "1g", "--sm", "30", "--", "/bin/sh", "-c",
                   "echo \"region $CUDA_DEVICE_MEMORY_SHARED_CACHE\""});
  EXPECT_EQ(o.status, 0) << o.out;
  std::vector<std::string> lines = Lines(o.out, "region /");
  ASSERT_EQ(lines.size(), 1u) << o.out;
  const std::string region = lines[0].substr(7);
  EXPECT_THAT(o.out,
              HasSubstr("2 device(s), memory 1.0 GiB per device, SM 30%; region " + region + "\n"));
  // The banner names the command that watches the run's own region.
  EXPECT_THAT(o.out, HasSubstr("hami: watch it from another shell: hami top " + region +
                               " (the region goes when the command ends)\n"));
  Outcome quiet = Run({"run", "-q", "--memory", "1g", "--", "/bin/true"});
  EXPECT_EQ(quiet.status, 0);
  EXPECT_EQ(quiet.out, "");
}

// Inside a run, `hami top` without a path finds the run's region through the environment.
TEST_F(RunCliTest, TopInsideARunReadsTheRunsOwnRegion) {
  Outcome o = Run({"run", "-q", "--memory", "1g", "--", "/bin/sh", "-c",
                   "\"$0\" context alloc 64m && echo \"region $CUDA_DEVICE_MEMORY_SHARED_CACHE\" "
                   "&& \"$1\" top --once",
                   Worker(), Hami()});
  ASSERT_EQ(o.status, 0) << o.out;
  std::vector<std::string> lines = Lines(o.out, "region /");
  ASSERT_EQ(lines.size(), 1u) << o.out;
  const std::string region = lines[0].substr(7);
  EXPECT_THAT(o.out, HasSubstr(region + ": 1 region"));
  EXPECT_THAT(o.out, HasSubstr("1.0 GiB"));
}

TEST_F(RunCliTest, AMemoryListLimitsEachDeviceByOrdinal) {
  std::string w = Worker();
  Outcome o = Run({"run", "-q", "--memory", "1g,512m", "--", "/bin/sh", "-c",
                   "\"$0\" meminfo && \"$0\" device 1 meminfo try-alloc 600m", w});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(Totals(o.out), ContainerEq(std::vector<uint64_t>{kGiB, 512 * kMiB}));
  EXPECT_THAT(o.out, HasSubstr("try-alloc 629145600 2\n"));
}

TEST_F(RunCliTest, SetsTheVariablesLibvgpuReads) {
  Outcome o = Run({"run", "-q", "--memory", "1g,1536m", "--sm", "40", "--devices", "1,0", "--",
                   "/usr/bin/env"});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n"));
  EXPECT_THAT(o.out, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_1=1536m\n"));
  EXPECT_THAT(o.out, Not(HasSubstr("CUDA_DEVICE_MEMORY_LIMIT=")));
  EXPECT_THAT(o.out, HasSubstr("CUDA_DEVICE_SM_LIMIT=40\n"));
  EXPECT_THAT(o.out, HasSubstr("CUDA_VISIBLE_DEVICES=1,0\n"));
  EXPECT_THAT(o.out, HasSubstr("CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/hami-run-"));
  ASSERT_EQ(Lines(o.out, "LD_PRELOAD=").size(), 1u);
  EXPECT_THAT(Lines(o.out, "LD_PRELOAD=")[0], HasSubstr("/lib/libvgpu.so"));
}

TEST_F(RunCliTest, MemoryTakesKubernetesBinarySuffixesToo) {
  Outcome o = Run({"run", "-q", "--memory", "3000Mi,2Gi", "--", "/usr/bin/env"});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n"));
  EXPECT_THAT(o.out, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_1=2048m\n"));
  Outcome one = Run({"run", "-q", "--memory", "1Ti", "--", "/usr/bin/env"});
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_THAT(one.out, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT=1048576m\n"));
  // What is neither form is refused, naming both.
  for (const char* bad : {"500M1", "1.5Gi", "2mi", "3Pi"}) {
    Outcome r = Run({"run", "--memory", bad, "--", "/bin/true"});
    EXPECT_EQ(r.status, 2) << bad << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr(std::string("--memory='") + bad + "': not a size")) << bad;
  }
}

TEST_F(RunCliTest, WithoutLimitsTheCommandRunsAsBeforeWithoutLibvgpu) {
  Outcome o = Run({"run", "-q", "--", "/bin/sh", "-c", "echo \"preload=[$LD_PRELOAD]\"", "x"});
  EXPECT_EQ(o.status, 0);
  EXPECT_THAT(o.out, HasSubstr("preload=[]"));
}

TEST_F(RunCliTest, PassesTheCommandsArgumentsExactly) {
  Outcome plain = Run({"run", "-q", "--", "/bin/echo", "a", "--", "-q"});
  EXPECT_EQ(plain.out, "a -- -q\n");
  Outcome limited = Run({"run", "-q", "--memory", "1g", "--", "/bin/echo", "a", "--", "-q"});
  EXPECT_EQ(limited.out, "a -- -q\n");
}

TEST_F(RunCliTest, DevicesNarrowsTheDevicesByIndexOrUuid) {
  std::vector<std::string> uuids = DeviceUuids();
  ASSERT_EQ(uuids.size(), 2u);
  Outcome by_index = Run({"run", "-q", "--devices", "1", "--", Worker(), "print-devices"});
  ASSERT_EQ(by_index.status, 0) << by_index.out;
  std::vector<std::string> lines = Lines(by_index.out, "device ");
  ASSERT_EQ(lines.size(), 1u) << by_index.out;
  EXPECT_THAT(lines[0], HasSubstr("device 0 " + uuids[1]));

  Outcome by_uuid = Run({"run", "-q", "--devices", uuids[1].substr(0, 12), "--memory", "1g", "--",
                         Worker(), "print-devices", "context", "meminfo"});
  ASSERT_EQ(by_uuid.status, 0) << by_uuid.out;
  EXPECT_THAT(Lines(by_uuid.out, "device "), ContainerEq(lines));
  EXPECT_THAT(Totals(by_uuid.out), ContainerEq(std::vector<uint64_t>{kGiB}));
}

TEST_F(RunCliTest, DevicesIgnoresTheCallersOwnNarrowing) {
  std::vector<std::string> uuids = DeviceUuids();
  ASSERT_EQ(uuids.size(), 2u);
  std::vector<std::string> argv = {"/bin/sh",
                                   "-c",
                                   "exec \"$0\" \"$@\" 2>&1",
                                   Hami(),
                                   "run",
                                   "-q",
                                   "--devices",
                                   "1",
                                   "--",
                                   Worker(),
                                   "print-devices"};
  auto env = Env();
  env["CUDA_VISIBLE_DEVICES"] = "0";
  Subprocess p(argv, env);
  std::string out = p.ReadAll(20000);
  EXPECT_EQ(p.Wait(20000), 0) << out;
  EXPECT_THAT(out, HasSubstr("device 0 " + uuids[1]));
}

TEST_F(RunCliTest, BadMemoryValuesFailNamingThem) {
  Outcome suffix = Run({"run", "--memory", "12q", "--", "/bin/true"});
  EXPECT_EQ(suffix.status, 2);
  EXPECT_THAT(suffix.out, HasSubstr("hami run: --memory='12q'"));

  Outcome entry = Run({"run", "--memory", "1g,lots", "--", "/bin/true"});
  EXPECT_EQ(entry.status, 2);
  EXPECT_THAT(entry.out, HasSubstr("--memory='lots'"));

  Outcome count = Run({"run", "--memory", "1g,1g,1g", "--", "/bin/true"});
  EXPECT_EQ(count.status, 2);
  EXPECT_THAT(count.out, HasSubstr("--memory='1g,1g,1g': 3 values for 2 device(s)"));

  Outcome sm = Run({"run", "--sm", "150", "--", "/bin/true"});
  EXPECT_EQ(sm.status, 2);
  EXPECT_THAT(sm.out, HasSubstr("--sm='150': must be a percentage from 0 to 100"));
}

// Every long option `hami run --help` lists, misspelt three ways, in the `--x=v`, `--x v`
// and no-`--` forms: each is a usage error naming the word and the option meant, and the
// program never runs (it would print RAN).
TEST_F(RunCliTest, AMisspeltOptionIsRefusedAndNothingRuns) {
  Outcome help = Run({"run", "--help"});
  ASSERT_EQ(help.status, 0) << help.out;
  std::vector<std::string> flags;
  std::istringstream in(help.out);
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find("--");
    if (line.find_first_not_of(' ') != line.find('-') || at == std::string::npos) continue;
    size_t end = line.find_first_of(" =,", at);
    std::string flag = line.substr(at, end == std::string::npos ? end : end - at);
    if (flag.size() > 3) flags.push_back(flag);
  }
  ASSERT_THAT(flags, ::testing::IsSupersetOf({"--memory", "--sm", "--devices", "--quiet", "--sim",
                                              "--limits-file-mount"}))
      << help.out;
  const std::string program = "echo RAN";
  for (const std::string& flag : flags) {
    std::string name = flag.substr(2);
    std::vector<std::string> typos = {
        "--" + name.substr(1, 1) + name.substr(0, 1) + name.substr(2),  // first letters swapped
        "--" + name.substr(0, name.size() - 1),                         // last letter dropped
        "--" + name + name.substr(name.size() - 1),                     // last letter doubled
    };
    for (const std::string& typo : typos) {
      std::vector<std::vector<std::string>> forms = {
          {"run", "--sm", "30", typo + "=2g", "--", "/bin/sh", "-c", program},
          {"run", typo, "2g", "--", "/bin/sh", "-c", program},
          {"run", "-q", typo, "2g", "/bin/sh", "-c", program},
      };
      for (const std::vector<std::string>& args : forms) {
        Outcome o = Run(args);
        std::string said = ::testing::PrintToString(args) + "\n" + o.out;
        EXPECT_EQ(o.status, 2) << said;
        EXPECT_THAT(o.out, HasSubstr("hami run: unknown option '" + typo)) << said;
        EXPECT_THAT(o.out, Not(HasSubstr("RAN"))) << said;
      }
    }
    Outcome near = Run(
        {"run", "--" + name.substr(1, 1) + name.substr(0, 1) + name.substr(2), "--", "/bin/true"});
    if (name.size() >= 4) {
      EXPECT_THAT(near.out, HasSubstr("did you mean " + flag + "?"));
    }
  }
}

TEST_F(RunCliTest, WithoutACommandItSaysSoAsAUsageError) {
  Outcome o = Run({"run", "--memory", "1g"});
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_THAT(o.out, HasSubstr("hami run: no command given"));
}

TEST_F(RunCliTest, BadDevicesEntriesFailNamingThem) {
  Outcome missing = Run({"run", "--devices", "0,7", "--", "/bin/true"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.out, HasSubstr("--devices='0,7': entry '7' is not the index of a device"));
  EXPECT_THAT(missing.out, HasSubstr("present: 0 GPU-"));

  Outcome uuid = Run({"run", "--devices", "GPU-ffffffff", "--", "/bin/true"});
  EXPECT_EQ(uuid.status, 2);
  EXPECT_THAT(uuid.out, HasSubstr("entry 'GPU-ffffffff' names no device present"));

  Outcome repeated = Run({"run", "--devices", "1,1", "--", "/bin/true"});
  EXPECT_EQ(repeated.status, 2);
  EXPECT_THAT(repeated.out, HasSubstr("entry '1' repeats a device already listed"));

  Outcome empty = Run({"run", "--devices", "0,", "--", "/bin/true"});
  EXPECT_EQ(empty.status, 2);
  EXPECT_THAT(empty.out, HasSubstr("entry '' is empty"));
}

TEST_F(RunCliTest, ReturnsTheCommandsExitStatus) {
  EXPECT_EQ(Run({"run", "-q", "--memory", "1g", "--", "/bin/sh", "-c", "exit 7"}).status, 7);
  EXPECT_EQ(Run({"run", "-q", "--memory", "1g", "--", "/bin/sh", "-c", "kill -KILL $$"}).status,
            128 + SIGKILL);
  Outcome missing = Run({"run", "-q", "--memory", "1g", "--", "no-such-program-here"});
  EXPECT_EQ(missing.status, 127);
  EXPECT_THAT(missing.out, HasSubstr("cannot run 'no-such-program-here'"));
}

TEST_F(RunCliTest, RemovesThePrivateRegionAfterwards) {
  Outcome o =
      Run({"run", "-q", "--memory", "1g", "--", "/bin/sh", "-c",
           "echo \"region $CUDA_DEVICE_MEMORY_SHARED_CACHE\"; \"$0\" context alloc 64m", Worker()});
  ASSERT_EQ(o.status, 0) << o.out;
  std::vector<std::string> lines = Lines(o.out, "region /");
  ASSERT_EQ(lines.size(), 1u) << o.out;
  std::string region = lines[0].substr(7);
  EXPECT_THAT(region, HasSubstr("/tmp/hami-run-"));
  EXPECT_FALSE(Exists(Dirname(region))) << region;
}

// `hami run -q --memory 1g -- /bin/sh -c SCRIPT`, after `prefix`.
std::vector<std::string> LimitedShell(const std::string& script,
                                      std::vector<std::string> prefix = {}) {
  for (const char* a : {"run", "-q", "--memory", "1g", "--", "/bin/sh", "-c"}) prefix.push_back(a);
  prefix.push_back(script);
  return prefix;
}

TEST_F(RunCliTest, ForwardsTerminationToTheCommandAndStillCleansUp) {
  std::vector<std::string> argv = LimitedShell(
      "trap 'echo terminated; exit 3' TERM; echo \"region $CUDA_DEVICE_MEMORY_SHARED_CACHE\"; "
      "while :; do sleep 0.05; done",
      {Hami()});
  Subprocess p(argv, Env());
  auto line = p.WaitForLine("region ");
  ASSERT_TRUE(line.has_value());
  std::string region = line->substr(7);
  ASSERT_TRUE(Exists(Dirname(region)));
  p.Kill(SIGTERM);
  EXPECT_TRUE(p.WaitForLine("terminated").has_value());
  EXPECT_EQ(p.Wait(), 3);
  EXPECT_FALSE(Exists(Dirname(region)));
}

// When hami leads its session, a hangup of the terminal reaches hami alone (the kernel sends
// it to the session leader only): hami must pass it on, or the command outlives its terminal.
TEST_F(RunCliTest, ForwardsTheTerminalsHangupWhenItLeadsTheSession) {
  UniqueFd master(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  ASSERT_TRUE(master.valid()) << "posix_openpt: " << std::strerror(errno);
  ASSERT_EQ(grantpt(master.get()), 0);
  ASSERT_EQ(unlockpt(master.get()), 0);
  const std::string slave = ptsname(master.get());
  // setsid -c makes hami a session leader whose controlling terminal is the pty on its stdin.
  std::vector<std::string> argv =
      // `wait` returns as the trapped hangup arrives; the shell then ends its sleep and exits.
      LimitedShell("trap 'echo hung up; kill $!; exit 4' HUP; sleep 1000 & echo started; wait",
                   {"/bin/sh", "-c", "exec setsid -c -w \"$0\" \"$@\" <\"$PTY\"", Hami()});
  auto env = Env();
  env["PTY"] = slave;
  Subprocess p(argv, env);
  ASSERT_TRUE(p.WaitForLine("started").has_value());
  master.Reset();  // the terminal goes away: the kernel hangs up the pty's session
  EXPECT_TRUE(p.WaitForLine("hung up").has_value()) << "the command did not get the hangup";
  EXPECT_EQ(p.Wait(), 4);
}

// A thread that a loaded library starts in hami (the simulated NVML's host-PID resolver, a
// driver's) must block the signals hami forwards, or a signal sent to hami would go to that
// thread and end hami by its default action, leaving the command running.
TEST_F(RunCliTest, EveryThreadOfHamiButTheWaiterBlocksTheForwardedSignals) {
  Subprocess p({Hami(), "run", "-q", "--memory", "1g", "--", "/bin/sh", "-c",
                "echo started; read line; exit 0"},
               Env());
  ASSERT_TRUE(p.WaitForLine("started").has_value());
  const std::string tasks = "/proc/" + std::to_string(p.pid()) + "/task";
  DIR* dir = opendir(tasks.c_str());
  ASSERT_NE(dir, nullptr) << tasks;
  while (dirent* e = readdir(dir)) {
    const std::string tid = e->d_name;
    if (tid == "." || tid == ".." || tid == std::to_string(p.pid())) continue;
    // The main thread waits in sigwaitinfo, which shows the waited signals unblocked.
    std::ifstream status(tasks + "/" + tid + "/status");
    std::string line;
    uint64_t blocked = 0;
    while (std::getline(status, line)) {
      if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
    }
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      EXPECT_NE(blocked & (uint64_t{1} << (sig - 1)), 0u)
          << "thread " << tid << " of hami does not block signal " << sig;
    }
  }
  closedir(dir);
  p.CloseStdin();
  EXPECT_EQ(p.Wait(), 0);
}

TEST_F(RunCliTest, LimitsFileMountHoldsAProcessWithAnEmptyEnvironment) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root: --limits-file-mount creates " << node::kLimitsFilePath
                 << " when it is absent";
  }
  const bool existed = Exists(node::kLimitsFilePath);
  // Inside: the limits in the file; then a process that keeps only the loader's and the
  // simulator's variables (as after su - or an SSH login) is still held to 1 GiB.
  Outcome o = Run({"run", "-q", "--memory", "1g", "--limits-file-mount", "--", "/bin/sh", "-c",
                   std::string("cat ") + node::kLimitsFilePath +
                       "; exec env -i LD_PRELOAD=\"$LD_PRELOAD\" "
                       "LD_LIBRARY_PATH=\"$LD_LIBRARY_PATH\" "
                       "HAMI_SIM_STATE=\"$HAMI_SIM_STATE\" " HAMI_KEEP_SANITIZER_OPTIONS
                       "\"$0\" context meminfo try-alloc 2g",
                   Worker()});
  if (o.status == 1 && o.out.find("cannot make a private mount namespace") != std::string::npos) {
    GTEST_SKIP() << "this machine refuses mount namespaces: " << o.out;
  }
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT=1024m\n"));
  EXPECT_THAT(o.out, HasSubstr("HAMI_LIMITS_FORMAT=1\n"));
  EXPECT_THAT(Totals(o.out), ContainerEq(std::vector<uint64_t>{kGiB}));
  EXPECT_THAT(o.out, HasSubstr("try-alloc 2147483648 2\n"));
  // The mount was the command's alone: the host's /overrideEnv never holds its limits. One
  // made for the run is removed, unless another run (or test) that found it still holds it:
  // then it stays, empty, which is the same as none.
  std::ifstream in(node::kLimitsFilePath);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, Not(HasSubstr("/tmp/hami-run-")));
  if (!existed) {
    struct stat st;
    EXPECT_TRUE(lstat(node::kLimitsFilePath, &st) != 0 || st.st_size == 0);
  }
}

TEST_F(RunCliTest, WithoutTheLimitsFileAnEmptyEnvironmentEscapesTheLimit) {
  // Other tests leave an empty placeholder there while they bind their files onto it in
  // private mount namespaces; an empty limits file counts as absent.
  struct stat st;
  if (stat(node::kLimitsFilePath, &st) == 0 && st.st_size > 0) {
    GTEST_SKIP() << node::kLimitsFilePath << " exists here and holds limits";
  }
  Outcome o = Run({"run", "-q", "--memory", "1g", "--", "/bin/sh", "-c",
                   "exec env -i LD_PRELOAD=\"$LD_PRELOAD\" LD_LIBRARY_PATH=\"$LD_LIBRARY_PATH\" "
                   "HAMI_SIM_STATE=\"$HAMI_SIM_STATE\" " HAMI_KEEP_SANITIZER_OPTIONS
                   "\"$0\" context meminfo",
                   Worker()});
  ASSERT_EQ(o.status, 0) << o.out;
  std::vector<uint64_t> totals = Totals(o.out);
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_GT(totals[0], 2 * kGiB);
}

}  // namespace
}  // namespace hami::testing
