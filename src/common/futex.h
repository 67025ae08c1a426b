// Waiting on a 32-bit word in shared memory (a file mapped MAP_SHARED by several processes)
// without burning CPU: the kernel's futex, in its shared (not process-private) form.
// Async-signal-safe; allocates nothing.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>

namespace hami {

// Sleeps while *word == value, at most `timeout_ns`, or until a WakeAll on the word (or a
// signal). Returns at once when the word already differs. Callers re-check in a loop.
inline void WaitWhileEqual(std::atomic<uint32_t>* word, uint32_t value, int64_t timeout_ns) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  timespec ts{time_t(timeout_ns / 1000000000), long(timeout_ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, value, &ts, nullptr, 0);
}

// Wakes every process and thread waiting on `word` (after it was changed).
inline void WakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// How WaitOnWord ended.
enum class FutexWaitEnd {
  kWoken,         // a wake on the word (or, rarely, a spurious return)
  kValueDiffers,  // the word did not hold `value` when the wait began
  kTimedOut,
  kInterrupted,  // a signal handler ran
  kFailed,       // the kernel refused the word (EFAULT: not mapped, or past the file's end)
};

// WaitWhileEqual for a word this process only hands to the kernel and never loads itself: a
// shared mapping of a file that another process may truncate answers EFAULT here where a
// load would raise SIGBUS. Says how the wait ended. A read-only mapping is enough.
inline FutexWaitEnd WaitOnWord(const uint32_t* word, uint32_t value, int64_t timeout_ns) {
  timespec ts{time_t(timeout_ns / 1000000000), long(timeout_ns % 1000000000)};
  if (syscall(SYS_futex, word, FUTEX_WAIT, value, &ts, nullptr, 0) == 0) {
    return FutexWaitEnd::kWoken;
  }
  switch (errno) {
    case EAGAIN:
      return FutexWaitEnd::kValueDiffers;
    case ETIMEDOUT:
      return FutexWaitEnd::kTimedOut;
    case EINTR:
      return FutexWaitEnd::kInterrupted;
    default:
      return FutexWaitEnd::kFailed;
  }
}

// Wakes at most one process or thread waiting on `word`: of those of equal priority, the one
// that has waited longest.
inline void WakeOne(const uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

}  // namespace hami
