// hami_bench_region: what the shared region costs the processes of a container, measured
// beside its goals.
//
// 1. Burst: W exec'd workers (region_bench_worker, beside this binary) released together by
//    a pipe barrier each open the region, register, reserve and release 1 MiB and
//    unregister. A control burst does the same without the region calls. Reported: workers
//    ok/failed, registration latency (open + register) percentiles, wall span (barrier
//    release to the last worker reaped). For context, where the time goes: a third burst
//    on a region the parent made beforehand (no worker creates it or waits for it), the
//    per-step split, and open/register/close in a loop in one warm process.
//    Each burst's region file lives in a fresh directory under $TMPDIR (default /tmp).
// 2. Reserve + Release pairs: uncontended (best of 3 timed loops), contended (2 processes x
//    4 threads on one device), and two baselines measured in the same run: an atomic
//    fetch_add pair and a robust process-shared mutex lock/unlock.
// 3. A table on stdout and the same figures as JSON (<this binary's dir>/region.json, or
//    --json PATH).
//
// Goals are reported (meets: yes/no), never enforced: the exit status is 0 when every phase
// ran to completion with no failed worker, 1 otherwise, 2 on bad flags.
//
// usage: hami_bench_region [--workers N] [--quick] [--json PATH] [--deadline-s S]
//                          [--timeline DIR]
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/robust_mutex.h"
#include "harness.h"
#include "region/region.h"
#include "region_bench_shared.h"

namespace hami::bench {
namespace {

constexpr char kProgram[] = "hami_bench_region";
constexpr char kWorkerName[] = "region_bench_worker";
constexpr char kRegionFile[] = "usage.cache";
constexpr int kContendProcesses = 2;
constexpr int kContendThreads = 4;
constexpr uint64_t kPairBytes = 1ull << 20;
constexpr uint64_t kSplitBytes = 4096;  // reserve-only loops: N x 4 KiB stays under the limit

// The goals, and the conditions they are stated for.
constexpr double kGoalWallRatio = 1.2;
constexpr double kGoalRegistrationP99Ms = 2.0;
constexpr double kGoalUncontendedNs = 50.0;
constexpr int kGoalWorkers = 300;
constexpr int kGoalCpus = 2;

constexpr char kUsage[] =
    "usage: hami_bench_region [--workers N] [--quick] [--json PATH] [--deadline-s S]\n"
    "                         [--timeline DIR]\n"
    "  --workers N     burst size (default 300; --quick: 64)\n"
    "  --quick         a short run: 64 workers, fewer iterations (the smoke test)\n"
    "  --json PATH     where to write the JSON (default: region.json beside this binary)\n"
    "  --deadline-s S  seconds per phase; past it every process is killed and the run\n"
    "                  fails (default 120; --quick: 30)\n"
    "  --timeline DIR  also write each burst's per-worker timestamps (ns from the\n"
    "                  barrier's release) to DIR/burst-<run>.csv\n";

struct Options : CommonOptions {
  int workers = 300;
  int deadline_s = 120;      // per phase
  std::string timeline_dir;  // per-worker CSVs of the bursts, when set
  uint64_t iterations = 500'000;
  int64_t contend_ns = 1'000'000'000;
};

// ---- small helpers ----

inline void CompilerBarrier() { asm volatile("" ::: "memory"); }

// A fresh directory for one run's region file, removed (file and all) when it goes.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hami-bench-region-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    unlink(RegionPath().c_str());
    if (rmdir(path_.c_str()) != 0) {
      std::fprintf(stderr, "hami_bench_region: cannot remove %s: %s\n", path_.c_str(),
                   std::strerror(errno));
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  bool ok() const { return !path_.empty(); }
  std::string RegionPath() const { return path_ + "/" + kRegionFile; }

 private:
  std::string path_;
};

// ---- 1. the burst ----

// kRegionPrecreated: the parent makes the region file before the workers start, so no
// worker creates it or waits for its creation (context for where the region run's time goes).
enum class BurstMode { kControl, kRegion, kRegionPrecreated };

struct BurstResult {
  BurstMode mode;
  int workers = 0;
  int spawned = 0;
  int ok = 0;
  int failed = 0;
  bool timed_out = false;
  std::string error;                       // why the run itself failed, if it did
  int64_t wall_span_ns = 0;                // t0 to the last worker reaped
  int64_t last_record_end_ns = 0;          // t0 to the latest end_ns a worker recorded
  Percentiles registration_ns;             // open + register
  Percentiles open_ns;                     // Region::Open
  Percentiles register_ns;                 // Register()
  Percentiles reserve_release_ns;          // Reserve + Release
  Percentiles unregister_ns;               // Unregister()
  Percentiles wake_ns;                     // t0 to the worker's start
  int preempted_during_registration = 0;   // workers with an involuntary switch in open+register
  int blocked_during_registration = 0;     // workers that slept (a voluntary switch) in it
  std::vector<std::string> worker_errors;  // the first few
};

const char* ModeName(BurstMode m) {
  switch (m) {
    case BurstMode::kControl:
      return "control";
    case BurstMode::kRegion:
      return "region";
    case BurstMode::kRegionPrecreated:
      return "region_precreated";
  }
  return "?";
}

const char* StepName(WorkerStep step) {
  switch (step) {
    case WorkerStep::kNone:
      return "an unknown step";
    case WorkerStep::kBarrier:
      return "the barrier";
    case WorkerStep::kOpen:
      return "Region::Open";
    case WorkerStep::kRegister:
      return "Register";
    case WorkerStep::kReserve:
      return "Reserve";
  }
  return "an invalid step";
}

// Writes one line per worker: its timestamps relative to t0 (ns; empty when not reached).
void WriteTimeline(const std::string& path, const WorkerRecord* records, int workers, int64_t t0) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "hami_bench_region: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return;
  }
  std::fprintf(f,
               "index,pid,ok,main,start,opened,registered,reserved,end,involuntary_switches,"
               "voluntary_switches\n");
  for (int i = 0; i < workers; ++i) {
    const WorkerRecord& r = records[i];
    std::fprintf(f, "%d,%d,%d", i, r.pid, r.outcome.load() == uint32_t(WorkerOutcome::kOk) ? 1 : 0);
    for (int64_t t :
         {r.main_ns, r.start_ns, r.opened_ns, r.registered_ns, r.reserved_ns, r.end_ns}) {
      if (t == 0) {
        std::fprintf(f, ",");
      } else {
        std::fprintf(f, ",%" PRId64, t - t0);
      }
    }
    std::fprintf(f, ",%u,%u\n", r.involuntary_switches, r.voluntary_switches);
  }
  std::fclose(f);
}

