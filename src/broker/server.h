// The host-PID broker's server: answers each connection on its Unix socket with the connecting
// process's own PID, as the kernel reports it in the server's PID namespace (SO_PEERCRED).
//
// Start() prepares the endpoint and refuses anything unsafe, naming the path and the problem:
//   - the default path (kDefaultSocketPath) needs effective UID 0; another path does not;
//   - the socket's directory is created if missing (missing parents 0755), must not be a
//     symlink, must be owned by the server's UID, must not be shared (group/other write or
//     sticky, like /tmp: its mode is not the broker's to change), and is set to mode 0711
//     through a descriptor (O_DIRECTORY | O_NOFOLLOW, fchmod);
//   - `broker.lock` in that directory (created 0600, opened O_NOFOLLOW, must be a regular file
//     owned by the server's UID) is held with an exclusive OFD lock for the server's life, so
//     a second broker on the same directory is refused instead of replacing the first;
//   - at the socket path: anything that is not a socket, a socket owned by another UID, and a
//     socket somebody is listening on are refused; a stale socket of the server's UID
//     (connect refused) is removed; then bind, chmod 0666 (any workload UID may connect; the
//     0711 directory allows traversal only) and listen.
// Stop() removes the socket path only while its device and inode are still those of the
// socket Start() bound.
//
// Serving: one thread with epoll and non-blocking sockets. At accept the server reads the
// peer's credentials (SO_PEERCRED: fixed by the kernel at connect) and what has arrived; per
// connection it reads exactly kRequestSize bytes (never more) before one deadline counted from
// accept, validates them, and only then uses the peer's PID to answer (HandleRequestBytes
// below is the whole decision). A connection answered (or ended) at accept takes no slot.
// A connection past its deadline is closed and counted as a timeout.
//
// Fairness: a connection waiting for its request holds a slot; at most max_active do, and at
// most max_per_uid of one peer UID. Every open connection is one that has not yet delivered a
// whole request (answered ones close at once), so a newcomer that must wait is never refused:
//   - when its UID already holds max_per_uid, that UID's own oldest connection makes room;
//   - else, when max_active are open, the oldest connection of any UID makes room.
// The connection making room gets one last read: if its whole request has arrived it is
// answered as usual; otherwise it is closed unanswered and counted as evicted. So a UID that
// floods the socket with silent connections evicts its own, and the slots other UIDs hold are
// taken only once max_active are open. All processes of one host UID share its cap (root in
// most containers): the cap bounds a UID, not a container.
//
// Thread safety: Counters(), Stop(), Wait() and done_fd() may be called from any thread;
// Stop() is idempotent and also run by the destructor. The serving thread inherits the signal
// mask of the thread that calls Start() (block SIGINT/SIGTERM first to read them elsewhere).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "broker/protocol.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "node/paths.h"

namespace hami::broker {

// Where the device plugin serves (on the host; workloads see the directory read-only at
// /tmp/vgpulock/hostpid).
inline constexpr const char* kDefaultSocketPath = node::kBrokerHostSocket;
inline constexpr const char kLockFileName[] = "broker.lock";
inline constexpr mode_t kDirectoryMode = 0711;
inline constexpr mode_t kParentMode = 0755;
inline constexpr mode_t kLockFileMode = 0600;
inline constexpr mode_t kSocketMode = 0666;

// NOTE: every counter of the server, in one list: X(enumerator, label, meaning). The labels
// are finite (no PID or path in them). Each accepted connection ends in exactly one of the
// outcome counters (ok .. write_failures), or in accept_failures when it could not be added to
// the epoll set; accept_failures also counts failed accept() calls. active is the gauge of
// connections open now. Connections open when the server stops are not counted.
#define HAMI_BROKER_COUNTERS(X)                                                          \
  X(kAccepted, accepted, "connections taken from the listen queue")                      \
  X(kOk, ok, "success answers written")                                                  \
  X(kBadMagic, bad_magic, "requests not starting with HPID (answered invalid)")          \
  X(kBadVersion, bad_version, "requests of another protocol version (answered invalid)") \
  X(kBadCommand, bad_command, "requests with an unknown command (answered invalid)")     \
  X(kTruncated, truncated, "connections that ended before a whole request (no answer)")  \
  X(kPeerCredentialFailures, peer_credential_failures,                                   \
    "valid requests whose peer PID was unknown (closed, no answer)")                     \
  X(kTimeouts, timeouts, "connections closed at their deadline")                         \
  X(kEvicted, evicted,                                                                   \
    "connections closed unanswered to make room for a newer one (max_active or the "     \
    "per-UID cap reached), oldest first")                                                \
  X(kWriteFailures, write_failures, "answers that could not be written whole")           \
  X(kAcceptFailures, accept_failures,                                                    \
    "accept() calls that failed, or connections that could not be watched (descriptors, memory)")

enum class Counter : uint8_t {
#define HAMI_BROKER_COUNTER_ENUM(e, label, doc) e,
  HAMI_BROKER_COUNTERS(HAMI_BROKER_COUNTER_ENUM)
#undef HAMI_BROKER_COUNTER_ENUM
};

#define HAMI_BROKER_COUNTER_ONE(e, label, doc) 1,
inline constexpr size_t kCounterCount =
    std::initializer_list<int>{HAMI_BROKER_COUNTERS(HAMI_BROKER_COUNTER_ONE)}.size();
#undef HAMI_BROKER_COUNTER_ONE

// "accepted", "ok", ... (the label of the list above).
const char* CounterName(Counter c);
// The one-line meaning from the list above.
const char* CounterDoc(Counter c);

// A snapshot of the counters (each read with relaxed ordering: consistent per field only).
struct ServerCounters {
#define HAMI_BROKER_COUNTER_FIELD(e, label, doc) uint64_t label = 0;
  HAMI_BROKER_COUNTERS(HAMI_BROKER_COUNTER_FIELD)
#undef HAMI_BROKER_COUNTER_FIELD
  uint64_t active = 0;  // gauge: connections open now

