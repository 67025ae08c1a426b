// Subprocess: runs a program with extra environment, talks to it over its stdin/stdout,
// and reaps it. For multi-process tests; every wait is bounded and ends on the event it
// waits for (a line on the pipe, the process's exit through its pidfd), never on a timer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/unique_fd.h"

namespace hami::testing {

class Subprocess {
 public:
  // Starts `argv` with the current environment plus `env` (a value of "" unsets).
  Subprocess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ~Subprocess();  // kills and reaps a child still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // The next line of stdout (without '\n'), or nullopt at EOF or after `timeout_ms`.
  std::optional<std::string> ReadLine(int timeout_ms = 10000);
  // Reads lines until one starts with `prefix`; returns it, or nullopt.
  std::optional<std::string> WaitForLine(const std::string& prefix, int timeout_ms = 10000);
  // Everything the child has written to stdout so far and until it exits.
  std::string ReadAll(int timeout_ms = 10000);

  // Writes `text` to the child's stdin; false when it cannot (the child closed it or exited).
  bool WriteStdin(const std::string& text);
  void CloseStdin();
  void Kill(int sig);
  // Exit status (WEXITSTATUS), 128+signal when killed, or -1 after `timeout_ms`.
  int Wait(int timeout_ms = 10000);

 private:
  pid_t pid_ = -1;
  UniqueFd in_, out_;
  UniqueFd pidfd_;  // readable once the child has exited; invalid where pidfd_open is missing
  std::string buffer_;
  bool reaped_ = false;
  int status_ = 0;
};

// Path of a test helper program built into build/tests.
std::string TestProgram(const std::string& name);

// A program run to its end: its exit status and what it wrote to stdout.
struct Ran {
  int code = -1;
  std::string out;
};
// Runs `argv` (with `env` as Subprocess takes it) to its end, at most `timeout_ms`: stdout
// captured, stderr to the test's.
Ran RunCommand(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env = {}, int timeout_ms = 60000);

// Waits for the process `pid` (a child of the caller or not) to end, at most `timeout_ms`,
// through a pidfd: true once it has exited (a child of the caller is then a zombie until
// reaped). False after the timeout, or when `pid` cannot be watched.
bool WaitForExit(pid_t pid, int timeout_ms);

// The PID of the only child of `pid` (`unshare --fork` runs its command as one), read once
// from /proc/<pid>/task/<pid>/children: call it after the child showed a sign of life (a
// line it printed), not to wait for it. 0 when `pid` has no child or more than one.
pid_t OnlyChildOf(pid_t pid);

// A bounded poll of a condition that no event announces (another process's counter in a
// shared file, the kernel's view of another process's thread): calls `condition` until it
// holds, pausing `interval_us` between calls, for at most `timeout_ms`. Returns whether it
// held. Use it only where there is no descriptor, futex or line to wait on, and say why at
// the call; the timeout bounds a failure, it is not a wait for time to pass.
template <typename Condition>
bool PollUntil(Condition condition, int timeout_ms, int interval_us = 1000) {
  const int64_t deadline = MonotonicNs() + int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    if (condition()) return true;
    if (MonotonicNs() >= deadline) return false;
    SleepForNs(int64_t(interval_us) * 1000);
  }
}

// How a thread of another process is blocked, from /proc/<pid>/task/<tid>/{stat,syscall}.
struct BlockedThread {
  char state = '?';         // 'S': asleep in the kernel, using no CPU
  long syscall = -1;        // the system call it is in, -1 when running in user space
  uintptr_t first_arg = 0;  // its first argument (a futex's address)
};
std::optional<BlockedThread> ReadBlockedThread(pid_t pid, pid_t tid);

// The start of the mapping of `path` (its offset 0) in the address space of `pid`, from
// /proc/<pid>/maps; 0 when it is not mapped there.
uintptr_t MappingStart(pid_t pid, const std::string& path);

}  // namespace hami::testing
