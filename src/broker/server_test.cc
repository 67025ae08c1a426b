// The broker server over real Unix sockets: the golden frames, fragmented and silent clients,
// saturation, the PID a client learns (also from a forked child and from a new PID
// namespace), and every refusal Start() makes at the socket's directory, lock and path.
#include "broker/server.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "broker/client.h"
#include "broker/golden_frames.h"
#include "broker/protocol.h"
#include "broker/silent_flood.h"
#include "common/clock.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"

namespace hami::broker {
namespace {

using ::testing::HasSubstr;
using Bytes = std::vector<uint8_t>;

constexpr int kWaitMs = 10000;  // every wait in these tests is bounded by this
constexpr uid_t kNobody = 65534;

// Polls `done` until it holds or kWaitMs pass.
bool WaitUntil(const std::function<bool()>& done) {
  const int64_t deadline = MonotonicNs() + int64_t(kWaitMs) * 1'000'000;
  while (!done()) {
    if (MonotonicNs() > deadline) return false;
    SleepForNs(1'000'000);
  }
  return true;
}

UniqueFd Connect(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    fd.Reset();
  }
  return fd;
}

void Send(int fd, const Bytes& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()))
      << std::strerror(errno);
}

// Everything the server sends until it closes the connection; nullopt if it has not closed
// within kWaitMs.
std::optional<Bytes> ReadToEof(int fd) {
  Bytes out;
  const int64_t deadline = MonotonicNs() + int64_t(kWaitMs) * 1'000'000;
  for (;;) {
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    if (left_ms <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(left_ms)) <= 0) continue;
    uint8_t buf[64];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return out;
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    out.insert(out.end(), buf, buf + n);
  }
}

enum class HalfClose { kNo, kYes };

// One connection: send `request` (then shut down the write side if asked) and return what
// came back before the server closed.
std::optional<Bytes> Exchange(const std::string& path, const Bytes& request,
                              HalfClose half_close = HalfClose::kNo) {
  UniqueFd fd = Connect(path);
  if (!fd.valid()) return std::nullopt;
  if (send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    return std::nullopt;
  }
  if (half_close == HalfClose::kYes) shutdown(fd.get(), SHUT_WR);
  return ReadToEof(fd.get());
}

// The success frame for `pid`, as the golden success frame with its PID field replaced.
Bytes GoldenSuccessFor(pid_t pid) {
  Bytes b = golden::kResponsePid8011;
  b[8] = uint8_t(uint32_t(pid) >> 24);
  b[9] = uint8_t(uint32_t(pid) >> 16);
  b[10] = uint8_t(uint32_t(pid) >> 8);
  b[11] = uint8_t(pid);
  return b;
}

ClientOptions TrustMe(const std::string& path) {
  ClientOptions o;
  o.socket_path = path.c_str();
  o.trusted_uid = geteuid();
  o.require_read_only_mount = false;
  o.timeout_ns = int64_t(kWaitMs) * 1'000'000;
  return o;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return mode_t(-1);
  return st.st_mode;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Leaves a socket file at `path` that nobody listens on.
bool MakeStaleSocket(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
}

bool WriteText(const std::string& path, const std::string& text) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  return fd.valid() && write(fd.get(), text.data(), text.size()) == ssize_t(text.size());
}

