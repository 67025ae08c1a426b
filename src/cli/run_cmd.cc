// hami run: runs a command against the GPU — the real one when a driver is present, the
// simulated one otherwise or when asked (--sim). With --memory, --sm, --devices or
// --limits-file-mount the command runs under libvgpu.so with a shared region of its own,
// like one container (docs/hami-run.md).
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/paths.h"
#include "common/exit_status.h"
#include "common/file.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/result.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "common/visible_devices.h"
#include "inventory/inventory.h"
#include "limits/limits_file.h"
#include "limits/vocabulary.h"
#include "node/mount_point.h"
#include "node/paths.h"
#include "vgpu/config.h"

extern char** environ;

namespace hami::cli {

namespace {

// Exit statuses of hami itself (common/exit_status.h); any other status is the command's.
constexpr int kExitSetupFailed = kExitFailure;

struct RunOptions {
  std::string sim_profile;
  std::string sim_state;
  bool quiet = false;
  std::string memory;   // "4g" or "4g,2g" (by CUDA ordinal)
  std::string sm;       // percent
  std::string devices;  // indices or GPU- UUIDs
  bool limits_file_mount = false;
  bool oversubscribe = false;
  std::string host_memory;  // CUDA_OVERSUBSCRIBE_HOST_LIMIT
  // Which of the limiting options were given (an empty value is not the same as none).
  bool memory_given = false;
  bool sm_given = false;
  bool devices_given = false;
  bool host_memory_given = false;
  bool Limited() const {
    return memory_given || sm_given || devices_given || limits_file_mount || oversubscribe ||
           host_memory_given;
  }
};

// The devices (UUIDs, NVML order) of the driver the loader finds for hami itself. Empty when
// there is none, it has no device, or it is the simulator's (LD_LIBRARY_PATH already points
// at it): that one is chosen, configured and read by UseSimulator.
std::vector<std::string> RealDriverDevices(const std::string& sim_dir) {
  inventory::Options options;
  options.cuda_library.clear();  // UUIDs are all it needs: no cuInit
  auto inv = inventory::ReadInventory(options);
  if (!inv.ok()) return {};
  if (!sim_dir.empty() && inv->nvml_library.rfind(sim_dir + "/", 0) == 0) return {};
  return inventory::Uuids(*inv);
}

// The devices a CUDA program started now would see, in CUDA ordinal order: `all` (NVML
// order) narrowed and ordered by CUDA_VISIBLE_DEVICES.
std::vector<std::string> InCudaOrder(const std::vector<std::string>& all) {
  const char* cvd = std::getenv(limits::KeyName(limits::Key::kVisibleDevices));
  VisibleDevices v = ParseVisibleDevices(
      cvd != nullptr ? std::optional<std::string_view>(cvd) : std::nullopt, all);
  std::vector<std::string> visible;
  for (int p : v.physical) visible.push_back(all[size_t(p)]);
  return visible;
}

// "2 × NVIDIA H100 80GB HBM3, Tesla T4": the devices' names, runs of one name counted.
std::string DeviceSummary(const inventory::Inventory& inv) {
  std::string text;
  for (size_t i = 0; i < inv.devices.size();) {
    size_t j = i;
    while (j < inv.devices.size() && inv.devices[j].name == inv.devices[i].name) ++j;
    if (!text.empty()) text += ", ";
    if (j - i > 1) text += std::to_string(j - i) + " × ";
    text += inv.devices[i].name;
    i = j;
  }
  return text.empty() ? "no device" : text;
}

// hami's exit status when the simulated GPU cannot be used: a usage error when --sim named
// what it refused, else a setup failure.
int SimulatorFailureStatus(const RunOptions& o, const Error& e) {
  return e.code() == ErrorCode::kNotFound || o.sim_profile.empty() ? kExitSetupFailed : kExitUsage;
}

// Points the environment at the simulated GPU (LD_LIBRARY_PATH, its profile and state) and
// reads its devices (UUIDs, NVML order) through its libnvidia-ml.so.1, as a driver's: the
// simulated library itself refuses a bad profile or state, and says why on stderr.
Result<std::vector<std::string>> UseSimulator(const RunOptions& o, const std::string& sim_dir) {
  if (sim_dir.empty()) {
    return Error(ErrorCode::kNotFound,
                 "no NVIDIA driver found and no simulated GPU next to this hami (looked for "
                 "lib/sim/libcuda.so.1; set HAMI_SIM_LIBDIR)");
  }
  if (!o.sim_profile.empty()) setenv("HAMI_SIM_PROFILE", o.sim_profile.c_str(), 1);
  if (!o.sim_state.empty()) setenv("HAMI_SIM_STATE", o.sim_state.c_str(), 1);
  const char* old = std::getenv("LD_LIBRARY_PATH");
  std::string path = sim_dir + (old != nullptr && *old != '\0' ? ":" + std::string(old) : "");
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);

