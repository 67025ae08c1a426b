#include "common/robust_mutex.h"

#include <cerrno>

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
  int rc = pthread_mutex_lock(m_);
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

}  // namespace hami