BurstResult RunBurst(const std::string& worker_path, int workers, BurstMode mode, int deadline_s,
                     const std::string& timeline_path = "") {
  BurstResult res;
  res.mode = mode;
  res.workers = workers;
  auto fail = [&res](std::string why) {
    res.error = std::move(why);
    res.failed = res.workers - res.ok;
    return res;
  };

  TempDir dir;
  if (!dir.ok()) return fail(std::string("mkdtemp: ") + std::strerror(errno));
  const std::string region_path = dir.RegionPath();
  if (mode == BurstMode::kRegionPrecreated) {
    const region::PolicySpec policy = BenchPolicy();
    auto made = region::Region::Open(region_path, &policy, region::Create::kIfMissing, nullptr);
    if (!made.ok()) return fail("creating the region: " + made.error().message());
  }

  // The results area: one record per worker, each "failed" until its worker says otherwise.
  auto area = ResultsArea::Create<WorkerRecord>("hami-bench-region-results", kResultsMagic,
                                                kResultsVersion, uint32_t(workers));
  if (!area.ok()) return fail(area.error().message());
  const WorkerRecord* records = (*area)->records<WorkerRecord>();

  BurstSpec spec;
  spec.worker = worker_path;
  spec.args = {"--region", region_path};
  if (mode == BurstMode::kControl) spec.args.push_back("--control");
  spec.deadline_s = deadline_s;
  const BurstProcesses burst = RunWorkerBurst(spec, **area);
  res.spawned = burst.spawned;
  res.timed_out = burst.timed_out;
  if (!burst.error.empty()) return fail(burst.error);
  const int64_t t0 = burst.release_ns;
  res.wall_span_ns = burst.last_reaped_ns - t0;

  std::vector<int64_t> registration, opens, reg, reserve, unreg, wake;
  for (int i = 0; i < workers; ++i) {
    const WorkerRecord& r = records[i];
    const int st = burst.statuses[size_t(i)];
    const bool exited_zero = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    const bool says_ok = r.outcome.load(std::memory_order_acquire) == uint32_t(WorkerOutcome::kOk);
    if (!exited_zero || !says_ok) {
      if (res.worker_errors.size() < 5) {
        const std::string how = WIFEXITED(st)     ? "exit " + std::to_string(WEXITSTATUS(st))
                                : WIFSIGNALED(st) ? "signal " + std::to_string(WTERMSIG(st))
                                                  : "not reaped";
        char why[320];
        std::snprintf(why, sizeof(why), "worker %d (pid %d): %s, %s at %s: %.*s", i,
                      int(burst.pids[size_t(i)]), how.c_str(), says_ok ? "ok" : "failed",
                      StepName(WorkerStep(r.failed_step)), int(sizeof(r.error)),
                      r.error[0] != '\0' ? r.error : "(no record written)");
        res.worker_errors.push_back(why);
      }
      continue;
    }
    res.ok++;
    registration.push_back(r.registered_ns - r.start_ns);
    opens.push_back(r.opened_ns - r.start_ns);
    reg.push_back(r.registered_ns - r.opened_ns);
    reserve.push_back(r.reserved_ns - r.registered_ns);
    unreg.push_back(r.end_ns - r.reserved_ns);
    wake.push_back(r.start_ns - t0);
    res.last_record_end_ns = std::max(res.last_record_end_ns, r.end_ns - t0);
    if (r.involuntary_switches > 0) res.preempted_during_registration++;
    if (r.voluntary_switches > 0) res.blocked_during_registration++;
  }
  res.failed = workers - res.ok;
  if (!timeline_path.empty()) WriteTimeline(timeline_path, records, workers, t0);
  res.registration_ns = NearestRank(std::move(registration));
  res.open_ns = NearestRank(std::move(opens));
  res.register_ns = NearestRank(std::move(reg));
  res.reserve_release_ns = NearestRank(std::move(reserve));
  res.unregister_ns = NearestRank(std::move(unreg));
  res.wake_ns = NearestRank(std::move(wake));
  if (res.timed_out)
    res.error =
        "deadline: workers still running after " + std::to_string(deadline_s) + " s were killed";
  return res;
}

