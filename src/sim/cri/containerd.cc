#include "sim/cri/containerd.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "common/clock.h"
#include "common/file.h"
#include "common/strings.h"
#include "log/log.h"
#include "sim/spawn.h"

extern char** environ;

namespace hami::sim::cri {

namespace {

constexpr char kRunDir[] = "/run/containerd";
constexpr char kShimSocketDir[] = "/run/containerd/s";

int PidfdOpen(pid_t pid) { return int(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int signal) {
  return int(syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

// Waits up to `timeout_ms` for the process behind `pidfd` to end.
bool WaitPidfd(int pidfd, int64_t timeout_ms) {
  const int64_t deadline = MonotonicNs() + timeout_ms * 1'000'000;
  for (;;) {
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    pollfd p{pidfd, POLLIN, 0};
    const int rc = poll(&p, 1, int(std::max<int64_t>(left_ms, 0)));
    if (rc > 0) return true;
    if (rc == 0 || (rc < 0 && errno != EINTR)) return false;
  }
}

std::string TomlString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

Status MakeDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return OkStatus();
  return Error::FromErrno("mkdir " + path);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The last `lines` lines of a log, indented, for an error message.
std::string LogTail(const std::string& path, size_t lines = 15) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "\n    " + all[i];
  }
  return out.empty() ? " (empty)" : out;
}

// Starts argv (argv[0] absolute) in a session of its own, stdin from /dev/null, stdout and
// stderr to `out_fd`, with the caller's environment but PATH set to `path_env`.
Result<pid_t> Spawn(const std::vector<std::string>& argv, int out_fd, const std::string& path_env) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PATH=", 5) != 0) env.emplace_back(*e);
  }
  env.push_back("PATH=" + path_env);
  return SpawnInSession(argv, env, out_fd);
}

// Runs argv to its end within `timeout_ms`; its exit status (128 + signal) and its output.
struct Finished {
  int status = 0;
  std::string output;
};
Result<Finished> RunCapture(const std::vector<std::string>& argv, int64_t timeout_ms,
                            const std::string& path_env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Error::FromErrno("pipe");
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const pid_t pid = HAMI_TRY(Spawn(argv, write_end.get(), path_env));
  write_end.Reset();
  Finished f;
  const int64_t deadline = MonotonicNs() + timeout_ms * 1'000'000;
  bool timed_out = false;
  for (;;) {
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    if (left_ms <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{read_end.get(), POLLIN, 0};
    const int rc = poll(&p, 1, int(left_ms));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[4096];
    const ssize_t n = read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (f.output.size() < (1u << 20)) f.output.append(buf, size_t(n));
  }
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Error(ErrorCode::kTimeout, argv[0] + " did not finish within " +
                                          std::to_string(timeout_ms) +
                                          " ms; its output: " + f.output);
  }
  f.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return f;
}

// PATH for containerd and ctr: the directories of the programs found, then the caller's PATH.
std::string ProgramPath(const std::vector<std::string>& programs) {
  std::string path;
  std::set<std::string> seen;
  for (const std::string& p : programs) {
    const std::string d = DirName(p);
    if (seen.insert(d).second) path += (path.empty() ? "" : ":") + d;
  }
  const char* env = getenv("PATH");
  if (env != nullptr && *env != '\0') path += std::string(":") + env;
  return path;
}

// Removes a tree without crossing into another filesystem or following links.
Status RemoveTree(const std::string& path) {
  if (!Exists(path)) return OkStatus();
  static thread_local int first_errno;
  static thread_local const char* failed;
  static thread_local std::string failed_path;
  first_errno = 0;
  failed = nullptr;
  const int rc = nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int type, struct FTW*) {
        const int r = type == FTW_DP ? rmdir(p) : unlink(p);
        if (r != 0 && first_errno == 0) {
          first_errno = errno;
          failed = type == FTW_DP ? "rmdir" : "unlink";
          failed_path = p;
        }
        return 0;
      },
      32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  if (rc != 0) return Error::FromErrno("walking " + path);
  if (first_errno != 0) {
    return Error::FromErrno(std::string("removing ") + path + ": " + failed + " " + failed_path,
                            first_errno);
  }
  return OkStatus();
}

