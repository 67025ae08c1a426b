#include "scheduler/policy.h"

#include <gtest/gtest.h>

#include "scheduler/fit.h"

namespace hami::scheduler {
namespace {

GpuPolicy Gpu(std::string_view text) {
  auto p = ParseGpuPolicy(text, "test");
  EXPECT_TRUE(p.ok()) << p.error().message();
  return p.ok() ? *p : GpuPolicy{};
}

TEST(Policy, ParsesChains) {
  EXPECT_EQ(Gpu("binpack").sort_keys, std::vector<SortKey>{SortKey::kBinpack});
  EXPECT_EQ(Gpu("binpack,numa").sort_keys,
            (std::vector<SortKey>{SortKey::kBinpack, SortKey::kNuma}));
  EXPECT_EQ(Gpu("numa, binpack").sort_keys,
            (std::vector<SortKey>{SortKey::kNuma, SortKey::kBinpack}));
  // Only filters: sorted as spread.
  GpuPolicy only_filters = Gpu("mutex,topology-aware");
  EXPECT_TRUE(only_filters.mutex);
  EXPECT_TRUE(only_filters.topology_aware);
  EXPECT_EQ(only_filters.sort_keys, std::vector<SortKey>{SortKey::kSpread});
  EXPECT_EQ(Gpu("numa").sort_keys, (std::vector<SortKey>{SortKey::kNuma, SortKey::kSpread}));
}

TEST(Policy, RejectsBadChainsNamingTheSource) {
  auto bad = ParseGpuPolicy("packbin", "--gpu-scheduler-policy");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(),
            "--gpu-scheduler-policy: 'packbin' is not a GPU policy (binpack, spread, "
            "topology-aware, mutex, numa)");
  EXPECT_EQ(ParseGpuPolicy("binpack,spread", "p").error().message(),
            "p: binpack and spread exclude each other");
  EXPECT_EQ(ParseGpuPolicy("mutex,mutex", "p").error().message(), "p: 'mutex' appears twice");
  EXPECT_EQ(ParseGpuPolicy("", "p").error().message(), "p: empty GPU policy");
  EXPECT_EQ(ParseGpuPolicy("binpack,", "p").error().message(),
            "p: '' is not a GPU policy (binpack, spread, topology-aware, mutex, numa)");
  EXPECT_EQ(ParseNodePolicy("tight", "--node-scheduler-policy").error().message(),
            "--node-scheduler-policy: 'tight' is not a node policy (binpack, spread)");
}

TEST(Policy, ScoringWeights) {
  auto w = ParseScoringWeights("slot=1,core=1,memory=3", "a");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (ScoringWeights{1, 1, 3}));
  EXPECT_EQ(ParseScoringWeights("slot=1,core=1", "a").error().message(),
            "a: missing the memory weight (all of slot, core and memory are required)");
  EXPECT_EQ(ParseScoringWeights("slot=0,core=0,memory=0", "a").error().message(),
            "a: every weight is 0; at least one must be positive");
  EXPECT_EQ(ParseScoringWeights("slot=-1,core=1,memory=1", "a").error().message(),
            "a: slot='-1': not a non-negative integer");
  EXPECT_EQ(ParseScoringWeights("gpu=1,core=1,memory=1", "a").error().message(),
            "a: 'gpu' is not a weight (slot, core, memory)");
  EXPECT_EQ(ParseScoringWeights("slot", "a").error().message(), "a: 'slot': expected name=weight");
}

TEST(Policy, PodAnnotationsOverrideTheDefaults) {
  kube::ObjectMeta meta;
  meta.name = "x";
  meta.ns = "default";
  meta.annotations["hami.io/gpu-scheduler-policy"] = "binpack,numa";
  meta.annotations["hami.io/node-scheduler-policy"] = "spread";
  meta.annotations["hami.io/device-scoring-weights"] = "slot=0,core=0,memory=1";
  auto p = PolicyForPod(meta, Gpu("spread"), NodePolicy::kBinpack);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->gpu.sort_keys, (std::vector<SortKey>{SortKey::kBinpack, SortKey::kNuma}));
  EXPECT_EQ(p->node, NodePolicy::kSpread);
  EXPECT_EQ(p->weights, (ScoringWeights{0, 0, 1}));
  meta.annotations["hami.io/node-scheduler-policy"] = "fast";
  auto bad = PolicyForPod(meta, Gpu("spread"), NodePolicy::kBinpack);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(),
            "Pod default/x: annotation hami.io/node-scheduler-policy: 'fast' is not a node policy "
            "(binpack, spread)");
}

TEST(Policy, DeviceScoreIsWeightedUtilization) {
  ScoringWeights even;
  EXPECT_DOUBLE_EQ(DeviceScore(even, 0, 10, 0, 100, 0, 1000), 0);
  EXPECT_DOUBLE_EQ(DeviceScore(even, 10, 10, 100, 100, 1000, 1000), 10);
  EXPECT_DOUBLE_EQ(DeviceScore(even, 5, 10, 50, 100, 500, 1000), 5);
  ScoringWeights memory_only{0, 0, 1};
  EXPECT_DOUBLE_EQ(DeviceScore(memory_only, 10, 10, 100, 100, 250, 1000), 2.5);
}

// ---- The policies through FitPod ------------------------------------------------------------

kube::NodeDevice Dev(int index, int32_t numa = 0) {
  kube::NodeDevice d;
  d.id = "GPU-" + std::to_string(index);
  d.index = index;
  d.count = 10;
  d.devmem_mib = 10000;
  d.devcore = 100;
  d.type = "NVIDIA-A100";
  d.numa = numa;
  d.health = true;
  return d;
}

