#include "broker/io.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/clock.h"

namespace hami::broker {
namespace {

Error TimedOut() { return Error(ErrorCode::kTimeout, "the deadline passed", ETIMEDOUT); }
Error PeerClosed(int err) {
  return Error(ErrorCode::kUnavailable, "the peer closed the stream", err);
}

// Waits until `fd` is ready for `events` or the deadline passes.
hami::Status WaitReady(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    int64_t left_ns = deadline_ns - MonotonicNs();
    if (left_ns <= 0) return TimedOut();
    pollfd p{fd, events, 0};
    int ms = int((left_ns + 999999) / 1000000);
    int n = poll(&p, 1, ms);
    if (n > 0) return OkStatus();  // readable, writable, or an error the next call reports
    if (n == 0) continue;          // re-check the clock
    if (errno == EINTR) continue;
    return Error::FromErrno("poll");
  }
}

}  // namespace

hami::Status WriteFull(int fd, const void* data, size_t size, int64_t deadline_ns) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = send(fd, p + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN)) {
      HAMI_TRY(WaitReady(fd, POLLOUT, deadline_ns));
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return PeerClosed(errno);
    return Error::FromErrno("send", n < 0 ? errno : EIO);
  }
  return OkStatus();
}

hami::Status ReadFull(int fd, void* data, size_t size, int64_t deadline_ns, size_t* got) {
  char* p = static_cast<char*>(data);
  *got = 0;
  while (*got < size) {
    ssize_t n = recv(fd, p + *got, size - *got, MSG_DONTWAIT);
    if (n > 0) {
      *got += size_t(n);
      continue;
    }
    if (n == 0) return PeerClosed(0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      HAMI_TRY(WaitReady(fd, POLLIN, deadline_ns));
      continue;
    }
    if (errno == ECONNRESET) return PeerClosed(ECONNRESET);
    return Error::FromErrno("recv");
  }
  return OkStatus();
}

}  // namespace hami::broker
