#include "sim/kubelet/runtime.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/strings.h"

namespace hami::sim::runtime {

namespace {

// The steps a child reports a failure at (or progress of the shim).
enum class Stage : int32_t {
  kParent,       // the shim lost its parent before it started
  kNamespace,    // unshare
  kMakePrivate,  // making every mount private
  kScratch,      // the tmpfs holding the overlay's upper layer
  kOverlay,      // the container's root
  kOpenSource,   // open_tree of a mount's source
  kReadOnly,     // mount_setattr(MOUNT_ATTR_RDONLY)
  kPivotRoot,
  kTmp,         // the container's own /tmp
  kMountPoint,  // creating a mount point (or a parent of it)
  kMount,       // move_mount of a source onto its mount point
  kJoin,        // setns into a running container
  kFork,        // forking the command's process
  kProc,        // the container's /proc
  kChdir,
  kRedirect,  // the standard descriptors
  kExec,
};

const char* StageText(Stage s) {
  switch (s) {
    case Stage::kParent:
      return "the shim lost its parent";
    case Stage::kNamespace:
      return "making the namespaces";
    case Stage::kMakePrivate:
      return "making every mount private";
    case Stage::kScratch:
      return "mounting the tmpfs for the overlay's upper layer";
    case Stage::kOverlay:
      return "mounting the overlay root (lower layer: the host's /)";
    case Stage::kOpenSource:
      return "opening the source (open_tree)";
    case Stage::kReadOnly:
      return "making it read-only";
    case Stage::kPivotRoot:
      return "pivot_root into the overlay";
    case Stage::kTmp:
      return "mounting the container's /tmp";
    case Stage::kMountPoint:
      return "creating the mount point";
    case Stage::kMount:
      return "binding";
    case Stage::kJoin:
      return "joining the container's mount and PID namespaces";
    case Stage::kFork:
      return "forking the command's process";
    case Stage::kProc:
      return "mounting /proc";
    case Stage::kChdir:
      return "changing to the working directory";
    case Stage::kRedirect:
      return "setting up the standard descriptors";
    case Stage::kExec:
      return "executing the command";
  }
  return "starting";
}

enum class ReportKind : int32_t {
  kFailed,   // stage, index, err
  kStarted,  // value: the command's PID (in the caller's PID namespace)
  kRunning,  // the command's program was executed
  kExited,   // value: the command's wait status
};

// One message from a shim or a command's process; written whole (smaller than PIPE_BUF).
struct Report {
  ReportKind kind;
  Stage stage;
  int32_t index;  // the mount step, or -1
  int32_t err;
  int32_t value;
};

// One bind of a host path into the container, prepared by the parent.
struct MountStep {
  std::string what;                  // "mount 2 (/a on /b, ro)", for messages
  std::string source;                // host path
  std::string target;                // container path
  std::vector<std::string> parents;  // container paths to create first, outermost first
  bool is_dir = false;
  bool read_only = false;
};

// What the command's process does between fork and exec.
struct CommandPlan {
  std::vector<std::string> candidates;  // programs to try, in order
  std::vector<std::string> argv_store, env_store;
  std::vector<char*> argv, envp;
  std::string working_dir;
  int fds[3] = {-1, -1, -1};
  bool mount_proc = false;
};

// What the shim does: make a container (steps) or join one (join_fd).
struct ShimPlan {
  pid_t parent = 0;
  bool new_pid_ns = false;
  std::vector<MountStep> steps;
  std::vector<int> tree_fds;  // filled in the shim, one per step
  std::string overlay_options;
  int join_fd = -1;  // a pidfd of the container's first process, for StartExec
  CommandPlan command;
};

// glibc 2.36 declares pidfd_open and pidfd_send_signal without C linkage for C++: the system
// calls directly.
int PidfdOpen(pid_t pid) { return int(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int signal) {
  return int(syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

constexpr char kScratch[] = "/tmp";  // in the shim's private namespace, over the host's /tmp
constexpr char kScratchUpper[] = "/tmp/upper";
constexpr char kScratchWork[] = "/tmp/work";
constexpr char kScratchRoot[] = "/tmp/root";

// ---- the children: async-signal-safe calls only ----

// Sends `r` with the descriptor `passed` (SCM_RIGHTS).
void SendWithFd(int fd, const Report& r, int passed) {
  iovec iov{const_cast<Report*>(&r), sizeof(r)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &passed, sizeof(passed));
  ssize_t ignored = sendmsg(fd, &msg, MSG_NOSIGNAL);
  (void)ignored;
}

void Send(int fd, const Report& r) {
  ssize_t ignored = write(fd, &r, sizeof(r));
  (void)ignored;
}

[[noreturn]] void Fail(int fd, Stage stage, int index, int err) {
  Send(fd, Report{ReportKind::kFailed, stage, index, err, 0});
  _exit(127);
}

bool MakeDir(const char* path) { return mkdir(path, 0755) == 0 || errno == EEXIST; }

// Creates the mount point of `s` (and its parents) in the container's root, unless present.
bool MakeMountPoint(const MountStep& s) {
  for (const std::string& p : s.parents) {
    if (!MakeDir(p.c_str())) return false;
  }
  struct stat st;
  if (lstat(s.target.c_str(), &st) == 0) return true;
  if (errno != ENOENT) return false;
  if (s.is_dir) return MakeDir(s.target.c_str());
  int fd = open(s.target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) return errno == EEXIST;
  close(fd);
  return true;
}

// Closes every descriptor from 3 up except `a` and `b` (a < b).
void CloseAllExcept(int a, int b) {
  if (a > 3) close_range(3, unsigned(a) - 1, 0);
  if (b > a + 1) close_range(unsigned(a) + 1, unsigned(b) - 1, 0);
  close_range(unsigned(b) + 1, ~0u, 0);
}

[[noreturn]] void CommandMain(const CommandPlan& plan, int report_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with its shim
  if (plan.mount_proc &&
      mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    Fail(report_fd, Stage::kProc, -1, errno);
  }
  if (chdir(plan.working_dir.c_str()) != 0) Fail(report_fd, Stage::kChdir, -1, errno);
  for (int i = 0; i < 3; ++i) {
    if (plan.fds[i] >= 0 && dup2(plan.fds[i], i) != i) Fail(report_fd, Stage::kRedirect, i, errno);
  }
  // The command inherits only its standard descriptors (the report pipe closes at exec).
  close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int err = ENOENT;
  for (const std::string& program : plan.candidates) {
    execve(program.c_str(), plan.argv.data(), plan.envp.data());
    if (errno == EACCES) {
      err = EACCES;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      err = errno;
      break;
    }
  }
  Fail(report_fd, Stage::kExec, -1, err);
}

// Builds the container's root and mounts, and pivots into it. Runs in the shim.
void MakeContainer(ShimPlan& plan, int report_fd) {
  if (unshare(CLONE_NEWNS | (plan.new_pid_ns ? CLONE_NEWPID : 0)) != 0) {
    Fail(report_fd, Stage::kNamespace, -1, errno);
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    Fail(report_fd, Stage::kMakePrivate, -1, errno);
  }
  // Every source is taken while the host's tree is still visible.
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const MountStep& s = plan.steps[i];
    int fd =
        open_tree(AT_FDCWD, s.source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (fd < 0) Fail(report_fd, Stage::kOpenSource, int(i), errno);
    if (s.read_only) {
      mount_attr attr{};
      attr.attr_set = MOUNT_ATTR_RDONLY;
      if (mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
        Fail(report_fd, Stage::kReadOnly, int(i), errno);
      }
    }
    plan.tree_fds[i] = fd;
  }
  if (mount("tmpfs", kScratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0 ||
      !MakeDir(kScratchUpper) || !MakeDir(kScratchWork) || !MakeDir(kScratchRoot)) {
    Fail(report_fd, Stage::kScratch, -1, errno);
  }
  if (mount("overlay", kScratchRoot, "overlay", 0, plan.overlay_options.c_str()) != 0) {
    Fail(report_fd, Stage::kOverlay, -1, errno);
  }
  if (chdir(kScratchRoot) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 ||
      umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) {
    Fail(report_fd, Stage::kPivotRoot, -1, errno);
  }
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=01777") != 0) {
    Fail(report_fd, Stage::kTmp, -1, errno);
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    if (!MakeMountPoint(plan.steps[i])) Fail(report_fd, Stage::kMountPoint, int(i), errno);
    if (move_mount(plan.tree_fds[i], "", AT_FDCWD, plan.steps[i].target.c_str(),
                   MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      Fail(report_fd, Stage::kMount, int(i), errno);
    }
    close(plan.tree_fds[i]);
  }
}

[[noreturn]] void ShimMain(ShimPlan& plan, int report_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.parent) Fail(report_fd, Stage::kParent, -1, ESRCH);
  signal(SIGCHLD, SIG_DFL);
  if (plan.join_fd >= 0) {
    // The pidfd names the container's first process: its namespaces are joined at once, and
    // the mount namespace's root (the container's, after its pivot_root) becomes ours.
    if (setns(plan.join_fd, CLONE_NEWNS | CLONE_NEWPID) != 0) {
      Fail(report_fd, Stage::kJoin, -1, errno);
    }
  } else {
    MakeContainer(plan, report_fd);
  }

  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) Fail(report_fd, Stage::kFork, -1, errno);
  pid_t pid = fork();
  if (pid < 0) Fail(report_fd, Stage::kFork, -1, errno);
  if (pid == 0) {
    close(exec_pipe[0]);
    CommandMain(plan.command, exec_pipe[1]);
  }
  close(exec_pipe[1]);
  // The shim keeps only its pipes: a descriptor of the caller's (a pipe's write end) must
  // not stay open here for the command's life.
  if (report_fd < exec_pipe[0]) {
    CloseAllExcept(report_fd, exec_pipe[0]);
  } else {
    CloseAllExcept(exec_pipe[0], report_fd);
  }
  // The caller gets a pidfd of the command, taken before the command can be reaped, so that
  // its signals never reach a reused PID.
  int pidfd = PidfdOpen(pid);
  if (pidfd < 0) {
    kill(pid, SIGKILL);
    Fail(report_fd, Stage::kFork, -1, errno);
  }
  SendWithFd(report_fd, Report{ReportKind::kStarted, Stage::kExec, -1, 0, int32_t(pid)}, pidfd);
  close(pidfd);
  // The command's process reports a failure before exec, or closes its end by executing.
  Report failure{};
  ssize_t n;
  do {
    n = read(exec_pipe[0], &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == ssize_t(sizeof(failure))) {
    Send(report_fd, failure);
  } else {
    Send(report_fd, Report{ReportKind::kRunning, Stage::kExec, -1, 0, 0});
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) Fail(report_fd, Stage::kFork, -1, errno);
  }
  Send(report_fd, Report{ReportKind::kExited, Stage::kExec, -1, 0, status});
  _exit(0);
}

// ---- the parent ----

bool HasDotDot(std::string_view path) {
  for (std::string_view part : SplitString(path, '/', false)) {
    if (part == "..") return true;
  }
  return false;
}

Status CheckContainerPath(const std::string& what, const std::string& path) {
  if (path.empty() || path[0] != '/' || HasDotDot(path) || path.find('\0') != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": container path '" + path + "' is not absolute or holds '..'");
  }
  if (path.find_first_not_of('/') == std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, what + ": cannot mount over the container's root");
  }
  return OkStatus();
}

// The parents of an absolute `path`, outermost first: "/a/b/c" -> "/a", "/a/b".
std::vector<std::string> ParentsOf(const std::string& path) {
  std::vector<std::string> out;
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (slash > 0 && path[slash - 1] != '/') out.push_back(path.substr(0, slash));
  }
  return out;
}

std::string Describe(const std::string& label, const std::string& source, const std::string& target,
                     bool read_only) {
  return label + " (" + source + " on " + target + (read_only ? ", ro" : "") + ")";
}

// A bind step for `source` (must exist on the host) at `target`.
Result<MountStep> Step(std::string what, const std::string& source, std::string target,
                       bool read_only, bool must_be_file = false) {
  HAMI_TRY(CheckContainerPath(what, target));
  if (source.empty() || source[0] != '/') {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": host path '" + source + "' is not absolute");
  }
  struct stat st;
  if (stat(source.c_str(), &st) != 0) {
    int err = errno;
    return Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                 what + ": host path " + source + ": " + std::strerror(err), err);
  }
  if (must_be_file && !S_ISREG(st.st_mode)) {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": host path " + source + " is not a regular file");
  }
  MountStep s;
  s.what = std::move(what);
  s.source = source;
  s.target = std::move(target);
  s.parents = ParentsOf(s.target);
  s.is_dir = S_ISDIR(st.st_mode);
  s.read_only = read_only;
  return s;
}

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Result<std::vector<MountStep>> PlanMounts(const ContainerSpec& spec) {
  std::vector<MountStep> steps;
  for (const char* base : {"/dev", "/sys"}) {
    steps.push_back(HAMI_TRY(Step(std::string("the host's ") + base, base, base, false)));
  }
  const kubelet::ContainerAllocation& r = spec.response;
  for (size_t i = 0; i < r.mounts.size(); ++i) {
    const kubelet::Mount& m = r.mounts[i];
    steps.push_back(HAMI_TRY(
        Step(Describe("mount " + std::to_string(i), m.host_path, m.container_path, m.read_only),
             m.host_path, m.container_path, m.read_only)));
  }
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const kubelet::DeviceSpec& d = r.devices[i];
    steps.push_back(
        HAMI_TRY(Step(Describe("device " + std::to_string(i), d.host_path, d.container_path, false),
                      d.host_path, d.container_path, false)));
  }
  for (size_t i = 0; i < spec.host_mounts.size(); ++i) {
    const kubelet::Mount& m = spec.host_mounts[i];
    steps.push_back(HAMI_TRY(Step(
        Describe("host mount " + std::to_string(i), m.host_path, m.container_path, m.read_only),
        m.host_path, m.container_path, m.read_only)));
  }
  for (const std::string& lib : spec.driver_libs) {
    std::string target = std::string(kDriverLibDir) + "/" + BaseName(lib);
    steps.push_back(
        HAMI_TRY(Step(Describe("driver library", lib, target, true), lib, target, true, true)));
  }
  if (!spec.sim_state.empty()) {
    steps.push_back(
        HAMI_TRY(Step(Describe("simulated GPU state", spec.sim_state, kSimStatePath, false),
                      spec.sim_state, kSimStatePath, false, true)));
    std::string resolver = spec.sim_state + ".hostpid";
    std::string target = std::string(kSimStatePath) + ".hostpid";
    struct stat st;
    if (stat(resolver.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      steps.push_back(
          HAMI_TRY(Step(Describe("simulated GPU host-PID resolver", resolver, target, true),
                        resolver, target, true)));
    }
  }
  return steps;
}