std::string ReadText(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string out;
  char buf[256];
  ssize_t n;
  while (fd.valid() && (n = read(fd.get(), buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
  return out;
}

class BrokerServerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  ServerOptions Options() const {
    ServerOptions o;
    o.socket_path = socket_path_;
    return o;
  }

  std::unique_ptr<Server> StartOrDie(ServerOptions o) {
    auto s = Server::Start(std::move(o));
    EXPECT_TRUE(s.ok()) << s.error().message();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  TempDir dir_{"hb"};  // short: sun_path holds 107 bytes
  std::string socket_path_ = dir_.File("broker.sock");
};

// ---- the decision, as a pure function ----

TEST(HandleRequestBytes, AnswersTheGoldenRequestsAndReadsThePeerOnlyForAValidOne) {
  struct Case {
    const Bytes* request;
    Action action;
    Counter outcome;
    bool peer_read;
  };
  const Case cases[] = {
      {&golden::kRequestV1, Action::kAnswer, Counter::kOk, true},
      {&golden::kRequestExtraBytes, Action::kAnswer, Counter::kOk, true},
      {&golden::kRequestBadMagic, Action::kAnswer, Counter::kBadMagic, false},
      {&golden::kRequestBadVersion, Action::kAnswer, Counter::kBadVersion, false},
      {&golden::kRequestBadCommand, Action::kAnswer, Counter::kBadCommand, false},
      {&golden::kRequestTruncated, Action::kClose, Counter::kTruncated, false},
  };
  for (const Case& c : cases) {
    int reads = 0;
    const Answer a = HandleRequestBytes(*c.request, StreamEnd::kEnded, [&reads] {
      ++reads;
      return PeerCredentials{true, 8011, 0};
    });
    EXPECT_EQ(a.action, c.action);
    EXPECT_EQ(a.outcome, c.outcome);
    EXPECT_EQ(reads, c.peer_read ? 1 : 0);
    if (c.outcome == Counter::kOk) {
      EXPECT_EQ(Bytes(a.frame.begin(), a.frame.end()), golden::kResponsePid8011);
    } else if (a.action == Action::kAnswer) {
      EXPECT_EQ(Bytes(a.frame.begin(), a.frame.end()), golden::kResponseInvalid);
    }
  }
}

TEST(HandleRequestBytes, WaitsForMoreWhileTheStreamIsOpen) {
  for (size_t n = 0; n < kRequestSize; ++n) {
    const Answer a =
        HandleRequestBytes(std::span(golden::kRequestV1).first(n), StreamEnd::kOpen, [] {
          return PeerCredentials{true, 1, 0};
        });
    EXPECT_EQ(a.action, Action::kReadMore) << n << " bytes";
  }
}

TEST(HandleRequestBytes, ClosesWithoutAnAnswerWhenThePeerPidIsUnknown) {
  for (PeerCredentials peer :
       {PeerCredentials{false, 0, 0}, PeerCredentials{true, 0, 0}, PeerCredentials{true, -5, 0}}) {
    const Answer a =
        HandleRequestBytes(golden::kRequestV1, StreamEnd::kOpen, [peer] { return peer; });
    EXPECT_EQ(a.action, Action::kClose);
    EXPECT_EQ(a.outcome, Counter::kPeerCredentialFailures);
  }
}

TEST(ServerCounters, EveryCounterHasAUniqueLabelInTheKeyValueLine) {
  ServerCounters c;
  c.accepted = 7;
  c.active = 3;
  const std::string line = c.ToKeyValues();
  std::vector<std::string> seen;
  for (size_t i = 0; i < kCounterCount; ++i) {
    const std::string name = CounterName(Counter(i));
    EXPECT_FALSE(name.empty());
    EXPECT_STRNE(CounterDoc(Counter(i)), "");
    EXPECT_THAT(seen, ::testing::Not(::testing::Contains(name)));
    seen.push_back(name);
    EXPECT_THAT(line, HasSubstr(name + "=")) << line;
  }
  EXPECT_THAT(line, HasSubstr("accepted=7 "));
  EXPECT_THAT(line, HasSubstr("active=3"));
  EXPECT_EQ(c.Get(Counter::kAccepted), 7u);
}

// ---- the wire ----

TEST_F(BrokerServerTest, AnswersEveryGoldenRequestWithTheDocumentedFrame) {
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  const Bytes success = GoldenSuccessFor(getpid());
  struct Case {
    const char* name;
    const Bytes* request;
    HalfClose half_close;
    Bytes expected;
  };
  const Case cases[] = {
      {"v1", &golden::kRequestV1, HalfClose::kNo, success},
      {"v1, then the write side shut", &golden::kRequestV1, HalfClose::kYes, success},
      {"extra bytes", &golden::kRequestExtraBytes, HalfClose::kNo, success},
      {"bad magic", &golden::kRequestBadMagic, HalfClose::kNo, golden::kResponseInvalid},
      {"bad version", &golden::kRequestBadVersion, HalfClose::kNo, golden::kResponseInvalid},
      {"bad command", &golden::kRequestBadCommand, HalfClose::kNo, golden::kResponseInvalid},
      {"truncated", &golden::kRequestTruncated, HalfClose::kYes, Bytes{}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::optional<Bytes> got = Exchange(server->path(), *c.request, c.half_close);
    ASSERT_TRUE(got.has_value()) << "the server did not close the connection";
    EXPECT_EQ(*got, c.expected);
  }
  const ServerCounters n = server->Counters();
  EXPECT_EQ(n.accepted, 7u);
  EXPECT_EQ(n.ok, 3u);
  EXPECT_EQ(n.bad_magic, 1u);
  EXPECT_EQ(n.bad_version, 1u);
  EXPECT_EQ(n.bad_command, 1u);
  EXPECT_EQ(n.truncated, 1u);
  EXPECT_EQ(n.timeouts + n.evicted + n.write_failures + n.peer_credential_failures, 0u);
  EXPECT_TRUE(WaitUntil([&] { return server->Counters().active == 0; }));
}

TEST_F(BrokerServerTest, AnswersARequestSentOneByteAtATime) {
  ServerOptions o = Options();
  o.transaction_timeout_ns = int64_t(kWaitMs) * 1'000'000;  // the pauses never reach it
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  UniqueFd fd = Connect(server->path());
  ASSERT_TRUE(fd.valid());
  for (uint8_t b : golden::kRequestV1) {
    Send(fd.get(), Bytes{b});
    SleepForNs(20'000'000);
  }
  std::optional<Bytes> got = ReadToEof(fd.get());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, GoldenSuccessFor(getpid()));
}

TEST_F(BrokerServerTest, TheClientLearnsItsOwnPid) {
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  const ClientResult r = QueryHostPid(TrustMe(server->path()));
  ASSERT_EQ(r.failure, ClientFailure::kNone) << ClientFailureName(r.failure) << " " << r.sys_errno;
  EXPECT_EQ(r.pid, getpid());
  EXPECT_TRUE(WaitUntil([&] { return server->Counters().ok == 1; }));
}

TEST_F(BrokerServerTest, AForkedChildLearnsItsOwnPidNotItsParents) {
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  UniqueFd rd(fds[0]), wr(fds[1]);
  const ClientOptions o = TrustMe(server->path());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const ClientResult r = QueryHostPid(o);
    const pid_t answer = r.failure == ClientFailure::kNone ? r.pid : -int(r.failure);
    _exit(write(fds[1], &answer, sizeof(answer)) == ssize_t(sizeof(answer)) ? 0 : 1);
  }
  wr.Reset();
  pid_t answer = 0;
  EXPECT_EQ(read(rd.get(), &answer, sizeof(answer)), ssize_t(sizeof(answer)));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(answer, child);
  EXPECT_NE(answer, getpid());
}

TEST_F(BrokerServerTest, ManyConcurrentClientsAreAllAnswered) {
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  constexpr int kClients = 64;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  threads.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      const ClientResult r = QueryHostPid(TrustMe(server->path()));
      if (r.failure == ClientFailure::kNone && r.pid == getpid()) ok.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClients);
  EXPECT_TRUE(WaitUntil([&] { return server->Counters().ok == uint64_t(kClients); }));
}

TEST_F(BrokerServerTest, ASilentClientIsClosedAtTheDeadlineAndCounted) {
  ServerOptions o = Options();
  o.transaction_timeout_ns = 100'000'000;
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  UniqueFd silent = Connect(server->path());
  UniqueFd partial = Connect(server->path());
  ASSERT_TRUE(silent.valid() && partial.valid());
  Send(partial.get(), Bytes(golden::kRequestV1.begin(), golden::kRequestV1.begin() + 4));
  for (int fd : {silent.get(), partial.get()}) {
    std::optional<Bytes> got = ReadToEof(fd);
    ASSERT_TRUE(got.has_value()) << "not closed at the deadline";
    EXPECT_TRUE(got->empty()) << "answered a client that never sent a whole request";
  }
  const ServerCounters n = server->Counters();
  EXPECT_EQ(n.timeouts, 2u);
  EXPECT_EQ(n.truncated, 0u);
  EXPECT_EQ(n.ok, 0u);
}

// Whether the server has closed `fd` (EOF or a reset, no bytes) within `timeout_ms`.
bool ClosedUnanswered(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  uint8_t byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Whether `fd` is still open with nothing to read (the server holds it).
bool StillHeld(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

TEST_F(BrokerServerTest, AtMaxActiveTheOldestSilentConnectionMakesRoomForANewcomer) {
  ServerOptions o = Options();
  o.max_active = 2;
  o.max_per_uid = 2;                          // only max_active applies
  o.transaction_timeout_ns = 60'000'000'000;  // the silent ones stay until evicted
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  UniqueFd oldest = Connect(server->path());
  ASSERT_TRUE(oldest.valid());
  ASSERT_TRUE(WaitUntil([&] { return server->Counters().active == 1; }));
  UniqueFd second = Connect(server->path());
  ASSERT_TRUE(second.valid());
  ASSERT_TRUE(WaitUntil([&] { return server->Counters().active == 2; }));

  // A newcomer that has sent nothing yet must wait: it takes the oldest one's slot.
  UniqueFd newcomer = Connect(server->path());
  ASSERT_TRUE(newcomer.valid());
  ASSERT_TRUE(WaitUntil([&] { return server->Counters().evicted == 1; }));
  EXPECT_TRUE(ClosedUnanswered(oldest.get(), kWaitMs)) << "the oldest was not closed";
  EXPECT_TRUE(StillHeld(second.get())) << "a newer connection was closed";
  Send(newcomer.get(), golden::kRequestV1);
  std::optional<Bytes> got = ReadToEof(newcomer.get());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, GoldenSuccessFor(getpid()));

  // A query through the client is answered too.
  const ClientResult r = QueryHostPid(TrustMe(server->path()));
  EXPECT_EQ(r.failure, ClientFailure::kNone) << ClientFailureName(r.failure);
  EXPECT_EQ(r.pid, getpid());
  EXPECT_TRUE(WaitUntil([&] { return server->Counters().ok == 2; }));
  const ServerCounters n = server->Counters();
  EXPECT_EQ(n.accepted, 4u);
  EXPECT_EQ(n.evicted, 1u);  // the query found a free slot, if it needed one
  EXPECT_EQ(n.timeouts + n.truncated + n.write_failures + n.accept_failures, 0u);
  EXPECT_TRUE(WaitUntil([&] { return server->Counters().active == 1; }));  // `second`
  EXPECT_TRUE(StillHeld(second.get()));
}

TEST_F(BrokerServerTest, ThePerUidCapDefaultsToAQuarterOfMaxActive) {
  for (int max_active : {512, 64, 3}) {
    ServerOptions o = Options();
    o.max_active = max_active;
    auto server = StartOrDie(o);
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(server->max_per_uid(), std::max(1, max_active / 4)) << max_active;
  }
}

TEST_F(BrokerServerTest, AUidAtItsCapEvictsItsOwnOldestAndOthersAreStillServed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: a client of another UID (setresuid)";
  constexpr int kCap = 4;
  constexpr int kOpened = 10;
  ServerOptions o = Options();
  o.max_active = 16;
  o.max_per_uid = kCap;
  o.transaction_timeout_ns = 60'000'000'000;
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  // Root's silent connection: the oldest of all, but not nobody's to evict.
  UniqueFd root_silent = Connect(server->path());
  ASSERT_TRUE(root_silent.valid());
  ASSERT_TRUE(WaitUntil([&] { return server->Counters().active == 1; }));

  int go[2], result[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(result, O_CLOEXEC), 0);
  UniqueFd go_rd(go[0]), go_wr(go[1]), result_rd(result[0]), result_wr(result[1]);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, server->path().c_str(), server->path().size() + 1);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Async-signal-safe calls only (the parent has threads). Connects one at a time, so the
    // server accepts them in this order; then, when told, reports which ones it closed.
    if (setresuid(kNobody, kNobody, kNobody) != 0) _exit(3);
    int fds[kOpened];
    for (int& fd : fds) {
      fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        _exit(4);
      }
    }
    char c;
    if (read(go[0], &c, 1) != 1) _exit(5);
    char closed[kOpened];
    for (int i = 0; i < kOpened; ++i) {
      // The evicted ones were closed before the parent said go; wait a little for them only.
      closed[i] = ClosedUnanswered(fds[i], i < kOpened - kCap ? kWaitMs : 0) ? 'x' : '-';
    }
    _exit(write(result[1], closed, sizeof(closed)) == ssize_t(sizeof(closed)) ? 0 : 6);
  }
  go_rd.Reset();
  result_wr.Reset();

  // Nobody's connections beyond its cap evict its own oldest: root's stays, nobody never
  // holds more than kCap.
  uint64_t most_active = 0;
  const bool settled = WaitUntil([&] {
    const ServerCounters n = server->Counters();
    most_active = std::max(most_active, n.active);
    return n.accepted == 1 + kOpened && n.evicted == kOpened - kCap;
  });
  const ServerCounters n = server->Counters();
  EXPECT_TRUE(settled) << n.ToKeyValues();
  EXPECT_LE(most_active, uint64_t(1 + kCap)) << "nobody held more than its cap";
  EXPECT_EQ(n.active, uint64_t(1 + kCap));
  EXPECT_TRUE(StillHeld(root_silent.get())) << "root's connection was evicted for nobody's";

  // Root is still served.
  const ClientResult r = QueryHostPid(TrustMe(server->path()));
  EXPECT_EQ(r.failure, ClientFailure::kNone) << ClientFailureName(r.failure);
  EXPECT_EQ(r.pid, getpid());

  ASSERT_EQ(write(go_wr.get(), "g", 1), 1);
  char closed[kOpened + 1] = {};
  EXPECT_EQ(read(result_rd.get(), closed, kOpened), ssize_t(kOpened));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_STREQ(closed, "xxxxxx----") << "x: closed by the server, oldest first";
  EXPECT_TRUE(WaitUntil([&] { return server->Counters().truncated == uint64_t(kCap); }));
  EXPECT_EQ(server->Counters().evicted, uint64_t(kOpened - kCap));
}

