// What the nvcc-built multi-process programs (nccl_ranks.cu, share_patterns.cu) use to talk to
// their launcher and to each other: whole reads and writes on pipes and sockets, and a file
// descriptor passed over a Unix socket. Header-only: the programs are built by nvcc alone.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace hami::cudart {

// Writes all `n` bytes; false on an error or a closed reader.
inline bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// Reads exactly `n` bytes; false on an error or at the end of the input.
inline bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

// Sends `fd` (SCM_RIGHTS) with the word `value` over the Unix socket `sock`.
inline bool SendFd(int sock, int fd, uint64_t value) {
  iovec iov{&value, sizeof(value)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &msg, 0) == ssize_t(sizeof(value));
}

// Receives what SendFd sent: the descriptor (close-on-exec) in *fd and the word in *value.
inline bool ReceiveFd(int sock, int* fd, uint64_t* value) {
  iovec iov{value, sizeof(*value)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != ssize_t(sizeof(*value))) return false;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return false;
  std::memcpy(fd, CMSG_DATA(c), sizeof(int));
  return true;
}

// A size: a number of bytes, or of KiB, MiB or GiB with a k, m or g after it.
inline size_t ParseSize(const char* text) {
  char* end = nullptr;
  size_t n = std::strtoull(text, &end, 10);
  switch (*end) {
    case 'k':
      return n << 10;
    case 'm':
      return n << 20;
    case 'g':
      return n << 30;
    default:
      return n;
  }
}

}  // namespace hami::cudart
