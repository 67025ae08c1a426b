// hami_bench_init: how long a CUDA process's first cuInit takes under libvgpu.so when many
// start at once, for each way of learning the host PID, measured beside its goals.
//
// For each worker count W and identity mode, --repeat bursts (default 3, the modes in a
// shuffled order each round), each in a fresh directory with a fresh simulated-GPU state and
// shared region: W exec'd workers (init_bench_worker, beside this binary) with
// libvgpu.so preloaded on the simulated driver, released together by a pipe barrier once
// every one is asleep in read(); each calls cuInit(0) (libvgpu.so joins the region and learns
// its host PID inside it) and then checks the host PID its region slot records. The handoff
// mode is the probe's baseline: no identity tier, and after cuInit the serialized part of the
// probe's work (the primary-context retain and release) run by the worker itself under a
// process-shared semaphore passed from worker to worker (a direct hand-over with nothing else
// around it); its latency ends when it posts. Reported per
// run: workers ok/failed, nearest-rank p50/p95/p99/max of the worker latency (cuInit returned
// minus released), the wall span (the last cuInit return minus the release), release offsets,
// identity paths, and every worker's raw record in the JSON. Then a table (per mode and worker
// count: the median of the bursts), the least-squares slope of p99 against workers, the goals
// at the largest worker count, the JSON (<this binary's dir>/init.json or --json) and a
// plot of p99 against workers (<this binary's dir>/init.svg or --svg).
//
// The broker mode needs root: the benchmark moves itself into a private mount namespace and
// mounts the broker's directory read-only at the compiled path before it starts any thread;
// every worker inherits that namespace. Without root it is reported as skipped, with why.
//
// Goals are reported (met / not met), never enforced: the exit status is 0 when every run
// that was not skipped ended with no failed worker, 1 otherwise, 2 on bad flags.
//
// usage: hami_bench_init [--workers LIST] [--identity LIST] [--repeat N] [--seed S]
//                        [--quick] [--json PATH] [--svg PATH] [--deadline-s S]
#include <cuda.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broker/client.h"
#include "broker/server.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "harness.h"
#include "init_bench_shared.h"
#include "region/region.h"

extern char** environ;

namespace hami::bench {
namespace {

constexpr char kProgram[] = "hami_bench_init";
constexpr char kWorkerName[] = "init_bench_worker";

// The simulated machine and its cost model (docs/simulated-gpu.md).
constexpr char kSimProfile[] = "a100-40g:8";
constexpr char kSimGpuName[] = "NVIDIA A100-SXM4-40GB";
constexpr int kSimGpuCount = 8;
constexpr int kSimInitUs = 20'000;       // extra latency of a process's first cuInit
constexpr int kSimCtxCreateUs = 50'000;  // creating a context, serialized machine-wide
constexpr char kMemoryLimit[] = "1g";

// The compiled broker path libvgpu.so asks (broker/client.h) and its mount point.
constexpr char kLockDir[] = "/tmp/vgpulock";
constexpr char kBrokerMountPoint[] = "/tmp/vgpulock/hostpid";
static_assert(std::string_view(broker::kClientSocketPath) ==
                  std::string_view("/tmp/vgpulock/hostpid/broker.sock"),
              "the broker is mounted where the client looks for it");

// The goals, at the largest worker count, and the runs the slope is fitted over.
constexpr double kGoalBrokerOverNoneP99 = 1.15;
constexpr double kGoalBrokerOverProbeSlope = 0.10;
constexpr double kGoalProbeOverHandoffP99 = 1.10;
constexpr double kGoalBrokerOverBareWall = 1.20;
constexpr double kGoalProbeGiveUps = 0;  // identities given up at the lock, every burst
constexpr int kSlopeMinWorkers = 8;

constexpr int kMaxWorkers = 500;  // the simulated machine tracks 512 processes

// ---- identity modes ----

enum class Mode { kNone, kProbe, kBroker, kProcfs, kHandoff, kBare };
constexpr std::array<Mode, 6> kAllModes = {Mode::kNone,   Mode::kProbe,  Mode::kHandoff,
                                           Mode::kBroker, Mode::kProcfs, Mode::kBare};

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kNone:
      return "none";
    case Mode::kProbe:
      return "probe";
    case Mode::kBroker:
      return "broker";
    case Mode::kProcfs:
      return "procfs";
    case Mode::kHandoff:
      return "handoff";
    case Mode::kBare:
      return "bare";
  }
  return "?";
}

// The identity variables of a mode, for a run whose files live in `dir`. The probe waits for
// its lock with the default cap (HAMI_IDENTITY_PROBE_WAIT_MS, 10 s), which bounds a stuck
// holder, not a long queue: a burst longer than the cap must not give up any identity.
std::vector<std::pair<std::string, std::string>> ModeEnvironment(Mode m, const std::string& dir) {
  switch (m) {
    case Mode::kNone:
    case Mode::kHandoff:
      return {{"HAMI_IDENTITY_TIERS", "none"}};
    case Mode::kProbe:
      return {{"HAMI_IDENTITY_TIERS", "probe"}, {"HAMI_IDENTITY_PROBE_LOCK", dir + "/probe.lock"}};
    case Mode::kBroker:
      return {{"HAMI_IDENTITY_TIERS", "broker"}, {"LIBVGPU_HOSTPID_BROKER", "1"}};
    case Mode::kProcfs:
      return {{"HAMI_IDENTITY_TIERS", "procfs"}, {"LIBVGPU_HOST_PROCFS", "/proc"}};
    case Mode::kBare:
      return {};
  }
  return {};
}

// What a worker of the mode must find in its slot.
const char* ModeExpect(Mode m) {
  if (m == Mode::kBare) return "bare";
  return m == Mode::kNone || m == Mode::kHandoff ? "none" : "own-pid";
}

// The handoff mode's semaphore: a file holding one process-shared sem_t at 1.
constexpr char kHandoffFile[] = "handoff.sem";

constexpr char kUsage[] =
    "usage: hami_bench_init [--workers LIST] [--identity LIST] [--repeat N] [--seed S]\n"
    "                       [--quick] [--json PATH] [--svg PATH] [--deadline-s S]\n"
    "  --workers LIST   worker counts, comma-separated (default 1,2,8,32,128,300;\n"
    "                   --quick: 1,2,8,32)\n"
    "  --identity LIST  modes among none, probe, handoff (the probe's baseline), broker,\n"
    "                   procfs (default all; broker needs root)\n"
    "  --repeat N       bursts per mode and worker count, in a shuffled order of the\n"
    "                   modes; the table shows their medians (default 3; --quick: 1)\n"
    "  --seed S         seed of that order (default: from the clock; in the JSON)\n"
    "  --quick          a short run (the smoke test)\n"
    "  --json PATH      where to write the JSON (default: init.json beside this binary)\n"
    "  --svg PATH       where to write the plot (default: init.svg beside this binary)\n"
    "  --deadline-s S   seconds per run; past it every worker is killed and the run\n"
    "                   fails (default 300; --quick: 60)\n";

struct Options : CommonOptions {
  std::vector<int> workers = {1, 2, 8, 32, 128, 300};
  std::vector<Mode> modes = {kAllModes.begin(), kAllModes.end()};
  std::string svg_path;
  int repeat = 3;        // bursts per mode and worker count
  uint64_t seed = 0;     // of the shuffled order of the modes
  int deadline_s = 300;  // per run
};

// ---- small helpers ----

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Milliseconds with one decimal, without the unit: "12.3".
std::string Millis(int64_t ns) { return Fixed(double(ns) / 1e6, 1); }

// ---- statistics ----

// Least squares y = a + b x; nullopt with fewer than two distinct x.
std::optional<double> Slope(const std::vector<std::pair<double, double>>& xy) {
  if (xy.size() < 2) return std::nullopt;
  double mx = 0, my = 0;
  for (const auto& [x, y] : xy) {
    mx += x;
    my += y;
  }
  mx /= double(xy.size());
  my /= double(xy.size());
  double sxx = 0, sxy = 0;
  for (const auto& [x, y] : xy) {
    sxx += (x - mx) * (x - mx);
    sxy += (x - mx) * (y - my);
  }
  if (sxx <= 0) return std::nullopt;
  return sxy / sxx;
}

