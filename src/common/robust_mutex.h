// Process-shared robust mutexes, for locks that live in shared files.
//
// A holder killed at any instruction releases the lock to the next locker, which learns it
// (EOWNERDEAD), repairs whatever the dead holder may have left half-done, and marks the
// mutex consistent. RobustLockGuard wraps that protocol: give it a repair function.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstdint>

#include "common/result.h"

namespace hami {

// Initializes `m` in place as PTHREAD_PROCESS_SHARED + PTHREAD_MUTEX_ROBUST. Only the
// creator of the shared memory calls it, before publishing the memory to others.
Status InitRobustMutex(pthread_mutex_t* m);

class RobustLockGuard {
 public:
  // Locks `m`. When the previous holder died holding it, runs `repair()` (still holding the
  // lock) and then marks the mutex consistent. `repair` may be null.
  RobustLockGuard(pthread_mutex_t* m, void (*repair)(void* arg), void* arg);
  // The same, giving up after `timeout_ns` (> 0; CLOCK_MONOTONIC): for a tool that must not
  // hang on a lock another party holds forever (or a lock word forged to look held).
  RobustLockGuard(pthread_mutex_t* m, void (*repair)(void* arg), void* arg, int64_t timeout_ns);
  RobustLockGuard(const RobustLockGuard&) = delete;
  RobustLockGuard& operator=(const RobustLockGuard&) = delete;
  ~RobustLockGuard();

  // False only when the mutex is unrecoverable (a repairer unlocked without marking it
  // consistent: a bug) or another error; the caller must not touch the protected data.
  bool locked() const { return locked_; }
  // True when this acquisition repaired after a dead holder.
  bool repaired() const { return repaired_; }
  // True when the timed constructor gave up.
  bool timed_out() const { return timed_out_; }

 private:
  void Locked(int rc, void (*repair)(void* arg), void* arg);

  pthread_mutex_t* m_;
  bool locked_ = false;
  bool repaired_ = false;
  bool timed_out_ = false;
};

// The thread that holds `m` as its lock word says (glibc's robust mutexes keep the holder's
// TID there), 0 when it is free. A read of shared memory, for reports: whoever wrote the word
// may have lied.
pid_t RobustMutexHolder(const pthread_mutex_t* m);

}  // namespace hami