NodeGpus Node(std::vector<DeviceUsage> usage) {
  NodeGpus n;
  n.name = "n";
  for (size_t i = 0; i < usage.size(); ++i) n.gpus.push_back({Dev(int(i)), usage[i], false});
  return n;
}

PodRequest OneContainer(int32_t count, int32_t mem) {
  PodRequest p;
  ContainerRequest c;
  c.name = "main";
  c.count = count;
  c.mem_mib = mem;
  p.containers.push_back(c);
  return p;
}

std::vector<std::string> Picked(const NodeGpus& n, const PodRequest& pod, std::string_view gpu,
                                PodConstraints k = {}) {
  PodPolicy p;
  p.gpu = Gpu(gpu);
  auto r = FitPod(n, pod, k, p, {});
  EXPECT_TRUE(r.fits) << r.reason;
  std::vector<std::string> out;
  if (r.fits) {
    for (const auto& d : r.devices[0]) out.push_back(d.uuid);
  }
  return out;
}

TEST(Policy, BinpackFillsTheMostUsedGpuSpreadTheLeast) {
  NodeGpus n = Node({{1, 2000, 0, 0}, {2, 6000, 0, 0}, {0, 0, 0, 0}});
  EXPECT_EQ(Picked(n, OneContainer(1, 1000), "binpack"), std::vector<std::string>{"GPU-1"});
  EXPECT_EQ(Picked(n, OneContainer(1, 1000), "spread"), std::vector<std::string>{"GPU-2"});
}

TEST(Policy, EqualGpusBreakTiesByIndex) {
  NodeGpus n = Node({{}, {}, {}, {}});
  EXPECT_EQ(Picked(n, OneContainer(2, 1000), "spread"),
            (std::vector<std::string>{"GPU-0", "GPU-1"}));
  EXPECT_EQ(Picked(n, OneContainer(2, 1000), "binpack"),
            (std::vector<std::string>{"GPU-0", "GPU-1"}));
}

TEST(Policy, MutexTakesIdleGpusOnly) {
  NodeGpus n = Node({{1, 100, 0, 0}, {0, 0, 0, 0}, {1, 100, 0, 0}});
  EXPECT_EQ(Picked(n, OneContainer(1, 1000), "mutex,binpack"), std::vector<std::string>{"GPU-1"});
  PodPolicy p;
  p.gpu = Gpu("mutex");
  auto r = FitPod(n, OneContainer(2, 1000), {}, p, {});
  EXPECT_FALSE(r.fits);
  EXPECT_NE(r.reason.find("2 in use (mutex policy)"), std::string::npos) << r.reason;
}

TEST(Policy, NumaKeyOrdersByNumaNodeThenTheNextKey) {
  NodeGpus n = Node({{}, {}, {}, {}});
  n.gpus[0].device.numa = 1;
  n.gpus[1].device.numa = 1;
  n.gpus[2].device.numa = 0;
  n.gpus[3].device.numa = 0;
  n.gpus[3].used = {1, 5000, 0, 0};
  // numa first: NUMA 0's GPUs, the busier first under binpack.
  EXPECT_EQ(Picked(n, OneContainer(2, 1000), "numa,binpack"),
            (std::vector<std::string>{"GPU-3", "GPU-2"}));
  // binpack first: the busiest GPU, then numa breaks the tie among the idle ones.
  EXPECT_EQ(Picked(n, OneContainer(2, 1000), "binpack,numa"),
            (std::vector<std::string>{"GPU-3", "GPU-2"}));
  EXPECT_EQ(Picked(n, OneContainer(1, 1000), "spread,numa"), std::vector<std::string>{"GPU-2"});
}

TEST(Policy, TopologyAwarePicksTheBestConnectedSetAndLeavesItWholeForOne) {
  NodeGpus n = Node({{}, {}, {}, {}});
  // GPU-1 and GPU-3 share NVLink; everything else is PCIe.
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) {
      if (a == b) continue;
      const bool nvlink = (a == 1 && b == 3) || (a == 3 && b == 1);
      n.pair_scores["GPU-" + std::to_string(a)]["GPU-" + std::to_string(b)] = nvlink ? 200 : 20;
    }
  }
  EXPECT_EQ(Picked(n, OneContainer(2, 1000), "topology-aware"),
            (std::vector<std::string>{"GPU-1", "GPU-3"}));
  // A single GPU goes where it breaks no good pair.
  EXPECT_EQ(Picked(n, OneContainer(1, 1000), "topology-aware"), std::vector<std::string>{"GPU-0"});
  // Without pair scores the policy order decides.
  n.pair_scores.clear();
  EXPECT_EQ(Picked(n, OneContainer(2, 1000), "topology-aware"),
            (std::vector<std::string>{"GPU-0", "GPU-1"}));
}

TEST(Policy, ScoringWeightsChangeWhichGpuBinpackFills) {
  // GPU-0 is busy by slots and cores, GPU-1 by memory.
  NodeGpus n = Node({{5, 1000, 60, 0}, {1, 8000, 0, 0}});
  PodPolicy slot_heavy;
  slot_heavy.gpu = Gpu("binpack");
  slot_heavy.weights = {3, 3, 1};
  PodPolicy mem_heavy = slot_heavy;
  mem_heavy.weights = {0, 0, 1};
  auto a = FitPod(n, OneContainer(1, 1000), {}, slot_heavy, {});
  auto b = FitPod(n, OneContainer(1, 1000), {}, mem_heavy, {});
  ASSERT_TRUE(a.fits && b.fits);
  EXPECT_EQ(a.devices[0][0].uuid, "GPU-0");
  EXPECT_EQ(b.devices[0][0].uuid, "GPU-1");
}

}  // namespace
}  // namespace hami::scheduler
