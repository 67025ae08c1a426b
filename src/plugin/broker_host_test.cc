#include "plugin/broker_host.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "broker/client.h"
#include "common/parse.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/subprocess.h"

namespace hami::plugin {
namespace {

using ::testing::HasSubstr;

constexpr int kWaitMs = 10'000;  // bounds a failure; every wait ends on its event

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool InInitialPidNamespace() { return CheckHostPidNamespace().ok(); }

class BrokerHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.File("hostpid");
  }
  BrokerHostOptions Options(std::optional<std::string> gate = "1") const {
    BrokerHostOptions o;
    o.gate = std::move(gate);
    o.socket_dir = dir_;
    o.expected_uid = geteuid();
    return o;
  }
  std::string Socket() const { return dir_ + "/broker.sock"; }

  TempDir tmp_{"hami-bh"};
  std::string dir_;
};

// Runs `body` in a forked child (after `setup`, which may move it into new namespaces) and
// returns what it wrote to the pipe it is given.
std::string InChild(const std::function<bool()>& setup, const std::function<std::string()>& body) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return "pipe failed";
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    read_end.Reset();
    auto send = [&](const std::string& text) {
      ssize_t ignored = write(write_end.get(), text.data(), text.size());
      (void)ignored;
    };
    if (!setup()) {
      send(std::string("setup failed: ") + std::strerror(errno));
      _exit(1);
    }
    send(body());
    _exit(0);
  }
  write_end.Reset();
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(read_end.get(), buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
  waitpid(pid, nullptr, 0);
  return out;
}

std::string StartResult(const BrokerHostOptions& options) {
  auto host = StartBrokerHost(options);
  if (host.ok()) return *host ? "started" : "disabled";
  return host.error().message();
}

TEST(BrokerGate, OnlyTheExactStringOneEnables) {
  EXPECT_TRUE(BrokerGateEnabled("1"));
  for (const char* off : {"true", "yes", "on", " 1", "1 ", "01", "0", ""}) {
    EXPECT_FALSE(BrokerGateEnabled(off)) << "'" << off << "'";
  }
  EXPECT_FALSE(BrokerGateEnabled(std::nullopt));
}

TEST_F(BrokerHostTest, AGateOtherThanOneStartsNothing) {
  for (std::optional<std::string> gate :
       {std::optional<std::string>("true"), std::optional<std::string>("yes"),
        std::optional<std::string>(""), std::optional<std::string>()}) {
    auto host = StartBrokerHost(Options(gate));
    ASSERT_TRUE(host.ok()) << host.error().message();
    EXPECT_EQ(*host, nullptr) << gate.value_or("<unset>");
  }
  EXPECT_FALSE(Exists(dir_)) << "a disabled broker created its directory";
}

TEST_F(BrokerHostTest, StartsAndAnswersAClientQuery) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the broker refuses to start otherwise";
  if (!InInitialPidNamespace()) GTEST_SKIP() << "needs the initial PID namespace";
  auto host = StartBrokerHost(Options());
  ASSERT_TRUE(host.ok()) << host.error().message();
  ASSERT_NE(*host, nullptr);
  EXPECT_EQ((*host)->socket_path(), Socket());
  EXPECT_TRUE((*host)->serving());

  broker::ClientOptions client;
  const std::string path = Socket();
  client.socket_path = path.c_str();
  client.trusted_uid = geteuid();
  client.require_read_only_mount = false;  // the workload's view is a read-only bind mount
  broker::ClientResult r = broker::QueryHostPid(client);
  ASSERT_EQ(r.failure, broker::ClientFailure::kNone) << broker::ClientFailureName(r.failure);
  EXPECT_EQ(r.pid, getpid());

  // The server counts an answer once its write returned, which can be after the client
  // read it; nothing announces the count, so it is polled for.
  EXPECT_TRUE(testing::PollUntil([&] { return (*host)->Counters().ok == 1; }, 10000));
  broker::ServerCounters c = (*host)->Counters();
  EXPECT_EQ(c.accepted, 1u);
  EXPECT_EQ(c.ok, 1u);
  EXPECT_THAT(c.ToKeyValues(), HasSubstr("ok=1"));

  (*host)->Stop();
  EXPECT_FALSE((*host)->serving());
  EXPECT_TRUE((*host)->Wait().ok());
  EXPECT_FALSE(Exists(Socket()));
}