// ---- processes ----

// In a fork child before exec: "execve failed: errno N" into the worker's record (no
// allocation, no locale: async-signal-safe).
void RecordExecFailure(InitWorkerRecord* r, int err) {
  static constexpr char kText[] = "execve failed: errno ";
  size_t n = 0;
  for (const char* p = kText; *p != '\0'; ++p) r->error[n++] = *p;
  char digits[12];
  size_t d = 0;
  unsigned v = unsigned(err);
  do {
    digits[d++] = char('0' + v % 10);
    v /= 10;
  } while (v != 0 && d < sizeof(digits));
  while (d > 0) r->error[n++] = digits[--d];
  r->error[n] = '\0';
}

// Where a failed worker stopped: the step it recorded, or, when it recorded none (it died,
// was killed or never ran), the last timestamp it reached.
std::string StepName(const InitWorkerRecord& r) {
  switch (InitStep(r.failed_step)) {
    case InitStep::kNone:
      if (r.main_ns == 0) return "before-main";
      if (r.ready_ns == 0) return "before-ready";
      if (r.released_ns == 0) return "at-barrier";
      if (r.cuinit_ns == 0) return "in-cuInit";
      return "after-cuInit";
    case InitStep::kBarrier:
      return "barrier";
    case InitStep::kCuInit:
      return "cuInit";
    case InitStep::kRegionOpen:
      return "region-open";
    case InitStep::kSlot:
      return "slot";
    case InitStep::kIdentity:
      return "wrong-host-pid";
    case InitStep::kHandoff:
      return "handoff";
  }
  return "invalid-step";
}

// `exited`: the process ended by itself (not killed by the benchmark at the deadline).
std::string HowItEnded(int status, bool exited) {
  if (!exited) return "killed at the deadline";
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// ---- the broker, at the compiled path in a private mount namespace ----

struct BrokerHost {
  std::string skipped;  // why the broker mode cannot run; empty when it can
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<broker::Server> server;
  std::string socket_path;
};

// Must run before this process starts any thread: unshare(CLONE_NEWNS) refuses a process
// with more than one. Every worker exec'd afterwards inherits the namespace, and with it a
// read-only /tmp/vgpulock/hostpid holding the broker's socket.
std::unique_ptr<BrokerHost> SetUpBroker() {
  auto host = std::make_unique<BrokerHost>();
  auto skip = [&host](std::string why) {
    host->server.reset();
    host->skipped = std::move(why);
    return std::move(host);
  };
  if (geteuid() != 0) {
    return skip("needs root (to mount the broker's directory read-only at " +
                std::string(kBrokerMountPoint) + " in a private mount namespace); running as uid " +
                std::to_string(geteuid()));
  }
  host->dir = std::make_unique<TempDir>("hami-bench-init-broker");
  if (!host->dir->ok()) return skip(Errno("mkdtemp for the broker's directory"));
  const std::string served = host->dir->File("hostpid");
  if (mkdir(served.c_str(), broker::kDirectoryMode) != 0) return skip(Errno(served.c_str()));
  // The mount point for the tmpfs must exist on the host (as the device plugin makes it).
  if (mkdir(kLockDir, 01777) == 0) {
    chmod(kLockDir, 01777);
  } else if (errno != EEXIST) {
    return skip(Errno("mkdir /tmp/vgpulock"));
  }
  if (unshare(CLONE_NEWNS) != 0) return skip(Errno("unshare(CLONE_NEWNS)"));
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return skip(Errno("making / private in the new mount namespace"));
  }
  if (mount("tmpfs", kLockDir, "tmpfs", 0, "mode=1777") != 0) {
    return skip(Errno("mounting a tmpfs on /tmp/vgpulock"));
  }
  if (mkdir(kBrokerMountPoint, 0755) != 0) return skip(Errno("mkdir /tmp/vgpulock/hostpid"));
  if (mount(served.c_str(), kBrokerMountPoint, nullptr, MS_BIND, nullptr) != 0) {
    return skip(Errno(("bind-mounting " + served + " on /tmp/vgpulock/hostpid").c_str()));
  }
  if (mount(nullptr, kBrokerMountPoint, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    return skip(Errno("remounting /tmp/vgpulock/hostpid read-only"));
  }
  // The serving thread inherits this mask: SIGALRM (the run deadline) stays with this thread.
  sigset_t alarm_only, old;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm_only, &old);
  broker::ServerOptions o;
  o.socket_path = served + "/broker.sock";
  auto started = broker::Server::Start(o);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!started.ok()) return skip("starting the broker: " + started.error().message());
  host->server = std::move(started).value();
  host->socket_path = o.socket_path;
  return host;
}

Json CounterDelta(const broker::ServerCounters& before, const broker::ServerCounters& after) {
  Json j = Json::object();
#define HAMI_INIT_BENCH_DELTA(e, label, doc) \
  j[#label] = after.Get(broker::Counter::e) - before.Get(broker::Counter::e);
  HAMI_BROKER_COUNTERS(HAMI_INIT_BENCH_DELTA)
#undef HAMI_INIT_BENCH_DELTA
  return j;
}

// CPU time (ns) of every thread of this process but the calling one (the broker's serving
// thread), from /proc/self/task/<tid>/schedstat; -1 when unreadable.
int64_t OtherThreadsCpuNs() {
  const pid_t self = pid_t(syscall(SYS_gettid));
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int64_t total = 0;
  bool any = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || std::atoi(e->d_name) == self) continue;
    auto text = ReadFileToString(std::string("/proc/self/task/") + e->d_name + "/schedstat", 256);
    if (!text.ok()) continue;
    total += std::strtoll(text->c_str(), nullptr, 10);
    any = true;
  }
  closedir(d);
  return any ? total : -1;
}

// ---- one run: a mode at a worker count ----

struct Paths {
  std::string worker;   // init_bench_worker
  std::string libvgpu;  // <build>/lib/libvgpu.so
  std::string sim_dir;  // <build>/lib/sim
};

struct RunResult {
  Mode mode = Mode::kNone;
  int workers = 0;
  int repeat = 0;    // which burst of this mode and worker count (from 0)
  int sequence = 0;  // position in the whole benchmark's order of runs (from 0)
  int spawned = 0;
  int ok = 0;
  int failed = 0;
  bool timed_out = false;
  std::string error;              // why the run itself failed, if it did
  int64_t wall_span_ns = 0;       // the last cuInit return minus the release
  int64_t ready_span_ns = 0;      // first fork to the release (exec, loading, the barrier)
  Percentiles latency_ns;         // cuInit returned minus released, successes only
  Percentiles release_offset_ns;  // released minus the parent's release timestamp
  Percentiles identity_ns;        // the identity attempt recorded in the slot
  // Gaps between consecutive workers' returns, in order of return: in the serialized modes
  // (probe, handoff) one turn of the queue, the hand-over included.
  Percentiles turn_ns;
  Percentiles cpu_ns;             // CPU time of cuInit in the worker, successes only
  double voluntary_switches = 0;  // per successful worker, during cuInit (mean)
  double involuntary_switches = 0;
  int64_t server_cpu_ns = -1;  // broker mode: CPU time of the serving thread in the run
  std::map<std::string, int> identity_sources;  // by source name, workers with a slot
  std::map<std::string, int> identity_reasons;  // "tier:reason" for tiers that gave none
  int probe_give_ups = 0;                       // workers whose probe tier timed out at the lock
  std::map<std::string, int> failures;          // by step
  std::vector<std::string> worker_errors;       // the first few
  std::vector<std::string> worker_log;          // the head of the workers' stderr on failure
  Json broker_counters;                         // broker mode: the server's counters, this run
  Json records = Json::array();                 // per worker
  bool valid() const { return error.empty() && failed == 0 && latency_ns.count > 0; }
};

