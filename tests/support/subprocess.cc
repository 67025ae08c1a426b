#include "support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"

namespace hami::testing {

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
  close(in[0]);
  close(out[1]);
  in_ = in[1];
  out_ = out[0];
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait(10000);
  }
  if (in_ >= 0) close(in_);
  if (out_ >= 0) close(out_);
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
    int64_t left_ms = (deadline - MonotonicNs()) / 1000000;
    if (left_ms <= 0) return std::nullopt;
    pollfd p{out_, POLLIN, 0};
    int rc = poll(&p, 1, int(left_ms));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return std::nullopt;
    char buf[4096];
    ssize_t n = read(out_, buf, sizeof(buf));
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

void Subprocess::CloseStdin() {
  if (in_ >= 0) close(in_);
  in_ = -1;
}

void Subprocess::Kill(int sig) {
  if (!reaped_) kill(pid_, sig);
}

int Subprocess::Wait(int timeout_ms) {
  if (reaped_) return status_;
  int64_t deadline = MonotonicNs() + int64_t(timeout_ms) * 1000000;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    if (MonotonicNs() >= deadline) return -1;
    usleep(2000);
  }
}

std::string TestProgram(const std::string& name) {
  return std::string(HAMI_TEST_BIN_DIR) + "/" + name;
}

}  // namespace hami::testing
