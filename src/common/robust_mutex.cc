#include "common/robust_mutex.h"

#include <time.h>

#include <atomic>
#include <cerrno>

#include "common/sanitizers.h"
#if HAMI_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace hami {

Status InitRobustMutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  int rc = pthread_mutexattr_init(&attr);
  if (rc == 0) rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (rc == 0) rc = pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) return Error::FromErrno("pthread_mutex_init (robust, process-shared)", rc);
  return OkStatus();
}

RobustLockGuard::RobustLockGuard(pthread_mutex_t* m, void (*repair)(void* arg), void* arg) : m_(m) {
  Locked(pthread_mutex_lock(m_), repair, arg);
}

RobustLockGuard::RobustLockGuard(pthread_mutex_t* m, void (*repair)(void* arg), void* arg,
                                 int64_t timeout_ns)
    : m_(m) {
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  const int64_t ns = int64_t(deadline.tv_nsec) + timeout_ns % 1'000'000'000;
  deadline.tv_sec += time_t(timeout_ns / 1'000'000'000 + ns / 1'000'000'000);
  deadline.tv_nsec = long(ns % 1'000'000'000);
  int rc;
#if HAMI_TSAN
  // ThreadSanitizer's runtime does not intercept pthread_mutex_clocklock: it is told of the
  // attempt and its outcome, or it would see every later unlock as one of an unlocked mutex.
  __tsan_mutex_pre_lock(m_, __tsan_mutex_try_lock);
#endif
  do {
    rc = pthread_mutex_clocklock(m_, CLOCK_MONOTONIC, &deadline);
  } while (rc == EINTR);
#if HAMI_TSAN
  const bool taken = rc == 0 || rc == EOWNERDEAD;
  __tsan_mutex_post_lock(
      m_, taken ? __tsan_mutex_try_lock : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed, 0);
#endif
  timed_out_ = rc == ETIMEDOUT;
  Locked(rc, repair, arg);
}

void RobustLockGuard::Locked(int rc, void (*repair)(void* arg), void* arg) {
  if (rc == EOWNERDEAD) {
    if (repair != nullptr) repair(arg);
    pthread_mutex_consistent(m_);
    repaired_ = true;
    rc = 0;
  }
  locked_ = rc == 0;
}

RobustLockGuard::~RobustLockGuard() {
  if (locked_) pthread_mutex_unlock(m_);
}

pid_t RobustMutexHolder(const pthread_mutex_t* m) {
  // The first word of glibc's mutex: the holder's TID, with the robust futex's flag bits.
  static_assert(sizeof(pthread_mutex_t) >= sizeof(int));
  constexpr unsigned kTidMask = 0x3fffffffu;  // FUTEX_TID_MASK
  const auto* word = reinterpret_cast<const std::atomic<int>*>(m);
  return pid_t(unsigned(word->load(std::memory_order_relaxed)) & kTidMask);
}

}  // namespace hami
