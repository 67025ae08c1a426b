// hami_bench_sm: how closely, and how soon, libvgpu.so's compute limiter holds a container to
// its SM share on the simulated GPU, measured beside its goals.
//
// A cell is one target x one process count x one kernel length: one container (a shared
// region of its own) alone on one simulated H100, its processes sm_worker (build/tests, with
// libvgpu.so preloaded and CUDA_DEVICE_SM_LIMIT=<target>) each launching kernels back to back
// on one stream. Up to --parallel cells (default 8) run at a time, one per device of one
// simulated h100-80g:8 machine (one state file for the whole run); the workers of a round are
// started together and t = 0 is when the last of them is launching. From then this process
// reads each container's SM utilization every 100 ms: the sum of its processes' smUtil over
// the last 100 ms, from the simulated libnvidia-ml.so.1 loaded by path (this process is not
// preloaded: libvgpu does not stand between).
//
// Per cell:
//   achieved  the container's utilization over the window, t in (1 s, 4 s] (--quick:
//             (1 s, 2.5 s]): the mean of the window's samples. Not one read over the whole
//             window: NVML gives each process's share in whole percent, which many samples
//             average out and one read keeps (up to half a point per process), and the
//             simulator keeps 8192 busy intervals a device, fewer than several processes of
//             short kernels leave in seconds (a 100 ms sample needs at most 4348: 100 ms of
//             23 us kernels)
//   |error|   |achieved - target|, in points of utilization
//   settle    the end of the first 500 ms moving average of the samples from which every
//             later one, to the end of the window, lies within 5 points of the target (0.5 s
//             at the earliest); none when the last one does not
// Over the cells: the mean, p95 (nearest rank) and largest |error| and the largest settle time.
//
// Then the scenarios (--scenarios; every one by default, in rounds of --parallel, one device
// each): one or two containers of one sm_worker each on a device, a timeline of changes made
// to their regions (a limit set, pause, suspend, the utilization switch) and figures measured
// over windows of the same 100 ms samples, each beside its goal: containers sharing a device,
// the ex/cooperative/graph launch paths, a limit change, pause and suspend (utilization and
// the process's CPU time while held, utilization after the resumption), the open loop without
// a host PID, and the policies. They are what tests/vgpu/sm_limit_test.cc leaves to this
// benchmark: the test proves the behaviour, the benchmark how closely and how soon.
// Output: a table, the goals, the JSON (<this binary's dir>/sm.json or --json: every cell with
// its series of samples, the summary, the goals) and a plot of achieved against target
// (<this binary's dir>/sm.svg or --svg).
//
// Goals are reported (meets: yes/no), never enforced: the exit status is 0 when every worker
// of every cell and scenario ran to its end and every one was measured, 1 otherwise, 2 on bad
// flags.
//
// usage: hami_bench_sm [--targets LIST] [--processes LIST] [--kernels LIST] [--parallel N]
//                      [--scenarios LIST|none] [--quick] [--json PATH] [--svg PATH]
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/mount.h>
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
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "harness.h"
#include "limits/limits_file.h"
#include "limits/vocabulary.h"
#include "node/mount_point.h"
#include "node/paths.h"
#include "nvml/nvml.h"
#include "region/region.h"

extern char** environ;

namespace hami::bench {
namespace {

constexpr char kProgram[] = "hami_bench_sm";

// The simulated machine: one device per cell of a round.
constexpr char kSimProfile[] = "h100-80g:8";
constexpr char kSimGpuName[] = "NVIDIA H100 80GB HBM3";
constexpr int kSimDevices = 8;

// Sampling and the settle rule.
constexpr int64_t kSampleMs = 100;
constexpr size_t kMovingSamples = 5;  // the moving average: 500 ms
constexpr double kBandPoints = 5;     // settled: the moving average within this of the target

// Workers launch this long past the window's end, which covers the spread of their starts
// (each one's time runs from its own start; the window's from the last one's).
constexpr int64_t kTailMs = 1500;
constexpr int64_t kReadyTimeoutNs = 60'000'000'000;
constexpr int64_t kExitTimeoutNs = 30'000'000'000;  // past the workers' own end
constexpr size_t kMaxOutputBytes = 64 << 10;        // kept of a worker's output
constexpr unsigned kMaxSamples = 64;                // NVML samples per read (processes)

// The goals.
constexpr double kGoalMeanErrorPoints = 3;
constexpr double kGoalP95ErrorPoints = 6;
constexpr double kGoalSettleS = 1;
constexpr double kGoalMaxErrorPoints = 5;  // every cell

// The kernels a worker launches: `grid` blocks of `block` threads of a simulated kernel whose
// wave (every SM filled once) lasts `wave_ns`. On an H100 (132 SMs, 2048 threads each) a
// wave holds 1056 blocks of 256 threads: the short kernel is under one wave (23 us with the
// simulator's 3 us launch cost), the long one eight (403 us).
struct Kernel {
  const char* name;
  unsigned grid;
  unsigned block;
  int64_t wave_ns;
};
constexpr std::array<Kernel, 2> kKernels = {
    {{"short", 256, 256, 20'000}, {"long", 8192, 256, 50'000}}};

constexpr char kUsage[] =
    "usage: hami_bench_sm [--targets LIST] [--processes LIST] [--kernels LIST] [--parallel N]\n"
    "                     [--scenarios LIST] [--quick] [--json PATH] [--svg PATH]\n"
    "  --targets LIST    SM limits in percent, 1 to 99, comma-separated (default\n"
    "                    10,30,50,70,90; --quick: 30,70)\n"
    "  --processes LIST  processes per container, 1 to 16 (default 1,2,4; --quick: 1,2)\n"
    "  --kernels LIST    short (256 x 256, under one wave of 20 us) and/or long (8192 x 256,\n"
    "                    eight waves of 50 us) (default short,long; --quick: short)\n"
    "  --parallel N      cells run at a time, each on its own simulated device, 1 to 8\n"
    "                    (default 8)\n"
    "  --scenarios LIST  scenarios to run after the cells, or none (default: every one:\n"
    "                    shared-device, path-ex, path-coop, path-graph, limit-change,\n"
    "                    open-loop, policy-disable, policy-force, pause, suspend,\n"
    "                    policy-default, cudart-launch)\n"
    "  --quick           a short run: the window is (1 s, 2.5 s] instead of (1 s, 4 s]\n"
    "  --json PATH       where to write the JSON (default: sm.json beside this binary)\n"
    "  --svg PATH        where to write the plot (default: sm.svg beside this binary)\n";

struct Options : CommonOptions {
  std::vector<int> targets = {10, 30, 50, 70, 90};
  std::vector<int> processes = {1, 2, 4};
  std::vector<size_t> kernels = {0, 1};  // into kKernels
  std::vector<size_t> scenarios;         // into Scenarios(); ParseFlags fills in every one
  int parallel = kSimDevices;
  std::string svg_path;
  int64_t window_from_ms = 1000;  // the window over which `achieved` is measured, from t = 0
  int64_t window_to_ms = 4000;
};

// ---- small helpers ----

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// "1 process", "2 processes".
std::string ProcessCount(int n) { return std::to_string(n) + (n == 1 ? " process" : " processes"); }

std::string KernelList(const std::vector<size_t>& kernels) {
  std::string s;
  for (size_t k : kernels) s += (s.empty() ? "" : ",") + std::string(kKernels[k].name);
  return s;
}

// ---- NVML, past libvgpu ----

struct Nvml {
  decltype(&::nvmlInit_v2) nvmlInit_v2 = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) nvmlDeviceGetHandleByIndex_v2 = nullptr;
  decltype(&::nvmlDeviceGetProcessUtilization) nvmlDeviceGetProcessUtilization = nullptr;
  std::array<nvmlDevice_t, kSimDevices> devices{};
};

template <typename T>
bool Sym(void* handle, const char* name, T* slot, std::string* error) {
  *slot = reinterpret_cast<T>(dlsym(handle, name));
  if (*slot == nullptr) *error = std::string("the simulated NVML has no ") + name;
  return *slot != nullptr;
}

// Loads the simulated libnvidia-ml.so.1 at `path` (for good: it stays loaded), initializes it
// and takes a handle on each device. The simulation's variables must be set before.
bool LoadNvml(const std::string& path, Nvml* nvml, std::string* error) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    *error = dlerror();
    return false;
  }
  if (!Sym(lib, "nvmlInit_v2", &nvml->nvmlInit_v2, error) ||
      !Sym(lib, "nvmlDeviceGetHandleByIndex_v2", &nvml->nvmlDeviceGetHandleByIndex_v2, error) ||
      !Sym(lib, "nvmlDeviceGetProcessUtilization", &nvml->nvmlDeviceGetProcessUtilization, error)) {
    return false;
  }
  if (nvmlReturn_t r = nvml->nvmlInit_v2(); r != NVML_SUCCESS) {
    *error = "nvmlInit_v2: nvmlReturn_t " + std::to_string(int(r));
    return false;
  }
  for (int d = 0; d < kSimDevices; ++d) {
    if (nvmlReturn_t r =
            nvml->nvmlDeviceGetHandleByIndex_v2(unsigned(d), &nvml->devices[size_t(d)]);
        r != NVML_SUCCESS) {
      *error = "nvmlDeviceGetHandleByIndex_v2(" + std::to_string(d) + "): nvmlReturn_t " +
               std::to_string(int(r));
      return false;
    }
  }
  return true;
}

