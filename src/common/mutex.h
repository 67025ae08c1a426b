// A process-local mutex the thread-safety analysis understands, and its scoped lock.
//
// For state of one process only (never in shared memory: the region uses robust_mutex.h).
// ResetInForkChild() gives a fork child a fresh, unlocked mutex: the thread that held it in
// the parent does not exist in the child. Call it only from a pthread_atfork child handler,
// where no other thread runs.
#pragma once

#include <memory>
#include <mutex>

#include "common/thread_annotations.h"

namespace hami {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  void ResetInForkChild() NO_THREAD_SAFETY_ANALYSIS {
    std::destroy_at(&mu_);
    std::construct_at(&mu_);
  }

 private:
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace hami
