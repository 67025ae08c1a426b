#include "scheduler/quota.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace hami::scheduler {
namespace {

using nlohmann::json;

kube::ResourceQuota Quota(std::string name, json hard) {
  auto q = kube::ParseResourceQuota(
      {{"metadata", {{"name", name}, {"namespace", "team-a"}}}, {"spec", {{"hard", hard}}}});
  EXPECT_TRUE(q.ok()) << q.error().message();
  return *q;
}

TEST(Quota, ReadsLimitsOfTheConfiguredResourcesAndTheSmallestWins) {
  config::DeviceConfig config;
  auto q = QuotaFromResourceQuotas(
      {Quota("a", {{"limits.nvidia.com/gpumem", "32000"}, {"cpu", "4"}}),
       Quota("b", {{"limits.nvidia.com/gpumem", "16000"}, {"limit.nvidia.com/gpucores", "200"}})},
      config);
  ASSERT_TRUE(q.memory_mib.has_value());
  EXPECT_EQ(*q.memory_mib, 16000);
  EXPECT_EQ(q.memory_source, "b");
  ASSERT_TRUE(q.cores.has_value());
  EXPECT_EQ(*q.cores, 200);
  EXPECT_TRUE(q.limited());
  EXPECT_FALSE(QuotaFromResourceQuotas({Quota("c", {{"cpu", "1"}})}, config).limited());
}

TEST(Quota, FitsUpToTheLimitExactly) {
  config::DeviceConfig config;
  NamespaceQuota q;
  q.memory_mib = 10000;
  q.memory_source = "gpu-quota";
  q.cores = 100;
  q.cores_source = "gpu-quota";
  EXPECT_EQ(QuotaExceeded("team-a", q, {6000, 50}, {4000, 50}, config), std::nullopt);
  EXPECT_EQ(QuotaExceeded("team-a", q, {6000, 50}, {4001, 0}, config),
            "namespace team-a: limits.nvidia.com/gpumem of ResourceQuota gpu-quota is 10000 MiB, "
            "6000 are used and the pod needs 4001");
  EXPECT_EQ(QuotaExceeded("team-a", q, {0, 60}, {0, 41}, config),
            "namespace team-a: limits.nvidia.com/gpucores of ResourceQuota gpu-quota is 100 "
            "percent, 60 are used and the pod needs 41");
  EXPECT_EQ(QuotaExceeded("team-a", {}, {1 << 30, 1 << 30}, {1 << 30, 1}, config), std::nullopt);
  // A namespace already over its limit still takes pods that ask for none of it.
  EXPECT_EQ(QuotaExceeded("team-a", q, {20000, 500}, {0, 0}, config), std::nullopt);
}

TEST(Quota, AllocationKeepsTheInitContainerPeakPerDevice) {
  kube::PodDevices devices = {
      {{"GPU-a", "NVIDIA", 5000, 50}},                                // init container
      {{"GPU-a", "NVIDIA", 2000, 10}, {"GPU-b", "NVIDIA", 1000, 5}},  // container 1
      {{"GPU-a", "NVIDIA", 2000, 10}},                                // container 2
  };
  // GPU-a: max(5000, 4000) MiB and max(50, 20) cores; GPU-b: 1000 MiB, 5 cores.
  EXPECT_EQ(AllocationAmounts(devices, 1), (QuotaAmounts{6000, 55}));
  EXPECT_EQ(AllocationAmounts(devices, 0), (QuotaAmounts{10000, 75}));
}

TEST(Quota, RequestAmountsCountFixedMemoryWithThePeak) {
  PodRequest r;
  auto container = [](int32_t count, int32_t mem_mib, int32_t mem_percentage, int32_t cores) {
    ContainerRequest c;
    c.count = count;
    c.mem_mib = mem_mib;
    c.mem_percentage = mem_percentage;
    c.cores = cores;
    return c;
  };
  r.init_containers.push_back(container(1, 8000, 0, 10));
  r.containers.push_back(container(2, 3000, 0, 20));
  r.containers.push_back(container(1, 0, 50, 0));
  EXPECT_EQ(RequestAmounts(r), (QuotaAmounts{8000, 40}));
}

}  // namespace
}  // namespace hami::scheduler
