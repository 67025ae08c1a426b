#include "sim/kube/scheduler_standin.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kube/client.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "support/kube_control.h"

namespace hami::sim::kube {
namespace {

using namespace std::chrono_literals;
using hami::kube::control_test::StartServer;
using hami::kube::control_test::WaitUntil;
using nlohmann::json;

// ---- KubeSchedulerConfiguration
// ------------------------------------------------------------------

constexpr char kFullConfig[] = R"(apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
profiles:
- schedulerName: hami-scheduler
- schedulerName: other-scheduler
  plugins: {}
extenders:
- urlPrefix: "https://127.0.0.1:443/"
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  preemptVerb: preempt
  weight: 3
  enableHTTPS: true
  tlsConfig:
    insecure: true
  httpTimeout: 1m30s
  nodeCacheCapable: true
  ignorable: true
  managedResources:
  - name: nvidia.com/gpu
    ignoredByScheduler: true
  - name: nvidia.com/gpumem
)";

TEST(SchedulerConfig, ReadsEveryExtenderField) {
  auto c = ParseSchedulerConfig(kFullConfig, "/etc/s.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->source, "KubeSchedulerConfiguration /etc/s.yaml");
  EXPECT_EQ(c->scheduler_names, (std::vector<std::string>{"hami-scheduler", "other-scheduler"}));
  EXPECT_EQ(c->percentage_of_nodes_to_score, 30);
  EXPECT_EQ(c->pod_initial_backoff, 2s);
  EXPECT_EQ(c->pod_max_backoff, 20s);
  ASSERT_EQ(c->extenders.size(), 1u);
  const ExtenderConfig& e = c->extenders[0];
  EXPECT_EQ(e.url_prefix, "https://127.0.0.1:443/");
  EXPECT_EQ(e.filter_verb, "filter");
  EXPECT_EQ(e.prioritize_verb, "prioritize");
  EXPECT_EQ(e.bind_verb, "bind");
  EXPECT_EQ(e.preempt_verb, "preempt");
  EXPECT_EQ(e.weight, 3);
  EXPECT_TRUE(e.enable_https);
  EXPECT_TRUE(e.tls.insecure);
  EXPECT_EQ(e.http_timeout, 90s);
  EXPECT_TRUE(e.node_cache_capable);
  EXPECT_TRUE(e.ignorable);
  ASSERT_EQ(e.managed_resources.size(), 2u);
  EXPECT_EQ(e.managed_resources[0].name, "nvidia.com/gpu");
  EXPECT_TRUE(e.managed_resources[0].ignored_by_scheduler);
  EXPECT_EQ(e.managed_resources[1].name, "nvidia.com/gpumem");
  EXPECT_FALSE(e.managed_resources[1].ignored_by_scheduler);
}

TEST(SchedulerConfig, DefaultsAsKubeScheduler) {
  auto c = ParseSchedulerConfig(R"({"apiVersion":"kubescheduler.config.k8s.io/v1",
      "kind":"KubeSchedulerConfiguration","extenders":[{"urlPrefix":"http://x:1","httpTimeout":"0"}]})",
                                "s.json");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE(c->scheduler_names.empty());
  EXPECT_EQ(c->percentage_of_nodes_to_score, 0);
  EXPECT_EQ(c->pod_initial_backoff, 1s);
  EXPECT_EQ(c->pod_max_backoff, 10s);
  ASSERT_EQ(c->extenders.size(), 1u);
  EXPECT_EQ(c->extenders[0].http_timeout, 5s);
  EXPECT_EQ(c->extenders[0].weight, 0);
  EXPECT_FALSE(c->extenders[0].node_cache_capable);

  auto unnamed = ParseSchedulerConfig(
      "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
      "profiles:\n- plugins: {}\n",
      "s.yaml");
  ASSERT_TRUE(unnamed.ok()) << unnamed.error().message();
  EXPECT_EQ(unnamed->scheduler_names, std::vector<std::string>{"default-scheduler"});
}