TEST_F(BrokerHostTest, ASecondBrokerOnTheSameDirectoryIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the broker refuses to start otherwise";
  if (!InInitialPidNamespace()) GTEST_SKIP() << "needs the initial PID namespace";
  auto first = StartBrokerHost(Options());
  ASSERT_TRUE(first.ok()) << first.error().message();
  auto second = StartBrokerHost(Options());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), ErrorCode::kBusy);
  EXPECT_THAT(second.error().message(), HasSubstr("starting the host-PID broker: another broker"));
}

TEST_F(BrokerHostTest, IsRefusedInAChildPidNamespace) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: unshare(CLONE_NEWPID)";
  if (!InInitialPidNamespace()) GTEST_SKIP() << "needs the initial PID namespace";
  const BrokerHostOptions options = Options();
  // The child moves its children into a new PID namespace; its child tries to start.
  std::string text =
      InChild([] { return unshare(CLONE_NEWPID) == 0; },
              [&] { return InChild([] { return true; }, [&] { return StartResult(options); }); });
  if (text.rfind("setup failed", 0) == 0) GTEST_SKIP() << "unshare(CLONE_NEWPID): " << text;
  EXPECT_THAT(text, HasSubstr("must run in the host's PID namespace (hostPID: true)"));
  EXPECT_FALSE(Exists(Socket()));
}

TEST_F(BrokerHostTest, IsRefusedWithoutRoot) {
  if (geteuid() != 0) {
    EXPECT_THAT(StartResult(Options()), HasSubstr("does not run as root"));
    return;
  }
  const BrokerHostOptions options = Options();
  std::string text = InChild(
      [] { return setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0; },
      [&] { return StartResult(options); });
  EXPECT_THAT(text, HasSubstr("does not run as root (effective UID 65534)"));
  EXPECT_FALSE(Exists(dir_));
}

TEST(CheckHostPidNamespace, NamesThisProcesssNamespaceWhenItIsNotTheHosts) {
  Status s = CheckHostPidNamespace(1234);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermission);
  EXPECT_THAT(s.error().message(), HasSubstr("not the host's pid:[1234]"));
}

// The listening socket bound at `path` among this process's descriptors, or -1.
int ListeningFd(const std::string& path) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    auto number = ParseUint64(e->d_name, "fd");
    if (!number.ok()) continue;
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

TEST_F(BrokerHostTest, ABrokerThatStopsOnItsOwnIsReportedWithItsError) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the broker refuses to start otherwise";
  if (!InInitialPidNamespace()) GTEST_SKIP() << "needs the initial PID namespace";
  auto host = StartBrokerHost(Options());
  ASSERT_TRUE(host.ok()) << host.error().message();
  const int fd = ListeningFd(Socket());
  ASSERT_GE(fd, 0);
  // A non-socket at the server's descriptor: its next accept() fails as a broken listening
  // socket would, and the server stops.
  UniqueFd keep(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(keep.valid() && null.valid());
  ASSERT_EQ(dup3(null.get(), fd, O_CLOEXEC), fd);
  UniqueFd client(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", Socket().c_str());
  ASSERT_EQ(connect(client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);

  pollfd p{(*host)->done_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, kWaitMs), 1) << "the broker did not stop";
  EXPECT_FALSE((*host)->serving());
  Status s = (*host)->Wait();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(),
              HasSubstr("the host-PID broker at " + Socket() + " stopped: serving " + Socket()));
  EXPECT_THAT(s.error().message(), HasSubstr("Socket operation on non-socket"));
}

}  // namespace
}  // namespace hami::plugin