// Directories of a tree, deepest first (the tree's root last).
std::vector<std::string> DirsDeepestFirst(const std::string& root) {
  static thread_local std::vector<std::string>* out;
  std::vector<std::string> dirs;
  out = &dirs;
  nftw(
      root.c_str(),
      [](const char* p, const struct stat*, int type, struct FTW*) {
        if (type == FTW_DP) out->emplace_back(p);
        return 0;
      },
      32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  return dirs;
}

std::vector<pid_t> ReadCgroupProcs(const std::string& dir) {
  std::vector<pid_t> pids;
  std::ifstream in(dir + "/cgroup.procs");
  for (long pid; in >> pid;) pids.push_back(pid_t(pid));
  return pids;
}

void KeepFirst(Status& first, Status next) {
  if (first.ok() && !next.ok()) first = std::move(next);
}

bool ValidCgroupComponent(std::string_view c) {
  if (c.empty() || c == "." || c == "..") return false;
  return std::all_of(c.begin(), c.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
  });
}

}  // namespace

ContainerdPaths ContainerdPathsOf(const std::string& dir) {
  ContainerdPaths p;
  p.dir = dir;
  p.config = dir + "/config.toml";
  p.socket = dir + "/containerd.sock";
  p.log = dir + "/containerd.log";
  p.root = dir + "/root";
  p.state = dir + "/state";
  p.cni_conf = dir + "/cni/conf";
  p.cni_bin = dir + "/cni/bin";
  p.runc_root = dir + "/state/runc";
  return p;
}

Status ValidateContainerdOptions(const ContainerdOptions& o) {
  auto bad = [](const std::string& what) { return Error(ErrorCode::kInvalidArgument, what); };
  if (o.dir.empty() || o.dir[0] != '/' || o.dir.back() == '/' ||
      o.dir.find("/../") != std::string::npos || o.dir.find("//") != std::string::npos) {
    return bad("containerd dir '" + o.dir +
               "': must be an absolute path without a trailing '/', '//' or '..'");
  }
  // The ttrpc socket is the longest path containerd binds: sun_path holds 107 bytes and a NUL.
  const std::string ttrpc = ContainerdPathsOf(o.dir).socket + ".ttrpc";
  if (ttrpc.size() >= sizeof(sockaddr_un::sun_path)) {
    return bad("containerd dir '" + o.dir + "': too long for a Unix socket path (" + ttrpc +
               " is " + std::to_string(ttrpc.size()) + " bytes, at most " +
               std::to_string(sizeof(sockaddr_un::sun_path) - 1) + ")");
  }
  if (o.cgroup_parent.empty() || o.cgroup_parent[0] == '/') {
    return bad("cgroup parent '" + o.cgroup_parent +
               "': must be a relative path (inside containerd's own cgroup)");
  }
  for (std::string_view c : SplitString(o.cgroup_parent, '/', false)) {
    if (!ValidCgroupComponent(c)) {
      return bad("cgroup parent '" + o.cgroup_parent + "': component '" + std::string(c) +
                 "' is empty, '.', '..' or not [A-Za-z0-9._-]");
    }
  }
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn",
                                                "error", "fatal", "panic"};
  if (kLevels.count(o.log_level) == 0) {
    return bad("containerd log level '" + o.log_level +
               "': not one of trace, debug, info, warn, error, fatal, panic");
  }
  if (o.start_timeout_ms <= 0 || o.stop_timeout_ms <= 0 || o.import_timeout_ms <= 0) {
    return bad("containerd timeouts must be positive");
  }
  if (Result<oci::ImageReference> r = oci::ParseImageReference(o.sandbox_image); !r.ok()) {
    return std::move(r).error().Context("sandbox image");
  }
  return OkStatus();
}

