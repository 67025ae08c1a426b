// The signals that stop a daemon (SIGINT, SIGTERM), taken synchronously: the main thread
// blocks them before it starts any other thread, so that every thread inherits the mask, and
// then waits for them (sigwaitinfo, or WaitForStop: a signalfd beside other descriptors).
//
// Thread safety: StopSignals is pure; BlockStopSignals changes the calling thread's mask;
// WaitForStop may be called from any thread that has the signals blocked.
#pragma once

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

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

// What ended a WaitForStop: a stop signal (its number), or the first of the descriptors that
// became readable or hung up (its position in the list).
struct StopEvent {
  int signal = 0;     // SIGINT or SIGTERM; 0 when a descriptor ended the wait
  int fd_index = -1;  // position in `fds`; -1 when a signal ended it
};

// Waits, without a timeout, until a stop signal arrives (the signals must be blocked, see
// BlockStopSignals) or one of `fds` is readable; negative descriptors are ignored, so an
// optional one can be passed as -1. Errors: signalfd or poll failing (errno named).
inline Result<StopEvent> WaitForStop(std::initializer_list<int> fds) {
  const sigset_t signals = StopSignals();
  UniqueFd sfd(signalfd(-1, &signals, SFD_CLOEXEC));
  if (!sfd.valid()) return Error::FromErrno("signalfd");
  std::vector<pollfd> polled{{sfd.get(), POLLIN, 0}};
  for (int fd : fds) polled.push_back({fd, POLLIN, 0});
  for (;;) {
    for (pollfd& p : polled) p.revents = 0;
    const int n = poll(polled.data(), polled.size(), -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::FromErrno("poll");
    if (polled[0].revents != 0) {
      signalfd_siginfo info{};
      if (read(sfd.get(), &info, sizeof(info)) != ssize_t(sizeof(info))) continue;
      return StopEvent{int(info.ssi_signo), -1};
    }
    for (size_t i = 1; i < polled.size(); ++i) {
      if (polled[i].revents != 0) return StopEvent{0, int(i - 1)};
    }
  }
}

}  // namespace hami
