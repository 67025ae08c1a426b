#include "scheduler/state.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "kube/annotations.h"
#include "scheduler/node_annotations.h"
#include "scheduler/test_cluster.h"

namespace hami::scheduler {
namespace {

using nlohmann::json;

kube::ObjectPtr Ptr(json j) { return std::make_shared<const json>(std::move(j)); }

json Node(const std::string& rv, const json& extra_annotations = json::object()) {
  testing::GpuNodeSpec spec;
  spec.name = "node-a";
  spec.gpus = 2;
  json node = testing::GpuNode(spec);
  node["metadata"]["resourceVersion"] = rv;
  for (auto& [k, v] : extra_annotations.items()) node["metadata"]["annotations"][k] = v;
  return node;
}

std::string Handshake(kube::HandshakeState state) {
  return kube::EncodeHandshake(state, std::chrono::system_clock::now());
}

class StateGeneration : public ::testing::Test {
 protected:
  StateGeneration() : state_(config::DeviceConfig{}, std::chrono::seconds(300)) {
    state_.UpsertNode(Ptr(Node("1")));
  }
  ClusterState state_;
};

TEST_F(StateGeneration, AHandshakeAloneLeavesTheViewGenerationButNotTheNodes) {
  const uint64_t view = state_.generation();
  const uint64_t node = state_.Node("node-a")->generation;
  state_.UpsertNode(Ptr(Node("2", {{std::string(kube::kNodeHandshakeAnnotation),
                                    Handshake(kube::HandshakeState::kRequesting)}})));
  EXPECT_EQ(state_.generation(), view);
  auto info = state_.Node("node-a");
  ASSERT_TRUE(info);
  EXPECT_NE(info->generation, node);  // a bind waiting on the node sees the change
  EXPECT_EQ(info->resource_version, "2");
  ASSERT_TRUE(info->handshake);
  EXPECT_EQ(info->handshake->state, kube::HandshakeState::kRequesting);
}

TEST_F(StateGeneration, WhatAFitReadsChangesTheViewGeneration) {
  uint64_t view = state_.generation();
  auto changed = [&] {
    const uint64_t now = state_.generation();
    const bool differs = now != view;
    view = now;
    return differs;
  };
  state_.UpsertNode(
      Ptr(Node("2", {{std::string(kDeviceCordonAnnotation), testing::GpuUuid("node-a", 1)}})));
  EXPECT_TRUE(changed()) << "cordon";
  state_.UpsertNode(Ptr(Node("3")));
  EXPECT_TRUE(changed()) << "cordon lifted";
  state_.UpsertNode(Ptr(
      Node("4", {{std::string(kube::kNodeLockAnnotation),
                  *kube::EncodeNodeLock({std::chrono::system_clock::now(), "default", "p"})}})));
  EXPECT_TRUE(changed()) << "node lock";
  state_.UpsertNode(Ptr(Node("5")));
  EXPECT_TRUE(changed()) << "node lock released";
  json gone = Node("6", {{std::string(kube::kNodeHandshakeAnnotation),
                          Handshake(kube::HandshakeState::kDeleted)}});
  gone["status"]["allocatable"].erase("nvidia.com/gpu");
  state_.UpsertNode(Ptr(gone));
  EXPECT_TRUE(changed()) << "devices unavailable";
  state_.UpsertNode(Ptr(Node("7")));
  EXPECT_TRUE(changed()) << "devices available again";

  testing::GpuPodSpec spec;
  spec.name = "p";
  state_.UpsertPod(Ptr(testing::RunningGpuPod(
      spec, "node-a", {{{testing::GpuUuid("node-a", 0), "NVIDIA", 1000, 0}}})));
  EXPECT_TRUE(changed()) << "a share";
  state_.UpsertPod(Ptr(testing::RunningGpuPod(
      spec, "node-a", {{{testing::GpuUuid("node-a", 0), "NVIDIA", 1000, 0}}})));
  EXPECT_FALSE(changed()) << "the same share again";
}

// ---- Nominations ---------------------------------------------------------------------------

NominatedPod Nominee(const std::string& name, int32_t priority, int32_t mem_mib) {
  NominatedPod n;
  n.key = "default/" + name;
  n.priority = priority;
  ContainerRequest c;
  c.name = "main";
  c.count = 1;
  c.mem_mib = mem_mib;
  n.request.containers.push_back(c);
  n.policy.gpu = *ParseGpuPolicy("spread", "test");
  return n;
}

class StateNominations : public StateGeneration {
 protected:
  // Whether a pod `name` of `priority` asking one GPU of `mem_mib` fits node-a, by filter and
  // by the fresh fit a bind makes from `listed`.
  bool Fits(const std::string& name, int32_t priority, int32_t mem_mib,
            std::vector<PodShare> listed = {}) {
    PodRequest r = Nominee(name, priority, mem_mib).request;
    PodPolicy p;
    p.gpu = *ParseGpuPolicy("spread", "test");
    auto fits = state_.FitNodes("default", name, priority, r, {}, p, {"node-a"},
                                std::chrono::system_clock::now());
    auto fresh = state_.FitNodeFresh("default", name, priority, r, {}, p, "node-a", listed,
                                     std::chrono::system_clock::now());
    EXPECT_EQ(fits[0].fit.fits, fresh.fit.fits) << name;
    return fits[0].fit.fits;
  }
  json Running(const std::string& name, int gpu, int32_t mem_mib) {
    testing::GpuPodSpec spec;
    spec.name = name;
    spec.mem_mib = mem_mib;
    return testing::RunningGpuPod(spec, "node-a",
                                  {{{testing::GpuUuid("node-a", gpu), "NVIDIA", mem_mib, 0}}});
  }
};

TEST_F(StateNominations, ANomineesRoomIsTakenForLowerOrEqualPrioritiesOnly) {
  // Both GPUs of node-a (16384 MiB each) hold 10000; a nominee of priority 100 needs 6000.
  state_.UpsertPod(Ptr(Running("a", 0, 10000)));
  state_.UpsertPod(Ptr(Running("b", 1, 10000)));
  ASSERT_TRUE(Fits("low", 0, 6000));
  const uint64_t before = state_.generation();
  state_.Nominate("node-a", Nominee("high", 100, 6000));
  EXPECT_NE(state_.generation(), before);
  EXPECT_TRUE(Fits("low", 0, 6000)) << "the other GPU is still free";
  state_.Nominate("node-a", Nominee("high2", 100, 6000));
  EXPECT_FALSE(Fits("low", 0, 6000));
  EXPECT_FALSE(Fits("equal", 100, 6000));
  EXPECT_TRUE(Fits("higher", 101, 6000));
  // A nominee's own fit counts the others of at least its priority only.
  EXPECT_TRUE(Fits("high", 100, 6000));
  auto fits =
      state_.FitNodes("default", "low", 0, Nominee("low", 0, 6000).request, {},
                      Nominee("low", 0, 1).policy, {"node-a"}, std::chrono::system_clock::now());
  EXPECT_EQ(fits[0].held_for, (std::vector<std::string>{"default/high", "default/high2"}));
  EXPECT_NE(fits[0].fit.reason.find("room held for pods nominated to this node: default/high, "
                                    "default/high2"),
            std::string::npos)
      << fits[0].fit.reason;

  // Bound (holding its share), the nominee is not counted twice.
  state_.UpsertPod(Ptr(Running("high2", 1, 6000)));
  EXPECT_FALSE(Fits("low", 0, 6000));
  state_.RemovePod(Ptr(Running("high2", 1, 6000)));
  state_.Unnominate("default", "high2");
  EXPECT_TRUE(Fits("low", 0, 6000));
  state_.Unnominate("default", "high");
  state_.Unnominate("default", "high");  // idempotent
  EXPECT_TRUE(state_.Nominations().empty());
}

TEST_F(StateNominations, NomineesOfOnePriorityYieldOnlyToThoseNominatedBeforeThem) {
  // Room for one pod of 10000 (GPU 1 is full).
  state_.UpsertPod(Ptr(Running("full", 1, 16384)));
  state_.Nominate("node-a", Nominee("second", 100, 10000));
  state_.Nominate("node-a", Nominee("first", 100, 10000));
  state_.Nominate("node-a", Nominee("second", 100, 10000));  // again: still the first come
  EXPECT_TRUE(Fits("second", 100, 10000));
  EXPECT_FALSE(Fits("first", 100, 10000));
  EXPECT_FALSE(Fits("other", 100, 10000));
  // A nominee moved to another node comes last when it comes back.
  state_.Nominate("node-b", Nominee("second", 100, 10000));
  state_.Nominate("node-a", Nominee("second", 100, 10000));
  EXPECT_TRUE(Fits("first", 100, 10000));
  EXPECT_FALSE(Fits("second", 100, 10000));
}

TEST_F(StateNominations, ANomineeHoldsTheRoomItsTerminatingVictimFrees) {
  json victim = Running("victim", 0, 12000);
  victim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  state_.UpsertPod(Ptr(victim));
  state_.UpsertPod(Ptr(Running("stays", 1, 13000)));
  state_.Nominate("node-a", Nominee("high", 100, 12000));
  EXPECT_FALSE(Fits("low", 0, 4000)) << "the victim is still there";
  state_.RemovePod(Ptr(victim));
  // GPU 0 is free now, but the nominee's 12000 are held there: room for 4000, not for 5000.
  EXPECT_TRUE(Fits("low", 0, 4000));
  EXPECT_FALSE(Fits("low", 0, 5000));
  EXPECT_TRUE(Fits("high", 100, 12000));
}

// Preemption finds a victim named by UID among its node's shares, however the view came to hold
// them: pods before or after their node, a pod moved to another node, a pod gone.
TEST(StatePreemption, FindsVictimsByUidOnTheirOwnNodeOnly) {
  ClusterState state(config::DeviceConfig{}, std::chrono::seconds(300));
  auto running = [](const std::string& name, const std::string& node) {
    testing::GpuPodSpec spec;
    spec.name = name;
    spec.mem_mib = 16000;
    json pod =
        testing::RunningGpuPod(spec, node, {{{testing::GpuUuid(node, 0), "NVIDIA", 16000, 0}}});
    pod["metadata"]["uid"] = "uid-" + name;
    return pod;
  };
  auto node = [](const std::string& name) {
    testing::GpuNodeSpec spec;
    spec.name = name;
    spec.gpus = 1;
    return testing::GpuNode(spec);
  };
  state.UpsertPod(Ptr(running("early", "node-b")));  // before its node
  state.UpsertNode(Ptr(node("node-a")));
  state.UpsertNode(Ptr(node("node-b")));
  state.UpsertPod(Ptr(running("late", "node-a")));
  state.UpsertPod(Ptr(running("moved", "node-a")));
  state.UpsertPod(Ptr(running("moved", "node-b")));  // its share now on node-b
  state.UpsertPod(Ptr(running("gone", "node-a")));
  state.RemovePod(Ptr(running("gone", "node-a")));

  PodRequest request;
  ContainerRequest c;
  c.name = "main";
  c.count = 1;
  c.mem_mib = 16000;
  request.containers.push_back(c);
  PodPolicy policy;
  policy.gpu = *ParseGpuPolicy("spread", "test");
  auto named = [](std::vector<std::string> uids) {
    NodeVictims v;
    for (std::string& u : uids) v.pods.push_back({std::move(u), {}, {}, {}});
    return v;
  };
  std::map<std::string, NodeVictims> victims;
  victims["node-a"] = named({"uid-late", "uid-moved", "uid-gone", "uid-early", "uid-nobody"});
  victims["node-b"] = named({"uid-early", "uid-moved", "uid-late"});
  auto chosen = state.ChooseVictimsOnNodes("default", "high", 100, request, {}, policy, victims);
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[0].name, "node-a");
  EXPECT_EQ(chosen[0].uids, (std::vector<std::string>{"uid-late"}));
  EXPECT_EQ(chosen[0].ignored, 4u);
  EXPECT_EQ(chosen[1].name, "node-b");
  EXPECT_EQ(chosen[1].uids, (std::vector<std::string>{"uid-early", "uid-moved"}));
  EXPECT_EQ(chosen[1].ignored, 1u);
  ASSERT_EQ(chosen[1].choice.outcome, VictimChoice::Outcome::kVictims) << chosen[1].choice.reason;

