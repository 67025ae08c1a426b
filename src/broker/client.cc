#include "broker/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "broker/io.h"
#include "common/clock.h"
#include "common/unique_fd.h"

namespace hami::broker {
namespace {

ClientResult Fail(ClientFailure f, int err = 0, FrameError fe = FrameError::kNone) {
  ClientResult r;
  r.failure = f;
  r.sys_errno = err;
  r.frame_error = fe;
  return r;
}

// A failed WriteFull or ReadFull as the client's result; `closed_errno` is what a closed
// peer reports (EPIPE for a write, 0 for a read).
ClientResult FailIo(const Error& e, int closed_errno) {
  switch (e.code()) {
    case ErrorCode::kTimeout:
      return Fail(ClientFailure::kTimeout, ETIMEDOUT);
    case ErrorCode::kUnavailable:
      return Fail(ClientFailure::kClosed, closed_errno);
    default:
      return Fail(ClientFailure::kIo, e.sys_errno());
  }
}

bool Writable(mode_t mode) { return (mode & (S_IWGRP | S_IWOTH)) != 0; }

// Connects a non-blocking socket to `addr` before the deadline. A full backlog (EAGAIN on
// a Unix socket) is retried until then.
ClientResult Connect(int fd, const sockaddr_un& addr, int64_t deadline_ns) {
  for (;;) {
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      if (MonotonicNs() >= deadline_ns) return Fail(ClientFailure::kTimeout, EAGAIN);
      SleepForNs(200'000);
      continue;
    }
    if (errno != EINPROGRESS) {
      return Fail(errno == ENOENT ? ClientFailure::kMissing : ClientFailure::kConnect, errno);
    }
    for (;;) {
      int64_t left_ns = deadline_ns - MonotonicNs();
      if (left_ns <= 0) return Fail(ClientFailure::kTimeout, ETIMEDOUT);
      pollfd p{fd, POLLOUT, 0};
      int n = poll(&p, 1, int((left_ns + 999999) / 1000000));
      if (n > 0) break;
      if (n < 0 && errno != EINTR) return Fail(ClientFailure::kIo, errno);
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) {
      return Fail(ClientFailure::kIo, errno);
    }
    if (so_error != 0) return Fail(ClientFailure::kConnect, so_error);
    break;
  }
  ClientResult ok;
  ok.failure = ClientFailure::kNone;
  return ok;
}

}  // namespace

const char* ClientFailureName(ClientFailure f) {
  switch (f) {
    case ClientFailure::kNone:
      return "none";
    case ClientFailure::kMissing:
      return "missing";
    case ClientFailure::kUnsafeDirectory:
      return "unsafe_directory";
    case ClientFailure::kUnsafeEndpoint:
      return "unsafe_endpoint";
    case ClientFailure::kWritableMount:
      return "writable_mount";
    case ClientFailure::kConnect:
      return "connect";
    case ClientFailure::kTimeout:
      return "timeout";
    case ClientFailure::kUntrustedPeer:
      return "untrusted_peer";
    case ClientFailure::kClosed:
      return "closed";
    case ClientFailure::kBadReply:
      return "bad_reply";
    case ClientFailure::kRefused:
      return "refused";
    case ClientFailure::kIo:
      return "io";
  }
  return "unknown";
}

ClientResult CheckEndpoint(const ClientOptions& o) {
  const size_t len = o.socket_path != nullptr ? std::strlen(o.socket_path) : 0;
  if (len == 0 || len >= sizeof(sockaddr_un::sun_path)) {
    return Fail(ClientFailure::kMissing, ENAMETOOLONG);
  }
  char dir[sizeof(sockaddr_un::sun_path)];
  std::memcpy(dir, o.socket_path, len + 1);
  char* slash = std::strrchr(dir, '/');
  if (slash == nullptr) {
    dir[0] = '.';
    dir[1] = '\0';
  } else if (slash == dir) {
    dir[1] = '\0';
  } else {
    *slash = '\0';
  }
  struct stat st;
  if (lstat(dir, &st) != 0) {
    return Fail(errno == ENOENT ? ClientFailure::kMissing : ClientFailure::kUnsafeDirectory, errno);
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != o.trusted_uid || Writable(st.st_mode)) {
    return Fail(ClientFailure::kUnsafeDirectory);
  }
  if (lstat(o.socket_path, &st) != 0) {
    return Fail(errno == ENOENT ? ClientFailure::kMissing : ClientFailure::kUnsafeEndpoint, errno);
  }
  if (!S_ISSOCK(st.st_mode) || st.st_uid != o.trusted_uid) {
    return Fail(ClientFailure::kUnsafeEndpoint);
  }
  if (o.require_read_only_mount) {
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0) return Fail(ClientFailure::kIo, errno);
    if ((vfs.f_flag & ST_RDONLY) == 0) return Fail(ClientFailure::kWritableMount);
  }
  ClientResult ok;
  ok.failure = ClientFailure::kNone;
  return ok;
}

PendingQuery BeginQuery(const ClientOptions& o) {
  PendingQuery q;
  q.deadline_ns = MonotonicNs() + o.timeout_ns;
  q.result = CheckEndpoint(o);
  if (q.result.failure != ClientFailure::kNone) return q;

  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    q.result = Fail(ClientFailure::kIo, errno);
    return q;
  }
  // Kernel-side timeouts as well, should a later change make a call blocking.
  timeval tv{time_t(o.timeout_ns / 1000000000), suseconds_t((o.timeout_ns % 1000000000) / 1000)};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, o.socket_path, std::strlen(o.socket_path) + 1);
  q.result = Connect(fd.get(), addr, q.deadline_ns);
  if (q.result.failure != ClientFailure::kNone) return q;

  ucred peer{};
  socklen_t len = sizeof(peer);
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || len != sizeof(peer)) {
    q.result = Fail(ClientFailure::kUntrustedPeer, errno);
    return q;
  }
  if (peer.uid != o.trusted_uid) {
    q.result = Fail(ClientFailure::kUntrustedPeer);
    return q;
  }

  const RequestFrame request = EncodeRequest();
  hami::Status w = WriteFull(fd.get(), request.data(), request.size(), q.deadline_ns);
  if (!w.ok()) {
    q.result = FailIo(w.error(), EPIPE);
  } else {
    q.fd = fd.Release();
  }
  return q;
}

ClientResult FinishQuery(PendingQuery* q, int64_t grace_ns) {
  if (!q->pending()) return q->result;
  UniqueFd fd(q->fd);
  q->fd = -1;
  ResponseFrame response{};
  size_t got = 0;
  const int64_t deadline_ns = std::max(q->deadline_ns, MonotonicNs() + grace_ns);
  hami::Status r = ReadFull(fd.get(), response.data(), response.size(), deadline_ns, &got);
  if (!r.ok()) return q->result = FailIo(r.error(), 0);

  DecodedResponse d = DecodeResponse(response);
  if (d.error == FrameError::kRefused) {
    return q->result = Fail(ClientFailure::kRefused, 0, d.error);
  }
  if (d.error != FrameError::kNone) return q->result = Fail(ClientFailure::kBadReply, 0, d.error);
  ClientResult ok;
  ok.failure = ClientFailure::kNone;
  ok.pid = pid_t(d.response.pid);
  return q->result = ok;
}

void AbandonQuery(PendingQuery* q) {
  if (q->fd >= 0) close(q->fd);
  q->fd = -1;
}

ClientResult QueryHostPid(const ClientOptions& o) {
  PendingQuery q = BeginQuery(o);
  return FinishQuery(&q, 0);
}

}  // namespace hami::broker