// Fills the command's part of a plan: its program candidates, argv and environment.
Status PlanCommand(const std::vector<std::string>& command, const Env& env,
                   const std::string& working_dir, const int (&fds)[3], CommandPlan* plan) {
  if (command.empty() || command[0].empty()) {
    return Error(ErrorCode::kInvalidArgument, "no command given for the container");
  }
  if (working_dir.empty() || working_dir[0] != '/') {
    return Error(ErrorCode::kInvalidArgument,
                 "working directory '" + working_dir + "' is not absolute");
  }
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument, "environment variable name '" + k + "' is invalid");
    }
  }
  const std::string& name = command[0];
  if (name.find('/') != std::string::npos) {
    plan->candidates.push_back(name);
  } else {
    auto path = env.find("PATH");
    std::string_view dirs = path != env.end()
                                ? std::string_view(path->second)
                                : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for (std::string_view dir : SplitString(dirs, ':', false)) {
      plan->candidates.push_back((dir.empty() ? std::string(".") : std::string(dir)) + "/" + name);
    }
  }
  plan->argv_store = command;
  for (const auto& [k, v] : env) plan->env_store.push_back(k + "=" + v);
  // A sanitizer build's runtime options belong to whoever runs the stand-in, not to the
  // container: without them every sanitized program in it would stop at its first line.
  for (const char* option : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"}) {
    const char* v = getenv(option);
    if (v != nullptr && env.find(option) == env.end()) {
      plan->env_store.push_back(std::string(option) + "=" + v);
    }
  }
  for (std::string& a : plan->argv_store) plan->argv.push_back(a.data());
  plan->argv.push_back(nullptr);
  for (std::string& e : plan->env_store) plan->envp.push_back(e.data());
  plan->envp.push_back(nullptr);
  plan->working_dir = working_dir;
  for (int i = 0; i < 3; ++i) plan->fds[i] = fds[i];
  return OkStatus();
}

