// hami_bench_nccl: what libvgpu.so adds to NCCL's communicator start-up with one process per
// GPU (the shape of vLLM's tensor parallelism and of torchrun).
//
// For 2, 4 and 8 ranks it runs the nvcc-built nccl_ranks (tests/cudart/nccl_ranks.cu: each
// rank calls ncclCommInitRank, then every collective, then destroys its communicator) on a
// simulated machine of 8 H100s, alone and under libvgpu (`hami run --sim h100-80g:8 --memory
// 8g`, one container), the two alternating from round to round so that a drift of the
// machine falls on both. A run's figure is the slowest rank's ncclCommInitRank wall time (the
// communicator is usable when every rank's init has returned). Per rank count: the median over
// the rounds of each side, and their ratio, beside the goal (<= 1.1).
//
// usage: hami_bench_nccl [--quick] [--ranks 2,4,8] [--rounds N] [--json PATH] [--check]
//   --quick     2 and 4 ranks, 2 rounds (the smoke test's run)
//   --ranks     rank counts, from 1 to 8
//   --rounds    rounds per rank count and side (default 5)
//   --json      where the figures go (default nccl.json beside this program)
//   --check     exit 1 when a goal is missed
// Exit status: 0 when every run completed (a missed goal included, unless --check), 1 when a
// run failed or the programs are missing (named), 2 for a bad flag. Without nccl_ranks (no
// nvcc or NCCL when the build was configured) it says so and exits 0 (1 with --check).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/proc.h"
#include "common/strings.h"

namespace {

constexpr double kGoalRatio = 1.1;
constexpr int kMachineGpus = 8;
constexpr int kDeadlineS = 120;

struct Options {
  std::vector<int> ranks = {2, 4, 8};
  int rounds = 5;
  std::string json;
  bool check = false;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "hami_bench_nccl: %s\nusage: hami_bench_nccl [--quick] [--ranks 2,4,8] "
               "[--rounds N] [--json PATH] [--check]\n",
               why);
  return 2;
}

bool ParseRanks(const std::string& text, std::vector<int>* out) {
  out->clear();
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > kMachineGpus) return false;
    out->push_back(int(v));
  }
  return !out->empty();
}

// Quotes `s` for /bin/sh.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Run {
  bool ok = false;
  double init_ms = 0;  // the slowest rank's
  std::string output;
};

