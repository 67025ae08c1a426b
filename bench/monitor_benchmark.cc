// hami_bench_monitor: hami-monitor's scrape with many containers on a node. The simulated API
// server runs in this process with one pod per container on the node; the container regions
// (made by the region library in this process, one live slot each holding memory on one of the
// two GPUs of a simulated h100-80g:2) sit under a temporary hook path; the real hami-monitor
// (build/bin) runs as a child process on the simulated GPU.
//
// 1. Start: the API server, C pods, C regions, the monitor; wait until a scrape shows every
//    container with its pod.
// 2. Scrapes: S sequential GET /metrics over one keep-alive connection, each timed from the
//    request's first byte to the answer's last (the client's view, what Prometheus waits for).
// 3. Memory: the monitor's VmRSS and VmHWM (/proc/<pid>/status) after the scrapes. The regions
//    are shared file mappings (about 1.3 MiB each, most of it the slot table): the pages a
//    scrape reads count in the monitor's RSS as file pages, shared with the containers.
// A table on stdout and the same figures as JSON (<this binary's dir>/monitor.json, or --json).
// The goal (p99 <= 50 ms at 200 containers) is reported, never enforced: the exit status is 0
// when every phase ran, 1 otherwise, 2 on bad flags.
//
// usage: hami_bench_monitor [--quick] [--containers N] [--scrapes N] [--json PATH]
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "harness.h"
#include "kube/resource.h"
#include "region/region.h"
#include "sim/kube/api_server.h"
#include "support/subprocess.h"

