// hami_bench_cluster: pod start-up on the simulated cluster (`hami sim cluster up`), from a
// user's `kubectl apply` of a batch of GPU pods to each pod's Running phase, and the node's share
// of that time.
//
// 1. The cluster: its own, started with `hami sim cluster up --dir <tmp>/cluster --nodes N
//    --gpus G` and taken down at the end (also after a failure, and on SIGINT, SIGTERM or
//    SIGHUP), or a running one (--cluster-dir).
// 2. A watch on the run's pods (label hami-bench-run=<run>) through the project's Kubernetes
//    client, from the resourceVersion of a list made before the first apply; each event is
//    stamped with the monotonic clock as it arrives.
// 3. Per batch: one `kubectl apply -f` of a manifest of P pods (each nvidia.com/gpu 1,
//    nvidia.com/gpumem 1000, a shell running `sleep 3600` from the host's /usr), a wait until
//    every pod is Running with its container running (or has failed), then `kubectl delete` of
//    the batch and a wait for each pod's DELETED event. --repeat K batches, aggregated.
// 4. The nodes' logs (<dir>/logs/node-*.log): each pod's admit_ms, sandbox_ms, create_ms and
//    start_ms from its container's first `event=started` line.
// 5. CPU while each batch starts (apply to the last pod Running): the machine's busy share
//    (/proc/stat), and the CPU time by program (/proc/<pid>/stat, with the children each one
//    waited for) of the cluster's processes (their environment carries its HAMI_SIM_CLUSTER, or
//    a parent's does: the shims, runc, the pods' processes) and of this benchmark with kubectl;
//    the rest of the busy time is the machine's other processes.
// A table on stdout and the same figures as JSON (<this binary's dir>/cluster.json, or --json).
// The goal (p99 apply -> Running <= 2 s, stated for 50 pods on 2 nodes and 2 CPUs) is reported;
// with --check a missed goal exits 1. Exit status: 0 when every pod was timed, 1 when the run
// failed, 2 on bad flags, 128+signal when interrupted. Without root (to start a cluster) or
// kubectl it says why it skipped and exits 0 (1 with --check).
//
// usage: hami_bench_cluster [--quick] [--pods N] [--nodes N] [--gpus PROFILE] [--repeat K]
//                           [--cluster-dir DIR] [--timeout S] [--keep] [--check] [--json PATH]
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/file.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "harness.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/resource.h"
#include "kube/time.h"
#include "sim/spawn.h"

extern char** environ;

namespace hami::bench {
namespace {

constexpr char kProgram[] = "hami_bench_cluster";
constexpr char kUsage[] =
    "usage: hami_bench_cluster [--quick] [--pods N] [--nodes N] [--gpus PROFILE] [--repeat K]\n"
    "                          [--cluster-dir DIR] [--timeout S] [--keep] [--check] [--json PATH]\n"
    "  Pod start-up on the simulated cluster: N GPU pods (50) applied at once with kubectl on a\n"
    "  cluster of its own (--nodes 2, --gpus h100-80g:4) or a running one (--cluster-dir), each\n"
    "  timed from the apply to Running; the nodes' admission and CRI calls from their logs;\n"
    "  p50/p90/p99/max against the goal (p99 <= 2 s on 2 CPUs). --repeat K batches (pods\n"
    "  deleted between), --timeout S per batch (120), --keep leaves the cluster up, --check\n"
    "  exits 1 when the goal is missed. --quick: 6 pods, one batch. Needs root (to start a\n"
    "  cluster) and kubectl.\n";
constexpr char kNamespace[] = "default";
constexpr char kRunLabel[] = "hami-bench-run";
constexpr char kBatchLabel[] = "hami-bench-batch";
constexpr char kImage[] = "hami.local/sim/base:1";
// What every process of a simulated cluster carries in its environment (sim/cluster/cluster.h).
constexpr char kClusterEnv[] = "HAMI_SIM_CLUSTER";
constexpr int kGpuMemMiB = 1000;
constexpr int kGoalPods = 50;
constexpr int kGoalNodes = 2;
constexpr int kGoalCpus = 2;
constexpr double kGoalP99S = 2.0;
constexpr int kDeleteTimeoutS = 120;
constexpr int kUpTimeoutS = 180;

struct Options {
  CommonOptions common;
  int pods = kGoalPods;
  int nodes = kGoalNodes;
  std::string gpus = "h100-80g:4";
  std::string cluster_dir;  // a running cluster; empty: start one
  int repeat = 1;
  int timeout_s = 120;  // per batch, from the apply to every pod Running
  bool keep = false;
  bool check = false;
  bool nodes_given = false, gpus_given = false;
};

std::optional<int> TakeNumber(FlagReader& flags, int min, int max) {
  std::string_view v;
  if (!flags.TakeValue(&v)) return std::nullopt;
  const std::string text(v);
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || n < min || n > max) {
    std::fprintf(stderr, "%s: %s: '%s' is not a number from %d to %d\n", kProgram,
                 std::string(flags.flag()).c_str(), text.c_str(), min, max);
    return std::nullopt;
  }
  return int(n);
}

std::optional<Options> Parse(int argc, char** argv) {
  Options o;
  bool pods_given = false, repeat_given = false;
  FlagReader flags(argc, argv, kProgram, kUsage, &o.common);
  while (flags.Next()) {
    const std::string_view f = flags.flag();
    std::string_view v;
    if (f == "--pods" || f == "--nodes" || f == "--repeat" || f == "--timeout") {
      const bool pods = f == "--pods", nodes = f == "--nodes", repeat = f == "--repeat";
      auto n = TakeNumber(flags, 1, pods ? 1000 : nodes ? 16 : repeat ? 100 : 3600);
      if (!n) return std::nullopt;
      if (pods) {
        o.pods = *n;
        pods_given = true;
      } else if (nodes) {
        o.nodes = *n;
        o.nodes_given = true;
      } else if (repeat) {
        o.repeat = *n;
        repeat_given = true;
      } else {
        o.timeout_s = *n;
      }
    } else if (f == "--gpus" || f == "--cluster-dir") {
      if (!flags.TakeValue(&v)) return std::nullopt;
      if (v.empty()) {
        std::fprintf(stderr, "%s: %s: empty\n", kProgram, std::string(f).c_str());
        return std::nullopt;
      }
      if (f == "--gpus") {
        o.gpus = std::string(v);
        o.gpus_given = true;
      } else {
        std::error_code ec;
        o.cluster_dir = std::filesystem::absolute(std::string(v), ec).lexically_normal().string();
        while (o.cluster_dir.size() > 1 && o.cluster_dir.back() == '/') o.cluster_dir.pop_back();
      }
    } else if (f == "--keep") {
      o.keep = true;
    } else if (f == "--check") {
      o.check = true;
    } else {
      flags.PrintUnknown();
      return std::nullopt;
    }
  }
  if (flags.failed()) return std::nullopt;
  if (o.common.quick) {
    if (!pods_given) o.pods = 6;
    if (!repeat_given) o.repeat = 1;
  }
  return o;
}

// ---- child processes ----

// SIGINT, SIGTERM and SIGHUP, blocked in every thread and read from a signalfd, so that an
// interrupted run still deletes its pods and takes its cluster down.
sigset_t StopSignalSet() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGHUP);
  return s;
}

