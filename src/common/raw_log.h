// An allocation-free logger for code that runs inside other people's processes (the
// simulated driver, the interposer) and in signal paths: each line is formatted into a
// stack buffer (capped at kMaxLine bytes, truncated with "...") and written with a single
// write(2) to stderr, so lines from many threads and processes do not interleave.
//
// Thread-safe. Async-signal-safe as far as vsnprintf of integers and strings is (glibc's
// is in practice); never allocates or locks.
#pragma once

#include <atomic>
#include <cstdarg>

namespace hami {

enum class LogLevel : int { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

class RawLogger {
 public:
  static constexpr int kMaxLine = 1024;

  // `tag` prefixes every line ("hami-sim"); it must outlive the logger (a literal).
  constexpr RawLogger(const char* tag, LogLevel level) : tag_(tag), level_(int(level)) {}

  void set_level(LogLevel level) { level_.store(int(level), std::memory_order_relaxed); }
  LogLevel level() const { return LogLevel(level_.load(std::memory_order_relaxed)); }
  bool Enabled(LogLevel level) const {
    return int(level) <= level_.load(std::memory_order_relaxed);
  }

  void Log(LogLevel level, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
  void VLog(LogLevel level, const char* fmt, va_list args) const
      __attribute__((format(printf, 3, 0)));
  // Written whatever the level, even 0 (off), tagged `level`: for what a user must not miss
  // by turning the log down (a limit that could not be read and fails closed).
  void Always(LogLevel level, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));

  // Where lines go; tests point it at a pipe. Default: 2 (stderr).
  void set_fd(int fd) { fd_.store(fd, std::memory_order_relaxed); }

 private:
  void Write(LogLevel level, const char* fmt, va_list args) const
      __attribute__((format(printf, 3, 0)));

  const char* tag_;
  std::atomic<int> level_;
  std::atomic<int> fd_{2};
};

}  // namespace hami
