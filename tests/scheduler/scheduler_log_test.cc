// The daemons' logging flags, on a real hami-scheduler: at the default verbosity a bind leaves
// no trace line; with --v=4 (or --log-level=debug) each bind is logged as `event=bound` with
// the pod, the node and the devices, in the logfmt shape every daemon writes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "kube/client.h"
#include "plugin/kubelet_driver.h"
#include "scheduler/test_cluster.h"
#include "sim/kube/api_server.h"
#include "sim/kube/scheduler_standin.h"
#include "support/subprocess.h"

namespace hami {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kServing = "hami-scheduler: serving on port ";

class SchedulerLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(started.ok()) << started.error().message();
    api_ = std::move(started).value();
    ASSERT_TRUE(api_->WriteKubeconfig(dir_.File("kubeconfig")).ok());
    scheduler::testing::GpuNodeSpec node;
    node.name = "node-0";
    node.gpus = 2;
    ASSERT_TRUE(api_->CreateObject(kube::kNodes, scheduler::testing::GpuNode(node)).ok());
    kube::Config config;
    config.server = api_->url();
    config.source = "log test";
    kube::ClientOptions co;
    co.qps = 0;
    auto client = kube::Client::Create(config, co);
    ASSERT_TRUE(client.ok()) << client.error().message();
    client_ = std::move(client).value();
  }

  // Runs hami-scheduler with `flags`, schedules one pod through it, stops it, and returns
  // everything it wrote (stderr included).
  std::string ScheduleOnePodWith(const std::string& pod, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {"/bin/sh",
                                     "-c",
                                     "exec \"$0\" \"$@\" 2>&1",
                                     std::string(HAMI_BIN_DIR) + "/hami-scheduler",
                                     "--kubeconfig",
                                     dir_.File("kubeconfig"),
                                     "--http-bind",
                                     "127.0.0.1:0",
                                     "--metrics-bind-address",
                                     "",
                                     "--kube-qps",
                                     "0",
                                     "--handshake-interval",
                                     "1h"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    testing::Subprocess proc(argv, {});
    auto line = proc.WaitForLine(kServing, 20000);
    if (!line) {
      ADD_FAILURE() << "hami-scheduler did not start: " << proc.ReadAll(1000);
      return "";
    }
    const int port = std::stoi(line->substr(std::string(kServing).size()));

    plugin::KubeletDriver plugin(*client_, 1);
    plugin.Start();
    auto config = sim::kube::ParseSchedulerConfig(scheduler::testing::ExtenderSchedulerConfig(port),
                                                  "log test");
    EXPECT_TRUE(config.ok());
    if (!config.ok()) return "";
    auto standin = sim::kube::SchedulerStandin::Create(*client_, *config, {});
    EXPECT_TRUE(standin.ok());
    if (!standin.ok()) return "";
    std::atomic<int> scheduled{0};
    (*standin)->set_observer([&](const sim::kube::ScheduleAttempt& a) {
      if (a.outcome == sim::kube::ScheduleAttempt::Outcome::kScheduled) scheduled.fetch_add(1);
    });
    scheduler::testing::GpuPodSpec spec;
    spec.name = pod;
    EXPECT_TRUE(api_->CreateObject(kube::kPods, scheduler::testing::GpuPod(spec)).ok());
    (*standin)->Start();
    // (Polled: the stand-in's observer counts binds; nothing else announces one.)
    EXPECT_TRUE(testing::PollUntil([&] { return scheduled.load() == 1; }, 60000, 10000))
        << pod << " was not scheduled";
    // The node lock is released once the plugin's side has run, before the next pod's bind.
    // (Polled: the driver's counts move with each admission; nothing announces one.)
    EXPECT_TRUE(testing::PollUntil([&] { return plugin.allocated() + plugin.failures() == 1; },
                                   60000, 10000))
        << pod << " was not allocated";
    EXPECT_EQ(plugin.failures(), 0u) << pod << ": the device plugin's side failed";
    (*standin)->Stop();
    plugin.Stop();
    proc.Kill(SIGTERM);
    std::string out = proc.ReadAll(20000);
    EXPECT_EQ(proc.Wait(20000), 0) << out;
    return out;
  }

  TempDir dir_{"hami-sched-log"};
  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
};

TEST_F(SchedulerLogTest, TheBindTraceShowsOnlyAtVerbosityFour) {
  std::string quiet = ScheduleOnePodWith("pod-quiet", {});
  EXPECT_THAT(quiet, HasSubstr("level=info component=hami-scheduler"));
  EXPECT_THAT(quiet, Not(HasSubstr("event=bound"))) << quiet;

  std::string verbose = ScheduleOnePodWith("pod-verbose", {"--v=4"});
  EXPECT_THAT(verbose, ::testing::ContainsRegex(
                           "level=debug component=hami-scheduler pid=[0-9]+ v=4 event=bound "
                           "pod=default/pod-verbose node=node-0 devices=GPU-node-0-"))
      << verbose;

  std::string debug = ScheduleOnePodWith("pod-debug", {"--log-level=debug"});
  EXPECT_THAT(debug, HasSubstr("event=bound pod=default/pod-debug node=node-0")) << debug;
}

TEST_F(SchedulerLogTest, ABadLoggingFlagIsRefusedNamingIt) {
  testing::Subprocess proc({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                            std::string(HAMI_BIN_DIR) + "/hami-scheduler", "--log-level=loud"},
                           {});
  std::string out = proc.ReadAll(20000);
  EXPECT_NE(proc.Wait(20000), 0);
  EXPECT_THAT(out, HasSubstr("--log-level='loud': not a log level"));
}

}  // namespace
}  // namespace hami