// The percent of device `device`'s time the processes `pids` used over (since_us, now]
// (CLOCK_REALTIME microseconds): their smUtil samples added up. nullopt when NVML fails.
std::optional<double> ContainerUtil(const Nvml& nvml, int device, const std::vector<pid_t>& pids,
                                    unsigned long long since_us) {
  nvmlProcessUtilizationSample_t samples[kMaxSamples];
  unsigned n = kMaxSamples;
  const nvmlReturn_t r =
      nvml.nvmlDeviceGetProcessUtilization(nvml.devices[size_t(device)], samples, &n, since_us);
  if (r == NVML_ERROR_NOT_FOUND) return 0.0;  // no process on the device, or no time since
  if (r != NVML_SUCCESS) return std::nullopt;
  double total = 0;
  for (unsigned i = 0; i < std::min(n, kMaxSamples); ++i) {
    for (pid_t p : pids) {
      if (samples[i].pid == unsigned(p)) total += samples[i].smUtil;
    }
  }
  return total;
}

unsigned long long RealtimeUs() { return static_cast<unsigned long long>(RealtimeNs() / 1000); }

// ---- the workers ----

struct Paths {
  std::string worker;   // build/tests/sm_worker
  std::string libvgpu;  // build/lib/libvgpu.so
  std::string sim_dir;  // build/lib/sim
};

// One sm_worker process: its stdout and stderr come through a pipe.
struct Worker {
  pid_t pid = -1;
  UniqueFd out;          // the pipe's read end (non-blocking)
  std::string output;    // what it printed (the first kMaxOutputBytes)
  bool eof = false;      // it closed its end (it exited)
  int64_t ready_ns = 0;  // when its "ready" line arrived; 0: not (yet)
  bool reaped = false;
  bool killed = false;  // by this benchmark, past a deadline
  int status = 0;       // its wait status, once reaped
  std::string error;    // why it could not be started
  uint64_t launches = 0;
  bool ok = false;  // ready, exit 0 by itself, "done launches=N"
};

// In a forked child, before exec: says which step failed and its errno on the output (the
// worker's pipe), with nothing but write(), and exits 127.
[[noreturn]] void ChildSetupFailed(const char* step) {
  const int err = errno;
  char digits[16];
  int n = 0;
  for (int v = err; n == 0 || v > 0; v /= 10) digits[n++] = char('0' + v % 10);
  char line[256];
  size_t len = 0;
  auto put = [&line, &len](const char* text, size_t size) {
    for (size_t i = 0; i < size && len < sizeof(line) - 1; ++i) line[len++] = text[i];
  };
  put("setup: ", 7);
  put(step, std::strlen(step));
  put(": errno ", 8);
  while (n > 0) put(&digits[--n], 1);
  put("\n", 1);
  (void)!write(STDOUT_FILENO, line, len);
  _exit(127);
}

// Starts `argv` with `env`, stdin from /dev/null, stdout and stderr into a pipe. With
// `limits_file`, the process starts in a mount namespace of its own with that file bound
// read-only at /overrideEnv (node::kLimitsFilePath, held by the caller), as the device plugin
// mounts a container's limits file; this needs root.
void Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, Worker* w,
           const std::string& limits_file = "") {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    w->error = Errno("pipe2");
    return;
  }
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::vector<char*> args, vars;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env) vars.push_back(const_cast<char*>(e.c_str()));
  args.push_back(nullptr);
  vars.push_back(nullptr);
  if (!limits_file.empty()) {
    // This process may have threads (the simulated NVML's): after fork, system calls only.
    const pid_t pid = fork();
    if (pid < 0) {
      w->error = Errno("fork");
      return;
    }
    if (pid == 0) {
      const int null_fd = open("/dev/null", O_RDONLY);
      if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 ||
          dup2(write_end.get(), STDOUT_FILENO) < 0 || dup2(write_end.get(), STDERR_FILENO) < 0) {
        _exit(127);
      }
      if (unshare(CLONE_NEWNS) != 0) ChildSetupFailed("unshare(CLONE_NEWNS)");
      // Private first, so that the bind below never propagates back to the host.
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        ChildSetupFailed("making / private");
      }
      if (mount(limits_file.c_str(), node::kLimitsFilePath, nullptr, MS_BIND, nullptr) != 0) {
        ChildSetupFailed("bind-mounting the limits file at /overrideEnv");
      }
      if (mount(nullptr, node::kLimitsFilePath, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY,
                nullptr) != 0) {
        ChildSetupFailed("remounting /overrideEnv read-only");
      }
      execve(args[0], args.data(), vars.data());
      ChildSetupFailed("execve");
    }
    w->pid = pid;
  } else {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDERR_FILENO);
    const int err =
        posix_spawn(&w->pid, argv[0].c_str(), &actions, nullptr, args.data(), vars.data());
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) {
      w->pid = -1;
      w->error = "posix_spawn " + argv[0] + ": " + std::strerror(err);
      return;
    }
  }
  fcntl(read_end.get(), F_SETFL, fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
  w->out = std::move(read_end);
}

// Reads what `w` has written so far, without blocking, and notes its "ready" line.
void Drain(Worker* w) {
  if (!w->out.valid() || w->eof) return;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(w->out.get(), buf, sizeof(buf));
    if (n > 0) {
      if (w->output.size() < kMaxOutputBytes) {
        w->output.append(buf, std::min(size_t(n), kMaxOutputBytes - w->output.size()));
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // EOF, or an error other than "nothing yet", ends what can be read.
    if (n == 0 || errno != EAGAIN) w->eof = true;
    break;
  }
  if (w->ready_ns == 0 && w->output.find("ready pid=") != std::string::npos) {
    w->ready_ns = MonotonicNs();
  }
}

// Reads the workers' output until `done()` or `deadline_ns` (CLOCK_MONOTONIC).
template <typename Done>
void PollUntil(const std::vector<Worker*>& workers, Done done, int64_t deadline_ns) {
  while (!done()) {
    const int64_t left = deadline_ns - MonotonicNs();
    if (left <= 0) return;
    std::vector<pollfd> fds;
    for (Worker* w : workers) {
      if (w->out.valid() && !w->eof) fds.push_back({w->out.get(), POLLIN, 0});
    }
    if (fds.empty()) return;
    poll(fds.data(), fds.size(), int(std::min<int64_t>(left / 1'000'000 + 1, 100)));
    for (Worker* w : workers) Drain(w);
  }
}

// Waits for every worker to exit by itself until `deadline_ns`, then kills those left, and
// reaps them all; then judges each one.
void ReapAll(const std::vector<Worker*>& workers, int64_t deadline_ns) {
  PollUntil(
      workers,
      [&workers] {
        return std::all_of(workers.begin(), workers.end(),
                           [](const Worker* w) { return w->eof || !w->out.valid(); });
      },
      deadline_ns);
  for (Worker* w : workers) {
    if (w->pid <= 0) continue;
    if (!w->eof) {
      kill(w->pid, SIGKILL);
      w->killed = true;
    }
  }
  for (Worker* w : workers) {
    if (w->pid <= 0 || w->reaped) continue;
    while (waitpid(w->pid, &w->status, 0) < 0 && errno == EINTR) {
    }
    w->reaped = true;
    Drain(w);
    const size_t done = w->output.find("done launches=");
    if (done != std::string::npos) {
      w->launches =
          std::strtoull(w->output.c_str() + done + std::strlen("done launches="), nullptr, 10);
    }
    w->ok = w->ready_ns != 0 && !w->killed && WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0 &&
            done != std::string::npos;
  }
}

std::string HowItEnded(const Worker& w) {
  if (w.pid <= 0) return "never started: " + w.error;
  if (w.killed) return "killed past the deadline";
  if (WIFEXITED(w.status)) return "exit " + std::to_string(WEXITSTATUS(w.status));
  if (WIFSIGNALED(w.status)) return "signal " + std::to_string(WTERMSIG(w.status));
  return "status " + std::to_string(w.status);
}

// The last line of a worker's output that is not empty.
std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of("\n");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end + 1 - (start == std::string::npos ? 0 : start + 1));
}

// A container's environment: this process's, less every variable libvgpu.so, the driver or
// the simulation reads, plus the cell's.
std::vector<std::string> WorkerEnvironment(
    const Paths& paths, const std::string& state, const std::string& region, int device, int target,
    const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv = *e;
    bool ours = false;
    for (std::string_view prefix :
         {"HAMI_", "LIBVGPU_", "LIBCUDA_", "CUDA_", "NVIDIA_",
          "GPU_CORE_UTILIZATION_POLICY=", "LD_PRELOAD=", "LD_LIBRARY_PATH="}) {
      ours = ours || kv.starts_with(prefix);
    }
    if (!ours) env.emplace_back(kv);
  }
  const std::pair<std::string, std::string> cell[] = {
      {"LD_PRELOAD", paths.libvgpu},
      {"LD_LIBRARY_PATH", paths.sim_dir},
      {"HAMI_SIM_STATE", state},
      {"HAMI_SIM_PROFILE", kSimProfile},
      {"CUDA_DEVICE_MEMORY_SHARED_CACHE", region},
      {"CUDA_VISIBLE_DEVICES", std::to_string(device)},
      {"CUDA_DEVICE_SM_LIMIT", std::to_string(target)},
  };
  for (const auto& [k, v] : cell) env.push_back(k + "=" + v);
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

// ---- cells and rounds ----