Status NeedRoot() {
  if (geteuid() != 0) {
    return Error(ErrorCode::kPermission,
                 "the simulated container runtime needs root (mount namespaces, overlayfs, "
                 "pivot_root); effective UID is " +
                     std::to_string(geteuid()));
  }
  return OkStatus();
}

// Reads one report (a datagram of the shim's socket), and the descriptor it carries, if any,
// into `fd_out`; false at end of stream.
Result<bool> ReadReport(int fd, Report* r, UniqueFd* fd_out = nullptr) {
  iovec iov{r, sizeof(*r)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Error::FromErrno("reading the container shim's report");
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int passed;
    std::memcpy(&passed, CMSG_DATA(c), sizeof(passed));
    UniqueFd owned(passed);
    if (fd_out != nullptr) *fd_out = std::move(owned);
  }
  if (n == 0) return false;
  if (n != ssize_t(sizeof(*r))) {
    return Error(ErrorCode::kInternal, "the container shim's report was cut short");
  }
  return true;
}

int StatusOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 128;
}

Error FailureError(const Report& r, const std::vector<MountStep>& steps,
                   const std::string& program) {
  std::string text = "container: ";
  if (r.index >= 0 && size_t(r.index) < steps.size() && r.stage != Stage::kRedirect) {
    text += steps[size_t(r.index)].what + ": ";
  }
  text += StageText(r.stage);
  if (r.stage == Stage::kExec) text += " '" + program + "'";
  if (r.stage == Stage::kRedirect) text += " (descriptor " + std::to_string(r.index) + ")";
  text += std::string(": ") + std::strerror(r.err);
  ErrorCode code =
      r.stage == Stage::kExec && r.err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo;
  return Error(code, std::move(text), r.err);
}

}  // namespace