// One run of `n` ranks on a fresh simulated machine; `vgpu` under libvgpu through hami run.
Run RunOnce(const std::string& bin, const std::string& ranks_program, const std::string& sim_lib,
            int n, bool vgpu) {
  Run r;
  char dir_template[] = "/tmp/hami-bench-nccl-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    r.output = "cannot make a temporary directory";
    return r;
  }
  const std::string state = std::string(dir) + "/sim.state";
  const std::string id = std::string(dir) + "/nccl.id";
  std::string command =
      "env -u LD_PRELOAD -u CUDA_VISIBLE_DEVICES -u CUDA_DEVICE_MEMORY_LIMIT "
      "-u CUDA_DEVICE_MEMORY_SHARED_CACHE -u NCCL_DEBUG HAMI_SIM_STATE=" +
      Quote(state) + " HAMI_SIM_PROFILE=h100-80g:" + std::to_string(kMachineGpus) + " ";
  const std::string ranks = Quote(ranks_program) + " run " + std::to_string(n) + " " + Quote(id) +
                            " --deadline " + std::to_string(kDeadlineS);
  if (vgpu) {
    command += "LD_LIBRARY_PATH= " + Quote(bin + "/hami") +
               " run -q --sim h100-80g:" + std::to_string(kMachineGpus) + " --memory 8g -- " +
               ranks;
  } else {
    command += "LD_LIBRARY_PATH=" + Quote(sim_lib) + " " + ranks;
  }
  command += " </dev/null 2>&1";
  FILE* p = popen(command.c_str(), "r");
  if (p != nullptr) {
    char buffer[4096];
    size_t got;
    while ((got = fread(buffer, 1, sizeof(buffer), p)) > 0) r.output.append(buffer, got);
    int status = pclose(p);
    r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::stringstream lines(r.output);
  int seen = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("rank ", 0) != 0) continue;
    size_t at = line.find(" init=");
    size_t ms = line.find(" init_ms=");
    if (at == std::string::npos || ms == std::string::npos || std::atoi(line.c_str() + at + 6)) {
      r.ok = false;
      continue;
    }
    r.init_ms = std::max(r.init_ms, std::strtod(line.c_str() + ms + 9, nullptr));
    ++seen;
  }
  if (seen != n ||
      r.output.find("ranks n=" + std::to_string(n) + " failed=0") == std::string::npos) {
    r.ok = false;
  }
  std::string cleanup = "rm -rf " + Quote(dir);
  if (std::system(cleanup.c_str()) != 0) {
    std::fprintf(stderr, "hami_bench_nccl: could not remove %s\n", dir);
  }
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()           ? 0
         : v.size() % 2 == 1 ? v[v.size() / 2]
                             : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  const std::string here = hami::ExecutableDir();
  o.json = here + "/nccl.json";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (a == "--quick") {
      o.ranks = {2, 4};
      o.rounds = 2;
    } else if (a == "--ranks") {
      const char* v = value("--ranks");
      if (v == nullptr || !ParseRanks(v, &o.ranks))
        return Usage("--ranks takes 1 to 8, comma-separated");
    } else if (a == "--rounds") {
      const char* v = value("--rounds");
      o.rounds = v != nullptr ? std::atoi(v) : 0;
      if (o.rounds < 1 || o.rounds > 100) return Usage("--rounds takes 1 to 100");
    } else if (a == "--json") {
      const char* v = value("--json");
      if (v == nullptr || *v == '\0') return Usage("--json takes a path");
      o.json = v;
    } else if (a == "--check") {
      o.check = true;
    } else {
      return Usage(("unknown flag " + a).c_str());
    }
  }
  const std::string bin = here + "/../bin";
  const std::string sim_lib = here + "/../lib/sim";
  const std::string ranks_program = here + "/../tests/nccl_ranks";
  if (access(ranks_program.c_str(), X_OK) != 0) {
    std::printf(
        "skipped: %s was not built (nvcc or NCCL was missing when the build was "
        "configured)\n",
        ranks_program.c_str());
    return o.check ? 1 : 0;
  }
  for (const std::string& need :
       {bin + "/hami", sim_lib + "/libcuda.so.1", here + "/../lib/libvgpu.so"}) {
    if (access(need.c_str(), R_OK) != 0) {
      std::fprintf(
          stderr,
          "hami_bench_nccl: %s is missing (build the hami, hami_sim_cuda and vgpu targets)\n",
          need.c_str());
      return 1;
    }
  }

  nlohmann::ordered_json doc;
  doc["benchmark"] = "nccl";
  doc["goal_ratio"] = kGoalRatio;
  doc["rounds"] = o.rounds;
  bool failed = false, missed = false;
  std::printf("ncclCommInitRank, the slowest rank (ms): median of %d rounds per side\n", o.rounds);
  std::printf("%-6s %12s %12s %8s %s\n", "ranks", "alone", "libvgpu", "ratio", "goal <= 1.1");
  for (int n : o.ranks) {
    std::vector<double> alone, vgpu;
    for (int round = 0; round < o.rounds && !failed; ++round) {
      for (int k = 0; k < 2; ++k) {
        const bool under = (round + k) % 2 == 1;
        Run r = RunOnce(bin, ranks_program, sim_lib, n, under);
        if (!r.ok) {
          std::fprintf(stderr, "hami_bench_nccl: %d ranks %s failed:\n%s\n", n,
                       under ? "under libvgpu" : "alone", r.output.c_str());
          failed = true;
          break;
        }
        (under ? vgpu : alone).push_back(r.init_ms);
      }
    }
    if (failed) break;
    const double a = Median(alone), v = Median(vgpu);
    const double ratio = a > 0 ? v / a : 0;
    const bool meets = ratio <= kGoalRatio;
    missed |= !meets;
    std::printf("%-6d %12.1f %12.1f %8.3f %s\n", n, a, v, ratio, meets ? "yes" : "no");
    doc["ranks"][std::to_string(n)] = {{"alone_ms", alone},    {"vgpu_ms", vgpu},
                                       {"alone_median_ms", a}, {"vgpu_median_ms", v},
                                       {"ratio", ratio},       {"meets", meets}};
  }
  doc["failed"] = failed;
  std::ofstream(o.json) << doc.dump(2) << "\n";
  std::printf("json: %s\n", o.json.c_str());
  if (failed) return 1;
  return o.check && missed ? 1 : 0;
}