struct Cell {
  // What it is.
  int index = 0;  // in the run's order
  int target = 0;
  int processes = 0;
  size_t kernel = 0;  // into kKernels
  int round = 0;      // from 0
  int device = 0;
  // What it measured.
  std::vector<Worker> workers;
  std::vector<double> samples;  // percent, one per kSampleMs from t = 0
  bool measured = false;        // every NVML read answered
  double achieved = 0;          // the mean of the window's samples
  std::optional<int64_t> settle_ms;
  int ok = 0, failed = 0;
  uint64_t launches = 0;
  std::vector<std::string> errors;
  // The container's limiter on its device at the window's end (its region).
  std::string limiter_mode = "unknown";
  uint64_t limiter_rate = 0;      // milli-units (of a wave) per second
  double limiter_measured = 0;    // percent, the controller's latest measurement
  int64_t limiter_waited_ns = 0;  // launches' total wait for budget
  uint64_t limiter_admitted = 0;  // milli-units launched

  double abs_error() const { return std::fabs(achieved - target); }
};

// The end (ms from t = 0) of the first 500 ms moving average of `samples` from which every
// later one lies within kBandPoints of `target`; nullopt when the last one does not.
std::optional<int64_t> SettleMs(const std::vector<double>& samples, double target) {
  std::optional<size_t> first;
  for (size_t end = kMovingSamples; end <= samples.size(); ++end) {
    double sum = 0;
    for (size_t i = end - kMovingSamples; i < end; ++i) sum += samples[i];
    if (std::fabs(sum / double(kMovingSamples) - target) > kBandPoints) {
      first.reset();
    } else if (!first) {
      first = end;
    }
  }
  if (!first) return std::nullopt;
  return int64_t(*first) * kSampleMs;
}

// The 500 ms moving average ending with each sample (null before there are five).
Json MovingAverages(const std::vector<double>& samples) {
  Json out = Json::array();
  for (size_t end = 1; end <= samples.size(); ++end) {
    if (end < kMovingSamples) {
      out.push_back(nullptr);
      continue;
    }
    double sum = 0;
    for (size_t i = end - kMovingSamples; i < end; ++i) sum += samples[i];
    out.push_back(sum / double(kMovingSamples));
  }
  return out;
}

struct RoundResult {
  int index = 0;
  std::vector<int> cells;
  int workers = 0;
  int64_t start_ms = 0;   // first spawn to t = 0 (the last worker launching)
  int64_t spread_ms = 0;  // first worker launching to the last
};

void ReadLimiter(const std::string& region_path, Cell* c) {
  auto r = region::Region::Open(region_path, nullptr, region::Create::kNever, nullptr,
                                region::Access::kReadOnly);
  if (!r.ok()) {
    c->errors.push_back("reading the region: " + r.error().message());
    return;
  }
  region::layout::LimiterDevice& lim = (*r)->Limiter(0);  // the cell's one visible device
  c->limiter_mode =
      region::LimiterModeName(region::LimiterMode(lim.mode.load(std::memory_order_relaxed)));
  c->limiter_rate = lim.rate.load(std::memory_order_relaxed);
  c->limiter_measured = double(lim.measured.load(std::memory_order_relaxed)) / 100.0;
  c->limiter_waited_ns = lim.waited_ns.load(std::memory_order_relaxed);
  c->limiter_admitted = lim.admitted.load(std::memory_order_relaxed);
}

// Runs `cells` together, cell i on device i: starts every worker, samples from the moment the
// last one is launching to the end of the window, then waits for them to finish.
RoundResult RunRound(const Paths& paths, const Options& opt, const Nvml& nvml, const TempDir& dir,
                     int round, const std::vector<Cell*>& cells) {
  RoundResult res;
  res.index = round;
  const int64_t worker_ms = opt.window_to_ms + kTailMs;
  const std::string state = dir.File("sim.state");
  std::vector<Worker*> all;
  const int64_t first_spawn = MonotonicNs();
  for (Cell* c : cells) {
    res.cells.push_back(c->index);
    const Kernel& k = kKernels[c->kernel];
    const std::vector<std::string> argv = {
        paths.worker,           std::to_string(worker_ms), "kernel",
        std::to_string(k.grid), std::to_string(k.block),   std::to_string(k.wave_ns)};
    const std::vector<std::string> env =
        WorkerEnvironment(paths, state, dir.File("cell-" + std::to_string(c->index) + ".cache"),
                          c->device, c->target);
    c->workers.resize(size_t(c->processes));
    for (Worker& w : c->workers) {
      Spawn(argv, env, &w);
      all.push_back(&w);
    }
  }
  res.workers = int(all.size());
  PollUntil(
      all,
      [&all] {
        return std::all_of(all.begin(), all.end(), [](const Worker* w) {
          return w->ready_ns != 0 || w->eof || !w->out.valid();
        });
      },
      first_spawn + kReadyTimeoutNs);

  // t = 0: every worker that started is launching.
  const int64_t t0 = MonotonicNs();
  int64_t first_ready = t0;
  for (const Worker* w : all) {
    if (w->ready_ns != 0) first_ready = std::min(first_ready, w->ready_ns);
  }
  res.start_ms = (t0 - first_spawn) / 1'000'000;
  res.spread_ms = (t0 - first_ready) / 1'000'000;
  std::vector<std::vector<pid_t>> pids(cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    for (const Worker& w : cells[i]->workers) {
      if (w.ready_ns != 0) pids[i].push_back(w.pid);
    }
    cells[i]->measured = !pids[i].empty();
    if (pids[i].empty()) cells[i]->errors.push_back("no worker started launching");
  }

  const int64_t ticks = opt.window_to_ms / kSampleMs;
  const int64_t window_from_tick = opt.window_from_ms / kSampleMs;
  unsigned long long previous_us = RealtimeUs();
  for (int64_t k = 1; k <= ticks; ++k) {
    SleepUntilNs(t0 + k * kSampleMs * 1'000'000);
    const unsigned long long now_us = RealtimeUs();
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::optional<double> u = ContainerUtil(nvml, cells[i]->device, pids[i], previous_us);
      if (!u && cells[i]->measured) {
        cells[i]->measured = false;
        cells[i]->errors.push_back("NVML failed at t = " + std::to_string(k * kSampleMs) + " ms");
      }
      cells[i]->samples.push_back(u.value_or(0));
    }
    previous_us = now_us;
  }
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!pids[i].empty()) {
      ReadLimiter(dir.File("cell-" + std::to_string(cells[i]->index) + ".cache"), cells[i]);
    }
  }

  // Each worker launches for worker_ms from its own start, so it ends by t0 + worker_ms.
  ReapAll(all, t0 + worker_ms * 1'000'000 + kExitTimeoutNs);
  for (Cell* c : cells) {
    for (const Worker& w : c->workers) {
      if (w.ok) {
        c->ok++;
        c->launches += w.launches;
        continue;
      }
      c->failed++;
      c->errors.push_back("worker pid " + std::to_string(w.pid) + ": " + HowItEnded(w) +
                          (w.ready_ns == 0 && w.pid > 0 ? ", never said ready" : "") +
                          (w.output.empty() ? "" : ": " + LastLine(w.output)));
    }
    if (res.spread_ms > kTailMs) {
      c->errors.push_back("the workers' starts spread over " + std::to_string(res.spread_ms) +
                          " ms: the first stopped before the window's end");
      c->measured = false;
    }
    const size_t from = size_t(window_from_tick);
    double sum = 0;
    for (size_t i = from; i < c->samples.size(); ++i) sum += c->samples[i];
    c->achieved = c->samples.size() > from ? sum / double(c->samples.size() - from) : 0;
    c->settle_ms = SettleMs(c->samples, c->target);
  }
  return res;
}

// ---- scenarios: what the grid of cells does not show ----
//
// A scenario is one simulated device with one or two containers on it and a timeline: changes
// made to a container's region at set times from t = 0 (the last worker launching), and
// figures, each measured over a window of the 100 ms samples (t in (from, to]) beside its
// goal. They carry the figures that tests/vgpu/sm_limit_test.cc used to assert and now leaves
// to this benchmark: containers sharing a device, the launch paths, a limit change, pause and
// suspend (no launch and no CPU while held, prompt resumption), the open loop, the policies.

enum class ActionKind {
  kSetSmLimit,        // as a resize does: the region's limit, then the limits file in place
  kSetRegionSmLimit,  // the region's limit alone, as a tenant that can write it might
  kPause,
  kUnpause,
  kSuspend,
  kUnsuspend,
  kSwitchOff
};

struct Action {
  int64_t at_ms;  // a multiple of kSampleMs; 0: before the first sample
  int container;
  ActionKind kind;
  uint32_t value = 0;  // kSetSmLimit: the new limit
};

enum class FigureKind {
  kAbsError,     // |mean utilization - target|, points
  kUtilAtMost,   // mean utilization, percent
  kUtilAtLeast,  // mean utilization, percent
  kCpuAtMost,    // CPU time of the container's processes, ms per second of the window
  kSettleAtMost  // the settle rule from `from_ms` against `target`, seconds
};

struct FigureSpec {
  const char* name;
  int container;
  FigureKind kind;
  int64_t from_ms, to_ms;  // multiples of kSampleMs
  double target;           // kAbsError, kSettleAtMost
  double bound;
};

struct ContainerSpec {
  int sm_limit;  // CUDA_DEVICE_SM_LIMIT (0: unlimited)
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> worker_args;  // sm_worker's after MS: mode and shape
  std::string worker = {};               // another worker beside sm_worker in build/tests
  // The container's limits file (CUDA_DEVICE_SM_LIMIT) bound at /overrideEnv in a mount
  // namespace of its workers' own, as the device plugin mounts it: what a limit set through
  // the control plane changes. Needs root; without it the scenario is skipped, saying why.
  bool limits_file = false;
};

