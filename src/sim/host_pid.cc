#include "sim/host_pid.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/unique_fd.h"
#include "sim/procfs.h"

namespace hami::sim {

namespace {

constexpr char kDirSuffix[] = ".hostpid";
constexpr char kSocketName[] = "resolver.sock";
constexpr char kLockName[] = "resolver.lock";
constexpr int kMaxPassedFds = 8;  // more than one is a malformed request; all are closed

std::string ResolverDir(const std::string& state_path) { return state_path + kDirSuffix; }

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

int64_t MonotonicMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Waits for `events` on `fd` until `deadline_ms` (CLOCK_MONOTONIC): false on timeout or error.
bool WaitFor(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    const int64_t left = deadline_ms - MonotonicMs();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, int(left));
    if (n < 0 && errno == EINTR) continue;
    return n > 0 && (p.revents & events) != 0;
  }
}

// The descriptors a fork child must not keep: it runs no serving thread, so the socket would
// swallow requests after this process dies.
std::atomic<int> g_socket_fd{-1};
std::atomic<int> g_lock_fd{-1};

void CloseInForkChild() {
  for (std::atomic<int>* fd : {&g_socket_fd, &g_lock_fd}) {
    const int v = fd->exchange(-1);
    if (v >= 0) close(v);
  }
}

// One request: credentials and descriptors taken from `msg`, answered on the single passed
// descriptor when there is exactly one; every passed descriptor is closed.
void Answer(const msghdr& msg, ssize_t size, const char* data) {
  pid_t pid = 0;
  std::vector<int> fds;
  bool have_creds = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len == CMSG_LEN(sizeof(ucred))) {
      ucred cred;
      std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
      pid = cred.pid;
      have_creds = true;
    } else if (c->cmsg_type == SCM_RIGHTS) {
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
  }
  const bool well_formed = size == ssize_t(sizeof(kAsk)) &&
                           std::memcmp(data, kAsk, sizeof(kAsk)) == 0 && have_creds &&
                           (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0 && fds.size() == 1;
  if (fds.size() == 1) {
    char answer[kAnswerSize];
    const int32_t value = well_formed && pid > 0 ? int32_t(pid) : 0;
    std::memcpy(answer, kAnswer, sizeof(kAnswer));
    std::memcpy(answer + sizeof(kAnswer), &value, sizeof(value));
    // A fresh packet pair never has a full queue; never wait on an asker.
    (void)send(fds[0], answer, sizeof(answer), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  for (int fd : fds) close(fd);
}

void* Serve(void* arg) {
  const int fd = int(reinterpret_cast<intptr_t>(arg));
  for (;;) {
    char data[sizeof(kAsk) + 1];
    alignas(
        cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
    iovec iov{data, sizeof(data)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR || errno == ENOMEM || errno == ENOBUFS) continue;
      return nullptr;  // the socket is gone: nothing left to serve
    }
    Answer(msg, n, data);
  }
}

}  // namespace

std::string HostPidSocketPath(const std::string& state_path) {
  return ResolverDir(state_path) + "/" + kSocketName;
}

bool StartHostPidResolver(const std::string& state_path) {
  const std::string dir = ResolverDir(state_path);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  const std::string lock_path = dir + "/" + kLockName;
  UniqueFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!lock.valid()) return false;
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (fcntl(lock.get(), F_SETLK, &whole) != 0) return false;  // a live process serves

  const std::string path = HostPidSocketPath(state_path);
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) return false;
  UniqueFd sock(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return false;
  const int on = 1;
  if (setsockopt(sock.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) return false;
  // Whatever is at the path was left by a resolver that died (we hold the lock).
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return false;
  if (bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return false;
  if (chmod(path.c_str(), 0666) != 0) return false;

  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const int rc =
      pthread_create(&thread, &attr, Serve, reinterpret_cast<void*>(intptr_t(sock.get())));
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    unlink(path.c_str());
    return false;
  }
  // Both stay open for the life of the process.
  g_socket_fd.store(sock.Release());
  g_lock_fd.store(lock.Release());
  pthread_atfork(nullptr, nullptr, CloseInForkChild);
  return true;
}

void ServeHostPids(const std::string& state_path, uint64_t host_ns) {
  static std::once_flag once;
  std::call_once(once, [&] {
    if (host_ns == 0 || procfs::PidNsInode() != host_ns) return;
    // The serving thread runs this library's code: it must stay loaded when its user
    // dlcloses it (a tool that opens NVML for a query and closes it again).
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&ServeHostPids), &self) == 0 || self.dli_fname == nullptr ||
        dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) == nullptr) {
      return;
    }
    // Refused when another live process serves already, or when the path is unusable: then
    // processes that cannot see the host's /proc stay unresolved.
    (void)StartHostPidResolver(state_path);
  });
}