TEST(SchedulerConfig, RejectsEachBadFieldNamingIt) {
  const std::string head =
      "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
  struct Case {
    std::string yaml;
    std::string message;
  };
  const Case cases[] = {
      {"- a\n", "KubeSchedulerConfiguration f.yaml: not a YAML mapping"},
      {"kind: KubeSchedulerConfiguration\n", "apiVersion: missing"},
      {"apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
       "apiVersion: 'kubescheduler.config.k8s.io/v1beta3' (want kubescheduler.config.k8s.io/v1)"},
      {"apiVersion: kubescheduler.config.k8s.io/v1\nkind: Policy\n",
       "kind: 'Policy' (want KubeSchedulerConfiguration)"},
      {head + "extender: []\n", "extender: unknown field"},
      {head + "percentageOfNodesToScore: 101\n",
       "percentageOfNodesToScore: must be between 0 and 100 (got 101)"},
      {head + "percentageOfNodesToScore: many\n",
       "percentageOfNodesToScore: not an integer: 'many'"},
      {head + "podInitialBackoffSeconds: 0\n",
       "podInitialBackoffSeconds: must be positive (got 0)"},
      {head + "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 4\n",
       "podMaxBackoffSeconds: must be at least podInitialBackoffSeconds (got 4)"},
      {head + "profiles: {}\n", "profiles: not a list"},
      {head + "profiles:\n- schedulerName: a\n- schedulerName: a\n",
       "profiles[1].schedulerName: 'a' is used twice"},
      {head + "extenders: {}\n", "extenders: not a list"},
      {head + "extenders:\n- filterVerb: f\n", "extenders[0].urlPrefix: missing"},
      {head + "extenders:\n- urlPrefix: x:1\n",
       "extenders[0].urlPrefix: 'x:1' is not an http:// or https:// URL"},
      {head + "extenders:\n- urlPrefix: http://x\n  filterverb: f\n",
       "extenders[0].filterverb: unknown field"},
      {head + "extenders:\n- urlPrefix: http://x\n  prioritizeVerb: p\n",
       "extenders[0].weight: must be positive when prioritizeVerb is set (got 0)"},
      {head + "extenders:\n- urlPrefix: http://x\n  prioritizeVerb: p\n  weight: -2\n",
       "extenders[0].weight: must be positive when prioritizeVerb is set (got -2)"},
      {head + "extenders:\n- urlPrefix: http://x\n  weight: heavy\n",
       "extenders[0].weight: not an integer: 'heavy'"},
      {head + "extenders:\n- urlPrefix: http://x\n  nodeCacheCapable: maybe\n",
       "extenders[0].nodeCacheCapable: not a boolean: 'maybe'"},
      {head + "extenders:\n- urlPrefix: http://x\n  httpTimeout: 30\n",
       "extenders[0].httpTimeout: duration '30': missing unit"},
      {head + "extenders:\n- urlPrefix: http://x\n  httpTimeout: -1s\n",
       "extenders[0].httpTimeout: '-1s': must not be negative"},
      {head + "extenders:\n- urlPrefix: http://x\n  httpTimeout: [1]\n",
       "extenders[0].httpTimeout: not a duration string"},
      {head + "extenders:\n- urlPrefix: http://x\n  bindVerb: b\n- urlPrefix: http://y\n"
              "  bindVerb: b\n",
       "extenders[1].bindVerb: only one extender can implement bind"},
      {head + "extenders:\n- urlPrefix: http://x\n  managedResources:\n  - name: a/b\n"
              "- urlPrefix: http://y\n  managedResources:\n  - name: a/b\n",
       "extenders[1].managedResources[0].name: 'a/b': duplicate extender managed resource name"},
      {head +
           "extenders:\n- urlPrefix: http://x\n  managedResources:\n  - ignoredByScheduler: true\n",
       "extenders[0].managedResources[0].name: missing"},
      {head + "extenders:\n- urlPrefix: http://x\n  managedResources:\n  - name: a\n    size: 1\n",
       "extenders[0].managedResources[0].size: unknown field"},
      {head + "extenders:\n- urlPrefix: http://x\n  tlsConfig:\n    insecure: true\n    x: 1\n",
       "extenders[0].tlsConfig.x: unknown field"},
      {head + "extenders:\n- urlPrefix: http://x\n  tlsConfig:\n    caData: '%%%%'\n",
       "extenders[0].tlsConfig.caData: not base64"},
      {head + "extenders:\n- urlPrefix: http://x\n  tlsConfig:\n    caData: aGVsbG8=\n",
       "extenders[0].tlsConfig.caData: not PEM (no -----BEGIN line)"},
      {head + "extenders:\n- urlPrefix: http://x\n  tlsConfig:\n    caFile: /nonexistent/ca.pem\n",
       "extenders[0].tlsConfig.caFile: "},
      {head + "extenders:\n- urlPrefix: http://x\n  tlsConfig:\n    serverName: e.svc\n",
       "extenders[0].tlsConfig.serverName: not supported by the stand-in"},
      {head + "extenders: [\n", "KubeSchedulerConfiguration f.yaml: YAML: "},
  };
  for (const Case& c : cases) {
    auto r = ParseSchedulerConfig(c.yaml, "f.yaml");
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.error().message().find(c.message), std::string::npos)
        << "input:\n"
        << c.yaml << "\nmessage: " << r.error().message();
    EXPECT_EQ(r.error().message().rfind("KubeSchedulerConfiguration f.yaml: ", 0), 0u)
        << r.error().message();
  }
}