  inventory::Options options;
  options.nvml_library = sim_dir + "/libnvidia-ml.so.1";
  options.cuda_library.clear();
  auto inv = inventory::ReadInventory(options);
  if (!inv.ok()) {
    return Error(ErrorCode::kInvalidArgument,
                 (o.sim_profile.empty() ? std::string() : "--sim='" + o.sim_profile + "': ") +
                     "the simulated GPU does not start (" + inv.error().message() +
                     "); its reason is above");
  }
  if (!o.quiet) {
    const char* profile = std::getenv("HAMI_SIM_PROFILE");
    const char* state = std::getenv("HAMI_SIM_STATE");
    std::string devices = profile != nullptr && *profile != '\0'
                              ? std::string(profile)
                              : "default devices: " + DeviceSummary(*inv);
    std::fprintf(stderr, "hami: running on the simulated GPU (%s, state %s)\n", devices.c_str(),
                 state != nullptr && *state != '\0' ? state : "/tmp/hami-sim.state");
  }
  return inventory::Uuids(*inv);
}

std::vector<std::string_view> SplitList(std::string_view text, char separator = ',') {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(separator, start);
    out.push_back(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

// --memory: one value for every device, or one per device the command sees.
// One size given to `flag` (--memory's entries, --host-memory): libvgpu's form (digits with an
// optional binary k, m, g or t, any case) or a Kubernetes binary quantity (Ki, Mi, Gi, Ti), as a
// Kubernetes user writes it: 3000Mi.
Result<uint64_t> ParseSizeOption(std::string_view entry, std::string_view flag) {
  std::string_view size = entry;
  if (size.size() > 2 && size.back() == 'i' &&
      std::string_view("KMGT").find(size[size.size() - 2]) != std::string_view::npos) {
    size.remove_suffix(1);  // "3000Mi" is "3000M"
  }
  auto bytes = ParseSize(size, flag);
  if (!bytes.ok()) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(flag) + "='" + std::string(entry) +
                     "': not a size (digits with k, m, g or t, or Kubernetes' Ki, Mi, Gi, Ti)");
  }
  return *bytes;
}

Result<std::vector<uint64_t>> ParseMemory(std::string_view text) {
  std::vector<uint64_t> out;
  for (std::string_view entry : SplitList(text)) {
    out.push_back(HAMI_TRY(ParseSizeOption(entry, "--memory")));
  }
  return out;
}

Result<uint32_t> ParseSmPercent(std::string_view text) {
  uint64_t p = HAMI_TRY(ParseUint64(text, "--sm"));
  if (p > 100) {
    return Error(ErrorCode::kInvalidArgument,
                 "--sm='" + std::string(text) + "': must be a percentage from 0 to 100");
  }
  return uint32_t(p);
}

// Checks every --devices entry against `present` (all devices, CUDA order): each must name
// exactly one device, once. Returns how many devices the command will see.
Result<int> CheckDevices(std::string_view text, const std::vector<std::string>& present) {
  auto bad = [&](std::string_view entry, const std::string& why) {
    std::string list;
    for (size_t i = 0; i < present.size(); ++i) {
      list += (i == 0 ? "" : ", ") + std::to_string(i) + " " + present[i];
    }
    return Error(ErrorCode::kInvalidArgument,
                 "--devices='" + std::string(text) + "': entry '" + std::string(entry) + "' " +
                     why + " (present: " + (list.empty() ? "none" : list) + ")");
  };
  std::vector<int> chosen;
  for (std::string_view entry : SplitList(text)) {
    if (entry.empty()) return bad(entry, "is empty");
    VisibleDevices one = ParseVisibleDevices(entry, present);
    if (one.physical.size() != 1) {
      bool uuid = entry.substr(0, 4) == "GPU-";
      int matches = 0;
      for (const std::string& u : present) matches += uuid && u.rfind(entry, 0) == 0;
      return bad(entry, matches > 1 ? "is an ambiguous UUID prefix"
                        : uuid      ? "names no device present"
                                    : "is not the index of a device present");
    }
    for (int c : chosen) {
      if (c == one.physical[0]) return bad(entry, "repeats a device already listed");
    }
    chosen.push_back(one.physical[0]);
  }
  return int(chosen.size());
}

// libvgpu.so next to this hami: <bin>/../lib or, installed, <bin>/../lib/hami.
std::string VgpuLibrary() {
  std::string exe = ExecutableDir();
  for (const std::string& path : {exe + "/../lib/libvgpu.so", exe + "/../lib/hami/libvgpu.so"}) {
    char real[PATH_MAX];
    if (realpath(path.c_str(), real) != nullptr) return real;
  }
  return "";
}

// Unsets every variable of the environment that is one of `keys` (a per-device key: for any
// device).
void UnsetKeys(std::initializer_list<limits::Key> keys) {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    const limits::KeyInfo* key = limits::Lookup(name, nullptr);
    if (key != nullptr && std::find(keys.begin(), keys.end(), key->key) != keys.end()) {
      names.emplace_back(name);
    }
  }
  for (const std::string& n : names) unsetenv(n.c_str());
}