std::string ContainerdConfigToml(const ContainerdOptions& options, const std::string& runc) {
  const ContainerdPaths p = ContainerdPathsOf(options.dir);
  const std::string cri = R"([plugins."io.containerd.grpc.v1.cri")";
  std::string t;
  t += "# Generated by hami-cpp (src/sim/cri/containerd.cc) for one simulated node.\n";
  t += "version = 2\n";
  t += "root = " + TomlString(p.root) + "\n";
  t += "state = " + TomlString(p.state) + "\n";
  // Without the CRI plugin this containerd is of no use: fail at start, not at the first pod.
  t += "required_plugins = [\"io.containerd.grpc.v1.cri\"]\n";
  t += "\n[grpc]\n";
  t += "  address = " + TomlString(p.socket) + "\n";
  t += "\n[plugins]\n";
  t += "  [plugins.\"io.containerd.internal.v1.opt\"]\n";
  t += "    path = " + TomlString(p.root + "/opt") + "\n";
  t += "  " + cri + "]\n";
  t += "    sandbox_image = " + TomlString(options.sandbox_image) + "\n";
  // No CAP_SYS_RESOURCE here: a negative OOM score adjustment would fail every container.
  t += "    restrict_oom_score_adj = true\n";
  t += "    stream_server_address = \"127.0.0.1\"\n";
  t += "    stream_server_port = \"0\"\n";
  t += "    " + cri + ".cni]\n";
  t += "      bin_dir = " + TomlString(p.cni_bin) + "\n";
  t += "      conf_dir = " + TomlString(p.cni_conf) + "\n";
  t += "    " + cri + ".containerd]\n";
  t += "      snapshotter = \"overlayfs\"\n";
  t += "      default_runtime_name = \"runc\"\n";
  t += "      " + cri + ".containerd.runtimes.runc]\n";
  t += "        runtime_type = \"io.containerd.runc.v2\"\n";
  t += "        " + cri + ".containerd.runtimes.runc.options]\n";
  t += "          BinaryName = " + TomlString(runc) + "\n";
  t += "          Root = " + TomlString(p.runc_root) + "\n";
  // cgroupfs: a relative cgroups path is placed under runc's own cgroup (containerd's).
  t += "          SystemdCgroup = false\n";
  return t;
}

Result<std::string> FindProgram(const std::string& program, const std::string& package) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    if (executable(program)) return program;
    return Error(ErrorCode::kNotFound, program + " is not an executable file: install Debian's " +
                                           package + " package (apt-get install " + package + ")");
  }
  const char* env = getenv("PATH");
  // runc lives in /usr/sbin, which a user's PATH may lack: the system directories follow.
  const std::string path = std::string(env != nullptr ? env : "") +
                           ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (std::string_view d : SplitString(path, ':', true)) {
    const std::string candidate = std::string(d) + "/" + program;
    if (d[0] == '/' && executable(candidate)) return candidate;
  }
  return Error(ErrorCode::kNotFound, program + " not found in PATH (" +
                                         (env != nullptr ? env : "") +
                                         ") or the system "
                                         "directories: install Debian's " +
                                         package + " package (apt-get install " + package + ")");
}