TEST(SchedulerConfig, LoadNamesAMissingFile) {
  auto r = LoadSchedulerConfig("/nonexistent/scheduler.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.error().message().rfind("KubeSchedulerConfiguration /nonexistent/scheduler.yaml: ", 0), 0u)
      << r.error().message();
}

TEST(GoDuration, ReadsGoForms) {
  struct Case {
    const char* text;
    int64_t nanos;
  };
  const Case cases[] = {
      {"0", 0},
      {"5s", 5'000'000'000},
      {"1m30s", 90'000'000'000},
      {"1.5h", 5'400'000'000'000},
      {"300ms", 300'000'000},
      {"10us", 10'000},
      {"10\xc2\xb5s", 10'000},
      {"7ns", 7},
      {".5s", 500'000'000},
      {"2.s", 2'000'000'000},
      {"-1.5s", -1'500'000'000},
      {"+2m", 120'000'000'000},
      {"1h2m3s4ms5us6ns", 3'723'004'005'006},
  };
  for (const Case& c : cases) {
    auto d = ParseGoDuration(c.text, "t");
    ASSERT_TRUE(d.ok()) << c.text << ": " << d.error().message();
    EXPECT_EQ(d->count(), c.nanos) << c.text;
  }
}

TEST(GoDuration, RejectsWhatGoRejects) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"", "t: duration '': empty"},
      {"-", "t: duration '-': empty"},
      {"30", "t: duration '30': missing unit"},
      {"1d", "t: duration '1d': unknown unit 'd'"},
      {"s", "t: duration 's': expected a number"},
      {".s", "t: duration '.s': expected a number"},
      {"1s ", "t: duration '1s ': unknown unit 's '"},
      {"3000000h", "t: duration '3000000h': out of range"},
      {"99999999999999999999ns", "out of range"},
  };
  for (const Case& c : cases) {
    auto d = ParseGoDuration(c.text, "t");
    ASSERT_FALSE(d.ok()) << c.text;
    EXPECT_NE(d.error().message().find(c.message), std::string::npos) << d.error().message();
  }
}

// ---- The extender protocol
// -------------------------------------------------------------------------

TEST(ExtenderProtocol, ArgsCarryNodeNamesOnlyWhenNodeCacheCapable) {
  json pod = {{"metadata", {{"name", "p"}}}};
  std::vector<std::shared_ptr<const json>> nodes = {
      std::make_shared<const json>(json{{"metadata", {{"name", "n1"}}}})};
  std::vector<std::string> names = {"n1"};
  json cached = ExtenderArgsJson(pod, {}, names, true);
  EXPECT_EQ(cached, json::parse(R"({"Pod":{"metadata":{"name":"p"}},"Nodes":null,
                                    "NodeNames":["n1"]})"));
  json full = ExtenderArgsJson(pod, nodes, {}, false);
  EXPECT_EQ(full, json::parse(R"({"Pod":{"metadata":{"name":"p"}},"NodeNames":null,
      "Nodes":{"metadata":{},"items":[{"metadata":{"name":"n1"}}]}})"));
  EXPECT_EQ(ExtenderBindingArgsJson("p", "ns", "u-1", "n1"),
            json::parse(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u-1","Node":"n1"})"));
}

TEST(ExtenderProtocol, ReadsAnswersCaseInsensitivelyAsGoDoes) {
  auto r = ParseExtenderFilterResult(json::parse(R"({"nodenames":["a","b"],
      "failedNodes":{"c":"too small"},"FAILEDANDUNRESOLVABLENODES":{"d":"gone"},"error":"",
      "Nodes":null,"extra":1})"));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->has_node_names);
  EXPECT_EQ(r->node_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(r->has_nodes);
  EXPECT_EQ(r->failed_nodes, (std::map<std::string, std::string>{{"c", "too small"}}));
  EXPECT_EQ(r->failed_and_unresolvable_nodes, (std::map<std::string, std::string>{{"d", "gone"}}));
  EXPECT_EQ(r->error, "");

  auto nodes = ParseExtenderFilterResult(
      json::parse(R"({"Nodes":{"items":[{"metadata":{"name":"x"}}]},"NodeNames":null})"));
  ASSERT_TRUE(nodes.ok()) << nodes.error().message();
  EXPECT_FALSE(nodes->has_node_names);
  EXPECT_TRUE(nodes->has_nodes);
  EXPECT_EQ(nodes->nodes, std::vector<std::string>{"x"});

  auto list =
      ParseHostPriorityList(json::parse(R"([{"Host":"a","Score":7},{"host":"b","score":-1}])"));
  ASSERT_TRUE(list.ok()) << list.error().message();
  EXPECT_EQ(*list, (std::vector<HostPriority>{{"a", 7}, {"b", -1}}));
  auto empty = ParseHostPriorityList(json(nullptr));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  auto bind = ParseExtenderBindingResultError(json::parse(R"({"Error":"node lock held"})"));
  ASSERT_TRUE(bind.ok());
  EXPECT_EQ(*bind, "node lock held");
}

TEST(ExtenderProtocol, RejectsMistypedMembersNamingThem) {
  struct Case {
    const char* body;
    const char* message;
  };
  const Case filter_cases[] = {
      {"[]", "ExtenderFilterResult: not a JSON object"},
      {R"({"NodeNames":"a"})", "NodeNames: not a list"},
      {R"({"NodeNames":["a",1]})", "NodeNames[1]: not a string"},
      {R"({"Nodes":[]})", "Nodes: not a NodeList object"},
      {R"({"Nodes":{"items":{}}})", "Nodes.items: not a list"},
      {R"({"Nodes":{"items":[{"metadata":{}}]}})", "Nodes.items[0].metadata.name: missing"},
      {R"({"FailedNodes":["a"]})", "FailedNodes: not an object"},
      {R"({"FailedNodes":{"n1":3}})", "FailedNodes[\"n1\"]: not a string"},
      {R"({"Error":5})", "Error: not a string"},
  };
  for (const Case& c : filter_cases) {
    auto r = ParseExtenderFilterResult(json::parse(c.body));
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.error().message(), c.message);
  }
  const Case priority_cases[] = {
      {"{}", "HostPriorityList: not a list"},
      {"[1]", "HostPriorityList[0]: not an object"},
      {R"([{"Host":1}])", "HostPriorityList[0].Host: not a string"},
      {R"([{"Host":"a","Score":"9"}])", "HostPriorityList[0].Score: not an integer"},
      {R"([{"Host":"a","Score":1.5}])", "HostPriorityList[0].Score: not an integer"},
      {R"([{"Host":"a","Score":18446744073709551615}])",
       "HostPriorityList[0].Score: out of int64 range"},
  };
  for (const Case& c : priority_cases) {
    auto r = ParseHostPriorityList(json::parse(c.body));
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.error().message(), c.message);
  }
}

TEST(ExtenderConfigTest, IsInterestedInManagedResourcesOfAnyContainer) {
  ExtenderConfig e;
  json pod = json::parse(R"({"spec":{"initContainers":[{"resources":{"requests":{"a/x":"1"}}}],
      "containers":[{"resources":{"limits":{"cpu":"1"}}}]}})");
  EXPECT_TRUE(e.IsInterested(pod));  // no managed resources: every pod
  e.managed_resources = {{"nvidia.com/gpu", false}};
  EXPECT_FALSE(e.IsInterested(pod));
  e.managed_resources.push_back({"a/x", false});
  EXPECT_TRUE(e.IsInterested(pod));  // an init container's request
  e.managed_resources = {{"cpu", false}};
  EXPECT_TRUE(e.IsInterested(pod));  // a container's limit
}

// ---- Decisions
// ------------------------------------------------------------------------------------

TEST(Decisions, NumFeasibleNodesToFindFollowsKubeScheduler) {
  EXPECT_EQ(NumFeasibleNodesToFind(0, 0), 0);
  EXPECT_EQ(NumFeasibleNodesToFind(0, 99), 99);
  EXPECT_EQ(NumFeasibleNodesToFind(10, 99), 99);
  EXPECT_EQ(NumFeasibleNodesToFind(0, 100), 100);
  EXPECT_EQ(NumFeasibleNodesToFind(0, 1000), 420);   // 50 - 1000/125 = 42 percent
  EXPECT_EQ(NumFeasibleNodesToFind(0, 5000), 500);   // 50 - 40 = 10 percent
  EXPECT_EQ(NumFeasibleNodesToFind(0, 10000), 500);  // at least 5 percent
  EXPECT_EQ(NumFeasibleNodesToFind(50, 1000), 500);
  EXPECT_EQ(NumFeasibleNodesToFind(5, 1000), 100);  // at least 100
  EXPECT_EQ(NumFeasibleNodesToFind(100, 1000), 1000);
}

TEST(Decisions, LeastAllocatedScoresFreePodSlots) {
  EXPECT_EQ(LeastAllocatedScore(0, 110), 100);
  EXPECT_EQ(LeastAllocatedScore(11, 110), 90);
  EXPECT_EQ(LeastAllocatedScore(110, 110), 0);
  EXPECT_EQ(LeastAllocatedScore(200, 110), 0);
  EXPECT_EQ(LeastAllocatedScore(0, 0), 0);
}

TEST(Decisions, CombineScoresAddsExtenderScoreTimesWeightTimesTen) {
  std::vector<std::string> nodes = {"a", "b", "c"};
  std::vector<int64_t> own = {100, 90, 50};
  std::vector<WeightedPriorities> ext = {
      {{{"a", 2}, {"b", 3}, {"zz", 10}}, 2},  // a host that was not offered counts nowhere
      {{{"c", 10}}, 1},
  };
  EXPECT_EQ(CombineScores(nodes, own, ext), (std::vector<int64_t>{140, 150, 150}));
  EXPECT_EQ(CombineScores(nodes, own, {}), own);
}

TEST(Decisions, SelectHostTakesTheHighestAndBreaksTiesAtRandom) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> totals = {5, 9, 3};
  EXPECT_EQ(SelectHost(totals, rng), 1u);
  std::vector<int64_t> tied = {9, 1, 9, 9};
  std::set<size_t> picked;
  for (int i = 0; i < 200; ++i) picked.insert(SelectHost(tied, rng));
  EXPECT_EQ(picked, (std::set<size_t>{0, 2, 3}));
}

TEST(Decisions, FitErrorMessageCountsReasonsInSortedOrder) {
  std::map<std::string, std::string> reasons = {{"n1", "node(s) were unschedulable"},
                                                {"n2", "insufficient GPU memory"},
                                                {"n3", "insufficient GPU memory"}};
  EXPECT_EQ(FitErrorMessage(4, reasons),
            "0/4 nodes are available: 1 node(s) were unschedulable, 2 insufficient GPU memory.");
  EXPECT_EQ(FitErrorMessage(2, {}), "0/2 nodes are available.");
  EXPECT_EQ(FitErrorMessage(0, {}), "no nodes available to schedule pods");
}

TEST(Preemption, ArgsCarryFullPodsOrUidsAndTheResultIsRead) {
  auto victim = std::make_shared<const json>(
      json{{"metadata", {{"name", "v"}, {"namespace", "default"}, {"uid", "u1"}}}});
  std::map<std::string, std::vector<std::shared_ptr<const json>>> victims = {{"n1", {victim}}};
  json pod = {{"metadata", {{"name", "p"}}}};
  json meta = ExtenderPreemptionArgsJson(pod, victims, true);
  EXPECT_TRUE(meta["NodeNameToVictims"].is_null());
  EXPECT_EQ(meta["NodeNameToMetaVictims"],
            (json{{"n1", {{"Pods", json::array({{{"UID", "u1"}}})}, {"NumPDBViolations", 0}}}}));
  json full = ExtenderPreemptionArgsJson(pod, victims, false);
  EXPECT_TRUE(full["NodeNameToMetaVictims"].is_null());
  EXPECT_EQ(full["NodeNameToVictims"]["n1"]["Pods"][0], *victim);
  EXPECT_EQ(full["Pod"], pod);

  auto r = ParseExtenderPreemptionResult(json::parse(
      R"({"nodenametometavictims":{"n1":{"pods":[{"uid":"u1"}],"numPDBViolations":2},"n2":null}})"));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ((*r)["n1"].uids, std::vector<std::string>{"u1"});
  EXPECT_EQ((*r)["n1"].num_pdb_violations, 2);
  EXPECT_TRUE((*r)["n2"].uids.empty());
  EXPECT_TRUE(ParseExtenderPreemptionResult(json::object())->empty());
  auto bad = ParseExtenderPreemptionResult(
      json::parse(R"({"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":1}]}}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), R"(NodeNameToMetaVictims["n1"].Pods[0].UID: not a string)");
}

TEST(Preemption, PriorityAndCandidateCountFollowKubeScheduler) {
  EXPECT_EQ(PodPriority(json{{"spec", {{"priority", 1000}}}}), 1000);
  EXPECT_EQ(PodPriority(json{{"spec", {{"priority", -7}}}}), -7);
  EXPECT_EQ(PodPriority(json{{"spec", json::object()}}), 0);
  EXPECT_EQ(PodPriority(json{{"spec", {{"priority", "high"}}}}), 0);
  EXPECT_EQ(NumPreemptionCandidates(5), 5);
  EXPECT_EQ(NumPreemptionCandidates(500), 100);
  EXPECT_EQ(NumPreemptionCandidates(5000), 500);
}

TEST(Preemption, PicksTheNodeAsPickOneNodeForPreemptionDoes) {
  // Fewest PDB violations first.
  std::vector<PreemptionCandidate> c = {{"a", {1}, 1}, {"b", {9, 9}, 0}};
  EXPECT_EQ(PickPreemptionCandidate(c), 1u);
  // Then the lowest highest-priority victim.
  c = {{"a", {5}, 0}, {"b", {1, 2, 3}, 0}};
  EXPECT_EQ(PickPreemptionCandidate(c), 1u);
  // Then the smallest sum, where each victim counts 2^31 more: fewer victims win.
  c = {{"a", {3, 3}, 0}, {"b", {3}, 0}};
  EXPECT_EQ(PickPreemptionCandidate(c), 1u);
  c = {{"a", {-5, 3}, 0}, {"b", {-1, 3}, 0}};
  EXPECT_EQ(PickPreemptionCandidate(c), 0u);
  // Then the first.
  c = {{"a", {3}, 0}, {"b", {3}, 0}};
  EXPECT_EQ(PickPreemptionCandidate(c), 0u);
}

// ---- Against the simulated API server and a fake extender
// ------------------------------------------

// An extender that records every call and answers with `answer(path, body)`.
class FakeExtender {
 public:
  struct Call {
    std::string path;
    json body;
  };
  using Answer = std::function<json(const std::string& path, const json& body)>;

  explicit FakeExtender(Answer answer) : answer_(std::move(answer)) {
    for (const char* path : {"/filter", "/prioritize", "/bind", "/preempt"}) {
      server_.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
        json body = json::parse(req.body, nullptr, false);
        {
          std::lock_guard lock(mu_);
          calls_.push_back({req.path, body});
          content_types_.insert(req.get_header_value("Content-Type"));
        }
        cv_.notify_all();
        res.set_content(answer_(req.path, body).dump(), "application/json");
      });
    }
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  }
  ~FakeExtender() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  bool running() const { return port_ > 0 && server_.is_running(); }
  std::vector<Call> calls(const std::string& path = {}) {
    std::lock_guard lock(mu_);
    std::vector<Call> out;
    for (const Call& c : calls_) {
      if (path.empty() || c.path == path) out.push_back(c);
    }
    return out;
  }
  std::set<std::string> content_types() {
    std::lock_guard lock(mu_);
    return content_types_;
  }

 private:
  Answer answer_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call> calls_;
  std::set<std::string> content_types_;
};

json Node(const std::string& name, bool ready, bool unschedulable, bool gpu_label) {
  json node = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", name}, {"labels", json::object()}}},
      {"spec", {{"unschedulable", unschedulable}}},
      {"status",
       {{"allocatable", {{"pods", "110"}}},
        {"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
  if (gpu_label) node["metadata"]["labels"]["gpu"] = "yes";
  return node;
}

json PendingPod(const std::string& name, const std::string& scheduler = "hami-scheduler",
                const std::string& resource = "nvidia.com/gpu") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"schedulerName", scheduler},
            {"nodeSelector", {{"gpu", "yes"}}},
            {"containers", json::array({{{"name", "c"},
                                         {"image", "busybox"},
                                         {"resources", {{"limits", {{resource, "1"}}}}}}})}}}};
}