TEST_F(BrokerServerTest, LegitimateClientsAreServedThroughAFloodOfSilentConnections) {
  constexpr int kFlood = 2000;
  constexpr int kClients = 80;
  constexpr int kQueriesEach = 5;
  constexpr int kQueries = kClients * kQueriesEach;
  const ServerOptions o = Options();  // the defaults: max_active 512, a quarter per UID
  if (!RaiseOpenFileLimit(rlim_t(kFlood + o.max_active + kClients + 256))) {
    GTEST_SKIP() << "needs " << kFlood + o.max_active + kClients + 256
                 << " descriptors: the hard RLIMIT_NOFILE is lower";
  }
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  SilentFlood flood(server->path(), kFlood);
  // The flood is on: the server holds its cap of silent connections and evicts for newer ones.
  ASSERT_TRUE(WaitUntil([&] {
    const ServerCounters n = server->Counters();
    return n.active >= uint64_t(server->max_per_uid()) && n.evicted >= uint64_t(kFlood);
  })) << server->Counters().ToKeyValues();
  const uint64_t evicted_before = server->Counters().evicted;

  // The clients use the client's real deadline.
  ClientOptions client = TrustMe(server->path());
  client.timeout_ns = kClientTimeoutNs;
  std::atomic<int> answered{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  threads.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      for (int q = 0; q < kQueriesEach; ++q) {
        const ClientResult r = QueryHostPid(client);
        if (r.failure == ClientFailure::kNone && r.pid == getpid()) {
          answered.fetch_add(1);
        } else if (r.failure == ClientFailure::kNone) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const ServerCounters n = server->Counters();
  EXPECT_FALSE(flood.failed());
  EXPECT_GT(n.evicted, evicted_before) << "the flood stopped before the clients were done";
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(answered.load() * 100, kQueries * 99)
      << answered.load() << " of " << kQueries << " queries answered; " << n.ToKeyValues()
      << " reopened=" << flood.reopened();
}

TEST_F(BrokerServerTest, AFloodFromOneUidLeavesRoomForAnotherUidsSlowClients) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: a flood from another UID (setresuid)";
  constexpr int kFlood = 2000;
  constexpr int kClients = 80;
  ServerOptions o = Options();  // the defaults: max_active 512, a quarter per UID
  o.transaction_timeout_ns = int64_t(kWaitMs) * 1'000'000;  // the slow clients never reach it
  if (!RaiseOpenFileLimit(rlim_t(kFlood + o.max_active + kClients + 256))) {
    GTEST_SKIP() << "needs " << kFlood + o.max_active + kClients + 256
                 << " descriptors: the hard RLIMIT_NOFILE is lower";
  }
  // The flood runs in a child of UID 65534, forked while this process has one thread.
  int go[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  UniqueFd go_rd(go[0]), go_wr(go[1]);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    go_wr.Reset();
    if (setresuid(kNobody, kNobody, kNobody) != 0) _exit(3);
    char c;
    if (read(go_rd.get(), &c, 1) != 1) _exit(4);  // the server is listening
    bool failed;
    {
      SilentFlood flood(socket_path_, kFlood);
      while (read(go_rd.get(), &c, 1) > 0) {  // until the test closes its end
      }
      failed = flood.failed();
    }
    _exit(failed ? 5 : 0);
  }
  go_rd.Reset();
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(write(go_wr.get(), "g", 1), 1);
  const bool flooding = WaitUntil([&] {
    const ServerCounters n = server->Counters();
    return n.active >= uint64_t(server->max_per_uid()) && n.evicted >= uint64_t(kFlood);
  });

  // Each client connects, then sends its request only once the server has evicted more
  // connections than its listen queue and its table hold together: the client's connection
  // has been held through a whole turnover of the table. Without the per-UID cap the flood
  // would have evicted it.
  const uint64_t turnover = uint64_t(o.listen_backlog) + 2 * uint64_t(o.max_active);
  std::atomic<int> answered{0}, not_connected{0}, stalled{0};
  std::vector<std::thread> threads;
  if (flooding) {
    threads.reserve(kClients);
    for (int i = 0; i < kClients; ++i) {
      threads.emplace_back([&] {
        UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
        int rc = -1;
        WaitUntil([&] {  // a full listen queue refuses a non-blocking connect: try again
          rc = connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
          return rc == 0 || errno != EAGAIN;
        });
        if (rc != 0) {
          not_connected.fetch_add(1);
          return;
        }
        const uint64_t at_connect = server->Counters().evicted;
        if (!WaitUntil([&] { return server->Counters().evicted >= at_connect + turnover; })) {
          stalled.fetch_add(1);
        }
        std::optional<Bytes> got;
        if (send(fd.get(), golden::kRequestV1.data(), golden::kRequestV1.size(), MSG_NOSIGNAL) ==
            ssize_t(golden::kRequestV1.size())) {
          got = ReadToEof(fd.get());
        }
        if (got == GoldenSuccessFor(getpid())) answered.fetch_add(1);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  const ServerCounters n = server->Counters();
  go_wr.Reset();  // the flood ends
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(flooding) << "the flood never filled its cap: " << n.ToKeyValues();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(not_connected.load(), 0);
  EXPECT_EQ(stalled.load(), 0) << "the flood stopped evicting";
  EXPECT_EQ(answered.load(), kClients) << n.ToKeyValues();
}

TEST_F(BrokerServerTest, SetsDirectoryLockAndSocketModesWhateverTheUmask) {
  const std::string nested = dir_.File("a/b/broker.sock");
  ServerOptions o = Options();
  o.socket_path = nested;
  const mode_t old_umask = umask(077);
  auto server = StartOrDie(o);
  umask(old_umask);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(ModeOf(dir_.File("a")) & 07777, 0755u);
  EXPECT_EQ(ModeOf(dir_.File("a/b")) & 07777, 0711u);
  EXPECT_EQ(ModeOf(dir_.File("a/b/broker.lock")), mode_t(S_IFREG | 0600));
  EXPECT_EQ(ModeOf(nested), mode_t(S_IFSOCK | 0666));
  EXPECT_EQ(server->lock_path(), dir_.File("a/b/broker.lock"));
}

TEST_F(BrokerServerTest, AnExistingDirectoryIsSetTo0711) {
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(ModeOf(dir_.path()), mode_t(S_IFDIR | 0711));
}

TEST_F(BrokerServerTest, ADirectorySharedWithOtherWritersIsRefusedAndLeftAlone) {
  for (mode_t mode : {mode_t(01777), mode_t(0777), mode_t(0775)}) {
    ASSERT_EQ(chmod(dir_.path().c_str(), mode), 0);
    auto s = Server::Start(Options());
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
    char octal[16];
    std::snprintf(octal, sizeof(octal), "0%o", unsigned(mode));
    EXPECT_EQ(s.error().message(), dir_.path() + ": the socket directory (mode " + octal +
                                       ") is shared with other writers; give the broker a "
                                       "directory of its own");
    EXPECT_EQ(ModeOf(dir_.path()) & 07777, mode);
    EXPECT_FALSE(Exists(dir_.File("broker.lock")));
  }
}

TEST_F(BrokerServerTest, ASocketDirectlyUnderTheRootIsRefused) {
  ServerOptions o = Options();
  o.socket_path = "/broker.sock";
  auto s = Server::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(Exists("/broker.lock"));
}

TEST_F(BrokerServerTest, ASecondServerOnTheSameDirectoryIsRefused) {
  auto first = StartOrDie(Options());
  ASSERT_NE(first, nullptr);
  ServerOptions o = Options();
  auto second = Server::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), ErrorCode::kBusy);
  EXPECT_EQ(second.error().message(), "another broker holds " + dir_.File("broker.lock"));
  o.socket_path = dir_.File("other.sock");  // another name in the same directory
  auto third = Server::Start(o);
  ASSERT_FALSE(third.ok());
  EXPECT_THAT(third.error().message(), HasSubstr("another broker holds"));
  EXPECT_FALSE(Exists(dir_.File("other.sock")));
  // The first is untouched and still serving.
  const ClientResult r = QueryHostPid(TrustMe(first->path()));
  EXPECT_EQ(r.failure, ClientFailure::kNone) << ClientFailureName(r.failure);
}

TEST_F(BrokerServerTest, ARegularFileAtTheSocketPathIsRefusedAndLeftAlone) {
  ASSERT_TRUE(WriteText(socket_path_, "keep me\n"));
  auto s = Server::Start(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(s.error().message(),
            socket_path_ + ": is a regular file, not a socket; refusing to replace it");
  EXPECT_EQ(ReadText(socket_path_), "keep me\n");
}

TEST_F(BrokerServerTest, ADirectoryAtTheSocketPathIsRefused) {
  ASSERT_EQ(mkdir(socket_path_.c_str(), 0755), 0);
  auto s = Server::Start(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("is a directory, not a socket"));
  EXPECT_TRUE(S_ISDIR(ModeOf(socket_path_)));
}

TEST_F(BrokerServerTest, ASymlinkedDirectoryIsRefused) {
  const std::string real = dir_.File("real");
  const std::string link = dir_.File("link");
  ASSERT_EQ(mkdir(real.c_str(), 0711), 0);
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  ServerOptions o = Options();
  o.socket_path = link + "/broker.sock";
  auto s = Server::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(s.error().message(),
            link + ": the socket directory is a symlink; refusing to follow it");
  EXPECT_FALSE(Exists(real + "/broker.lock"));
  EXPECT_FALSE(Exists(real + "/broker.sock"));
}

TEST_F(BrokerServerTest, ASymlinkedLockFileIsRefused) {
  const std::string target = dir_.File("elsewhere");
  ASSERT_EQ(symlink(target.c_str(), dir_.File("broker.lock").c_str()), 0);
  auto s = Server::Start(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(s.error().message(),
            dir_.File("broker.lock") + ": the lock file is a symlink; refusing to follow it");
  EXPECT_FALSE(Exists(target));
  EXPECT_FALSE(Exists(socket_path_));
}

TEST_F(BrokerServerTest, ALockFileThatIsNotARegularFileIsRefused) {
  ASSERT_EQ(mkfifo(dir_.File("broker.lock").c_str(), 0600), 0);
  auto s = Server::Start(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(),
            dir_.File("broker.lock") + ": the lock file is a FIFO, not a regular file");
}

TEST_F(BrokerServerTest, ASocketOwnedByAnotherUidIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: chown a socket to another UID";
  ASSERT_TRUE(MakeStaleSocket(socket_path_));
  ASSERT_EQ(lchown(socket_path_.c_str(), kNobody, kNobody), 0);
  auto s = Server::Start(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(s.error().message(), socket_path_ +
                                     ": is a socket owned by UID 65534, not UID 0; refusing "
                                     "to replace it");
  struct stat st {};
  ASSERT_EQ(lstat(socket_path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
}

TEST_F(BrokerServerTest, ADirectoryOwnedByAnotherUidIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: chown a directory to another UID";
  const std::string theirs = dir_.File("theirs");
  ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(chown(theirs.c_str(), kNobody, kNobody), 0);
  ServerOptions o = Options();
  o.socket_path = theirs + "/broker.sock";
  auto s = Server::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(),
            theirs + ": the socket directory is owned by UID 65534, not UID 0");
  EXPECT_EQ(ModeOf(theirs) & 07777, 0755u);
}

TEST_F(BrokerServerTest, ALockFileOwnedByAnotherUidIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: chown the lock file to another UID";
  ASSERT_TRUE(WriteText(dir_.File("broker.lock"), ""));
  ASSERT_EQ(chown(dir_.File("broker.lock").c_str(), kNobody, kNobody), 0);
  auto s = Server::Start(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(),
            dir_.File("broker.lock") + ": the lock file is owned by UID 65534, not UID 0");
}

TEST_F(BrokerServerTest, AnActiveSocketIsRefusedEvenWithoutTheLock) {
  // Somebody (not a broker) listens at the path; no lock file guards it.
  UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener.get(), 8), 0);
  struct stat before {};
  ASSERT_EQ(lstat(socket_path_.c_str(), &before), 0);

  auto s = Server::Start(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kBusy);
  EXPECT_EQ(s.error().message(),
            socket_path_ + ": a server is listening on this socket; refusing to replace it");
  struct stat after {};
  ASSERT_EQ(lstat(socket_path_.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_TRUE(Connect(socket_path_).valid()) << "the listener lost its path";
}

TEST_F(BrokerServerTest, AStaleSocketIsReplaced) {
  ASSERT_TRUE(MakeStaleSocket(socket_path_));
  struct stat stale {};
  ASSERT_EQ(lstat(socket_path_.c_str(), &stale), 0);
  // A second name keeps the stale inode allocated, so the new socket cannot reuse its number.
  ASSERT_EQ(link(socket_path_.c_str(), dir_.File("stale").c_str()), 0);
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  struct stat now {};
  ASSERT_EQ(lstat(socket_path_.c_str(), &now), 0);
  EXPECT_TRUE(S_ISSOCK(now.st_mode));
  EXPECT_NE(now.st_ino, stale.st_ino);
  const ClientResult r = QueryHostPid(TrustMe(server->path()));
  EXPECT_EQ(r.failure, ClientFailure::kNone) << ClientFailureName(r.failure);
}

TEST_F(BrokerServerTest, StopRemovesTheSocketButKeepsTheLockFile) {
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(Exists(socket_path_));
  server->Stop();
  EXPECT_FALSE(Exists(socket_path_));
  EXPECT_TRUE(Exists(dir_.File("broker.lock")));
  EXPECT_TRUE(server->Wait().ok());
  server->Stop();  // idempotent
  // The lock was released: a new server starts on the same directory.
  auto again = StartOrDie(Options());
  EXPECT_NE(again, nullptr);
}

TEST_F(BrokerServerTest, StopLeavesAReplacedSocketPathAlone) {
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(unlink(socket_path_.c_str()), 0);
  ASSERT_TRUE(WriteText(socket_path_, "someone else's\n"));
  server->Stop();
  EXPECT_EQ(ReadText(socket_path_), "someone else's\n");
}

TEST_F(BrokerServerTest, TheDefaultPathNeedsRoot) {
  auto start_default = [] {
    ServerOptions o;  // kDefaultSocketPath, expected_uid = geteuid()
    auto s = Server::Start(o);
    return s.ok() ? std::string("started") : s.error().message();
  };
  if (geteuid() != 0) {
    EXPECT_EQ(start_default(), std::string(kDefaultSocketPath) +
                                   ": the default broker socket needs effective UID 0 (running "
                                   "as UID " +
                                   std::to_string(geteuid()) +
                                   "); run as root or choose another path");
    return;
  }
  // As root: the same check, in a child that has given up root (nothing is created: the
  // check comes before any file is touched).
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  UniqueFd rd(fds[0]), wr(fds[1]);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setresuid(kNobody, kNobody, kNobody) != 0) _exit(3);
    const std::string message = start_default();
    _exit(write(fds[1], message.data(), message.size()) == ssize_t(message.size()) ? 0 : 1);
  }
  wr.Reset();
  std::string message;
  char buf[512];
  ssize_t n;
  while ((n = read(rd.get(), buf, sizeof(buf))) > 0) message.append(buf, size_t(n));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(message, std::string(kDefaultSocketPath) +
                         ": the default broker socket needs effective UID 0 (running as UID "
                         "65534); run as root or choose another path");
}

TEST_F(BrokerServerTest, OptionsOutOfRangeAreRefused) {
  ServerOptions o = Options();
  o.max_active = 0;
  EXPECT_THAT(Server::Start(o).error().message(), HasSubstr("max_active 0 is not from 1 to"));
  for (int per_uid : {-1, 513}) {
    o = Options();
    o.max_per_uid = per_uid;
    EXPECT_EQ(Server::Start(o).error().message(),
              "max_per_uid " + std::to_string(per_uid) +
                  " is not from 1 to 512 (max_active), or 0 for max_active / 4");
  }
  o = Options();
  o.transaction_timeout_ns = 0;
  EXPECT_THAT(Server::Start(o).error().message(), HasSubstr("timeout must be positive"));
  o = Options();
  o.socket_path = "relative.sock";
  EXPECT_THAT(Server::Start(o).error().message(), HasSubstr("must be an absolute path"));
  o = Options();
  o.socket_path = "/tmp/" + std::string(120, 'x');
  EXPECT_THAT(Server::Start(o).error().message(), HasSubstr("longer than a Unix socket path"));
  o = Options();
  o.expected_uid = geteuid() + 1;
  EXPECT_THAT(Server::Start(o).error().message(), HasSubstr("is not the server's effective UID"));
  EXPECT_FALSE(Exists(socket_path_));
}

// The listening descriptor of `server` in this process (found by its bound path).
int ListeningFd(const std::string& path) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    auto number = ParseUint64(e->d_name, "fd");
    if (!number.ok() || int(*number) == dirfd(d)) continue;
    const int fd = int(*number);
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_un addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    if (path == addr.sun_path) found = fd;
  }
  closedir(d);
  return found;
}

TEST_F(BrokerServerTest, AFailingListeningSocketIsReportedByWait) {
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  const int fd = ListeningFd(server->path());
  ASSERT_GE(fd, 0);
  // Keep the socket open elsewhere, and put a non-socket at the server's descriptor number:
  // its next accept() fails as a broken listening socket would.
  UniqueFd keep(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(keep.valid() && null.valid());
  ASSERT_EQ(dup3(null.get(), fd, O_CLOEXEC), fd);
  UniqueFd client = Connect(server->path());
  ASSERT_TRUE(client.valid());
  pollfd p{server->done_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, kWaitMs), 1) << "serving did not end";
  const hami::Status status = server->Wait();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.error().message(), HasSubstr("accept on " + server->path()));
  EXPECT_THAT(status.error().message(), HasSubstr("Socket operation on non-socket"));
  server->Stop();
  EXPECT_FALSE(Exists(socket_path_));
}

// ---- PID namespaces ----

// The PIDs whose parent is `parent` (from /proc/<pid>/stat).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    auto number = ParseUint64(e->d_name, "pid");
    if (!number.ok()) continue;
    const pid_t pid = pid_t(*number);
    const std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(pid);
    }
  }
  closedir(d);
  return out;
}

