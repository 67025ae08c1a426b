// hami_bench_broker: what asking the host-PID broker costs a process, measured beside its
// goals, with a broker served in this process on a fresh socket under /tmp.
//
// 1. Sequential: Q queries one after another through QueryHostPid (the client libvgpu.so
//    uses: every trust check, a new connection each time; trusted UID = this process's, no
//    read-only mount required). Latency percentiles of the whole call.
// 2. Baseline, for comparison: the same number of bare round trips to a minimal blocking
//    server thread (accept, SO_PEERCRED, read 8 bytes, write 12) with no checks on either side.
// 3. Burst: B forked clients released together by a pipe barrier (closing its write end), each
//    doing one QueryHostPid with the client's real deadline. Every client must be answered
//    with its own PID. Reported: served / failed (by failure name), latency of each query
//    (p50/p99/max), completion from the barrier's release, and the wall span (release to the
//    last client reaped).
// 4. Flood: a second broker (its defaults: max_active 512, a quarter of that per UID) while a
//    thread holds F silent connections to it, opening each one again as soon as the server
//    closes it, for the whole phase; meanwhile 8 threads make L QueryHostPid calls with the
//    client's real deadline. Reported: answered / total beside the goal (>= 99% answered),
//    failures by name, latency, and what the flood cost the server (evictions, re-opens).
//    Everything here runs as one UID: the flood competes with the clients for their own UID's
//    slots, the hardest case for the per-UID cap.
// 5. A table on stdout and the same figures as JSON (<this binary's dir>/broker.json, or
//    --json PATH), with the server's counters (the flood's broker's in "flood").
//
// Goals are reported (meets: yes/no), never enforced: the exit status is 0 when every phase
// ran and no query failed (in the flood: fewer than 1% failed), 1 otherwise, 2 on bad flags.
//
// usage: hami_bench_broker [--quick] [--queries N] [--clients N] [--flood N]
//                          [--flood-queries N] [--json PATH] [--deadline-s S]
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "broker/client.h"
#include "broker/io.h"
#include "broker/protocol.h"
#include "broker/server.h"
#include "broker/silent_flood.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "harness.h"

namespace hami::bench {
namespace {

constexpr char kProgram[] = "hami_bench_broker";

// The goals.
constexpr double kGoalSequentialP99Us = 100.0;
constexpr int kGoalBurstClients = 300;
constexpr double kGoalFloodAnsweredPct = 99.0;
constexpr int kGoalFloodConnections = 2000;
constexpr int kFloodThreads = 8;

constexpr char kUsage[] =
    "usage: hami_bench_broker [--quick] [--queries N] [--clients N] [--flood N]\n"
    "                         [--flood-queries N] [--json PATH] [--deadline-s S]\n"
    "  --quick         a short run: 200 queries, a burst of 50, 200 queries through the\n"
    "                  flood (the smoke test)\n"
    "  --queries N     sequential queries, and bare round trips (default 2000)\n"
    "  --clients N     clients in the burst (default 300)\n"
    "  --flood N       silent connections held open through the flood (default 2000)\n"
    "  --flood-queries N  queries made through the flood (default 2000)\n"
    "  --json PATH     where to write the JSON (default: broker.json beside this binary)\n"
    "  --deadline-s S  seconds for the burst; past it every client is killed and the run\n"
    "                  fails (default 60; --quick: 30)\n";

struct Options : CommonOptions {
  int queries = 2000;
  int clients = 300;
  int flood = 2000;
  int flood_queries = 2000;
  int deadline_s = 60;  // per phase
};

broker::ClientOptions ClientFor(const std::string& path) {
  broker::ClientOptions o;
  o.socket_path = path.c_str();
  o.trusted_uid = geteuid();
  o.require_read_only_mount = false;
  return o;
}

// ---- 1. sequential queries ----

struct SeriesResult {
  int ok = 0;
  int failed = 0;
  std::map<std::string, int> failures;
  Percentiles latency_ns;
};

SeriesResult RunSequential(const std::string& path, int queries) {
  SeriesResult r;
  const broker::ClientOptions o = ClientFor(path);
  for (int i = 0; i < 50; ++i) (void)broker::QueryHostPid(o);  // warm caches and the server
  std::vector<int64_t> samples;
  samples.reserve(size_t(queries));
  const pid_t self = getpid();
  for (int i = 0; i < queries; ++i) {
    const int64_t t0 = MonotonicNs();
    const broker::ClientResult c = broker::QueryHostPid(o);
    samples.push_back(MonotonicNs() - t0);
    if (c.failure == broker::ClientFailure::kNone && c.pid == self) {
      r.ok++;
    } else {
      r.failed++;
      r.failures[c.failure == broker::ClientFailure::kNone
                     ? "wrong_pid"
                     : broker::ClientFailureName(c.failure)]++;
    }
  }
  r.latency_ns = NearestRank(std::move(samples));
  return r;
}

// ---- 2. the baseline: a bare server thread ----

// accept, SO_PEERCRED, read the request, write a success frame, close: nothing else.
class BareServer {
 public:
  bool Start(const std::string& path) {
    path_ = path;
    fd_.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (!fd_.valid() || bind(fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) ||
        listen(fd_.get(), 1024) != 0) {
      return false;
    }
    thread_ = std::thread([this] { Loop(); });
    return true;
  }
  ~BareServer() {
    if (thread_.joinable()) {
      stop_.store(true);
      BareConnect(path_);  // wakes accept(); the loop then sees stop_
      thread_.join();
    }
    if (!path_.empty()) unlink(path_.c_str());
  }