json BoundPod(const std::string& name, const std::string& node) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"nodeName", node}, {"containers", json::array({{{"name", "c"}, {"image", "i"}}})}}},
          {"status", {{"phase", "Running"}}}};
}

std::set<std::string> NamesOf(const json& list) {
  std::set<std::string> out;
  if (!list.is_array()) return out;
  for (const json& n : list)
    out.insert(n.is_string() ? n.get<std::string>() : n["metadata"]["name"].get<std::string>());
  return out;
}

// A filter that answers only when the test lets it (or after 20 s).
class Gate {
 public:
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 20s, [&] { return open_; });
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class StandinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
    hami::kube::ClientOptions o;
    o.qps = 0;
    o.max_retries = 1;
    o.retry_base = 10ms;
    client_ = hami::kube::control_test::ConnectTo(server_->url(), "scheduler_standin_test", o);
    ASSERT_NE(client_, nullptr);
  }

  // The stand-in goes first: its kept-alive connections would hold the extenders' servers.
  void TearDown() override {
    standin_.reset();
    gate_.Open();
    extenders_.clear();
  }

  FakeExtender& AddExtender(FakeExtender::Answer answer) {
    extenders_.push_back(std::make_unique<FakeExtender>(std::move(answer)));
    return *extenders_.back();
  }

  // Nodes: n1, n2 (11 pods on it), n6 fit the own filter; n3 is unschedulable, n4 not ready,
  // n5 lacks the pod's selector label.
  void SeedCluster() {
    for (const json& n : {Node("n1", true, false, true), Node("n2", true, false, true),
                          Node("n3", true, true, true), Node("n4", false, false, true),
                          Node("n5", true, false, false), Node("n6", true, false, true)}) {
      ASSERT_TRUE(server_->CreateObject(hami::kube::kNodes, n).ok());
    }
    for (int i = 0; i < 11; ++i) {
      ASSERT_TRUE(
          server_->CreateObject(hami::kube::kPods, BoundPod("busy-" + std::to_string(i), "n2"))
              .ok());
    }
  }

  std::string Config(const std::string& extender_yaml) {
    return "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
           "profiles:\n- schedulerName: hami-scheduler\nextenders:\n" +
           extender_yaml;
  }

  void StartStandin(const std::string& config_yaml, StandinOptions options = {}) {
    auto config = ParseSchedulerConfig(config_yaml, "test");
    ASSERT_TRUE(config.ok()) << config.error().message();
    options.seed = 1;
    if (options.initial_backoff.count() == 0) options.initial_backoff = 10ms;
    if (options.max_backoff.count() == 0) options.max_backoff = 20ms;
    auto s = SchedulerStandin::Create(*client_, std::move(*config), options);
    ASSERT_TRUE(s.ok()) << s.error().message();
    standin_ = std::move(*s);
    standin_->set_observer([this](const ScheduleAttempt& a) {
      std::lock_guard lock(mu_);
      attempts_.push_back(a);
    });
    standin_->Start();
    ASSERT_TRUE(standin_->WaitForSync(std::chrono::steady_clock::now() + 10s));
  }

  std::vector<ScheduleAttempt> attempts() {
    std::lock_guard lock(mu_);
    return attempts_;
  }

  std::string NodeOf(const std::string& pod) {
    auto p = server_->GetObject(hami::kube::kPods, "default", pod);
    if (!p.ok()) return "";
    return (*p)["spec"].value("nodeName", "");
  }

  bool WaitBound(const std::string& pod) {
    return WaitUntil([&] { return !NodeOf(pod).empty(); }, 20s);
  }

  // The events about `pod` with `reason`.
  std::vector<json> Events(const std::string& pod, const std::string& reason) {
    std::vector<json> out;
    for (const json& e : server_->ListObjects(hami::kube::kEvents, "default")) {
      if (e["involvedObject"].value("name", "") == pod && e.value("reason", "") == reason) {
        out.push_back(e);
      }
    }
    return out;
  }

  json PodScheduledCondition(const std::string& pod) {
    auto p = server_->GetObject(hami::kube::kPods, "default", pod);
    if (!p.ok()) return nullptr;
    for (const json& c : (*p)["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "PodScheduled") return c;
    }
    return nullptr;
  }

  // Binds through the API server, as an extender's bind does.
  json BindAsExtender(const json& args) {
    json binding = {{"apiVersion", "v1"},
                    {"kind", "Binding"},
                    {"metadata", {{"name", args["PodName"]}, {"namespace", args["PodNamespace"]}}},
                    {"target", {{"kind", "Node"}, {"name", args["Node"]}}}};
    auto r = client_->CreateSubresource(hami::kube::kPods, args["PodNamespace"].get<std::string>(),
                                        args["PodName"].get<std::string>(), "binding", binding);
    return {{"Error", r.ok() ? "" : r.error().message()}};
  }

  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<hami::kube::Client> client_;
  Gate gate_;  // slow extenders wait on it
  std::vector<std::unique_ptr<FakeExtender>> extenders_;
  std::unique_ptr<SchedulerStandin> standin_;
  std::mutex mu_;
  std::vector<ScheduleAttempt> attempts_;
};

