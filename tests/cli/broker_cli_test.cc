// `hami broker serve` and `hami broker query` as an operator runs them: the start line, a
// query answered with the querying process's PID, counters at exit, the socket removed at
// SIGTERM and SIGINT, refusals and bad arguments with their exit statuses.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Outcome {
  int status;
  std::string out;
};

std::string Hami() { return std::string(HAMI_BIN_DIR) + "/hami"; }

// build/bin/hami `args`, stderr merged into stdout (the shell execs hami: same PID).
std::vector<std::string> HamiArgv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", Hami()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Outcome RunHami(const std::vector<std::string>& args) {
  Subprocess p(HamiArgv(args), {});
  std::string out = p.ReadAll(20000);
  return {p.Wait(20000), out};
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

class BrokerCliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  // Starts `hami broker serve` on the test's socket and waits for its start line.
  std::unique_ptr<Subprocess> Serve(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"broker", "serve", "--socket", socket_};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<Subprocess>(HamiArgv(args), std::map<std::string, std::string>{});
    std::optional<std::string> line = p->ReadLine(20000);
    EXPECT_TRUE(line.has_value()) << "no start line";
    if (line) {
      EXPECT_THAT(*line, StartsWith("broker event=start socket=" + socket_ +
                                    " lock=" + dir_.File("broker.lock") + " max_active="));
    }
    return p;
  }

  // `hami broker query` against the test's socket, trusting this test's UID and its
  // writable /tmp mount.
  Outcome Query() {
    Subprocess p(HamiArgv({"broker", "query", "--socket", socket_, "--trusted-uid",
                           std::to_string(geteuid()), "--allow-writable-mount"}),
                 {});
    last_query_pid_ = p.pid();
    std::string out = p.ReadAll(20000);
    return {p.Wait(20000), out};
  }

  TempDir dir_{"hbc"};
  std::string socket_ = dir_.File("broker.sock");
  pid_t last_query_pid_ = 0;
};

TEST_F(BrokerCliTest, ServesAQueryAndRemovesTheSocketAtSigterm) {
  auto serve = Serve({"--report-every", "0"});
  ASSERT_TRUE(Exists(socket_));
  const Outcome q = Query();
  EXPECT_EQ(q.status, 0) << q.out;
  EXPECT_EQ(q.out, "host_pid=" + std::to_string(last_query_pid_) + "\n");

  serve->Kill(SIGTERM);
  const std::string rest = serve->ReadAll(20000);
  EXPECT_EQ(serve->Wait(20000), 0) << rest;
  EXPECT_THAT(rest, HasSubstr("broker event=stop signal=SIGTERM accepted=1 ok=1 "));
  EXPECT_THAT(rest, HasSubstr(" active=0"));
  EXPECT_FALSE(Exists(socket_)) << "the socket outlived the broker";
  EXPECT_TRUE(Exists(dir_.File("broker.lock")));
}

TEST_F(BrokerCliTest, StopsCleanlyAtSigint) {
  auto serve = Serve();
  serve->Kill(SIGINT);
  const std::string rest = serve->ReadAll(20000);
  EXPECT_EQ(serve->Wait(20000), 0) << rest;
  EXPECT_THAT(rest, HasSubstr("broker event=stop signal=SIGINT accepted=0 "));
  EXPECT_FALSE(Exists(socket_));
}

TEST_F(BrokerCliTest, LogsCountersPeriodically) {
  auto serve = Serve({"--report-every", "1"});
  ASSERT_EQ(Query().status, 0);
  // The first report that counts the query (the answer may come before the count).
  std::optional<std::string> line;
  for (int i = 0; i < 5; ++i) {
    line = serve->WaitForLine("broker event=counters", 20000);
    ASSERT_TRUE(line.has_value()) << "no counters line";
    if (line->find(" ok=1 ") != std::string::npos) break;
  }
  EXPECT_THAT(*line, HasSubstr("accepted=1 ok=1 "));
  EXPECT_THAT(*line, HasSubstr(" timeouts=0 evicted=0 "));
  serve->Kill(SIGTERM);
  EXPECT_EQ(serve->Wait(20000), 0);
}