Json ToJson(const BurstResult& b) {
  return Json{
      {"workers", b.workers},
      {"spawned", b.spawned},
      {"ok", b.ok},
      {"failed", b.failed},
      {"timed_out", b.timed_out},
      {"error", b.error},
      {"wall_span_ns", b.wall_span_ns},
      {"last_record_end_ns", b.last_record_end_ns},
      {"registration_ns", ToJson(b.registration_ns)},
      {"breakdown",
       {{"open_ns", ToJson(b.open_ns)},
        {"register_ns", ToJson(b.register_ns)},
        {"reserve_release_ns", ToJson(b.reserve_release_ns)},
        {"unregister_ns", ToJson(b.unregister_ns)},
        {"wake_ns", ToJson(b.wake_ns)},
        {"preempted_during_registration", b.preempted_during_registration},
        {"blocked_during_registration", b.blocked_during_registration}}},
      {"worker_errors", b.worker_errors},
  };
}

// ---- 2. reserve + release ----

// The best (lowest) ns per call of `body` over `runs` timed loops of `iterations`.
template <typename F>
double BestNsPerOp(int runs, uint64_t iterations, F&& body) {
  double best = 1e300;
  for (uint64_t i = 0; i < iterations / 10; ++i) body();  // warm up
  for (int r = 0; r < runs; ++r) {
    const int64_t t = MonotonicNs();
    for (uint64_t i = 0; i < iterations; ++i) {
      body();
      CompilerBarrier();
    }
    best = std::min(best, double(MonotonicNs() - t) / double(iterations));
  }
  return best;
}

struct Uncontended {
  bool ok = false;
  std::string error;
  uint64_t iterations = 0;
  int runs = 3;
  double pair_ns = 0;     // Reserve + Release
  double reserve_ns = 0;  // Reserve alone
  double release_ns = 0;  // Release alone
  double atomic_pair_ns = 0;
  double mutex_pair_ns = 0;
  uint64_t refused = 0;
};

