#include "sim/host_pid.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "sim/procfs.h"

namespace hami::sim {
namespace {

// A process that serves (or tries to serve) the resolver of `state` until it is killed; the
// test process itself never serves, so each test starts from nothing.
class ResolverProcess {
 public:
  explicit ResolverProcess(const std::string& state) {
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      const char started = StartHostPidResolver(state) ? '1' : '0';
      if (write(ready[1], &started, 1) != 1) _exit(1);
      for (;;) pause();
    }
    close(ready[1]);
    char started = '0';
    started_ = read(ready[0], &started, 1) == 1 && started == '1';
    close(ready[0]);
  }
  ~ResolverProcess() { Kill(); }
  ResolverProcess(const ResolverProcess&) = delete;
  ResolverProcess& operator=(const ResolverProcess&) = delete;

  bool started() const { return started_; }
  pid_t pid() const { return pid_; }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  bool started_ = false;
};

class HostPidResolverTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }
  std::string State() const { return dir_.File("sim.state"); }

  TempDir dir_{"hami-sim-hostpid"};
};

TEST_F(HostPidResolverTest, AnswersAnAskerWithItsOwnPidInTheResolversNamespace) {
  ResolverProcess resolver(State());
  ASSERT_TRUE(resolver.started());
  EXPECT_EQ(AskHostPid(State()), getpid());
  EXPECT_EQ(AskHostPid(State()), getpid()) << "and again: one answer per request";
}

TEST_F(HostPidResolverTest, WithNoResolverTheAnswerIsUnknown) {
  EXPECT_EQ(AskHostPid(State()), 0);
  EXPECT_EQ(AskHostPid(dir_.File(std::string(200, 'x'))), 0) << "a path too long for a socket";
}

TEST_F(HostPidResolverTest, ASecondProcessFindsTheSocketServedAndLeavesItAlone) {
  ResolverProcess first(State());
  ASSERT_TRUE(first.started());
  ResolverProcess second(State());
  EXPECT_FALSE(second.started()) << "the first one holds the lock";
  second.Kill();
  EXPECT_EQ(AskHostPid(State()), getpid()) << "the first one still answers";
}

TEST_F(HostPidResolverTest, AfterTheResolverDiesItsSocketIsReplacedByTheNextOne) {
  ResolverProcess first(State());
  ASSERT_TRUE(first.started());
  first.Kill();
  EXPECT_EQ(AskHostPid(State()), 0) << "a dead resolver answers nothing";
  ResolverProcess next(State());
  ASSERT_TRUE(next.started()) << "the kernel dropped the dead one's lock";
  EXPECT_EQ(AskHostPid(State()), getpid());
}

TEST_F(HostPidResolverTest, AResolverThatNeverAnswersLeavesTheAnswerUnknownAfterTheWait) {
  ASSERT_EQ(mkdir((State() + ".hostpid").c_str(), 0755), 0);
  UniqueFd silent(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = HostPidSocketPath(State());
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(silent.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(AskHostPid(State(), 100), 0);
}

// Sends `bytes` to the resolver with this process's credentials and `fds` attached.
void SendRaw(const std::string& state, const std::string& bytes, const std::vector<int>& fds) {
  UniqueFd sock(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = HostPidSocketPath(state);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * 4)] = {};
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = sizeof(addr);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen =
      CMSG_SPACE(sizeof(ucred)) + (fds.empty() ? 0 : CMSG_SPACE(sizeof(int) * fds.size()));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  ucred cred{getpid(), geteuid(), getegid()};
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_CREDENTIALS;
  c->cmsg_len = CMSG_LEN(sizeof(ucred));
  std::memcpy(CMSG_DATA(c), &cred, sizeof(cred));
  if (!fds.empty()) {
    c = CMSG_NXTHDR(&msg, c);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ASSERT_EQ(sendmsg(sock.get(), &msg, MSG_NOSIGNAL), ssize_t(bytes.size())) << strerror(errno);
}

// What comes back on `fd` within 5 s: the packet's bytes, or "" at end of file / timeout.
std::string ReadAnswer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 5000) != 1) return "timeout";
  char buf[64];
  const ssize_t n = recv(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, size_t(n)) : "";
}

std::string AnswerOf(int32_t pid) {
  std::string out(kAnswer, sizeof(kAnswer));
  out.append(reinterpret_cast<const char*>(&pid), sizeof(pid));
  return out;
}