// The workers' environment: this process's, less every variable libvgpu.so, the driver or
// the simulation reads, plus the run's.
std::vector<std::string> WorkerEnvironment(Mode mode, const std::string& dir, const Paths& paths) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv = *e;
    bool ours = false;
    for (std::string_view prefix :
         {"HAMI_", "LIBVGPU_", "LIBCUDA_", "CUDA_", "NVIDIA_", "LD_PRELOAD=", "LD_LIBRARY_PATH="}) {
      ours = ours || kv.substr(0, prefix.size()) == prefix;
    }
    if (!ours) env.emplace_back(kv);
  }
  // The baseline runs the same workers on the same simulated driver without libvgpu.so.
  if (mode != Mode::kBare) env.push_back("LD_PRELOAD=" + paths.libvgpu);
  const std::vector<std::pair<std::string, std::string>> common = {
      {"LD_LIBRARY_PATH", paths.sim_dir},
      {"HAMI_SIM_STATE", dir + "/sim.state"},
      {"HAMI_SIM_PROFILE", kSimProfile},
      {"HAMI_SIM_INIT_US", std::to_string(kSimInitUs)},
      {"HAMI_SIM_CTX_CREATE_US", std::to_string(kSimCtxCreateUs)},
      {"HAMI_SIM_CTX_SERIALIZE", "1"},
      {"CUDA_DEVICE_MEMORY_SHARED_CACHE", dir + "/region.cache"},
      {"CUDA_DEVICE_MEMORY_LIMIT", kMemoryLimit},
  };
  for (const auto& [k, v] : common) env.push_back(k + "=" + v);
  for (const auto& [k, v] : ModeEnvironment(mode, dir)) env.push_back(k + "=" + v);
  return env;
}

// The first `max_lines` lines of `path`.
std::vector<std::string> HeadOf(const std::string& path, size_t max_lines) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (lines.size() < max_lines && std::getline(in, line)) lines.push_back(line);
  return lines;
}

Json Relative(int64_t t, int64_t t0) { return t == 0 ? Json(nullptr) : Json(t - t0); }

// The handoff mode's semaphore at `path`, initialized to 1 (the first worker takes it).
Status CreateHandoffSemaphore(const std::string& path) {
  auto fd = OpenRegularFile(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (!fd.ok()) return std::move(fd).error();
  if (ftruncate(fd->get(), off_t(sizeof(sem_t))) != 0) {
    return Error::FromErrno("ftruncate " + path);
  }
  auto mapped = MappedFile::Map(fd->get(), sizeof(sem_t), true, path);
  if (!mapped.ok()) return std::move(mapped).error();
  if (sem_init(static_cast<sem_t*>(mapped->data()), 1, 1) != 0) {
    return Error::FromErrno("sem_init " + path);
  }
  return OkStatus();
}

RunResult RunBurst(const Paths& paths, Mode mode, int workers, int deadline_s,
                   broker::Server* server) {
  RunResult res;
  res.mode = mode;
  res.workers = workers;
  auto fail = [&res](std::string why) {
    res.error = std::move(why);
    res.failed = res.workers - res.ok;
    return res;
  };

  TempDir dir("hami-bench-init");
  if (!dir.ok()) return fail(Errno("mkdtemp for the run's directory"));
  const std::string region_path = dir.File("region.cache");
  const std::string log_path = dir.File("workers.log");
  UniqueFd log(open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!log.valid()) return fail(Errno(("creating " + log_path).c_str()));
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull.valid()) return fail(Errno("opening /dev/null"));

  // The results area: one record per worker, each "failed" until its worker says otherwise.
  auto area = ResultsArea::Create<InitWorkerRecord>("hami-bench-init-results", kInitResultsMagic,
                                                    kInitResultsVersion, uint32_t(workers));
  if (!area.ok()) return fail(area.error().message());
  InitWorkerRecord* records = (*area)->records<InitWorkerRecord>();
  for (int i = 0; i < workers; ++i) records[i].cu_result = -1;

  BurstSpec spec;
  spec.worker = paths.worker;
  spec.args = {"--region", region_path, "--expect", ModeExpect(mode)};
  if (mode == Mode::kHandoff) {
    const std::string sem_path = dir.File(kHandoffFile);
    if (Status made = CreateHandoffSemaphore(sem_path); !made.ok()) {
      return fail(made.error().message());
    }
    spec.args.insert(spec.args.end(), {"--handoff", sem_path});
  }
  spec.env = WorkerEnvironment(mode, dir.path(), paths);
  spec.stdin_fd = devnull.get();
  spec.output_fd = log.get();
  spec.deadline_s = deadline_s;
  spec.on_fork_failure = ForkFailure::kSkipWorker;
  spec.on_exec_failure = [records](size_t i, int err) { RecordExecFailure(&records[i], err); };

  const broker::ServerCounters counters_before =
      server != nullptr ? server->Counters() : broker::ServerCounters{};
  const int64_t server_cpu_before = server != nullptr ? OtherThreadsCpuNs() : -1;
  const BurstProcesses burst = RunWorkerBurst(spec, **area);
  res.spawned = burst.spawned;
  res.timed_out = burst.timed_out;
  if (!burst.error.empty()) return fail(burst.error);
  const int64_t t0 = burst.release_ns;
  res.ready_span_ns = t0 - burst.first_fork_ns;
  const size_t count = size_t(workers);
  for (size_t i = 0; i < count; ++i) {
    if (burst.fork_errno[i] != 0) {
      std::snprintf(records[i].error, sizeof(records[i].error), "fork: %s",
                    std::strerror(burst.fork_errno[i]));
    }
  }
  const std::vector<pid_t>& pids = burst.pids;
  const std::vector<int>& statuses = burst.statuses;
  const std::vector<bool>& reaped_by_itself = burst.exited;
  if (server != nullptr) {
    res.broker_counters = CounterDelta(counters_before, server->Counters());
    const int64_t server_cpu_after = OtherThreadsCpuNs();
    if (server_cpu_before >= 0 && server_cpu_after >= 0) {
      res.server_cpu_ns = server_cpu_after - server_cpu_before;
    }
  }

  std::vector<int64_t> latency, offsets, identity, cpu, returns;
  int64_t last_return = 0;
  for (size_t i = 0; i < count; ++i) {
    const InitWorkerRecord& r = records[i];
    // The handoff mode's latency runs to the end of its serialized work.
    const int64_t done_ns = mode == Mode::kHandoff ? r.handoff_ns : r.cuinit_ns;
    const bool exited_zero =
        reaped_by_itself[i] && WIFEXITED(statuses[i]) && WEXITSTATUS(statuses[i]) == 0;
    const bool says_ok = r.outcome.load(std::memory_order_acquire) == uint32_t(WorkerOutcome::kOk);
    const bool ok = exited_zero && says_ok;
    const auto step = InitStep(r.failed_step);
    const auto source = region::IdentitySource(r.identity_source);
    // It read its slot (a bare worker has none).
    const bool has_slot = mode != Mode::kBare && (ok || step == InitStep::kIdentity);
    const std::string ended =
        pids[i] > 0 ? HowItEnded(statuses[i], reaped_by_itself[i]) : "never started";
    std::string why = ok ? "" : r.error[0] != '\0' ? r.error : "(no record written)";
    if (constexpr std::string_view kExec = "execve failed: errno "; why.starts_with(kExec)) {
      const int err = std::atoi(why.c_str() + kExec.size());
      why = "execve of " + paths.worker + " failed: " + std::strerror(err) + " (errno " +
            std::to_string(err) + ")";
    }
    if (done_ns != 0) last_return = std::max(last_return, done_ns);
    if (r.released_ns != 0) offsets.push_back(r.released_ns - t0);
    Json reasons = Json::object();
    if (has_slot) {
      const std::string source_name = region::IdentitySourceName(source);
      res.identity_sources[source_name]++;
      identity.push_back(r.identity_ns);
      for (int t = 0; t < region::kIdentityTiers; ++t) {
        const auto reason = region::IdentityReason(r.identity_reason[t]);
        const std::string tier = region::IdentityTierName(region::IdentityTier(t));
        reasons[tier] = region::IdentityReasonName(reason);
        if (reason != region::IdentityReason::kNone &&
            reason != region::IdentityReason::kDisabled) {
          res.identity_reasons[tier + ":" + region::IdentityReasonName(reason)]++;
        }
        if (region::IdentityTier(t) == region::IdentityTier::kProbe &&
            reason == region::IdentityReason::kLockTimeout) {
          res.probe_give_ups++;
        }
      }
    }
    res.records.push_back(Json{
        {"index", i},
        {"pid", r.pid},
        {"ok", ok},
        {"ended", ended},
        {"failed_step", ok ? "" : StepName(r)},
        {"error", why},
        {"cu_result", r.cu_result},
        {"host_pid", r.host_pid},
        {"identity", has_slot ? region::IdentitySourceName(source) : "no-slot"},
        {"identity_reasons", reasons},
        {"identity_attempts", r.identity_attempts},
        {"identity_ns", r.identity_ns},
        {"cpu_ns", r.cpu_ns},
        {"voluntary_switches", r.voluntary_switches},
        {"involuntary_switches", r.involuntary_switches},
        {"main_ns", Relative(r.main_ns, t0)},
        {"ready_ns", Relative(r.ready_ns, t0)},
        {"released_ns", Relative(r.released_ns, t0)},
        {"cuinit_returned_ns", Relative(r.cuinit_ns, t0)},
        {"handoff_done_ns", Relative(r.handoff_ns, t0)},
        {"latency_ns",
         done_ns != 0 && r.released_ns != 0 ? Json(done_ns - r.released_ns) : Json(nullptr)},
    });
    if (!ok) {
      res.failures[says_ok ? "exit-status" : StepName(r)]++;
      if (res.worker_errors.size() < 5) {
        res.worker_errors.push_back(
            "worker " + std::to_string(i) + " (pid " + std::to_string(pids[i]) + "): " + ended +
            ", " + (says_ok ? "its record says ok" : "failed (" + StepName(r) + ")") + ": " + why);
      }
      continue;
    }
    res.ok++;
    latency.push_back(done_ns - r.released_ns);
    returns.push_back(done_ns);
    cpu.push_back(r.cpu_ns);
    res.voluntary_switches += r.voluntary_switches;
    res.involuntary_switches += r.involuntary_switches;
  }
  if (res.ok > 0) {
    res.voluntary_switches /= res.ok;
    res.involuntary_switches /= res.ok;
  }
  res.cpu_ns = NearestRank(std::move(cpu));
  res.failed = workers - res.ok;
  res.wall_span_ns = last_return > 0 ? last_return - t0 : 0;
  res.latency_ns = NearestRank(std::move(latency));
  res.release_offset_ns = NearestRank(std::move(offsets));
  res.identity_ns = NearestRank(std::move(identity));
  std::sort(returns.begin(), returns.end());
  std::vector<int64_t> turns;
  for (size_t i = 1; i < returns.size(); ++i) turns.push_back(returns[i] - returns[i - 1]);
  res.turn_ns = NearestRank(std::move(turns));
  if (res.failed > 0) res.worker_log = HeadOf(log_path, 12);
  if (res.timed_out) {
    res.error =
        "deadline: workers still running after " + std::to_string(deadline_s) + " s were killed";
  }
  return res;
}

