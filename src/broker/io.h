// Full reads and writes on a stream socket, bounded by one deadline. EINTR is retried; writes
// never raise SIGPIPE (MSG_NOSIGNAL). Works on blocking and non-blocking descriptors (each
// step polls first). Async-signal-safe apart from the clock; allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hami::broker {

enum class IoResult : uint8_t {
  kOk,       // all bytes moved
  kClosed,   // the peer closed (or reset) before all bytes moved
  kTimeout,  // the deadline passed first
  kError,    // a system call failed; see *err
};

// Writes `size` bytes or fails. `deadline_ns` is on the CLOCK_MONOTONIC scale (MonotonicNs()).
IoResult WriteFull(int fd, const void* data, size_t size, int64_t deadline_ns, int* err);
// Reads exactly `size` bytes or fails; *got says how many arrived (a partial frame is never
// used by callers).
IoResult ReadFull(int fd, void* data, size_t size, int64_t deadline_ns, size_t* got, int* err);

}  // namespace hami::broker