struct ScenarioSpec {
  const char* name;
  const char* what;
  std::vector<ContainerSpec> containers;
  int64_t run_ms;  // sampling ends here
  std::vector<Action> actions;
  std::vector<FigureSpec> figures;
};

const std::vector<ScenarioSpec>& Scenarios() {
  using E = std::vector<std::pair<std::string, std::string>>;
  const E depth64 = {{"HAMI_SIM_QUEUE_DEPTH", "64"}};  // queued launches drain in 8 ms
  static const std::vector<ScenarioSpec> kScenarios = {
      {"shared-device",
       "two containers at 30% and 70% on one device, each held to its own share",
       {{30, {}, {}}, {70, {}, {}}},
       4000,
       {},
       {{"container at 30%: |error|", 0, FigureKind::kAbsError, 1000, 4000, 30, 5},
        {"container at 70%: |error|", 1, FigureKind::kAbsError, 1000, 4000, 70, 5}}},
      {"path-ex",
       "cuLaunchKernelEx at 30%",
       {{30, {}, {"ex"}}},
       4000,
       {},
       {{"|error|", 0, FigureKind::kAbsError, 1000, 4000, 30, 5}}},
      {"path-coop",
       "cuLaunchCooperativeKernel at 30% (1056 co-resident blocks: one wave)",
       {{30, {}, {"coop", "1056"}}},
       4000,
       {},
       {{"|error|", 0, FigureKind::kAbsError, 1000, 4000, 30, 5}}},
      {"path-graph",
       "cuGraphLaunch of four kernel nodes at 30%",
       {{30, {}, {"graph"}}},
       4000,
       {},
       {{"|error|", 0, FigureKind::kAbsError, 1000, 4000, 30, 5}}},
      {"limit-change",
       "20%, then 60% set at t = 2 s as a resize does (the region, then the limits file at "
       "/overrideEnv)",
       {{20, {}, {}, {}, true}},
       4500,
       {{2000, 0, ActionKind::kSetSmLimit, 60}},
       {{"|error| at 20%", 0, FigureKind::kAbsError, 1000, 2000, 20, 5},
        {"settle after the change", 0, FigureKind::kSettleAtMost, 2000, 4500, 60, 1},
        {"|error| at 60%, from 1 s after the change", 0, FigureKind::kAbsError, 3000, 4500, 60,
         5}}},
      {"region-raise",
       "20%, and 60% written into the region alone at t = 2 s: the process keeps its own 20%",
       {{20, {}, {}}},
       4500,
       {{2000, 0, ActionKind::kSetRegionSmLimit, 60}},
       {{"|error| at 20% before the write", 0, FigureKind::kAbsError, 1000, 2000, 20, 5},
        {"|error| at 20% after the write", 0, FigureKind::kAbsError, 3000, 4500, 20, 5}}},
      {"open-loop",
       "40% with no host PID (HAMI_IDENTITY_TIERS=none): the device's utilization stands in",
       {{40, {{"HAMI_IDENTITY_TIERS", "none"}}, {"kernel", "4096", "256", "40000"}}},
       4000,
       {},
       {{"|error|", 0, FigureKind::kAbsError, 1000, 4000, 40, 15}}},
      {"policy-disable",
       "30% with GPU_CORE_UTILIZATION_POLICY=disable: never limited",
       {{30, {{"GPU_CORE_UTILIZATION_POLICY", "disable"}}, {}}},
       2000,
       {},
       {{"utilization", 0, FigureKind::kUtilAtLeast, 500, 2000, 0, 90}}},
      {"policy-force",
       "30% with GPU_CORE_UTILIZATION_POLICY=force, the utilization switch off from t = 0",
       {{30, {{"GPU_CORE_UTILIZATION_POLICY", "force"}}, {}}},
       3000,
       {{0, 0, ActionKind::kSwitchOff}},
       {{"|error|", 0, FigureKind::kAbsError, 1000, 3000, 30, 5}}},
      {"pause",
       "no limit; the container paused at 0.3 s and resumed at 1.6 s",
       {{0, depth64, {}}},
       2300,
       {{300, 0, ActionKind::kPause}, {1600, 0, ActionKind::kUnpause}},
       {{"utilization while paused", 0, FigureKind::kUtilAtMost, 600, 1600, 0, 3},
        {"CPU while paused", 0, FigureKind::kCpuAtMost, 600, 1600, 0, 50},
        {"utilization 0.2 s after the resumption", 0, FigureKind::kUtilAtLeast, 1800, 2300, 0,
         80}}},
      {"suspend",
       "no limit; the process suspended at 0.3 s and resumed at 1.6 s",
       {{0, depth64, {}}},
       2300,
       {{300, 0, ActionKind::kSuspend}, {1600, 0, ActionKind::kUnsuspend}},
       {{"utilization while suspended", 0, FigureKind::kUtilAtMost, 600, 1600, 0, 3},
        {"CPU while suspended", 0, FigureKind::kCpuAtMost, 600, 1600, 0, 50},
        {"utilization 0.2 s after the resumption", 0, FigureKind::kUtilAtLeast, 1800, 2300, 0,
         80}}},
      {"policy-default",
       "30% with the default policy: limited while the switch is on, not after it goes off at "
       "2.5 s",
       {{30, {}, {}}},
       4000,
       {{2500, 0, ActionKind::kSwitchOff}},
       {{"|error| with the switch on", 0, FigureKind::kAbsError, 1000, 2500, 30, 5},
        {"utilization with the switch off", 0, FigureKind::kUtilAtLeast, 3000, 4000, 0, 90}}},
#include "sm_cudart_case.inc"
  };
  return kScenarios;
}

std::vector<std::string> ScenarioNames() {
  std::vector<std::string> names;
  for (const ScenarioSpec& s : Scenarios()) names.emplace_back(s.name);
  return names;
}

// A goal met when measured_ok and measured >= bound (">= 80").
Goal AtLeast(std::string name, double measured, std::string unit, double bound, bool measured_ok) {
  Goal g = AtMost(std::move(name), measured, std::move(unit), bound, measured_ok);
  g.goal = ">= " + Fixed(bound, bound == std::floor(bound) ? 0 : 1);
  g.meets = measured_ok && measured >= bound;
  return g;
}

const char* ActionName(ActionKind k) {
  switch (k) {
    case ActionKind::kSetSmLimit:
      return "set-sm-limit";
    case ActionKind::kSetRegionSmLimit:
      return "set-region-sm-limit";
    case ActionKind::kPause:
      return "pause";
    case ActionKind::kUnpause:
      return "unpause";
    case ActionKind::kSuspend:
      return "suspend";
    case ActionKind::kUnsuspend:
      return "resume";
    case ActionKind::kSwitchOff:
      return "utilization-switch-off";
  }
  return "?";
}

// CPU time (user + system) of `pid` so far, in ms; -1 when it cannot be read.
double CpuMs(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return -1;
  char line[1024];
  const bool got = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  if (!got) return -1;
  const char* p = std::strrchr(line, ')');
  if (p == nullptr) return -1;
  // After "(comm) ": state is field 3; utime and stime are fields 14 and 15.
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
      2) {
    return -1;
  }
  return double(utime + stime) * 1000.0 / double(sysconf(_SC_CLK_TCK));
}

struct ScenarioContainer {
  std::vector<Worker> workers;
  std::vector<pid_t> pids;      // those that said ready
  std::vector<double> samples;  // percent, one per kSampleMs from t = 0
  std::string region_path;
  std::string limits_path;  // ContainerSpec::limits_file: the file bound at /overrideEnv
  std::unique_ptr<region::Region> region;
  std::vector<std::pair<int64_t, double>> cpu_ms;  // (t_ms, the processes' CPU ms then)
  std::string limiter_mode = "unknown";
};

struct FigureResult {
  const FigureSpec* spec;
  Goal goal;
};

struct Scenario {
  const ScenarioSpec* spec;
  int round = 0;
  int device = 0;
  std::vector<ScenarioContainer> containers;
  bool measured = false;
  std::string skipped;  // why it did not run (a limits file without root); "" when it ran
  std::vector<std::string> errors;
  std::vector<FigureResult> figures;
  int ok = 0, failed = 0;
};

double WindowMean(const std::vector<double>& samples, int64_t from_ms, int64_t to_ms) {
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const int64_t t = int64_t(i + 1) * kSampleMs;
    if (t > from_ms && t <= to_ms) {
      sum += samples[i];
      ++n;
    }
  }
  return n > 0 ? sum / n : 0;
}

double CpuAt(const ScenarioContainer& c, int64_t t_ms) {
  for (const auto& [t, ms] : c.cpu_ms) {
    if (t == t_ms) return ms;
  }
  return -1;
}