std::string PathCounts(const std::map<std::string, int>& counts) {
  std::string s;
  for (const auto& [name, n] : counts) {
    s += (s.empty() ? "" : " ") + name + "=" + std::to_string(n);
  }
  return s.empty() ? "-" : s;
}

Json ToJson(const RunResult& r) {
  return Json{
      {"workers", r.workers},
      {"repeat", r.repeat},
      {"sequence", r.sequence},
      {"spawned", r.spawned},
      {"ok", r.ok},
      {"failed", r.failed},
      {"timed_out", r.timed_out},
      {"error", r.error},
      {"latency_ns", ToJson(r.latency_ns)},
      {"wall_span_ns", r.wall_span_ns},
      {"release_offset_ns",
       {{"count", r.release_offset_ns.count},
        {"p50", r.release_offset_ns.p50},
        {"max", r.release_offset_ns.max}}},
      {"ready_span_ns", r.ready_span_ns},
      {"identity_ns", ToJson(r.identity_ns)},
      {"turn_ns", ToJson(r.turn_ns)},
      {"cpu_ns", ToJson(r.cpu_ns)},
      {"voluntary_switches_mean", r.voluntary_switches},
      {"involuntary_switches_mean", r.involuntary_switches},
      {"broker_server_cpu_ns", r.server_cpu_ns >= 0 ? Json(r.server_cpu_ns) : Json(nullptr)},
      {"identity_sources", r.identity_sources},
      {"identity_reasons", r.identity_reasons},
      {"probe_lock_give_ups", r.probe_give_ups},
      {"failures", r.failures},
      {"worker_errors", r.worker_errors},
      {"worker_log_head", r.worker_log},
      {"broker_server", r.broker_counters.is_null() ? Json::object() : r.broker_counters},
      {"records", r.records},
  };
}

// ---- the report ----

// One mode at one worker count: its bursts, each figure summarized by the median over them
// (the nearest-rank p50 of the bursts' figures).
struct Cell {
  int workers = 0;
  std::vector<const RunResult*> runs;
  int ok = 0, failed = 0;  // summed over the bursts
  bool complete = false;   // every burst ran, with no failed worker
  int64_t p50 = 0, p95 = 0, p99 = 0, max = 0, wall_span = 0;
  int64_t p99_min = 0, p99_max = 0;
  double p99_mean = 0, p99_cv = 0;  // cv: sample standard deviation / mean (0 for one burst)
  int64_t release_p50 = 0, release_max = 0;     // median of the p50s, largest max
  std::map<std::string, int> identity_sources;  // summed
  int probe_give_ups = 0;                       // summed
  // Where the time goes (medians over the bursts of each burst's figure).
  int64_t cpu_p50 = 0;  // cuInit's CPU time in a worker, the burst's p50
  int64_t identity_p50 = 0, identity_p99 = 0;
  int64_t turn_p50 = 0;                                     // the gap between consecutive returns
  double voluntary_switches = 0, involuntary_switches = 0;  // per worker, during cuInit
  int64_t server_cpu = -1;                                  // broker: the serving thread
};

Cell Summarize(int workers, const std::vector<const RunResult*>& runs) {
  Cell c;
  c.workers = workers;
  c.runs = runs;
  c.complete = !runs.empty();
  std::vector<int64_t> p50, p95, p99, max, wall, release, cpu, id50, id99, vol, invol, server, turn;
  for (const RunResult* r : runs) {
    if (r->server_cpu_ns >= 0) server.push_back(r->server_cpu_ns);
    c.ok += r->ok;
    c.failed += r->failed;
    c.complete = c.complete && r->valid();
    for (const auto& [name, n] : r->identity_sources) c.identity_sources[name] += n;
    c.probe_give_ups += r->probe_give_ups;
    c.release_max = std::max(c.release_max, r->release_offset_ns.max);
    release.push_back(r->release_offset_ns.p50);
    wall.push_back(r->wall_span_ns);
    if (r->latency_ns.count == 0) continue;
    p50.push_back(r->latency_ns.p50);
    p95.push_back(r->latency_ns.p95);
    p99.push_back(r->latency_ns.p99);
    max.push_back(r->latency_ns.max);
    cpu.push_back(r->cpu_ns.p50);
    id50.push_back(r->identity_ns.p50);
    id99.push_back(r->identity_ns.p99);
    turn.push_back(r->turn_ns.p50);
    vol.push_back(int64_t(std::lround(r->voluntary_switches * 1000)));
    invol.push_back(int64_t(std::lround(r->involuntary_switches * 1000)));
  }
  c.cpu_p50 = NearestRank(cpu).p50;
  c.identity_p50 = NearestRank(id50).p50;
  c.identity_p99 = NearestRank(id99).p50;
  c.turn_p50 = NearestRank(turn).p50;
  c.voluntary_switches = double(NearestRank(vol).p50) / 1000;
  c.involuntary_switches = double(NearestRank(invol).p50) / 1000;
  if (!server.empty()) c.server_cpu = NearestRank(server).p50;
  if (!p99.empty()) {
    c.p99_min = *std::min_element(p99.begin(), p99.end());
    c.p99_max = *std::max_element(p99.begin(), p99.end());
    for (int64_t v : p99) c.p99_mean += double(v) / double(p99.size());
    if (p99.size() > 1) {
      double ss = 0;
      for (int64_t v : p99) ss += (double(v) - c.p99_mean) * (double(v) - c.p99_mean);
      c.p99_cv = c.p99_mean > 0 ? std::sqrt(ss / double(p99.size() - 1)) / c.p99_mean : 0;
    }
  }
  c.p50 = NearestRank(p50).p50;
  c.p95 = NearestRank(p95).p50;
  c.p99 = NearestRank(p99).p50;
  c.max = NearestRank(max).p50;
  c.wall_span = NearestRank(wall).p50;
  c.release_p50 = NearestRank(release).p50;
  return c;
}

