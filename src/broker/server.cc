#include "broker/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <system_error>
#include <vector>

#include "broker/fs_checks.h"
#include "common/clock.h"
#include "common/ofd_lock.h"

namespace hami::broker {
namespace {

constexpr int kMaxActiveLimit = 65536;
constexpr int kMaxEvents = 256;
constexpr int kAcceptBatch = 256;  // accepts per wake-up, so reads keep pace with a burst
constexpr int64_t kAcceptPauseNs = 10'000'000;  // after EMFILE and friends
constexpr uint64_t kListenTag = ~uint64_t(0);
constexpr uint64_t kWakeTag = ~uint64_t(0) - 1;
// The per-UID bucket of connections whose credentials could not be read (not a valid UID).
constexpr uid_t kUnknownUid = uid_t(-1);

// "/a//b/./c" -> "/a/b/c" (lexical only: symlinks are not resolved).
std::string Normalize(std::string_view path) {
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    if (!part.empty() && part != ".") {
      out += '/';
      out += part;
    }
    i = j + 1;
  }
  return out.empty() ? "/" : out;
}

// Describes what is at `path` (not following a symlink) for an error message.
std::string Describe(int dir_fd, const char* name) {
  struct stat st;
  if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return "nothing (it vanished)";
  return KindName(st.st_mode);
}

// Makes each missing ancestor of `dir` (mode 0755, set through a descriptor so the umask
// does not narrow it). Existing ancestors are left as they are.
hami::Status MakeParents(const std::string& dir) {
  for (size_t slash = dir.find('/', 1); slash != std::string::npos;
       slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (mkdir(prefix.c_str(), kParentMode) != 0) {
      if (errno == EEXIST) continue;
      return Error::FromErrno("creating " + prefix);
    }
    UniqueFd fd(open(prefix.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return Error::FromErrno("opening " + prefix);
    if (fchmod(fd.get(), kParentMode) != 0) return Error::FromErrno("chmod " + prefix);
  }
  return OkStatus();
}

PeerCredentials ReadPeer(int fd) {
  PeerCredentials p;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof(cred)) {
    p.known = true;
    p.pid = cred.pid;
    p.uid = cred.uid;
  }
  return p;
}

void SignalEventFd(int fd) {
  const uint64_t one = 1;
  while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

}  // namespace

const char* CounterName(Counter c) {
  switch (c) {
#define HAMI_BROKER_COUNTER_NAME(e, label, doc) \
  case Counter::e:                              \
    return #label;
    HAMI_BROKER_COUNTERS(HAMI_BROKER_COUNTER_NAME)
#undef HAMI_BROKER_COUNTER_NAME
  }
  return "unknown";
}

const char* CounterDoc(Counter c) {
  switch (c) {
#define HAMI_BROKER_COUNTER_DOC(e, label, doc) \
  case Counter::e:                             \
    return doc;
    HAMI_BROKER_COUNTERS(HAMI_BROKER_COUNTER_DOC)
#undef HAMI_BROKER_COUNTER_DOC
  }
  return "";
}

uint64_t ServerCounters::Get(Counter c) const {
  switch (c) {
#define HAMI_BROKER_COUNTER_GET(e, label, doc) \
  case Counter::e:                             \
    return label;
    HAMI_BROKER_COUNTERS(HAMI_BROKER_COUNTER_GET)
#undef HAMI_BROKER_COUNTER_GET
  }
  return 0;
}

std::string ServerCounters::ToKeyValues() const {
  std::string out;
  for (size_t i = 0; i < kCounterCount; ++i) {
    const Counter c = Counter(i);
    out += CounterName(c);
    out += '=';
    out += std::to_string(Get(c));
    out += ' ';
  }
  out += "active=" + std::to_string(active);
  return out;
}

// ---- the serving loop ----

// One thread's state: the epoll set and the table of open connections. Connections sit on
// a list in accept order, which is also deadline order (one timeout for all), so expiring
// them is a walk from the head, and the head is the oldest when room must be made. Each also
// sits on its peer UID's list, in the same order; `uids` holds each UID's count and list ends.
struct Server::Loop {
  struct Conn {
    int fd = -1;
    uint32_t generation = 0;  // tells a stale epoll event from the slot's next connection
    uint32_t got = 0;
    std::array<uint8_t, kRequestSize> bytes{};
    PeerCredentials peer;  // read at accept
    uid_t uid = kUnknownUid;
    int64_t deadline_ns = 0;
    int prev = -1, next = -1;          // the accept-order list
    int uid_prev = -1, uid_next = -1;  // the list of this UID's connections
  };

  // The open connections of one UID. count == 0 marks a free cell.
  struct UidEntry {
    uid_t uid = 0;
    int count = 0;
    int oldest = -1, newest = -1;
  };

  Server* server;
  UniqueFd epoll_fd;
  std::vector<Conn> conns;
  std::vector<int> free_slots;
  int head = -1, tail = -1;
  int64_t accept_paused_until_ns = 0;
  // Open addressing with linear probing, sized once to at least twice max_active cells: at
  // most max_active UIDs hold connections, so it is never full and never allocates.
  std::vector<UidEntry> uids;
  int uid_shift = 63;  // Fibonacci hashing: the top log2(uids.size()) bits of the product

  explicit Loop(Server* s) : server(s) {}

  void Bump(Counter c) { server->counters_[size_t(c)].fetch_add(1, std::memory_order_relaxed); }

  static uint64_t Tag(int slot, uint32_t generation) {
    return (uint64_t(generation) << 32) | uint32_t(slot);
  }

  hami::Status Init() {
    epoll_fd.Reset(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_fd.valid()) return Error::FromErrno("epoll_create1");
    conns.resize(size_t(server->options_.max_active));
    free_slots.reserve(conns.size());
    for (int i = int(conns.size()) - 1; i >= 0; --i) free_slots.push_back(i);
    size_t cells = 2;
    while (cells < 2 * conns.size()) {
      cells *= 2;
      uid_shift--;
    }
    uids.resize(cells);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeTag;
    if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, server->wake_fd_.get(), &ev) != 0) {
      return Error::FromErrno("epoll_ctl (wake)");
    }
    ev.data.u64 = kListenTag;
    if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, server->listen_fd_.get(), &ev) != 0) {
      return Error::FromErrno("epoll_ctl (listen)");
    }
    return OkStatus();
  }

  // ---- the UID table ----

  size_t Home(uid_t uid) const {
    return size_t((uint64_t(uid) * 0x9E3779B97F4A7C15ull) >> uid_shift);
  }
  size_t NextCell(size_t i) const { return (i + 1) & (uids.size() - 1); }

  // The cell holding `uid`, or nullptr when it has no open connection.
  UidEntry* FindUid(uid_t uid) {
    for (size_t i = Home(uid); uids[i].count != 0; i = NextCell(i)) {
      if (uids[i].uid == uid) return &uids[i];
    }
    return nullptr;
  }

  UidEntry& FindOrAddUid(uid_t uid) {
    size_t i = Home(uid);
    for (; uids[i].count != 0; i = NextCell(i)) {
      if (uids[i].uid == uid) return uids[i];
    }
    uids[i] = UidEntry{uid, 0, -1, -1};
    return uids[i];
  }

  // Frees `e`'s cell, moving later cells of its probe run back so that every lookup still
  // finds its UID (no tombstones).
  void EraseUid(UidEntry* e) {
    size_t hole = size_t(e - uids.data());
    for (size_t j = NextCell(hole); uids[j].count != 0; j = NextCell(j)) {
      const size_t mask = uids.size() - 1;
      const size_t home = Home(uids[j].uid);
      if (((j - home) & mask) >= ((j - hole) & mask)) {  // the hole lies on j's probe path
        uids[hole] = uids[j];
        hole = j;
      }
    }
    uids[hole].count = 0;
  }

  // ---- the connection table ----

  // Puts `fd` in a free slot at the tail of both lists (a slot must be free).
  int Add(int fd, const PeerCredentials& peer, uid_t uid) {
    const int slot = free_slots.back();
    free_slots.pop_back();
    Conn& c = conns[size_t(slot)];
    c.fd = fd;
    c.got = 0;
    c.peer = peer;
    c.uid = uid;
    c.deadline_ns = MonotonicNs() + server->options_.transaction_timeout_ns;
    c.prev = tail;
    c.next = -1;
    if (tail >= 0) {
      conns[size_t(tail)].next = slot;
    } else {
      head = slot;
    }
    tail = slot;
    UidEntry& e = FindOrAddUid(uid);
    c.uid_prev = e.newest;
    c.uid_next = -1;
    if (e.newest >= 0) {
      conns[size_t(e.newest)].uid_next = slot;
    } else {
      e.oldest = slot;
    }
    e.newest = slot;
    e.count++;
    server->active_.fetch_add(1, std::memory_order_relaxed);
    return slot;
  }

  void Close(int slot) {
    Conn& c = conns[size_t(slot)];
    ::close(c.fd);
    c.fd = -1;
    c.got = 0;
    c.generation++;
    if (c.prev >= 0) {
      conns[size_t(c.prev)].next = c.next;
    } else {
      head = c.next;
    }
    if (c.next >= 0) {
      conns[size_t(c.next)].prev = c.prev;
    } else {
      tail = c.prev;
    }
    c.prev = c.next = -1;
    UidEntry* e = FindUid(c.uid);  // always there: Add counted this connection
    if (c.uid_prev >= 0) {
      conns[size_t(c.uid_prev)].uid_next = c.uid_next;
    } else {
      e->oldest = c.uid_next;
    }
    if (c.uid_next >= 0) {
      conns[size_t(c.uid_next)].uid_prev = c.uid_prev;
    } else {
      e->newest = c.uid_prev;
    }
    c.uid_prev = c.uid_next = -1;
    if (--e->count == 0) EraseUid(e);
    free_slots.push_back(slot);
    server->active_.fetch_sub(1, std::memory_order_relaxed);
  }

  void CloseAll() {
    while (head >= 0) Close(head);
  }

  // Reads what has arrived on `fd` after the `*got` bytes already in `bytes`, never past the
  // request. kEnded: the peer has ended its side, or reset; nothing more will arrive.
  static StreamEnd ReadAvailable(int fd, std::array<uint8_t, kRequestSize>& bytes, uint32_t* got) {
    while (*got < kRequestSize) {
      ssize_t n = recv(fd, bytes.data() + *got, kRequestSize - *got, MSG_DONTWAIT);
      if (n > 0) {
        *got += uint32_t(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return StreamEnd::kOpen;
      return StreamEnd::kEnded;
    }
    return StreamEnd::kOpen;
  }

  // Carries out `a` (kAnswer or kClose) on `fd` and counts it; the caller then closes `fd`.
  // The count comes before the close, so a client that sees EOF sees it counted.
  void Respond(int fd, const Answer& a) {
    if (a.action == Action::kAnswer) {
      ssize_t n;
      do {
        n = send(fd, a.frame.data(), a.frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      } while (n < 0 && errno == EINTR);
      Bump(n == ssize_t(a.frame.size()) ? a.outcome : Counter::kWriteFailures);
    } else {
      Bump(a.outcome);
    }
  }

  // Reads what has arrived on the connection at `slot` and acts on it.
  void Service(int slot) {
    Conn& c = conns[size_t(slot)];
    const StreamEnd end = ReadAvailable(c.fd, c.bytes, &c.got);
    const PeerCredentials peer = c.peer;
    const Answer a = HandleRequestBytes(std::span<const uint8_t>(c.bytes.data(), c.got), end,
                                        [&peer] { return peer; });
    if (a.action == Action::kReadMore) return;
    Respond(c.fd, a);
    Close(slot);
  }

  // Frees the slot of the connection at `slot` for a newer one: a last read first (its
  // request may have arrived since its last event), then, if that did not end it, it is
  // closed unanswered.
  void Evict(int slot) {
    Service(slot);
    if (conns[size_t(slot)].fd < 0) return;
    Bump(Counter::kEvicted);
    Close(slot);
  }

  void PauseAccept(int64_t now_ns) {
    accept_paused_until_ns = now_ns + kAcceptPauseNs;
    epoll_event ev{};
    ev.events = 0;
    ev.data.u64 = kListenTag;
    epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, server->listen_fd_.get(), &ev);
  }

  void ResumeAccept() {
    accept_paused_until_ns = 0;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenTag;
    epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, server->listen_fd_.get(), &ev);
  }

  // Accepts what is queued (up to a batch). Fails only when the listening socket does.
  hami::Status AcceptReady() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      int fd = accept4(server->listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        switch (errno) {
          case EAGAIN:  // also EWOULDBLOCK
            return OkStatus();
          case EINTR:
          case ECONNABORTED:
          case EPROTO:
            continue;
          case EMFILE:
          case ENFILE:
          case ENOBUFS:
          case ENOMEM:
            Bump(Counter::kAcceptFailures);
            PauseAccept(MonotonicNs());
            return OkStatus();
          default:
            return Error::FromErrno("accept on " + server->options_.socket_path);
        }
      }
      Bump(Counter::kAccepted);
      // The request has usually arrived with the connection: then it needs no slot.
      const PeerCredentials peer = ReadPeer(fd);
      std::array<uint8_t, kRequestSize> bytes{};
      uint32_t got = 0;
      const StreamEnd end = ReadAvailable(fd, bytes, &got);
      const Answer a = HandleRequestBytes(std::span<const uint8_t>(bytes.data(), got), end,
                                          [&peer] { return peer; });
      if (a.action != Action::kReadMore) {
        Respond(fd, a);
        ::close(fd);
        continue;
      }
      // It must wait for its request: make room if its UID holds its cap, or every slot is
      // taken (the oldest first; see the top of server.h).
      const uid_t uid = peer.known ? peer.uid : kUnknownUid;
      if (const UidEntry* e = FindUid(uid);
          e != nullptr && e->count >= server->options_.max_per_uid) {
        Evict(e->oldest);
      }
      if (free_slots.empty()) Evict(head);
      const int slot = Add(fd, peer, uid);
      Conn& c = conns[size_t(slot)];
      c.bytes = bytes;
      c.got = got;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = Tag(slot, c.generation);
      if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        Bump(Counter::kAcceptFailures);  // could not watch it: as if never accepted
        Close(slot);
      }
    }
    return OkStatus();
  }

  void Expire(int64_t now_ns) {
    while (head >= 0 && conns[size_t(head)].deadline_ns <= now_ns) {
      Bump(Counter::kTimeouts);
      Close(head);
    }
  }

  int TimeoutMs(int64_t now_ns) const {
    int64_t next_ns = -1;
    if (head >= 0) next_ns = conns[size_t(head)].deadline_ns;
    if (accept_paused_until_ns != 0 && (next_ns < 0 || accept_paused_until_ns < next_ns)) {
      next_ns = accept_paused_until_ns;
    }
    if (next_ns < 0) return -1;
    const int64_t left_ns = next_ns - now_ns;
    if (left_ns <= 0) return 0;
    const int64_t ms = (left_ns + 999'999) / 1'000'000;
    return ms > 60'000 ? 60'000 : int(ms);
  }

  hami::Status Run() {
    epoll_event events[kMaxEvents];
    for (;;) {
      const int n = epoll_wait(epoll_fd.get(), events, kMaxEvents, TimeoutMs(MonotonicNs()));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Error::FromErrno("epoll_wait");
      }
      bool stop = false;
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[i].data.u64;
        if (tag == kWakeTag) {
          stop = true;
        } else if (tag == kListenTag) {
          HAMI_TRY(AcceptReady());
        } else {
          const int slot = int(uint32_t(tag));
          const uint32_t generation = uint32_t(tag >> 32);
          if (size_t(slot) >= conns.size()) continue;
          const Conn& c = conns[size_t(slot)];
          if (c.fd < 0 || c.generation != generation) continue;  // closed earlier in this batch
          Service(slot);
        }
      }
      if (stop) return OkStatus();
      const int64_t now_ns = MonotonicNs();
      Expire(now_ns);
      if (accept_paused_until_ns != 0 && now_ns >= accept_paused_until_ns) ResumeAccept();
    }
  }
};