  static UniqueFd BareConnect(const std::string& path) {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (fd.valid() && connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr))) {
      fd.Reset();
    }
    return fd;
  }

 private:
  void Loop() {
    while (!stop_.load()) {
      UniqueFd c(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (stop_.load()) return;
      if (!c.valid()) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) continue;
      uint8_t req[broker::kRequestSize];
      size_t got = 0;
      const int64_t deadline = MonotonicNs() + 1'000'000'000;
      if (!broker::ReadFull(c.get(), req, sizeof(req), deadline, &got).ok()) continue;
      const broker::ResponseFrame f = broker::EncodeSuccess(uint32_t(cred.pid));
      (void)broker::WriteFull(c.get(), f.data(), f.size(), deadline);
    }
  }

  std::string path_;
  UniqueFd fd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

SeriesResult RunBaseline(const std::string& path, int round_trips) {
  SeriesResult r;
  BareServer server;
  if (!server.Start(path)) {
    r.failed = round_trips;
    r.failures[std::string("bind: ") + std::strerror(errno)] = round_trips;
    return r;
  }
  const broker::RequestFrame request = broker::EncodeRequest();
  const pid_t self = getpid();
  auto one = [&]() -> bool {
    UniqueFd fd = BareServer::BareConnect(path);
    if (!fd.valid()) return false;
    size_t got = 0;
    const int64_t deadline = MonotonicNs() + 1'000'000'000;
    broker::ResponseFrame f{};
    return broker::WriteFull(fd.get(), request.data(), request.size(), deadline).ok() &&
           broker::ReadFull(fd.get(), f.data(), f.size(), deadline, &got).ok() &&
           broker::DecodeResponse(f).response.pid == uint32_t(self);
  };
  for (int i = 0; i < 50; ++i) (void)one();
  std::vector<int64_t> samples;
  samples.reserve(size_t(round_trips));
  for (int i = 0; i < round_trips; ++i) {
    const int64_t t0 = MonotonicNs();
    const bool ok = one();
    samples.push_back(MonotonicNs() - t0);
    if (ok) {
      r.ok++;
    } else {
      r.failed++;
      r.failures["round_trip"]++;
    }
  }
  r.latency_ns = NearestRank(std::move(samples));
  return r;
}

// ---- 3. the burst ----

struct alignas(64) ClientRecord {
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> done;
  int32_t pid;
  int32_t host_pid;
  int32_t sys_errno;
  uint8_t failure;
  int64_t start_ns;
  int64_t end_ns;
};

struct BurstResult {
  int clients = 0;
  int spawned = 0;
  int ok = 0;
  int failed = 0;
  bool timed_out = false;
  std::string error;
  std::map<std::string, int> failures;
  Percentiles latency_ns;     // each client's QueryHostPid
  Percentiles completion_ns;  // barrier release to each client's answer
  int64_t wall_span_ns = 0;   // barrier release to the last client reaped
};

BurstResult RunBurst(const std::string& path, int clients, int deadline_s) {
  BurstResult res;
  res.clients = clients;
  auto fail = [&res](std::string why) {
    res.error = std::move(why);
    res.failed = res.clients - res.ok;
    return res;
  };
  const size_t bytes = sizeof(ClientRecord) * size_t(clients);
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return fail(std::string("mmap: ") + std::strerror(errno));
  Cleanup unmap([m, bytes] { munmap(m, bytes); });
  auto* records = static_cast<ClientRecord*>(m);
  for (int i = 0; i < clients; ++i) new (&records[i]) ClientRecord{};

  auto barrier = MakeBarrierPipe();
  if (!barrier.ok()) return fail(barrier.error().message());
  const int barrier_read = barrier->read_end.get();
  const int barrier_write = barrier->write_end.get();
  const broker::ClientOptions options = ClientFor(path);  // the client's real deadline

  std::vector<pid_t> pids(size_t(clients), -1);
  std::vector<bool> reaped(size_t(clients), false);
  std::map<pid_t, size_t> index_of;
  auto kill_all = Cleanup([&] { KillAndReap(pids, &reaped, nullptr); });
  const pid_t parent = getpid();
  std::fflush(nullptr);
  for (int i = 0; i < clients; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      // Async-signal-safe calls only (the parent has threads): the client allocates nothing.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
      close(barrier_write);
      ClientRecord& r = records[i];
      r.pid = int32_t(getpid());
      r.ready.store(1, std::memory_order_release);
      char c;
      while (read(barrier_read, &c, 1) < 0 && errno == EINTR) {
      }
      r.start_ns = MonotonicNs();
      const broker::ClientResult q = broker::QueryHostPid(options);
      r.end_ns = MonotonicNs();
      r.host_pid = q.pid;
      r.sys_errno = q.sys_errno;
      r.failure = uint8_t(q.failure);
      r.done.store(1, std::memory_order_release);
      _exit(q.failure == broker::ClientFailure::kNone ? 0 : 1);
    }
    if (pid < 0) return fail("fork of client " + std::to_string(i) + ": " + std::strerror(errno));
    pids[size_t(i)] = pid;
    index_of[pid] = size_t(i);
    res.spawned++;
  }
  barrier->read_end.Reset();

