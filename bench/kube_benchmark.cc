// hami_bench_kube: what the Kubernetes client side costs, against the simulated API server
// (`hami sim apiserver`, started here as a child process so that this process's memory is the
// client's alone) holding a cluster with realistic HAMi annotations.
//
// 1. Seed: N nodes (8 GPUs each, the inventory and handshake annotations) and P pods (one
//    container asking for a GPU share, the scheduler's device annotations, bound to a node),
//    created by W threads. Reported: creates/s.
// 2. Baseline: a paginated list of every pod (ListAll, pages of 500), best of 3.
// 3. Informer initial sync of the pods, then of the nodes: time from Start() to HasSynced(),
//    and as a ratio to the plain list. The client's memory for the pods' store: RSS after the
//    sync minus RSS before (heap trimmed both times), per 1,000 pods, and as a ratio to the
//    pods' JSON size (compact encoding, as the server sends it).
// 4. Watch throughput: with the pods' informer running, W threads merge-patch E pods as fast
//    as they can; the informer's handler sees each change. Reported: patches/s written,
//    events/s delivered (first write to last event), and the lag of the last event behind the
//    last write.
// 5. Round trips: sequential merge patches and, as the baseline, sequential GETs of one pod.
//    Reported: patches/s, GETs/s and their ratio.
// A table on stdout and the same figures as JSON (<this binary's dir>/kube.json, or --json).
//
// Goals are reported (meets: yes/no), never enforced: the exit status is 0 when every phase
// ran without an error, 1 otherwise, 2 on bad flags.
//
// usage: hami_bench_kube [--quick] [--nodes N] [--pods N] [--events N] [--round-trips N]
//                        [--threads N] [--json PATH]
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/parse.h"
#include "common/unique_fd.h"
#include "harness.h"
#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "kube/time.h"

extern char** environ;

namespace hami::bench {
namespace {

constexpr char kProgram[] = "hami_bench_kube";

// The goals: an informer adds little to the list it starts from; its store costs a small
// multiple of the JSON it holds; a watch keeps up with what the writers do.
constexpr double kGoalSyncOverList = 2.0;
constexpr double kGoalStoreOverJson = 8.0;
constexpr double kGoalDeliveredOverWritten = 0.9;  // at least this fraction of the write rate
constexpr double kGoalPatchOverGet = 3.0;          // a patch round trip vs a GET's (time)

constexpr char kUsage[] =
    "usage: hami_bench_kube [--quick] [--nodes N] [--pods N] [--events N] [--round-trips N]\n"
    "                       [--threads N] [--json PATH]\n"
    "  --quick           a short run: 100 nodes, 500 pods, 500 events, 200 round trips\n"
    "  --nodes N         nodes in the cluster (default 1000)\n"
    "  --pods N          pods in the cluster (default 5000)\n"
    "  --events N        merge patches written during the watch phase (default 5000)\n"
    "  --round-trips N   sequential patches, and GETs (default 2000)\n"
    "  --threads N       writer threads for seeding and the watch phase (default 4)\n"
    "  --json PATH       where to write the JSON (default: kube.json beside this binary)\n";

struct Options : CommonOptions {
  int nodes = 1000;
  int pods = 5000;
  int events = 5000;
  int round_trips = 2000;
  int threads = 4;
};

double Seconds(int64_t ns) { return double(ns) / 1e9; }

// Resident set size of this process, after giving free heap back to the system.
int64_t TrimmedRssBytes() {
  malloc_trim(0);
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * int64_t(sysconf(_SC_PAGESIZE));
}

// ---- the server: `hami sim apiserver --port 0` in a child process ----

class ServerProcess {
 public:
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }

  // Starts it and reads its "apiserver: URL" line (bounded by 20 s).
  Result<std::string> Start(const std::string& hami) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return Error::FromErrno("pipe2");
    UniqueFd read_end(fds[0]), write_end(fds[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
    std::vector<std::string> args = {hami, "sim", "apiserver", "--port", "0"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, hami.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return Error::FromErrno("spawn " + hami, rc);
    write_end.Reset();
    std::string line;
    const int64_t deadline = MonotonicNs() + 20'000'000'000;
    char c = 0;
    while (MonotonicNs() < deadline) {
      pollfd p{read_end.get(), POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      if (read(read_end.get(), &c, 1) != 1) break;
      if (c != '\n') {
        line += c;
        continue;
      }
      constexpr std::string_view kPrefix = "apiserver: ";
      if (line.rfind(kPrefix, 0) == 0) {
        output_ = std::move(read_end);
        return line.substr(kPrefix.size());
      }
      line.clear();
    }
    return Error(ErrorCode::kTimeout, hami + " sim apiserver printed no 'apiserver: URL' line");
  }

  // The server's resident set size, from /proc (0 when unreadable).
  int64_t RssBytes() const {
    std::ifstream statm("/proc/" + std::to_string(pid_) + "/statm");
    int64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * int64_t(sysconf(_SC_PAGESIZE));
  }

 private:
  pid_t pid_ = -1;
  UniqueFd output_;  // kept open: the server's stdout must not break
};

// ---- the cluster's objects ----

nlohmann::json NodeObject(int i, kube::WallTime now) {
  std::vector<kube::NodeDevice> devices;
  for (int d = 0; d < 8; ++d) {
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid), "GPU-%08x-%04x-%04x-%04x-%012x", unsigned(i), unsigned(d),
                  0x4a1bu, 0x9c2du, unsigned(i * 8 + d));
    devices.push_back({.id = uuid,
                       .index = d,
                       .count = 10,
                       .devmem_mib = 81559,
                       .devcore = 100,
                       .type = "NVIDIA-NVIDIA H100 80GB HBM3",
                       .numa = d / 4,
                       .mode = "hami-core",
                       .health = true});
  }
  const std::string name = "node-" + std::to_string(i);
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"labels",
             {{"kubernetes.io/hostname", name},
              {"kubernetes.io/os", "linux"},
              {"gpu", "on"},
              {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}}},
            {"annotations",
             {{std::string(kube::kNodeRegisterAnnotation), kube::EncodeNodeInventory(devices)},
              {std::string(kube::kNodeHandshakeAnnotation),
               kube::EncodeHandshake(kube::HandshakeState::kRequesting, now)}}}}},
          {"status",
           {{"capacity", {{"cpu", "96"}, {"memory", "2113660Mi"}, {"nvidia.com/gpu", "80"}}},
            {"allocatable", {{"cpu", "95"}, {"memory", "2100000Mi"}, {"nvidia.com/gpu", "80"}}},
            {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
}

nlohmann::json PodObject(int i, int nodes, kube::WallTime now) {
  const int node = i % nodes;
  char uuid[64];
  std::snprintf(uuid, sizeof(uuid), "GPU-%08x-%04x-%04x-%04x-%012x", unsigned(node),
                unsigned(i % 8), 0x4a1bu, 0x9c2du, unsigned(node * 8 + i % 8));
  const kube::PodDevices devices = {
      {{.uuid = uuid, .type = "NVIDIA", .mem_mib = 8000, .cores = 30}}};
  const std::string allocated =
      kube::EncodePodDevices(devices, kube::kDevicesAllocatedAnnotation).value();
  const std::string node_name = "node-" + std::to_string(node);
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", "train-" + std::to_string(i)},
            {"namespace", "default"},
            {"labels", {{"app", "train"}, {"shard", std::to_string(i % 16)}}},
            {"annotations",
             {{std::string(kube::kVgpuNodeAnnotation), node_name},
              {std::string(kube::kVgpuTimeAnnotation), kube::EncodeUnixSeconds(now)},
              {std::string(kube::kBindPhaseAnnotation),
               kube::EncodeBindPhase(kube::BindPhase::kSuccess)},
              {std::string(kube::kBindTimeAnnotation), kube::EncodeUnixSeconds(now)},
              {std::string(kube::kDevicesAllocatedAnnotation), allocated},
              {std::string(kube::kDevicesToAllocateAnnotation), ";"}}}}},
          {"spec",
           {{"schedulerName", "hami-scheduler"},
            {"nodeName", node_name},
            {"containers",
             {{{"name", "main"},
               {"image", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"},
               {"command", {"python", "train.py"}},
               {"env", {{{"name", "NCCL_DEBUG"}, {"value", "WARN"}}}},
               {"resources",
                {{"limits",
                  {{"nvidia.com/gpu", "1"},
                   {"nvidia.com/gpumem", "8000"},
                   {"nvidia.com/gpucores", "30"}}},
                 {"requests", {{"cpu", "4"}, {"memory", "16Gi"}}}}}}}}}}};
}

