#include "support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/clock.h"

namespace hami::testing {
namespace {

UniqueFd OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return UniqueFd(int(syscall(SYS_pidfd_open, pid, 0)));
#else
  (void)pid;
  return UniqueFd();
#endif
}

// Waits until `fd` is readable, at most until `deadline_ns`; false at the deadline.
bool PollReadable(int fd, int64_t deadline_ns) {
  for (;;) {
    const int64_t left_ns = deadline_ns - MonotonicNs();
    if (left_ns <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int rc = poll(&p, 1, int((left_ns + 999'999) / 1'000'000));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// The state letter of /proc/<pid>/task/<tid>/stat ('S', 'R', 'Z', ...); '\0' when there is
// no such thread.
char ThreadState(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '\0';
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return '\0';
  return line[paren + 2];
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) std::abort();
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    for (const auto& [k, v] : env) {
      if (v.empty()) {
        unsetenv(k.c_str());
      } else {
        setenv(k.c_str(), v.c_str(), 1);
      }
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "Subprocess: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  UniqueFd in_read(in[0]), out_write(out[1]);
  in_.Reset(in[1]);
  out_.Reset(out[0]);
  // The child cannot be reaped before this (only Wait reaps), so the PID is still its own.
  if (pid_ > 0) pidfd_ = OpenPidfd(pid_);
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait(10000);
  }
}

std::optional<std::string> Subprocess::ReadLine(int timeout_ms) {
  int64_t deadline = MonotonicNs() + int64_t(timeout_ms) * 1000000;
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (!PollReadable(out_.get(), deadline)) return std::nullopt;
    char buf[4096];
    ssize_t n = read(out_.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer_.append(buf, size_t(n));
  }
}

std::optional<std::string> Subprocess::WaitForLine(const std::string& prefix, int timeout_ms) {
  int64_t deadline = MonotonicNs() + int64_t(timeout_ms) * 1000000;
  for (;;) {
    int left = int((deadline - MonotonicNs()) / 1000000);
    if (left <= 0) return std::nullopt;
    auto line = ReadLine(left);
    if (!line) return std::nullopt;
    if (line->rfind(prefix, 0) == 0) return line;
  }
}

std::string Subprocess::ReadAll(int timeout_ms) {
  std::string all;
  while (auto line = ReadLine(timeout_ms)) all += *line + "\n";
  all += buffer_;
  buffer_.clear();
  return all;
}

bool Subprocess::WriteStdin(const std::string& text) {
  // A child that has gone makes the write raise SIGPIPE, which would end the test: ignored
  // for the write, which then fails with EPIPE.
  struct sigaction ignore = {}, old = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  size_t done = 0;
  while (done < text.size() && in_.valid()) {
    const ssize_t n = write(in_.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  sigaction(SIGPIPE, &old, nullptr);
  return done == text.size();
}

void Subprocess::CloseStdin() { in_.Reset(); }

void Subprocess::Kill(int sig) {
  if (!reaped_) kill(pid_, sig);
}

int Subprocess::Wait(int timeout_ms) {
  if (reaped_) return status_;
  const int64_t deadline = MonotonicNs() + int64_t(timeout_ms) * 1000000;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      pidfd_.Reset();
      return status_;
    }
    if (r < 0 && errno != EINTR) return -1;
    if (pidfd_.valid()) {
      // Readable once the child has exited: the next waitpid reaps it.
      if (!PollReadable(pidfd_.get(), deadline)) return -1;
      continue;
    }
    // No pidfd (a kernel before 5.3): poll the exit, bounded by the deadline.
    if (MonotonicNs() >= deadline) return -1;
    SleepForNs(2'000'000);
  }
}

std::string TestProgram(const std::string& name) {
  return std::string(HAMI_TEST_BIN_DIR) + "/" + name;
}

bool WaitForExit(pid_t pid, int timeout_ms) {
  UniqueFd fd = OpenPidfd(pid);
  if (fd.valid()) return PollReadable(fd.get(), MonotonicNs() + int64_t(timeout_ms) * 1'000'000);
  if (errno != ENOSYS) return false;
  // A kernel before 5.3 has no pidfd: poll the process's state (a zombie or gone has exited).
  return PollUntil(
      [pid] {
        const char state = ThreadState(pid, pid);
        return state == '\0' || state == 'Z' || state == 'X';
      },
      timeout_ms, 2000);
}

pid_t OnlyChildOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t child = 0, another = 0;
  if (!(in >> child) || child <= 0) return 0;
  if (in >> another) return 0;
  return child;
}

std::optional<BlockedThread> ReadBlockedThread(pid_t pid, pid_t tid) {
  const std::string task = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid);
  BlockedThread t;
  t.state = ThreadState(pid, tid);
  if (t.state == '\0') return std::nullopt;
  std::ifstream in(task + "/syscall");
  std::string first;
  if (!(in >> first)) return std::nullopt;
  if (first == "running") return t;
  t.syscall = std::strtol(first.c_str(), nullptr, 10);
  std::string arg;
  if (in >> arg) t.first_arg = uintptr_t(std::strtoull(arg.c_str(), nullptr, 16));
  return t;
}

uintptr_t MappingStart(pid_t pid, const std::string& path) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(in, line);) {
    // "start-end perms offset dev inode   path"
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, mapped;
    if (!(fields >> range >> perms >> offset >> dev >> inode >> mapped)) continue;
    if (mapped != path || std::strtoull(offset.c_str(), nullptr, 16) != 0) continue;
    return uintptr_t(std::strtoull(range.c_str(), nullptr, 16));
  }
  return 0;
}

Ran RunCommand(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               int timeout_ms) {
  Subprocess p(argv, env);
  Ran r;
  r.out = p.ReadAll(timeout_ms);
  r.code = p.Wait(timeout_ms);
  return r;
}

}  // namespace hami::testing
