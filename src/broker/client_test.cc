// The client against fake servers that misbehave in every way the security boundary and the
// failure table name: each must end with no PID trusted, within the client's deadline.
#include "broker/client.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "broker/golden_frames.h"
#include "broker/io.h"
#include "common/clock.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "support/subprocess.h"

namespace hami::broker {
namespace {

constexpr int64_t kTimeoutNs = 300'000'000;
// Generous: the deadline is a correctness property, the slack absorbs a loaded machine.
constexpr int64_t kDeadlineSlackNs = 2'000'000'000;

UniqueFd Listen(const std::string& path, int backlog = 16) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd.get(), backlog) != 0) {
    ADD_FAILURE() << "cannot listen at " << path << ": " << std::strerror(errno);
    return UniqueFd();
  }
  return fd;
}

// A server that accepts connections on its own thread and hands each to `handle`.
class FakeServer {
 public:
  FakeServer(const std::string& path, std::function<void(int)> handle)
      : listen_(Listen(path)), handle_(std::move(handle)) {
    thread_ = std::thread([this] {
      for (;;) {
        int fd = accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0 || stop_.load()) {
          if (fd >= 0) close(fd);
          return;
        }
        handle_(fd);
        close(fd);
      }
    });
  }
  ~FakeServer() {
    stop_.store(true);
    shutdown(listen_.get(), SHUT_RDWR);
    thread_.join();
  }

 private:
  UniqueFd listen_;
  std::function<void(int)> handle_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Opened by the test once the client has given up: a fake server's handler that waits on it
// answers late (or not at all) without a timer deciding what "late" is. Declare it before
// the FakeServer whose handler waits on it, and Open() it before that server goes.
class Gate {
 public:
  Gate() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      read_.Reset(fds[0]);
      write_.Reset(fds[1]);
    }
  }
  ~Gate() { Open(); }
  void Open() { write_.Reset(); }
  // Blocks until Open() (bounded, so that a test that never opens it still ends).
  void Wait() const {
    pollfd p{read_.get(), POLLIN, 0};
    while (poll(&p, 1, 60'000) < 0 && errno == EINTR) {
    }
  }

 private:
  UniqueFd read_, write_;
};