  // A node that comes again (an update) keeps its shares; one removed and added anew finds them.
  state.UpsertNode(Ptr(node("node-a")));
  state.RemoveNode(Ptr(node("node-b")));
  state.UpsertNode(Ptr(node("node-b")));
  chosen = state.ChooseVictimsOnNodes("default", "high", 100, request, {}, policy, victims);
  EXPECT_EQ(chosen[0].uids, (std::vector<std::string>{"uid-late"}));
  EXPECT_EQ(chosen[1].uids, (std::vector<std::string>{"uid-early", "uid-moved"}));
}

TEST(StateQuota, PodsRewrittenForDraCountTheirRecordUntilTheyEndOrGo) {
  ClusterState state(config::DeviceConfig{}, std::chrono::seconds(300));
  auto dra_pod = [](const std::string& name, int memory, const std::string& phase) {
    return json{{"metadata",
                 {{"name", name},
                  {"namespace", "team-a"},
                  {"uid", "uid-" + name},
                  {"resourceVersion", "5"},
                  {"labels", {{"hami.io/dra", "true"}}},
                  {"annotations",
                   {{"hami.io/dra-request", R"({"containers":[{"name":"main","count":2,"memory":)" +
                                                std::to_string(memory) + R"(,"cores":25}]})"}}}}},
                {"spec", {{"containers", json::array({{{"name", "main"}}})}}},
                {"status", {{"phase", phase}}}};
  };
  state.UpsertPod(Ptr(dra_pod("a", 1000, "Pending")));
  state.UpsertPod(Ptr(dra_pod("b", 500, "Running")));
  EXPECT_EQ(state.QuotaFor("team-a").second, (QuotaAmounts{3000, 100}));
  EXPECT_EQ(state.QuotaFor("other").second, (QuotaAmounts{}));
  // An update replaces the pod's amounts; the end of a pod and its removal release them.
  state.UpsertPod(Ptr(dra_pod("a", 2000, "Running")));
  EXPECT_EQ(state.QuotaFor("team-a").second, (QuotaAmounts{5000, 100}));
  state.UpsertPod(Ptr(dra_pod("b", 500, "Succeeded")));
  EXPECT_EQ(state.QuotaFor("team-a").second, (QuotaAmounts{4000, 50}));
  state.RemovePod(Ptr(dra_pod("a", 2000, "Running")));
  EXPECT_EQ(state.QuotaFor("team-a").second, (QuotaAmounts{}));
  // A record that does not decode counts nothing and is counted as a bad annotation.
  json bad = dra_pod("c", 100, "Running");
  bad["metadata"]["annotations"]["hami.io/dra-request"] = "{\"containers\":7}";
  state.UpsertPod(Ptr(bad));
  EXPECT_EQ(state.QuotaFor("team-a").second, (QuotaAmounts{}));
  EXPECT_EQ(state.stats().bad_pod_annotations, 1u);
}

}  // namespace
}  // namespace hami::scheduler