// The signal read from `signal_fd` when one is pending, else 0.
int ReadSignal(int signal_fd) {
  signalfd_siginfo info{};
  if (read(signal_fd, &info, sizeof(info)) == ssize_t(sizeof(info))) return int(info.ssi_signo);
  return 0;
}

std::vector<std::string> Environment(const std::map<std::string, std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string name(entry.substr(0, entry.find('=')));
    if (set.count(name) == 0) env.emplace_back(entry);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

// An executable named `name` in $PATH, or "".
std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct Ran {
  int status = -1;         // exit status, 128+signal when killed, -1 when it never ran
  std::string output;      // stdout and stderr
  int interrupted_by = 0;  // the stop signal that ended the wait (the program was killed)
  bool timed_out = false;  // killed at the deadline
};

// Runs argv (argv[0] a path) in a session of its own to its end, its output captured, at most
// `timeout_s`. With `signal_fd` >= 0, a stop signal read from it ends the wait: the program gets
// SIGTERM (SIGKILL 10 s later) and the signal is returned.
Ran RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               int timeout_s, int signal_fd) {
  Ran r;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    r.output = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  auto pid = sim::SpawnInSession(argv, env, write_end.get());
  write_end.Reset();
  if (!pid.ok()) {
    r.output = pid.error().message();
    return r;
  }
  int64_t deadline = MonotonicNs() + int64_t(timeout_s) * 1'000'000'000;
  bool killed = false;
  for (;;) {
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    if (left_ms <= 0) {
      if (killed) {
        kill(*pid, SIGKILL);
        break;
      }
      r.timed_out = r.interrupted_by == 0;
      kill(*pid, SIGTERM);
      killed = true;
      deadline = MonotonicNs() + 10'000'000'000;
      continue;
    }
    pollfd p[2] = {{read_end.get(), POLLIN, 0}, {signal_fd, POLLIN, 0}};
    const int n = poll(p, signal_fd >= 0 && !killed ? 2 : 1, int(left_ms));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (signal_fd >= 0 && !killed && (p[1].revents & POLLIN) != 0) {
      r.interrupted_by = ReadSignal(signal_fd);
      kill(*pid, SIGTERM);
      killed = true;
      deadline = MonotonicNs() + 10'000'000'000;
    }
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buf[4096];
      const ssize_t got = read(read_end.get(), buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      r.output.append(buf, size_t(got));
    }
  }
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The last `lines` lines of `text`, each indented.
std::string Tail(const std::string& text, size_t lines) {
  std::vector<std::string> all;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "    " + all[i] + "\n";
  }
  return out;
}

// ---- the pods, as the watch sees them ----

struct PodRecord {
  int batch = 0;
  // Monotonic ns of the first event showing: the pod, its node, Running with every container
  // running; its DELETED event. -1: not yet.
  int64_t seen_ns = -1, scheduled_ns = -1, running_ns = -1, deleted_ns = -1;
  std::string node;
  std::string created_at, scheduled_at;  // creationTimestamp, PodScheduled lastTransitionTime
  std::string failed;                    // "Failed: reason: message" when it ended instead
};

// Every container of `pod` has state.running, and there is at least one.
bool ContainersRunning(const nlohmann::json& pod) {
  const nlohmann::json* status = pod.contains("status") ? &pod["status"] : nullptr;
  if (status == nullptr || !status->contains("containerStatuses")) return false;
  const nlohmann::json& cs = (*status)["containerStatuses"];
  if (!cs.is_array() || cs.empty()) return false;
  for (const nlohmann::json& c : cs) {
    if (!c.is_object() || !c.contains("state") || !c["state"].is_object() ||
        !c["state"].contains("running")) {
      return false;
    }
  }
  return true;
}

std::string StringAt(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return "";
    at = &(*at)[key];
  }
  return at->is_string() ? at->get<std::string>() : "";
}

// A watch on the run's pods in its own thread: records each pod's moments (PodRecord) and
// wakes the main thread through an eventfd at every event. Only pods added with Expect() are
// recorded. Thread-safe.
class PodWatch {
 public:
  PodWatch(kube::Client* client, std::string selector, std::string resource_version, int wake_fd)
      : client_(client),
        selector_(std::move(selector)),
        wake_fd_(wake_fd),
        resource_version_(std::move(resource_version)),
        thread_([this](const std::stop_token& stop) { Loop(stop); }) {}
  ~PodWatch() { Stop(); }
  PodWatch(const PodWatch&) = delete;
  PodWatch& operator=(const PodWatch&) = delete;

  void Stop() {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
  }

  void Expect(const std::string& name, int batch) {
    MutexLock l(&mu_);
    pods_[name].batch = batch;
  }
  // A copy of the records.
  std::map<std::string, PodRecord> Pods() {
    MutexLock l(&mu_);
    return pods_;
  }
  // Why the watch ended, when it failed.
  std::string error() {
    MutexLock l(&mu_);
    return error_;
  }