// Runs fn(i) for i in [0, count) on `threads` threads; the first error, if any.
Status ParallelFor(int count, int threads, const std::function<Status(int)>& fn) {
  std::atomic<int> next{0};
  std::mutex mu;
  std::optional<Error> first;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        Status s = fn(i);
        if (!s.ok()) {
          std::lock_guard lock(mu);
          if (!first) first = s.error();
          next = count;
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  if (first) return *first;
  return OkStatus();
}

struct Figures {
  std::string error;  // the first failure; empty when every phase ran
  double seed_s = 0, creates_per_s = 0;
  double list_s = 0;
  int64_t pods_json_bytes = 0;
  double pod_sync_s = 0, node_sync_s = 0;
  int64_t store_rss_bytes = 0;
  int64_t server_rss_bytes = 0;
  double written_per_s = 0, delivered_per_s = 0, last_event_lag_ms = 0;
  uint64_t events_seen = 0;
  double patches_per_s = 0, gets_per_s = 0;
};

void Fail(Figures* f, const Error& e, std::string_view phase) {
  if (f->error.empty()) f->error = std::string(phase) + ": " + e.message();
}

void RunPhases(const Options& o, kube::Client& client, ServerProcess& server, Figures* f) {
  const kube::WallTime now = std::chrono::system_clock::now();
  // 1. seed
  int64_t t0 = MonotonicNs();
  Status seeded = ParallelFor(o.nodes + o.pods, o.threads, [&](int i) -> Status {
    auto r = i < o.nodes
                 ? client.Create(kube::kNodes, "", NodeObject(i, now))
                 : client.Create(kube::kPods, "default", PodObject(i - o.nodes, o.nodes, now));
    if (!r.ok()) return std::move(r).error();
    return OkStatus();
  });
  if (!seeded.ok()) return Fail(f, seeded.error(), "seed");
  f->seed_s = Seconds(MonotonicNs() - t0);
  f->creates_per_s = (o.nodes + o.pods) / f->seed_s;

  // 2. the plain list, best of 3
  f->list_s = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    kube::ListOptions lo;
    lo.limit = 500;
    t0 = MonotonicNs();
    auto list = client.ListAll(kube::kPods, "", lo);
    if (!list.ok()) return Fail(f, list.error(), "list");
    f->list_s = std::min(f->list_s, Seconds(MonotonicNs() - t0));
    if (rep == 0) {
      for (const auto& item : (*list)["items"]) f->pods_json_bytes += int64_t(item.dump().size());
    }
  }

  // 3. informer syncs and the store's memory
  const int64_t rss_before = TrimmedRssBytes();
  kube::Informer pods(client, kube::kPods, {});
  std::mutex seen_mu;
  std::condition_variable seen_cv;
  uint64_t updates = 0;  // guarded by seen_mu
  int64_t last_event_ns = 0;
  pods.AddHandler({.on_update = [&](const kube::ObjectPtr&, const kube::ObjectPtr&) {
    std::lock_guard lock(seen_mu);
    ++updates;
    last_event_ns = MonotonicNs();
    seen_cv.notify_all();
  }});
  t0 = MonotonicNs();
  pods.Start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  if (!pods.WaitForSync(deadline)) {
    return Fail(f, Error(ErrorCode::kTimeout, "the pods' informer did not sync in 120 s"), "sync");
  }
  f->pod_sync_s = Seconds(MonotonicNs() - t0);
  f->store_rss_bytes = TrimmedRssBytes() - rss_before;
  if (pods.store().size() != size_t(o.pods)) {
    return Fail(
        f,
        Error(ErrorCode::kInternal, "the store holds " + std::to_string(pods.store().size()) +
                                        " pods, not " + std::to_string(o.pods)),
        "sync");
  }
  {
    kube::Informer nodes(client, kube::kNodes, {});
    t0 = MonotonicNs();
    nodes.Start();
    if (!nodes.WaitForSync(deadline)) {
      return Fail(f, Error(ErrorCode::kTimeout, "the nodes' informer did not sync in 120 s"),
                  "sync");
    }
    f->node_sync_s = Seconds(MonotonicNs() - t0);
  }

  // 4. watch throughput: every patch changes one pod, the informer sees each change
  {
    std::lock_guard lock(seen_mu);
    updates = 0;
  }
  t0 = MonotonicNs();
  Status wrote = ParallelFor(o.events, o.threads, [&](int i) -> Status {
    const nlohmann::json patch = {
        {"metadata", {{"annotations", {{"hami.io/bench-seq", std::to_string(i)}}}}}};
    auto r = client.Patch(kube::kPods, "default", "train-" + std::to_string(i % o.pods),
                          kube::PatchType::kMerge, patch);
    if (!r.ok()) return std::move(r).error();
    return OkStatus();
  });
  if (!wrote.ok()) return Fail(f, wrote.error(), "watch");
  const int64_t last_write_ns = MonotonicNs();
  f->written_per_s = o.events / Seconds(last_write_ns - t0);
  // Every patch changed its pod, so the informer must see o.events updates (bounded wait).
  int64_t last_event = 0;
  {
    std::unique_lock lock(seen_mu);
    seen_cv.wait_for(lock, std::chrono::seconds(60), [&] { return updates >= uint64_t(o.events); });
    f->events_seen = updates;
    last_event = last_event_ns;
  }
  if (f->events_seen < uint64_t(o.events)) {
    return Fail(f,
                Error(ErrorCode::kTimeout, "the informer saw " + std::to_string(f->events_seen) +
                                               " of " + std::to_string(o.events) + " changes"),
                "watch");
  }
  f->delivered_per_s = o.events / Seconds(last_event - t0);
  f->last_event_lag_ms = double(last_event - last_write_ns) / 1e6;
  if (f->last_event_lag_ms < 0) f->last_event_lag_ms = 0;
  pods.Stop();
  f->server_rss_bytes = server.RssBytes();

  // 5. round trips
  t0 = MonotonicNs();
  for (int i = 0; i < o.round_trips; ++i) {
    const nlohmann::json patch = {
        {"metadata", {{"annotations", {{"hami.io/bench-rt", std::to_string(i)}}}}}};
    auto r = client.Patch(kube::kPods, "default", "train-0", kube::PatchType::kMerge, patch);
    if (!r.ok()) return Fail(f, r.error(), "round trips");
  }
  f->patches_per_s = o.round_trips / Seconds(MonotonicNs() - t0);
  t0 = MonotonicNs();
  for (int i = 0; i < o.round_trips; ++i) {
    auto r = client.Get(kube::kPods, "default", "train-0");
    if (!r.ok()) return Fail(f, r.error(), "round trips");
  }
  f->gets_per_s = o.round_trips / Seconds(MonotonicNs() - t0);
}

