// The simulated cluster's pure parts: the kube-scheduler configuration's rewrite and the
// cluster record's round trip.
#include "sim/cluster/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

namespace hami::sim::cluster {
namespace {

using ::testing::HasSubstr;

constexpr char kConfig[] = R"(apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
profiles:
- schedulerName: hami-scheduler
extenders:
- urlPrefix: https://127.0.0.1:443
  filterVerb: filter
  enableHTTPS: true
  tlsConfig:
    insecure: true
  nodeCacheCapable: true
  managedResources:
  - name: nvidia.com/gpu
    ignoredByScheduler: true
)";

TEST(RewriteSchedulerConfig, PointsEveryExtenderAtTheClustersSchedulerAndTrustsItsCertificate) {
  auto out = RewriteSchedulerConfig(kConfig, "k.yaml", "https://127.0.0.1:4321", "PEM");
  ASSERT_TRUE(out.ok()) << out.error().message();
  YAML::Node y = YAML::Load(*out);
  EXPECT_EQ(y["extenders"][0]["urlPrefix"].as<std::string>(), "https://127.0.0.1:4321");
  EXPECT_TRUE(y["extenders"][0]["enableHTTPS"].as<bool>());
  EXPECT_EQ(y["extenders"][0]["tlsConfig"]["caData"].as<std::string>(), "UEVN");
  EXPECT_FALSE(y["extenders"][0]["tlsConfig"]["insecure"]);
  EXPECT_FALSE(y["leaderElection"]["leaderElect"].as<bool>());
  EXPECT_EQ(y["extenders"][0]["managedResources"][0]["name"].as<std::string>(), "nvidia.com/gpu");
  EXPECT_EQ(y["profiles"][0]["schedulerName"].as<std::string>(), "hami-scheduler");
}

TEST(RewriteSchedulerConfig, RefusesAConfigurationWithoutExtendersNamingTheFile) {
  auto out = RewriteSchedulerConfig("kind: KubeSchedulerConfiguration\n", "k.yaml",
                                    "https://127.0.0.1:1", "");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.error().message(), HasSubstr("k.yaml: no extenders"));
  auto bad = RewriteSchedulerConfig("a: [", "k.yaml", "https://127.0.0.1:1", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("k.yaml"));
}

TEST(ClusterInfo, RoundTripsThroughItsJson) {
  ClusterInfo info;
  info.dir = "/tmp/c";
  info.kubeconfig = "/tmp/c/kubeconfig";
  info.webhook = true;
  info.mode = "dra";
  info.nodes.push_back({"node-1", "/tmp/c/nodes/node-1", "/tmp/c/nodes/node-1/hook",
                        "/tmp/c/nodes/node-1/sim.state", "http://127.0.0.1:9",
                        "/tmp/c/nodes/node-1/cdi"});
  info.components.push_back({"apiserver", 42, 7, "/tmp/c/logs/apiserver.log", {"hami-sim"}});
  auto back = ClusterInfoFromJson(ClusterInfoToJson(info), "cluster.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->nodes[0].monitor_url, "http://127.0.0.1:9");
  EXPECT_EQ(back->nodes[0].cdi_dir, "/tmp/c/nodes/node-1/cdi");
  EXPECT_EQ(back->mode, "dra");
  EXPECT_EQ(back->components[0].pid, 42);
  EXPECT_EQ(back->components[0].start_ticks, 7u);
  EXPECT_TRUE(back->webhook);
  auto broken = ClusterInfoFromJson(nlohmann::json::object(), "cluster.json");
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.error().message(), HasSubstr("cluster.json"));
}

TEST(ComponentAlive, RecognisesThisProcessAndNotAnotherStartTime) {
  Component self{"self", getpid(), 0, "", {}};
  EXPECT_FALSE(ComponentAlive(self)) << "start time 0 never matches";
}

ClusterOptions ValidOptions() {
  ClusterOptions o;
  o.dir = "/tmp/hami-cluster-options";
  return o;
}

TEST(ValidateOptions, AcceptsTheDefaultsAndEveryDocumentedForm) {
  EXPECT_TRUE(ValidateOptions(ValidOptions()).ok());
  ClusterOptions o = ValidOptions();
  o.nodes = 16;
  o.gpus = "a100-40g,h100-80g:3";
  o.monitor_resync_interval = "1500ms";
  o.ready_timeout = std::chrono::seconds(1);
  Status s = ValidateOptions(o);
  EXPECT_TRUE(s.ok()) << s.error().message();
  for (const char* interval : {"2s", "5m", "1h", "1000"}) {
    o.monitor_resync_interval = interval;
    EXPECT_TRUE(ValidateOptions(o).ok()) << interval;
  }
  for (const char* interval : {"100ms", "1s", "5s", "1m", "250"}) {
    o.monitor_feedback_interval = interval;
    EXPECT_TRUE(ValidateOptions(o).ok()) << interval;
  }
}

struct BadOption {
  const char* name;  // the test's name
  const char* flag;
  void (*set)(ClusterOptions&);
  const char* message;
};