void PrependPreload(const std::string& library) {
  const char* old = std::getenv("LD_PRELOAD");
  std::string value = old != nullptr ? old : "";
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find_first_of(": ", start);
    if (end == std::string::npos) end = value.size();
    if (value.compare(start, end - start, library) == 0) return;  // already there
    start = end + 1;
  }
  value = value.empty() ? library : library + ":" + value;
  setenv("LD_PRELOAD", value.c_str(), 1);
}

// What the child does between fork and exec. Prepared by the parent: the child runs only
// async-signal-safe calls (the parent may have threads from the driver it probed).
struct ChildPlan {
  std::string program;                // resolved path
  std::vector<char*> argv;            // of the command
  std::vector<char*> shell_argv;      // /bin/sh PROGRAM ARGS..., for a script without #!
  const char* limits_file = nullptr;  // bind-mounted at kLimitsFilePath when set
  std::string uid_map, gid_map;       // for a user namespace: "<id> <id> 1\n"
  sigset_t mask;                      // restored before exec
  struct sigaction sigchld = {};      // the caller's SIGCHLD disposition, restored before exec
};

// The stage at which the child failed, sent to the parent before it exits.
enum class ChildStage : int {
  kNamespace,
  kMakePrivate,
  kBindMount,
  kExec,
};

struct ChildReport {
  ChildStage stage;
  int err;         // errno of the failure
  int err_second;  // kNamespace: errno of the user-namespace attempt (0: not tried)
};

// Passed on to the command. hami waits for them synchronously (blocked, then sigwaitinfo), so
// no handler runs while the command is alive.
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// The forwarded signals and SIGCHLD, blocked in hami for the whole limited run, from before
// any library that may start a thread is loaded (a driver, or the simulated NVML's host-PID
// resolver): threads inherit the mask, and a process-directed signal goes to any thread that
// does not block it, where its default action would end hami without forwarding it. The
// caller's mask comes back on destruction (and in the command, before exec).
class BlockedSignals {
 public:
  BlockedSignals() {
    sigemptyset(&set_);
    for (int sig : kForwardedSignals) sigaddset(&set_, sig);
    sigaddset(&set_, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set_, &caller_);
  }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;
  ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &caller_, nullptr); }

  const sigset_t& set() const { return set_; }
  const sigset_t& caller() const { return caller_; }

 private:
  sigset_t set_;
  sigset_t caller_;
};

// Async-signal-safe, for the child between fork and exec: plain system calls on a raw
// descriptor.
bool WriteSmall(const char* path, const char* text, size_t size) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text, size) == ssize_t(size);
  int err = errno;
  close(fd);
  errno = err;
  return ok;
}

[[noreturn]] void ChildFail(int report_fd, ChildStage stage, int err, int err_second = 0) {
  ChildReport r{stage, err, err_second};
  ssize_t ignored = write(report_fd, &r, sizeof(r));
  (void)ignored;
  _exit(kExitNotFound);
}

