#include "scheduler/request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace hami::scheduler {
namespace {

using nlohmann::json;

kube::Pod PodWith(json limits, json requests = json::object(), json init = nullptr) {
  json c = {{"name", "main"}, {"resources", {{"limits", limits}, {"requests", requests}}}};
  json pod = {{"metadata", {{"name", "x"}, {"namespace", "default"}}},
              {"spec", {{"containers", json::array({c})}}}};
  if (!init.is_null()) {
    pod["spec"]["initContainers"] =
        json::array({{{"name", "setup"}, {"resources", {{"limits", init}}}}});
  }
  auto parsed = kube::ParsePod(pod);
  EXPECT_TRUE(parsed.ok()) << parsed.error().message();
  return *parsed;
}

ContainerRequest Only(const kube::Pod& pod, const config::DeviceConfig& config = {}) {
  auto r = ParsePodRequest(pod, config);
  EXPECT_TRUE(r.ok()) << r.error().message();
  if (!r.ok() || r->containers.size() != 1) return {};
  return r->containers[0];
}

std::string ErrorOf(const kube::Pod& pod, const config::DeviceConfig& config = {}) {
  auto r = ParsePodRequest(pod, config);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error().message();
}

TEST(Request, NoHamiResourcesRequestsNothing) {
  auto r = ParsePodRequest(PodWith({{"cpu", "1"}}), {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->RequestsGpus());
  ContainerRequest none;
  none.name = "main";
  EXPECT_EQ(r->containers[0], none);
}

TEST(Request, CountMemoryAndCores) {
  auto c = Only(PodWith(
      {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "3000"}, {"nvidia.com/gpucores", "30"}}));
  EXPECT_EQ(c.count, 2);
  EXPECT_EQ(c.mem_mib, 3000);
  EXPECT_EQ(c.mem_percentage, 0);
  EXPECT_EQ(c.cores, 30);
  EXPECT_FALSE(c.exclusive());
}

TEST(Request, MemoryIsMultipliedByMemoryFactor) {
  config::DeviceConfig config;
  config.memory_factor = 10;
  auto c = Only(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "300"}}), config);
  EXPECT_EQ(c.mem_mib, 3000);
}

TEST(Request, PercentageWhenNoMemory) {
  auto c = Only(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "25"}}));
  EXPECT_EQ(c.mem_mib, 0);
  EXPECT_EQ(c.mem_percentage, 25);
  EXPECT_EQ(c.MemoryOn(32768), 8192);
}

TEST(Request, MemoryWinsOverPercentage) {
  auto c = Only(PodWith({{"nvidia.com/gpu", "1"},
                         {"nvidia.com/gpumem", "1000"},
                         {"nvidia.com/gpumem-percentage", "25"}}));
  EXPECT_EQ(c.mem_mib, 1000);
  EXPECT_EQ(c.mem_percentage, 0);
}

TEST(Request, NoMemoryTakesTheWholeGpuOrDefaultMemory) {
  auto whole = Only(PodWith({{"nvidia.com/gpu", "1"}}));
  EXPECT_EQ(whole.mem_mib, 0);
  EXPECT_EQ(whole.mem_percentage, 100);
  config::DeviceConfig config;
  config.default_memory_mib = 2048;
  config.default_cores = 20;
  auto dflt = Only(PodWith({{"nvidia.com/gpu", "1"}}), config);
  EXPECT_EQ(dflt.mem_mib, 2048);
  EXPECT_EQ(dflt.cores, 20);
}

TEST(Request, MemoryWithoutCountTakesDefaultGpuNum) {
  config::DeviceConfig config;
  config.default_gpu_num = 2;
  auto c = Only(PodWith({{"nvidia.com/gpumem", "1000"}}), config);
  EXPECT_EQ(c.count, 2);
  EXPECT_EQ(c.mem_mib, 1000);
  auto cores_only = Only(PodWith({{"nvidia.com/gpucores", "50"}}));
  EXPECT_EQ(cores_only.count, 1);
  EXPECT_EQ(cores_only.cores, 50);
  EXPECT_EQ(cores_only.mem_percentage, 100);
}

TEST(Request, LimitsWinOverRequestsAndRequestsAreRead) {
  auto c = Only(PodWith({{"nvidia.com/gpumem", "1000"}},
                        {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "2000"}}));
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(c.mem_mib, 1000);
}

TEST(Request, ExclusiveAtAHundredCores) {
  auto c = Only(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "100"}}));
  EXPECT_TRUE(c.exclusive());
}

TEST(Request, PriorityAloneRequestsNoGpu) {
  auto c = Only(PodWith({{"nvidia.com/priority", "0"}}));
  EXPECT_EQ(c.count, 0);
  ASSERT_TRUE(c.priority.has_value());
  EXPECT_EQ(*c.priority, 0);
}

TEST(Request, ConfiguredResourceNames) {
  config::DeviceConfig config;
  config.resource_count_name = "example.com/vgpu";
  config.resource_memory_name = "example.com/vmem";
  auto c = Only(
      PodWith({{"example.com/vgpu", "1"}, {"example.com/vmem", "512"}, {"nvidia.com/gpu", "4"}}),
      config);
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(c.mem_mib, 512);
}