 private:
  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }

  void Loop(const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      kube::WatchOptions o;
      o.label_selector = selector_;
      {
        MutexLock l(&mu_);
        o.resource_version = resource_version_;
      }
      o.timeout_seconds = 600;
      auto end = client_->Watch(
          kube::kPods, kNamespace, o, [this](kube::WatchEvent&& e) { return OnEvent(e); }, stop);
      if (stop.stop_requested()) break;
      if (!end.ok()) {
        MutexLock l(&mu_);
        error_ = end.error().message();
        Wake();
        return;
      }
      if (*end == kube::WatchEnd::kStopped) break;
    }
  }

  bool OnEvent(const kube::WatchEvent& e) {
    const int64_t now = MonotonicNs();
    const std::string rv = StringAt(e.object, {"metadata", "resourceVersion"});
    const std::string name = StringAt(e.object, {"metadata", "name"});
    MutexLock l(&mu_);
    if (!rv.empty()) resource_version_ = rv;
    if (e.type == kube::WatchEventType::kError || e.type == kube::WatchEventType::kBookmark) {
      return true;
    }
    auto it = pods_.find(name);
    if (it == pods_.end()) return true;
    PodRecord& p = it->second;
    if (e.type == kube::WatchEventType::kDeleted) {
      if (p.deleted_ns < 0) p.deleted_ns = now;
      Wake();
      return true;
    }
    const nlohmann::json& pod = e.object;
    if (p.seen_ns < 0) {
      p.seen_ns = now;
      p.created_at = StringAt(pod, {"metadata", "creationTimestamp"});
    }
    const std::string node = StringAt(pod, {"spec", "nodeName"});
    if (!node.empty() && p.scheduled_ns < 0) {
      p.scheduled_ns = now;
      p.node = node;
    }
    if (p.scheduled_at.empty() && pod.contains("status") && pod["status"].is_object() &&
        pod["status"].contains("conditions") && pod["status"]["conditions"].is_array()) {
      for (const nlohmann::json& c : pod["status"]["conditions"]) {
        if (StringAt(c, {"type"}) == "PodScheduled" && StringAt(c, {"status"}) == "True") {
          p.scheduled_at = StringAt(c, {"lastTransitionTime"});
        }
      }
    }
    const std::string phase = StringAt(pod, {"status", "phase"});
    if (p.running_ns < 0 && phase == "Running" && ContainersRunning(pod)) p.running_ns = now;
    if (p.running_ns < 0 && p.failed.empty() && (phase == "Failed" || phase == "Succeeded")) {
      p.failed = phase + ": " + StringAt(pod, {"status", "reason"}) + ": " +
                 StringAt(pod, {"status", "message"});
    }
    Wake();
    return true;
  }

  kube::Client* client_;
  std::string selector_;
  int wake_fd_;
  Mutex mu_;
  std::string resource_version_ GUARDED_BY(mu_);
  std::map<std::string, PodRecord> pods_ GUARDED_BY(mu_);
  std::string error_ GUARDED_BY(mu_);
  std::jthread thread_;  // last: it stops before the rest goes
};

enum class Waited { kDone, kTimedOut, kInterrupted, kWatchFailed };

// Waits, on the watch's wake-ups, until `done()` holds, the deadline passes, a stop signal comes
// (its number in *signal; with signal_fd < 0 signals are not read) or the watch fails.
template <typename Done>
Waited WaitFor(PodWatch& watch, int wake_fd, int signal_fd, int64_t deadline_ns, int* signal,
               Done done) {
  for (;;) {
    if (done()) return Waited::kDone;
    if (!watch.error().empty()) return Waited::kWatchFailed;
    const int64_t left_ms = (deadline_ns - MonotonicNs() + 999'999) / 1'000'000;
    if (left_ms <= 0) return Waited::kTimedOut;
    pollfd p[2] = {{wake_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    const int n = poll(p, signal_fd >= 0 ? 2 : 1, int(left_ms));
    if (n < 0 && errno != EINTR) return Waited::kTimedOut;
    if (n <= 0) continue;
    if (signal_fd >= 0 && (p[1].revents & POLLIN) != 0) {
      *signal = ReadSignal(signal_fd);
      return Waited::kInterrupted;
    }
    uint64_t count = 0;
    (void)!read(wake_fd, &count, sizeof(count));
  }
}

// ---- the manifest ----

std::string PodName(const std::string& run, int batch, int i) {
  return "bench-" + run + "-" + std::to_string(batch) + "-" + std::to_string(i);
}

std::string Manifest(const std::string& run, int batch, int pods, bool scheduler_name) {
  std::string out;
  for (int i = 0; i < pods; ++i) {
    out += "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: " + PodName(run, batch, i) +
           "\n  namespace: " + kNamespace + "\n  labels:\n    " + kRunLabel + ": \"" + run +
           "\"\n    " + kBatchLabel + ": \"" + std::to_string(batch) +
           "\"\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 5\n";
    if (scheduler_name) out += "  schedulerName: hami-scheduler\n";
    out += std::string("  containers:\n  - name: main\n    image: ") + kImage +
           "\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n"
           "    resources:\n      limits:\n        nvidia.com/gpu: 1\n"
           "        nvidia.com/gpumem: " +
           std::to_string(kGpuMemMiB) + "\n";
  }
  return out;
}

// ---- the nodes' logs ----

struct NodeShare {
  int64_t admit_ms = 0, sandbox_ms = 0, create_ms = 0, start_ms = 0;
  int64_t cri_ms() const { return sandbox_ms + create_ms + start_ms; }
  int64_t sum_ms() const { return admit_ms + cri_ms(); }
};

// The first `event=started` line (attempt 0) of container NS/POD/main for every pod of
// `names`, from <dir>/logs/node-*.log.
std::map<std::string, NodeShare> ReadNodeShares(const std::string& dir,
                                                const std::set<std::string>& names) {
  std::map<std::string, NodeShare> out;
  const std::string logs = dir + "/logs";
  DIR* d = opendir(logs.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("node-", 0) == 0 && name.size() > 4 && name.ends_with(".log")) {
      files.push_back(logs + "/" + name);
    }
  }
  closedir(d);
  const std::string prefix = std::string(kNamespace) + "/";
  for (const std::string& file : files) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("event=started ") == std::string::npos) continue;
      std::map<std::string, std::string> kv;
      std::stringstream words(line);
      std::string word;
      while (words >> word) {
        const size_t eq = word.find('=');
        if (eq != std::string::npos) kv[word.substr(0, eq)] = word.substr(eq + 1);
      }
      const std::string& container = kv["container"];
      if (container.rfind(prefix, 0) != 0 || kv["attempt"] != "0") continue;
      const size_t slash = container.find('/', prefix.size());
      if (slash == std::string::npos) continue;
      const std::string pod = container.substr(prefix.size(), slash - prefix.size());
      if (names.count(pod) == 0 || out.count(pod) != 0) continue;
      NodeShare s;
      bool ok = true;
      for (auto [key, field] : {std::pair{"admit_ms", &s.admit_ms},
                                {"sandbox_ms", &s.sandbox_ms},
                                {"create_ms", &s.create_ms},
                                {"start_ms", &s.start_ms}}) {
        auto v = ParseInt64(kv[key], key);
        if (!v.ok()) {
          ok = false;
          break;
        }
        *field = *v;
      }
      if (ok) out[pod] = s;
    }
  }
  return out;
}

// ---- CPU ----

struct ProcessCpu {
  std::string program;
  pid_t parent = 0;
  bool marked = false;  // its environment carries the cluster's HAMI_SIM_CLUSTER
  uint64_t start_ticks = 0;
  int64_t own_ticks = 0;       // utime + stime
  int64_t children_ticks = 0;  // cutime + cstime: the children it waited for
};

// A decimal field of /proc; 0 when it is not one.
int64_t Number(const std::string& text) {
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  return end != text.c_str() && *end == '\0' ? int64_t(n) : 0;
}

// "hami-sim apiserver" for hami-sim (its first argument names its role), else the command name.
std::string ProgramOf(const std::string& pid, const std::string& comm) {
  if (comm != "hami-sim") return comm;
  auto cmdline = ReadFileToString("/proc/" + pid + "/cmdline", 4096);
  if (!cmdline.ok()) return comm;
  const size_t first = cmdline->find('\0');
  if (first == std::string::npos || first + 1 >= cmdline->size()) return comm;
  return comm + " " + std::string(cmdline->c_str() + first + 1);
}