Json ToJson(const Cell& c) {
  return Json{
      {"workers", c.workers},
      {"bursts", c.runs.size()},
      {"ok", c.ok},
      {"failed", c.failed},
      {"complete", c.complete},
      {"statistic", "median over the bursts (nearest-rank p50)"},
      {"latency_ns", {{"p50", c.p50}, {"p95", c.p95}, {"p99", c.p99}, {"max", c.max}}},
      {"p99_ns_over_bursts",
       {{"min", c.p99_min}, {"max", c.p99_max}, {"mean", c.p99_mean}, {"cv", c.p99_cv}}},
      {"wall_span_ns", c.wall_span},
      {"release_offset_ns", {{"p50", c.release_p50}, {"max", c.release_max}}},
      {"identity_sources", c.identity_sources},
      {"probe_lock_give_ups", c.probe_give_ups},
      {"cpu_ns_p50", c.cpu_p50},
      {"identity_ns", {{"p50", c.identity_p50}, {"p99", c.identity_p99}}},
      {"turn_ns_p50", c.turn_p50},
      {"voluntary_switches_mean", c.voluntary_switches},
      {"involuntary_switches_mean", c.involuntary_switches},
      {"broker_server_cpu_ns", c.server_cpu >= 0 ? Json(c.server_cpu) : Json(nullptr)},
  };
}

struct ModeRuns {
  Mode mode;
  std::string skipped;  // why the mode did not run
  std::vector<RunResult> runs;
  std::vector<Cell> cells;                    // per worker count, ascending
  std::optional<double> slope_ms_per_worker;  // p99 against workers, bursts with >= 8 workers
  int slope_points = 0;

  const Cell* At(int workers) const {
    for (const Cell& c : cells) {
      if (c.workers == workers) return &c;
    }
    return nullptr;
  }
};

// The cells, and the least-squares slope of p99 against workers over every complete burst
// with at least kSlopeMinWorkers workers (each burst one point).
void Summarize(ModeRuns* m, const std::vector<int>& worker_counts) {
  for (int w : worker_counts) {
    std::vector<const RunResult*> runs;
    for (const RunResult& r : m->runs) {
      if (r.workers == w) runs.push_back(&r);
    }
    if (!runs.empty()) m->cells.push_back(Summarize(w, runs));
  }
  std::vector<std::pair<double, double>> xy;
  for (const RunResult& r : m->runs) {
    if (r.workers >= kSlopeMinWorkers && r.valid()) {
      xy.emplace_back(double(r.workers), double(r.latency_ns.p99) / 1e6);
    }
  }
  m->slope_points = int(xy.size());
  m->slope_ms_per_worker = Slope(xy);
}

struct ScalingGoal {
  std::string name;
  double measured = 0;
  std::string unit;
  std::string goal;
  double bound = 0;
  bool valid = false;   // both figures exist
  std::string why_not;  // when not valid
  std::string detail;   // the figures it is made of
  bool meets() const { return valid && measured <= bound; }
};

std::vector<ScalingGoal> EvaluateGoals(const std::vector<ModeRuns>& modes, int largest) {
  auto find = [&modes](Mode m) -> const ModeRuns* {
    for (const ModeRuns& r : modes) {
      if (r.mode == m) return &r;
    }
    return nullptr;
  };
  const ModeRuns* none = find(Mode::kNone);
  const ModeRuns* probe = find(Mode::kProbe);
  const ModeRuns* handoff = find(Mode::kHandoff);
  const ModeRuns* brk = find(Mode::kBroker);
  const ModeRuns* bare_runs = find(Mode::kBare);
  auto missing = [](const ModeRuns* m, const char* name) -> std::string {
    if (m == nullptr) return std::string(name) + " was not run";
    if (!m->skipped.empty()) return std::string(name) + " was skipped";
    return "";
  };

  // One figure of mode `num` over the same figure of mode `den`, at the largest worker count.
  auto ratio_at_largest = [&](const char* figure_name, int64_t Cell::*figure, const ModeRuns* num,
                              const char* num_name, const ModeRuns* den, const char* den_name,
                              double bound) {
    ScalingGoal g;
    g.name = std::string(figure_name) + "(" + num_name + ") / " + figure_name + "(" + den_name +
             ") at " + std::to_string(largest) + " workers";
    g.unit = "ratio";
    g.goal = "<= " + Fixed(bound, 2);
    g.bound = bound;
    g.why_not = missing(num, num_name);
    if (g.why_not.empty()) g.why_not = missing(den, den_name);
    if (g.why_not.empty()) {
      const Cell* a = num->At(largest);
      const Cell* b = den->At(largest);
      if (a == nullptr || b == nullptr || !a->complete || !b->complete || b->*figure <= 0) {
        g.why_not = "a burst at " + std::to_string(largest) + " workers failed";
      } else {
        g.measured = double(a->*figure) / double(b->*figure);
        g.detail = Millis(a->*figure) + " ms / " + Millis(b->*figure) + " ms";
        g.valid = true;
      }
    }
    return g;
  };

  const ScalingGoal ratio =
      ratio_at_largest("p99", &Cell::p99, brk, "broker", none, "none", kGoalBrokerOverNoneP99);

  ScalingGoal slope;
  slope.name = "slope(broker) / slope(probe), p99 per worker";
  slope.unit = "ratio";
  slope.goal = "<= " + Fixed(kGoalBrokerOverProbeSlope, 2);
  slope.bound = kGoalBrokerOverProbeSlope;
  slope.why_not = missing(brk, "broker");
  if (slope.why_not.empty()) slope.why_not = missing(probe, "probe");
  if (slope.why_not.empty()) {
    if (!brk->slope_ms_per_worker || !probe->slope_ms_per_worker) {
      slope.why_not =
          "complete bursts at fewer than two worker counts >= " + std::to_string(kSlopeMinWorkers);
    } else if (*probe->slope_ms_per_worker <= 0) {
      slope.why_not = "the probe's p99 does not grow with the workers";
    } else {
      slope.measured = *brk->slope_ms_per_worker / *probe->slope_ms_per_worker;
      slope.detail = Fixed(*brk->slope_ms_per_worker, 3) + " / " +
                     Fixed(*probe->slope_ms_per_worker, 3) + " ms per worker";
      slope.valid = true;
    }
  }

  const ScalingGoal direct = ratio_at_largest("p99", &Cell::p99, probe, "probe", handoff, "handoff",
                                              kGoalProbeOverHandoffP99);

  // Every probe burst: nobody waits behind a stuck holder here, so a worker that gave up its
  // identity at the lock gave it up while the lock was making progress.
  ScalingGoal kept;
  kept.name = "probe identities given up at the lock, every burst";
  kept.unit = "workers";
  kept.goal = "= 0";
  kept.bound = kGoalProbeGiveUps;
  kept.why_not = missing(probe, "probe");
  if (kept.why_not.empty()) {
    int given_up = 0, workers = 0;
    std::string by_count;
    for (const Cell& c : probe->cells) {
      given_up += c.probe_give_ups;
      workers += c.ok + c.failed;
      by_count += (by_count.empty() ? "" : ", ") + std::to_string(c.workers) + ": " +
                  std::to_string(c.probe_give_ups);
    }
    kept.measured = given_up;
    kept.detail = "of " + std::to_string(workers) + " workers; by burst size " + by_count;
    kept.valid = workers > 0;
    if (!kept.valid) kept.why_not = "no probe worker ran";
  }
  const ScalingGoal bare = ratio_at_largest("wall", &Cell::wall_span, brk, "broker", bare_runs,
                                            "bare", kGoalBrokerOverBareWall);
  return {ratio, slope, direct, kept, bare};
}

