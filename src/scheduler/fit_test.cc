#include "scheduler/fit.h"

#include <gtest/gtest.h>

#include "scheduler/fit_test_support.h"

namespace hami::scheduler {
namespace {

using namespace fit_testing;  // NOLINT(build/namespaces)

FitResult Fit(const NodeGpus& node, const PodRequest& pod, const PodConstraints& k = {},
              const PodPolicy& policy = Policy(), const QuotaCheck& quota = {}) {
  return FitPod(node, pod, k, policy, quota);
}

std::vector<std::string> Uuids(const FitResult& r, size_t container) {
  std::vector<std::string> out;
  if (container < r.devices.size()) {
    for (const auto& d : r.devices[container]) out.push_back(d.uuid);
  }
  return out;
}

TEST(Fit, PlacesCountDistinctGpusWithTheRequest) {
  auto r = Fit(Node(4), Pod({Req(2, 3000, 30)}));
  ASSERT_TRUE(r.fits) << r.reason;
  ASSERT_EQ(r.devices.size(), 1u);
  ASSERT_EQ(r.devices[0].size(), 2u);
  EXPECT_NE(r.devices[0][0].uuid, r.devices[0][1].uuid);
  EXPECT_EQ(r.devices[0][0], (kube::ContainerDevice{"GPU-0", "NVIDIA", 3000, 30}));
  EXPECT_EQ(r.devices[0][1], (kube::ContainerDevice{"GPU-1", "NVIDIA", 3000, 30}));
}

TEST(Fit, APodWithoutGpuRequestsFitsEveryNode) {
  NodeGpus empty;
  empty.name = "cpu-only";
  auto r = Fit(empty, Pod({Req(0, 0)}));
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.devices.size(), 1u);
  EXPECT_TRUE(r.devices[0].empty());
}

TEST(Fit, ANodeWithoutInventoryIsUnresolvable) {
  NodeGpus empty;
  auto r = Fit(empty, Pod({Req(1, 100)}));
  EXPECT_FALSE(r.fits);
  EXPECT_TRUE(r.unresolvable);
  EXPECT_EQ(r.reason, "no GPUs registered (hami.io/node-nvidia-register)");
}

TEST(Fit, AnUnavailableNodeSaysWhy) {
  NodeGpus n = Node(2);
  n.unavailable = "handshake expired";
  auto r = Fit(n, Pod({Req(1, 100)}));
  EXPECT_FALSE(r.fits);
  EXPECT_TRUE(r.unresolvable);
  EXPECT_EQ(r.reason, "handshake expired");
}

TEST(Fit, SkipsUnhealthyGpus) {
  NodeGpus n = Node(2);
  n.gpus[0].device.health = false;
  auto r = Fit(n, Pod({Req(1, 100)}));
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(Uuids(r, 0), std::vector<std::string>{"GPU-1"});
  auto two = Fit(n, Pod({Req(2, 100)}));
  EXPECT_FALSE(two.fits);
  EXPECT_TRUE(two.unresolvable);
  EXPECT_EQ(two.reason,
            "container \"main\" (spec.containers[0]) asks for 2 GPUs (100 MiB, 0 cores each): 1 "
            "of 2 usable (1 unhealthy)");
}

TEST(Fit, SkipsCordonedGpus) {
  NodeGpus n = Node(2);
  n.gpus[0].cordoned = true;
  auto r = Fit(n, Pod({Req(1, 100)}));
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(Uuids(r, 0), std::vector<std::string>{"GPU-1"});
  n.gpus[1].cordoned = true;
  auto none = Fit(n, Pod({Req(1, 100)}));
  EXPECT_FALSE(none.fits);
  EXPECT_NE(none.reason.find("2 cordoned"), std::string::npos) << none.reason;
}

TEST(Fit, SkipsGpusNotInHamiCoreMode) {
  NodeGpus n = Node(2);
  n.gpus[0].device.mode = "mig";
  auto r = Fit(n, Pod({Req(1, 100)}));
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(Uuids(r, 0), std::vector<std::string>{"GPU-1"});
}

TEST(Fit, UseAndNoUseGpuTypeAreCaseInsensitiveSubstrings) {
  NodeGpus n = Node(3);
  n.gpus[0].device.type = "NVIDIA-Tesla V100-PCIE-32GB";
  n.gpus[1].device.type = "NVIDIA-A10";
  n.gpus[2].device.type = "NVIDIA-Tesla T4";
  PodConstraints use;
  use.use_types = {"a10", "t4"};
  auto r = Fit(n, Pod({Req(2, 100)}), use);
  ASSERT_TRUE(r.fits) << r.reason;
  EXPECT_EQ(Uuids(r, 0), (std::vector<std::string>{"GPU-1", "GPU-2"}));
  PodConstraints nouse;
  nouse.nouse_types = {"tesla"};
  auto r2 = Fit(n, Pod({Req(1, 100)}), nouse);
  ASSERT_TRUE(r2.fits);
  EXPECT_EQ(Uuids(r2, 0), std::vector<std::string>{"GPU-1"});
  auto r3 = Fit(n, Pod({Req(2, 100)}), nouse);
  EXPECT_FALSE(r3.fits);
  EXPECT_TRUE(r3.unresolvable);
  EXPECT_NE(r3.reason.find("2 excluded by type"), std::string::npos) << r3.reason;
}

TEST(Fit, UseAndNoUseGpuUuid) {
  NodeGpus n = Node(3);
  PodConstraints use;
  use.use_uuids = {"GPU-2"};
  auto r = Fit(n, Pod({Req(1, 100)}), use);
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(Uuids(r, 0), std::vector<std::string>{"GPU-2"});
  PodConstraints nouse;
  nouse.nouse_uuids = {"GPU-0", "GPU-1"};
  auto r2 = Fit(n, Pod({Req(1, 100)}), nouse);
  ASSERT_TRUE(r2.fits);
  EXPECT_EQ(Uuids(r2, 0), std::vector<std::string>{"GPU-2"});
  EXPECT_FALSE(Fit(n, Pod({Req(2, 100)}), use).fits);
}

TEST(Fit, NumaBindKeepsAContainersGpusOnOneNumaNode) {
  NodeGpus n = Node(4);
  n.gpus[0].device.numa = 0;
  n.gpus[1].device.numa = 1;
  n.gpus[2].device.numa = 1;
  n.gpus[3].device.numa = 0;
  n.gpus[3].used.mem_mib = 16000;  // GPU-3 (NUMA 0) is nearly full
  PodConstraints bind;
  bind.numa_bind = true;
  auto r = Fit(n, Pod({Req(2, 1000)}), bind);
  ASSERT_TRUE(r.fits) << r.reason;
  EXPECT_EQ(Uuids(r, 0), (std::vector<std::string>{"GPU-1", "GPU-2"}));
  auto three = Fit(n, Pod({Req(3, 1000)}), bind);
  EXPECT_FALSE(three.fits);
  EXPECT_TRUE(three.unresolvable);
  EXPECT_NE(three.reason.find("no NUMA node has 3 usable GPUs (nvidia.com/numa-bind)"),
            std::string::npos)
      << three.reason;
  // Without the binding any three will do.
  EXPECT_TRUE(Fit(n, Pod({Req(3, 100)})).fits);
}

TEST(Fit, OutOfSplitSlots) {
  NodeGpus n = Node(1);
  n.gpus[0].device.count = 2;
  n.gpus[0].used.slots = 2;
  auto r = Fit(n, Pod({Req(1, 100)}));
  EXPECT_FALSE(r.fits);
  EXPECT_FALSE(r.unresolvable);
  EXPECT_EQ(r.reason,
            "container \"main\" (spec.containers[0]) asks for 1 GPU (100 MiB, 0 cores): 0 of 1 "
            "usable (1 all slots in use)");
  n.gpus[0].used.slots = 1;
  EXPECT_TRUE(Fit(n, Pod({Req(1, 100)})).fits);
}

TEST(Fit, ShortOfMemoryToTheMiB) {
  NodeGpus n = Node(1);
  n.gpus[0].used.mem_mib = 16384 - 1000;
  n.gpus[0].used.slots = 1;
  EXPECT_TRUE(Fit(n, Pod({Req(1, 1000)})).fits);
  auto r = Fit(n, Pod({Req(1, 1001)}));
  EXPECT_FALSE(r.fits);
  EXPECT_FALSE(r.unresolvable);
  EXPECT_NE(r.reason.find("1 short of memory"), std::string::npos) << r.reason;
}

TEST(Fit, PercentageOfMemoryIsOfEachDevice) {
  NodeGpus n = Node(2);
  n.gpus[1].device.devmem_mib = 8192;
  ContainerRequest c = Req(2, 0);
  c.mem_percentage = 50;
  auto r = Fit(n, Pod({c}));
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(r.devices[0][0].mem_mib, 8192);
  EXPECT_EQ(r.devices[0][1].mem_mib, 4096);
}

TEST(Fit, ShortOfCores) {
  NodeGpus n = Node(1);
  n.gpus[0].used = {1, 0, 80, 0};
  EXPECT_TRUE(Fit(n, Pod({Req(1, 100, 20)})).fits);
  auto r = Fit(n, Pod({Req(1, 100, 21)}));
  EXPECT_FALSE(r.fits);
  EXPECT_NE(r.reason.find("1 short of cores"), std::string::npos) << r.reason;
}

TEST(Fit, ARequestLargerThanAnyDeviceIsUnresolvable) {
  auto r = Fit(Node(2), Pod({Req(1, 20000)}));
  EXPECT_FALSE(r.fits);
  EXPECT_TRUE(r.unresolvable);
  EXPECT_NE(r.reason.find("2 smaller than the request"), std::string::npos) << r.reason;
}

TEST(Fit, ExclusiveWhileUsed) {
  NodeGpus n = Node(2);
  n.gpus[0].used = {1, 100, 0, 0};  // something runs on GPU-0
  auto r = Fit(n, Pod({Req(1, 1000, 100)}));
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(Uuids(r, 0), std::vector<std::string>{"GPU-1"});
  n.gpus[1].used = {1, 1000, 100, 1};  // GPU-1 is held exclusively
  auto shared = Fit(n, Pod({Req(1, 100, 0)}));
  ASSERT_TRUE(shared.fits);
  EXPECT_EQ(Uuids(shared, 0), std::vector<std::string>{"GPU-0"});
  auto excl = Fit(n, Pod({Req(1, 100, 100)}));
  EXPECT_FALSE(excl.fits);
  EXPECT_NE(excl.reason.find("2 held exclusively or busy for an exclusive request"),
            std::string::npos)
      << excl.reason;
}

TEST(Fit, OverNamespaceQuota) {
  config::DeviceConfig config;
  NamespaceQuota q;
  q.memory_mib = 5000;
  q.memory_source = "gpu-quota";
  QuotaCheck check{"team-a", &q, {4000, 0}, &config};
  auto r = Fit(Node(2), Pod({Req(1, 1000)}), {}, Policy(), check);
  EXPECT_TRUE(r.fits) << r.reason;
  auto over = Fit(Node(2), Pod({Req(2, 1000)}), {}, Policy(), check);
  EXPECT_FALSE(over.fits);
  EXPECT_FALSE(over.unresolvable);
  EXPECT_EQ(over.reason,
            "namespace team-a: limits.nvidia.com/gpumem of ResourceQuota gpu-quota is 5000 MiB, "
            "4000 are used and the pod needs 2000");
}

TEST(Fit, OnePodNeverTakesTwoSlotsOfOneGpu) {
  NodeGpus n = Node(1);
  n.gpus[0].device.count = 2;
  n.gpus[0].used.slots = 1;
  // Two containers on the one GPU: one slot between them, memory and cores summed.
  auto r = Fit(n, Pod({Req(1, 1000, 10), Req(1, 2000, 20)}), {}, Policy("binpack"));
  ASSERT_TRUE(r.fits) << r.reason;
  EXPECT_EQ(Uuids(r, 0), std::vector<std::string>{"GPU-0"});
  EXPECT_EQ(Uuids(r, 1), std::vector<std::string>{"GPU-0"});
}

TEST(Fit, InitContainersFitFirstAndThePeakIsKept) {
  NodeGpus n = Node(1);
  // The init container needs 12000 MiB alone; the containers 2 x 6000 together. Each fits the
  // 16384 MiB GPU on its own, although their sum would not.
  ContainerRequest init = Req(1, 12000);
  init.name = "setup";
  auto r = Fit(n, Pod({Req(1, 6000), Req(1, 6000)}, {init}), {}, Policy("binpack"));
  ASSERT_TRUE(r.fits) << r.reason;
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_EQ(r.devices[0][0].mem_mib, 12000);
  // The peak held is max(12000, 12000) on GPU-0; quota amounts agree.
  EXPECT_EQ(AllocationAmounts(r.devices, 1).memory_mib, 12000);
  ContainerRequest big = Req(1, 17000);
  big.name = "setup";
  auto too_big = Fit(n, Pod({Req(1, 100)}, {big}));
  EXPECT_FALSE(too_big.fits);
  EXPECT_EQ(too_big.reason.rfind("init container \"setup\" (spec.initContainers[0]) asks", 0), 0u)
      << too_big.reason;
}

TEST(Fit, NodeScoreFollowsTheNodePolicy) {
  NodeGpus busy = Node(2);
  busy.gpus[0].used = {5, 8000, 50, 0};
  busy.gpus[1].used = {5, 8000, 50, 0};
  NodeGpus idle = Node(2);
  auto pod = Pod({Req(1, 1000, 10)});
  auto bin_busy = Fit(busy, pod, {}, Policy("spread", NodePolicy::kBinpack));
  auto bin_idle = Fit(idle, pod, {}, Policy("spread", NodePolicy::kBinpack));
  auto spr_busy = Fit(busy, pod, {}, Policy("spread", NodePolicy::kSpread));
  auto spr_idle = Fit(idle, pod, {}, Policy("spread", NodePolicy::kSpread));
  EXPECT_GT(bin_busy.score, bin_idle.score);
  EXPECT_LT(spr_busy.score, spr_idle.score);
  for (const auto* r : {&bin_busy, &bin_idle, &spr_busy, &spr_idle}) {
    EXPECT_GE(r->score, 0);
    EXPECT_LE(r->score, 10);
  }
}

}  // namespace
}  // namespace hami::scheduler