Uncontended MeasureUncontended(uint64_t iterations) {
  Uncontended u;
  u.iterations = iterations;
  TempDir dir;
  if (!dir.ok()) {
    u.error = std::string("mkdtemp: ") + std::strerror(errno);
    return u;
  }
  const region::PolicySpec policy = BenchPolicy();
  auto opened =
      region::Region::Open(dir.RegionPath(), &policy, region::Create::kIfMissing, nullptr);
  if (!opened.ok()) {
    u.error = opened.error().message();
    return u;
  }
  std::unique_ptr<region::Region> r = std::move(opened).value();
  if (auto s = r->Register(); !s.ok()) {
    u.error = s.error().message();
    return u;
  }
  using region::Admission;
  using region::UsageKind;
  uint64_t refused = 0;
  u.pair_ns = BestNsPerOp(u.runs, iterations, [&] {
    if (r->Reserve(0, kPairBytes, UsageKind::kData) != Admission::kOk) ++refused;
    r->Release(0, kPairBytes, UsageKind::kData);
  });
  // Reserve alone, then Release alone: N reservations of 4 KiB, then N releases.
  const uint64_t split =
      std::min<uint64_t>(iterations, (BenchPolicy().memory_limit[0] / 2) / kSplitBytes);
  u.reserve_ns = 1e300;
  u.release_ns = 1e300;
  for (int run = 0; run < u.runs; ++run) {
    int64_t t = MonotonicNs();
    for (uint64_t i = 0; i < split; ++i) {
      if (r->Reserve(0, kSplitBytes, UsageKind::kData) != Admission::kOk) ++refused;
      CompilerBarrier();
    }
    int64_t t1 = MonotonicNs();
    for (uint64_t i = 0; i < split; ++i) {
      r->Release(0, kSplitBytes, UsageKind::kData);
      CompilerBarrier();
    }
    int64_t t2 = MonotonicNs();
    u.reserve_ns = std::min(u.reserve_ns, double(t1 - t) / double(split));
    u.release_ns = std::min(u.release_ns, double(t2 - t1) / double(split));
  }
  r->Unregister();
  r.reset();

  // Baselines: an atomic fetch_add pair; a robust process-shared mutex lock + unlock.
  static std::atomic<uint64_t> counter{0};
  u.atomic_pair_ns = BestNsPerOp(u.runs, iterations, [] {
    counter.fetch_add(kPairBytes);
    counter.fetch_sub(kPairBytes);
  });
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    u.error = std::string("mmap: ") + std::strerror(errno);
    return u;
  }
  Cleanup unmap([page] { munmap(page, 4096); });
  auto* mutex = static_cast<pthread_mutex_t*>(page);
  if (auto s = InitRobustMutex(mutex); !s.ok()) {
    u.error = s.error().message();
    return u;
  }
  uint64_t mutex_errors = 0;
  u.mutex_pair_ns = BestNsPerOp(u.runs, iterations, [&] {
    if (pthread_mutex_lock(mutex) != 0) ++mutex_errors;
    pthread_mutex_unlock(mutex);
  });
  pthread_mutex_destroy(mutex);
  u.refused = refused;
  if (refused != 0 || mutex_errors != 0) {
    u.error = std::to_string(refused) + " reservations refused, " + std::to_string(mutex_errors) +
              " mutex errors";
    return u;
  }
  u.ok = true;
  return u;
}

// Open, Register, Unregister and close in a loop in one warm process (medians): the library's
// own cost of membership, without a fresh process's page faults, lazy binding and scheduling.
struct WarmMembership {
  bool ok = false;
  std::string error;
  int iterations = 0;
  double create_us = 0;  // one sample: a new file
  double open_us = 0;
  double register_us = 0;
  double unregister_us = 0;
  double close_us = 0;   // the Region's destructor: unmap and close
  double procfs_us = 0;  // the three procfs reads Register makes (stat, ns/pid, comm)
};

WarmMembership MeasureWarmMembership(int iterations) {
  WarmMembership w;
  w.iterations = iterations;
  TempDir dir;
  if (!dir.ok()) {
    w.error = std::string("mkdtemp: ") + std::strerror(errno);
    return w;
  }
  const region::PolicySpec policy = BenchPolicy();
  const std::string path = dir.RegionPath();
  const int64_t t = MonotonicNs();
  {
    auto made = region::Region::Open(path, &policy, region::Create::kIfMissing, nullptr);
    if (!made.ok()) {
      w.error = made.error().message();
      return w;
    }
  }
  w.create_us = double(MonotonicNs() - t) / 1e3;
  // Medians of per-iteration samples, after a few unrecorded iterations: one preemption
  // must not move the figure.
  std::vector<int64_t> opens, regs, unregs, closes, procfs;
  const int warmup = std::max(10, iterations / 10);
  for (int i = -warmup; i < iterations; ++i) {
    const int64_t a = MonotonicNs();
    std::vector<region::PolicyDifference> differences;
    auto opened = region::Region::Open(path, &policy, region::Create::kIfMissing, &differences);
    const int64_t b = MonotonicNs();
    if (!opened.ok()) {
      w.error = opened.error().message();
      return w;
    }
    std::unique_ptr<region::Region> r = std::move(opened).value();
    auto slot = r->Register();
    const int64_t c = MonotonicNs();
    if (!slot.ok()) {
      w.error = slot.error().message();
      return w;
    }
    r->Unregister();
    const int64_t d = MonotonicNs();
    r.reset();
    const int64_t e = MonotonicNs();
    uint64_t sink = ProcessStartTicks() + PidNamespaceInode() + ProcessComm().size();
    asm volatile("" : : "r"(sink) : "memory");
    const int64_t f = MonotonicNs();
    if (i < 0) continue;
    opens.push_back(b - a);
    regs.push_back(c - b);
    unregs.push_back(d - c);
    closes.push_back(e - d);
    procfs.push_back(f - e);
  }
  auto median_us = [](std::vector<int64_t> v) {
    return double(NearestRank(std::move(v)).p50) / 1e3;
  };
  w.open_us = median_us(std::move(opens));
  w.register_us = median_us(std::move(regs));
  w.unregister_us = median_us(std::move(unregs));
  w.close_us = median_us(std::move(closes));
  w.procfs_us = median_us(std::move(procfs));
  w.ok = true;
  return w;
}

