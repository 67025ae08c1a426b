#include "plugin/node_resources.h"

#include <gtest/gtest.h>

namespace hami::plugin {
namespace {

using nlohmann::json;

kube::NodeDevice Gpu(const std::string& id, int32_t devmem_mib, int32_t devcore, bool health) {
  kube::NodeDevice d;
  d.id = id;
  d.devmem_mib = devmem_mib;
  d.devcore = devcore;
  d.health = health;
  return d;
}

json NodeWith(const json& capacity, const json& allocatable) {
  return {{"metadata", {{"name", "n1"}}},
          {"status", {{"capacity", capacity}, {"allocatable", allocatable}}}};
}

const NodeResourceNames kNames;

TEST(NodeResources, AmountsAreTheHealthyGpusSums) {
  EXPECT_EQ(AmountsOf({Gpu("a", 81559, 100, true), Gpu("b", 81559, 100, true)}),
            (NodeResourceAmounts{163118, 200}));
  EXPECT_EQ(AmountsOf({Gpu("a", 81559, 100, true), Gpu("b", 81559, 100, false)}),
            (NodeResourceAmounts{81559, 100}));
  EXPECT_EQ(AmountsOf({}), (NodeResourceAmounts{0, 0}));
}

TEST(NodeResources, OnPublishesCapacityAndAllocatableAlike) {
  const json node = NodeWith({{"cpu", "8"}, {"nvidia.com/gpu", "20"}}, {{"cpu", "8"}});
  auto patch = NodeResourcesPatch(node, {Gpu("a", 1000, 150, true), Gpu("b", 1000, 150, true)},
                                  kNames, Advertise::kOn);
  ASSERT_TRUE(patch.has_value());
  const json values = {{"nvidia.com/gpumem", "2000"}, {"nvidia.com/gpucores", "300"}};
  EXPECT_EQ(*patch, (json{{"status", {{"capacity", values}, {"allocatable", values}}}}));
}

TEST(NodeResources, AnUnhealthyGpuLeavesBoth) {
  auto patch =
      NodeResourcesPatch(json::object(), {Gpu("a", 81559, 100, true), Gpu("b", 81559, 100, false)},
                         kNames, Advertise::kOn);
  ASSERT_TRUE(patch.has_value());
  EXPECT_EQ((*patch)["status"]["capacity"]["nvidia.com/gpumem"], "81559");
  EXPECT_EQ((*patch)["status"]["allocatable"]["nvidia.com/gpucores"], "100");
}

TEST(NodeResources, NothingToDoWhenTheNodeCarriesTheSameQuantities) {
  const std::vector<kube::NodeDevice> gpus = {Gpu("a", 500, 500, true), Gpu("b", 500, 500, true)};
  // The API server's canonical form of 1000 is "1k": the same quantity.
  const json same = {{"nvidia.com/gpumem", "1k"}, {"nvidia.com/gpucores", "1000"}};
  EXPECT_FALSE(NodeResourcesPatch(NodeWith(same, same), gpus, kNames, Advertise::kOn));
  // One field behind, or an unreadable value: patched.
  EXPECT_TRUE(NodeResourcesPatch(NodeWith(same, {{"nvidia.com/gpumem", "1k"}}), gpus, kNames,
                                 Advertise::kOn));
  const json bad = {{"nvidia.com/gpumem", "lots"}, {"nvidia.com/gpucores", "1000"}};
  EXPECT_TRUE(NodeResourcesPatch(NodeWith(same, bad), gpus, kNames, Advertise::kOn));
}

TEST(NodeResources, OffRemovesWhatWasPublishedAndLeavesACleanNodeAlone) {
  const std::vector<kube::NodeDevice> gpus = {Gpu("a", 1000, 100, true)};
  const json clean = NodeWith({{"cpu", "8"}, {"nvidia.com/gpu", "10"}}, {{"cpu", "8"}});
  EXPECT_FALSE(NodeResourcesPatch(clean, gpus, kNames, Advertise::kOff));
  EXPECT_FALSE(NodeResourcesPatch(json::object(), gpus, kNames, Advertise::kOff));

  const json left = NodeWith({{"cpu", "8"}}, {{"nvidia.com/gpucores", "100"}});
  auto patch = NodeResourcesPatch(left, gpus, kNames, Advertise::kOff);
  ASSERT_TRUE(patch.has_value());
  const json nulls = {{"nvidia.com/gpumem", nullptr}, {"nvidia.com/gpucores", nullptr}};
  EXPECT_EQ(*patch, (json{{"status", {{"capacity", nulls}, {"allocatable", nulls}}}}));
}

TEST(NodeResources, UsesTheConfiguredNames) {
  NodeResourceNames names;
  names.memory = "example.com/vmem";
  names.cores = "example.com/vcores";
  auto patch =
      NodeResourcesPatch(json::object(), {Gpu("a", 2048, 100, true)}, names, Advertise::kOn);
  ASSERT_TRUE(patch.has_value());
  EXPECT_EQ((*patch)["status"]["capacity"],
            (json{{"example.com/vmem", "2048"}, {"example.com/vcores", "100"}}));
}

}  // namespace
}  // namespace hami::plugin