TEST_F(HostPidResolverTest, AMalformedRequestIsAnsweredUnknownAndServingGoesOn) {
  ResolverProcess resolver(State());
  ASSERT_TRUE(resolver.started());
  const std::string ask(kAsk, sizeof(kAsk));
  struct Case {
    const char* what;
    std::string bytes;
  };
  for (const Case& c : {Case{"another magic", "SIMHPID!"}, Case{"short", ask.substr(0, 7)},
                        Case{"long", ask + "x"}, Case{"empty", ""}}) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    UniqueFd mine(pair[0]), theirs(pair[1]);
    SendRaw(State(), c.bytes, {theirs.get()});
    theirs.Reset();
    EXPECT_EQ(ReadAnswer(mine.get()), AnswerOf(0)) << c.what;
  }
  {
    // Two reply descriptors: neither is answered, both are closed.
    int a[2], b[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, a), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, b), 0);
    UniqueFd a0(a[0]), a1(a[1]), b0(b[0]), b1(b[1]);
    SendRaw(State(), ask, {a1.get(), b1.get()});
    a1.Reset();
    b1.Reset();
    EXPECT_EQ(ReadAnswer(a0.get()), "");
    EXPECT_EQ(ReadAnswer(b0.get()), "");
  }
  SendRaw(State(), ask, {});  // nowhere to answer: dropped
  EXPECT_EQ(AskHostPid(State()), getpid()) << "the resolver still serves";
}

// What the grandchild in a new PID namespace reports, and its PID as its parent (of the
// test's namespace) saw it.
struct NamespaceReport {
  int error = 0;       // errno of unshare or mount in the child, 0 when it ran
  pid_t host_pid = 0;  // the grandchild's PID in the test's namespace
  pid_t self = 0;      // getpid() in the grandchild
  pid_t asked = 0;     // AskHostPid() in the grandchild
  pid_t resolved = 0;  // PidInNamespace() in the grandchild
};

enum class OwnProc { kNo, kYes };