// Shared between the parent and the contending processes (an anonymous shared mapping).
struct alignas(64) ThreadTally {
  uint64_t pairs;
  int64_t ns;  // the thread's own time from "go" to "stop"
  uint64_t refused;
  uint32_t done;
  uint32_t pad0;
};
struct ContendArea {
  alignas(64) std::atomic<uint32_t> ready;
  alignas(64) std::atomic<uint32_t> go;
  std::atomic<uint32_t> stop;
  alignas(64) std::atomic<uint32_t> failed_processes;
  char error[256];
  ThreadTally tally[kContendProcesses][kContendThreads];
};

struct Contended {
  bool ok = false;
  std::string error;
  int processes = kContendProcesses;
  int threads_per_process = kContendThreads;
  int64_t duration_ns = 0;
  uint64_t pairs = 0;
  double ns_per_pair_per_thread = 0;  // a thread's time / its pairs, over all threads
  double pairs_per_second = 0;        // every thread together
  double min_thread_ns_per_pair = 0;
  double max_thread_ns_per_pair = 0;
};

// One contending process (a fork child): registers, runs its threads, exits.
[[noreturn]] void ContendChild(ContendArea* area, int process, const std::string& path) {
  const region::PolicySpec policy = BenchPolicy();
  auto opened = region::Region::Open(path, &policy, region::Create::kIfMissing, nullptr);
  std::unique_ptr<region::Region> r;
  if (opened.ok()) r = std::move(opened).value();
  auto slot = r ? r->Register() : Result<int>(Error(ErrorCode::kIo, "no region"));
  if (!opened.ok() || !slot.ok()) {
    std::snprintf(area->error, sizeof(area->error), "process %d: %s", process,
                  (!opened.ok() ? opened.error() : slot.error()).message().c_str());
    area->failed_processes.fetch_add(1);
    area->ready.fetch_add(kContendThreads);
    _exit(1);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kContendThreads; ++t) {
    threads.emplace_back([area, process, t, reg = r.get()] {
      ThreadTally& tally = area->tally[process][t];
      area->ready.fetch_add(1);
      while (area->go.load(std::memory_order_acquire) == 0) sched_yield();
      uint64_t pairs = 0, refused = 0;
      const int64_t start = MonotonicNs();
      while (area->stop.load(std::memory_order_relaxed) == 0) {
        if (reg->Reserve(0, kPairBytes, region::UsageKind::kData) != region::Admission::kOk) {
          ++refused;
        }
        reg->Release(0, kPairBytes, region::UsageKind::kData);
        ++pairs;
      }
      tally.ns = MonotonicNs() - start;
      tally.pairs = pairs;
      tally.refused = refused;
      tally.done = 1;
    });
  }
  for (std::thread& t : threads) t.join();
  r->Unregister();
  _exit(0);
}

