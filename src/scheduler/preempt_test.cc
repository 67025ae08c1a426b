#include "scheduler/preempt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "scheduler/extender_api.h"
#include "scheduler/fit_test_support.h"

namespace hami::scheduler {
namespace {

using namespace fit_testing;  // NOLINT(build/namespaces)

// A node of `gpus` GPUs of 16384 MiB and the pods placed on it, each a candidate victim.
class Occupied {
 public:
  explicit Occupied(int gpus) : node_(Node(gpus)) {}

  // Pod `name` of `priority` holding `mem_mib` (and `cores`) on GPU `gpu`.
  Occupied& Place(const std::string& name, int32_t priority, size_t gpu, int32_t mem_mib,
                  int32_t cores = 0) {
    VictimCandidate c;
    c.key = "default/" + name;
    c.ns = "default";
    c.priority = priority;
    DeviceUsage u{1, mem_mib, cores, cores >= 100 ? 1 : 0};
    c.usage.emplace_back(gpu, u);
    c.amounts = {mem_mib, cores};
    GpuState& g = node_.gpus[gpu];
    g.used.slots += u.slots;
    g.used.mem_mib += u.mem_mib;
    g.used.cores += u.cores;
    g.used.exclusive += u.exclusive;
    candidates_.push_back(std::move(c));
    return *this;
  }

  VictimChoice Choose(int32_t priority, const PodRequest& pod, const QuotaCheck& quota = {}) {
    return ChooseVictims(node_, candidates_, priority, pod, {}, Policy(), quota);
  }

  // The names of the chosen victims.
  std::vector<std::string> Names(const VictimChoice& choice) const {
    std::vector<std::string> out;
    for (size_t i : choice.victims) out.push_back(candidates_[i].key.substr(8));
    return out;
  }

  NodeGpus& node() { return node_; }
  std::vector<VictimCandidate>& candidates() { return candidates_; }