class ValidateOptionsRefuses : public ::testing::TestWithParam<BadOption> {};

TEST_P(ValidateOptionsRefuses, NamingTheFlagAndWhatIsWrong) {
  ClusterOptions o = ValidOptions();
  GetParam().set(o);
  Status s = ValidateOptions(o);
  ASSERT_FALSE(s.ok()) << GetParam().flag;
  EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.error().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    EveryFlag, ValidateOptionsRefuses,
    ::testing::Values(
        BadOption{"RelativeDir", "--dir", [](ClusterOptions& o) { o.dir = "relative"; },
                  "--dir 'relative': must be an absolute path"},
        BadOption{"NoNodes", "--nodes", [](ClusterOptions& o) { o.nodes = 0; },
                  "--nodes 0: must be from 1 to 16"},
        BadOption{"SeventeenNodes", "--nodes", [](ClusterOptions& o) { o.nodes = 17; },
                  "--nodes 17: must be from 1 to 16"},
        BadOption{"UnknownProfile", "--gpus", [](ClusterOptions& o) { o.gpus = "h100:2"; },
                  "--gpus='h100:2': unknown profile 'h100' (known: "},
        BadOption{"TooManyGpus", "--gpus", [](ClusterOptions& o) { o.gpus = "h100-80g:99"; },
                  "--gpus='h100-80g:99': count 99 of 'h100-80g' is not from 1 to 16"},
        BadOption{"NoGpus", "--gpus", [](ClusterOptions& o) { o.gpus = "none"; },
                  "--gpus='none': every node of a simulated cluster needs a GPU"},
        BadOption{"ShortResync", "--monitor-resync-interval",
                  [](ClusterOptions& o) { o.monitor_resync_interval = "500ms"; },
                  "--monitor-resync-interval '500ms': not a duration of at least 1s"},
        BadOption{"ResyncWithASpace", "--monitor-resync-interval",
                  [](ClusterOptions& o) { o.monitor_resync_interval = "5 min"; },
                  "--monitor-resync-interval '5 min': not a duration"},
        BadOption{"ShortFeedback", "--monitor-feedback-interval",
                  [](ClusterOptions& o) { o.monitor_feedback_interval = "50ms"; },
                  "--monitor-feedback-interval '50ms': not a duration of at least 100ms"},
        BadOption{"FeedbackInSeconds", "--monitor-feedback-interval",
                  [](ClusterOptions& o) { o.monitor_feedback_interval = "1sec"; },
                  "--monitor-feedback-interval '1sec': not a duration"},
        BadOption{"BrokerInDraMode", "--broker",
                  [](ClusterOptions& o) {
                    o.mode = ClusterMode::kDra;
                    o.broker = true;
                  },
                  "--broker: not with --mode dra"},
        BadOption{"ZeroTimeout", "--timeout",
                  [](ClusterOptions& o) { o.ready_timeout = std::chrono::seconds(0); },
                  "--timeout 0: must be from 1 to 3600 seconds"}),
    [](const ::testing::TestParamInfo<BadOption>& p) { return std::string(p.param.name); });

TEST(ClusterMode, ParsesBothModesAndRefusesOthersNamingTheFlag) {
  EXPECT_EQ(*ParseClusterMode("dra"), ClusterMode::kDra);
  EXPECT_EQ(*ParseClusterMode("device-plugin"), ClusterMode::kDevicePlugin);
  EXPECT_STREQ(ClusterModeName(ClusterMode::kDra), "dra");
  auto bad = ParseClusterMode("DRA");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "--mode 'DRA': must be device-plugin or dra");
}

// YAML as JSON, every scalar a string (the manifest has no other kind).
nlohmann::json AsJson(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : n) out[kv.first.as<std::string>()] = AsJson(kv.second);
    return out;
  }
  if (n.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : n) out.push_back(AsJson(e));
    return out;
  }
  return n.as<std::string>();
}

TEST(DraDeviceClass, IsTheDeploymentsDeviceClass) {
  YAML::Node manifest =
      YAML::LoadFile(std::string(HAMI_SOURCE_DIR) + "/deploy/dra/deviceclass.yaml");
  EXPECT_EQ(DraDeviceClass(), AsJson(manifest));
  EXPECT_EQ(DraDeviceClass()["spec"]["selectors"][0]["cel"]["expression"],
            "device.driver == \"hami-core-gpu.project-hami.io\"");
}

TEST(Up, RefusesABadFlagBeforeMakingTheDirectoryOrStartingAnything) {
  char dir[] = "/tmp/hami-cluster-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ClusterOptions o = ValidOptions();
  o.dir = std::string(dir) + "/cluster";
  o.gpus = "h100:2";
  auto up = Up(o, nullptr);
  ASSERT_FALSE(up.ok());
  EXPECT_EQ(up.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(up.error().message(), HasSubstr("--gpus='h100:2'"));
  EXPECT_FALSE(std::filesystem::exists(o.dir)) << "nothing was made or started";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hami::sim::cluster