TEST_F(StandinTest, FiltersPrioritizesAndBindsThroughTheExtenderCombiningScores) {
  SeedCluster();
  FakeExtender& ext = AddExtender([this](const std::string& path, const json& body) -> json {
    if (path == "/filter") {
      return {{"NodeNames", {"n1", "n2"}},
              {"FailedNodes", {{"n6", "insufficient nvidia.com/gpumem"}}},
              {"Error", ""}};
    }
    if (path == "/prioritize") {
      return json::array({{{"Host", "n1"}, {"Score", 2}}, {{"Host", "n2"}, {"Score", 3}}});
    }
    return BindAsExtender(body);
  });
  ASSERT_TRUE(ext.running());
  StartStandin(Config("- urlPrefix: " + ext.url() +
                      "\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  bindVerb: bind\n"
                      "  weight: 2\n  nodeCacheCapable: true\n  managedResources:\n"
                      "  - name: nvidia.com/gpu\n    ignoredByScheduler: true\n"));
  auto created = server_->CreateObject(hami::kube::kPods, PendingPod("gpu-pod"));
  ASSERT_TRUE(created.ok());
  const std::string uid = (*created)["metadata"]["uid"];

  ASSERT_TRUE(WaitBound("gpu-pod"));
  EXPECT_EQ(NodeOf("gpu-pod"), "n2");

  auto filters = ext.calls("/filter");
  ASSERT_EQ(filters.size(), 1u);
  const json& fb = filters[0].body;
  EXPECT_EQ(fb["Pod"]["metadata"]["name"], "gpu-pod");
  EXPECT_EQ(fb["Pod"]["metadata"]["uid"], uid);
  EXPECT_TRUE(fb.contains("Nodes") && fb["Nodes"].is_null()) << fb.dump();
  EXPECT_EQ(NamesOf(fb["NodeNames"]), (std::set<std::string>{"n1", "n2", "n6"}));

  auto prioritizes = ext.calls("/prioritize");
  ASSERT_EQ(prioritizes.size(), 1u);
  EXPECT_EQ(NamesOf(prioritizes[0].body["NodeNames"]), (std::set<std::string>{"n1", "n2"}));
  EXPECT_TRUE(prioritizes[0].body["Nodes"].is_null());

  auto binds = ext.calls("/bind");
  ASSERT_EQ(binds.size(), 1u);
  EXPECT_EQ(
      binds[0].body,
      (json{{"PodName", "gpu-pod"}, {"PodNamespace", "default"}, {"PodUID", uid}, {"Node", "n2"}}));
  EXPECT_EQ(ext.content_types(), std::set<std::string>{"application/json"});

  // Own scores: n1 100 (no pods), n2 90 (11 of 110); extender 2 and 3, weight 2, times 10.
  ASSERT_TRUE(WaitUntil([&] { return !attempts().empty(); }, 10s));
  auto a = attempts();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].outcome, ScheduleAttempt::Outcome::kScheduled);
  EXPECT_EQ(a[0].node, "n2");
  ASSERT_EQ(a[0].feasible.size(), 2u);
  for (size_t i = 0; i < a[0].feasible.size(); ++i) {
    EXPECT_EQ(a[0].totals[i], a[0].feasible[i] == "n1" ? 140 : 150) << a[0].feasible[i];
  }
  ASSERT_TRUE(WaitUntil([&] { return !Events("gpu-pod", "Scheduled").empty(); }, 10s));
  EXPECT_EQ(Events("gpu-pod", "Scheduled")[0]["message"],
            "Successfully assigned default/gpu-pod to n2");
  EXPECT_EQ(standin_->stats().scheduled, 1u);
}