Contended MeasureContended(int64_t duration_ns, int deadline_s) {
  Contended c;
  TempDir dir;
  if (!dir.ok()) {
    c.error = std::string("mkdtemp: ") + std::strerror(errno);
    return c;
  }
  void* m =
      mmap(nullptr, sizeof(ContendArea), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    c.error = std::string("mmap: ") + std::strerror(errno);
    return c;
  }
  Cleanup unmap([m] { munmap(m, sizeof(ContendArea)); });
  auto* area = new (m) ContendArea{};

  Deadline deadline(deadline_s);
  std::vector<pid_t> pids(kContendProcesses, -1);
  std::vector<bool> reaped(kContendProcesses, false);
  std::vector<int> statuses(kContendProcesses, 0);
  auto kill_all = Cleanup([&] { KillAndReap(pids, &reaped, &statuses); });
  const pid_t parent = getpid();
  const std::string path = dir.RegionPath();
  std::fflush(nullptr);
  for (int p = 0; p < kContendProcesses; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
      ContendChild(area, p, path);
    }
    if (pid < 0) {
      c.error = std::string("fork: ") + std::strerror(errno);
      return c;
    }
    pids[size_t(p)] = pid;
  }
  while (area->ready.load() < uint32_t(kContendProcesses * kContendThreads)) {
    if (deadline.expired()) {
      c.error = "deadline: the contending threads never got ready";
      return c;
    }
    SleepForNs(200'000);
  }
  const int64_t go = MonotonicNs();
  area->go.store(1, std::memory_order_release);
  SleepForNs(duration_ns);
  area->stop.store(1, std::memory_order_relaxed);
  c.duration_ns = MonotonicNs() - go;
  for (int p = 0; p < kContendProcesses; ++p) {
    int st = 0;
    pid_t r;
    while ((r = waitpid(pids[size_t(p)], &st, 0)) < 0 && errno == EINTR && !deadline.expired()) {
    }
    if (r < 0) {
      c.error = "deadline: the contending processes did not finish";
      return c;
    }
    reaped[size_t(p)] = true;
    statuses[size_t(p)] = st;
  }
  if (area->failed_processes.load() != 0) {
    c.error = area->error;
    return c;
  }
  int64_t thread_ns = 0;
  uint64_t refused = 0;
  c.min_thread_ns_per_pair = 1e300;
  for (int p = 0; p < kContendProcesses; ++p) {
    const int st = statuses[size_t(p)];
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      c.error = "contending process " + std::to_string(p) + " failed";
      return c;
    }
    for (int t = 0; t < kContendThreads; ++t) {
      const ThreadTally& tally = area->tally[p][t];
      if (tally.done == 0 || tally.pairs == 0) {
        c.error = "a contending thread did no work";
        return c;
      }
      c.pairs += tally.pairs;
      thread_ns += tally.ns;
      refused += tally.refused;
      double per = double(tally.ns) / double(tally.pairs);
      c.min_thread_ns_per_pair = std::min(c.min_thread_ns_per_pair, per);
      c.max_thread_ns_per_pair = std::max(c.max_thread_ns_per_pair, per);
    }
  }
  if (refused != 0) {
    c.error = std::to_string(refused) + " contended reservations refused";
    return c;
  }
  c.ns_per_pair_per_thread = double(thread_ns) / double(c.pairs);
  c.pairs_per_second = double(c.pairs) * 1e9 / double(c.duration_ns);
  c.ok = true;
  return c;
}

// ---- 3. the report ----

std::string Ns(double ns) { return Fixed(ns, 1) + " ns"; }

