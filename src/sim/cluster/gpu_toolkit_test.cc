// The GPU toolkit stand-in's pure parts: which GPUs a container's device-nodes file lists.
#include "sim/cluster/gpu_toolkit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/profiles.h"

namespace hami::sim::cluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::vector<std::string> kNode = {"GPU-aaaa1111-0000-4000-8000-000000000000",
                                        "GPU-bbbb2222-0000-4000-8000-000000000001",
                                        "GPU-cccc3333-0000-4000-8000-000000000002"};

std::vector<std::string> Gpus(std::optional<std::string_view> visible) {
  auto r = ContainerGpus(visible, kNode);
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? *r : std::vector<std::string>{};
}

TEST(ContainerGpus, AllIsEveryGpuOfTheNode) { EXPECT_EQ(Gpus("all"), kNode); }

TEST(ContainerGpus, UnsetEmptyVoidAndNoneGiveNoGpu) {
  for (std::optional<std::string_view> v :
       {std::optional<std::string_view>(), std::optional<std::string_view>(""),
        std::optional<std::string_view>("void"), std::optional<std::string_view>("none")}) {
    EXPECT_THAT(Gpus(v), IsEmpty()) << v.value_or("(unset)");
  }
}

TEST(ContainerGpus, UuidsAndIndicesNameGpusListedInTheNodesOrder) {
  EXPECT_THAT(Gpus(kNode[2] + "," + kNode[0]), ElementsAre(kNode[0], kNode[2]));
  EXPECT_THAT(Gpus("2, 1"), ElementsAre(kNode[1], kNode[2]));
  EXPECT_THAT(Gpus("1," + kNode[1]), ElementsAre(kNode[1])) << "one GPU named twice";
}

TEST(ContainerGpus, AnEntryOfNoGpuOfTheNodeFailsAsTheToolkitsHookFails) {
  for (std::string_view v : {"3", "GPU-aaaa1111", "GPU-dddd4444-0000-4000-8000-000000000003",
                             "MIG-GPU-aaaa1111-0000-4000-8000-000000000000/0/0", "0,,1", "-1"}) {
    auto r = ContainerGpus(v, kNode);
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_THAT(r.error().message(), HasSubstr("nvidia-container-cli: device error: "));
    EXPECT_THAT(r.error().message(), HasSubstr(": unknown device"));
  }
  auto r = ContainerGpus("0,7", kNode);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("device error: 7: unknown device"));
}

TEST(ToolkitVisibleDevices, ThePodsOwnValueWinsOverThePluginsAsInTheContainersEnvironment) {
  ContainerPlan c;
  kubelet::ContainerAllocation r;
  EXPECT_EQ(ToolkitVisibleDevices(c, r), std::nullopt);
  r.envs["NVIDIA_VISIBLE_DEVICES"] = kNode[1];
  EXPECT_EQ(ToolkitVisibleDevices(c, r), kNode[1]);
  c.env["NVIDIA_VISIBLE_DEVICES"] = "all";
  EXPECT_EQ(ToolkitVisibleDevices(c, r), "all");
}

TEST(NodeGpus, AreTheSimulatedMachinesOfTheContainersVariables) {
  auto d = ParseProfileSpec("a100-40g:3", "node-2");
  ASSERT_TRUE(d.ok());
  auto gpus = NodeGpus({{"HAMI_SIM_PROFILE", "a100-40g:3"}, {"HAMI_SIM_NODE", "node-2"}});
  ASSERT_TRUE(gpus.ok()) << gpus.error().message();
  ASSERT_EQ(gpus->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*gpus)[i], (*d)[i].uuid);
  auto defaults = NodeGpus({});
  ASSERT_TRUE(defaults.ok()) << defaults.error().message();
  EXPECT_EQ(defaults->size(), 2u) << "the simulator's default profile, h100-80g:2";
  auto bad = NodeGpus({{"HAMI_SIM_PROFILE", "h100-8g"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("h100-8g"));
}

}  // namespace
}  // namespace hami::sim::cluster