std::string HamiPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "hami";
  std::string dir(self, size_t(n));
  dir.resize(dir.rfind('/'));
  return dir + "/../bin/hami";  // build/bench/hami_bench_kube -> build/bin/hami
}

int Main(const Options& o) {
  ServerProcess server;
  auto url = server.Start(HamiPath());
  if (!url.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, url.error().message().c_str());
    return 1;
  }
  kube::Config config;
  config.server = *url;
  config.source = "hami sim apiserver";
  kube::ClientOptions co;
  co.qps = 0;  // unlimited: the benchmark measures the client and server, not the limiter
  co.user_agent = "hami-bench-kube";
  auto client = kube::Client::Create(config, co);
  if (!client.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, client.error().message().c_str());
    return 1;
  }
  std::printf("cluster: %d nodes, %d pods on %s; %d writer threads\n", o.nodes, o.pods,
              url->c_str(), o.threads);
  std::fflush(stdout);
  Figures f;
  RunPhases(o, **client, server, &f);
  const bool ran = f.error.empty();

  const double sync_over_list = f.list_s > 0 ? f.pod_sync_s / f.list_s : 0;
  const double store_over_json =
      f.pods_json_bytes > 0 ? double(f.store_rss_bytes) / double(f.pods_json_bytes) : 0;
  const double delivered_over_written =
      f.written_per_s > 0 ? f.delivered_per_s / f.written_per_s : 0;
  const double patch_over_get = f.patches_per_s > 0 ? f.gets_per_s / f.patches_per_s : 0;
  const double per_1000_pods_mib = double(f.store_rss_bytes) / o.pods * 1000 / 1048576.0;

  std::vector<std::vector<std::string>> rows = {
      {"figure", "value", "baseline", "ratio"},
      {"seed (creates/s)", Fixed(f.creates_per_s, 0), "", ""},
      {"pods informer sync", Fixed(f.pod_sync_s * 1000, 1) + " ms",
       "list " + Fixed(f.list_s * 1000, 1) + " ms", Fixed(sync_over_list, 2)},
      {"nodes informer sync", Fixed(f.node_sync_s * 1000, 1) + " ms", "", ""},
      {"store memory (RSS delta)", Fixed(double(f.store_rss_bytes) / 1048576.0, 1) + " MiB",
       "JSON " + Fixed(double(f.pods_json_bytes) / 1048576.0, 1) + " MiB",
       Fixed(store_over_json, 2)},
      {"  per 1,000 pods", Fixed(per_1000_pods_mib, 2) + " MiB", "", ""},
      {"watch: events/s delivered", Fixed(f.delivered_per_s, 0),
       "written " + Fixed(f.written_per_s, 0) + "/s", Fixed(delivered_over_written, 2)},
      {"watch: last event lag", Fixed(f.last_event_lag_ms, 2) + " ms", "", ""},
      {"merge-patch round trips/s", Fixed(f.patches_per_s, 0),
       "GET " + Fixed(f.gets_per_s, 0) + "/s", Fixed(patch_over_get, 2)},
      {"server RSS", Fixed(double(f.server_rss_bytes) / 1048576.0, 1) + " MiB", "", ""},
  };
  std::printf("\n");
  PrintTable(rows, 1, 4, TrailingSpaces::kTrim);

  const std::string conditions = "1000 nodes, 5000 pods";
  const bool full = o.nodes == 1000 && o.pods == 5000;
  std::vector<Goal> goals = {
      AtMost("informer sync / paginated list", sync_over_list, "x", kGoalSyncOverList, ran,
             conditions, full),
      AtMost("store memory / pods' JSON", store_over_json, "x", kGoalStoreOverJson, ran, conditions,
             full),
      AtMost("patch round trip / GET round trip", patch_over_get, "x", kGoalPatchOverGet, ran),
  };
  // delivered/written must be at least the goal: stated as written/delivered <= 1/goal.
  goals.push_back(AtMost("watch: write rate / delivered rate",
                         delivered_over_written > 0 ? 1.0 / delivered_over_written : 0, "x",
                         1.0 / kGoalDeliveredOverWritten, ran));
  std::vector<Row> goal_rows;
  for (const Goal& g : goals) {
    goal_rows.push_back(
        {g.name, Fixed(g.measured.get<double>(), 2) + " " + g.unit, g.goal, MeetsText(g)});
  }
  std::printf("\n");
  PrintTable(goal_rows);
  if (!ran) std::printf("\nfailed: %s\n", f.error.c_str());

  Json goals_json = Json::array();
  for (const Goal& g : goals) goals_json.push_back(ToJson(g));
  const Json doc = {
      {"benchmark", "kube"},
      {"config",
       {{"quick", o.quick},
        {"nodes", o.nodes},
        {"pods", o.pods},
        {"events", o.events},
        {"round_trips", o.round_trips},
        {"threads", o.threads}}},
      {"error", f.error},
      {"seed", {{"seconds", f.seed_s}, {"creates_per_s", f.creates_per_s}}},
      {"list", {{"seconds", f.list_s}, {"pods_json_bytes", f.pods_json_bytes}}},
      {"sync",
       {{"pods_seconds", f.pod_sync_s},
        {"nodes_seconds", f.node_sync_s},
        {"over_list", sync_over_list}}},
      {"memory",
       {{"store_rss_bytes", f.store_rss_bytes},
        {"per_1000_pods_bytes", int64_t(double(f.store_rss_bytes) / o.pods * 1000)},
        {"over_json", store_over_json},
        {"server_rss_bytes", f.server_rss_bytes}}},
      {"watch",
       {{"written_per_s", f.written_per_s},
        {"delivered_per_s", f.delivered_per_s},
        {"delivered_over_written", delivered_over_written},
        {"events_seen", f.events_seen},
        {"last_event_lag_ms", f.last_event_lag_ms}}},
      {"round_trips",
       {{"patches_per_s", f.patches_per_s},
        {"gets_per_s", f.gets_per_s},
        {"patch_over_get", patch_over_get}}},
      {"goals", goals_json},
  };
  std::string json_path = o.json_path;
  if (json_path.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string dir = n > 0 ? std::string(self, size_t(n)) : std::string("./x");
    json_path = dir.substr(0, dir.rfind('/')) + "/kube.json";
  }
  if (!WriteJson(json_path, doc, kProgram)) return 1;
  std::printf("\njson: %s\n", json_path.c_str());
  return ran ? 0 : 1;
}

