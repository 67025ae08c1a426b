#include "plugin/devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami::plugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;

inventory::Device Gpu(int index, std::string uuid, std::string name, uint64_t mib, int numa) {
  inventory::Device d;
  d.index = index;
  d.uuid = std::move(uuid);
  d.name = std::move(name);
  d.memory_bytes = mib * kMiB;
  d.numa_node = numa;
  return d;
}

inventory::Inventory TwoGpus() {
  inventory::Inventory inv;
  inv.devices.push_back(Gpu(0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", 81559, 0));
  inv.devices.push_back(Gpu(1, "GPU-bbbb", "Tesla V100-PCIE-32GB", 32768, 1));
  return inv;
}

TEST(Devices, TwoGpusGiveSplitReplicasAndTheRegisterAnnotationHamiWrites) {
  DeviceOptions o;
  o.split_count = 3;
  const DeviceView v = ComputeDevices(TwoGpus(), o);
  EXPECT_THAT(
      v.replicas,
      ElementsAre(ReplicaDevice{"GPU-aaaa-0", true, -1}, ReplicaDevice{"GPU-aaaa-1", true, -1},
                  ReplicaDevice{"GPU-aaaa-2", true, -1}, ReplicaDevice{"GPU-bbbb-0", true, -1},
                  ReplicaDevice{"GPU-bbbb-1", true, -1}, ReplicaDevice{"GPU-bbbb-2", true, -1}));
  EXPECT_TRUE(v.skipped.empty());
  EXPECT_EQ(kube::EncodeNodeInventory(v.node_devices),
            "[{\"id\":\"GPU-aaaa\",\"count\":3,\"devmem\":81559,\"devcore\":100,"
            "\"type\":\"NVIDIA H100 80GB HBM3\",\"mode\":\"hami-core\",\"health\":true},"
            "{\"id\":\"GPU-bbbb\",\"index\":1,\"count\":3,\"devmem\":32768,\"devcore\":100,"
            "\"type\":\"NVIDIA-Tesla V100-PCIE-32GB\",\"numa\":1,\"mode\":\"hami-core\","
            "\"health\":true}]");
}

TEST(Devices, ScalingMultipliesMemoryAndCoresAndTruncatesAsWritten) {
  DeviceOptions o;
  o.memory_scaling = 0.5;  // 81559 / 2 = 40779.5
  o.core_scaling = 0.29;   // 28.999999999999996 in binary
  DeviceView v = ComputeDevices(TwoGpus(), o);
  EXPECT_EQ(v.node_devices[0].devmem_mib, 40779);
  EXPECT_EQ(v.node_devices[0].devcore, 29);
  o.memory_scaling = 2;
  o.core_scaling = 1.5;
  v = ComputeDevices(TwoGpus(), o);
  EXPECT_EQ(v.node_devices[1].devmem_mib, 65536);
  EXPECT_EQ(v.node_devices[1].devcore, 150);
}

TEST(Devices, MigModeAppliesNoScaling) {
  DeviceOptions o;
  o.mode = "mig";
  o.memory_scaling = 2;
  o.core_scaling = 3;
  const DeviceView v = ComputeDevices(TwoGpus(), o);
  EXPECT_EQ(v.node_devices[0].devmem_mib, 81559);
  EXPECT_EQ(v.node_devices[0].devcore, 100);
  EXPECT_EQ(v.node_devices[0].mode, "mig");
}

TEST(Devices, MemoryNvmlDoesNotReportComesFromPreConfiguredDeviceMemoryOrTheGpuIsLeftOut) {
  inventory::Inventory inv;
  inv.devices.push_back(Gpu(0, "GPU-gb10", "NVIDIA GB10", 0, -1));
  DeviceOptions o;
  o.memory_scaling = 1.5;
  DeviceView v = ComputeDevices(inv, o);
  EXPECT_TRUE(v.node_devices.empty());
  EXPECT_TRUE(v.replicas.empty());
  ASSERT_EQ(v.skipped.size(), 1u);
  EXPECT_THAT(v.skipped[0], HasSubstr("GPU 0 (GPU-gb10): NVML reports no memory size"));
  EXPECT_THAT(v.skipped[0], HasSubstr("preConfiguredDeviceMemory"));
  o.pre_configured_memory_mib = 100000;
  v = ComputeDevices(inv, o);
  ASSERT_EQ(v.node_devices.size(), 1u);
  EXPECT_EQ(v.node_devices[0].devmem_mib, 150000);
}

TEST(Devices, FilterDevicesLeavesGpusOutByUuidOrIndexAndAGpuWithoutUuidIsLeftOut) {
  inventory::Inventory inv = TwoGpus();
  inv.devices.push_back(Gpu(2, "GPU-cccc", "NVIDIA A100-SXM4-40GB", 40960, 0));
  inventory::Device lost = Gpu(3, "", "", 0, -1);
  lost.healthy = false;
  lost.health_reason = "nvmlDeviceGetUUID: GPU is lost";
  inv.devices.push_back(lost);
  DeviceOptions o;
  o.split_count = 1;
  o.exclude_uuids = {"GPU-aaaa"};
  o.exclude_indices = {2};
  const DeviceView v = ComputeDevices(inv, o);
  ASSERT_EQ(v.node_devices.size(), 1u);
  EXPECT_EQ(v.node_devices[0].id, "GPU-bbbb");
  EXPECT_THAT(v.replicas, ElementsAre(ReplicaDevice{"GPU-bbbb-0", true, -1}));
  EXPECT_THAT(v.skipped, ElementsAre("GPU 0 (GPU-aaaa): excluded by filterdevices",
                                     "GPU 2 (GPU-cccc): excluded by filterdevices",
                                     "GPU 3: no UUID (nvmlDeviceGetUUID: GPU is lost)"));
}

TEST(Devices, HealthIsTheInventorysAndTheWatchersTogether) {
  inventory::Inventory inv = TwoGpus();
  inv.devices[1].healthy = false;
  inv.devices[1].health_reason = "nvmlDeviceGetMemoryInfo: GPU is lost";
  DeviceOptions o;
  o.split_count = 1;
  DeviceView v = ComputeDevices(inv, o, {{"GPU-aaaa", false}, {"GPU-bbbb", true}});
  EXPECT_FALSE(v.node_devices[0].health);
  EXPECT_FALSE(v.node_devices[1].health);
  EXPECT_THAT(v.replicas, ElementsAre(ReplicaDevice{"GPU-aaaa-0", false, -1},
                                      ReplicaDevice{"GPU-bbbb-0", false, -1}));
  v = ComputeDevices(inv, o, {{"GPU-aaaa", true}});
  EXPECT_TRUE(v.node_devices[0].health);
  // On the wire an unhealthy GPU has no "health" member (false is its zero value).
  auto decoded = kube::DecodeNodeInventory(kube::EncodeNodeInventory(v.node_devices));
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE((*decoded)[0].health);
  EXPECT_FALSE((*decoded)[1].health);
}

TEST(Devices, NumaTopologyOnTheReplicasOnlyWhenEnabledAndKnown) {
  inventory::Inventory inv = TwoGpus();
  inv.devices.push_back(Gpu(2, "GPU-cccc", "NVIDIA A100-SXM4-40GB", 40960, -1));
  DeviceOptions o;
  o.split_count = 1;
  o.enable_numa_topology = true;
  DeviceView v = ComputeDevices(inv, o);
  EXPECT_THAT(v.replicas, ElementsAre(ReplicaDevice{"GPU-aaaa-0", true, 0},
                                      ReplicaDevice{"GPU-bbbb-0", true, 1},
                                      ReplicaDevice{"GPU-cccc-0", true, -1}));
  EXPECT_EQ(v.node_devices[1].numa, 1);
  EXPECT_EQ(v.node_devices[2].numa, 0);  // unknown: HAMi writes 0
  o.enable_numa_topology = false;
  v = ComputeDevices(inv, o);
  EXPECT_EQ(v.replicas[1].numa_node, -1);
  EXPECT_EQ(v.node_devices[1].numa, 1);  // the annotation has it either way
}

TEST(Devices, ValidateNamesTheBadOption) {
  auto message = [](DeviceOptions o) {
    Status s = ValidateDeviceOptions(o);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.error().message();
  };
  EXPECT_TRUE(ValidateDeviceOptions(DeviceOptions{}).ok());
  DeviceOptions o;
  o.split_count = 0;
  EXPECT_EQ(message(o), "deviceSplitCount: 0 is not in 1..1024");
  o = {};
  o.memory_scaling = 0;
  EXPECT_THAT(message(o), HasSubstr("deviceMemoryScaling: "));
  o = {};
  o.core_scaling = -1;
  EXPECT_THAT(message(o), HasSubstr("deviceCoreScaling: "));
  o = {};
  o.pre_configured_memory_mib = -5;
  EXPECT_EQ(message(o), "preConfiguredDeviceMemory: -5 is negative");
  o = {};
  o.mode = "mps";
  EXPECT_EQ(message(o), "operatingmode: 'mps' is not one of hami-core, mig");
}

TEST(Devices, ReplicaIdAppendsTheIndex) { EXPECT_EQ(ReplicaId("GPU-x", 7), "GPU-x-7"); }

}  // namespace
}  // namespace hami::plugin