// Runs in the forked child; never returns.
[[noreturn]] void ChildMain(const ChildPlan& plan, int report_fd) {
  auto fail = [report_fd](ChildStage stage, int err, int err_second = 0) {
    ChildFail(report_fd, stage, err, err_second);
  };
  if (plan.limits_file != nullptr) {
    int err_root = 0, err_user = 0;
    bool isolated = false;
    if (geteuid() == 0) {
      isolated = unshare(CLONE_NEWNS) == 0;
      if (!isolated) err_root = errno;
    }
    if (!isolated) {
      if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
        err_user = errno;
      } else if (!WriteSmall("/proc/self/setgroups", "deny", 4) ||
                 !WriteSmall("/proc/self/uid_map", plan.uid_map.data(), plan.uid_map.size()) ||
                 !WriteSmall("/proc/self/gid_map", plan.gid_map.data(), plan.gid_map.size())) {
        err_user = errno;
      } else {
        isolated = true;
      }
    }
    if (!isolated) fail(ChildStage::kNamespace, err_root, err_user);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      fail(ChildStage::kMakePrivate, errno);
    }
    if (mount(plan.limits_file, node::kLimitsFilePath, nullptr, MS_BIND, nullptr) != 0) {
      fail(ChildStage::kBindMount, errno);
    }
    // Read-only where allowed (a user namespace may not change the flags it inherited).
    mount(nullptr, node::kLimitsFilePath, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr);
  }
  sigaction(SIGCHLD, &plan.sigchld, nullptr);
  sigprocmask(SIG_SETMASK, &plan.mask, nullptr);
  execve(plan.program.c_str(), plan.argv.data(), environ);
  if (errno == ENOEXEC) execve("/bin/sh", plan.shell_argv.data(), environ);
  ChildFail(report_fd, ChildStage::kExec, errno);
}

// The program execvp would run for `name`: searched in PATH unless it has a slash.
Result<std::string> FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* env = std::getenv("PATH");
  std::string path = env != nullptr ? env : "/usr/local/bin:/bin:/usr/bin";
  int err = ENOENT;
  for (std::string_view dir : SplitList(path, ':')) {
    std::string candidate = (dir.empty() ? "." : std::string(dir)) + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    err = EACCES;
  }
  return Error::FromErrno("cannot run '" + name + "'", err);
}

std::string ChildFailureText(const ChildReport& r, const std::string& command) {
  switch (r.stage) {
    case ChildStage::kNamespace: {
      std::string text =
          "--limits-file-mount: cannot make a private mount namespace for the command: ";
      if (r.err != 0) text += std::string("unshare(CLONE_NEWNS): ") + std::strerror(r.err) + "; ";
      text += std::string("unshare(CLONE_NEWUSER|CLONE_NEWNS): ") + std::strerror(r.err_second);
      text += geteuid() == 0 ? " (a container without CAP_SYS_ADMIN, or a seccomp profile?)"
                             : " (run as root, or allow unprivileged user namespaces)";
      return text;
    }
    case ChildStage::kMakePrivate:
      return std::string(
                 "--limits-file-mount: cannot make / private in the command's mount "
                 "namespace: ") +
             std::strerror(r.err);
    case ChildStage::kBindMount:
      return std::string("--limits-file-mount: cannot bind-mount the limits file at ") +
             node::kLimitsFilePath + ": " + std::strerror(r.err);
    case ChildStage::kExec:
      return "cannot run '" + command + "': " + std::strerror(r.err);
  }
  return "the command's process failed to start";
}

