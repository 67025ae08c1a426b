#include "broker/io.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/clock.h"

namespace hami::broker {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
IoResult WaitReady(int fd, short events, int64_t deadline_ns, int* err) {
  for (;;) {
    int64_t left_ns = deadline_ns - MonotonicNs();
    if (left_ns <= 0) return IoResult::kTimeout;
    pollfd p{fd, events, 0};
    int ms = int((left_ns + 999999) / 1000000);
    int n = poll(&p, 1, ms);
    if (n > 0) return IoResult::kOk;  // readable, writable, or an error the next call reports
    if (n == 0) continue;             // re-check the clock
    if (errno == EINTR) continue;
    *err = errno;
    return IoResult::kError;
  }
}

}  // namespace

IoResult WriteFull(int fd, const void* data, size_t size, int64_t deadline_ns, int* err) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  *err = 0;
  while (done < size) {
    ssize_t n = send(fd, p + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN)) {
      IoResult w = WaitReady(fd, POLLOUT, deadline_ns, err);
      if (w != IoResult::kOk) return w;
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return IoResult::kClosed;
    *err = n < 0 ? errno : EIO;
    return IoResult::kError;
  }
  return IoResult::kOk;
}

IoResult ReadFull(int fd, void* data, size_t size, int64_t deadline_ns, size_t* got, int* err) {
  char* p = static_cast<char*>(data);
  *got = 0;
  *err = 0;
  while (*got < size) {
    ssize_t n = recv(fd, p + *got, size - *got, MSG_DONTWAIT);
    if (n > 0) {
      *got += size_t(n);
      continue;
    }
    if (n == 0) return IoResult::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      IoResult w = WaitReady(fd, POLLIN, deadline_ns, err);
      if (w != IoResult::kOk) return w;
      continue;
    }
    if (errno == ECONNRESET) return IoResult::kClosed;
    *err = errno;
    return IoResult::kError;
  }
  return IoResult::kOk;
}

}  // namespace hami::broker
