// Process-shared robust mutexes, for locks that live in shared files.
//
// A holder killed at any instruction releases the lock to the next locker, which learns it
// (EOWNERDEAD), repairs whatever the dead holder may have left half-done, and marks the
// mutex consistent. RobustLockGuard wraps that protocol: give it a repair function.
#pragma once

#include <pthread.h>

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
  RobustLockGuard(const RobustLockGuard&) = delete;
  RobustLockGuard& operator=(const RobustLockGuard&) = delete;
  ~RobustLockGuard();

  // False only when the mutex is unrecoverable (a repairer unlocked without marking it
  // consistent: a bug) or another error; the caller must not touch the protected data.
  bool locked() const { return locked_; }
  // True when this acquisition repaired after a dead holder.
  bool repaired() const { return repaired_; }

 private:
  pthread_mutex_t* m_;
  bool locked_ = false;
  bool repaired_ = false;
};

}  // namespace hami