int Main(const Options& opt) {
  InstallAlarmHandler();
  const std::string exe_dir = ExecutableDir();
  const std::string worker = exe_dir + "/" + kWorkerName;
  if (access(worker.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "hami_bench_region: the worker %s is missing (build %s)\n", worker.c_str(),
                 kWorkerName);
    return 1;
  }
  const std::string json_path = opt.json_path.empty() ? exe_dir + "/region.json" : opt.json_path;
  const int cpus = CpuCount();
  std::printf("hami_bench_region: %d workers, %d CPUs%s\n", opt.workers, cpus,
              opt.quick ? ", quick" : "");
  std::fflush(stdout);

  // Warm the page cache and the loader's path with a small unreported burst.
  RunBurst(worker, std::max(4, opt.workers / 8), BurstMode::kRegion, opt.deadline_s);
  auto timeline = [&opt](const char* name) {
    return opt.timeline_dir.empty() ? std::string() : opt.timeline_dir + "/burst-" + name + ".csv";
  };
  BurstResult control =
      RunBurst(worker, opt.workers, BurstMode::kControl, opt.deadline_s, timeline("control"));
  BurstResult with_region =
      RunBurst(worker, opt.workers, BurstMode::kRegion, opt.deadline_s, timeline("region"));
  BurstResult precreated = RunBurst(worker, opt.workers, BurstMode::kRegionPrecreated,
                                    opt.deadline_s, timeline("region_precreated"));
  WarmMembership warm = MeasureWarmMembership(opt.quick ? 200 : 2000);
  Uncontended un = MeasureUncontended(opt.iterations);
  Contended co = MeasureContended(opt.contend_ns, opt.deadline_s);

  const std::vector<const BurstResult*> bursts = {&control, &with_region, &precreated};
  bool every_burst_ok = true;
  for (const BurstResult* b : bursts) every_burst_ok &= b->error.empty() && b->failed == 0;
  const bool bursts_ok = control.error.empty() && with_region.error.empty() &&
                         control.failed == 0 && with_region.failed == 0;
  auto ratio = [&control](const BurstResult& b) {
    return control.wall_span_ns > 0 ? double(b.wall_span_ns) / double(control.wall_span_ns) : 0.0;
  };
  const double wall_ratio = ratio(with_region);
  const double wall_ratio_precreated = ratio(precreated);
  const bool burst_conditions = opt.workers == kGoalWorkers && cpus == kGoalCpus;
  const std::string burst_cond = "300 workers on 2 CPUs";
  const std::vector<Goal> goals = {
      AtMost("burst wall ratio (region / control)", wall_ratio, "ratio", kGoalWallRatio, bursts_ok,
             burst_cond, burst_conditions),
      AtMost("burst registration p99", double(with_region.registration_ns.p99) / 1e6, "ms",
             kGoalRegistrationP99Ms, bursts_ok && with_region.registration_ns.count > 0, burst_cond,
             burst_conditions),
      AtMost("reserve+release uncontended", un.pair_ns, "ns", kGoalUncontendedNs, un.ok),
  };

  std::vector<Row> rows;
  for (const BurstResult* b : bursts) {
    const std::string n = std::string("burst ") + ModeName(b->mode);
    rows.push_back({n + ": workers ok / failed",
                    std::to_string(b->ok) + " / " + std::to_string(b->failed), "0 failed",
                    b->failed == 0 && b->error.empty() ? "yes" : "no"});
    rows.push_back({n + ": registration p50", Duration(b->registration_ns.p50), "", ""});
    rows.push_back({n + ": registration p95", Duration(b->registration_ns.p95), "", ""});
    if (b->mode == BurstMode::kRegion) {
      rows.push_back(
          {n + ": registration p99", Ms(b->registration_ns.p99), "<= 2 ms", MeetsText(goals[1])});
    } else {
      rows.push_back({n + ": registration p99", Duration(b->registration_ns.p99), "", ""});
    }
    rows.push_back({n + ": registration max", Duration(b->registration_ns.max), "", ""});
    rows.push_back({n + ": wall span", Ms(b->wall_span_ns), "", ""});
  }
  rows.push_back(
      {"burst wall ratio (region / control)", Fixed(wall_ratio, 3), "<= 1.2", MeetsText(goals[0])});
  rows.push_back(
      {"burst wall ratio (region_precreated / control)", Fixed(wall_ratio_precreated, 3), "", ""});
  rows.push_back({"burst region: open p50 / p99",
                  Duration(with_region.open_ns.p50) + " / " + Duration(with_region.open_ns.p99), "",
                  ""});
  rows.push_back(
      {"burst region: register p50 / p99",
       Duration(with_region.register_ns.p50) + " / " + Duration(with_region.register_ns.p99), "",
       ""});
  rows.push_back({"burst region: preempted / slept in open+register",
                  std::to_string(with_region.preempted_during_registration) + " / " +
                      std::to_string(with_region.blocked_during_registration) + " of " +
                      std::to_string(with_region.ok),
                  "", ""});
  rows.push_back(
      {"membership, warm process: create (1 sample)", Fixed(warm.create_us, 1) + " us", "", ""});
  rows.push_back({"membership, warm process (median): open / register",
                  Fixed(warm.open_us, 1) + " us / " + Fixed(warm.register_us, 1) + " us", "", ""});
  rows.push_back({"  of which Register's procfs reads (stat, ns/pid, comm)",
                  Fixed(warm.procfs_us, 1) + " us", "", ""});
  rows.push_back({"membership, warm process (median): unregister / close",
                  Fixed(warm.unregister_us, 1) + " us / " + Fixed(warm.close_us, 1) + " us", "",
                  ""});
  rows.push_back({"reserve+release uncontended", Ns(un.pair_ns), "<= 50 ns", MeetsText(goals[2])});
  rows.push_back(
      {"reserve alone / release alone", Ns(un.reserve_ns) + " / " + Ns(un.release_ns), "", ""});
  rows.push_back({"baseline: atomic fetch_add pair", Ns(un.atomic_pair_ns), "", ""});
  rows.push_back({"baseline: robust mutex lock+unlock", Ns(un.mutex_pair_ns), "", ""});
  rows.push_back({"ratio: reserve+release / atomic pair",
                  Fixed(un.atomic_pair_ns > 0 ? un.pair_ns / un.atomic_pair_ns : 0, 2), "", ""});
  rows.push_back({"ratio: reserve+release / mutex pair",
                  Fixed(un.mutex_pair_ns > 0 ? un.pair_ns / un.mutex_pair_ns : 0, 2), "", ""});
  rows.push_back({"reserve+release contended (2 proc x 4 thr), per thread",
                  Ns(co.ns_per_pair_per_thread), "", ""});
  rows.push_back({"reserve+release contended, all threads",
                  Fixed(co.pairs_per_second / 1e6, 3) + " M pairs/s", "", ""});

  std::printf("\n");
  PrintTable(rows);
  for (const BurstResult* b : bursts) {
    if (!b->error.empty())
      std::printf("burst %s failed: %s\n", ModeName(b->mode), b->error.c_str());
    for (const std::string& e : b->worker_errors) {
      std::printf("burst %s: %s\n", ModeName(b->mode), e.c_str());
    }
  }
  if (!warm.ok) std::printf("warm membership failed: %s\n", warm.error.c_str());
  if (!un.ok) std::printf("uncontended failed: %s\n", un.error.c_str());
  if (!co.ok) std::printf("contended failed: %s\n", co.error.c_str());

  Json goals_json = Json::array();
  for (const Goal& g : goals) goals_json.push_back(ToJson(g));
  Json doc = {
      {"benchmark", "region"},
      {"config",
       {{"workers", opt.workers},
        {"quick", opt.quick},
        {"cpus", cpus},
        {"deadline_s", opt.deadline_s},
        {"uncontended_iterations", un.iterations},
        {"uncontended_runs", un.runs},
        {"contended_duration_ns", co.duration_ns},
        {"reserve_bytes", kPairBytes}}},
      {"burst",
       {{"control", ToJson(control)},
        {"region", ToJson(with_region)},
        {"region_precreated", ToJson(precreated)},
        {"wall_ratio", wall_ratio},
        {"wall_ratio_precreated", wall_ratio_precreated}}},
      {"membership_warm",
       {{"ok", warm.ok},
        {"error", warm.error},
        {"iterations", warm.iterations},
        {"create_us", warm.create_us},
        {"open_us", warm.open_us},
        {"register_us", warm.register_us},
        {"unregister_us", warm.unregister_us},
        {"close_us", warm.close_us},
        {"register_procfs_us", warm.procfs_us},
        {"statistic", "median"}}},
      {"reserve_release",
       {{"ok", un.ok && co.ok},
        {"error", un.error.empty() ? co.error : un.error},
        {"uncontended_ns_per_pair", un.pair_ns},
        {"reserve_ns", un.reserve_ns},
        {"release_ns", un.release_ns},
        {"contended",
         {{"processes", co.processes},
          {"threads_per_process", co.threads_per_process},
          {"pairs", co.pairs},
          {"ns_per_pair_per_thread", co.ns_per_pair_per_thread},
          {"min_thread_ns_per_pair", co.ok ? co.min_thread_ns_per_pair : 0.0},
          {"max_thread_ns_per_pair", co.max_thread_ns_per_pair},
          {"pairs_per_second", co.pairs_per_second}}},
        {"baselines",
         {{"atomic_fetch_add_pair_ns", un.atomic_pair_ns},
          {"robust_mutex_lock_unlock_ns", un.mutex_pair_ns}}},
        {"ratios",
         {{"pair_vs_atomic_pair", un.atomic_pair_ns > 0 ? un.pair_ns / un.atomic_pair_ns : 0.0},
          {"pair_vs_robust_mutex", un.mutex_pair_ns > 0 ? un.pair_ns / un.mutex_pair_ns : 0.0}}}}},
      {"goals", goals_json},
  };
  if (!WriteJson(json_path, doc, kProgram)) return 1;
  std::printf("\njson: %s\n", json_path.c_str());
  return every_burst_ok && warm.ok && un.ok && co.ok ? 0 : 1;
}