// Runs the plan in a child, forwarding signals to it; returns its exit status (128+signal
// when a signal ended it) or hami's own failure.
Result<int> SpawnAndWait(ChildPlan& plan, const std::string& command, const BlockedSignals& blocked,
                         std::string* failure) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Error::FromErrno("pipe");
  UniqueFd report_read(fds[0]), report_write(fds[1]);

  // The forwarded signals and SIGCHLD are blocked (`blocked`) until the command has ended;
  // the child restores the caller's mask before exec. SIGCHLD must not be ignored, or the
  // child would be reaped without a status.
  const sigset_t& waited = blocked.set();
  plan.mask = blocked.caller();
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, &plan.sigchld);
  auto restore = [&] { sigaction(SIGCHLD, &plan.sigchld, nullptr); };

  pid_t pid = fork();
  if (pid == 0) ChildMain(plan, report_write.get());
  if (pid < 0) {
    int err = errno;
    restore();
    return Error::FromErrno("fork", err);
  }
  report_write.Reset();

  // A hangup of the terminal reaches its session's leader alone (the kernel sends it, with
  // SI_KERNEL, to no one else): when hami leads its session, the command has not had it.
  const bool session_leader = getsid(0) == getpid();
  int status = 0;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      int err = errno;
      restore();
      return Error::FromErrno("waitpid", err);
    }
    siginfo_t info;
    int sig = sigwaitinfo(&waited, &info);
    if (sig < 0 || sig == SIGCHLD) continue;
    // The terminal sends Ctrl-C and Ctrl-\ (and, when its controlling process ends, the
    // hangup) to the whole foreground process group, which includes the command: sending it
    // again would deliver it twice.
    if (info.si_code == SI_KERNEL && !(sig == SIGHUP && session_leader)) continue;
    kill(pid, sig);
  }
  restore();

  // The child wrote its report, if any, before it exited; the pipe holds it.
  ChildReport report{};
  ssize_t n;
  do {
    n = read(report_read.get(), &report, sizeof(report));
  } while (n < 0 && errno == EINTR);
  if (n == ssize_t(sizeof(report))) {
    *failure = ChildFailureText(report, command);
    if (report.stage != ChildStage::kExec) return kExitSetupFailed;
    return report.err == ENOENT ? kExitNotFound : kExitCannotExecute;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitSetupFailed;
}

