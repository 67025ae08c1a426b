#include "scheduler/resize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami::scheduler {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A node with one 16384 MiB GPU; pod "p" (container "main") holds 4000 MiB and 30 cores of it,
// another pod 8000 MiB and 50 cores.
class Resize : public ::testing::Test {
 protected:
  void SetUp() override {
    pod_.metadata.ns = "default";
    pod_.metadata.name = "p";
    pod_.containers.push_back({});
    pod_.containers[0].name = "main";
    share_.ns = "default";
    share_.name = "p";
    share_.node = "n1";
    share_.devices = {{{"GPU-a", "NVIDIA", 4000, 30}}};
    node_.name = "n1";
    GpuState g;
    g.device.id = "GPU-a";
    g.device.count = 10;
    g.device.devmem_mib = 16384;
    g.device.devcore = 100;
    g.used = {2, 12000, 80, 0};
    node_.gpus.push_back(g);
    used_ = {12000, 80};
  }
  ResizeDecision Decide(const std::string& text) {
    auto r = kube::DecodeResizeRequest(text);
    EXPECT_TRUE(r.ok()) << r.error().message();
    return DecideResize(pod_, *r, share_, node_, quota_, used_, config_);
  }
  kube::Pod pod_;
  PodShare share_;
  NodeGpus node_;
  NamespaceQuota quota_;
  QuotaAmounts used_;
  config::DeviceConfig config_;
};

TEST_F(Resize, GrowsWithinWhatTheGpuHasLeftOnTheSameGpu) {
  ResizeDecision d = Decide("main:gpumem=8384,gpucores=50");
  ASSERT_TRUE(d.accepted) << d.reason;
  ASSERT_EQ(d.devices.size(), 1u);
  EXPECT_EQ(d.devices[0][0].uuid, "GPU-a") << "never moved";
  EXPECT_EQ(d.devices[0][0].mem_mib, 8384);
  EXPECT_EQ(d.devices[0][0].cores, 50);
  EXPECT_THAT(d.reason, HasSubstr("GPU-a 4000 -> 8384 MiB, 30 -> 50 cores"));
}

TEST_F(Resize, PastTheGpuIsRefusedSayingWhatIsLeft) {
  ResizeDecision d = Decide("main:gpumem=8385");
  EXPECT_FALSE(d.accepted);
  EXPECT_THAT(d.reason, AllOf(HasSubstr("container \"main\": GPU GPU-a offers 16384 MiB"),
                              HasSubstr("hold 8000"), HasSubstr("at most 8384")));
  ResizeDecision cores = Decide("main:gpucores=51");
  EXPECT_FALSE(cores.accepted);
  EXPECT_THAT(cores.reason, HasSubstr("at most 50"));
  EXPECT_FALSE(Decide("main:gpucores=100").accepted) << "exclusive on a shared GPU";
}

TEST_F(Resize, UnknownAndInitContainersAndContainersWithoutAGpuAreRefused) {
  EXPECT_THAT(Decide("sidecar:gpumem=10").reason,
              HasSubstr("the pod has no container \"sidecar\" (its containers: main)"));
  pod_.init_containers.push_back({});
  pod_.init_containers[0].name = "setup";
  share_.init_containers = 1;
  share_.devices.insert(share_.devices.begin(), kube::ContainerDevices{});
  EXPECT_THAT(Decide("setup:gpumem=10").reason, HasSubstr("is an init container"));
  share_.devices[1].clear();
  EXPECT_THAT(Decide("main:gpumem=10").reason, HasSubstr("holds no GPU"));
}

TEST_F(Resize, GrowthMustFitTheQuotaAndShrinkingNeverAsksIt) {
  quota_.memory_mib = 13000;
  quota_.memory_source = "gpu-quota";
  ResizeDecision grow = Decide("main:gpumem=5001");
  EXPECT_FALSE(grow.accepted);
  EXPECT_THAT(grow.reason, HasSubstr("gpu-quota"));
  EXPECT_TRUE(Decide("main:gpumem=5000").accepted);
  quota_.memory_mib = 1;  // lowered below what the namespace holds: shrinking is still allowed
  EXPECT_TRUE(Decide("main:gpumem=2000").accepted);
}

TEST_F(Resize, GpumemIsScaledByTheMemoryFactor) {
  config_.memory_factor = 2;
  ResizeDecision d = Decide("main:gpumem=3000");
  ASSERT_TRUE(d.accepted) << d.reason;
  EXPECT_EQ(d.devices[0][0].mem_mib, 6000);
}

}  // namespace
}  // namespace hami::scheduler