std::string Unshare() {
  for (const char* p : {"/usr/bin/unshare", "/bin/unshare"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

TEST_F(BrokerServerTest, AClientInANewPidNamespaceLearnsItsPidInTheServersNamespace) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: unshare --pid";
  const std::string unshare = Unshare();
  if (unshare.empty()) GTEST_SKIP() << "needs unshare(1)";
  if (system((unshare + " --pid --fork /bin/true 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "needs root: unshare --pid is not permitted here (no CAP_SYS_ADMIN?)";
  }
  auto server = StartOrDie(Options());
  ASSERT_NE(server, nullptr);
  int in[2], out[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  UniqueFd in_rd(in[0]), in_wr(in[1]), out_rd(out[0]), out_wr(out[1]);
  const std::string uid = std::to_string(geteuid());
  std::vector<std::string> argv = {
      unshare,        "--pid",         "--fork", HAMI_BROKER_QUERY,        "--socket",
      server->path(), "--trusted-uid", uid,      "--allow-writable-mount", "--hold"};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t unshare_pid = fork();
  ASSERT_GE(unshare_pid, 0);
  if (unshare_pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    execv(args[0], args.data());
    _exit(127);
  }
  in_rd.Reset();
  out_wr.Reset();

  // Its line: "pid=1 host_pid=N".
  std::string line;
  pollfd p{out_rd.get(), POLLIN, 0};
  const int64_t deadline = MonotonicNs() + int64_t(kWaitMs) * 1'000'000;
  while (line.find('\n') == std::string::npos && MonotonicNs() < deadline) {
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    ssize_t n = read(out_rd.get(), buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, size_t(n));
  }
  int own = 0, host = 0;
  const bool parsed = std::sscanf(line.c_str(), "pid=%d host_pid=%d", &own, &host) == 2;
  // While it holds, its PID as this namespace sees it: the one child of unshare.
  const std::vector<pid_t> children = ChildrenOf(unshare_pid);
  in_wr.Reset();  // let it exit
  int status = 0;
  ASSERT_EQ(waitpid(unshare_pid, &status, 0), unshare_pid);
  ASSERT_TRUE(parsed) << "unexpected output: " << line;
  EXPECT_EQ(own, 1) << "the client is not the first process of a new PID namespace";
  ASSERT_EQ(children.size(), 1u);
  EXPECT_EQ(host, children[0]);
  EXPECT_NE(host, own);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace hami::broker