// `hami run` with limits: returns the exit status. Locals clean up before the caller exits.
int RunLimited(const RunOptions& o, std::vector<std::string> cmd) {
  BlockedSignals blocked;
  auto fail = [](int status, const std::string& message) {
    std::fprintf(stderr, "hami run: %s\n", message.c_str());
    return status;
  };
  std::vector<uint64_t> memory;
  if (o.memory_given) {
    auto parsed = ParseMemory(o.memory);
    if (!parsed.ok()) return fail(kExitUsage, parsed.error().message());
    memory = std::move(parsed).value();
  }
  std::optional<uint64_t> host_memory;
  if (o.host_memory_given) {
    if (!o.oversubscribe) {
      return fail(kExitUsage, "--host-memory is the budget of --oversubscribe; give both");
    }
    auto parsed = ParseSizeOption(o.host_memory, "--host-memory");
    if (!parsed.ok()) return fail(kExitUsage, parsed.error().message());
    host_memory = *parsed;
  }
  if (o.oversubscribe && !o.memory_given) {
    return fail(kExitUsage,
                "--oversubscribe serves allocations past the memory limit from host memory; give "
                "--memory too (without a limit nothing goes past it)");
  }
  std::optional<uint32_t> sm;
  if (o.sm_given) {
    auto parsed = ParseSmPercent(o.sm);
    if (!parsed.ok()) return fail(kExitUsage, parsed.error().message());
    sm = *parsed;
  }
  // --devices names devices as the driver lists them, whatever this shell narrowed.
  if (o.devices_given) unsetenv(limits::KeyName(limits::Key::kVisibleDevices));

  std::string sim_dir = SimLibraryDir();
  std::vector<std::string> all;
  if (o.sim_profile.empty()) all = RealDriverDevices(sim_dir);
  if (all.empty()) {
    auto simulated = UseSimulator(o, sim_dir);
    if (!simulated.ok())
      return fail(SimulatorFailureStatus(o, simulated.error()), simulated.error().message());
    all = std::move(simulated).value();
  }
  std::vector<std::string> devices = InCudaOrder(all);

  int visible = int(devices.size());
  if (o.devices_given) {
    auto n = CheckDevices(o.devices, devices);
    if (!n.ok()) return fail(kExitUsage, n.error().message());
    visible = *n;
    setenv(limits::KeyName(limits::Key::kVisibleDevices), o.devices.c_str(), 1);
  }
  if (memory.size() > 1 && int(memory.size()) != visible) {
    return fail(kExitUsage, "--memory='" + o.memory + "': " + std::to_string(memory.size()) +
                                " values for " + std::to_string(visible) +
                                " device(s): give one value for every device, or one per device");
  }
  if (visible > vgpu::kMaxDevices) {
    return fail(kExitUsage, std::to_string(visible) + " devices; libvgpu.so handles at most " +
                                std::to_string(vgpu::kMaxDevices));
  }

  std::string library = VgpuLibrary();
  if (library.empty()) {
    return fail(kExitSetupFailed, "libvgpu.so not found next to this hami (looked for " +
                                      ExecutableDir() + "/../lib/libvgpu.so and " +
                                      ExecutableDir() + "/../lib/hami/libvgpu.so)");
  }
  TempDir dir(kRunDirPrefix);
  if (!dir.ok()) {
    return fail(kExitSetupFailed,
                std::string("cannot make a directory for the shared region in /tmp: ") +
                    std::strerror(errno));
  }

  // With the limits file, processes of other users (su -, SSH) may be started inside: they
  // must reach the region (created 0666 by libvgpu) through the directory.
  if (o.limits_file_mount && chmod(dir.path().c_str(), 0711) != 0) {
    return fail(kExitSetupFailed, "chmod " + dir.path() + ": " + std::strerror(errno));
  }

  // What the command's processes are told, as variables and, with the mount, in the file.
  std::vector<limits::Entry> settings;
  settings.push_back(limits::SetSharedCache(dir.File("usage.cache")));
  if (o.memory_given) {
    UnsetKeys({limits::Key::kMemoryLimit, limits::Key::kDeviceMemoryLimit});
    if (memory.size() == 1) {
      settings.push_back(limits::SetMemoryLimit(memory[0]));
    } else {
      for (size_t i = 0; i < memory.size(); ++i) {
        settings.push_back(limits::SetDeviceMemoryLimit(static_cast<int>(i), memory[i]));
      }
    }
  }
  if (sm) {
    UnsetKeys({limits::Key::kSmLimit, limits::Key::kDeviceSmLimit});
    settings.push_back(limits::SetSmLimit(*sm));
  }
  if (o.devices_given) settings.push_back(limits::SetVisibleDevices(o.devices));
  if (o.oversubscribe) {
    UnsetKeys({limits::Key::kOversubscribe, limits::Key::kOversubscribeHostLimit});
    settings.push_back(limits::SetOversubscribe(true));
    if (host_memory) settings.push_back(limits::SetOversubscribeHostLimit(*host_memory));
  }
  for (const auto& [k, v] : settings) setenv(k.c_str(), v.c_str(), 1);
  PrependPreload(library);

  ChildPlan plan;
  std::optional<node::HeldMountPoint> mount_point;
  std::string limits_path;
  if (o.limits_file_mount) {
    limits_path = dir.File("limits");
    if (Status w = limits::PublishLimitsFile(limits_path, settings); !w.ok()) {
      return fail(kExitSetupFailed, w.error().message());
    }
    auto held = node::HeldMountPoint::Hold(node::kLimitsFilePath);
    if (!held.ok()) return fail(kExitSetupFailed, "--limits-file-mount: " + held.error().message());
    mount_point.emplace(std::move(held).value());
    plan.limits_file = limits_path.c_str();
    plan.uid_map = std::to_string(geteuid()) + " " + std::to_string(geteuid()) + " 1\n";
    plan.gid_map = std::to_string(getegid()) + " " + std::to_string(getegid()) + " 1\n";
  }

  if (!o.quiet) {
    std::string memory_text = "unlimited";
    if (memory.size() == 1) memory_text = FormatBytes(memory[0]) + " per device";
    if (memory.size() > 1) {
      memory_text.clear();
      for (size_t i = 0; i < memory.size(); ++i) {
        memory_text += (i == 0 ? "" : ", ") + FormatBytes(memory[i]);
      }
    }
    if (o.oversubscribe) {
      uint64_t budget = 0;
      for (size_t i = 0; i < size_t(visible); ++i) budget += memory[memory.size() == 1 ? 0 : i];
      memory_text += ", then host memory up to " + FormatBytes(host_memory.value_or(budget)) +
                     (host_memory ? "" : " (the sum of the limits)");
    }
    std::fprintf(stderr, "hami: %d device(s), memory %s, SM %s; region %s%s\n", visible,
                 memory_text.c_str(),
                 sm && *sm != 0 && *sm != 100 ? (std::to_string(*sm) + "%").c_str() : "unlimited",
                 dir.File("usage.cache").c_str(),
                 o.limits_file_mount
                     ? (std::string(", limits file mounted at ") + node::kLimitsFilePath).c_str()
                     : "");
    std::fprintf(stderr,
                 "hami: watch it from another shell: hami top %s (the region goes when the "
                 "command ends)\n",
                 dir.File("usage.cache").c_str());
  }

  auto program = FindProgram(cmd[0]);
  if (!program.ok()) {
    return fail(program.error().sys_errno() == ENOENT ? kExitNotFound : kExitCannotExecute,
                program.error().message());
  }
  plan.program = *program;
  for (std::string& a : cmd) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  static char shell[] = "/bin/sh";
  plan.shell_argv.push_back(shell);
  plan.shell_argv.push_back(plan.program.data());
  for (size_t i = 1; i < cmd.size(); ++i) plan.shell_argv.push_back(cmd[i].data());
  plan.shell_argv.push_back(nullptr);

  std::string failure;
  auto status = SpawnAndWait(plan, cmd[0], blocked, &failure);
  if (!status.ok()) return fail(kExitSetupFailed, status.error().message());
  if (!failure.empty()) return fail(*status, failure);
  return *status;
}