// ---- the server ----

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() { Stop(); }

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  std::unique_ptr<Server> server(new Server(std::move(options)));
  HAMI_TRY(server->Prepare());
  try {
    server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  } catch (const std::system_error& e) {
    return Error(ErrorCode::kIo,
                 "starting the broker thread for " + server->path() + ": " + e.what(),
                 e.code().value());
  }
  return server;
}

hami::Status Server::Prepare() {
  const std::string& path = options_.socket_path;
  if (path.empty() || path[0] != '/') {
    return Error(ErrorCode::kInvalidArgument,
                 "socket path '" + path + "': must be an absolute path");
  }
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Error(ErrorCode::kInvalidArgument,
                 path + ": longer than a Unix socket path may be (" +
                     std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes)");
  }
  const size_t slash = path.rfind('/');
  socket_name_ = path.substr(slash + 1);
  dir_path_ = slash == 0 ? "/" : path.substr(0, slash);
  if (slash == 0 || socket_name_.empty() || socket_name_ == "." || socket_name_ == ".." ||
      socket_name_ == kLockFileName) {
    return Error(ErrorCode::kInvalidArgument,
                 path + ": must name a socket file in a directory other than /");
  }
  if (options_.max_active < 1 || options_.max_active > kMaxActiveLimit) {
    return Error(ErrorCode::kInvalidArgument, "max_active " + std::to_string(options_.max_active) +
                                                  " is not from 1 to " +
                                                  std::to_string(kMaxActiveLimit));
  }
  if (options_.max_per_uid == 0) options_.max_per_uid = std::max(1, options_.max_active / 4);
  if (options_.max_per_uid < 1 || options_.max_per_uid > options_.max_active) {
    return Error(ErrorCode::kInvalidArgument,
                 "max_per_uid " + std::to_string(options_.max_per_uid) + " is not from 1 to " +
                     std::to_string(options_.max_active) +
                     " (max_active), or 0 for max_active / 4");
  }
  if (options_.transaction_timeout_ns <= 0) {
    return Error(ErrorCode::kInvalidArgument, "the transaction timeout must be positive");
  }
  if (options_.listen_backlog < 1) {
    return Error(ErrorCode::kInvalidArgument, "the listen backlog must be positive");
  }
  const uid_t euid = geteuid();
  if (Normalize(path) == kDefaultSocketPath && euid != 0) {
    return Error(ErrorCode::kPermission,
                 path + ": the default broker socket needs effective UID 0 (running as UID " +
                     std::to_string(euid) + "); run as root or choose another path");
  }
  if (options_.expected_uid != euid) {
    return Error(ErrorCode::kInvalidArgument,
                 path + ": expected owner UID " + std::to_string(options_.expected_uid) +
                     " is not the server's effective UID " + std::to_string(euid) +
                     " (what the server creates belongs to its effective UID)");
  }
  const uid_t uid = options_.expected_uid;

  // The directory: ours, not a symlink, mode 0711.
  if (dir_path_ != "/") HAMI_TRY(MakeParents(dir_path_));
  if (mkdir(dir_path_.c_str(), kDirectoryMode) != 0 && errno != EEXIST) {
    return Error::FromErrno("creating " + dir_path_);
  }
  dir_fd_.Reset(open(dir_path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd_.valid()) {
    const int err = errno;
    struct stat st;
    if (lstat(dir_path_.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      return Unsafe(dir_path_, "the socket directory is a symlink; refusing to follow it");
    }
    if (err == ENOTDIR && lstat(dir_path_.c_str(), &st) == 0) {
      return Unsafe(dir_path_, std::string("the socket directory is ") + KindName(st.st_mode) +
                                   ", not a directory");
    }
    return Error::FromErrno("opening " + dir_path_, err);
  }
  struct stat st;
  if (fstat(dir_fd_.get(), &st) != 0) return Error::FromErrno("fstat " + dir_path_);
  if (st.st_uid != uid) {
    return Unsafe(dir_path_, "the socket directory is owned by UID " + std::to_string(st.st_uid) +
                                 ", not UID " + std::to_string(uid));
  }
  // A directory others may write (/tmp, say) is shared: its mode is not the broker's to change.
  if ((st.st_mode & (S_IWGRP | S_IWOTH | S_ISVTX)) != 0) {
    return Unsafe(dir_path_, "the socket directory (mode " + Octal(st.st_mode) +
                                 ") is shared with other writers; give the broker a directory "
                                 "of its own");
  }
  if ((st.st_mode & 07777) != kDirectoryMode && fchmod(dir_fd_.get(), kDirectoryMode) != 0) {
    return Error::FromErrno("chmod " + Octal(kDirectoryMode) + " " + dir_path_);
  }

  // The lock: one broker per directory.
  lock_path_ = (dir_path_ == "/" ? "" : dir_path_) + "/" + kLockFileName;
  lock_fd_.Reset(openat(dir_fd_.get(), kLockFileName,
                        O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                        kLockFileMode));
  if (!lock_fd_.valid()) {
    const int err = errno;
    if (fstatat(dir_fd_.get(), kLockFileName, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode)) {
        return Unsafe(lock_path_, "the lock file is a symlink; refusing to follow it");
      }
      if (!S_ISREG(st.st_mode)) {
        return Unsafe(lock_path_, std::string("the lock file is ") + KindName(st.st_mode) +
                                      ", not a regular file");
      }
    }
    return Error::FromErrno("opening " + lock_path_, err);
  }
  if (fstat(lock_fd_.get(), &st) != 0) return Error::FromErrno("fstat " + lock_path_);
  if (!S_ISREG(st.st_mode)) {
    return Unsafe(lock_path_,
                  std::string("the lock file is ") + KindName(st.st_mode) + ", not a regular file");
  }
  if (st.st_uid != uid) {
    return Unsafe(lock_path_, "the lock file is owned by UID " + std::to_string(st.st_uid) +
                                  ", not UID " + std::to_string(uid));
  }
  if ((st.st_mode & 07777) != kLockFileMode && fchmod(lock_fd_.get(), kLockFileMode) != 0) {
    return Error::FromErrno("chmod " + Octal(kLockFileMode) + " " + lock_path_);
  }
  if (int err = OfdLockByte(lock_fd_.get(), 0, F_WRLCK, LockWait::kNo); err != 0) {
    if (err == EAGAIN || err == EACCES) {
      return Error(ErrorCode::kBusy, "another broker holds " + lock_path_, err);
    }
    return Error::FromErrno("locking " + lock_path_, err);
  }

  // What is at the socket path now: nothing, or a stale socket of ours.
  const char* name = socket_name_.c_str();
  if (fstatat(dir_fd_.get(), name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Unsafe(path, std::string("is ") + KindName(st.st_mode) +
                              ", not a socket; refusing to replace it");
    }
    if (st.st_uid != uid) {
      return Unsafe(path, "is a socket owned by UID " + std::to_string(st.st_uid) + ", not UID " +
                              std::to_string(uid) + "; refusing to replace it");
    }
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!probe.valid()) return Error::FromErrno("socket");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    int rc;
    do {
      rc = connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    } while (rc != 0 && errno == EINTR);
    if (rc == 0 || errno == EAGAIN || errno == EINPROGRESS) {
      return Error(ErrorCode::kBusy,
                   path + ": a server is listening on this socket; refusing to replace it");
    }
    if (errno == ECONNREFUSED) {
      if (unlinkat(dir_fd_.get(), name, 0) != 0 && errno != ENOENT) {
        return Error::FromErrno("removing the stale socket " + path);
      }
    } else if (errno != ENOENT) {
      return Error::FromErrno("probing the existing socket " + path);
    }
  } else if (errno != ENOENT) {
    return Error::FromErrno("lstat " + path);
  }

  // Bind, open to every UID, listen.
  listen_fd_.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listen_fd_.valid()) return Error::FromErrno("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (bind(listen_fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Error::FromErrno("bind " + path);
  }
  if (fstatat(dir_fd_.get(), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Error::FromErrno("lstat " + path + " after bind");
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Unsafe(path, "replaced by " + Describe(dir_fd_.get(), name) + " right after bind");
  }
  socket_dev_ = st.st_dev;
  socket_ino_ = st.st_ino;
  socket_bound_ = true;
  if (fchmodat(dir_fd_.get(), name, kSocketMode, 0) != 0) {
    return Error::FromErrno("chmod " + Octal(kSocketMode) + " " + path);
  }
  if (fstatat(dir_fd_.get(), name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != socket_dev_ ||
      st.st_ino != socket_ino_ || (st.st_mode & 07777) != kSocketMode) {
    return Unsafe(path, "replaced or changed while setting its mode");
  }
  if (listen(listen_fd_.get(), options_.listen_backlog) != 0) {
    return Error::FromErrno("listen " + path);
  }

  wake_fd_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  done_fd_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid() || !done_fd_.valid()) return Error::FromErrno("eventfd");
  loop_ = std::make_unique<Loop>(this);
  return loop_->Init();
}