namespace hami::bench {
namespace {

constexpr char kProgram[] = "hami_bench_monitor";
constexpr char kUsage[] =
    "usage: hami_bench_monitor [--quick] [--containers N] [--scrapes N] [--json PATH]\n"
    "  hami-monitor's GET /metrics with N container regions (200) on the simulated GPU:\n"
    "  scrape latency p50/p99 against the 50 ms goal, and the monitor's RSS.\n";
constexpr char kNode[] = "bench-node";
constexpr char kProfile[] = "h100-80g:2";
constexpr int kGoalContainers = 200;
constexpr double kGoalP99Ms = 50;

struct Options {
  CommonOptions common;
  int containers = kGoalContainers;
  int scrapes = 300;
};

std::optional<Options> Parse(int argc, char** argv) {
  Options o;
  FlagReader flags(argc, argv, kProgram, kUsage, &o.common);
  while (flags.Next()) {
    std::string_view v;
    if (flags.flag() == "--containers" || flags.flag() == "--scrapes") {
      const bool containers = flags.flag() == "--containers";
      if (!flags.TakeValue(&v)) return std::nullopt;
      int n = std::atoi(std::string(v).c_str());
      if (n < 1 || n > 1000) {
        std::fprintf(stderr, "%s: %s: must be 1..1000\n", kProgram,
                     containers ? "--containers" : "--scrapes");
        return std::nullopt;
      }
      (containers ? o.containers : o.scrapes) = n;
    } else {
      flags.PrintUnknown();
      return std::nullopt;
    }
  }
  if (flags.failed()) return std::nullopt;
  if (o.common.quick) {
    o.containers = std::min(o.containers, 20);
    o.scrapes = std::min(o.scrapes, 20);
  }
  return o;
}

double MiB(int64_t bytes) { return double(bytes) / (1 << 20); }

int Run(const Options& o) {
  TempDir dir("hami-bench-monitor");
  if (!dir.ok()) {
    std::fprintf(stderr, "%s: cannot make a temporary directory\n", kProgram);
    return 1;
  }
  const std::string build = SelfDir() + "/..";
  const std::string nvml = build + "/lib/sim/libnvidia-ml.so.1";
  const std::string state = dir.path() + "/sim.state";
  setenv("HAMI_SIM_STATE", state.c_str(), 1);
  setenv("HAMI_SIM_PROFILE", kProfile, 1);

  auto api = sim::kube::ApiServer::Start({});
  if (!api.ok()) {
    std::fprintf(stderr, "%s: API server: %s\n", kProgram, api.error().message().c_str());
    return 1;
  }
  const std::string kubeconfig = dir.path() + "/kubeconfig";
  if (!(*api)->WriteKubeconfig(kubeconfig).ok() ||
      !(*api)->CreateObject(kube::kNodes, {{"metadata", {{"name", kNode}}}}).ok()) {
    std::fprintf(stderr, "%s: cannot prepare the API server\n", kProgram);
    return 1;
  }
  const std::string hook = dir.path() + "/hook";
  for (const std::string& d : {hook, hook + "/vgpu", hook + "/vgpu/containers"}) {
    mkdir(d.c_str(), 0755);
  }
  std::vector<std::unique_ptr<region::Region>> regions;
  for (int i = 0; i < o.containers; ++i) {
    const std::string name = "pod-" + std::to_string(i);
    nlohmann::json pod = {
        {"metadata", {{"name", name}, {"namespace", "default"}}},
        {"spec", {{"nodeName", kNode}, {"containers", {{{"name", "main"}, {"image", "x"}}}}}}};
    auto made = (*api)->CreateObject(kube::kPods, pod);
    if (!made.ok()) {
      std::fprintf(stderr, "%s: pod %s: %s\n", kProgram, name.c_str(),
                   made.error().message().c_str());
      return 1;
    }
    const std::string uid = (*made)["metadata"]["uid"].get<std::string>();
    const std::string cdir = hook + "/vgpu/containers/" + uid + "_main";
    mkdir(cdir.c_str(), 0755);
    region::PolicySpec spec;
    spec.device_count = 1;
    spec.memory_limit[0] = 3000ull << 20;
    spec.sm_limit[0] = 30;
    spec.uuid[0] = "GPU-bench-" + std::to_string(i % 2);
    auto r = region::Region::Open(cdir + "/usage.cache", &spec, region::Create::kIfMissing,
                                  nullptr);
    if (!r.ok() || !(*r)->Register().ok()) {
      std::fprintf(stderr, "%s: region %d: %s\n", kProgram, i,
                   r.ok() ? "no slot" : r.error().message().c_str());
      return 1;
    }
    (*r)->SetHostPid(getpid(), region::IdentitySource::kSameNamespace);
    if ((*r)->Reserve(0, 100ull << 20, region::UsageKind::kData) != region::Admission::kOk) {
      std::fprintf(stderr, "%s: region %d refused its reservation\n", kProgram, i);
      return 1;
    }
    regions.push_back(std::move(r).value());
  }

  testing::Subprocess monitor(
      {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", build + "/bin/hami-monitor", "--node-name",
       kNode, "--hook-path", hook, "--kubeconfig", kubeconfig, "--metrics-bind-address",
       "127.0.0.1:0", "--feedback-interval", "1s", "--nvml-library", nvml, "--no-health-checks"},
      {{"HAMI_SIM_STATE", state}, {"HAMI_SIM_PROFILE", kProfile}});
  int port = 0;
  while (port == 0) {
    auto line = monitor.ReadLine(30000);
    if (!line) {
      std::fprintf(stderr, "%s: hami-monitor did not start\n", kProgram);
      return 1;
    }
    if (size_t at = line->find("metrics=127.0.0.1:"); at != std::string::npos) {
      port = std::atoi(line->c_str() + at + std::strlen("metrics=127.0.0.1:"));
    }
  }
  httplib::Client http("127.0.0.1", port);
  http.set_keep_alive(true);
  const std::string ready = "hami_monitor_containers{state=\"with_pod\",zone=\"vGPU\"} " +
                            std::to_string(o.containers) + "\n";
  size_t body_bytes = 0;
  // The monitor announces no event when its first scan and the informer's sync are in: polled.
  const bool up = testing::PollUntil(
      [&] {
        auto res = http.Get("/metrics");
        if (!res || res->status != 200) return false;
        body_bytes = res->body.size();
        return res->body.find(ready) != std::string::npos;
      },
      60000, 50000);
  if (!up) {
    std::fprintf(stderr, "%s: hami-monitor never showed the %d containers\n", kProgram,
                 o.containers);
    return 1;
  }
  const int64_t rss_start = StatusBytes(monitor.pid(), "VmRSS");
  std::vector<int64_t> ns;
  ns.reserve(size_t(o.scrapes));
  for (int i = 0; i < o.scrapes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto res = http.Get("/metrics");
    const auto t1 = std::chrono::steady_clock::now();
    if (!res || res->status != 200) {
      std::fprintf(stderr, "%s: scrape %d failed\n", kProgram, i);
      return 1;
    }
    body_bytes = res->body.size();
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
  const int64_t rss = StatusBytes(monitor.pid(), "VmRSS");
  const int64_t hwm = StatusBytes(monitor.pid(), "VmHWM");
  const int64_t rss_anon = StatusBytes(monitor.pid(), "RssAnon");
  const int64_t rss_file = StatusBytes(monitor.pid(), "RssFile");
  monitor.Kill(SIGTERM);
  const int exit_status = monitor.Wait(20000);
  (*api)->Stop();

  const Percentiles p = NearestRank(ns);
  std::printf("hami-monitor: %d containers, %d scrapes of %zu bytes\n\n", o.containers,
              o.scrapes, body_bytes);
  PrintTable({{"scrape", "p50", "p95", "p99", "max"},
              {"GET /metrics", Ms(p.p50), Ms(p.p95), Ms(p.p99), Ms(p.max)}},
             1, 5, TrailingSpaces::kTrim);
  std::printf("\n");
  PrintTable({{"memory", "MiB"},
              {"VmRSS after start", Fixed(MiB(rss_start), 1)},
              {"VmRSS after scrapes", Fixed(MiB(rss), 1)},
              {"  of which anonymous", Fixed(MiB(rss_anon), 1)},
              {"  of which file (regions, binary)", Fixed(MiB(rss_file), 1)},
              {"VmHWM (peak)", Fixed(MiB(hwm), 1)}},
             1, 2, TrailingSpaces::kTrim);
  std::printf("\n");
  const bool full = o.containers == kGoalContainers;
  std::vector<Goal> goals = {AtMost("scrape p99", double(p.p99) / 1e6, "ms", kGoalP99Ms, true,
                                    std::to_string(kGoalContainers) + " containers", full)};
  std::vector<Row> rows;
  for (const Goal& g : goals) {
    rows.push_back({g.name, Fixed(g.measured.get<double>(), 3) + " " + g.unit, g.goal,
                    MeetsText(g)});
  }
  PrintTable(rows);

  Json doc;
  doc["benchmark"] = "monitor";
  doc["containers"] = o.containers;
  doc["scrapes"] = o.scrapes;
  doc["body_bytes"] = body_bytes;
  doc["scrape_ns"] = ToJson(p);
  doc["rss_start_bytes"] = rss_start;
  doc["rss_bytes"] = rss;
  doc["rss_anon_bytes"] = rss_anon;
  doc["rss_file_bytes"] = rss_file;
  doc["hwm_bytes"] = hwm;
  doc["monitor_exit_status"] = exit_status;
  Json goals_json = Json::array();
  for (const Goal& g : goals) goals_json.push_back(ToJson(g));
  doc["goals"] = goals_json;
  const std::string json_path =
      o.common.json_path.empty() ? SelfDir() + "/monitor.json" : o.common.json_path;
  if (!WriteJson(json_path, doc, kProgram)) return 1;
  return exit_status == 0 ? 0 : 1;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::Parse, hami::bench::Run);
}
