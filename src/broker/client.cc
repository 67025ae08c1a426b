#include "broker/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

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

ClientResult QueryHostPid(const ClientOptions& o) {
  const int64_t deadline_ns = MonotonicNs() + o.timeout_ns;
  ClientResult checked = CheckEndpoint(o);
  if (checked.failure != ClientFailure::kNone) return checked;

  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Fail(ClientFailure::kIo, errno);
  // Kernel-side timeouts as well, should a later change make a call blocking.
  timeval tv{time_t(o.timeout_ns / 1000000000), suseconds_t((o.timeout_ns % 1000000000) / 1000)};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, o.socket_path, std::strlen(o.socket_path) + 1);
  ClientResult connected = Connect(fd.get(), addr, deadline_ns);
  if (connected.failure != ClientFailure::kNone) return connected;

  ucred peer{};
  socklen_t len = sizeof(peer);
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || len != sizeof(peer)) {
    return Fail(ClientFailure::kUntrustedPeer, errno);
  }
  if (peer.uid != o.trusted_uid) return Fail(ClientFailure::kUntrustedPeer);

  const RequestFrame request = EncodeRequest();
  int err = 0;
  IoResult w = WriteFull(fd.get(), request.data(), request.size(), deadline_ns, &err);
  if (w == IoResult::kTimeout) return Fail(ClientFailure::kTimeout, ETIMEDOUT);
  if (w == IoResult::kClosed) return Fail(ClientFailure::kClosed, EPIPE);
  if (w != IoResult::kOk) return Fail(ClientFailure::kIo, err);

  ResponseFrame response{};
  size_t got = 0;
  IoResult r = ReadFull(fd.get(), response.data(), response.size(), deadline_ns, &got, &err);
  if (r == IoResult::kTimeout) return Fail(ClientFailure::kTimeout, ETIMEDOUT);
  if (r == IoResult::kClosed) return Fail(ClientFailure::kClosed);
  if (r != IoResult::kOk) return Fail(ClientFailure::kIo, err);

  DecodedResponse d = DecodeResponse(response);
  if (d.error == FrameError::kRefused) return Fail(ClientFailure::kRefused, 0, d.error);
  if (d.error != FrameError::kNone) return Fail(ClientFailure::kBadReply, 0, d.error);
  ClientResult ok;
  ok.failure = ClientFailure::kNone;
  ok.pid = pid_t(d.response.pid);
  return ok;
}

}  // namespace hami::broker