  uint64_t Get(Counter c) const;
  // "accepted=3 ok=2 ... active=0": every counter, in list order (a structured log line).
  std::string ToKeyValues() const;
};

// ---- the per-connection decision, as a pure function (the server uses it; so does the
// fuzz target) ----

// Whether the peer has ended its side of the stream after the bytes received so far.
enum class StreamEnd : uint8_t { kOpen, kEnded };

enum class Action : uint8_t {
  kReadMore,  // fewer than kRequestSize bytes and the stream is open: wait for more
  kAnswer,    // write `frame`, then close
  kClose,     // close without an answer
};

// The peer's identity from SO_PEERCRED. `known` is false when the call failed.
struct PeerCredentials {
  bool known = false;
  pid_t pid = 0;
  uid_t uid = 0;
};

struct Answer {
  Action action = Action::kReadMore;
  ResponseFrame frame{};                 // kAnswer: EncodeSuccess(peer pid) or EncodeInvalid()
  Counter outcome = Counter::kAccepted;  // kAnswer/kClose: the outcome counter to bump
};

// Decides what to do with the bytes `received` so far on one connection (only the first
// kRequestSize are looked at; the server never reads more). `read_peer` is called at most
// once, and only for a complete, valid request: the identity is read after validation.
// A success carries only the PID read_peer returned, and only when it is known and > 0.
template <typename ReadPeer>
Answer HandleRequestBytes(std::span<const uint8_t> received, StreamEnd end, ReadPeer&& read_peer) {
  Answer a;
  if (received.size() < kRequestSize) {
    if (end == StreamEnd::kEnded) {
      a.action = Action::kClose;
      a.outcome = Counter::kTruncated;
    }
    return a;
  }
  const DecodedRequest d = DecodeRequest(received.first(kRequestSize));
  switch (d.error) {
    case FrameError::kNone: {
      const PeerCredentials peer = read_peer();
      if (!peer.known || peer.pid <= 0) {
        a.action = Action::kClose;
        a.outcome = Counter::kPeerCredentialFailures;
        return a;
      }
      a.action = Action::kAnswer;
      a.frame = EncodeSuccess(uint32_t(peer.pid));
      a.outcome = Counter::kOk;
      return a;
    }
    case FrameError::kBadMagic:
      a.outcome = Counter::kBadMagic;
      break;
    case FrameError::kBadVersion:
      a.outcome = Counter::kBadVersion;
      break;
    default:  // kBadCommand: DecodeRequest reports nothing else for a whole frame
      a.outcome = Counter::kBadCommand;
      break;
  }
  a.action = Action::kAnswer;
  a.frame = EncodeInvalid();
  return a;
}

// ---- the server ----

struct ServerOptions {
  std::string socket_path = kDefaultSocketPath;
  int max_active = 512;  // connections waiting for their request at once, 1 to 65536
  // Of those, at most this many of one peer UID, 1 to max_active; 0: max_active / 4 (at
  // least 1). Start() resolves 0 (max_per_uid() reports the value in use).
  int max_per_uid = 0;
  int64_t transaction_timeout_ns = 1'000'000'000;  // from accept to the answer
  int listen_backlog = 1024;
  // The UID that must own the directory, lock file and socket: the server's effective UID
  // (Start refuses another, since what it creates belongs to its effective UID).
  uid_t expected_uid = geteuid();
};

class Server {
 public:
  // Prepares the endpoint (see the top of this file), starts the serving thread and returns
  // once clients can connect. Every refusal names the path and what was unsafe.
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);

  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Stops serving: open connections are closed unanswered, the socket path is removed if it
  // is still the socket Start() bound, and the lock is released. Idempotent; blocks until
  // the serving thread has ended.
  void Stop();

  // Blocks until serving ends: after Stop(), OK; when the listening socket failed, the error.
  hami::Status Wait();
  // Readable (an eventfd) once serving has ended, for poll loops; stays readable.
  int done_fd() const { return done_fd_.get(); }

  ServerCounters Counters() const;
  const std::string& path() const { return options_.socket_path; }
  const std::string& lock_path() const { return lock_path_; }
  // The per-UID cap in use (ServerOptions::max_per_uid, 0 resolved).
  int max_per_uid() const { return options_.max_per_uid; }

 private:
  struct Loop;
  explicit Server(ServerOptions options);
  hami::Status Prepare();
  void Serve();

  ServerOptions options_;
  std::string dir_path_;
  std::string socket_name_;  // the last component of the socket path
  std::string lock_path_;
  UniqueFd dir_fd_;
  UniqueFd lock_fd_;
  UniqueFd listen_fd_;
  UniqueFd wake_fd_;  // eventfd: Stop() wakes the loop
  UniqueFd done_fd_;  // eventfd: written when Serve() returns
  dev_t socket_dev_ = 0;
  ino_t socket_ino_ = 0;
  bool socket_bound_ = false;

  std::array<std::atomic<uint64_t>, kCounterCount> counters_{};
  std::atomic<uint64_t> active_{0};

  std::unique_ptr<Loop> loop_;  // used by the serving thread only, once started
  std::thread thread_;
  std::mutex stop_mu_;  // serializes Stop()
  bool stopped_ = false;
  std::atomic<bool> finished_{false};
  hami::Status serve_status_;  // written by the serving thread before finished_ (release)
};

}  // namespace hami::broker
