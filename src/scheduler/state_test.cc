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

}  // namespace
}  // namespace hami::scheduler