std::optional<Options> ParseFlags(int argc, char** argv) {
  Options o;
  bool workers_set = false;
  bool deadline_set = false;
  FlagReader flags(argc, argv, kProgram, kUsage, &o);
  while (flags.Next()) {
    const std::string_view flag = flags.flag();
    std::string_view value;
    if (flag == "--timeline") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      o.timeline_dir = value;
    } else if (flag == "--workers" || flag == "--deadline-s") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      auto n = ParseUint64(value, flag);
      if (!n.ok()) {
        std::fprintf(stderr, "hami_bench_region: %s\n", n.error().message().c_str());
        return std::nullopt;
      }
      if (flag == "--workers") {
        if (*n < 1 || *n > uint64_t(region::kMaxSlots)) {
          std::fprintf(stderr, "hami_bench_region: --workers %" PRIu64 " is not from 1 to %d\n", *n,
                       region::kMaxSlots);
          return std::nullopt;
        }
        o.workers = int(*n);
        workers_set = true;
      } else {
        if (*n < 1 || *n > 3600) {
          std::fprintf(stderr, "hami_bench_region: --deadline-s is not from 1 to 3600\n");
          return std::nullopt;
        }
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
    if (!workers_set) o.workers = 64;
    if (!deadline_set) o.deadline_s = 30;  // five phases stay well inside a test's timeout
    o.iterations = 50'000;
    o.contend_ns = 200'000'000;
  }
  return o;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::ParseFlags, hami::bench::Main);
}