// Sends `bytes` to the peer one at a time, each only after the peer has read the one before,
// so that every byte arrives in a read of its own. Whether the peer has read is the socket's
// unread output (SIOCOUTQ): no event announces it, so it is polled, bounded.
void SendOneByteAtATime(int fd, const std::vector<uint8_t>& bytes) {
  for (uint8_t b : bytes) {
    if (send(fd, &b, 1, MSG_NOSIGNAL) != 1) return;
    hami::testing::PollUntil(
        [fd] {
          int unread = 0;
          return ioctl(fd, SIOCOUTQ, &unread) != 0 || unread == 0;
        },
        5'000, 100);
  }
}

// Reads the 8-byte request, then writes `reply`.
std::function<void(int)> Replying(std::vector<uint8_t> reply,
                                  std::vector<uint8_t>* request_seen = nullptr) {
  return [reply, request_seen](int fd) {
    uint8_t req[kRequestSize];
    size_t got = 0;
    (void)ReadFull(fd, req, sizeof(req), MonotonicNs() + 2'000'000'000, &got);
    if (request_seen != nullptr) request_seen->assign(req, req + got);
    (void)WriteFull(fd, reply.data(), reply.size(), MonotonicNs() + 2'000'000'000);
  };
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override { chmod(dir_.path().c_str(), 0755); }
  ClientOptions Options() const {
    ClientOptions o;
    o.socket_path = path_.c_str();
    o.trusted_uid = geteuid();
    o.require_read_only_mount = false;
    o.timeout_ns = kTimeoutNs;
    return o;
  }
  // Queries and checks the deadline held.
  ClientResult Query(const ClientOptions& o) {
    const int64_t start = MonotonicNs();
    ClientResult r = QueryHostPid(o);
    EXPECT_LT(MonotonicNs() - start, o.timeout_ns + kDeadlineSlackNs) << "the deadline held";
    if (r.failure != ClientFailure::kNone) {
      EXPECT_EQ(r.pid, 0) << "no PID comes with a failure";
    }
    return r;
  }
  ClientResult Query() { return Query(Options()); }

  TempDir dir_{"hbc"};
  std::string path_ = dir_.File("b.sock");
};

TEST_F(ClientTest, SendsTheGoldenRequestAndTrustsTheGoldenSuccess) {
  std::vector<uint8_t> seen;
  FakeServer server(path_, Replying(golden::kResponsePid8011, &seen));
  ClientResult r = Query();
  EXPECT_EQ(r.failure, ClientFailure::kNone) << ClientFailureName(r.failure);
  EXPECT_EQ(r.pid, 8011);
  EXPECT_EQ(seen, golden::kRequestV1);
}

TEST_F(ClientTest, ExtraBytesAfterTheResponseAreNotRead) {
  FakeServer server(path_, Replying(golden::kResponseExtraBytes));
  ClientResult r = Query();
  EXPECT_EQ(r.failure, ClientFailure::kNone);
  EXPECT_EQ(r.pid, 8011);
}

TEST_F(ClientTest, ResponsesThatFailValidationGiveNoPid) {
  struct Case {
    const std::vector<uint8_t>* frame;
    ClientFailure failure;
    FrameError error;
  };
  const Case cases[] = {
      {&golden::kResponseInvalid, ClientFailure::kRefused, FrameError::kRefused},
      {&golden::kResponseBadMagic, ClientFailure::kBadReply, FrameError::kBadMagic},
      {&golden::kResponseBadVersion, ClientFailure::kBadReply, FrameError::kBadVersion},
      {&golden::kResponsePidZero, ClientFailure::kBadReply, FrameError::kBadPid},
      {&golden::kResponsePidAboveIntMax, ClientFailure::kBadReply, FrameError::kBadPid},
  };
  for (const Case& c : cases) {
    FakeServer server(path_, Replying(*c.frame));
    ClientResult r = Query();
    EXPECT_EQ(r.failure, c.failure) << ClientFailureName(r.failure);
    EXPECT_EQ(r.frame_error, c.error) << FrameErrorName(r.frame_error);
    unlink(path_.c_str());
  }
}

TEST_F(ClientTest, APartialFrameThenEndOfStreamIsNotCompletedFromOldBytes) {
  // A good answer first, then a connection that sends 11 bytes and closes: the second query
  // must not reuse anything of the first.
  {
    FakeServer good(path_, Replying(golden::kResponsePid8011));
    EXPECT_EQ(Query().pid, 8011);
  }
  unlink(path_.c_str());
  FakeServer partial(path_, Replying(golden::kResponseTruncated));
  ClientResult r = Query();
  EXPECT_EQ(r.failure, ClientFailure::kClosed) << ClientFailureName(r.failure);
}

TEST_F(ClientTest, AResponseArrivingOneByteAtATimeIsAssembled) {
  FakeServer server(path_, [](int fd) {
    uint8_t req[kRequestSize];
    size_t got = 0;
    (void)ReadFull(fd, req, sizeof(req), MonotonicNs() + 2'000'000'000, &got);
    SendOneByteAtATime(fd, golden::kResponsePid8011);
  });
  EXPECT_EQ(Query().pid, 8011);
}

TEST_F(ClientTest, ASilentServerTimesOut) {
  // The server holds the connection open, saying nothing, until the client has given up.
  Gate client_done;
  FakeServer server(path_, [&client_done](int) { client_done.Wait(); });
  EXPECT_EQ(Query().failure, ClientFailure::kTimeout);
  client_done.Open();
}

TEST_F(ClientTest, ASlowServerTimesOutBeforeItAnswers) {
  // The server reads the request and answers only once the client has given up.
  Gate client_done;
  FakeServer server(path_, [&client_done](int fd) {
    client_done.Wait();
    Replying(golden::kResponsePid8011)(fd);
  });
  EXPECT_EQ(Query().failure, ClientFailure::kTimeout);
  client_done.Open();
}

TEST_F(ClientTest, AServerThatDiesOnEveryConnectionGivesNoPid) {
  FakeServer server(path_, [](int) {});  // accepted, then closed at once
  EXPECT_EQ(Query().failure, ClientFailure::kClosed);
}

TEST_F(ClientTest, ASaturatedServerTimesOutInConnect) {
  UniqueFd listener = Listen(path_, 0);  // never accepts
  std::vector<UniqueFd> queued;
  for (int i = 0; i < 8; ++i) {  // fill the accept queue
    UniqueFd c(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    if (connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) break;
    queued.push_back(std::move(c));
  }
  ClientResult r = Query();
  EXPECT_TRUE(r.failure == ClientFailure::kTimeout) << ClientFailureName(r.failure);
}

TEST_F(ClientTest, ARestartingServerIsRefusedWhileDownAndAnswersWhenBack) {
  { UniqueFd gone = Listen(path_); }  // a socket file that nobody listens on any more
  EXPECT_EQ(Query().failure, ClientFailure::kConnect);
  unlink(path_.c_str());
  FakeServer back(path_, Replying(golden::kResponsePid8011));
  EXPECT_EQ(Query().pid, 8011);
}

TEST_F(ClientTest, NoSocketOrNoDirectoryIsMissing) {
  EXPECT_EQ(Query().failure, ClientFailure::kMissing);
  ClientOptions o = Options();
  std::string nowhere = dir_.File("nowhere/b.sock");
  o.socket_path = nowhere.c_str();
  EXPECT_EQ(Query(o).failure, ClientFailure::kMissing);
}

TEST_F(ClientTest, AWritableDirectoryIsNeverTrusted) {
  FakeServer server(path_, Replying(golden::kResponsePid8011));
  for (mode_t mode : std::initializer_list<mode_t>{0777, 0775, 0757, 01777}) {
    ASSERT_EQ(chmod(dir_.path().c_str(), mode), 0);
    EXPECT_EQ(Query().failure, ClientFailure::kUnsafeDirectory) << std::oct << mode;
  }
  ASSERT_EQ(chmod(dir_.path().c_str(), 0711), 0);
  EXPECT_EQ(Query().pid, 8011) << "0711 is what the broker uses";
}

TEST_F(ClientTest, ASymlinkedEndpointOrDirectoryIsNeverTrusted) {
  TempDir real("hbr");
  chmod(real.path().c_str(), 0755);
  std::string real_sock = real.File("b.sock");
  FakeServer server(real_sock, Replying(golden::kResponsePid8011));
  ASSERT_EQ(symlink(real_sock.c_str(), path_.c_str()), 0);
  EXPECT_EQ(Query().failure, ClientFailure::kUnsafeEndpoint);

  std::string link_dir = dir_.File("d");
  ASSERT_EQ(symlink(real.path().c_str(), link_dir.c_str()), 0);
  ClientOptions o = Options();
  std::string via = link_dir + "/b.sock";
  o.socket_path = via.c_str();
  EXPECT_EQ(Query(o).failure, ClientFailure::kUnsafeDirectory);
}

TEST_F(ClientTest, ARegularFileAtTheEndpointIsNotASocket) {
  UniqueFd f(open(path_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  EXPECT_EQ(Query().failure, ClientFailure::kUnsafeEndpoint);
}

TEST_F(ClientTest, AnotherOwnerIsNeverTrusted) {
  FakeServer server(path_, Replying(golden::kResponsePid8011));
  ClientOptions o = Options();
  o.trusted_uid = geteuid() + 1;
  EXPECT_EQ(Query(o).failure, ClientFailure::kUnsafeDirectory);
  if (geteuid() != 0) return;  // the rest needs root to give the socket away
  ASSERT_EQ(chown(path_.c_str(), 65534, 65534), 0);
  EXPECT_EQ(Query().failure, ClientFailure::kUnsafeEndpoint);
}

TEST_F(ClientTest, APeerOfAnotherUidIsNeverTrusted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the fake server drops to another UID";
  // The socket is bound as root (so the file passes the owner check), then the serving
  // process becomes UID 65534 and listens: only the peer-credential check can catch it.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // SO_PEERCRED reports the listener's credentials as of listen(): drop them before it.
    UniqueFd l(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    if (bind(l.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(3);
    if (setgid(65534) != 0 || setuid(65534) != 0 || listen(l.get(), 4) != 0) _exit(3);
    (void)!write(ready[1], "y", 1);
    int fd = accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC);
    Replying(golden::kResponsePid8011)(fd);
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  EXPECT_EQ(Query().failure, ClientFailure::kUntrustedPeer);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST_F(ClientTest, TheMountMustBeReadOnlyWhenRequired) {
  FakeServer server(path_, Replying(golden::kResponsePid8011));
  ClientOptions o = Options();
  o.require_read_only_mount = true;
  EXPECT_EQ(Query(o).failure, ClientFailure::kWritableMount);
  if (geteuid() != 0) return;  // a read-only bind mount needs root
  // In a child with a private mount namespace: the directory bound read-only onto itself.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        mount(dir_.path().c_str(), dir_.path().c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        mount(nullptr, dir_.path().c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr)) {
      _exit(77);
    }
    ClientResult r = QueryHostPid(o);
    _exit(r.failure == ClientFailure::kNone && r.pid == 8011 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "this machine refuses mount namespaces";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "trusted through a read-only mount";
}

// ---- the I/O helpers over a socket pair, fragmented both ways ----

TEST(FullIo, MovesAFrameSentOneByteAtATime) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  std::thread writer([&] {
    for (uint8_t byte : golden::kRequestV1) {
      EXPECT_TRUE(WriteFull(a.get(), &byte, 1, MonotonicNs() + 2'000'000'000).ok());
      // The next byte only once the reader has this one (SIOCOUTQ: no event says so).
      hami::testing::PollUntil(
          [&a] {
            int unread = 0;
            return ioctl(a.get(), SIOCOUTQ, &unread) != 0 || unread == 0;
          },
          5'000, 100);
    }
  });
  uint8_t got_bytes[kRequestSize];
  size_t got = 0;
  EXPECT_TRUE(
      ReadFull(b.get(), got_bytes, sizeof(got_bytes), MonotonicNs() + 5'000'000'000, &got).ok());
  writer.join();
  EXPECT_EQ(std::vector<uint8_t>(got_bytes, got_bytes + got), golden::kRequestV1);
}

TEST(FullIo, ReportsEndOfStreamTimeoutAndAClosedPeerWithoutSigpipe) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  uint8_t buf[12];
  size_t got = 0;
  hami::Status timed_out = ReadFull(b.get(), buf, sizeof(buf), MonotonicNs() + 50'000'000, &got);
  ASSERT_FALSE(timed_out.ok());
  EXPECT_EQ(timed_out.error().code(), ErrorCode::kTimeout);
  EXPECT_EQ(timed_out.error().sys_errno(), ETIMEDOUT);
  send(a.get(), "HPID", 4, MSG_NOSIGNAL);
  a.Reset();
  hami::Status ended = ReadFull(b.get(), buf, sizeof(buf), MonotonicNs() + 1'000'000'000, &got);
  ASSERT_FALSE(ended.ok());
  EXPECT_EQ(ended.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(ended.error().text(), "the peer closed the stream");
  EXPECT_EQ(got, 4u);
  // Writing to a closed peer: an error result, and the process is still here (no SIGPIPE).
  hami::Status closed = WriteFull(b.get(), buf, sizeof(buf), MonotonicNs() + 1'000'000'000);
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.error().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(closed.error().sys_errno() == EPIPE || closed.error().sys_errno() == ECONNRESET);
}

}  // namespace
}  // namespace hami::broker