TEST_F(StandinTest, SendsWholeNodesWithoutNodeCacheAndBindsItselfWithoutBindVerb) {
  SeedCluster();
  FakeExtender& ext = AddExtender([](const std::string& path, const json& body) -> json {
    if (path == "/filter") {
      json items = json::array();
      for (const json& n : body["Nodes"]["items"]) {
        if (n["metadata"]["name"] == "n6") items.push_back(n);
      }
      return {{"Nodes", {{"items", items}}}, {"NodeNames", nullptr}};
    }
    return json::array();
  });
  ASSERT_TRUE(ext.running());
  StartStandin(Config("- urlPrefix: " + ext.url() +
                      "/\n  filterVerb: filter\n"
                      "  prioritizeVerb: prioritize\n  weight: 1\n"));
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PendingPod("whole")).ok());
  ASSERT_TRUE(WaitBound("whole"));
  EXPECT_EQ(NodeOf("whole"), "n6");

  auto filters = ext.calls("/filter");
  ASSERT_EQ(filters.size(), 1u);
  const json& fb = filters[0].body;
  EXPECT_TRUE(fb["NodeNames"].is_null());
  EXPECT_EQ(NamesOf(fb["Nodes"]["items"]), (std::set<std::string>{"n1", "n2", "n6"}));
  EXPECT_EQ(fb["Nodes"]["items"][0]["status"]["allocatable"]["pods"], "110");
  // One feasible node: chosen without prioritizing, as kube-scheduler does.
  EXPECT_TRUE(ext.calls("/prioritize").empty());
  EXPECT_TRUE(ext.calls("/bind").empty());
}

TEST_F(StandinTest, UnschedulablePodGetsEventConditionAndIsRetriedUntilItFits) {
  SeedCluster();
  auto fits = std::make_shared<std::atomic<bool>>(false);
  FakeExtender& ext = AddExtender([this, fits](const std::string& path, const json& body) -> json {
    if (path == "/filter") {
      if (*fits) return {{"NodeNames", {"n1"}}};
      return {
          {"NodeNames", json::array()},
          {"FailedNodes",
           {{"n1", "insufficient nvidia.com/gpumem"}, {"n2", "insufficient nvidia.com/gpumem"}}},
          {"FailedAndUnresolvableNodes", {{"n6", "no GPU on the node"}}}};
    }
    if (path == "/bind") return BindAsExtender(body);
    return json::array();
  });
  ASSERT_TRUE(ext.running());
  StartStandin(Config("- urlPrefix: " + ext.url() +
                      "\n  filterVerb: filter\n  bindVerb: bind\n  nodeCacheCapable: true\n"));
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PendingPod("big")).ok());

  const std::string want =
      "0/6 nodes are available: 1 no GPU on the node, 1 node(s) didn't match Pod's node "
      "affinity/selector, 1 node(s) were not ready, 1 node(s) were unschedulable, 2 insufficient "
      "nvidia.com/gpumem. preemption: 0/6 nodes are available: 2 No preemption victims found for "
      "incoming pod, 4 Preemption is not helpful for scheduling.";
  ASSERT_TRUE(WaitUntil([&] { return !Events("big", "FailedScheduling").empty(); }, 10s));
  json event = Events("big", "FailedScheduling")[0];
  EXPECT_EQ(event["message"], want);
  EXPECT_EQ(event["type"], "Warning");
  ASSERT_TRUE(WaitUntil([&] { return !PodScheduledCondition("big").is_null(); }, 10s));
  json cond = PodScheduledCondition("big");
  EXPECT_EQ(cond["status"], "False");
  EXPECT_EQ(cond["reason"], "Unschedulable");
  EXPECT_EQ(cond["message"], want);

  // Retried with backoff: more filter calls come, then the pod fits once the extender agrees.
  ASSERT_TRUE(WaitUntil([&] { return ext.calls("/filter").size() >= 3; }, 10s));
  EXPECT_TRUE(NodeOf("big").empty());
  *fits = true;
  ASSERT_TRUE(WaitBound("big"));
  EXPECT_EQ(NodeOf("big"), "n1");
  EXPECT_GE(standin_->stats().unschedulable, 2u);
}