void Judge(Scenario* sc) {
  const std::string prefix = std::string(sc->spec->name) + ": ";
  for (const FigureSpec& f : sc->spec->figures) {
    const ScenarioContainer& c = sc->containers[size_t(f.container)];
    const double window_s = double(f.to_ms - f.from_ms) / 1000;
    const double mean = WindowMean(c.samples, f.from_ms, f.to_ms);
    Goal g;
    switch (f.kind) {
      case FigureKind::kAbsError:
        g = AtMost(prefix + f.name, std::fabs(mean - f.target), "points", f.bound, sc->measured);
        break;
      case FigureKind::kUtilAtMost:
        g = AtMost(prefix + f.name, mean, "%", f.bound, sc->measured);
        break;
      case FigureKind::kUtilAtLeast:
        g = AtLeast(prefix + f.name, mean, "%", f.bound, sc->measured);
        break;
      case FigureKind::kCpuAtMost: {
        const double from = CpuAt(c, f.from_ms), to = CpuAt(c, f.to_ms);
        const bool read = from >= 0 && to >= 0;
        if (!read) sc->errors.push_back(std::string("CPU time not read for ") + f.name);
        g = AtMost(prefix + f.name, read ? (to - from) / window_s : 0, "ms/s", f.bound,
                   sc->measured && read);
        break;
      }
      case FigureKind::kSettleAtMost: {
        const size_t from = size_t(f.from_ms / kSampleMs);
        const size_t to = std::min(c.samples.size(), size_t(f.to_ms / kSampleMs));
        const std::vector<double> after(c.samples.begin() + long(std::min(from, to)),
                                        c.samples.begin() + long(to));
        const std::optional<int64_t> settle = SettleMs(after, f.target);
        g = AtMost(prefix + f.name, settle ? double(*settle) / 1000 : window_s, "s", f.bound,
                   sc->measured);
        if (!settle) g.meets = false;
        break;
      }
    }
    sc->figures.push_back({&f, std::move(g)});
  }
}

void Act(Scenario* sc, const Action& a) {
  ScenarioContainer& c = sc->containers[size_t(a.container)];
  if (c.region == nullptr) return;
  Status st = OkStatus();
  switch (a.kind) {
    case ActionKind::kSetSmLimit:
      // The device plugin's resize order: the region first, then the limits file, which the
      // processes' own limit follows (a raise in the region alone never reaches them).
      if (c.limits_path.empty()) {
        st = Error(ErrorCode::kInvalidArgument, "the container has no limits file to change");
        break;
      }
      st = c.region->SetSmLimit(0, a.value);
      if (st.ok()) {
        const limits::Entry entries[] = {limits::SetSmLimit(a.value)};
        st = limits::UpdateLimitsFileInPlace(c.limits_path, entries);
      }
      break;
    case ActionKind::kSetRegionSmLimit:
      st = c.region->SetSmLimit(0, a.value);
      break;
    case ActionKind::kPause:
    case ActionKind::kUnpause:
      st = c.region->SetPaused(a.kind == ActionKind::kPause);
      break;
    case ActionKind::kSwitchOff:
      st = c.region->SetUtilizationSwitch(false);
      break;
    case ActionKind::kSuspend:
    case ActionKind::kUnsuspend:
      for (const region::SlotView& s : c.region->Slots()) {
        if (std::find(c.pids.begin(), c.pids.end(), s.pid) == c.pids.end()) continue;
        st = c.region->SetSlotStatus(s.index, a.kind == ActionKind::kSuspend
                                                  ? region::SlotStatus::kSuspended
                                                  : region::SlotStatus::kRunning);
        if (!st.ok()) break;
      }
      break;
  }
  if (!st.ok()) {
    sc->errors.push_back(std::string(ActionName(a.kind)) + ": " + st.error().message());
    sc->measured = false;
  }
}

bool NeedsLimitsFile(const ScenarioSpec& spec) {
  return std::any_of(spec.containers.begin(), spec.containers.end(),
                     [](const ContainerSpec& c) { return c.limits_file; });
}

// Runs `scheduled` together, scenario i on device i: starts every worker, samples and acts on
// the timeline from the moment the last one is launching, then waits for them to finish. A
// scenario with a limits file is skipped with `limits_skip` when that is not empty (why
// limits files cannot be bound here).
void RunScenarioRound(const Paths& paths, const Nvml& nvml, const TempDir& dir,
                      const std::vector<Scenario*>& scheduled, const std::string& limits_skip) {
  const std::string state = dir.File("sim.state");
  std::vector<Scenario*> round;
  for (Scenario* sc : scheduled) {
    if (!limits_skip.empty() && NeedsLimitsFile(*sc->spec)) {
      sc->skipped = limits_skip;
      sc->containers.resize(sc->spec->containers.size());  // with no workers and no samples
      Judge(sc);                                           // every figure unmeasured
      continue;
    }
    round.push_back(sc);
  }
  if (round.empty()) return;
  std::vector<Worker*> all;
  int64_t run_ms = 0;
  for (Scenario* sc : round) {
    run_ms = std::max(run_ms, sc->spec->run_ms);
    sc->containers.resize(sc->spec->containers.size());
    for (size_t i = 0; i < sc->containers.size(); ++i) {
      const ContainerSpec& cs = sc->spec->containers[i];
      ScenarioContainer& c = sc->containers[i];
      c.region_path =
          dir.File(std::string("scenario-") + sc->spec->name + "-" + std::to_string(i) + ".cache");
      std::vector<std::string> argv = {
          cs.worker.empty() ? paths.worker
                            : paths.worker.substr(0, paths.worker.rfind('/') + 1) + cs.worker,
          std::to_string(sc->spec->run_ms + kTailMs)};
      argv.insert(argv.end(), cs.worker_args.begin(), cs.worker_args.end());
      c.workers.resize(1);
      if (cs.limits_file) {
        c.limits_path = dir.File(std::string("scenario-") + sc->spec->name + "-" +
                                 std::to_string(i) + ".limits");
        const limits::Entry entries[] = {limits::SetSmLimit(uint32_t(cs.sm_limit))};
        if (Status p = limits::PublishLimitsFile(c.limits_path, entries); !p.ok()) {
          c.workers[0].error = "writing the limits file: " + p.error().message();
          continue;
        }
      }
      Spawn(argv, WorkerEnvironment(paths, state, c.region_path, sc->device, cs.sm_limit, cs.env),
            &c.workers[0], c.limits_path);
      all.push_back(&c.workers[0]);
    }
  }
  const int64_t first_spawn = MonotonicNs();
  PollUntil(
      all,
      [&all] {
        return std::all_of(all.begin(), all.end(), [](const Worker* w) {
          return w->ready_ns != 0 || w->eof || !w->out.valid();
        });
      },
      first_spawn + kReadyTimeoutNs);
  const int64_t t0 = MonotonicNs();
  for (Scenario* sc : round) {
    sc->measured = true;
    for (ScenarioContainer& c : sc->containers) {
      for (const Worker& w : c.workers) {
        if (w.ready_ns != 0) c.pids.push_back(w.pid);
      }
      if (c.pids.empty()) {
        sc->measured = false;
        sc->errors.push_back("a container's worker never started launching");
        continue;
      }
      auto r = region::Region::Open(c.region_path, nullptr, region::Create::kNever, nullptr,
                                    region::Access::kReadWrite);
      if (!r.ok()) {
        sc->measured = false;
        sc->errors.push_back("opening the region: " + r.error().message());
        continue;
      }
      c.region = std::move(r).value();
    }
  }

  // At each tick: the sample of the last 100 ms, then what the timeline does at that time.
  auto at_tick = [&round](int64_t t_ms) {
    for (Scenario* sc : round) {
      for (ScenarioContainer& c : sc->containers) {
        bool wanted = false;
        for (const FigureSpec& f : sc->spec->figures) {
          wanted = wanted || (f.kind == FigureKind::kCpuAtMost &&
                              &sc->containers[size_t(f.container)] == &c &&
                              (f.from_ms == t_ms || f.to_ms == t_ms));
        }
        if (!wanted) continue;
        double sum = 0;
        for (pid_t p : c.pids) {
          const double ms = CpuMs(p);
          sum = (sum < 0 || ms < 0) ? -1 : sum + ms;
        }
        c.cpu_ms.emplace_back(t_ms, sum);
      }
      for (const Action& a : sc->spec->actions) {
        if (a.at_ms == t_ms) Act(sc, a);
      }
    }
  };
  at_tick(0);
  unsigned long long previous_us = RealtimeUs();
  for (int64_t k = 1; k <= run_ms / kSampleMs; ++k) {
    SleepUntilNs(t0 + k * kSampleMs * 1'000'000);
    const unsigned long long now_us = RealtimeUs();
    for (Scenario* sc : round) {
      if (k * kSampleMs > sc->spec->run_ms) continue;
      for (ScenarioContainer& c : sc->containers) {
        const std::optional<double> u = ContainerUtil(nvml, sc->device, c.pids, previous_us);
        if (!u && sc->measured) {
          sc->measured = false;
          sc->errors.push_back("NVML failed at t = " + std::to_string(k * kSampleMs) + " ms");
        }
        c.samples.push_back(u.value_or(0));
      }
    }
    previous_us = now_us;
    at_tick(k * kSampleMs);
  }
  for (Scenario* sc : round) {
    for (ScenarioContainer& c : sc->containers) {
      if (c.region == nullptr) continue;
      c.limiter_mode = region::LimiterModeName(
          region::LimiterMode(c.region->Limiter(0).mode.load(std::memory_order_relaxed)));
    }
  }
  ReapAll(all, t0 + (run_ms + kTailMs) * 1'000'000 + kExitTimeoutNs);
  for (Scenario* sc : round) {
    for (ScenarioContainer& c : sc->containers) {
      for (const Worker& w : c.workers) {
        if (w.ok) {
          sc->ok++;
          continue;
        }
        sc->failed++;
        sc->errors.push_back("worker pid " + std::to_string(w.pid) + ": " + HowItEnded(w) +
                             (w.output.empty() ? "" : ": " + LastLine(w.output)));
      }
    }
    Judge(sc);
  }
}