std::optional<Options> ParseFlags(int argc, char** argv) {
  Options o;
  bool nodes_set = false, pods_set = false, events_set = false, trips_set = false;
  FlagReader flags(argc, argv, kProgram, kUsage, &o);
  while (flags.Next()) {
    const std::string_view flag = flags.flag();
    std::string_view value;
    int* target = nullptr;
    bool* set = nullptr;
    uint64_t max = 1'000'000;
    if (flag == "--nodes") {
      target = &o.nodes, set = &nodes_set, max = 100'000;
    } else if (flag == "--pods") {
      target = &o.pods, set = &pods_set, max = 1'000'000;
    } else if (flag == "--events") {
      target = &o.events, set = &events_set;
    } else if (flag == "--round-trips") {
      target = &o.round_trips, set = &trips_set;
    } else if (flag == "--threads") {
      target = &o.threads, max = 64;
    } else {
      flags.PrintUnknown();
      return std::nullopt;
    }
    if (!flags.TakeValue(&value)) return std::nullopt;
    auto n = ParseUint64(value, flag);
    if (!n.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProgram, n.error().message().c_str());
      return std::nullopt;
    }
    if (*n < 1 || *n > max) {
      std::fprintf(stderr, "%s: %.*s %" PRIu64 " is not from 1 to %" PRIu64 "\n", kProgram,
                   int(flag.size()), flag.data(), *n, max);
      return std::nullopt;
    }
    *target = int(*n);
    if (set != nullptr) *set = true;
  }
  if (flags.failed()) return std::nullopt;
  if (o.quick) {
    if (!nodes_set) o.nodes = 100;
    if (!pods_set) o.pods = 500;
    if (!events_set) o.events = 500;
    if (!trips_set) o.round_trips = 200;
  }
  return o;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::ParseFlags, hami::bench::Main);
}
