// The simulated cluster's pure parts: the kube-scheduler configuration's rewrite and the
// cluster record's round trip.
#include "sim/cluster/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

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
  info.nodes.push_back({"node-1", "/tmp/c/nodes/node-1", "/tmp/c/nodes/node-1/hook",
                        "/tmp/c/nodes/node-1/sim.state", "http://127.0.0.1:9"});
  info.components.push_back({"apiserver", 42, 7, "/tmp/c/logs/apiserver.log", {"hami-sim"}});
  auto back = ClusterInfoFromJson(ClusterInfoToJson(info), "cluster.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->nodes[0].monitor_url, "http://127.0.0.1:9");
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

}  // namespace
}  // namespace hami::sim::cluster