namespace internal {

struct Spawner {
  // Forks the shim for `plan` and waits until the command runs or fails.
  static Result<std::unique_ptr<Process>> Spawn(ShimPlan& plan, const std::string& program) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
      return Error::FromErrno("socketpair");
    }
    UniqueFd read_end(fds[0]), write_end(fds[1]);
    plan.parent = getpid();
    plan.tree_fds.assign(plan.steps.size(), -1);
    pid_t shim = fork();
    if (shim < 0) return Error::FromErrno("fork");
    if (shim == 0) {
      read_end.Reset();
      ShimMain(plan, write_end.get());
    }
    write_end.Reset();
    std::unique_ptr<Process> p(new Process());
    p->shim_ = shim;
    p->report_ = std::move(read_end);
    for (;;) {
      Report r{};
      UniqueFd passed;
      auto got = ReadReport(p->report_.get(), &r, &passed);
      if (!got.ok()) return std::move(got).error();
      if (!*got) {
        int status = 0;
        while (waitpid(shim, &status, 0) < 0 && errno == EINTR) {
        }
        p->shim_ = -1;
        return Error(ErrorCode::kInternal,
                     "container: the shim ended before the command ran "
                     "(status " +
                         std::to_string(StatusOf(status)) + ")");
      }
      switch (r.kind) {
        case ReportKind::kStarted:
          p->pid_ = pid_t(r.value);
          p->pidfd_ = std::move(passed);
          break;
        case ReportKind::kFailed: {
          Error e = FailureError(r, plan.steps, program);
          // The shim waits for its command, reports and exits: reap it.
          (void)p->Wait();
          return e;
        }
        case ReportKind::kRunning:
          if (!p->pidfd_.valid()) {
            return Error(ErrorCode::kInternal, "container: the shim sent no pidfd of the command");
          }
          return p;
        case ReportKind::kExited:
          return Error(ErrorCode::kInternal, "container: the command ended before it ran");
      }
    }
  }

  static Result<std::unique_ptr<Container>> Start(const ContainerSpec& spec) {
    HAMI_TRY(NeedRoot());
    ShimPlan plan;
    plan.new_pid_ns = spec.pid_namespace == PidNamespace::kPrivate;
    plan.steps = HAMI_TRY(PlanMounts(spec));
    plan.overlay_options =
        std::string("lowerdir=/,upperdir=") + kScratchUpper + ",workdir=" + kScratchWork;
    Env env = ContainerEnv(spec);
    const int fds[3] = {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd};
    HAMI_TRY(PlanCommand(spec.command, env, spec.working_dir, fds, &plan.command));
    plan.command.mount_proc = true;
    std::unique_ptr<Container> c(new Container());
    c->init_ = HAMI_TRY(Spawn(plan, spec.command[0]));
    c->env_ = std::move(env);
    return c;
  }

  static Result<std::unique_ptr<Process>> Exec(Container& c, const ExecSpec& spec) {
    HAMI_TRY(NeedRoot());
    if (c.init_->status_.has_value()) {
      return Error(ErrorCode::kNotFound, "container: its command has ended; nothing to exec in");
    }
    ShimPlan plan;
    plan.join_fd = c.init_->pidfd_.get();
    const int fds[3] = {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd};
    HAMI_TRY(PlanCommand(spec.command, spec.env ? *spec.env : c.env_, spec.working_dir, fds,
                         &plan.command));
    return Spawn(plan, spec.command[0]);
  }
};

}  // namespace internal