Json ToJson(const Scenario& sc) {
  Json containers = Json::array();
  for (size_t i = 0; i < sc.containers.size(); ++i) {
    const ScenarioContainer& c = sc.containers[i];
    const ContainerSpec& cs = sc.spec->containers[i];
    Json env = Json::object();
    for (const auto& [k, v] : cs.env) env[k] = v;
    Json samples = Json::array();
    for (size_t k = 0; k < c.samples.size(); ++k) {
      samples.push_back({{"t_ms", int64_t(k + 1) * kSampleMs}, {"util", c.samples[k]}});
    }
    Json cpu = Json::array();
    for (const auto& [t, ms] : c.cpu_ms) cpu.push_back({{"t_ms", t}, {"cpu_ms", ms}});
    Json workers = Json::array();
    for (const Worker& w : c.workers) {
      workers.push_back({{"pid", w.pid},
                         {"ok", w.ok},
                         {"ended", HowItEnded(w)},
                         {"launches", w.launches},
                         {"last_line", LastLine(w.output)}});
    }
    containers.push_back({{"sm_limit", cs.sm_limit},
                          {"env", env},
                          {"worker_args", cs.worker_args},
                          {"limiter_mode", c.limiter_mode},
                          {"workers", workers},
                          {"cpu", cpu},
                          {"samples", samples}});
  }
  Json actions = Json::array();
  for (const Action& a : sc.spec->actions) {
    actions.push_back({{"t_ms", a.at_ms},
                       {"container", a.container},
                       {"action", ActionName(a.kind)},
                       {"value", a.value}});
  }
  Json figures = Json::array();
  for (const FigureResult& f : sc.figures) {
    Json g = ToJson(f.goal);
    g["container"] = f.spec->container;
    g["window_ms"] = {f.spec->from_ms, f.spec->to_ms};
    figures.push_back(std::move(g));
  }
  return Json{{"name", sc.spec->name},
              {"what", sc.spec->what},
              {"round", sc.round},
              {"device", sc.device},
              {"run_ms", sc.spec->run_ms},
              {"measured", sc.measured},
              {"workers_ok", sc.ok},
              {"workers_failed", sc.failed},
              {"errors", sc.errors},
              {"actions", actions},
              {"containers", containers},
              {"figures", figures},
              {"skipped", sc.skipped.empty() ? Json() : Json(sc.skipped)}};
}

// ---- the summary ----

struct Summary {
  int cells = 0;
  int measured = 0;
  double mean_error = 0;
  double p95_error = 0;
  double max_error = 0;
  int unsettled = 0;
  std::optional<int64_t> max_settle_ms;  // over the settled cells
  int workers_ok = 0, workers_failed = 0;
};

Summary Summarize(const std::vector<Cell>& cells) {
  Summary s;
  s.cells = int(cells.size());
  std::vector<int64_t> milli_points;  // NearestRank counts integers
  for (const Cell& c : cells) {
    s.workers_ok += c.ok;
    s.workers_failed += c.failed;
    if (!c.measured) continue;
    s.measured++;
    s.mean_error += c.abs_error();
    s.max_error = std::max(s.max_error, c.abs_error());
    milli_points.push_back(std::llround(c.abs_error() * 1000));
    if (!c.settle_ms) {
      s.unsettled++;
    } else {
      s.max_settle_ms = std::max(s.max_settle_ms.value_or(0), *c.settle_ms);
    }
  }
  if (s.measured > 0) s.mean_error /= s.measured;
  s.p95_error = double(NearestRank(std::move(milli_points)).p95) / 1000;
  return s;
}

// ---- the plot ----

std::string Svg(const std::vector<Cell>& cells, const Options& opt, const std::string& title) {
  constexpr double kWidth = 800, kHeight = 560;
  constexpr double kLeft = 70, kTop = 50, kPlot = 440;  // a square plot, 0-100 on both axes
  constexpr std::array<const char*, 6> kColors = {"#1f77b4", "#d62728", "#2ca02c",
                                                  "#9467bd", "#ff7f0e", "#8c564b"};
  auto px = [&](double v) { return kLeft + v / 100 * kPlot; };
  auto py = [&](double v) { return kTop + kPlot - v / 100 * kPlot; };

  std::string s;
  Appendf(&s,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
          kWidth, kHeight, kWidth, kHeight);
  Appendf(&s, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  Appendf(&s, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n",
          kWidth / 2, Escape(title).c_str());
  // The band the settle rule allows, then the grid, the ideal diagonal and the axes.
  Appendf(&s,
          "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" "
          "fill=\"#eef2f7\"/>\n",
          px(0), py(0), px(0), py(kBandPoints), px(100 - kBandPoints), py(100), px(100), py(100),
          px(100), py(100 - kBandPoints), px(kBandPoints), py(0));
  for (int v = 0; v <= 100; v += 10) {
    Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
            px(v), py(0), px(v), py(100));
    Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
            px(0), py(v), px(100), py(v));
    Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", px(v),
            py(0), px(v), py(0) + 5);
    Appendf(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", px(v), py(0) + 20,
            v);
    Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
            px(0) - 5, py(v), px(0), py(v));
    Appendf(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n", px(0) - 8, py(v) + 4,
            v);
  }
  Appendf(&s,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
          "stroke-dasharray=\"6,4\"/>\n",
          px(0), py(0), px(100), py(100));
  Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", px(0),
          py(0), px(0), py(100));
  Appendf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", px(0),
          py(0), px(100), py(0));
  Appendf(&s,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">target: CUDA_DEVICE_SM_LIMIT "
          "(%%)</text>\n",
          px(50), py(0) + 42);
  Appendf(&s,
          "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 20 %.1f)\">"
          "achieved: the container's SM utilization over the window (%%)</text>\n",
          py(50), py(50));

  // One marker series per kernel and process count: the colour says the process count, the
  // shape the kernel (a disc: short, a square: long); series sit side by side around their
  // target so that they do not hide each other.
  struct Series {
    size_t kernel;
    int processes;
    size_t color;
  };
  std::vector<Series> series;
  for (size_t k : opt.kernels) {
    for (size_t p = 0; p < opt.processes.size(); ++p) {
      series.push_back({k, opt.processes[p], p % kColors.size()});
    }
  }
  const double step = series.size() > 1 ? std::min(0.8, 4.0 / double(series.size() - 1)) : 0;
  const double lx = px(100) + 30;
  double ly = kTop + 10;
  Appendf(&s,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
          "stroke-dasharray=\"6,4\"/>\n",
          lx, ly, lx + 24, ly);
  Appendf(&s, "<text x=\"%.1f\" y=\"%.1f\">ideal: achieved = target</text>\n", lx + 30, ly + 4);
  ly += 22;
  Appendf(&s,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"24\" height=\"12\" fill=\"#eef2f7\" "
          "stroke=\"#ccc\"/>\n",
          lx, ly - 6);
  Appendf(&s, "<text x=\"%.1f\" y=\"%.1f\">within %.0f points</text>\n", lx + 30, ly + 4,
          kBandPoints);
  ly += 22;
  auto marker = [&s](size_t kernel, double x, double y, const char* color) {
    if (kernel == 0) {
      Appendf(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"", x, y, color);
    } else {
      Appendf(&s,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"white\" stroke=\"%s\" "
              "stroke-width=\"2\"",
              x - 4, y - 4, color);
    }
  };
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& se = series[i];
    const char* color = kColors[se.color];
    const double dx = (double(i) - double(series.size() - 1) / 2) * step;
    for (const Cell& c : cells) {
      if (c.kernel != se.kernel || c.processes != se.processes || !c.measured) continue;
      marker(se.kernel, px(c.target + dx), py(std::clamp(c.achieved, 0.0, 100.0)), color);
      const std::string settle =
          c.settle_ms ? Fixed(double(*c.settle_ms) / 1000, 1) + " s" : std::string("none");
      Appendf(&s, "><title>%s kernels, %s, target %d%%: achieved %.1f%%, settle %s</title>",
              kKernels[se.kernel].name, ProcessCount(se.processes).c_str(), c.target, c.achieved,
              settle.c_str());
      s += se.kernel == 0 ? "</circle>\n" : "</rect>\n";
    }
    marker(se.kernel, lx + 12, ly, color);
    s += "/>\n";
    Appendf(&s, "<text x=\"%.1f\" y=\"%.1f\">%s kernels, %s</text>\n", lx + 30, ly + 4,
            kKernels[se.kernel].name, ProcessCount(se.processes).c_str());
    ly += 22;
  }
  s += "</svg>\n";
  return s;
}

// ---- the report ----

Json ToJson(const Cell& c, const Options& opt) {
  const Kernel& k = kKernels[c.kernel];
  Json samples = Json::array();
  const Json averages = MovingAverages(c.samples);
  for (size_t i = 0; i < c.samples.size(); ++i) {
    samples.push_back({{"t_ms", int64_t(i + 1) * kSampleMs},
                       {"util", c.samples[i]},
                       {"moving_average", averages[i]}});
  }
  Json workers = Json::array();
  for (const Worker& w : c.workers) {
    workers.push_back({{"pid", w.pid},
                       {"ok", w.ok},
                       {"ended", HowItEnded(w)},
                       {"launches", w.launches},
                       {"last_line", LastLine(w.output)}});
  }
  return Json{
      {"index", c.index},
      {"round", c.round},
      {"device", c.device},
      {"kernel", k.name},
      {"grid", k.grid},
      {"block", k.block},
      {"wave_ns", k.wave_ns},
      {"processes", c.processes},
      {"target", c.target},
      {"measured", c.measured},
      {"achieved", c.achieved},
      {"abs_error", c.abs_error()},
      {"window_ms", {opt.window_from_ms, opt.window_to_ms}},
      {"settled", c.settle_ms.has_value()},
      {"settle_ms", c.settle_ms ? Json(*c.settle_ms) : Json(nullptr)},
      {"workers_ok", c.ok},
      {"workers_failed", c.failed},
      {"launches", c.launches},
      {"errors", c.errors},
      {"limiter",
       {{"mode", c.limiter_mode},
        {"rate_milli_waves_per_s", c.limiter_rate},
        {"measured_percent", c.limiter_measured},
        {"waited_ms", double(c.limiter_waited_ns) / 1e6},
        {"admitted_milli_waves", c.limiter_admitted}}},
      {"workers", workers},
      {"samples", samples},
  };
}