// `hami run` without limits: becomes the command (no fork), as it always has.
[[noreturn]] void RunPlain(const RunOptions& o, std::vector<std::string> cmd) {
  std::string sim_dir = SimLibraryDir();
  bool use_sim = !o.sim_profile.empty() || RealDriverDevices(sim_dir).empty();
  if (use_sim) {
    if (auto simulated = UseSimulator(o, sim_dir); !simulated.ok()) {
      std::fprintf(stderr, "hami run: %s\n", simulated.error().message().c_str());
      std::exit(SimulatorFailureStatus(o, simulated.error()));
    }
  }
  std::vector<char*> argv;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  int err = errno;
  std::fprintf(stderr, "hami run: cannot run '%s': %s\n", argv[0], std::strerror(err));
  std::exit(err == ENOENT ? kExitNotFound : kExitCannotExecute);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  static RunOptions options;
  CLI::App* run = app.add_subcommand(
      "run",
      "Run a command on the GPU (the real one when present, else the simulated one), "
      "optionally held to memory and compute limits like a container");
  run->add_option("--sim", options.sim_profile,
                  "use the simulated GPU with these devices (e.g. h100-80g:2), even when a real "
                  "driver is present");
  run->add_option("--sim-state", options.sim_state, "the simulated machine's state file");
  run->add_flag("-q,--quiet", options.quiet, "do not say which GPU the command runs on");
  CLI::Option* memory = run->add_option(
      "--memory", options.memory,
      "device-memory limit: one size for every device, or a comma-separated list by CUDA "
      "ordinal (k/m/g/t binary units: 4g, 512m)");
  CLI::Option* sm =
      run->add_option("--sm", options.sm, "compute (SM) share of each device in percent");
  CLI::Option* devices =
      run->add_option("--devices", options.devices,
                      "the devices the command sees: indices or GPU- UUIDs, comma-separated");
  run->add_flag("--oversubscribe", options.oversubscribe,
                "serve allocations past --memory from pinned host memory mapped into the "
                "device (cudaMalloc and cuMemAlloc only), up to --host-memory");
  CLI::Option* host_memory = run->add_option(
      "--host-memory", options.host_memory,
      "the host memory --oversubscribe may use, all devices together (default: the sum of the "
      "memory limits)");
  run->add_flag("--limits-file-mount", options.limits_file_mount,
                std::string("also write the limits to a file mounted at ") + node::kLimitsFilePath +
                    " in a private mount namespace, so processes started without the "
                    "environment stay limited");
  static std::vector<std::string> command;
  // Not ->required(): a missing command gets the message and status of the callback below.
  run->add_option("command", command, "the command and its arguments (put them after --)");
  run->prefix_command();
  run->callback([run, memory, sm, devices, host_memory] {
    // CLI11 gives the words after "--" to `command` and leaves the "--" itself among the
    // remaining arguments: it is not part of the command.
    std::vector<std::string> cmd = command;
    for (const std::string& extra : run->remaining()) {
      if (extra != "--") cmd.push_back(extra);
    }
    if (cmd.empty()) {
      std::fprintf(stderr, "hami run: no command given (usage: hami run [OPTIONS] -- CMD)\n");
      std::exit(kExitUsage);
    }
    options.memory_given = memory->count() > 0;
    options.sm_given = sm->count() > 0;
    options.devices_given = devices->count() > 0;
    options.host_memory_given = host_memory->count() > 0;
    if (!options.Limited()) RunPlain(options, std::move(cmd));
    std::exit(RunLimited(options, std::move(cmd)));
  });
}

}  // namespace hami::cli