namespace hami::scheduler {
namespace {

TEST(Fit, ConstraintsComeFromThePodsAnnotations) {
  kube::ObjectMeta meta;
  meta.name = "x";
  meta.ns = "default";
  meta.annotations["nvidia.com/use-gputype"] = "A100, Tesla V100";
  meta.annotations["nvidia.com/nouse-gputype"] = "T4";
  meta.annotations["nvidia.com/use-gpuuuid"] = "GPU-a,GPU-b";
  meta.annotations["nvidia.com/nouse-gpuuuid"] = "GPU-c";
  meta.annotations["nvidia.com/numa-bind"] = "true";
  auto k = ConstraintsForPod(meta);
  ASSERT_TRUE(k.ok()) << k.error().message();
  EXPECT_EQ(k->use_types, (std::vector<std::string>{"a100", "tesla v100"}));
  EXPECT_EQ(k->nouse_types, std::vector<std::string>{"t4"});
  EXPECT_EQ(k->use_uuids, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(k->nouse_uuids, std::vector<std::string>{"GPU-c"});
  EXPECT_TRUE(k->numa_bind);
  meta.annotations["nvidia.com/numa-bind"] = "maybe";
  auto bad = ConstraintsForPod(meta);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(),
            "Pod default/x: annotation nvidia.com/numa-bind: 'maybe' is not a boolean");
}

}  // namespace
}  // namespace hami::scheduler
