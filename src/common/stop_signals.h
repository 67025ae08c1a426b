// The signals that stop a daemon (SIGINT, SIGTERM), taken synchronously: the main thread
// blocks them before it starts any other thread, so that every thread inherits the mask, and
// then waits for them (sigwaitinfo, or a signalfd beside other descriptors).
//
// Thread safety: StopSignals is pure; BlockStopSignals changes the calling thread's mask.
#pragma once

#include <signal.h>

#include <cstring>
#include <string>

#include "common/result.h"

namespace hami {

inline sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Blocks StopSignals() in the calling thread (call it before any thread starts).
inline Status BlockStopSignals() {
  const sigset_t set = StopSignals();
  if (int err = pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0) {
    return Error(ErrorCode::kInternal, std::string("pthread_sigmask: ") + std::strerror(err));
  }
  return OkStatus();
}

}  // namespace hami