void Server::Serve() {
  hami::Status status = loop_->Run();
  loop_->CloseAll();
  if (!status.ok()) {
    status = std::move(status).error().Context("serving " + options_.socket_path);
  }
  serve_status_ = std::move(status);
  finished_.store(true, std::memory_order_release);
  SignalEventFd(done_fd_.get());
}

void Server::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    SignalEventFd(wake_fd_.get());
    thread_.join();
  }
  listen_fd_.Reset();
  if (socket_bound_) {
    struct stat st;
    if (fstatat(dir_fd_.get(), socket_name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        st.st_dev == socket_dev_ && st.st_ino == socket_ino_) {
      unlinkat(dir_fd_.get(), socket_name_.c_str(), 0);
    }
    socket_bound_ = false;
  }
  lock_fd_.Reset();
}

hami::Status Server::Wait() {
  while (!finished_.load(std::memory_order_acquire)) {
    pollfd p{done_fd_.get(), POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return Error::FromErrno("poll");
  }
  return serve_status_;
}

ServerCounters Server::Counters() const {
  ServerCounters s;
#define HAMI_BROKER_COUNTER_LOAD(e, label, doc) \
  s.label = counters_[size_t(Counter::e)].load(std::memory_order_relaxed);
  HAMI_BROKER_COUNTERS(HAMI_BROKER_COUNTER_LOAD)
#undef HAMI_BROKER_COUNTER_LOAD
  s.active = active_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace hami::broker
