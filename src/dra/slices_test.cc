#include "dra/slices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dra/claim.h"

namespace hami::dra {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

inventory::Device Gpu(int index, bool healthy = true) {
  inventory::Device d;
  d.index = index;
  d.uuid = "GPU-" + std::to_string(index);
  d.name = "NVIDIA H100 80GB HBM3";
  d.memory_bytes = uint64_t{81559} << 20;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.pci_bus_id = "00000000:3B:00.0";
  d.numa_node = 1;
  d.healthy = healthy;
  if (!healthy) d.health_reason = "Xid 79: GPU has fallen off the bus";
  return d;
}

SliceInput Input(std::vector<inventory::Device> devices) {
  SliceInput in;
  in.driver = kDriverName;
  in.node_name = "n1";
  in.node_uid = "node-uid";
  in.generation = 3;
  in.inventory.driver_version = "535.104.05";
  in.inventory.devices = std::move(devices);
  return in;
}

TEST(ResourceSlice, OneSharedDevicePerGpuWithMemoryAndCores) {
  auto slice = BuildResourceSlice(Input({Gpu(0), Gpu(1)}));
  ASSERT_TRUE(slice.ok()) << slice.error().message();
  const json& s = *slice;
  EXPECT_EQ(s["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(s["kind"], "ResourceSlice");
  EXPECT_EQ(s["metadata"]["ownerReferences"][0]["uid"], "node-uid");
  EXPECT_EQ(s["spec"]["driver"], "hami-core-gpu.project-hami.io");
  EXPECT_EQ(s["spec"]["nodeName"], "n1");
  EXPECT_EQ(s["spec"]["pool"],
            json({{"name", "n1"}, {"generation", 3}, {"resourceSliceCount", 1}}));
  ASSERT_EQ(s["spec"]["devices"].size(), 2u);
  const json& d = s["spec"]["devices"][1];
  EXPECT_EQ(d["name"], "hami-gpu-1");
  EXPECT_EQ(d["allowMultipleAllocations"], true);
  EXPECT_EQ(d["attributes"]["uuid"], json({{"string", "GPU-1"}}));
  EXPECT_EQ(d["attributes"]["type"], json({{"string", "hami-gpu"}}));
  EXPECT_EQ(d["attributes"]["index"], json({{"int", 1}}));
  EXPECT_EQ(d["attributes"]["productName"], json({{"string", "NVIDIA H100 80GB HBM3"}}));
  EXPECT_EQ(d["attributes"]["architecture"], json({{"string", "Hopper"}}));
  EXPECT_EQ(d["attributes"]["cudaComputeCapability"], json({{"version", "9.0.0"}}));
  EXPECT_EQ(d["attributes"]["driverVersion"], json({{"version", "535.104.5"}}));
  EXPECT_EQ(d["attributes"]["numaNode"], json({{"int", 1}}));
  EXPECT_EQ(d["attributes"]["healthy"], json({{"bool", true}}));
  EXPECT_EQ(d["attributes"]["resource.kubernetes.io/pciBusID"], json({{"string", "0000:3b:00.0"}}));
  EXPECT_EQ(d["capacity"]["memory"],
            json({{"value", "81559Mi"},
                  {"requestPolicy",
                   {{"default", "81559Mi"},
                    {"validRange", {{"min", "1Mi"}, {"max", "81559Mi"}, {"step", "1Mi"}}}}}}));
  EXPECT_EQ(
      d["capacity"]["cores"],
      json({{"value", "100"},
            {"requestPolicy",
             {{"default", "0"}, {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}}}}));
  EXPECT_FALSE(d.contains("taints"));
}

TEST(ResourceSlice, AnUnhealthyGpuIsTainted) {
  auto slice = BuildResourceSlice(Input({Gpu(0), Gpu(1, false)}));
  ASSERT_TRUE(slice.ok()) << slice.error().message();
  EXPECT_FALSE((*slice)["spec"]["devices"][0].contains("taints"));
  const json& d = (*slice)["spec"]["devices"][1];
  EXPECT_EQ(d["attributes"]["healthy"], json({{"bool", false}}));
  ASSERT_EQ(d["taints"].size(), 1u);
  EXPECT_EQ(d["taints"][0]["key"], "hami-core-gpu.project-hami.io/unhealthy");
  EXPECT_EQ(d["taints"][0]["effect"], "NoSchedule");
  EXPECT_EQ(d["taints"][0]["value"], "Xid_79_GPU_has_fallen_off_the_bus");
}

TEST(ResourceSlice, MemoryNotAWholeMiBKeepsItsValueAndRoundsThePolicyDown) {
  inventory::Device g = Gpu(0);
  g.memory_bytes = (uint64_t{1} << 30) + 12345;
  auto slice = BuildResourceSlice(Input({g}));
  ASSERT_TRUE(slice.ok());
  const json& m = (*slice)["spec"]["devices"][0]["capacity"]["memory"];
  EXPECT_EQ(m["value"], std::to_string((uint64_t{1} << 30) + 12345));
  EXPECT_EQ(m["requestPolicy"]["default"], "1Gi");
  EXPECT_EQ(m["requestPolicy"]["validRange"]["max"], "1Gi");
}

TEST(ResourceSlice, RefusesWhatOneSliceCannotHold) {
  std::vector<inventory::Device> many;
  for (int i = 0; i < 65; ++i) many.push_back(Gpu(i));
  auto r = BuildResourceSlice(Input(many));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("65 GPUs"));
  inventory::Device no_uuid = Gpu(0);
  no_uuid.uuid.clear();
  EXPECT_FALSE(BuildResourceSlice(Input({no_uuid})).ok());
  SliceInput no_node = Input({Gpu(0)});
  no_node.node_name.clear();
  EXPECT_FALSE(BuildResourceSlice(no_node).ok());
}

TEST(ResourceSlice, VersionsAndArchitectures) {
  EXPECT_EQ(SemverOf("550.54.15"), "550.54.15");
  EXPECT_EQ(SemverOf("535.104.05"), "535.104.5");
  EXPECT_EQ(SemverOf("550"), "550.0.0");
  EXPECT_EQ(SemverOf(""), "");
  EXPECT_EQ(SemverOf("1.2.3.4"), "");
  EXPECT_EQ(SemverOf("r550"), "");
  EXPECT_EQ(ArchitectureName(8, 0), "Ampere");
  EXPECT_EQ(ArchitectureName(8, 9), "Ada Lovelace");
  EXPECT_EQ(ArchitectureName(7, 5), "Turing");
  EXPECT_EQ(ArchitectureName(3, 0), "");
}

}  // namespace
}  // namespace hami::dra