Process::~Process() {
  if (shim_ < 0) return;
  if (!status_.has_value()) {
    if (pidfd_.valid()) PidfdSendSignal(pidfd_.get(), SIGKILL);
    kill(shim_, SIGKILL);
  }
  while (waitpid(shim_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

Result<int> Process::Wait() {
  if (status_.has_value()) return *status_;
  for (;;) {
    Report r{};
    auto got = ReadReport(report_.get(), &r);
    if (!got.ok()) return std::move(got).error();
    if (*got && r.kind != ReportKind::kExited) continue;
    int shim_status = 0;
    while (waitpid(shim_, &shim_status, 0) < 0) {
      if (errno != EINTR) return Error::FromErrno("waitpid (container shim)");
    }
    shim_ = -1;
    pidfd_.Reset();
    if (!*got) {
      return Error(ErrorCode::kInternal,
                   "container: the shim ended without the command's status "
                   "(shim status " +
                       std::to_string(StatusOf(shim_status)) + ")");
    }
    status_ = StatusOf(r.value);
    return *status_;
  }
}

Status Process::Kill(int signal) {
  if (status_.has_value() || !pidfd_.valid()) return OkStatus();
  if (PidfdSendSignal(pidfd_.get(), signal) != 0 && errno != ESRCH) {
    return Error::FromErrno("sending signal " + std::to_string(signal) + " to PID " +
                            std::to_string(pid_));
  }
  return OkStatus();
}

Result<std::unique_ptr<Process>> Container::StartExec(const ExecSpec& spec) {
  return internal::Spawner::Exec(*this, spec);
}

Result<int> Container::Exec(const ExecSpec& spec) {
  std::unique_ptr<Process> p = HAMI_TRY(StartExec(spec));
  return p->Wait();
}

Env ContainerEnv(const ContainerSpec& spec) {
  Env env = spec.image_env;
  for (const auto& [k, v] : spec.response.envs) env[k] = v;
  return env;
}

Result<std::unique_ptr<Container>> StartContainer(const ContainerSpec& spec) {
  return internal::Spawner::Start(spec);
}

Result<int> RunContainer(const ContainerSpec& spec) {
  std::unique_ptr<Container> c = HAMI_TRY(StartContainer(spec));
  return c->init().Wait();
}

}  // namespace hami::sim::runtime