TEST_F(StandinTest, ExtenderErrorIsASchedulerError) {
  SeedCluster();
  FakeExtender& ext = AddExtender([](const std::string& path, const json&) -> json {
    if (path == "/filter") return {{"Error", "inventory of n1 unreadable"}};
    return json::array();
  });
  ASSERT_TRUE(ext.running());
  StartStandin(Config("- urlPrefix: " + ext.url() +
                      "\n  filterVerb: filter\n"
                      "  nodeCacheCapable: true\n"));
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PendingPod("e")).ok());
  ASSERT_TRUE(WaitUntil([&] { return !PodScheduledCondition("e").is_null(); }, 10s));
  json cond = PodScheduledCondition("e");
  EXPECT_EQ(cond["reason"], "SchedulerError");
  EXPECT_EQ(cond["message"], "inventory of n1 unreadable");
  ASSERT_TRUE(WaitUntil([&] { return !Events("e", "FailedScheduling").empty(); }, 10s));
  EXPECT_EQ(Events("e", "FailedScheduling")[0]["message"], "inventory of n1 unreadable");
  EXPECT_TRUE(NodeOf("e").empty());
}

TEST_F(StandinTest, BindErrorIsReportedAsBindingRejected) {
  SeedCluster();
  FakeExtender& ext = AddExtender([](const std::string& path, const json&) -> json {
    if (path == "/filter") return {{"NodeNames", {"n1"}}};
    if (path == "/bind") return {{"Error", "node n1 is locked"}};
    return json::array();
  });
  ASSERT_TRUE(ext.running());
  StartStandin(Config("- urlPrefix: " + ext.url() +
                      "\n  filterVerb: filter\n  bindVerb: bind\n  nodeCacheCapable: true\n"));
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PendingPod("locked")).ok());
  ASSERT_TRUE(WaitUntil([&] { return !PodScheduledCondition("locked").is_null(); }, 10s));
  EXPECT_EQ(PodScheduledCondition("locked")["reason"], "SchedulerError");
  EXPECT_EQ(PodScheduledCondition("locked")["message"], "Binding rejected: node n1 is locked");
  // The failed bind is retried.
  ASSERT_TRUE(WaitUntil([&] { return ext.calls("/bind").size() >= 2; }, 10s));
}

TEST_F(StandinTest, HonoursHttpTimeoutAndSkipsAnIgnorableExtender) {
  SeedCluster();
  FakeExtender& slow = AddExtender([this](const std::string&, const json&) -> json {
    gate_.Wait();
    return {{"NodeNames", json::array()}};
  });
  FakeExtender& fine = AddExtender([](const std::string& path, const json&) -> json {
    if (path == "/filter") return {{"NodeNames", {"n6"}}};
    return json::array();
  });
  ASSERT_TRUE(slow.running() && fine.running());
  StartStandin(Config("- urlPrefix: " + slow.url() +
                      "\n  filterVerb: filter\n  nodeCacheCapable: true\n  httpTimeout: 100ms\n"
                      "  ignorable: true\n- urlPrefix: " +
                      fine.url() + "\n  filterVerb: filter\n  nodeCacheCapable: true\n"));
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PendingPod("patient")).ok());
  ASSERT_TRUE(WaitBound("patient"));
  EXPECT_EQ(NodeOf("patient"), "n6");
  EXPECT_EQ(slow.calls("/filter").size(), 1u);
  EXPECT_GE(standin_->stats().extender_failures, 1u);
}

TEST_F(StandinTest, TimeoutOfARequiredExtenderFailsTheAttempt) {
  SeedCluster();
  FakeExtender& slow = AddExtender([this](const std::string&, const json&) -> json {
    gate_.Wait();
    return {{"NodeNames", json::array()}};
  });
  ASSERT_TRUE(slow.running());
  StartStandin(Config("- urlPrefix: " + slow.url() +
                      "\n  filterVerb: filter\n  nodeCacheCapable: true\n  httpTimeout: 100ms\n"));
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PendingPod("waits")).ok());
  ASSERT_TRUE(WaitUntil([&] { return !PodScheduledCondition("waits").is_null(); }, 10s));
  json cond = PodScheduledCondition("waits");
  EXPECT_EQ(cond["reason"], "SchedulerError");
  EXPECT_EQ(cond["message"], "filter with extender at URL " + slow.url() +
                                 "/filter: no answer within httpTimeout 100ms");
}

TEST_F(StandinTest, LeavesOtherSchedulersPodsAndBoundPodsAlone) {
  SeedCluster();
  FakeExtender& ext = AddExtender([](const std::string& path, const json&) -> json {
    if (path == "/filter") return {{"NodeNames", {"n1"}}};
    return json::array();
  });
  ASSERT_TRUE(ext.running());
  ASSERT_TRUE(
      server_->CreateObject(hami::kube::kPods, PendingPod("theirs", "default-scheduler")).ok());
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, BoundPod("placed", "n6")).ok());
  StartStandin(Config("- urlPrefix: " + ext.url() +
                      "\n  filterVerb: filter\n"
                      "  nodeCacheCapable: true\n"));
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PendingPod("ours")).ok());
  ASSERT_TRUE(WaitBound("ours"));
  for (const FakeExtender::Call& c : ext.calls()) {
    EXPECT_EQ(c.body["Pod"]["metadata"]["name"], "ours");
  }
  EXPECT_TRUE(NodeOf("theirs").empty());
  EXPECT_EQ(NodeOf("placed"), "n6");
}

TEST_F(StandinTest, AnExtenderNotInterestedInThePodIsNotCalled) {
  SeedCluster();
  FakeExtender& ext = AddExtender([](const std::string&, const json&) -> json {
    return {{"NodeNames", {}}};
  });
  ASSERT_TRUE(ext.running());
  StartStandin(Config("- urlPrefix: " + ext.url() +
                      "\n  filterVerb: filter\n  bindVerb: bind\n  nodeCacheCapable: true\n"
                      "  managedResources:\n  - name: nvidia.com/gpu\n"));
  ASSERT_TRUE(server_
                  ->CreateObject(hami::kube::kPods,
                                 PendingPod("cpu-only", "hami-scheduler", "example.com/widget"))
                  .ok());
  ASSERT_TRUE(WaitBound("cpu-only"));
  EXPECT_TRUE(ext.calls().empty());
  // Own scoring alone: n1 and n6 are empty, n2 has 11 pods.
  EXPECT_NE(NodeOf("cpu-only"), "n2");
}

// The pod with spec.priorityClassName naming the class of `priority` (made by
// PriorityClasses), which the API server's Priority admission turns into spec.priority.
json PriorityPod(json pod, int32_t priority) {
  pod["spec"]["priorityClassName"] = "priority-" + std::to_string(priority);
  return pod;
}