// ---- the plot ----

// A round step (1, 2 or 5 x 10^k) that divides [0, max] into at most 8 intervals.
double NiceStep(double max) {
  if (max <= 0) return 1;
  double step = std::pow(10.0, std::floor(std::log10(max / 8)));
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    if (max / (step * f) <= 8) return step * f;
  }
  return step * 10;
}

std::string TickLabel(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string Svg(const std::vector<ModeRuns>& modes, const std::string& title) {
  constexpr double kWidth = 760, kHeight = 460;
  constexpr double kLeft = 80, kRight = 170, kTop = 50, kBottom = 60;
  constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;
  constexpr std::array<const char*, 6> kColors = {"#1f77b4", "#d62728", "#2ca02c",
                                                  "#9467bd", "#ff7f0e", "#7f7f7f"};

  // x linear (the slope is a straight line); y logarithmic, so the fast modes' floor and
  // the probe's queue share one plot.
  double max_x = 1, min_y = 0, max_y = 0;
  for (const ModeRuns& m : modes) {
    for (const RunResult& r : m.runs) {
      max_x = std::max(max_x, double(r.workers));
      if (r.latency_ns.count == 0) continue;
      const double y = std::max(double(r.latency_ns.p99) / 1e6, 1e-3);
      min_y = min_y == 0 ? y : std::min(min_y, y);
      max_y = std::max(max_y, y);
    }
  }
  if (max_y == 0) min_y = max_y = 1;
  const double x_step = NiceStep(max_x);
  const double x_top = std::ceil(max_x / x_step) * x_step;
  const double y_low = std::pow(10.0, std::floor(std::log10(min_y)));
  double y_high = 0;  // the first 2, 5 or 10 x 10^k at or above every point
  for (double decade = y_low; y_high == 0; decade *= 10) {
    for (double f : {2.0, 5.0, 10.0}) {
      if (decade * f >= max_y) {
        y_high = decade * f;
        break;
      }
    }
  }
  auto px = [&](double x) { return kLeft + x / x_top * kPlotW; };
  auto py = [&](double y) {
    return kTop + kPlotH - std::log10(y / y_low) / std::log10(y_high / y_low) * kPlotH;
  };

  std::string s;
  Appendf(&s,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
          kWidth, kHeight, kWidth, kHeight);
  Appendf(&s, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  Appendf(&s, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n",
          kLeft + kPlotW / 2, Escape(title).c_str());
  // Grid and ticks: 1, 2 and 5 of every decade on y.
  for (double decade = y_low; decade < y_high * 1.001; decade *= 10) {
    for (double f : {1.0, 2.0, 5.0}) {
      const double y = decade * f;
      if (y > y_high * 1.001) break;
      Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
              kLeft, py(y), kLeft + kPlotW, py(y));
      Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
              kLeft - 5, py(y), kLeft, py(y));
      Appendf(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", kLeft - 8,
              py(y) + 4, TickLabel(y).c_str());
    }
  }
  for (double x = 0; x <= x_top + x_step / 2; x += x_step) {
    Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
            px(x), kTop, px(x), kTop + kPlotH);
    Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", px(x),
            kTop + kPlotH, px(x), kTop + kPlotH + 5);
    Appendf(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px(x),
            kTop + kPlotH + 20, TickLabel(x).c_str());
  }
  // Axes and their labels.
  Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", kLeft,
          kTop, kLeft, kTop + kPlotH);
  Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", kLeft,
          kTop + kPlotH, kLeft + kPlotW, kTop + kPlotH);
  Appendf(&s,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">workers released together</text>\n",
          kLeft + kPlotW / 2, kHeight - 15);
  Appendf(&s,
          "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 20 %.1f)\">"
          "cuInit p99 (ms, log scale, nearest rank)</text>\n",
          kTop + kPlotH / 2, kTop + kPlotH / 2);
  // One polyline per mode through the medians (filled dots), a ring per burst when a worker
  // count has several, and the legend.
  for (size_t i = 0; i < modes.size(); ++i) {
    const ModeRuns& m = modes[i];
    const char* color = kColors[size_t(m.mode) % kColors.size()];
    std::string points;
    for (const Cell& c : m.cells) {
      if (c.runs.size() > 1) {
        for (const RunResult* r : c.runs) {
          if (r->latency_ns.count == 0) continue;
          Appendf(&s,
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"none\" stroke=\"%s\" "
                  "stroke-opacity=\"0.6\"/>\n",
                  px(r->workers), py(std::max(double(r->latency_ns.p99) / 1e6, 1e-3)), color);
        }
      }
      if (c.ok == 0) continue;
      const double x = px(c.workers), y = py(std::max(double(c.p99) / 1e6, 1e-3));
      points += (points.empty() ? "" : " ") + Fixed(x, 1) + "," + Fixed(y, 1);
      Appendf(&s,
              "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s, %d workers: "
              "p99 %s ms (%zu bursts, %d failed workers)</title></circle>\n",
              x, y, color, ModeName(m.mode), c.workers, Millis(c.p99).c_str(), c.runs.size(),
              c.failed);
    }
    if (!points.empty()) {
      Appendf(&s, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n",
              color, points.c_str());
    }
    const double ly = kTop + 10 + double(i) * 22;
    const double lx = kLeft + kPlotW + 20;
    Appendf(&s,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"2\"/>\n",
            lx, ly, lx + 24, ly, color);
    Appendf(&s, "<text x=\"%.1f\" y=\"%.1f\">%s%s</text>\n", lx + 30, ly + 4, ModeName(m.mode),
            m.skipped.empty() ? "" : " (skipped)");
  }
  s += "</svg>\n";
  return s;
}

// ---- what the run ran on ----

