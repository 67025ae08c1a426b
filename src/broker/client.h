// The host-PID broker's client: asks the broker at a socket path for the caller's own PID as
// the broker's PID namespace sees it, and trusts the answer only when every check passes.
//
// Before connecting, by lstat (symlinks are not followed): the socket's directory is a
// directory owned by `trusted_uid` with no group or other write bit; the endpoint is a socket
// owned by `trusted_uid`; the directory's mount is read-only (when required). Then a
// non-blocking connect bounded by the deadline, the connected peer's UID (SO_PEERCRED) must be
// `trusted_uid`, one request is written and one response read in full, and every field of the
// response is validated (magic, version, status, 0 < PID <= INT_MAX). Any failure yields no
// PID and names its class; nothing is retried here.
//
// Thread-safe; allocates nothing; no exceptions; the only clock is CLOCK_MONOTONIC. Used by
// libvgpu.so (with the compiled path and trusted_uid 0) and by the tests and benchmarks.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "broker/protocol.h"
#include "node/paths.h"

namespace hami::broker {

// Where the workload sees the broker: the device plugin mounts its directory here read-only.
inline constexpr const char* kClientSocketPath = node::kBrokerContainerSocket;
inline constexpr int64_t kClientTimeoutNs = 500'000'000;  // the whole transaction, at most

// Why no PID was trusted. The names are finite (telemetry labels).
enum class ClientFailure : uint8_t {
  kNone = 0,
  kMissing,          // no socket (or no directory) at the path
  kUnsafeDirectory,  // the directory is a symlink, not a directory, wrongly owned or writable
  kUnsafeEndpoint,   // the endpoint is a symlink, not a socket, or wrongly owned
  kWritableMount,    // the directory's mount is not read-only
  kConnect,          // connect failed (no server listening: a stale socket)
  kTimeout,          // the deadline passed (connect, write or read)
  kUntrustedPeer,    // the connected peer's UID is not trusted_uid, or unknown
  kClosed,           // the connection ended before a whole response (a partial frame)
  kBadReply,         // a whole response that fails validation (see frame_error)
  kRefused,          // the server answered "invalid request"
  kIo,               // another system call failed (see sys_errno)
};
inline constexpr int kClientFailureCount = 12;

const char* ClientFailureName(ClientFailure f);

struct ClientOptions {
  const char* socket_path = kClientSocketPath;
  uid_t trusted_uid = 0;
  bool require_read_only_mount = true;
  int64_t timeout_ns = kClientTimeoutNs;
};

struct ClientResult {
  pid_t pid = 0;  // > 0 only when failure == kNone
  ClientFailure failure = ClientFailure::kIo;
  int sys_errno = 0;
  FrameError frame_error = FrameError::kNone;  // for kBadReply and kRefused
};

ClientResult QueryHostPid(const ClientOptions& options);

// The same transaction in two halves, so that a caller can overlap the broker's answer with
// work of its own (libvgpu.so sends the request before the driver's cuInit and reads the
// answer after it, so that the wait for the answer costs no extra trip through a busy run
// queue). BeginQuery makes every check, connects and sends the request; FinishQuery reads
// and validates the answer, and closes the connection. An answer already received is taken
// whatever the time; otherwise FinishQuery waits until the deadline set by BeginQuery, and at
// least `grace_ns` (the caller's own work may have used the whole deadline).
inline constexpr int64_t kFinishGraceNs = 100'000'000;
struct PendingQuery {
  int fd = -1;  // owned: FinishQuery (or Abandon) closes it
  int64_t deadline_ns = 0;
  ClientResult result;  // a failure from BeginQuery; kNone while a query is pending
  bool pending() const { return fd >= 0; }
};
PendingQuery BeginQuery(const ClientOptions& options);
ClientResult FinishQuery(PendingQuery* query, int64_t grace_ns = kFinishGraceNs);
// Drops a pending query without reading its answer (e.g. in a fork child).
void AbandonQuery(PendingQuery* query);

// Only the checks made before connecting (for diagnostics): kNone when the path is trusted.
ClientResult CheckEndpoint(const ClientOptions& options);

}  // namespace hami::broker