// Every process's CPU time so far, by PID; `marker` ("HAMI_SIM_CLUSTER=<dir>") marks the
// cluster's own.
std::map<pid_t, ProcessCpu> SnapshotCpu(const std::string& marker) {
  std::map<pid_t, ProcessCpu> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = pid_t(Number(e->d_name));
    if (pid <= 0) continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    auto stat = ReadFileToString(dir + "/stat", 4096);
    if (!stat.ok()) continue;
    const size_t open = stat->find('('), close = stat->rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::stringstream rest(stat->substr(close + 2));
    std::vector<std::string> f;
    std::string word;
    while (rest >> word) f.push_back(word);
    // f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17, starttime 22.
    if (f.size() < 20) continue;
    ProcessCpu p;
    p.program = ProgramOf(e->d_name, stat->substr(open + 1, close - open - 1));
    p.parent = pid_t(Number(f[1]));
    p.own_ticks = Number(f[11]) + Number(f[12]);
    p.children_ticks = Number(f[13]) + Number(f[14]);
    p.start_ticks = uint64_t(Number(f[19]));
    if (auto env = ReadFileToString(dir + "/environ", 1 << 20); env.ok()) {
      for (size_t at = env->find(marker); at != std::string::npos && !p.marked;
           at = env->find(marker, at + 1)) {
        const size_t end = at + marker.size();
        p.marked =
            (at == 0 || (*env)[at - 1] == '\0') && (end == env->size() || (*env)[end] == '\0');
      }
    }
    out[pid] = p;
  }
  closedir(proc);
  return out;
}

// The machine's busy and total ticks (/proc/stat's cpu line).
std::pair<int64_t, int64_t> MachineTicks() {
  auto stat = ReadFileToString("/proc/stat", 1 << 16);
  if (!stat.ok()) return {0, 0};
  std::stringstream in(stat->substr(0, stat->find('\n')));
  std::string cpu;
  in >> cpu;
  int64_t v, total = 0, idle = 0;
  for (int i = 0; in >> v; ++i) {
    total += v;
    if (i == 3 || i == 4) idle += v;  // idle, iowait
  }
  return {total - idle, total};
}

// What the cores did while a batch started (summed over the batches).
struct CpuUse {
  int64_t busy_ticks = 0, total_ticks = 0;  // the machine
  // The CPU seconds of the cluster's processes (those started with its HAMI_SIM_CLUSTER and
  // their descendants: containerd's shims and the pods' processes) and of this benchmark (with
  // kubectl), by program; "<program> (its children)" for the children a process waited for in
  // the window (runc under containerd-shim).
  std::map<std::string, double> by_program;
  double cluster_s = 0;  // the sum of by_program
};

class CpuWindow {
 public:
  explicit CpuWindow(std::string marker)
      : marker_(std::move(marker)), start_(SnapshotCpu(marker_)), machine_(MachineTicks()) {}

  // Adds the window, from its start to now, to *use.
  void End(CpuUse* use) const {
    const double tick_s = 1.0 / double(sysconf(_SC_CLK_TCK));
    const auto machine = MachineTicks();
    use->busy_ticks += machine.first - machine_.first;
    use->total_ticks += machine.second - machine_.second;
    const std::map<pid_t, ProcessCpu> now = SnapshotCpu(marker_);
    const pid_t self = getpid();
    auto counted = [&](pid_t pid) {
      for (int depth = 0; pid > 1 && depth < 64; ++depth) {
        auto it = now.find(pid);
        if (it == now.end()) return false;
        if (it->second.marked || pid == self) return true;
        pid = it->second.parent;
      }
      return false;
    };
    for (const auto& [pid, p] : now) {
      if (!counted(pid)) continue;
      int64_t own = p.own_ticks, children = p.children_ticks;
      if (auto it = start_.find(pid);
          it != start_.end() && it->second.start_ticks == p.start_ticks) {
        own -= it->second.own_ticks;
        children -= it->second.children_ticks;
      }
      const std::string program =
          pid == self ? std::string(kProgram) + " (and kubectl)" : p.program;
      if (own > 0) use->by_program[program] += double(own) * tick_s;
      if (children > 0 && pid != self) {
        use->by_program[program + " (its children)"] += double(children) * tick_s;
      } else if (children > 0) {
        use->by_program[program] += double(children) * tick_s;
      }
      use->cluster_s += double(std::max<int64_t>(own, 0) + std::max<int64_t>(children, 0)) * tick_s;
    }
  }

 private:
  std::string marker_;
  std::map<pid_t, ProcessCpu> start_;
  std::pair<int64_t, int64_t> machine_;
};

// ---- statistics ----

struct Summary {
  size_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// Nearest rank, as NearestRank (harness.h): the ceil(p/100 * n)-th smallest.
Summary Summarize(std::vector<double> v) {
  Summary s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.p50 = NearestRankOf(v, 50);
  s.p90 = NearestRankOf(v, 90);
  s.p99 = NearestRankOf(v, 99);
  s.max = v.back();
  return s;
}

Json ToJson(const Summary& s) {
  return {{"count", s.count}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}};
}

double Ms(int64_t from_ns, int64_t to_ns) { return double(to_ns - from_ns) / 1e6; }