TEST_F(BrokerCliTest, RefusesARegularFileAtTheSocketPathAndLeavesIt) {
  {
    UniqueFd f(open(socket_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    ASSERT_TRUE(f.valid());
    ASSERT_EQ(write(f.get(), "x", 1), 1);
  }
  const Outcome o = RunHami({"broker", "serve", "--socket", socket_});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.out, "hami broker serve: " + socket_ +
                       ": is a regular file, not a socket; refusing to replace it\n");
  struct stat st {};
  ASSERT_EQ(lstat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 1);
}

TEST_F(BrokerCliTest, ASecondBrokerOnTheSameDirectoryIsRefused) {
  auto serve = Serve();
  const Outcome o = RunHami({"broker", "serve", "--socket", socket_});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.out, "hami broker serve: another broker holds " + dir_.File("broker.lock") + "\n");
  EXPECT_EQ(Query().status, 0) << "the first broker stopped serving";
  serve->Kill(SIGTERM);
  EXPECT_EQ(serve->Wait(20000), 0);
}

TEST_F(BrokerCliTest, BadServeArgumentsExitTwoNamingTheOption) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--max-active", "0"}, "--max-active 0: not from 1 to 65536"},
      {{"--max-active", "many"}, "--max-active"},
      {{"--max-active", "8", "--max-per-uid", "9"}, "--max-per-uid 9: not from 0 to 8"},
      {{"--timeout-ms", "0"}, "--timeout-ms 0: not from 1 to 3600000"},
      {{"--timeout-ms", "-5"}, "--timeout-ms"},
      {{"--report-every", "1x"}, "--report-every"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"broker", "serve", "--socket", socket_};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Outcome o = RunHami(args);
    EXPECT_EQ(o.status, 2) << c.args[0] << " " << c.args[1] << ": " << o.out;
    EXPECT_THAT(o.out, HasSubstr("hami broker serve: " + c.message));
  }
  EXPECT_FALSE(Exists(socket_));
  EXPECT_FALSE(Exists(dir_.File("broker.lock"))) << "touched the directory despite bad arguments";
}

TEST_F(BrokerCliTest, QueryNamesWhyNoPidWasTrusted) {
  const Outcome missing = Query();
  EXPECT_EQ(missing.status, 1);
  EXPECT_THAT(missing.out, HasSubstr("failure=missing errno=2 frame_error=none"));

  auto serve = Serve();
  // Without --allow-writable-mount the client insists on a read-only mount, as libvgpu.so.
  const Outcome strict =
      RunHami({"broker", "query", "--socket", socket_, "--trusted-uid", std::to_string(geteuid())});
  EXPECT_EQ(strict.status, 1);
  EXPECT_THAT(strict.out, HasSubstr("failure=writable_mount"));
  // A UID that owns nothing here.
  const Outcome untrusted = RunHami({"broker", "query", "--socket", socket_, "--trusted-uid",
                                     std::to_string(geteuid() + 1), "--allow-writable-mount"});
  EXPECT_EQ(untrusted.status, 1);
  EXPECT_THAT(untrusted.out, HasSubstr("failure=unsafe_directory"));
  serve->Kill(SIGTERM);
  EXPECT_EQ(serve->Wait(20000), 0);
}

TEST_F(BrokerCliTest, BadQueryArgumentsExitTwo) {
  const Outcome o = RunHami({"broker", "query", "--socket", socket_, "--trusted-uid", "root"});
  EXPECT_EQ(o.status, 2);
  EXPECT_THAT(o.out, HasSubstr("hami broker query: --trusted-uid"));
  const Outcome t = RunHami({"broker", "query", "--timeout-ms", "0"});
  EXPECT_EQ(t.status, 2);
  EXPECT_THAT(t.out, HasSubstr("--timeout-ms 0: not from 1 to"));
}

}  // namespace
}  // namespace hami::testing