Result<std::unique_ptr<Containerd>> Containerd::Start(const ContainerdOptions& options) {
  HAMI_TRY(ValidateContainerdOptions(options));
  const std::string containerd = HAMI_TRY(FindProgram(options.containerd, "containerd"));
  const std::string ctr = HAMI_TRY(FindProgram(options.ctr, "containerd"));
  const std::string shim = HAMI_TRY(FindProgram(options.shim, "containerd"));
  const std::string runc = HAMI_TRY(FindProgram(options.runc, "runc"));
  if (geteuid() != 0) {
    return Error(ErrorCode::kPermission,
                 "containerd for a simulated node needs root (mounts, cgroups, namespaces); "
                 "effective UID is " +
                     std::to_string(geteuid()));
  }

  std::unique_ptr<Containerd> self(new Containerd());
  self->options_ = options;
  self->paths_ = ContainerdPathsOf(options.dir);
  self->ctr_path_ = ctr;
  const ContainerdPaths& p = self->paths_;

  // A socket that answers belongs to a containerd already running: refuse to start a second.
  if (Exists(p.socket)) {
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, p.socket.c_str(), p.socket.size() + 1);
    if (connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      return Error(ErrorCode::kBusy, "a containerd already serves " + p.socket +
                                         "; stop it first (its log: " + p.log + ")");
    }
    unlink(p.socket.c_str());
  }
  for (const std::string& d : {p.dir, p.root, p.state, p.dir + "/cni", p.cni_conf, p.cni_bin}) {
    HAMI_TRY(MakeDir(d, 0755));
  }
  for (const char* d : {kRunDir, kShimSocketDir}) {
    if (!Exists(d)) self->created_run_dirs_.insert(self->created_run_dirs_.begin(), d);
  }
  {
    UniqueFd fd = HAMI_TRY(OpenRegularFile(p.config, O_WRONLY | O_CREAT | O_TRUNC, 0644));
    HAMI_TRY(WriteAll(fd.get(), ContainerdConfigToml(options, runc)));
  }
  self->containerd_path_ = containerd;
  self->program_path_ = ProgramPath({containerd, shim, runc});
  self->client_ = std::make_unique<CriClient>(p.socket);
  if (Status launched = self->Launch(/*truncate_log=*/true); !launched.ok()) {
    Status cleaned = self->Stop();
    return cleaned.ok() ? std::move(launched).error()
                        : std::move(launched).error().Context(
                              "(and cleaning up: " + cleaned.error().message() + ")");
  }
  // Where the pods' cgroups go: containerd's own cgroups (which its shims and their runc
  // share) joined with the relative parent.
  Result<std::vector<CgroupDir>> own = CgroupDirsOfProcess(self->pid_);
  if (!own.ok()) {
    Error e = std::move(own).error().Context("containerd's cgroups");
    if (Status cleaned = self->Stop(); !cleaned.ok()) {
      return std::move(e).Context(cleaned.error().message() + "; and before that");
    }
    return e;
  }
  for (const CgroupDir& d : *own) {
    self->pod_cgroup_roots_.push_back(CgroupDir{d.hierarchy, d.dir + "/" + options.cgroup_parent});
  }
  if (Status recorded = self->WriteCleanupRecord(); !recorded.ok()) {
    Error e = std::move(recorded).error().Context("recording what to clean after a crash");
    (void)self->Stop();
    return e;
  }
  return self;
}