std::string LoadAverage() {
  auto text = ReadFileToString("/proc/loadavg", 256);
  if (!text.ok()) return "?";
  std::stringstream in(*text);
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- the run ----

struct PodResult {
  std::string name, node;
  int batch = 0;
  double created_ms = -1, scheduled_ms = -1, running_ms = -1;  // from the batch's apply
  std::optional<double> objects_scheduled_s;                   // creationTimestamp -> PodScheduled
  std::optional<NodeShare> node_share;
};

struct BatchResult {
  int batch = 0;
  double apply_ms = 0;        // kubectl apply, start to exit
  double all_running_ms = 0;  // the apply to the last pod Running
  int running = 0, failed = 0, missing = 0;
};

struct Figures;

class ClusterBenchmark {
 public:
  explicit ClusterBenchmark(const Options& o) : o_(o) {}
  int Run();

 private:
  int Fail(const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", kProgram, why.c_str());
    failed_ = true;
    return 1;
  }
  int Interrupted() {
    std::fprintf(stderr, "%s: stopped by signal %d (%s); deleting the pods%s\n", kProgram, signal_,
                 strsignal(signal_),
                 started_cluster_ && !o_.keep ? ", taking the cluster down" : "");
    failed_ = true;
    return 128 + signal_;
  }
  int Measure();
  int RunBatch(int batch);
  void Collect();
  void TearDown();
  Figures Compute() const;
  void Print(const Figures& f) const;
  Json Document(const Figures& f) const;  // the JSON
  int Report();
  void RemoveOwnFiles();

  const Options& o_;
  std::string base_;         // our temporary directory (manifests, up's output, kept logs)
  std::string cluster_dir_;  // the cluster's directory
  std::string kubectl_;
  std::vector<std::string> kubectl_env_;
  bool started_cluster_ = false;
  bool webhook_ = true;
  int cluster_nodes_ = 0;  // as cluster.json lists them
  double up_ms_ = 0;
  std::string run_;
  UniqueFd signal_fd_, wake_fd_;
  int signal_ = 0;
  bool failed_ = false;
  bool down_failed_ = false;
  bool applied_ = false;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<PodWatch> watch_;
  std::vector<BatchResult> batches_;
  CpuUse cpu_;
  std::string load_start_, load_end_;
  std::vector<int64_t> apply_start_ns_;  // per batch
  std::vector<PodResult> pods_;
};

int ClusterBenchmark::Run() {
  if (geteuid() != 0 && o_.cluster_dir.empty()) {
    std::printf(
        "%s: skipped: starting a simulated cluster needs root (its nodes run containerd; "
        "give --cluster-dir of a running cluster otherwise)\n",
        kProgram);
    return o_.check ? 1 : 0;
  }
  kubectl_ = FindInPath("kubectl");
  if (kubectl_.empty()) {
    std::printf("%s: skipped: kubectl is not in PATH (scripts/setup.sh installs it)\n", kProgram);
    return o_.check ? 1 : 0;
  }
  if (!o_.cluster_dir.empty() && (o_.nodes_given || o_.gpus_given)) {
    std::fprintf(stderr,
                 "%s: --nodes and --gpus are the cluster's own with --cluster-dir; "
                 "ignored\n",
                 kProgram);
  }
  const sigset_t stop = StopSignalSet();
  if (sigprocmask(SIG_BLOCK, &stop, nullptr) != 0) return Fail("cannot block the stop signals");
  signal_fd_.Reset(signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
  wake_fd_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!signal_fd_.valid() || !wake_fd_.valid()) return Fail("cannot make a signalfd or eventfd");
  char tmpl[] = "/tmp/hami-bench-cluster-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Fail("cannot make a temporary directory");
  base_ = tmpl;
  char id[16];
  std::snprintf(id, sizeof(id), "%06x",
                unsigned((uint64_t(RealtimeNs() / 1000) ^ uint64_t(getpid())) & 0xffffff));
  run_ = id;
  load_start_ = LoadAverage();

  int status = Measure();
  TearDown();
  if (status == 0) status = Report();
  if (started_cluster_ && o_.keep) {
    std::printf(
        "\nThe cluster stays up (--keep): KUBECONFIG=%s/kubeconfig; take it down with "
        "hami sim cluster down --dir %s\n",
        cluster_dir_.c_str(), cluster_dir_.c_str());
  }
  if (down_failed_) {
    // The cluster's directory may still hold a node's mounts: nothing under it is removed here.
    std::fprintf(stderr,
                 "%s: %s is kept; once `hami sim cluster down --dir %s` succeeds, remove it\n",
                 kProgram, base_.c_str(), cluster_dir_.c_str());
    return status == 0 ? 1 : status;
  }
  if (failed_ && std::filesystem::exists(base_ + "/logs")) {
    std::fprintf(stderr, "%s: the cluster's logs are kept in %s/logs\n", kProgram, base_.c_str());
  } else if (!(o_.keep && started_cluster_)) {
    RemoveOwnFiles();
  }
  return status;
}

void ClusterBenchmark::RemoveOwnFiles() {
  // The manifests, up's output and a copy of the logs; the cluster's directory is gone once down
  // succeeded (down removes it), and is never walked here (a node's mounts could be under it).
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base_, ec)) {
    if (entry.path().string() == cluster_dir_) return;
    std::filesystem::remove_all(entry.path(), ec);
  }
  rmdir(base_.c_str());
}

// What a cluster of this build needs (tests/cluster's dependencies), beside the benchmark in
// the build tree, each with the target that builds it.
constexpr std::pair<const char*, const char*> kClusterPieces[] = {
    {"bin/hami", "hami"},
    {"bin/hami-sim", "hami-sim"},
    {"bin/hami-device-plugin", "hami-device-plugin"},
    {"bin/hami-scheduler", "hami-scheduler"},
    {"bin/hami-memory-demo", "hami-memory-demo"},
    {"bin/hami-sim-pause", "hami_sim_pause"},
    {"lib/libvgpu.so", "vgpu"},
    {"lib/sim/libcuda.so.1", "hami_sim_cuda"},
    {"lib/sim/libnvidia-ml.so.1", "hami_sim_nvml"},
};

int ClusterBenchmark::Measure() {
  const std::string hami = SelfDir() + "/../bin/hami";
  if (o_.cluster_dir.empty()) {
    for (const auto& [path, target] : kClusterPieces) {
      const std::string file = SelfDir() + "/../" + path;
      if (access(file.c_str(), R_OK) != 0) {
        return Fail(file + " is missing: build it (cmake --build <build dir> --target " + target +
                    ")");
      }
    }
    cluster_dir_ = base_ + "/cluster";
    std::printf("%s: starting a cluster of %d node(s) (%s) in %s\n", kProgram, o_.nodes,
                o_.gpus.c_str(), cluster_dir_.c_str());
    std::fflush(stdout);
    started_cluster_ = true;
    const int64_t t0 = MonotonicNs();
    Ran up = RunProgram({hami, "sim", "cluster", "up", "--dir", cluster_dir_, "--nodes",
                         std::to_string(o_.nodes), "--gpus", o_.gpus},
                        Environment({}), kUpTimeoutS, signal_fd_.get());
    up_ms_ = Ms(t0, MonotonicNs());
    (void)WriteTextFile(base_ + "/up.log", up.output, kProgram);
    if (up.interrupted_by != 0) {
      signal_ = up.interrupted_by;
      return Interrupted();
    }
    if (up.status != 0) {
      return Fail("hami sim cluster up failed (exit status " + std::to_string(up.status) +
                  (up.timed_out ? ", timed out" : "") + "):\n" + Tail(up.output, 15));
    }
  } else {
    cluster_dir_ = o_.cluster_dir;
  }
  auto info_text = ReadFileToString(cluster_dir_ + "/cluster.json", 1 << 20);
  if (!info_text.ok())
    return Fail("no cluster in " + cluster_dir_ + ": " + info_text.error().message());
  const Json info = Json::parse(*info_text, nullptr, false);
  if (info.is_discarded()) return Fail(cluster_dir_ + "/cluster.json does not parse");
  webhook_ = info.value("webhook", false);
  const Json& nodes = info.contains("nodes") ? info["nodes"] : Json::array();
  cluster_nodes_ = nodes.is_array() ? int(nodes.size()) : 0;
  const std::string kubeconfig = cluster_dir_ + "/kubeconfig";
  kubectl_env_ = Environment({{"KUBECONFIG", kubeconfig}});

  auto config = kube::LoadKubeconfig(kubeconfig);
  if (!config.ok()) return Fail(config.error().message());
  kube::ClientOptions co;
  co.qps = 0;
  auto client = kube::Client::Create(*config, co);
  if (!client.ok()) return Fail(client.error().message());
  client_ = std::move(client).value();
  const std::string selector = std::string(kRunLabel) + "=" + run_;
  kube::ListOptions lo;
  lo.label_selector = selector;
  auto list = client_->List(kube::kPods, kNamespace, lo);
  if (!list.ok()) return Fail(list.error().message());
  watch_ = std::make_unique<PodWatch>(
      client_.get(), selector, StringAt(*list, {"metadata", "resourceVersion"}), wake_fd_.get());
  for (int batch = 0; batch < o_.repeat; ++batch) {
    if (int s = RunBatch(batch); s != 0) return s;
  }
  load_end_ = LoadAverage();
  Collect();
  return 0;
}

