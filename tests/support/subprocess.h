// Subprocess: runs a program with extra environment, talks to it over its stdin/stdout,
// and reaps it. For multi-process tests; every wait is bounded.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

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

  void CloseStdin();
  void Kill(int sig);
  // Exit status (WEXITSTATUS), 128+signal when killed, or -1 after `timeout_ms`.
  int Wait(int timeout_ms = 10000);

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buffer_;
  bool reaped_ = false;
  int status_ = 0;
};

// Path of a test helper program built into build/tests.
std::string TestProgram(const std::string& name);

}  // namespace hami::testing
