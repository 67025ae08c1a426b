// Full reads and writes on a stream socket, bounded by one deadline. EINTR is retried; writes
// never raise SIGPIPE (MSG_NOSIGNAL). Works on blocking and non-blocking descriptors (each
// step polls first). Async-signal-safe apart from the clock; allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/result.h"

namespace hami::broker {

// Each returns OkStatus() once all bytes moved, or an Error (bounded: it never allocates):
//   kTimeout      the deadline passed first (sys_errno ETIMEDOUT);
//   kUnavailable  the peer closed or reset the stream first (sys_errno EPIPE or ECONNRESET, or
//                 0 for the end of the stream);
//   kIo           a system call failed (sys_errno says which).

// Writes `size` bytes or fails. `deadline_ns` is on the CLOCK_MONOTONIC scale (MonotonicNs()).
::hami::Status WriteFull(int fd, const void* data, size_t size, int64_t deadline_ns);
// Reads exactly `size` bytes or fails; *got says how many arrived (a partial frame is never
// used by callers).
::hami::Status ReadFull(int fd, void* data, size_t size, int64_t deadline_ns, size_t* got);

}  // namespace hami::broker