int ClusterBenchmark::RunBatch(int batch) {
  const std::string manifest = base_ + "/batch-" + std::to_string(batch) + ".yaml";
  if (!WriteTextFile(manifest, Manifest(run_, batch, o_.pods, !webhook_), kProgram)) {
    return Fail("cannot write " + manifest);
  }
  for (int i = 0; i < o_.pods; ++i) watch_->Expect(PodName(run_, batch, i), batch);
  BatchResult b;
  b.batch = batch;
  const CpuWindow cpu(std::string(kClusterEnv) + "=" + cluster_dir_);
  applied_ = true;
  const int64_t t0 = MonotonicNs();
  apply_start_ns_.push_back(t0);
  Ran apply =
      RunProgram({kubectl_, "apply", "-f", manifest}, kubectl_env_, o_.timeout_s, signal_fd_.get());
  b.apply_ms = Ms(t0, MonotonicNs());
  if (apply.interrupted_by != 0) {
    signal_ = apply.interrupted_by;
    return Interrupted();
  }
  if (apply.status != 0) {
    return Fail("kubectl apply -f " + manifest + " failed (exit status " +
                std::to_string(apply.status) + "):\n" + Tail(apply.output, 10));
  }
  auto settled = [&] {
    for (const auto& [name, p] : watch_->Pods()) {
      if (p.batch == batch && p.running_ns < 0 && p.failed.empty()) return false;
    }
    return true;
  };
  const Waited w = WaitFor(*watch_, wake_fd_.get(), signal_fd_.get(),
                           t0 + int64_t(o_.timeout_s) * 1'000'000'000, &signal_, settled);
  cpu.End(&cpu_);
  if (w == Waited::kInterrupted) return Interrupted();
  if (w == Waited::kWatchFailed) return Fail("the watch on the pods failed: " + watch_->error());
  int64_t last = t0;
  for (const auto& [name, p] : watch_->Pods()) {
    if (p.batch != batch) continue;
    if (p.running_ns >= 0) {
      ++b.running;
      last = std::max(last, p.running_ns);
    } else if (!p.failed.empty()) {
      ++b.failed;
      std::fprintf(stderr, "%s: pod %s: %s\n", kProgram, name.c_str(), p.failed.c_str());
    } else {
      ++b.missing;
      std::fprintf(stderr, "%s: pod %s: not Running after %d s (%s)\n", kProgram, name.c_str(),
                   o_.timeout_s,
                   p.seen_ns < 0        ? "never seen"
                   : p.scheduled_ns < 0 ? "not scheduled"
                                        : p.node.c_str());
    }
  }
  b.all_running_ms = Ms(t0, last);
  batches_.push_back(b);
  std::printf("  batch %d: %d/%d pods Running, the last %.0f ms after the apply (apply %.0f ms)\n",
              batch, b.running, o_.pods, b.all_running_ms, b.apply_ms);
  std::fflush(stdout);
  if (b.running != o_.pods) {
    return Fail(std::to_string(o_.pods - b.running) + " of " + std::to_string(o_.pods) +
                " pods of batch " + std::to_string(batch) + " did not run (kube-scheduler, " +
                "hami-scheduler and node logs in " + cluster_dir_ + "/logs)");
  }
  // Delete the batch and wait until every pod is gone before the next one starts.
  Ran del = RunProgram(
      {kubectl_, "delete", "pods", "-n", kNamespace, "-l",
       std::string(kRunLabel) + "=" + run_ + "," + kBatchLabel + "=" + std::to_string(batch),
       "--wait=false"},
      kubectl_env_, kDeleteTimeoutS, signal_fd_.get());
  if (del.interrupted_by != 0) {
    signal_ = del.interrupted_by;
    return Interrupted();
  }
  if (del.status != 0) return Fail("kubectl delete failed:\n" + Tail(del.output, 10));
  auto gone = [&] {
    for (const auto& [name, p] : watch_->Pods()) {
      if (p.batch == batch && p.deleted_ns < 0) return false;
    }
    return true;
  };
  const Waited g =
      WaitFor(*watch_, wake_fd_.get(), signal_fd_.get(),
              MonotonicNs() + int64_t(kDeleteTimeoutS) * 1'000'000'000, &signal_, gone);
  if (g == Waited::kInterrupted) return Interrupted();
  if (g != Waited::kDone)
    return Fail("the pods of batch " + std::to_string(batch) + " were not deleted");
  return 0;
}

void ClusterBenchmark::TearDown() {
  // After a failure the cluster's logs are kept: down removes its directory.
  if (!cluster_dir_.empty() && failed_ && signal_ == 0 && started_cluster_ && !o_.keep) {
    std::error_code ec;
    std::filesystem::copy(cluster_dir_ + "/logs", base_ + "/logs",
                          std::filesystem::copy_options::recursive, ec);
  }
  if (applied_ && watch_ != nullptr) {
    Ran del =
        RunProgram({kubectl_, "delete", "pods", "-n", kNamespace, "-l",
                    std::string(kRunLabel) + "=" + run_, "--wait=false", "--ignore-not-found"},
                   kubectl_env_, kDeleteTimeoutS, -1);
    if (del.status != 0) {
      std::fprintf(stderr, "%s: kubectl delete of the run's pods failed:\n%s", kProgram,
                   Tail(del.output, 10).c_str());
    } else if (!started_cluster_ || o_.keep) {
      // The cluster stays: the pods must be gone before this returns.
      int unused = 0;
      auto gone = [&] {
        for (const auto& [name, p] : watch_->Pods()) {
          if (p.seen_ns >= 0 && p.deleted_ns < 0) return false;
        }
        return true;
      };
      if (WaitFor(*watch_, wake_fd_.get(), -1,
                  MonotonicNs() + int64_t(kDeleteTimeoutS) * 1'000'000'000, &unused,
                  gone) != Waited::kDone) {
        std::fprintf(stderr, "%s: some of the run's pods were not deleted (label %s=%s)\n",
                     kProgram, kRunLabel, run_.c_str());
      }
    }
  }
  if (watch_ != nullptr) watch_->Stop();
  if (!started_cluster_) return;
  if (o_.keep) return;  // Run() says how to take it down
  const std::string hami = SelfDir() + "/../bin/hami";
  Ran down = RunProgram({hami, "sim", "cluster", "down", "--dir", cluster_dir_}, Environment({}),
                        kUpTimeoutS, -1);
  if (down.status != 0) {
    std::fprintf(stderr, "%s: hami sim cluster down --dir %s failed:\n%s", kProgram,
                 cluster_dir_.c_str(), Tail(down.output, 12).c_str());
    failed_ = true;
    down_failed_ = true;
  }
}

void ClusterBenchmark::Collect() {
  const std::map<std::string, PodRecord> records = watch_->Pods();
  std::set<std::string> names;
  for (const auto& [name, p] : records) names.insert(name);
  const std::map<std::string, NodeShare> shares = ReadNodeShares(cluster_dir_, names);
  // The records hold monotonic times; each pod's are taken from its batch's apply.
  for (const auto& [name, p] : records) {
    PodResult r;
    r.name = name;
    r.node = p.node;
    r.batch = p.batch;
    const int64_t t0 = apply_start_ns_[size_t(p.batch)];
    if (p.seen_ns >= 0) r.created_ms = Ms(t0, p.seen_ns);
    if (p.scheduled_ns >= 0) r.scheduled_ms = Ms(t0, p.scheduled_ns);
    if (p.running_ns >= 0) r.running_ms = Ms(t0, p.running_ns);
    auto created = kube::ParseTime(p.created_at);
    auto scheduled = kube::ParseTime(p.scheduled_at);
    if (created.ok() && scheduled.ok()) {
      r.objects_scheduled_s = std::chrono::duration<double>(*scheduled - *created).count();
    }
    if (auto it = shares.find(name); it != shares.end()) r.node_share = it->second;
    pods_.push_back(r);
  }
}

// The run's figures, per pod, over the pods that reached Running.
struct Figures {
  size_t timed = 0;
  Summary created, scheduled, running, scheduled_to_running;      // ms, as the watch saw them
  Summary objects_created_to_scheduled;                           // s, second precision
  Summary admit, sandbox, create, start, cri, node_sum, outside;  // ms, the node's logs
  size_t node_pods = 0;
  double cri_share = 0, node_share = 0;  // of the sum of apply -> Running
  // While the pods started: the machine's busy share and CPU seconds, the cluster's (and this
  // benchmark's) CPU seconds by program, the most first.
  double busy = 0, busy_s = 0, cluster_s = 0;
  std::vector<std::pair<std::string, double>> cpu_by_program;
  Goal goal;
};

Figures ClusterBenchmark::Compute() const {
  std::vector<double> created, scheduled, running, sched_to_running, objects;
  std::vector<double> admit, sandbox, create, start, cri, sum, outside;
  double cri_total = 0, node_total = 0, running_total = 0;
  Figures f;
  for (const PodResult& r : pods_) {
    if (r.running_ms < 0) continue;
    ++f.timed;
    running.push_back(r.running_ms);
    if (r.created_ms >= 0) created.push_back(r.created_ms);
    if (r.scheduled_ms >= 0) {
      scheduled.push_back(r.scheduled_ms);
      sched_to_running.push_back(r.running_ms - r.scheduled_ms);
    }
    if (r.objects_scheduled_s) objects.push_back(*r.objects_scheduled_s);
    if (!r.node_share) continue;
    const NodeShare& n = *r.node_share;
    admit.push_back(double(n.admit_ms));
    sandbox.push_back(double(n.sandbox_ms));
    create.push_back(double(n.create_ms));
    start.push_back(double(n.start_ms));
    cri.push_back(double(n.cri_ms()));
    sum.push_back(double(n.sum_ms()));
    if (r.scheduled_ms >= 0) outside.push_back(r.running_ms - r.scheduled_ms - double(n.sum_ms()));
    cri_total += double(n.cri_ms());
    node_total += double(n.sum_ms());
    running_total += r.running_ms;
  }
  f.created = Summarize(created);
  f.scheduled = Summarize(scheduled);
  f.running = Summarize(running);
  f.scheduled_to_running = Summarize(sched_to_running);
  f.objects_created_to_scheduled = Summarize(objects);
  f.admit = Summarize(admit);
  f.sandbox = Summarize(sandbox);
  f.create = Summarize(create);
  f.start = Summarize(start);
  f.cri = Summarize(cri);
  f.node_sum = Summarize(sum);
  f.outside = Summarize(outside);
  f.node_pods = sum.size();
  f.cri_share = running_total > 0 ? cri_total / running_total : 0;
  f.node_share = running_total > 0 ? node_total / running_total : 0;
  f.busy = cpu_.total_ticks > 0 ? double(cpu_.busy_ticks) / double(cpu_.total_ticks) : 0;
  f.busy_s = double(cpu_.busy_ticks) / double(sysconf(_SC_CLK_TCK));
  f.cluster_s = cpu_.cluster_s;
  f.cpu_by_program.assign(cpu_.by_program.begin(), cpu_.by_program.end());
  std::sort(f.cpu_by_program.begin(), f.cpu_by_program.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  const size_t expected = size_t(o_.pods) * size_t(o_.repeat);
  const bool conditions =
      o_.pods == kGoalPods && CpuCount() == kGoalCpus && cluster_nodes_ == kGoalNodes;
  f.goal = AtMost("apply -> Running p99", f.running.p99 / 1000, "s", kGoalP99S, f.timed == expected,
                  "50 pods at once on 2 nodes, 2 CPUs", conditions);
  return f;
}

void ClusterBenchmark::Print(const Figures& f) const {
  std::printf(
      "\nhami bench cluster: %d pods at once x %d batch(es) on %d node(s)%s, %d CPUs, "
      "load average %s at the start, %s at the end\n",
      o_.pods, o_.repeat, cluster_nodes_,
      started_cluster_ ? (" (" + o_.gpus + ")").c_str()
                       : (" of the cluster in " + cluster_dir_).c_str(),
      CpuCount(), load_start_.c_str(), load_end_.c_str());
  if (started_cluster_) std::printf("cluster up: %.1f s\n", up_ms_ / 1000);
  std::printf("\n");
  auto row = [](const std::string& name, const Summary& s) {
    return std::vector<std::string>{
        name,           std::to_string(s.count), Fixed(s.p50, 0), Fixed(s.p90, 0), Fixed(s.p99, 0),
        Fixed(s.max, 0)};
  };
  PrintTable({{"per pod, ms", "pods", "p50", "p90", "p99", "max"},
              row("apply -> created (watch)", f.created),
              row("apply -> scheduled (watch)", f.scheduled),
              row("apply -> Running", f.running),
              row("scheduled -> Running (watch)", f.scheduled_to_running)},
             1, 6, TrailingSpaces::kTrim);
  std::printf("\n");
  PrintTable({{"node's share, ms (event=started)", "pods", "p50", "p90", "p99", "max"},
              row("admission (Allocate)", f.admit),
              row("RunPodSandbox", f.sandbox),
              row("CreateContainer", f.create),
              row("StartContainer", f.start),
              row("CRI calls (the three)", f.cri),
              row("admission + CRI", f.node_sum),
              row("scheduled -> Running, outside them", f.outside)},
             1, 6, TrailingSpaces::kTrim);
  std::printf("\nThe node's CRI calls: %.0f%% of apply -> Running (admission + CRI: %.0f%%).\n",
              f.cri_share * 100, f.node_share * 100);
  if (f.objects_created_to_scheduled.count > 0) {
    const Summary& so = f.objects_created_to_scheduled;
    std::printf(
        "From the objects (second precision): creationTimestamp -> PodScheduled p50 %.0f s, "
        "p99 %.0f s, max %.0f s.\n",
        so.p50, so.p99, so.max);
  }
  std::printf(
      "\nCPU from each apply to its last pod Running: the machine %.0f%% busy (%.1f CPU s); the "
      "cluster's processes by program:\n\n",
      f.busy * 100, f.busy_s);
  const double busy_s = std::max(f.busy_s, 1e-9);
  auto share = [busy_s](double cpu_s) { return Fixed(100 * cpu_s / busy_s, 0) + "%"; };
  std::vector<std::vector<std::string>> cpu_rows = {{"program", "CPU s", "of the busy CPU"}};
  double rest = 0;
  for (const auto& [program, cpu_s] : f.cpu_by_program) {
    if (cpu_rows.size() <= 12 && cpu_s >= 0.01 * busy_s) {
      cpu_rows.push_back({program, Fixed(cpu_s, 2), share(cpu_s)});
    } else {
      rest += cpu_s;
    }
  }
  if (rest > 0) cpu_rows.push_back({"(the cluster's rest)", Fixed(rest, 2), share(rest)});
  const double outside = std::max(0.0, f.busy_s - f.cluster_s);
  cpu_rows.push_back({"outside the cluster (other processes)", Fixed(outside, 2), share(outside)});
  PrintTable(cpu_rows, 1, 3, TrailingSpaces::kTrim);
  std::printf("\n");
  const Goal& g = f.goal;
  PrintTable({{g.name, Fixed(g.measured.get<double>(), 2) + " " + g.unit, g.goal + " " + g.unit,
               MeetsText(g)}});
  std::printf("\nThe goal %s.\n", g.meets ? "was met" : "was missed");
}

Json ClusterBenchmark::Document(const Figures& f) const {
  Json doc;
  doc["benchmark"] = "cluster";
  doc["date"] = UtcNow();
  doc["cpus"] = CpuCount();
  doc["load_average_start"] = load_start_;
  doc["load_average_end"] = load_end_;
  doc["pods"] = o_.pods;
  doc["repeat"] = o_.repeat;
  doc["cluster"] = {{"dir", cluster_dir_},
                    {"started", started_cluster_},
                    {"nodes", cluster_nodes_},
                    {"webhook", webhook_}};
  if (started_cluster_) {
    doc["cluster"]["gpus"] = o_.gpus;
    doc["cluster"]["up_ms"] = up_ms_;
  }
  Json batches = Json::array();
  for (const BatchResult& b : batches_) {
    batches.push_back({{"batch", b.batch},
                       {"apply_ms", b.apply_ms},
                       {"all_running_ms", b.all_running_ms},
                       {"running", b.running},
                       {"failed", b.failed},
                       {"missing", b.missing}});
  }
  doc["batches"] = batches;
  doc["pods_timed"] = f.timed;
  doc["apply_to_created_ms"] = ToJson(f.created);
  doc["apply_to_scheduled_ms"] = ToJson(f.scheduled);
  doc["apply_to_running_ms"] = ToJson(f.running);
  doc["scheduled_to_running_ms"] = ToJson(f.scheduled_to_running);
  doc["objects_created_to_scheduled_s"] = ToJson(f.objects_created_to_scheduled);
  doc["node"] = {{"pods", f.node_pods},
                 {"admit_ms", ToJson(f.admit)},
                 {"sandbox_ms", ToJson(f.sandbox)},
                 {"create_ms", ToJson(f.create)},
                 {"start_ms", ToJson(f.start)},
                 {"cri_ms", ToJson(f.cri)},
                 {"sum_ms", ToJson(f.node_sum)},
                 {"outside_ms", ToJson(f.outside)},
                 {"cri_share", f.cri_share},
                 {"share", f.node_share}};
  Json by_program = Json::object();
  for (const auto& [program, cpu_s] : f.cpu_by_program) by_program[program] = cpu_s;
  doc["cpu"] = {{"busy", f.busy},
                {"busy_s", f.busy_s},
                {"cluster_s", f.cluster_s},
                {"by_program", by_program}};
  Json per_pod = Json::array();
  for (const PodResult& r : pods_) {
    Json p = {{"name", r.name},
              {"batch", r.batch},
              {"node", r.node},
              {"created_ms", r.created_ms},
              {"scheduled_ms", r.scheduled_ms},
              {"running_ms", r.running_ms}};
    if (r.objects_scheduled_s) p["objects_created_to_scheduled_s"] = *r.objects_scheduled_s;
    if (r.node_share) {
      p["admit_ms"] = r.node_share->admit_ms;
      p["sandbox_ms"] = r.node_share->sandbox_ms;
      p["create_ms"] = r.node_share->create_ms;
      p["start_ms"] = r.node_share->start_ms;
    }
    per_pod.push_back(p);
  }
  doc["per_pod"] = per_pod;
  doc["goals"] = Json::array({ToJson(f.goal)});
  return doc;
}

int ClusterBenchmark::Report() {
  const Figures f = Compute();
  Print(f);
  const std::string json_path =
      o_.common.json_path.empty() ? SelfDir() + "/cluster.json" : o_.common.json_path;
  if (!WriteJson(json_path, Document(f), kProgram)) return 1;
  if (f.timed != size_t(o_.pods) * size_t(o_.repeat)) return Fail("not every pod was timed");
  return o_.check && !f.goal.meets ? 1 : 0;
}

int RunBenchmark(const Options& o) {
  ClusterBenchmark bench(o);
  return bench.Run();
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::Parse, hami::bench::RunBenchmark);
}