Status Containerd::WriteCleanupRecord() const {
  std::string text = "cgroup_parent " + options_.cgroup_parent + "\n";
  for (const CgroupDir& d : pod_cgroup_roots_) text += "root " + d.hierarchy + " " + d.dir + "\n";
  UniqueFd fd = HAMI_TRY(
      OpenRegularFile(paths_.dir + "/" + kCleanupRecord, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  return WriteAll(fd.get(), text);
}

Status Containerd::CleanUpAfter(const std::string& dir, int64_t timeout_ms) {
  std::unique_ptr<Containerd> self(new Containerd());
  self->options_.dir = dir;
  self->options_.stop_timeout_ms = timeout_ms;
  self->paths_ = ContainerdPathsOf(dir);
  self->stopped_ = true;  // the destructor does nothing more
  const std::string record_path = dir + "/" + kCleanupRecord;
  auto record = Exists(record_path) ? ReadFileToString(record_path, 1 << 16)
                                    : Result<std::string>(std::string());
  if (record.ok()) {
    for (std::string_view line : SplitString(*record, '\n', true)) {
      std::vector<std::string_view> f = SplitString(line, ' ', true);
      if (f.size() == 2 && f[0] == "cgroup_parent")
        self->options_.cgroup_parent = std::string(f[1]);
      if (f.size() == 3 && f[0] == "root") {
        self->pod_cgroup_roots_.push_back(CgroupDir{std::string(f[1]), std::string(f[2])});
      }
    }
  } else {
    return std::move(record).error().Context("cleaning after containerd " + dir);
  }
  // A containerd of this directory that still runs goes first (it would start shims again).
  for (pid_t pid : ProcessesWithArgument(self->paths_.config)) {
    if (CommandName(pid) != "containerd") continue;
    UniqueFd fd(PidfdOpen(pid));
    if (!fd.valid()) continue;
    PidfdSendSignal(fd.get(), SIGKILL);
    WaitPidfd(fd.get(), timeout_ms);
  }
  self->created_run_dirs_ = {kShimSocketDir, kRunDir};  // removed only when left empty
  Status first;
  KeepFirst(first, self->KillPodProcesses());
  KeepFirst(first, self->KillShims());
  KeepFirst(first, self->Unmount());
  KeepFirst(first, self->RemoveCgroups());
  KeepFirst(first, self->RemoveRunEntries());
  KeepFirst(first, self->RemoveFiles());
  if (!first.ok()) return std::move(first).error().Context("cleaning after containerd " + dir);
  return first;
}

Status Containerd::Launch(bool truncate_log) {
  const ContainerdPaths& p = paths_;
  UniqueFd log = HAMI_TRY(
      OpenRegularFile(p.log, O_WRONLY | O_CREAT | (truncate_log ? O_TRUNC : O_APPEND), 0644));
  const int64_t t0 = MonotonicNs();
  pid_ = HAMI_TRY(Spawn({containerd_path_, "--config", p.config, "--log-level", options_.log_level},
                        log.get(), program_path_));
  pidfd_.Reset(PidfdOpen(pid_));
  if (!pidfd_.valid()) {
    const int err = errno;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return Error::FromErrno("pidfd_open of containerd", err);
  }
  // Ready when CRI answers. Until the socket exists there is nothing to dial; its creation
  // is not announced, so poll for it (every 5 ms), watching containerd's own end meanwhile.
  const int64_t deadline = t0 + options_.start_timeout_ms * 1'000'000;
  Status ready = Error(ErrorCode::kTimeout, "");
  while (MonotonicNs() < deadline) {
    if (WaitPidfd(pidfd_.get(), 0)) {
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
      pidfd_.Reset();
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return Error(ErrorCode::kUnavailable, "containerd exited with status " +
                                                std::to_string(code) + " before answering on " +
                                                p.socket + "; the end of " + p.log + ":" +
                                                LogTail(p.log));
    }
    if (!Exists(p.socket)) {
      SleepForNs(5'000'000);
      continue;
    }
    const int64_t left_ms = std::max<int64_t>((deadline - MonotonicNs()) / 1'000'000, 1);
    Result<v1::VersionResponse> v = client_->Version(std::min<int64_t>(left_ms, 250), true);
    if (v.ok()) {
      ready = OkStatus();
      break;
    }
    ready = std::move(v).error();
  }
  if (!ready.ok()) {
    const pid_t pid = pid_;
    (void)StopProcess();
    return Error(ErrorCode::kTimeout,
                 "containerd (pid " + std::to_string(pid) + ") did not answer CRI Version on " +
                     p.socket + " within " + std::to_string(options_.start_timeout_ms) + " ms (" +
                     (ready.error().text().empty() ? "no socket" : ready.error().message()) +
                     "); the end of " + p.log + ":" + LogTail(p.log));
  }
  start_ms_ = (MonotonicNs() - t0) / 1'000'000;
  return OkStatus();
}

std::optional<int> Containerd::WaitForExit(int64_t timeout_ms) {
  if (pid_ <= 0) return exit_status_;
  if (!WaitPidfd(pidfd_.get(), timeout_ms)) return std::nullopt;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  pidfd_.Reset();
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_status_;
}

Status Containerd::Restart() {
  if (stopped_) return Error(ErrorCode::kUnavailable, "containerd " + paths_.dir + " was stopped");
  if (pid_ > 0)
    return Error(ErrorCode::kBusy,
                 "containerd (pid " + std::to_string(pid_) + ") still runs; nothing to restart");
  // A socket left by the dead process would look like a live containerd to nobody: replace it.
  unlink(paths_.socket.c_str());
  HAMI_TRY(Launch(/*truncate_log=*/false));
  exit_status_.reset();
  return OkStatus();
}

Containerd::~Containerd() {
  if (Status s = Stop(); !s.ok()) {
    HAMI_LOG(kWarn, "event=containerd_cleanup_failed dir=%s error=%s",
             log::Quoted(paths_.dir).c_str(), log::Quoted(s.error().text()).c_str());
  }
}

std::string Containerd::PodCgroupParent(const std::string& pod) const {
  return options_.cgroup_parent + "/" + pod;
}

Status Containerd::ImportImage(const std::string& tarball, const std::string& image) {
  if (pid_ <= 0) return Error(ErrorCode::kUnavailable, "containerd is not running");
  Finished f = HAMI_TRY(RunCapture(
      {ctr_path_, "--address", paths_.socket, "--namespace", "k8s.io", "image", "import", tarball},
      options_.import_timeout_ms, ProgramPath({ctr_path_})));
  if (f.status != 0) {
    return Error(ErrorCode::kIo, "ctr image import " + tarball + " into " + paths_.socket +
                                     ": exit status " + std::to_string(f.status) + ": " + f.output);
  }
  if (Result<v1::Image> img = client_->ImageStatus(image); !img.ok()) {
    return std::move(img).error().Context("after importing " + tarball + " (ctr said: " + f.output +
                                          ")");
  }
  return OkStatus();
}

Status Containerd::Stop() {
  if (stopped_) return OkStatus();
  stopped_ = true;
  Status first;
  KeepFirst(first, StopProcess());
  KeepFirst(first, KillPodProcesses());
  KeepFirst(first, KillShims());
  KeepFirst(first, Unmount());
  KeepFirst(first, RemoveCgroups());
  KeepFirst(first, RemoveRunEntries());
  KeepFirst(first, RemoveFiles());
  client_.reset();
  if (!first.ok()) return std::move(first).error().Context("stopping containerd " + paths_.dir);
  return first;
}

Status Containerd::StopProcess() {
  if (pid_ <= 0) return OkStatus();
  PidfdSendSignal(pidfd_.get(), SIGTERM);
  if (!WaitPidfd(pidfd_.get(), options_.stop_timeout_ms)) {
    PidfdSendSignal(pidfd_.get(), SIGKILL);
    WaitPidfd(pidfd_.get(), options_.stop_timeout_ms);
  }
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  pidfd_.Reset();
  return OkStatus();
}

Status Containerd::KillPodProcesses() {
  // Whatever still runs in the pods' cgroups (a pod not removed, a container's leftover
  // child): SIGKILL, until every cgroup.procs is empty.
  const int64_t deadline = MonotonicNs() + options_.stop_timeout_ms * 1'000'000;
  for (;;) {
    size_t seen = 0;
    for (const CgroupDir& root : pod_cgroup_roots_) {
      if (!Exists(root.dir)) continue;
      for (const std::string& d : DirsDeepestFirst(root.dir)) {
        for (pid_t pid : ReadCgroupProcs(d)) {
          ++seen;
          kill(pid, SIGKILL);
        }
      }
    }
    if (seen == 0) return OkStatus();
    if (MonotonicNs() >= deadline) {
      return Error(ErrorCode::kBusy, std::to_string(seen) +
                                         " processes still in the cgroups under " +
                                         options_.cgroup_parent + " after SIGKILL");
    }
    // Killed processes leave cgroup.procs as the kernel reaps them: no event to wait on.
    SleepForNs(5'000'000);
  }
}

Status Containerd::KillShims() {
  std::vector<UniqueFd> pidfds;
  for (pid_t pid : ProcessesWithArgument(paths_.socket)) {
    if (CommandName(pid).rfind("containerd-shim", 0) != 0) continue;
    for (const std::string& s : UnixSocketPathsOf(pid)) {
      if (s.rfind(std::string(kShimSocketDir) + "/", 0) == 0) shim_sockets_.push_back(s);
    }
    UniqueFd fd(PidfdOpen(pid));
    if (!fd.valid()) continue;
    PidfdSendSignal(fd.get(), SIGKILL);
    pidfds.push_back(std::move(fd));
  }
  for (const UniqueFd& fd : pidfds) {
    if (!WaitPidfd(fd.get(), options_.stop_timeout_ms)) {
      return Error(ErrorCode::kBusy,
                   "a containerd shim of " + paths_.socket + " did not end after SIGKILL");
    }
  }
  return OkStatus();
}

Status Containerd::Unmount() {
  // Sandboxes' /dev/shm, containers' root filesystems, stacked mounts: detach until none is
  // left (a bounded number of rounds).
  for (int round = 0; round < 8; ++round) {
    std::vector<std::string> mounts = HAMI_TRY(MountPointsUnder(paths_.dir));
    if (mounts.empty()) return OkStatus();
    for (const std::string& m : mounts) umount2(m.c_str(), MNT_DETACH);
  }
  std::vector<std::string> left = HAMI_TRY(MountPointsUnder(paths_.dir));
  if (left.empty()) return OkStatus();
  return Error(ErrorCode::kBusy,
               "mounts left under " + paths_.dir + " after detaching: " + left[0] +
                   (left.size() > 1 ? " and " + std::to_string(left.size() - 1) + " more" : ""));
}

Status Containerd::RemoveCgroups() {
  Status first;
  for (const CgroupDir& root : pod_cgroup_roots_) {
    if (!Exists(root.dir)) continue;
    for (const std::string& d : DirsDeepestFirst(root.dir)) {
      if (rmdir(d.c_str()) != 0 && errno != ENOENT) {
        KeepFirst(first, Error::FromErrno("rmdir cgroup " + d));
      }
    }
  }
  // The cgroup parent's own components ("hami-sim" of "hami-sim/node-a"), when no other node
  // uses them.
  for (const CgroupDir& root : pod_cgroup_roots_) {
    std::string d = root.dir;
    for (auto n = std::count(options_.cgroup_parent.begin(), options_.cgroup_parent.end(), '/');
         n > 0; --n) {
      d = DirName(d);
      if (rmdir(d.c_str()) != 0) break;
    }
  }
  return first;
}

Status Containerd::RemoveRunEntries() {
  Status first;
  for (const std::string& s : shim_sockets_) {
    if (unlink(s.c_str()) != 0 && errno != ENOENT) {
      KeepFirst(first, Error::FromErrno("removing shim socket " + s));
    }
  }
  for (const std::string& d : created_run_dirs_) {
    rmdir(d.c_str());  // left when another containerd uses it
  }
  return first;
}

Status Containerd::RemoveFiles() {
  // Never walk into a mount: a container's root filesystem still mounted here would take
  // the walk into what it shows.
  std::vector<std::string> mounts = HAMI_TRY(MountPointsUnder(paths_.dir));
  if (!mounts.empty()) {
    return Error(ErrorCode::kBusy, "not removing " + paths_.root + " and " + paths_.state + ": " +
                                       mounts[0] + " is still mounted");
  }
  Status first;
  KeepFirst(first, RemoveTree(paths_.root));
  KeepFirst(first, RemoveTree(paths_.state));
  KeepFirst(first, RemoveTree(paths_.dir + "/cni"));
  for (const std::string& f : {paths_.config, paths_.socket, paths_.socket + ".ttrpc",
                               paths_.dir + "/" + kCleanupRecord}) {
    if (unlink(f.c_str()) != 0 && errno != ENOENT) {
      KeepFirst(first, Error::FromErrno("removing " + f));
    }
  }
  return first;
}

}  // namespace hami::sim::cri