// The PriorityClasses PriorityPod names.
void PriorityClasses(ApiServer& server, std::initializer_list<int32_t> values) {
  for (int32_t v : values) {
    auto made = server.CreateObject(
        hami::kube::kPriorityClasses,
        {{"metadata", {{"name", "priority-" + std::to_string(v)}}}, {"value", v}});
    ASSERT_TRUE(made.ok()) << made.error().message();
  }
}

TEST_F(StandinTest, PreemptsTheVictimsTheExtenderNamesAndNominatesThePod) {
  for (const char* n : {"n1", "n2", "n3"}) {
    ASSERT_TRUE(server_->CreateObject(hami::kube::kNodes, Node(n, true, false, true)).ok());
  }
  PriorityClasses(*server_, {0, 1, 100, 500});
  std::map<std::string, std::string> uid;
  for (const auto& [name, node, prio] :
       std::vector<std::tuple<std::string, std::string, int>>{{"low-a", "n1", 0},
                                                              {"low-b", "n2", 0},
                                                              {"low-c", "n2", 1},
                                                              {"high", "n2", 500},
                                                              {"low-d", "n3", 0}}) {
    auto made = server_->CreateObject(hami::kube::kPods, PriorityPod(BoundPod(name, node), prio));
    ASSERT_TRUE(made.ok());
    uid[name] = (*made)["metadata"]["uid"];
  }
  std::atomic<int> filters{0};
  FakeExtender& ext = AddExtender([&](const std::string& path, const json& body) -> json {
    if (path == "/filter") {
      // n1 and n2 are full; n3 can never take the pod.
      if (++filters > 1) return {{"NodeNames", json::array()}, {"FailedNodes", json::object()}};
      return {{"NodeNames", json::array()},
              {"FailedNodes", {{"n1", "full"}, {"n2", "full"}}},
              {"FailedAndUnresolvableNodes", {{"n3", "too small"}}}};
    }
    if (path == "/preempt") {
      // Only low-c of n2 is needed.
      return {
          {"NodeNameToMetaVictims",
           {{"n2", {{"Pods", json::array({{{"UID", uid["low-c"]}}})}, {"NumPDBViolations", 0}}}}}};
    }
    return BindAsExtender(body);
  });
  StartStandin(Config("- urlPrefix: " + ext.url() +
                      "\n  filterVerb: filter\n  preemptVerb: preempt\n  bindVerb: bind\n"
                      "  nodeCacheCapable: true\n"));
  json preemptor = PendingPod("preemptor");
  preemptor["spec"].erase("nodeSelector");
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PriorityPod(preemptor, 100)).ok());

  ASSERT_TRUE(WaitUntil([&] { return !attempts().empty(); }, 10s));
  const ScheduleAttempt a = attempts()[0];
  EXPECT_EQ(a.outcome, ScheduleAttempt::Outcome::kUnschedulable);
  EXPECT_EQ(a.nominated_node, "n2");
  EXPECT_EQ(a.victims, std::vector<std::string>{"default/low-c"});

  // The extender was offered the lower-priority pods of the nodes it failed resolvably.
  auto calls = ext.calls("/preempt");
  ASSERT_GE(calls.size(), 1u);
  const json& offered = calls[0].body["NodeNameToMetaVictims"];
  EXPECT_TRUE(calls[0].body["NodeNameToVictims"].is_null());
  EXPECT_EQ(offered.size(), 2u) << offered.dump();
  EXPECT_EQ(offered["n1"]["Pods"], json::array({{{"UID", uid["low-a"]}}}));
  EXPECT_EQ(offered["n2"]["Pods"], json::array({{{"UID", uid["low-b"]}}, {{"UID", uid["low-c"]}}}));

  // low-c is gone, with its event; the others stay; the pod is nominated to n2.
  EXPECT_FALSE(server_->GetObject(hami::kube::kPods, "default", "low-c").ok());
  for (const char* kept : {"low-a", "low-b", "high", "low-d"}) {
    EXPECT_TRUE(server_->GetObject(hami::kube::kPods, "default", kept).ok()) << kept;
  }
  auto events = Events("low-c", "Preempted");
  ASSERT_EQ(events.size(), 1u);
  auto p = server_->GetObject(hami::kube::kPods, "default", "preemptor");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)["status"].value("nominatedNodeName", ""), "n2");
  EXPECT_EQ(events[0].value("message", ""),
            "Preempted by pod " + (*p)["metadata"]["uid"].get<std::string>() + " on node n2");
  EXPECT_EQ(standin_->stats().victims_deleted, 1u);
}

TEST_F(StandinTest, NoPreemptionWhenOnlyUnresolvableNodesOrEqualPrioritiesRemain) {
  for (const char* n : {"n1", "n2"}) {
    ASSERT_TRUE(server_->CreateObject(hami::kube::kNodes, Node(n, true, false, true)).ok());
  }
  PriorityClasses(*server_, {0, 100});
  ASSERT_TRUE(
      server_->CreateObject(hami::kube::kPods, PriorityPod(BoundPod("same", "n1"), 100)).ok());
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PriorityPod(BoundPod("low", "n2"), 0)).ok());
  FakeExtender& ext = AddExtender([](const std::string& path, const json&) -> json {
    if (path == "/filter") {
      return {{"NodeNames", json::array()},
              {"FailedNodes", {{"n1", "full"}}},
              {"FailedAndUnresolvableNodes", {{"n2", "too small"}}}};
    }
    return {{"NodeNameToMetaVictims", json::object()}};
  });
  StartStandin(
      Config("- urlPrefix: " + ext.url() +
             "\n  filterVerb: filter\n  preemptVerb: preempt\n  nodeCacheCapable: true\n"));
  json preemptor = PendingPod("preemptor");
  preemptor["spec"].erase("nodeSelector");
  ASSERT_TRUE(server_->CreateObject(hami::kube::kPods, PriorityPod(preemptor, 100)).ok());
  ASSERT_TRUE(WaitUntil([&] { return attempts().size() >= 2; }, 10s));
  const ScheduleAttempt a = attempts()[0];
  EXPECT_TRUE(a.victims.empty());
  EXPECT_TRUE(a.nominated_node.empty());
  EXPECT_NE(a.message.find("preemption: 0/2 nodes are available: 1 No preemption victims found "
                           "for incoming pod, 1 Preemption is not helpful for scheduling."),
            std::string::npos)
      << a.message;
  EXPECT_TRUE(ext.calls("/preempt").empty());
  EXPECT_TRUE(server_->GetObject(hami::kube::kPods, "default", "same").ok());
  EXPECT_TRUE(server_->GetObject(hami::kube::kPods, "default", "low").ok());
}

}  // namespace
}  // namespace hami::sim::kube