 private:
  NodeGpus node_;
  std::vector<VictimCandidate> candidates_;
};

using Outcome = VictimChoice::Outcome;
using Names = std::vector<std::string>;

TEST(Preempt, TakesTheOneLowPriorityPodOnTheGpuThePodNeedsAndNotTheOthers) {
  Occupied n(2);
  n.Place("a", 0, 0, 8000).Place("b", 0, 0, 8000).Place("c", 0, 1, 10000).Place("d", 5, 1, 4000);
  VictimChoice c = n.Choose(100, Pod({Req(1, 10000)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(n.Names(c), Names{"c"});
}

TEST(Preempt, FewestVictimsComeBeforeLowerPriorities) {
  Occupied n(2);
  n.Place("low-1", 1, 0, 8000).Place("low-2", 1, 0, 8000).Place("mid", 2, 1, 12000);
  VictimChoice c = n.Choose(10, Pod({Req(1, 12000)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(n.Names(c), Names{"mid"});
}

TEST(Preempt, AmongSetsOfOneSizeTheLowestPrioritiesGo) {
  Occupied n(3);
  n.Place("p3", 3, 0, 12000).Place("p1", 1, 1, 12000).Place("p2", 2, 2, 12000);
  VictimChoice c = n.Choose(10, Pod({Req(1, 12000)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims);
  EXPECT_EQ(n.Names(c), Names{"p1"});

  // Two victims needed on either GPU: the pair whose highest priority is lowest.
  Occupied m(2);
  m.Place("a1", 1, 0, 7000).Place("a4", 4, 0, 7000).Place("b2", 2, 1, 7000).Place("b3", 3, 1, 7000);
  c = m.Choose(10, Pod({Req(1, 12000)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(m.Names(c), (Names{"b2", "b3"}));
}

TEST(Preempt, TakesTwoPodsOfOneGpuWhenOneIsNotEnough) {
  Occupied n(2);
  n.Place("a", 1, 0, 6000).Place("b", 1, 0, 6000).Place("c", 2, 0, 3000);
  n.Place("d", 0, 1, 10000).Place("e", 5, 1, 5000);
  VictimChoice c = n.Choose(4, Pod({Req(1, 12000)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(n.Names(c), (Names{"a", "b"}));
}

TEST(Preempt, PodsOfEqualOrHigherPriorityAreNeverVictims) {
  Occupied n(1);
  n.Place("same", 10, 0, 12000).Place("higher", 20, 0, 2000);
  VictimChoice c = n.Choose(10, Pod({Req(1, 12000)}));
  EXPECT_EQ(c.outcome, Outcome::kNoHelp);
  EXPECT_TRUE(c.victims.empty());
  EXPECT_NE(c.reason.find("lower priority"), std::string::npos) << c.reason;

  // A lower-priority pod that does not free enough alone leaves the node out too.
  n.Place("lower", 1, 0, 1000);
  c = n.Choose(10, Pod({Req(1, 12000)}));
  EXPECT_EQ(c.outcome, Outcome::kNoHelp);
  EXPECT_TRUE(c.victims.empty());
  EXPECT_NE(c.reason.find("does not fit even without the 1 lower-priority pods"), std::string::npos)
      << c.reason;
}

TEST(Preempt, APodThatCannotFitAnEmptyGpuIsUnresolvableAndTakesNoVictim) {
  Occupied n(2);
  n.Place("a", 0, 0, 8000).Place("b", 0, 1, 8000);
  VictimChoice c = n.Choose(100, Pod({Req(1, 20000)}));
  EXPECT_EQ(c.outcome, Outcome::kNoHelp);
  EXPECT_TRUE(c.unresolvable);
  EXPECT_TRUE(c.victims.empty());

  // Three GPUs asked of a two-GPU node.
  c = n.Choose(100, Pod({Req(3, 1000)}));
  EXPECT_EQ(c.outcome, Outcome::kNoHelp);
  EXPECT_TRUE(c.unresolvable);
}

TEST(Preempt, APodThatFitsAlreadyNeedsNoVictim) {
  Occupied n(2);
  n.Place("a", 0, 0, 8000);
  VictimChoice c = n.Choose(100, Pod({Req(1, 8000)}));
  EXPECT_EQ(c.outcome, Outcome::kFitsAlready);
  EXPECT_TRUE(c.victims.empty());
}

TEST(Preempt, ACandidateHoldingNothingOnTheNodeIsNeverTaken) {
  Occupied n(1);
  n.Place("a", 0, 0, 12000);
  VictimCandidate elsewhere;
  elsewhere.key = "default/cpu-only";
  elsewhere.ns = "default";
  n.candidates().insert(n.candidates().begin(), elsewhere);
  VictimChoice c = n.Choose(100, Pod({Req(1, 12000)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(n.Names(c), Names{"a"});
}

TEST(Preempt, HonoursThePodsPoliciesAndSelectors) {
  // The pod may only use GPU-1: the victim must be there, though GPU-0's is of lower priority.
  Occupied n(2);
  n.Place("on-0", 0, 0, 12000).Place("on-1", 5, 1, 12000);
  PodConstraints only_gpu1;
  only_gpu1.use_uuids = {"GPU-1"};
  VictimChoice c =
      ChooseVictims(n.node(), n.candidates(), 10, Pod({Req(1, 12000)}), only_gpu1, Policy(), {});
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(n.Names(c), Names{"on-1"});

  // Exclusive (100 cores) needs its GPU empty: both pods of GPU-0 go.
  Occupied x(1);
  x.Place("a", 0, 0, 1000, 10).Place("b", 0, 0, 1000, 10);
  c = x.Choose(10, Pod({Req(1, 1000, 100)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(x.Names(c), (Names{"a", "b"}));
}

TEST(Preempt, AVictimInThePodsNamespaceGivesItsQuotaBack) {
  Occupied n(2);
  n.Place("same-ns", 0, 0, 8000);
  NamespaceQuota quota;
  quota.memory_mib = 10000;
  quota.memory_source = "gpu-quota";
  config::DeviceConfig config;
  QuotaCheck check;
  check.ns = "default";
  check.quota = &quota;
  check.used = {8000, 0};
  check.config = &config;
  // GPU-1 is empty, but the namespace's quota holds only 2000 more.
  VictimChoice c = n.Choose(10, Pod({Req(1, 6000)}), check);
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(n.Names(c), Names{"same-ns"});
}

TEST(Preempt, AMultiGpuPodTakesThePodsThatFreeBothItsGpusAndNoMore) {
  // Two GPUs of 16384: a (10000) alone on GPU 0, b (2000) and c (9000) on GPU 1.
  Occupied n(2);
  n.Place("a", 0, 0, 10000).Place("b", 0, 1, 2000).Place("c", 0, 1, 9000);
  // GPU 1 needs c gone (b may stay), GPU 0 needs a gone.
  VictimChoice c = n.Choose(10, Pod({Req(2, 8000)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(n.Names(c), (Names{"a", "c"}));
  // Both GPUs whole: every pod goes, and the trials that cannot work cost no fit.
  c = n.Choose(10, Pod({Req(2, 16384)}));
  ASSERT_EQ(c.outcome, Outcome::kVictims) << c.reason;
  EXPECT_EQ(n.Names(c), (Names{"a", "b", "c"}));
}

// Random nodes, victims and pods: ChooseVictims with its shortcuts answers as it does fitting
// every set it tries, reason and number of fits included.
TEST(Preempt, TheShortcutsChooseAsFittingEverySetWould) {
  std::mt19937 rng(31);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const PodPolicy policies[] = {Policy("spread"), Policy("binpack"), Policy("binpack,mutex"),
                                Policy("topology-aware")};
  config::DeviceConfig config;
  int victims_chosen = 0, no_help = 0, unresolvable = 0, fits_already = 0;
  for (int round = 0; round < 3000; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int gpus = pick(1, 8);
    Occupied n(gpus);
    for (int g = 0; g < gpus; ++g) {
      GpuState& s = n.node().gpus[size_t(g)];
      s.device.devmem_mib = pick(0, 3) == 0 ? 8192 : 16384;
      s.device.count = pick(1, 4);
      s.device.numa = g % 2;
      s.device.health = pick(0, 20) != 0;
      s.cordoned = pick(0, 20) == 0;
      if (pick(0, 20) == 0) s.device.mode = "mig";
    }
    const int pods = pick(0, 10);
    for (int v = 0; v < pods; ++v) {
      const size_t g = size_t(pick(0, gpus - 1));
      const GpuState& s = n.node().gpus[g];
      const int64_t mem_left = s.device.devmem_mib - s.used.mem_mib;
      const int64_t cores_left = s.device.devcore - s.used.cores;
      if (mem_left <= 0 || cores_left <= 0 || s.used.exclusive > 0) continue;
      const int cores = pick(0, 3) == 0 && s.used.slots == 0 ? 100 : pick(0, int(cores_left) / 2);
      n.Place("v" + std::to_string(v), pick(-2, 5), g, pick(1, int(mem_left)), cores);
      if (pick(0, 3) == 0) n.candidates().back().ns = "other";
    }
    std::vector<ContainerRequest> containers;
    for (int c = pick(1, 2); c > 0; --c) {
      const int count = pick(0, 9) == 0 ? gpus + 1 : pick(1, std::max(1, gpus / 2));
      containers.push_back(Req(count, pick(500, 12000), pick(0, 5) == 0 ? 100 : pick(0, 60)));
    }
    std::vector<ContainerRequest> init;
    if (pick(0, 4) == 0) init.push_back(Req(pick(1, gpus), pick(500, 12000), pick(0, 60)));
    const PodRequest pod = Pod(containers, init);
    PodConstraints constraints;
    constraints.numa_bind = pick(0, 5) == 0;
    if (pick(0, 6) == 0) constraints.nouse_uuids = {"GPU-0"};
    const PodPolicy& policy = policies[pick(0, 3)];
    NamespaceQuota quota;
    QuotaCheck check;
    if (pick(0, 3) == 0) {
      quota.memory_mib = pick(4000, 40000);
      quota.memory_source = "gpu-quota";
      check.ns = "default";
      check.quota = &quota;
      for (const VictimCandidate& c : n.candidates()) {
        if (c.ns == "default") check.used += c.amounts;
      }
      check.config = &config;
    }
    const int32_t priority = pick(-1, 6);
    const VictimChoice fast = ChooseVictims(n.node(), n.candidates(), priority, pod, constraints,
                                            policy, check, Shortcuts::kUse);
    const VictimChoice slow = ChooseVictims(n.node(), n.candidates(), priority, pod, constraints,
                                            policy, check, Shortcuts::kNone);
    ASSERT_EQ(fast.outcome, slow.outcome) << slow.reason;
    EXPECT_EQ(fast.victims, slow.victims);
    EXPECT_EQ(fast.unresolvable, slow.unresolvable);
    EXPECT_EQ(fast.reason, slow.reason);
    EXPECT_EQ(fast.fits_tried, slow.fits_tried);
    switch (slow.outcome) {
      case Outcome::kVictims:
        ++victims_chosen;
        break;
      case Outcome::kFitsAlready:
        ++fits_already;
        break;
      case Outcome::kNoHelp:
        ++(slow.unresolvable ? unresolvable : no_help);
        break;
    }
  }
  // Every outcome came up often enough to mean something.
  EXPECT_GT(victims_chosen, 300);
  EXPECT_GT(no_help, 300);
  EXPECT_GT(unresolvable, 100);
  EXPECT_GT(fits_already, 100);
}

// ---- Nominated pods ---------------------------------------------------------------------------

NominatedPod Nominee(const std::string& name, int32_t priority, PodRequest request) {
  NominatedPod n;
  n.key = "default/" + name;
  n.priority = priority;
  n.request = std::move(request);
  n.policy = Policy();
  return n;
}

TEST(Nominated, HoldsTheRoomTheNomineeWouldTakeHighestPriorityFirst) {
  NodeGpus node = Node(2);
  node.gpus[0].used = {1, 10000, 0, 0};
  const NominatedPod big = Nominee("big", 100, Pod({Req(1, 12000)}));
  const NominatedPod small = Nominee("small", 50, Pod({Req(1, 6000)}));
  // The higher priority is placed first, so it gets the empty GPU; the other fits beside the
  // pod on GPU 0.
  auto held = HoldNominated(node, nullptr, {&small, &big});
  EXPECT_EQ(held, (std::vector<std::string>{"default/big", "default/small"}));
  EXPECT_EQ(node.gpus[0].used, (DeviceUsage{2, 16000, 0, 0}));
  EXPECT_EQ(node.gpus[1].used, (DeviceUsage{1, 12000, 0, 0}));
  // What is left is no longer room for a pod of 1000.
  EXPECT_FALSE(FitPod(node, Pod({Req(1, 5000)}), {}, Policy(), {}).fits);
}

TEST(Nominated, ANomineeWhoseVictimsAreTerminatingHoldsTheRoomTheyFree) {
  // GPU 0 is held by a terminating victim (12000), GPU 1 by a pod staying (10000).
  NodeGpus node = Node(2);
  node.gpus[0].used = {1, 12000, 0, 0};
  node.gpus[1].used = {1, 10000, 0, 0};
  NodeGpus without = node;
  without.gpus[0].used = {};
  const NominatedPod high = Nominee("high", 100, Pod({Req(1, 12000)}));
  auto held = HoldNominated(node, &without, {&high});
  EXPECT_EQ(held, std::vector<std::string>{"default/high"});
  EXPECT_EQ(node.gpus[0].used, (DeviceUsage{2, 24000, 0, 0}));
  EXPECT_EQ(without.gpus[0].used, (DeviceUsage{1, 12000, 0, 0}));
  EXPECT_EQ(node.gpus[1].used, (DeviceUsage{1, 10000, 0, 0}));
  // Once the victim is gone, GPU 0 has 4384 MiB left for others.
  EXPECT_TRUE(FitPod(without, Pod({Req(1, 4000)}), {}, Policy(), {}).fits);
  EXPECT_FALSE(FitPod(without, Pod({Req(1, 8000)}), {}, Policy(), {}).fits);
}

TEST(Nominated, ANomineeThatFitsNowhereHoldsNothing) {
  NodeGpus node = Node(1);
  node.gpus[0].used = {1, 12000, 0, 0};
  const NominatedPod high = Nominee("high", 100, Pod({Req(1, 12000)}));
  EXPECT_TRUE(HoldNominated(node, nullptr, {&high}).empty());
  EXPECT_EQ(node.gpus[0].used, (DeviceUsage{1, 12000, 0, 0}));
}

// ---- The verb's wire form -------------------------------------------------------------------

TEST(PreemptApi, ReadsTheMetaFormAndTheFullForm) {
  auto meta = ParseExtenderPreemptionArgs(R"({"Pod":{"metadata":{"name":"p","namespace":"d"}},
    "NodeNameToVictims":null,
    "NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"u1"},{"UID":"u2"}],"NumPDBViolations":1},
                             "n2":{"Pods":null,"NumPDBViolations":0}}})");
  ASSERT_TRUE(meta.ok()) << meta.error().message();
  EXPECT_EQ(meta->pod.metadata.name, "p");
  ASSERT_EQ(meta->victims.size(), 2u);
  ASSERT_EQ(meta->victims["n1"].pods.size(), 2u);
  EXPECT_EQ(meta->victims["n1"].pods[1].uid, "u2");
  EXPECT_EQ(meta->victims["n1"].num_pdb_violations, 1);
  EXPECT_TRUE(meta->victims["n2"].pods.empty());
  // kube-scheduler's node-cache form is read without a document.
  EXPECT_TRUE(ScanExtenderPreemptionArgs(R"({"Pod":{"metadata":{"name":"p","namespace":"d"}},
    "NodeNameToVictims":null,
    "NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"u1"},{"UID":"u2"}],"NumPDBViolations":1},
                             "n2":{"Pods":null,"NumPDBViolations":0}}})"));

  auto full = ParseExtenderPreemptionArgs(R"({"pod":{"metadata":{"name":"p"}},
    "nodeNameToVictims":{"n1":{"pods":[{"metadata":{"name":"v","namespace":"d","uid":"u9"},
                                        "spec":{"priority":-5,"containers":[]}}]}}})");
  ASSERT_TRUE(full.ok()) << full.error().message();
  ASSERT_EQ(full->victims["n1"].pods.size(), 1u);
  const VictimRef& v = full->victims["n1"].pods[0];
  EXPECT_EQ(v.uid, "u9");
  EXPECT_EQ(v.ns, "d");
  EXPECT_EQ(v.name, "v");
  EXPECT_EQ(v.priority, -5);
  EXPECT_FALSE(ScanExtenderPreemptionArgs(R"({"Pod":{"metadata":{"name":"p"}},
    "NodeNameToVictims":{"n1":{"Pods":[{"metadata":{"name":"v","uid":"u9"}}]}}})"));

  auto none = ParseExtenderPreemptionArgs(R"({"Pod":{"metadata":{"name":"p"}}})");
  ASSERT_TRUE(none.ok()) << none.error().message();
  EXPECT_TRUE(none->victims.empty());
}

TEST(PreemptApi, RejectionsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "ExtenderPreemptionArgs: not valid JSON"},
      {"[]", "ExtenderPreemptionArgs: expected a JSON object"},
      {R"({"NodeNameToMetaVictims":{}})", "ExtenderPreemptionArgs: Pod: missing"},
      {R"({"Pod":{},"NodeNameToMetaVictims":[]})",
       "ExtenderPreemptionArgs: NodeNameToMetaVictims: expected an object of node names"},
      {R"({"Pod":{},"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":7}]}}})",
       R"(ExtenderPreemptionArgs: NodeNameToMetaVictims["n1"].Pods[0].UID: expected a string)"},
      {R"({"Pod":{},"NodeNameToMetaVictims":{"n1":{"Pods":[{}]}}})",
       R"(ExtenderPreemptionArgs: NodeNameToMetaVictims["n1"].Pods[0].UID: missing)"},
      {R"({"Pod":{},"NodeNameToMetaVictims":{"n1":{"Pods":{}}}})",
       R"(ExtenderPreemptionArgs: NodeNameToMetaVictims["n1"].Pods: expected an array)"},
      {R"({"Pod":{},"NodeNameToMetaVictims":{"n1":{"NumPDBViolations":"2"}}})",
       R"(ExtenderPreemptionArgs: NodeNameToMetaVictims["n1"].NumPDBViolations: expected an )"
       R"(integer)"},
      {R"({"Pod":{},"NodeNameToVictims":{"n1":{"Pods":[{"spec":{}}]}}})",
       R"(ExtenderPreemptionArgs: NodeNameToVictims["n1"].Pods[0]: neither metadata.uid nor )"
       R"(metadata.name is set)"},
      {R"({"Pod":{},"NodeNameToMetaVictims":{"":{}}})",
       R"(ExtenderPreemptionArgs: NodeNameToMetaVictims[""]: empty node name)"},
  };
  for (const auto& [body, want] : cases) {
    auto r = ParseExtenderPreemptionArgs(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message(), want) << body;
  }
}

// Whether two readings of one body agree on everything ExtenderPreemptionArgs holds.
void ExpectSameArgs(const ExtenderPreemptionArgs& a, const ExtenderPreemptionArgs& b) {
  EXPECT_EQ(a.pod.metadata.name, b.pod.metadata.name);
  EXPECT_EQ(a.pod.metadata.ns, b.pod.metadata.ns);
  EXPECT_EQ(a.pod.metadata.uid, b.pod.metadata.uid);
  EXPECT_EQ(a.pod.metadata.annotations, b.pod.metadata.annotations);
  EXPECT_EQ(a.pod.priority, b.pod.priority);
  EXPECT_EQ(a.pod.containers.size(), b.pod.containers.size());
  ASSERT_EQ(a.victims.size(), b.victims.size());
  for (auto i = a.victims.begin(), j = b.victims.begin(); i != a.victims.end(); ++i, ++j) {
    EXPECT_EQ(i->first, j->first);
    EXPECT_EQ(i->second.num_pdb_violations, j->second.num_pdb_violations);
    ASSERT_EQ(i->second.pods.size(), j->second.pods.size()) << i->first;
    for (size_t k = 0; k < i->second.pods.size(); ++k) {
      const VictimRef& x = i->second.pods[k];
      const VictimRef& y = j->second.pods[k];
      EXPECT_EQ(x.uid, y.uid);
      EXPECT_EQ(x.ns, y.ns);
      EXPECT_EQ(x.name, y.name);
      EXPECT_EQ(x.priority, y.priority);
    }
  }
}

// Bodies near the node-cache form, right and wrong: where the scan answers, the document
// answers the same; the verb's reading answers as the document does, error messages included.
TEST(PreemptApi, TheScanAnswersAsTheDocumentWhereverItAnswers) {
  std::mt19937 rng(31);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto one_of = [&](std::initializer_list<std::string_view> options) {
    return std::string(*(options.begin() + pick(0, int(options.size()) - 1)));
  };
  auto space = [&] { return pick(0, 3) == 0 ? one_of({" ", "\n", "\t ", "\r\n  "}) : ""; };
  // Members joined as an object, in a random order, sometimes one given twice.
  auto object = [&](std::vector<std::string> members) {
    if (!members.empty() && pick(0, 12) == 0) members.push_back(members[0]);
    std::shuffle(members.begin(), members.end(), rng);
    std::string out = "{" + space();
    for (size_t i = 0; i < members.size(); ++i) {
      if (i > 0) out += "," + space();
      out += members[i] + space();
    }
    return out + "}";
  };
  auto member = [&](std::string_view name, std::string_view misspelt, const std::string& value) {
    return "\"" + std::string(pick(0, 15) == 0 ? misspelt : name) + "\"" + space() + ":" + space() +
           value;
  };
  auto meta_pod = [&] {
    if (pick(0, 15) == 0)
      return one_of({R"({})", R"({"UID":7})", R"({"UID":""})", "null", R"({"UID":"u\u0031"})",
                     R"({"UID":"a","UID":"b"})", R"({"UID":"x","extra":1})", R"("u1")"});
    return object({member("UID", "uid", "\"" + one_of({"u1", "u2", "9f0c-11", "u-3/x"}) + "\"")});
  };
  auto node_entry = [&] {
    if (pick(0, 10) == 0) return one_of({"null", "[]", "7", R"({"Pods":{}})"});
    std::vector<std::string> members;
    if (pick(0, 6) != 0) {
      std::string pods = "[";
      for (int i = pick(0, 3); i > 0; --i) pods += meta_pod() + (i > 1 ? "," : "");
      pods += "]";
      members.push_back(member("Pods", "pods", pick(0, 10) == 0 ? "null" : pods));
    }
    if (pick(0, 2) != 0) {
      members.push_back(member("NumPDBViolations", "numPDBViolations",
                               one_of({"0", "2", "-0", "01", "1.5", "1e2", "\"2\"", "null", "-7",
                                       "99999999999999999999", "123456789012345678"})));
    }
    if (pick(0, 15) == 0) members.push_back(member("Extra", "extra", "{}"));
    return object(members);
  };
  auto meta = [&] {
    std::vector<std::string> nodes;
    for (int i = pick(0, 4); i > 0; --i) {
      const std::string name = one_of({"n1", "n2", "node-3", "", "n\\\"4", "n\\u00e9", "ñ"});
      nodes.push_back("\"" + name + "\":" + space() + node_entry());
    }
    return object(nodes);
  };
  auto pod = [&] {
    return one_of(
        {R"({"metadata":{"name":"p","namespace":"d","uid":"u0"},"spec":{"priority":1000}})",
         R"({"metadata":{"name":"p","annotations":{"a":"x\"y\\z","b":"{\"k\":[1,2]}","c":"é"}}})",
         R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":)"
         R"({"nvidia.com/gpu":"1","nvidia.com/gpumem":"2Gi"}}}]}})",
         R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":)"
         R"({"nvidia.com/gpu":"2","nvidia.com/gpumem":"3000"}}}]}})",
         R"({"metadata":{"name":"p","labels":{"x":"]}"}}})", R"([])", R"("p")",
         R"({"metadata":{"name":"p"})", R"({"metadata":{"name":"p"}}})"});
  };
  int scanned = 0, documents_only = 0, errors = 0;
  for (int round = 0; round < 4000; ++round) {
    std::vector<std::string> members;
    if (pick(0, 15) != 0) members.push_back(member("Pod", "pod", pod()));
    if (pick(0, 5) != 0) {
      members.push_back(member("NodeNameToMetaVictims", "nodeNameToMetaVictims",
                               pick(0, 10) == 0 ? one_of({"null", "[]", "{}"}) : meta()));
    }
    if (pick(0, 2) == 0) {
      members.push_back(member(
          "NodeNameToVictims", "nodenametovictims",
          one_of({"null", "null", "{}",
                  R"({"n1":{"Pods":[{"metadata":{"name":"v","namespace":"d","uid":"u9"}}]}})"})));
    }
    if (pick(0, 20) == 0) members.push_back(member("Other", "other", "[1,{\"a\":null}]"));
    std::string body = space() + object(members) + space();
    if (pick(0, 25) == 0) body = body.substr(0, size_t(pick(0, int(body.size()))));
    if (pick(0, 25) == 0) body += one_of({"x", "{}", ",", "\xef\xbb\xbf"});
    SCOPED_TRACE(body);

    const auto scan = ScanExtenderPreemptionArgs(body);
    const auto doc = ParseExtenderPreemptionArgs(body, PreemptionArgsReading::kDocumentOnly);
    const auto verb = ParseExtenderPreemptionArgs(body);
    if (scan) {
      ++scanned;
      ASSERT_TRUE(doc.ok()) << doc.error().message();
      ExpectSameArgs(*scan, *doc);
    } else if (doc.ok()) {
      ++documents_only;
    } else {
      ++errors;
    }
    ASSERT_EQ(verb.ok(), doc.ok());
    if (doc.ok()) {
      ExpectSameArgs(*verb, *doc);
    } else {
      EXPECT_EQ(verb.error().message(), doc.error().message());
    }
  }
  EXPECT_GT(scanned, 400);
  EXPECT_GT(documents_only, 400);
  EXPECT_GT(errors, 400);
}

TEST(PreemptApi, TheResultIsNodeNameToMetaVictims) {
  EXPECT_EQ(EncodeExtenderPreemptionResult({}), R"({"NodeNameToMetaVictims":{}})");
  std::map<std::string, NodeVictims> m;
  m["n\"1"].pods = {{"u1", {}, {}, {}}, {"u2", {}, {}, {}}};
  m["n\"1"].num_pdb_violations = 2;
  m["n2"];
  const std::string text = EncodeExtenderPreemptionResult(m);
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"NodeNameToMetaVictims":{
      "n\"1":{"NumPDBViolations":2,"Pods":[{"UID":"u1"},{"UID":"u2"}]},
      "n2":{"NumPDBViolations":0,"Pods":[]}}})"));
}

}  // namespace
}  // namespace hami::scheduler