TEST(Request, InitContainersSeparatelyAndThePeakCount) {
  auto pod = PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}, json::object(),
                     {{"nvidia.com/gpu", "3"}, {"nvidia.com/gpumem", "500"}});
  auto r = ParsePodRequest(pod, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->init_containers.size(), 1u);
  EXPECT_EQ(r->init_containers[0].count, 3);
  EXPECT_EQ(r->init_containers[0].mem_mib, 500);
  EXPECT_EQ(r->containers[0].count, 1);
  EXPECT_EQ(r->PeakGpuCount(), 3);
}

TEST(Request, ErrorsNameThePodContainerAndResource) {
  EXPECT_EQ(ErrorOf(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "150"}})),
            "Pod default/x: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/gpucores: 150 is out of range 0..100");
  EXPECT_EQ(ErrorOf(PodWith({{"nvidia.com/gpu", "1500m"}})),
            "Pod default/x: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/gpu: 1500m is not a whole number");
  EXPECT_EQ(ErrorOf(PodWith({{"nvidia.com/gpu", "-1"}})),
            "Pod default/x: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/gpu: -1 is out of range 0..1024");
  EXPECT_EQ(ErrorOf(PodWith({}, {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "-5"}})),
            "Pod default/x: container \"main\" (spec.containers[0]): "
            "resources.requests.nvidia.com/gpumem: -5 is negative: nvidia.com/gpumem is a plain "
            "integer count of MiB (write 3000 for 3000 MiB)");
  EXPECT_EQ(ErrorOf(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "0"}})),
            "Pod default/x: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/gpumem-percentage: 0 is out of range 1..100");
  EXPECT_EQ(ErrorOf(PodWith({{"nvidia.com/priority", "2"}})),
            "Pod default/x: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/priority: 2 is out of range 0..1");
  EXPECT_EQ(ErrorOf(PodWith({{"nvidia.com/gpu", "0"}, {"nvidia.com/gpumem", "100"}})),
            "Pod default/x: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/gpu is 0 while the container asks for GPU memory or "
            "cores");
  config::DeviceConfig config;
  config.memory_factor = 1 << 20;
  EXPECT_EQ(ErrorOf(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}}), config),
            "Pod default/x: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/gpumem: 4096 x memoryFactor 1048576 is more than 2^31-1 "
            "MiB");
  auto init = PodWith({}, json::object(), {{"nvidia.com/gpucores", "101"}});
  EXPECT_EQ(ErrorOf(init),
            "Pod default/x: container \"setup\" (spec.initContainers[0]): "
            "resources.limits.nvidia.com/gpucores: 101 is out of range 0..100");
}

TEST(Request, MemoryIsAPlainCountOfMibAndSuffixesAreRefusedWithWhatToWrite) {
  auto mem = [](const std::string& text) {
    return ErrorOf(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", text}}));
  };
  const std::string prefix =
      "Pod default/x: container \"main\" (spec.containers[0]): "
      "resources.limits.nvidia.com/gpumem: ";
  EXPECT_EQ(mem("2Gi"), prefix +
                            "2Gi has a unit suffix (Gi), but nvidia.com/gpumem is a plain integer "
                            "count of MiB (2Gi would ask for 2147483648 MiB): for 2Gi of memory "
                            "write 2048");
  EXPECT_EQ(mem("500Mi"), prefix +
                              "500Mi has a unit suffix (Mi), but nvidia.com/gpumem is a plain "
                              "integer count of MiB (500Mi would ask for 524288000 MiB): for "
                              "500Mi of memory write 500");
  EXPECT_EQ(mem("3G"), prefix +
                           "3G has a unit suffix (G), but nvidia.com/gpumem is a plain integer "
                           "count of MiB (3G would ask for 3000000000 MiB): for 3G of memory "
                           "write 2862 (rounded up)");
  EXPECT_EQ(mem("1e3"), prefix +
                            "1e3 is written with an exponent, but nvidia.com/gpumem is a plain "
                            "integer count of MiB (1e3 would ask for 1000 MiB): for 1e3 of memory "
                            "write 1 (rounded up)");
  EXPECT_EQ(mem("1.5"), prefix +
                            "1500m (1.5) is not a whole number: nvidia.com/gpumem is a plain "
                            "integer count of MiB (write 3000 for 3000 MiB)");
  EXPECT_EQ(mem("2147484k"), prefix +
                                 "2147484k is out of range 0..2147483647: nvidia.com/gpumem is a "
                                 "plain integer count of MiB (write 3000 for 3000 MiB)");
  EXPECT_EQ(mem("-1"), prefix +
                           "-1 is negative: nvidia.com/gpumem is a plain integer count of MiB "
                           "(write 3000 for 3000 MiB)");
  // A plain count, as written and as the API server rewrites one ending in 000 ("3000" is
  // "3k"), is MiB; so is a count in thousandths that is whole.
  EXPECT_EQ(Only(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}})).mem_mib, 3000);
  EXPECT_EQ(Only(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3k"}})).mem_mib, 3000);
  EXPECT_EQ(Only(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "2048"}})).mem_mib, 2048);
  EXPECT_EQ(Only(PodWith({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "0"}})).mem_percentage,
            100);
}

TEST(Request, ZeroCountWithoutSharesRequestsNothing) {
  auto c = Only(PodWith({{"nvidia.com/gpu", "0"}}));
  EXPECT_EQ(c.count, 0);
}

}  // namespace
}  // namespace hami::scheduler