  const int64_t deadline = MonotonicNs() + int64_t(deadline_s) * 1'000'000'000;
  // Every client is ready and asleep on the barrier.
  for (int i = 0; i < clients; ++i) {
    while (records[i].ready.load(std::memory_order_acquire) == 0 ||
           ProcessState(pids[size_t(i)]) != 'S') {
      if (MonotonicNs() > deadline) {
        res.timed_out = true;
        return fail("deadline: client " + std::to_string(i) + " never blocked on the barrier");
      }
      SleepForNs(100'000);
    }
  }

  const int64_t t0 = MonotonicNs();
  barrier->write_end.Reset();  // EOF wakes them all
  int64_t last_reaped = t0;
  int remaining = clients;
  while (remaining > 0) {
    int st = 0;
    const pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      auto it = index_of.find(pid);
      if (it == index_of.end()) continue;
      reaped[it->second] = true;
      last_reaped = MonotonicNs();
      --remaining;
      continue;
    }
    if (MonotonicNs() > deadline) {
      res.timed_out = true;
      break;
    }
    SleepForNs(200'000);
  }
  res.wall_span_ns = last_reaped - t0;

  std::vector<int64_t> latency, completion;
  for (int i = 0; i < clients; ++i) {
    const ClientRecord& r = records[i];
    if (r.done.load(std::memory_order_acquire) == 0) {
      res.failures["no_result"]++;
      continue;
    }
    latency.push_back(r.end_ns - r.start_ns);
    completion.push_back(r.end_ns - t0);
    const auto f = broker::ClientFailure(r.failure);
    if (f == broker::ClientFailure::kNone && r.host_pid == r.pid) {
      res.ok++;
    } else {
      res.failures[f == broker::ClientFailure::kNone ? "wrong_pid"
                                                     : broker::ClientFailureName(f)]++;
    }
  }
  res.failed = clients - res.ok;
  res.latency_ns = NearestRank(std::move(latency));
  res.completion_ns = NearestRank(std::move(completion));
  if (res.timed_out)
    res.error = "deadline: clients still running after " + std::to_string(deadline_s) + " s";
  return res;
}

// ---- 4. the flood ----

struct FloodResult {
  int connections = 0;
  int queries = 0;
  int ok = 0;
  int failed = 0;
  std::string error;
  std::map<std::string, int> failures;
  Percentiles latency_ns;
  uint64_t evicted = 0;   // by the server while the queries ran
  uint64_t reopened = 0;  // by the flood while the queries ran
  int max_per_uid = 0;
  broker::ServerCounters counters;  // the flood's broker, at the end
};

FloodResult RunFlood(const std::string& path, int connections, int queries, int deadline_s) {
  FloodResult res;
  res.connections = connections;
  res.queries = queries;
  broker::ServerOptions so;
  so.socket_path = path;
  const rlim_t needed = rlim_t(connections) + rlim_t(so.max_active) + kFloodThreads + 256;
  if (!RaiseOpenFileLimit(needed)) {
    res.error = "needs " + std::to_string(needed) + " descriptors: RLIMIT_NOFILE is lower";
    res.failed = queries;
    return res;
  }
  auto started = broker::Server::Start(so);
  if (!started.ok()) {
    res.error = started.error().message();
    res.failed = queries;
    return res;
  }
  std::unique_ptr<broker::Server> server = std::move(started).value();
  res.max_per_uid = server->max_per_uid();
  const int64_t deadline = MonotonicNs() + int64_t(deadline_s) * 1'000'000'000;
  {
    broker::SilentFlood flood(server->path(), connections);
    // The flood is on once the server holds its cap and has evicted as many as were opened.
    for (;;) {
      const broker::ServerCounters n = server->Counters();
      if (n.active >= uint64_t(res.max_per_uid) && n.evicted >= uint64_t(connections)) break;
      if (flood.failed() || MonotonicNs() > deadline) {
        res.error = flood.failed() ? "the flood could not open its connections"
                                   : "deadline: the flood never filled the server";
        res.failed = queries;
        return res;
      }
      SleepForNs(1'000'000);
    }
    const uint64_t evicted0 = server->Counters().evicted;
    const uint64_t reopened0 = flood.reopened();
    const broker::ClientOptions options = ClientFor(server->path());  // the real deadline
    const pid_t self = getpid();
    std::vector<std::vector<int64_t>> samples(kFloodThreads);
    std::vector<std::map<std::string, int>> failures(kFloodThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kFloodThreads; ++t) {
      const int share = queries / kFloodThreads + (t < queries % kFloodThreads ? 1 : 0);
      threads.emplace_back([&, t, share] {
        samples[size_t(t)].reserve(size_t(share));
        for (int i = 0; i < share; ++i) {
          const int64_t t0 = MonotonicNs();
          const broker::ClientResult c = broker::QueryHostPid(options);
          samples[size_t(t)].push_back(MonotonicNs() - t0);
          if (c.failure != broker::ClientFailure::kNone || c.pid != self) {
            failures[size_t(t)][c.failure == broker::ClientFailure::kNone
                                    ? "wrong_pid"
                                    : broker::ClientFailureName(c.failure)]++;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    res.evicted = server->Counters().evicted - evicted0;
    res.reopened = flood.reopened() - reopened0;
    if (flood.failed()) res.error = "the flood could not re-open its connections";
    std::vector<int64_t> all;
    for (const auto& v : samples) all.insert(all.end(), v.begin(), v.end());
    for (const auto& m : failures) {
      for (const auto& [name, n] : m) {
        res.failures[name] += n;
        res.failed += n;
      }
    }
    res.ok = queries - res.failed;
    res.latency_ns = NearestRank(std::move(all));
  }
  res.counters = server->Counters();
  server->Stop();
  return res;
}

Json CountersJson(const broker::ServerCounters& counters) {
  Json j = Json::object();
  for (size_t i = 0; i < broker::kCounterCount; ++i) {
    j[broker::CounterName(broker::Counter(i))] = counters.Get(broker::Counter(i));
  }
  j["active"] = counters.active;
  return j;
}

// ---- 5. report ----

std::string FailureText(const std::map<std::string, int>& failures) {
  std::string s;
  for (const auto& [name, n] : failures) {
    if (!s.empty()) s += ", ";
    s += name + " " + std::to_string(n);
  }
  return s.empty() ? "none" : s;
}

Json FailuresJson(const std::map<std::string, int>& failures) {
  Json j = Json::object();
  for (const auto& [name, n] : failures) j[name] = n;
  return j;
}

int Main(const Options& opt) {
  const std::string json_path =
      opt.json_path.empty() ? ExecutableDir() + "/broker.json" : opt.json_path;
  const int cpus = CpuCount();
  std::printf(
      "hami_bench_broker: %d sequential queries, a burst of %d clients, %d queries through a "
      "flood of %d, %d CPUs%s\n",
      opt.queries, opt.clients, opt.flood_queries, opt.flood, cpus, opt.quick ? " (quick)" : "");

  TempDir dir("hbb");  // short: sun_path holds 107 bytes
  if (!dir.ok()) {
    std::fprintf(stderr, "hami_bench_broker: mkdtemp: %s\n", std::strerror(errno));
    return 1;
  }
  broker::ServerOptions so;
  so.socket_path = dir.File("broker.sock");
  auto started = broker::Server::Start(so);
  if (!started.ok()) {
    std::fprintf(stderr, "hami_bench_broker: %s\n", started.error().message().c_str());
    return 1;
  }
  std::unique_ptr<broker::Server> server = std::move(started).value();

  const SeriesResult seq = RunSequential(server->path(), opt.queries);
  const SeriesResult base = RunBaseline(dir.File("bare.sock"), opt.queries);
  const BurstResult burst = RunBurst(server->path(), opt.clients, opt.deadline_s);
  // Every answer written is counted just after it is written.
  const int64_t settle = MonotonicNs() + 5'000'000'000;
  while (server->Counters().active != 0 && MonotonicNs() < settle) SleepForNs(1'000'000);
  SleepForNs(10'000'000);
  const broker::ServerCounters counters = server->Counters();
  server->Stop();
  const FloodResult flood =
      RunFlood(dir.File("flood/broker.sock"), opt.flood, opt.flood_queries, opt.deadline_s);

  const bool seq_valid = seq.latency_ns.count > 0;
  const bool burst_valid = burst.error.empty() && burst.spawned == burst.clients;
  Goal seq_goal = AtMost("sequential QueryHostPid p99", double(seq.latency_ns.p99) / 1e3, "us",
                         kGoalSequentialP99Us, seq_valid);
  seq_goal.meets = seq_goal.meets && seq.failed == 0;  // and every query answered
  const Goal burst_goal{.name = "burst clients failed",
                        .measured = burst.failed,
                        .unit = "clients",
                        .goal = "<= 0",
                        .bound = 0,
                        .measured_ok = burst_valid,
                        .meets = burst_valid && burst.failed == 0,
                        .conditions = std::to_string(kGoalBurstClients) + " clients",
                        .conditions_match = opt.clients >= kGoalBurstClients};

  const bool flood_valid = flood.error.empty() && flood.latency_ns.count > 0;
  const double flood_pct =
      flood.queries > 0 ? 100.0 * double(flood.ok) / double(flood.queries) : 0.0;
  const Goal flood_goal{.name = "flood: queries answered",
                        .measured = flood_pct,
                        .unit = "%",
                        .goal = ">= 99",
                        .bound = kGoalFloodAnsweredPct,
                        .measured_ok = flood_valid,
                        .meets = flood_valid && flood_pct >= kGoalFloodAnsweredPct,
                        .conditions = std::to_string(kGoalFloodConnections) +
                                      " silent connections re-opened as they close",
                        .conditions_match = opt.flood >= kGoalFloodConnections};

  std::vector<Row> rows;
  rows.push_back({"sequential QueryHostPid: ok / failed",
                  std::to_string(seq.ok) + " / " + std::to_string(seq.failed), "0 failed",
                  seq.failed == 0 ? "yes" : "no"});
  rows.push_back({"sequential QueryHostPid p50", Duration(seq.latency_ns.p50), "", ""});
  rows.push_back({"sequential QueryHostPid p95", Duration(seq.latency_ns.p95), "", ""});
  rows.push_back({"sequential QueryHostPid p99", Duration(seq.latency_ns.p99), "<= 100 us",
                  MeetsText(seq_goal)});
  rows.push_back({"sequential QueryHostPid max", Duration(seq.latency_ns.max), "", ""});
  rows.push_back({"baseline bare round trip: ok / failed",
                  std::to_string(base.ok) + " / " + std::to_string(base.failed), "", ""});
  rows.push_back({"baseline bare round trip p50 / p99",
                  Duration(base.latency_ns.p50) + " / " + Duration(base.latency_ns.p99), "", ""});
  rows.push_back(
      {"ratio: QueryHostPid p50 / bare p50",
       Fixed(
           base.latency_ns.p50 > 0 ? double(seq.latency_ns.p50) / double(base.latency_ns.p50) : 0.0,
           2),
       "", ""});
  rows.push_back({"burst: clients served / failed",
                  std::to_string(burst.ok) + " / " + std::to_string(burst.failed), "0 failed",
                  MeetsText(burst_goal)});
  rows.push_back({"burst: failures", FailureText(burst.failures), "", ""});
  rows.push_back({"burst: query latency p50 / p99",
                  Duration(burst.latency_ns.p50) + " / " + Duration(burst.latency_ns.p99), "", ""});
  rows.push_back({"burst: query latency max", Duration(burst.latency_ns.max), "", ""});
  rows.push_back({"burst: answered after release p50 / p99 / max",
                  Duration(burst.completion_ns.p50) + " / " + Duration(burst.completion_ns.p99) +
                      " / " + Duration(burst.completion_ns.max),
                  "", ""});
  rows.push_back({"burst: wall span (release to last reaped)", Ms(burst.wall_span_ns), "", ""});
  rows.push_back({"server: accepted / ok / evicted / timeouts",
                  std::to_string(counters.accepted) + " / " + std::to_string(counters.ok) + " / " +
                      std::to_string(counters.evicted) + " / " + std::to_string(counters.timeouts),
                  "", ""});
  rows.push_back({"flood: queries answered / total",
                  std::to_string(flood.ok) + " / " + std::to_string(flood.queries) + " (" +
                      Fixed(flood_pct, 1) + "%)",
                  ">= 99% answered", MeetsText(flood_goal)});
  rows.push_back({"flood: failures", FailureText(flood.failures), "", ""});
  rows.push_back({"flood: query latency p50 / p99 / max",
                  Duration(flood.latency_ns.p50) + " / " + Duration(flood.latency_ns.p99) + " / " +
                      Duration(flood.latency_ns.max),
                  "", ""});
  rows.push_back({"flood: evicted / re-opened while querying",
                  std::to_string(flood.evicted) + " / " + std::to_string(flood.reopened), "", ""});
  std::printf("\n");
  PrintTable(rows);
  if (!burst.error.empty()) std::printf("burst failed: %s\n", burst.error.c_str());
  if (seq.failed != 0) std::printf("sequential failures: %s\n", FailureText(seq.failures).c_str());
  if (base.failed != 0) std::printf("baseline failures: %s\n", FailureText(base.failures).c_str());
  if (!flood.error.empty()) std::printf("flood failed: %s\n", flood.error.c_str());

  Json doc = {
      {"benchmark", "broker"},
      {"config",
       {{"quick", opt.quick},
        {"queries", opt.queries},
        {"burst_clients", opt.clients},
        {"flood_connections", opt.flood},
        {"flood_queries", opt.flood_queries},
        {"flood_threads", kFloodThreads},
        {"cpus", cpus},
        {"deadline_s", opt.deadline_s},
        {"max_active", so.max_active},
        {"server_timeout_ms", so.transaction_timeout_ns / 1'000'000},
        {"client_timeout_ms", broker::kClientTimeoutNs / 1'000'000}}},
      {"sequential",
       {{"queries", opt.queries},
        {"ok", seq.ok},
        {"failed", seq.failed},
        {"failures", FailuresJson(seq.failures)},
        {"latency_ns", ToJson(seq.latency_ns)}}},
      {"baseline",
       {{"round_trips", opt.queries},
        {"ok", base.ok},
        {"failed", base.failed},
        {"latency_ns", ToJson(base.latency_ns)}}},
      {"burst",
       {{"clients", burst.clients},
        {"spawned", burst.spawned},
        {"ok", burst.ok},
        {"failed", burst.failed},
        {"timed_out", burst.timed_out},
        {"error", burst.error},
        {"failures", FailuresJson(burst.failures)},
        {"latency_ns", ToJson(burst.latency_ns)},
        {"completion_ns", ToJson(burst.completion_ns)},
        {"wall_span_ns", burst.wall_span_ns}}},
      {"flood",
       {{"connections", flood.connections},
        {"queries", flood.queries},
        {"ok", flood.ok},
        {"failed", flood.failed},
        {"answered_pct", flood_pct},
        {"error", flood.error},
        {"failures", FailuresJson(flood.failures)},
        {"latency_ns", ToJson(flood.latency_ns)},
        {"evicted_while_querying", flood.evicted},
        {"reopened_while_querying", flood.reopened},
        {"max_per_uid", flood.max_per_uid},
        {"server_counters", CountersJson(flood.counters)}}},
      {"server_counters", CountersJson(counters)},
      {"goals", Json::array({ToJson(seq_goal), ToJson(burst_goal), ToJson(flood_goal)})},
  };
  if (!WriteJson(json_path, doc, kProgram)) return 1;
  std::printf("\njson: %s\n", json_path.c_str());
  const bool all_ran = seq_valid && base.latency_ns.count > 0 && burst_valid && flood_valid;
  return all_ran && seq.failed == 0 && base.failed == 0 && burst.failed == 0 &&
                 flood_pct >= kGoalFloodAnsweredPct
             ? 0
             : 1;
}

std::optional<Options> ParseFlags(int argc, char** argv) {
  Options o;
  bool queries_set = false, clients_set = false, deadline_set = false;
  bool flood_queries_set = false;
  FlagReader flags(argc, argv, kProgram, kUsage, &o);
  while (flags.Next()) {
    const std::string_view flag = flags.flag();
    std::string_view value;
    if (flag == "--queries" || flag == "--clients" || flag == "--deadline-s" || flag == "--flood" ||
        flag == "--flood-queries") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      auto n = ParseUint64(value, flag);
      if (!n.ok()) {
        std::fprintf(stderr, "hami_bench_broker: %s\n", n.error().message().c_str());
        return std::nullopt;
      }
      const uint64_t max = flag == "--queries" || flag == "--flood-queries" ? 1'000'000
                           : flag == "--clients"                            ? 4096
                           : flag == "--flood"                              ? 100'000
                                                                            : 3600;
      if (*n < 1 || *n > max) {
        std::fprintf(stderr, "hami_bench_broker: %.*s %" PRIu64 " is not from 1 to %" PRIu64 "\n",
                     int(flag.size()), flag.data(), *n, max);
        return std::nullopt;
      }
      if (flag == "--queries") {
        o.queries = int(*n);
        queries_set = true;
      } else if (flag == "--clients") {
        o.clients = int(*n);
        clients_set = true;
      } else if (flag == "--flood") {
        o.flood = int(*n);
      } else if (flag == "--flood-queries") {
        o.flood_queries = int(*n);
        flood_queries_set = true;
      } else {
        o.deadline_s = int(*n);
        deadline_set = true;
      }
    } else {
      flags.PrintUnknown();
      return std::nullopt;
    }
  }
  if (flags.failed()) return std::nullopt;
  if (o.quick) {
    if (!queries_set) o.queries = 200;
    if (!clients_set) o.clients = 50;
    if (!flood_queries_set) o.flood_queries = 200;
    if (!deadline_set) o.deadline_s = 30;
  }
  return o;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::ParseFlags, hami::bench::Main);
}