// The first line `command` prints, or "" (popen: only before any worker exists).
std::string FirstLine(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return "";
  char buf[256] = {};
  const bool got = std::fgets(buf, sizeof(buf), p) != nullptr;
  pclose(p);
  if (!got) return "";
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

Json Environment(int cpus) {
  const std::string src = HAMI_SOURCE_DIR;
  const std::string git = "git -C '" + src + "' ";
  const std::string revision = FirstLine(git + "rev-parse HEAD 2>/dev/null");
  const std::string changed =
      FirstLine(git + "status --porcelain --untracked-files=no 2>/dev/null | wc -l");
  utsname u{};
  uname(&u);
  return Json{
      {"revision", revision.empty() ? "unknown" : revision},
      {"dirty", revision.empty() ? Json(nullptr) : Json(changed != "0" && !changed.empty())},
      {"changed_tracked_files", changed.empty() ? Json(nullptr) : Json(std::atoi(changed.c_str()))},
      {"hami_version", HAMI_VERSION},
      {"cuda_headers", CUDA_VERSION},
      {"gpu", "simulated"},
      {"gpu_model", kSimGpuName},
      {"gpu_count", kSimGpuCount},
      {"sim_profile", kSimProfile},
      {"driver_version", CUDA_VERSION},
      {"cost_model",
       {{"HAMI_SIM_INIT_US", kSimInitUs},
        {"HAMI_SIM_CTX_CREATE_US", kSimCtxCreateUs},
        {"HAMI_SIM_CTX_SERIALIZE", 1}}},
      {"probe_wait_ms", "the default (10000): the cap bounds a stuck holder, not the queue"},
      {"handoff_baseline",
       "no identity tier; after cuInit the serialized part of the probe's work (a "
       "primary-context retain and release, without the probe's two NVML listings) under a "
       "process-shared semaphore that each worker posts to the next; its latency ends at the "
       "post"},
      {"memory_limit", kMemoryLimit},
      {"visible_devices", "all (CUDA_VISIBLE_DEVICES unset)"},
      {"container_runtime", "none: workers are plain processes of this machine"},
      {"pid_namespace", "the benchmark's own (host PID mode): host PID = getpid()"},
      {"pid_namespace_inode", PidNamespaceInode()},
      {"cpus", cpus},
      {"kernel", std::string(u.sysname) + " " + u.release},
      {"euid", geteuid()},
      {"launch_barrier",
       "every worker exec'd, counted ready and asleep in read() of a pipe; the parent then "
       "closes the write end"},
      {"percentiles", "nearest rank over successful workers: the ceil(p/100 * n)-th smallest"},
  };
}

int Main(const Options& opt) {
  InstallAlarmHandler();
  const std::string exe_dir = ExecutableDir();
  if (exe_dir.empty()) {
    std::fprintf(stderr, "hami_bench_init: cannot find this binary's directory (/proc/self/exe)\n");
    return 1;
  }
  const std::string build_dir = exe_dir + "/..";
  Paths paths{exe_dir + "/" + kWorkerName, build_dir + "/lib/libvgpu.so", build_dir + "/lib/sim"};
  const std::pair<std::string, const char*> needed[] = {
      {paths.worker, "init_bench_worker"},
      {paths.libvgpu, "vgpu"},
      {paths.sim_dir + "/libcuda.so.1", "hami_sim_cuda"},
      {paths.sim_dir + "/libnvidia-ml.so.1", "hami_sim_nvml"},
  };
  for (const auto& [path, target] : needed) {
    if (access(path.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "hami_bench_init: %s is missing (build the target %s)\n", path.c_str(),
                   target);
      return 1;
    }
  }
  for (std::string* p : {&paths.worker, &paths.libvgpu, &paths.sim_dir}) {
    if (char* real = realpath(p->c_str(), nullptr); real != nullptr) {
      *p = real;
      std::free(real);
    }
  }
  const std::string json_path = opt.json_path.empty() ? exe_dir + "/init.json" : opt.json_path;
  const std::string svg_path = opt.svg_path.empty() ? exe_dir + "/init.svg" : opt.svg_path;
  const int cpus = CpuCount();
  const Json environment = Environment(cpus);

  // Before any thread: the broker's mount namespace and server.
  std::unique_ptr<BrokerHost> broker;
  if (std::find(opt.modes.begin(), opt.modes.end(), Mode::kBroker) != opt.modes.end()) {
    broker = SetUpBroker();
  }

  std::string worker_list, mode_list;
  for (int w : opt.workers) worker_list += (worker_list.empty() ? "" : ",") + std::to_string(w);
  for (Mode m : opt.modes) mode_list += (mode_list.empty() ? "" : ",") + std::string(ModeName(m));
  std::printf(
      "hami_bench_init: workers %s, identity %s, %d CPUs, simulated %s (cuInit +%d ms, "
      "context +%d ms serialized)%s\n",
      worker_list.c_str(), mode_list.c_str(), cpus, kSimProfile, kSimInitUs / 1000,
      kSimCtxCreateUs / 1000, opt.quick ? ", quick" : "");
  if (broker && !broker->skipped.empty()) {
    std::printf("broker: skipped: %s\n", broker->skipped.c_str());
  }
  std::fflush(stdout);

  // Warm the page cache and the loader's path with a small unreported run.
  RunBurst(paths, Mode::kNone, 2, opt.deadline_s, nullptr);

  std::vector<ModeRuns> modes;
  for (Mode m : opt.modes) {
    ModeRuns r{m, "", {}, {}, std::nullopt, 0};
    if (m == Mode::kBroker && broker) r.skipped = broker->skipped;
    modes.push_back(std::move(r));
  }
  // Worker counts ascending; at each, `repeat` rounds of every mode in a shuffled order, so
  // that drift of the machine and the order itself touch every mode alike.
  std::mt19937_64 shuffle(opt.seed);
  int sequence = 0;
  for (int w : opt.workers) {
    for (int rep = 0; rep < opt.repeat; ++rep) {
      std::vector<ModeRuns*> order;
      for (ModeRuns& m : modes) {
        if (m.skipped.empty()) order.push_back(&m);
      }
      std::shuffle(order.begin(), order.end(), shuffle);
      for (ModeRuns* m : order) {
        broker::Server* server = m->mode == Mode::kBroker ? broker->server.get() : nullptr;
        RunResult r = RunBurst(paths, m->mode, w, opt.deadline_s, server);
        r.repeat = rep;
        r.sequence = sequence++;
        std::printf("  %-6s %4d workers, burst %d/%d: %d ok, %d failed, p99 %s ms%s%s\n",
                    ModeName(m->mode), w, rep + 1, opt.repeat, r.ok, r.failed,
                    Millis(r.latency_ns.p99).c_str(), r.error.empty() ? "" : ": ", r.error.c_str());
        std::fflush(stdout);
        m->runs.push_back(std::move(r));
      }
    }
  }
  for (ModeRuns& m : modes) Summarize(&m, opt.workers);
  const int largest = opt.workers.back();
  const std::vector<ScalingGoal> goals = EvaluateGoals(modes, largest);

  // The table: one row per mode and worker count.
  const bool several = opt.repeat > 1;
  std::vector<std::string> head = {"mode",   "workers", "ok / failed", "p50 ms",
                                   "p95 ms", "p99 ms",  "max ms",      "wall ms"};
  if (several) head.push_back("p99 range ms");
  head.push_back("release p50/max ms");
  head.push_back("identity paths");
  std::vector<std::vector<std::string>> rows = {head};
  bool all_ok = true;
  for (const ModeRuns& m : modes) {
    if (!m.skipped.empty()) {
      std::vector<std::string> row(head.size(), "");
      row[0] = ModeName(m.mode);
      row[1] = "-";
      row[2] = "skipped";
      row.back() = "(why: below)";
      rows.push_back(row);
      continue;
    }
    for (const Cell& c : m.cells) {
      all_ok = all_ok && c.complete;
      const bool any = c.ok > 0;
      std::vector<std::string> row = {ModeName(m.mode),
                                      std::to_string(c.workers),
                                      std::to_string(c.ok) + " / " + std::to_string(c.failed),
                                      any ? Millis(c.p50) : "-",
                                      any ? Millis(c.p95) : "-",
                                      any ? Millis(c.p99) : "-",
                                      any ? Millis(c.max) : "-",
                                      c.wall_span > 0 ? Millis(c.wall_span) : "-"};
      if (several) row.push_back(any ? Millis(c.p99_min) + " - " + Millis(c.p99_max) : "-");
      row.push_back(c.release_max > 0 ? Fixed(double(c.release_p50) / 1e6, 2) + " / " +
                                            Fixed(double(c.release_max) / 1e6, 2)
                                      : "-");
      row.push_back(PathCounts(c.identity_sources));
      rows.push_back(row);
    }
  }
  std::printf("\n");
  if (several) {
    std::printf(
        "Each figure is the median of %d bursts (ok / failed and identity paths: their sums; "
        "release max: the largest).\n",
        opt.repeat);
  }
  PrintTable(rows, 1, head.size() - 1, TrailingSpaces::kTrim);

  std::printf(
      "\nWhere the time goes at %d workers (per worker during cuInit; medians of the bursts):\n",
      opt.workers.back());
  std::vector<std::vector<std::string>> cost_rows = {
      {"mode", "CPU p50 ms", "identity p50 ms", "identity p99 ms", "turn p50 ms",
       "switches vol / invol", "broker thread CPU ms"}};
  for (const ModeRuns& m : modes) {
    const Cell* c = m.At(opt.workers.back());
    if (c == nullptr || c->ok == 0) continue;
    cost_rows.push_back(
        {ModeName(m.mode), Fixed(double(c->cpu_p50) / 1e6, 2),
         Fixed(double(c->identity_p50) / 1e6, 2), Fixed(double(c->identity_p99) / 1e6, 2),
         Fixed(double(c->turn_p50) / 1e6, 2),
         Fixed(c->voluntary_switches, 1) + " / " + Fixed(c->involuntary_switches, 1),
         c->server_cpu >= 0 ? Fixed(double(c->server_cpu) / 1e6, 1) : "-"});
  }
  PrintTable(cost_rows, 1, 7, TrailingSpaces::kTrim);

  std::printf("\n");
  std::vector<std::vector<std::string>> slope_rows = {
      {"mode", "p99 slope (ms/worker)", "fitted over"}};
  for (const ModeRuns& m : modes) {
    slope_rows.push_back(
        {ModeName(m.mode), m.slope_ms_per_worker ? Fixed(*m.slope_ms_per_worker, 3) : "-",
         !m.skipped.empty() ? "skipped"
                            : std::to_string(m.slope_points) + " complete bursts with >= " +
                                  std::to_string(kSlopeMinWorkers) + " workers"});
  }
  PrintTable(slope_rows, 1, 2, TrailingSpaces::kTrim);

  std::printf("\n");
  std::vector<std::vector<std::string>> goal_rows = {{"goal", "measured", "bound", "met"}};
  for (const ScalingGoal& g : goals) {
    // A count of workers reads as a whole number; a ratio with three decimals.
    const std::string value =
        g.unit == "workers" ? std::to_string(std::llround(g.measured)) : Fixed(g.measured, 3);
    goal_rows.push_back({g.name, g.valid ? value + " (" + g.detail + ")" : "-", g.goal,
                         g.valid ? (g.meets() ? "met" : "not met") : "not measured: " + g.why_not});
  }
  PrintTable(goal_rows, 1, 2, TrailingSpaces::kTrim);

  for (const ModeRuns& m : modes) {
    if (!m.skipped.empty()) std::printf("%s: skipped: %s\n", ModeName(m.mode), m.skipped.c_str());
    for (const RunResult& r : m.runs) {
      if (!r.error.empty()) {
        std::printf("%s, %d workers: %s\n", ModeName(m.mode), r.workers, r.error.c_str());
      }
      for (const std::string& e : r.worker_errors) {
        std::printf("%s, %d workers: %s\n", ModeName(m.mode), r.workers, e.c_str());
      }
      for (const std::string& line : r.worker_log) {
        std::printf("%s, %d workers, worker output: %s\n", ModeName(m.mode), r.workers,
                    line.c_str());
      }
    }
  }

  // The JSON.
  Json modes_json = Json::object();
  for (const ModeRuns& m : modes) {
    Json runs = Json::array();
    for (const RunResult& r : m.runs) runs.push_back(ToJson(r));
    Json summary = Json::array();
    for (const Cell& c : m.cells) summary.push_back(ToJson(c));
    modes_json[ModeName(m.mode)] = {
        {"status", m.skipped.empty() ? "ran" : "skipped"},
        {"skipped_reason", m.skipped},
        {"variables",
         [&m] {
           Json v = Json::object();
           for (const auto& [k, val] : ModeEnvironment(m.mode, "<run dir>")) v[k] = val;
           return v;
         }()},
        {"slope_ms_per_worker",
         m.slope_ms_per_worker ? Json(*m.slope_ms_per_worker) : Json(nullptr)},
        {"slope_points", m.slope_points},
        {"summary", summary},
        {"runs", runs},
    };
  }
  Json goals_json = Json::array();
  for (const ScalingGoal& g : goals) {
    goals_json.push_back({{"name", g.name},
                          {"measured", g.valid ? Json(g.measured) : Json(nullptr)},
                          {"unit", g.unit},
                          {"goal", g.goal},
                          {"bound", g.bound},
                          {"meets", g.meets()},
                          {"measured_ok", g.valid},
                          {"detail", g.detail},
                          {"not_measured_because", g.why_not},
                          {"workers", largest}});
  }
  Json doc = {
      {"benchmark", "init"},
      {"environment", environment},
      {"config",
       {{"workers", opt.workers},
        {"identity",
         [&opt] {
           Json a = Json::array();
           for (Mode m : opt.modes) a.push_back(ModeName(m));
           return a;
         }()},
        {"repeat", opt.repeat},
        {"order_seed", opt.seed},
        {"quick", opt.quick},
        {"deadline_s", opt.deadline_s},
        {"slope_min_workers", kSlopeMinWorkers}}},
      {"modes", modes_json},
      {"goals", goals_json},
  };
  const bool wrote_json = WriteJson(json_path, doc, kProgram);
  const std::string title = "hami bench init: cuInit p99 against workers (simulated " +
                            std::string(kSimProfile) + ", " + std::to_string(cpus) + " CPUs)";
  const bool wrote_svg = WriteTextFile(svg_path, Svg(modes, title), kProgram);
  std::printf("\njson: %s\nsvg: %s\n", json_path.c_str(), svg_path.c_str());
  if (broker && broker->server) broker->server->Stop();
  return all_ok && wrote_json && wrote_svg ? 0 : 1;
}

// "probe,none" -> {kNone, kProbe}: the canonical order, without repeats.
std::optional<std::vector<Mode>> ParseModeList(std::string_view text) {
  std::vector<std::string> names;
  for (Mode m : kAllModes) names.emplace_back(ModeName(m));
  auto chosen = ParseNameList(text, "--identity", names,
                              "one of none, probe, handoff, broker, procfs, bare", kProgram);
  if (!chosen) return std::nullopt;
  std::vector<Mode> out;
  for (size_t i : *chosen) out.push_back(kAllModes[i]);
  return out;
}

std::optional<Options> ParseFlags(int argc, char** argv) {
  Options o;
  o.seed = uint64_t(MonotonicNs()) ^ (uint64_t(getpid()) << 32);
  bool workers_set = false, deadline_set = false, repeat_set = false;
  FlagReader flags(argc, argv, kProgram, kUsage, &o);
  while (flags.Next()) {
    const std::string_view flag = flags.flag();
    std::string_view value;
    if (flag == "--svg") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      o.svg_path = value;
    } else if (flag == "--workers") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      auto list = ParseNumberList(value, "--workers", 1, kMaxWorkers, kProgram);
      if (!list) return std::nullopt;
      o.workers = *list;
      workers_set = true;
    } else if (flag == "--identity") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      auto list = ParseModeList(value);
      if (!list) return std::nullopt;
      o.modes = *list;
    } else if (flag == "--repeat" || flag == "--seed") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      auto n = ParseUint64(value, flag);
      if (!n.ok()) {
        std::fprintf(stderr, "hami_bench_init: %s\n", n.error().message().c_str());
        return std::nullopt;
      }
      if (flag == "--seed") {
        o.seed = *n;
      } else if (*n < 1 || *n > 20) {
        std::fprintf(stderr, "hami_bench_init: --repeat %" PRIu64 " is not from 1 to 20\n", *n);
        return std::nullopt;
      } else {
        o.repeat = int(*n);
        repeat_set = true;
      }
    } else if (flag == "--deadline-s") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      auto n = ParseUint64(value, flag);
      if (!n.ok() || *n < 1 || *n > 3600) {
        std::fprintf(stderr, "hami_bench_init: --deadline-s %.*s is not from 1 to 3600\n",
                     int(value.size()), value.data());
        return std::nullopt;
      }
      o.deadline_s = int(*n);
      deadline_set = true;
    } else {
      flags.PrintUnknown();
      return std::nullopt;
    }
  }
  if (flags.failed()) return std::nullopt;
  if (o.quick) {
    if (!workers_set) o.workers = {1, 2, 8, 32};
    if (!repeat_set) o.repeat = 1;
    if (!deadline_set) o.deadline_s = 60;
  }
  return o;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::ParseFlags, hami::bench::Main);
}