int Main(const Options& opt) {
  const std::string exe_dir = ExecutableDir();
  if (exe_dir.empty()) {
    std::fprintf(stderr, "%s: cannot find this binary's directory (/proc/self/exe)\n", kProgram);
    return 1;
  }
  const std::string build_dir = exe_dir + "/..";
  Paths paths{build_dir + "/tests/sm_worker", build_dir + "/lib/libvgpu.so",
              build_dir + "/lib/sim"};
  const std::pair<std::string, const char*> needed[] = {
      {paths.worker, "sm_worker"},
      {paths.libvgpu, "vgpu"},
      {paths.sim_dir + "/libcuda.so.1", "hami_sim_cuda"},
      {paths.sim_dir + "/libnvidia-ml.so.1", "hami_sim_nvml"},
  };
  for (const auto& [path, target] : needed) {
    if (access(path.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "%s: %s is missing (build the target %s)\n", kProgram, path.c_str(),
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
  const std::string json_path = opt.json_path.empty() ? exe_dir + "/sm.json" : opt.json_path;
  const std::string svg_path = opt.svg_path.empty() ? exe_dir + "/sm.svg" : opt.svg_path;
  TempDir dir("hami-bench-sm");
  if (!dir.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, Errno("mkdtemp").c_str());
    return 1;
  }

  // This process reads the simulated machine's NVML directly: only the run's machine, none of
  // the caller's simulation settings.
  std::vector<std::string> inherited;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv = *e;
    if (kv.starts_with("HAMI_SIM_")) inherited.emplace_back(kv.substr(0, kv.find('=')));
  }
  for (const std::string& name : inherited) unsetenv(name.c_str());
  setenv("HAMI_SIM_STATE", dir.File("sim.state").c_str(), 1);
  setenv("HAMI_SIM_PROFILE", kSimProfile, 1);
  Nvml nvml;
  if (std::string error; !LoadNvml(paths.sim_dir + "/libnvidia-ml.so.1", &nvml, &error)) {
    std::fprintf(stderr, "%s: the simulated NVML: %s\n", kProgram, error.c_str());
    return 1;
  }

  // The cells: kernel, then processes, then target; `parallel` to a round.
  std::vector<Cell> cells;
  for (size_t k : opt.kernels) {
    for (int p : opt.processes) {
      for (int t : opt.targets) {
        Cell c;
        c.index = int(cells.size());
        c.target = t;
        c.processes = p;
        c.kernel = k;
        c.round = c.index / opt.parallel;
        c.device = c.index % opt.parallel;
        cells.push_back(std::move(c));
      }
    }
  }
  const int rounds = (int(cells.size()) + opt.parallel - 1) / opt.parallel;
  const int cpus = CpuCount();
  std::printf(
      "%s: targets %s x processes %s x kernels %s: %zu cells, %d at a time on simulated %s; "
      "window %s-%s s; %d CPUs%s\n",
      kProgram, JoinInts(opt.targets).c_str(), JoinInts(opt.processes).c_str(),
      KernelList(opt.kernels).c_str(), cells.size(), opt.parallel, kSimProfile,
      Fixed(double(opt.window_from_ms) / 1000, 1).c_str(),
      Fixed(double(opt.window_to_ms) / 1000, 1).c_str(), cpus, opt.quick ? ", quick" : "");
  std::fflush(stdout);

  std::vector<RoundResult> round_results;
  for (int r = 0; r < rounds; ++r) {
    std::vector<Cell*> round;
    for (Cell& c : cells) {
      if (c.round == r) round.push_back(&c);
    }
    RoundResult rr = RunRound(paths, opt, nvml, dir, r, round);
    int failed = 0;
    for (const Cell* c : round) failed += c->failed;
    std::printf(
        "  round %d/%d: %zu cells, %d workers, launching %s ms after the first start "
        "(spread %s ms), %d failed\n",
        r + 1, rounds, round.size(), rr.workers, std::to_string(rr.start_ms).c_str(),
        std::to_string(rr.spread_ms).c_str(), failed);
    std::fflush(stdout);
    round_results.push_back(std::move(rr));
  }
  const Summary sum = Summarize(cells);

  // The scenarios, `parallel` to a round, each on a device of its own.
  std::vector<Scenario> scenarios;
  for (size_t i : opt.scenarios) {
    Scenario sc;
    sc.spec = &Scenarios()[i];
    sc.round = int(scenarios.size()) / opt.parallel;
    sc.device = int(scenarios.size()) % opt.parallel;
    scenarios.push_back(std::move(sc));
  }
  const int scenario_rounds = (int(scenarios.size()) + opt.parallel - 1) / opt.parallel;
  // The limits files' mount point, held while the scenarios run, when one of them has a
  // limits file; else why those scenarios are skipped.
  std::optional<node::HeldMountPoint> mount_point;
  std::string limits_skip;
  if (std::any_of(scenarios.begin(), scenarios.end(),
                  [](const Scenario& sc) { return NeedsLimitsFile(*sc.spec); })) {
    if (geteuid() != 0) {
      limits_skip = std::string("needs root (to bind the container's limits file at ") +
                    node::kLimitsFilePath +
                    " in a mount namespace of its workers' own); running as uid " +
                    std::to_string(geteuid());
    } else if (auto held = node::HeldMountPoint::Hold(node::kLimitsFilePath); !held.ok()) {
      limits_skip = "cannot hold the limits file's mount point: " + held.error().message();
    } else {
      mount_point.emplace(std::move(held).value());
    }
  }
  for (int r = 0; r < scenario_rounds; ++r) {
    std::vector<Scenario*> round;
    for (Scenario& sc : scenarios) {
      if (sc.round == r) round.push_back(&sc);
    }
    RunScenarioRound(paths, nvml, dir, round, limits_skip);
    int failed = 0;
    for (const Scenario* sc : round) failed += sc->failed;
    std::printf("  scenario round %d/%d: %zu scenarios, %d failed workers\n", r + 1,
                scenario_rounds, round.size(), failed);
    std::fflush(stdout);
  }
  bool scenarios_ok = true;
  for (const Scenario& sc : scenarios) {
    scenarios_ok = scenarios_ok && (sc.measured || !sc.skipped.empty()) && sc.failed == 0;
  }

  // The table: one row per cell.
  std::vector<std::vector<std::string>> rows = {{"kernel", "processes", "target %", "achieved %",
                                                 "|error|", "settle s", "launches", "workers",
                                                 "limiter"}};
  for (const Cell& c : cells) {
    rows.push_back(
        {kKernels[c.kernel].name, std::to_string(c.processes), std::to_string(c.target),
         c.measured ? Fixed(c.achieved, 1) : "-", c.measured ? Fixed(c.abs_error(), 1) : "-",
         c.settle_ms ? Fixed(double(*c.settle_ms) / 1000, 1) : "never", std::to_string(c.launches),
         std::to_string(c.ok) + "/" + std::to_string(c.processes), c.limiter_mode});
  }
  std::printf("\n");
  PrintTable(rows, 1, 8, TrailingSpaces::kTrim);
  if (!scenarios.empty()) {
    std::vector<std::vector<std::string>> srows = {
        {"scenario", "figure", "window s", "measured", "goal", "meets", "limiter"}};
    for (const Scenario& sc : scenarios) {
      for (const FigureResult& f : sc.figures) {
        const std::string name = f.goal.name.substr(std::string(sc.spec->name).size() + 2);
        srows.push_back({sc.spec->name, name,
                         Fixed(double(f.spec->from_ms) / 1000, 1) + "-" +
                             Fixed(double(f.spec->to_ms) / 1000, 1),
                         Fixed(f.goal.measured.get<double>(), 1) + " " + f.goal.unit,
                         f.goal.goal + " " + f.goal.unit, MeetsText(f.goal),
                         sc.containers[size_t(f.spec->container)].limiter_mode});
      }
    }
    std::printf("\n");
    PrintTable(srows, 3, 3, TrailingSpaces::kTrim);
  }

  // The goals.
  const bool all_measured = sum.measured == sum.cells && sum.cells > 0;
  const double run_s = double(opt.window_to_ms) / 1000;
  // Over every cell, or not measured.
  const Goal mean_goal =
      AtMost("mean |error|", sum.mean_error, "points", kGoalMeanErrorPoints, all_measured);
  const Goal p95_goal =
      AtMost("p95 |error|", sum.p95_error, "points", kGoalP95ErrorPoints, all_measured);
  // A cell that never settled counts as the whole run (its settle time is longer).
  const double max_settle_s =
      sum.unsettled > 0 ? run_s : double(sum.max_settle_ms.value_or(0)) / 1000;
  const Goal settle_goal = AtMost("max settle time", max_settle_s, "s", kGoalSettleS, all_measured);
  const Goal max_goal =
      AtMost("max |error|", sum.max_error, "points", kGoalMaxErrorPoints, all_measured);
  std::vector<Row> goal_rows = {
      {"mean |error| (" + std::to_string(sum.measured) + " of " + std::to_string(sum.cells) +
           " cells measured)",
       Fixed(sum.mean_error, 2) + " points", "<= 3 points", MeetsText(mean_goal)},
      {"p95 |error| (nearest rank)", Fixed(sum.p95_error, 2) + " points", "<= 6 points",
       MeetsText(p95_goal)},
      {"max |error| (every cell)", Fixed(sum.max_error, 2) + " points", "<= 5 points",
       MeetsText(max_goal)},
      {"max settle time",
       sum.unsettled > 0 ? "> " + Fixed(run_s, 1) + " s" : Fixed(max_settle_s, 1) + " s", "<= 1 s",
       MeetsText(settle_goal)},
      {"cells never settled", std::to_string(sum.unsettled), "", ""},
      {"workers ok / failed",
       std::to_string(sum.workers_ok) + " / " + std::to_string(sum.workers_failed), "0 failed",
       sum.workers_failed == 0 ? "yes" : "no"},
  };
  for (const Scenario& sc : scenarios) {
    for (const FigureResult& f : sc.figures) {
      goal_rows.push_back({f.goal.name, Fixed(f.goal.measured.get<double>(), 1) + " " + f.goal.unit,
                           f.goal.goal + " " + f.goal.unit, MeetsText(f.goal)});
    }
  }
  int scenario_workers_ok = 0, scenario_workers_failed = 0;
  for (const Scenario& sc : scenarios) {
    scenario_workers_ok += sc.ok;
    scenario_workers_failed += sc.failed;
  }
  if (!scenarios.empty()) {
    goal_rows.push_back(
        {"scenario workers ok / failed",
         std::to_string(scenario_workers_ok) + " / " + std::to_string(scenario_workers_failed),
         "0 failed", scenario_workers_failed == 0 ? "yes" : "no"});
  }
  std::printf("\n");
  PrintTable(goal_rows);
  for (const Cell& c : cells) {
    for (const std::string& e : c.errors) {
      std::printf("%s kernels, %s, target %d: %s\n", kKernels[c.kernel].name,
                  ProcessCount(c.processes).c_str(), c.target, e.c_str());
    }
  }

  for (const Scenario& sc : scenarios) {
    if (!sc.skipped.empty())
      std::printf("scenario %s: skipped: %s\n", sc.spec->name, sc.skipped.c_str());
    for (const std::string& e : sc.errors)
      std::printf("scenario %s: %s\n", sc.spec->name, e.c_str());
  }

  // The JSON and the plot.
  Json cells_json = Json::array();
  for (const Cell& c : cells) cells_json.push_back(ToJson(c, opt));
  Json rounds_json = Json::array();
  for (const RoundResult& r : round_results) {
    rounds_json.push_back({{"round", r.index},
                           {"cells", r.cells},
                           {"workers", r.workers},
                           {"start_ms", r.start_ms},
                           {"start_spread_ms", r.spread_ms}});
  }
  Json kernels_json = Json::array();
  for (size_t k : opt.kernels) {
    kernels_json.push_back({{"name", kKernels[k].name},
                            {"grid", kKernels[k].grid},
                            {"block", kKernels[k].block},
                            {"wave_ns", kKernels[k].wave_ns}});
  }
  Json goals_json =
      Json::array({ToJson(mean_goal), ToJson(p95_goal), ToJson(settle_goal), ToJson(max_goal)});
  goals_json[2]["unsettled_cells"] = sum.unsettled;
  Json scenarios_json = Json::array();
  for (const Scenario& sc : scenarios) {
    scenarios_json.push_back(ToJson(sc));
    for (const FigureResult& f : sc.figures) {
      Json g = ToJson(f.goal);
      g["scenario"] = sc.spec->name;
      goals_json.push_back(std::move(g));
    }
  }
  const Json doc = {
      {"benchmark", "sm"},
      {"environment",
       {{"gpu", "simulated"},
        {"gpu_model", kSimGpuName},
        {"sim_profile", kSimProfile},
        {"cpus", cpus},
        {"worker", paths.worker},
        {"worker_environment",
         "LD_PRELOAD=libvgpu.so, LD_LIBRARY_PATH=<build>/lib/sim, HAMI_SIM_STATE (one for the "
         "run), HAMI_SIM_PROFILE, CUDA_DEVICE_MEMORY_SHARED_CACHE (one per cell), "
         "CUDA_VISIBLE_DEVICES=<the cell's device>, CUDA_DEVICE_SM_LIMIT=<target>; every other "
         "HAMI_*, CUDA_*, NVIDIA_*, LIBVGPU_* variable removed (the simulator's defaults)"},
        {"measurement",
         "nvmlDeviceGetProcessUtilization of the simulated NVML, loaded by path in this "
         "(unpreloaded) process: the container's processes' smUtil added up"},
        {"percentiles", "nearest rank over the measured cells: the ceil(p/100 * n)-th smallest"}}},
      {"config",
       {{"quick", opt.quick},
        {"targets", opt.targets},
        {"processes", opt.processes},
        {"kernels", kernels_json},
        {"parallel", opt.parallel},
        {"sample_ms", kSampleMs},
        {"moving_average_ms", int64_t(kMovingSamples) * kSampleMs},
        {"band_points", kBandPoints},
        {"window_from_ms", opt.window_from_ms},
        {"window_to_ms", opt.window_to_ms},
        {"worker_ms", opt.window_to_ms + kTailMs},
        {"scenarios",
         [&opt] {
           Json names = Json::array();
           for (size_t i : opt.scenarios) names.push_back(Scenarios()[i].name);
           return names;
         }()}}},
      {"rounds", rounds_json},
      {"cells", cells_json},
      {"scenarios", scenarios_json},
      {"summary",
       {{"cells", sum.cells},
        {"measured", sum.measured},
        {"mean_abs_error", sum.mean_error},
        {"p95_abs_error", sum.p95_error},
        {"max_abs_error", sum.max_error},
        {"max_settle_ms", sum.max_settle_ms ? Json(*sum.max_settle_ms) : Json(nullptr)},
        {"unsettled_cells", sum.unsettled},
        {"workers_ok", sum.workers_ok},
        {"workers_failed", sum.workers_failed},
        {"scenarios", scenarios.size()},
        {"scenario_workers_ok", scenario_workers_ok},
        {"scenario_workers_failed", scenario_workers_failed}}},
      {"goals", goals_json},
  };
  const bool wrote_json = WriteJson(json_path, doc, kProgram);
  const std::string title = "hami bench sm: achieved against target (simulated " +
                            std::string(kSimProfile) + ", " + std::to_string(cpus) + " CPUs)";
  const bool wrote_svg = WriteTextFile(svg_path, Svg(cells, opt, title), kProgram);
  std::printf("\njson: %s\nsvg: %s\n", json_path.c_str(), svg_path.c_str());
  return all_measured && sum.workers_failed == 0 && scenarios_ok && wrote_json && wrote_svg ? 0 : 1;
}

// ---- flags ----

// "long,short" -> {0, 1}: the canonical order, without repeats.
std::optional<std::vector<size_t>> ParseKernelList(std::string_view text) {
  std::vector<std::string> names;
  for (const Kernel& k : kKernels) names.emplace_back(k.name);
  return ParseNameList(text, "--kernels", names, "short or long", kProgram);
}

std::optional<Options> ParseFlags(int argc, char** argv) {
  Options o;
  bool targets_set = false, processes_set = false, kernels_set = false, scenarios_set = false;
  FlagReader flags(argc, argv, kProgram, kUsage, &o);
  while (flags.Next()) {
    const std::string_view flag = flags.flag();
    std::string_view value;
    if (flag == "--svg") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      o.svg_path = value;
    } else if (flag == "--targets" || flag == "--processes" || flag == "--parallel") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      const bool targets = flag == "--targets", processes = flag == "--processes";
      auto list = ParseNumberList(value, flag, 1,
                                  targets     ? 99
                                  : processes ? 16
                                              : kSimDevices,
                                  kProgram);
      if (!list) return std::nullopt;
      if (targets) {
        o.targets = *list;
        targets_set = true;
      } else if (processes) {
        o.processes = *list;
        processes_set = true;
      } else if (list->size() != 1) {
        std::fprintf(stderr, "%s: --parallel takes one number\n", kProgram);
        return std::nullopt;
      } else {
        o.parallel = list->front();
      }
    } else if (flag == "--scenarios") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      if (value == "none") {
        o.scenarios.clear();
      } else {
        auto list = ParseNameList(value, "--scenarios", ScenarioNames(), "a scenario", kProgram);
        if (!list) return std::nullopt;
        o.scenarios = *list;
      }
      scenarios_set = true;
    } else if (flag == "--kernels") {
      if (!flags.TakeValue(&value)) return std::nullopt;
      auto list = ParseKernelList(value);
      if (!list) return std::nullopt;
      o.kernels = *list;
      kernels_set = true;
    } else {
      flags.PrintUnknown();
      return std::nullopt;
    }
  }
  if (flags.failed()) return std::nullopt;
  if (!scenarios_set) {
    for (size_t i = 0; i < Scenarios().size(); ++i) o.scenarios.push_back(i);
  }
  if (o.quick) {
    if (!targets_set) o.targets = {30, 70};
    if (!processes_set) o.processes = {1, 2};
    if (!kernels_set) o.kernels = {0};
    o.window_to_ms = 2500;
  }
  return o;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::ParseFlags, hami::bench::Main);
}
