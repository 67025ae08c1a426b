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

TEST(DraRecord, RoundTripsTheContainersThatRequestGpus) {
  PodRequest r;
  ContainerRequest init;
  init.name = "setup";
  init.count = 1;
  init.mem_mib = 500;
  r.init_containers.push_back(init);
  ContainerRequest main;
  main.name = "main";
  main.count = 2;
  main.mem_mib = 3000;
  main.cores = 30;
  r.containers.push_back(main);
  ContainerRequest none;
  none.name = "sidecar";
  r.containers.push_back(none);
  const std::string text = EncodeDraRequest(r);
  EXPECT_EQ(text, R"({"containers":[{"cores":30,"count":2,"memory":3000,"name":"main"}],)"
                  R"("initContainers":[{"cores":0,"count":1,"memory":500,"name":"setup"}]})");
  auto back = DecodeDraRequest(text);
  ASSERT_TRUE(back.ok()) << back.error().message();
  r.containers.pop_back();  // requests nothing: not recorded
  EXPECT_EQ(*back, r);
  EXPECT_EQ(RequestAmounts(*back), (QuotaAmounts{6000, 60}));
  EXPECT_TRUE(DecodeDraRequest("{}").ok());
}

TEST(DraRecord, RefusesEveryMalformedRecordNamingTheField) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"", "hami.io/dra-request: not JSON"},
      {"[]", "hami.io/dra-request: not a JSON object"},
      {R"({"pods":[]})", "hami.io/dra-request: unknown key \"pods\""},
      {R"({"containers":{}})", "hami.io/dra-request: containers: not a list"},
      {R"({"containers":[1]})", "hami.io/dra-request: containers[0]: not an object"},
      {R"({"containers":[{"name":"a","count":1,"memory":0,"cores":0,"x":1}]})",
       "hami.io/dra-request: containers[0]: unknown key \"x\""},
      {R"({"containers":[{"count":1,"memory":0,"cores":0}]})",
       "hami.io/dra-request: containers[0].name: missing or not a string"},
      {R"({"initContainers":[{"name":"a","memory":0,"cores":0}]})",
       "hami.io/dra-request: initContainers[0].count: missing"},
      {R"({"containers":[{"name":"a","count":0,"memory":0,"cores":0}]})",
       "hami.io/dra-request: containers[0].count: 0 is out of range 1..1024"},
      {R"({"containers":[{"name":"a","count":1,"memory":-1,"cores":0}]})",
       "hami.io/dra-request: containers[0].memory: -1 is out of range 0..2147483647"},
      {R"({"containers":[{"name":"a","count":1,"memory":1.5,"cores":0}]})",
       "hami.io/dra-request: containers[0].memory: not a whole number"},
      {R"({"containers":[{"name":"a","count":1,"memory":0,"cores":101}]})",
       "hami.io/dra-request: containers[0].cores: 101 is out of range 0..100"},
      {R"({"containers":[{"name":"a","count":1,"memory":0,"cores":"5"}]})",
       "hami.io/dra-request: containers[0].cores: not a whole number"},
  };
  for (const Case& c : cases) {
    auto r = DecodeDraRequest(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message(), c.message) << c.text;
  }
}

TEST(DraRecord, OnlyALabelledLivePodTakesItsRecord) {
  json pod = {{"metadata",
               {{"name", "p"},
                {"namespace", "team-a"},
                {"labels", {{"hami.io/dra", "true"}}},
                {"annotations",
                 {{"hami.io/dra-request",
                   R"({"containers":[{"name":"a","count":1,"memory":1000,"cores":10}]})"}}}}},
              {"spec", {{"containers", json::array({{{"name", "a"}}})}}}};
  auto amounts = [](const json& j) {
    auto p = kube::ParsePod(j);
    EXPECT_TRUE(p.ok()) << p.error().message();
    return DraRequestAmounts(*p);
  };
  auto got = amounts(pod);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, (QuotaAmounts{1000, 10}));
  json unlabelled = pod;
  unlabelled["metadata"]["labels"]["hami.io/dra"] = "false";
  EXPECT_FALSE(amounts(unlabelled)->has_value());
  json ended = pod;
  ended["status"] = {{"phase", "Succeeded"}};
  EXPECT_FALSE(amounts(ended)->has_value());
  json bad = pod;
  bad["metadata"]["annotations"]["hami.io/dra-request"] = "{";
  EXPECT_FALSE(amounts(bad).ok());
}

}  // namespace
}  // namespace hami::scheduler
