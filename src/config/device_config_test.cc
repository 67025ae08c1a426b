#include "config/device_config.h"

#include <gtest/gtest.h>

namespace hami::config {
namespace {

TEST(DeviceConfig, EmptyFileGivesHamiDefaults) {
  auto c = ParseDeviceConfig("", "f");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(*c, DeviceConfig{});
  EXPECT_EQ(c->resource_count_name, "nvidia.com/gpu");
  EXPECT_EQ(c->resource_memory_name, "nvidia.com/gpumem");
  EXPECT_EQ(c->default_gpu_num, 1);
  EXPECT_EQ(c->memory_factor, 1);
}

TEST(DeviceConfig, ReadsTheChartsNvidiaSectionAndIgnoresOtherBackends) {
  auto c = ParseDeviceConfig(R"(nvidia:
  resourceCountName: example.com/vgpu
  resourceMemoryName: example.com/vmem
  resourceMemoryPercentageName: example.com/vmem-percentage
  resourceCoreName: example.com/vcores
  resourcePriorityName: example.com/prio
  overwriteEnv: false
  defaultMemory: 2048
  defaultCores: 10
  defaultGPUNum: 2
  preConfiguredDeviceMemory: 0
  memoryFactor: 4
  deviceSplitCount: 5
  deviceMemoryScaling: 1.5
  deviceCoreScaling: 1
  enableNumaTopology: true
  gpuCorePolicy: force
  libCudaLogLevel: 3
  runtimeClassName: ""
  migProfileAllowlist:
  - models: [ "A30" ]
    profiles: [ "1g.6gb" ]
cambricon:
  resourceCountName: cambricon.com/vmlu
)",
                             "f");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->resource_count_name, "example.com/vgpu");
  EXPECT_EQ(c->resource_memory_name, "example.com/vmem");
  EXPECT_EQ(c->resource_memory_percentage_name, "example.com/vmem-percentage");
  EXPECT_EQ(c->resource_core_name, "example.com/vcores");
  EXPECT_EQ(c->resource_priority_name, "example.com/prio");
  EXPECT_EQ(c->default_memory_mib, 2048);
  EXPECT_EQ(c->default_cores, 10);
  EXPECT_EQ(c->default_gpu_num, 2);
  EXPECT_EQ(c->memory_factor, 4);
  EXPECT_EQ(c->device_split_count, 5);
  EXPECT_DOUBLE_EQ(c->device_memory_scaling, 1.5);
  EXPECT_TRUE(c->enable_numa_topology);
  EXPECT_EQ(c->gpu_core_policy, "force");
  EXPECT_EQ(c->lib_cuda_log_level, 3);
}

TEST(DeviceConfig, AdvertiseMemoryAndCoresIsOffUnlessTurnedOn) {
  EXPECT_FALSE(DeviceConfig{}.advertise_memory_and_cores);
  auto on = ParseDeviceConfig("nvidia:\n  advertiseMemoryAndCores: true\n", "f");
  ASSERT_TRUE(on.ok()) << on.error().message();
  EXPECT_TRUE(on->advertise_memory_and_cores);
  auto off = ParseDeviceConfig("nvidia:\n  advertiseMemoryAndCores: false\n", "f");
  ASSERT_TRUE(off.ok()) << off.error().message();
  EXPECT_FALSE(off->advertise_memory_and_cores);
}

TEST(DeviceConfig, ReadsJson) {
  auto c = ParseDeviceConfig(R"({"nvidia": {"defaultMemory": 1000, "memoryFactor": 2}})", "f");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->default_memory_mib, 1000);
  EXPECT_EQ(c->memory_factor, 2);
}

void ExpectError(std::string_view text, std::string_view message) {
  auto c = ParseDeviceConfig(text, "/etc/hami/device-config.yaml");
  ASSERT_FALSE(c.ok()) << text;
  EXPECT_EQ(c.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(c.error().message(), message) << text;
}

TEST(DeviceConfig, RejectsWhatItCannotUseNamingTheKey) {
  ExpectError("nvidia:\n  defaultMemroy: 1\n",
              "device config /etc/hami/device-config.yaml: nvidia.defaultMemroy: unknown key");
  ExpectError("nvidia:\n  defaultCores: 150\n",
              "device config /etc/hami/device-config.yaml: nvidia.defaultCores: 150 is out of "
              "range 0..100");
  ExpectError("nvidia:\n  defaultGPUNum: 0\n",
              "device config /etc/hami/device-config.yaml: nvidia.defaultGPUNum: 0 is out of "
              "range 1..1024");
  ExpectError("nvidia:\n  memoryFactor: two\n",
              "device config /etc/hami/device-config.yaml: nvidia.memoryFactor: 'two' is not an "
              "integer");
  ExpectError("nvidia:\n  memoryFactor: [1]\n",
              "device config /etc/hami/device-config.yaml: nvidia.memoryFactor: expected a "
              "scalar value");
  ExpectError("nvidia:\n  deviceMemoryScaling: -1\n",
              "device config /etc/hami/device-config.yaml: nvidia.deviceMemoryScaling: -1 must "
              "be greater than 0");
  ExpectError("nvidia:\n  enableNumaTopology: perhaps\n",
              "device config /etc/hami/device-config.yaml: nvidia.enableNumaTopology: 'perhaps' "
              "is not a boolean");
  ExpectError("nvidia:\n  advertiseMemoryAndCores: sometimes\n",
              "device config /etc/hami/device-config.yaml: nvidia.advertiseMemoryAndCores: "
              "'sometimes' is not a boolean");
  ExpectError("nvidia:\n  resourceCountName: \"a b\"\n",
              "device config /etc/hami/device-config.yaml: nvidia.resourceCountName: 'a b' holds "
              "whitespace or a control character");
  ExpectError("nvidia:\n  gpuCorePolicy: strict\n",
              "device config /etc/hami/device-config.yaml: nvidia.gpuCorePolicy: 'strict' is not "
              "one of default, force, disable");
  ExpectError("- 1\n", "device config /etc/hami/device-config.yaml: not a YAML mapping");
  ExpectError("nvidia: 3\n",
              "device config /etc/hami/device-config.yaml: nvidia: expected a mapping");
  auto bad_yaml = ParseDeviceConfig("nvidia: {a: [", "f");
  ASSERT_FALSE(bad_yaml.ok());
  EXPECT_NE(bad_yaml.error().message().find("device config f: YAML: "), std::string::npos);
}

TEST(DeviceConfig, LoadNamesAMissingFile) {
  auto c = LoadDeviceConfig("/nonexistent/device-config.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("device config"), std::string::npos);
  EXPECT_NE(c.error().message().find("/nonexistent/device-config.yaml"), std::string::npos);
}

}  // namespace
}  // namespace hami::config