pid_t AskHostPid(const std::string& state_path, int timeout_ms) {
  const int64_t deadline = MonotonicMs() + timeout_ms;
  sockaddr_un addr;
  if (!FillAddress(HostPidSocketPath(state_path), &addr)) return 0;
  UniqueFd sock(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return 0;
  // Connected, so that a full resolver queue shows as POLLOUT not ready.
  if (connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 0;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  UniqueFd mine(pair[0]);
  UniqueFd theirs(pair[1]);

  ucred cred{getpid(), geteuid(), getegid()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<char*>(kAsk), sizeof(kAsk)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_CREDENTIALS;
  c->cmsg_len = CMSG_LEN(sizeof(ucred));
  std::memcpy(CMSG_DATA(c), &cred, sizeof(cred));
  c = CMSG_NXTHDR(&msg, c);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  const int passed = theirs.get();
  std::memcpy(CMSG_DATA(c), &passed, sizeof(passed));
  for (;;) {
    if (sendmsg(sock.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == ssize_t(sizeof(kAsk))) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN || !WaitFor(sock.get(), POLLOUT, deadline)) return 0;
  }
  // Only the resolver holds the other end now: its answer, or end of file if it dies first.
  theirs.Reset();
  if (!WaitFor(mine.get(), POLLIN, deadline)) return 0;
  char answer[kAnswerSize + 1];
  const ssize_t n = recv(mine.get(), answer, sizeof(answer), MSG_DONTWAIT);
  if (n != ssize_t(kAnswerSize) || std::memcmp(answer, kAnswer, sizeof(kAnswer)) != 0) return 0;
  int32_t pid;
  std::memcpy(&pid, answer + sizeof(kAnswer), sizeof(pid));
  return pid > 0 ? pid_t(pid) : 0;
}

pid_t PidInNamespace(uint64_t host_ns, const std::string& state_path) {
  if (host_ns == 0) return 0;
  if (procfs::PidNsInode() == host_ns) return getpid();
  // Look in this /proc for a process of the host's namespace: PID 1, else one of our
  // ancestors (PID 1 of another container may not be readable). Its NStgid has one entry per
  // level from the procfs's namespace down to the host's, so our entry at that depth is our
  // PID there.
  const std::vector<pid_t> mine = procfs::NsTgids();
  std::vector<pid_t> candidates = {1};
  pid_t p = procfs::ParentPid();
  for (int depth = 0; p > 1 && depth < 64; ++depth) {
    candidates.push_back(p);
    p = procfs::ParentPid(p);
  }
  for (pid_t c : candidates) {
    if (procfs::PidNsInode(c) != host_ns) continue;
    const size_t depth = procfs::NsTgids(c).size();
    if (depth == 0 || mine.size() < depth) return 0;
    return mine[depth - 1];
  }
  // This /proc does not show the host's namespace.
  return AskHostPid(state_path);
}

pid_t FindPidByNamespacePid(uint64_t pidns, pid_t ns_pid, uint64_t start_ticks) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return 0;
  pid_t found = 0;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(e->d_name, &end, 10);
    if (errno != 0 || end == e->d_name || *end != '\0' || v <= 0 || v > 0x7fffffff) continue;
    const pid_t pid = pid_t(v);
    if (procfs::PidNsInode(pid) != pidns) continue;
    const std::vector<pid_t> ids = procfs::NsTgids(pid);
    if (ids.empty() || ids.back() != ns_pid) continue;
    if (start_ticks != 0 && procfs::StartTicks(pid) != start_ticks) continue;
    found = pid;
    break;
  }
  closedir(dir);
  return found;
}

}  // namespace hami::sim