// Runs a grandchild as PID 1 of a new PID namespace (with its own /proc when asked), which
// reports and then waits until `hold` reads end of file.
class NamespaceChild {
 public:
  NamespaceChild(const std::string& state, OwnProc own_proc) {
    int report[2], hold[2];
    if (pipe2(report, O_CLOEXEC) != 0 || pipe2(hold, O_CLOEXEC) != 0) return;
    const uint64_t host_ns = procfs::PidNsInode();
    pid_ = fork();
    if (pid_ == 0) {
      close(report[0]);
      close(hold[1]);
      Child(state, host_ns, own_proc, report[1], hold[0]);
    }
    close(report[1]);
    close(hold[0]);
    hold_.Reset(hold[1]);
    report_.Reset(report[0]);
  }
  ~NamespaceChild() {
    hold_.Reset();
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  NamespaceChild(const NamespaceChild&) = delete;
  NamespaceChild& operator=(const NamespaceChild&) = delete;

  // Both records, in whichever order they come: the child's (the grandchild's host PID) and
  // the grandchild's; or the first error.
  NamespaceReport Read() {
    NamespaceReport r;
    Record rec;
    bool child = false, grandchild = false;
    while (!(child && grandchild) &&
           read(report_.get(), &rec, sizeof(rec)) == ssize_t(sizeof(rec))) {
      if (rec.tag == 'E') {
        r.error = rec.a;
        break;
      }
      if (rec.tag == 'C') {
        r.host_pid = rec.a;
        child = true;
      }
      if (rec.tag == 'G') {
        r.self = rec.a;
        r.asked = rec.b;
        r.resolved = rec.c;
        grandchild = true;
      }
    }
    return r;
  }

 private:
  struct Record {
    char tag;
    int32_t a, b, c;
  };

  [[noreturn]] static void Child(const std::string& state, uint64_t host_ns, OwnProc own_proc,
                                 int report, int hold) {
    auto send = [&](char tag, int32_t a, int32_t b = 0, int32_t c = 0) {
      Record rec{tag, a, b, c};
      if (write(report, &rec, sizeof(rec)) != ssize_t(sizeof(rec))) _exit(1);
    };
    const int flags = CLONE_NEWPID | (own_proc == OwnProc::kYes ? CLONE_NEWNS : 0);
    if (unshare(flags) != 0) send('E', errno), _exit(1);
    if (own_proc == OwnProc::kYes &&
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      send('E', errno), _exit(1);
    }
    const pid_t g = fork();
    if (g < 0) send('E', errno), _exit(1);
    if (g == 0) {
      if (own_proc == OwnProc::kYes &&
          mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
        send('E', errno), _exit(1);
      }
      send('G', getpid(), AskHostPid(state), PidInNamespace(host_ns, state));
      char c;
      while (read(hold, &c, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    send('C', g);
    int status = 0;
    waitpid(g, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
  }

  pid_t pid_ = -1;
  UniqueFd report_, hold_;
};

#define SKIP_WITHOUT_PID_NAMESPACES()                                           \
  if (geteuid() != 0) {                                                         \
    GTEST_SKIP() << "needs root: creating a PID namespace takes CAP_SYS_ADMIN"; \
  }

#define SKIP_IF_REFUSED(report)                                                     \
  if ((report).error != 0) {                                                        \
    GTEST_SKIP() << "this kernel or sandbox refuses a new PID or mount namespace: " \
                 << strerror((report).error);                                       \
  }

TEST_F(HostPidResolverTest, AChildInANewPidNamespaceAsksAndGetsItsHostPid) {
  SKIP_WITHOUT_PID_NAMESPACES();
  ResolverProcess resolver(State());
  ASSERT_TRUE(resolver.started());
  NamespaceChild child(State(), OwnProc::kNo);
  NamespaceReport r = child.Read();
  SKIP_IF_REFUSED(r);
  EXPECT_EQ(r.self, 1) << "PID 1 of its own namespace";
  ASSERT_GT(r.host_pid, 1);
  EXPECT_EQ(r.asked, r.host_pid);
}

TEST_F(HostPidResolverTest, WithItsOwnProcAChildInAPidNamespaceIsNamedThroughTheResolver) {
  SKIP_WITHOUT_PID_NAMESPACES();
  ResolverProcess resolver(State());
  ASSERT_TRUE(resolver.started());
  NamespaceChild child(State(), OwnProc::kYes);
  NamespaceReport r = child.Read();
  SKIP_IF_REFUSED(r);
  EXPECT_EQ(r.self, 1);
  ASSERT_GT(r.host_pid, 1);
  EXPECT_EQ(r.resolved, r.host_pid);
  // And a process of the host namespace finds it by its namespace PID and start time.
  const uint64_t ns = procfs::PidNsInode(r.host_pid);
  const uint64_t started = procfs::StartTicks(r.host_pid);
  ASSERT_NE(ns, procfs::PidNsInode());
  EXPECT_EQ(FindPidByNamespacePid(ns, 1, started), r.host_pid);
  EXPECT_EQ(FindPidByNamespacePid(ns, 1, started + 1), 0) << "another start time";
  EXPECT_EQ(FindPidByNamespacePid(ns, 2, started), 0) << "another namespace PID";
}

TEST_F(HostPidResolverTest, WithTheHostsProcAChildInAPidNamespaceNeedsNoResolver) {
  SKIP_WITHOUT_PID_NAMESPACES();
  NamespaceChild child(State(), OwnProc::kNo);  // and no resolver
  NamespaceReport r = child.Read();
  SKIP_IF_REFUSED(r);
  ASSERT_GT(r.host_pid, 1);
  EXPECT_EQ(r.asked, 0) << "nobody serves";
  EXPECT_EQ(r.resolved, r.host_pid) << "found in the host's /proc";
}

TEST_F(HostPidResolverTest, WithItsOwnProcAndNoResolverAChildInAPidNamespaceIsUnknown) {
  SKIP_WITHOUT_PID_NAMESPACES();
  NamespaceChild child(State(), OwnProc::kYes);
  NamespaceReport r = child.Read();
  SKIP_IF_REFUSED(r);
  ASSERT_GT(r.host_pid, 1);
  EXPECT_EQ(r.resolved, 0) << "never a guess";
}

TEST_F(HostPidResolverTest, AProcessOfTheHostNamespaceIsItsOwnPid) {
  EXPECT_EQ(PidInNamespace(procfs::PidNsInode(), State()), getpid());
  EXPECT_EQ(PidInNamespace(0, State()), 0) << "no namespace: unknown";
}

}  // namespace
}  // namespace hami::sim
