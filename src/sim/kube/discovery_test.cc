#include "sim/kube/discovery.h"

#include <gtest/gtest.h>

#include <set>

namespace hami::sim::kube {
namespace {

using hami::kube::Resource;
using nlohmann::json;
using namespace std::chrono_literals;

// What kubectl 1.32 sends (research/kubectl-protocol.md, section 1).
constexpr std::string_view kKubectlAggregated =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/"
    "json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
constexpr std::string_view kKubectl128Aggregated =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
constexpr std::string_view kKubectlTable =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta."
    "k8s.io,application/json";

Rendered Discover(std::string_view path, std::string_view accept = "application/json") {
  auto r = RenderDiscovery(path, accept, "127.0.0.1:6443");
  EXPECT_TRUE(r.has_value()) << path;
  return r.value_or(Rendered{});
}

json Body(const Rendered& r) { return json::parse(r.body); }

const json* FindBy(const json& list, std::string_view key, std::string_view value) {
  for (const json& e : list) {
    if (e.value(std::string(key), "") == value) return &e;
  }
  return nullptr;
}

std::set<std::string> Strings(const json& arr) {
  std::set<std::string> out;
  for (const json& s : arr) out.insert(s.get<std::string>());
  return out;
}

const std::set<std::string> kAllVerbs = {"create", "delete", "deletecollection", "get",
                                         "list",   "patch",  "update",           "watch"};

TEST(DiscoveryVersion, ReportsMinor32SoTheDispatcherRunsKubectl132) {
  Rendered r = Discover("/version");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  json v = Body(r);
  EXPECT_EQ(v["major"], "1");
  EXPECT_EQ(v["minor"], "32");
  EXPECT_EQ(v["gitVersion"], kServerGitVersion);
  for (const char* field :
       {"gitCommit", "gitTreeState", "buildDate", "goVersion", "compiler", "platform"}) {
    ASSERT_TRUE(v.contains(field)) << field;
    EXPECT_FALSE(v[field].get<std::string>().empty()) << field;
  }
}

TEST(DiscoveryAggregated, CoreGroupInV2WithItsOwnContentType) {
  Rendered r = Discover("/api", kKubectlAggregated);
  EXPECT_EQ(r.content_type, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList");
  json body = Body(r);
  EXPECT_EQ(body["kind"], "APIGroupDiscoveryList");
  EXPECT_EQ(body["apiVersion"], "apidiscovery.k8s.io/v2");
  ASSERT_EQ(body["items"].size(), 1u);
  const json& core = body["items"][0];
  EXPECT_EQ(core["metadata"]["name"], "");
  ASSERT_EQ(core["versions"].size(), 1u);
  EXPECT_EQ(core["versions"][0]["version"], "v1");
  EXPECT_EQ(core["versions"][0]["freshness"], "Current");
  const json& resources = core["versions"][0]["resources"];

  const json* pods = FindBy(resources, "resource", "pods");
  ASSERT_NE(pods, nullptr);
  EXPECT_EQ((*pods)["responseKind"], json({{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}));
  EXPECT_EQ((*pods)["scope"], "Namespaced");
  EXPECT_EQ((*pods)["singularResource"], "pod");
  EXPECT_EQ(Strings((*pods)["verbs"]), kAllVerbs);
  EXPECT_EQ((*pods)["shortNames"], json::array({"po"}));
  const json* binding = FindBy((*pods)["subresources"], "subresource", "binding");
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ((*binding)["responseKind"]["kind"], "Binding");
  EXPECT_EQ((*binding)["verbs"], json::array({"create"}));
  const json* exec = FindBy((*pods)["subresources"], "subresource", "exec");
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ((*exec)["responseKind"]["kind"], "PodExecOptions");
  EXPECT_EQ((*exec)["verbs"], json::array({"create", "get"}));
  const json* pod_status = FindBy((*pods)["subresources"], "subresource", "status");
  ASSERT_NE(pod_status, nullptr);
  EXPECT_EQ((*pod_status)["responseKind"]["kind"], "Pod");
  EXPECT_EQ(Strings((*pod_status)["verbs"]), std::set<std::string>({"get", "patch", "update"}));

  const json* nodes = FindBy(resources, "resource", "nodes");
  ASSERT_NE(nodes, nullptr);
  EXPECT_EQ((*nodes)["scope"], "Cluster");
  EXPECT_NE(FindBy((*nodes)["subresources"], "subresource", "status"), nullptr);
}

TEST(DiscoveryAggregated, ListsEveryResourceOfTheTableInItsGroup) {
  json core = Body(Discover("/api", kKubectlAggregated));
  json groups = Body(Discover("/apis", kKubectlAggregated));
  for (const Resource& r : hami::kube::AllResources()) {
    const json& list = r.group.empty() ? core : groups;
    const json* group = nullptr;
    for (const json& item : list["items"]) {
      if (item["metadata"]["name"] == r.group) group = &item;
    }
    ASSERT_NE(group, nullptr) << r.plural;
    const json* entry = FindBy((*group)["versions"][0]["resources"], "resource", r.plural);
    ASSERT_NE(entry, nullptr) << r.plural;
    EXPECT_EQ((*entry)["responseKind"]["kind"], r.kind);
    EXPECT_EQ((*entry)["scope"], r.namespaced ? "Namespaced" : "Cluster");
    EXPECT_EQ(entry->contains("shortNames"), !r.short_name.empty()) << r.plural;
  }
  for (const json& item : groups["items"]) EXPECT_NE(item["metadata"]["name"], "");
}

TEST(DiscoveryAggregated, V2Beta1WhenThatIsAllTheClientOffers) {
  Rendered r = Discover("/apis", kKubectl128Aggregated);
  EXPECT_EQ(r.content_type,
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList");
  json body = Body(r);
  EXPECT_EQ(body["apiVersion"], "apidiscovery.k8s.io/v2beta1");
  ASSERT_EQ(body["items"].size(), 6u);
  EXPECT_EQ(body["items"][0]["metadata"]["name"], "coordination.k8s.io");
  EXPECT_NE(FindBy(body["items"][0]["versions"][0]["resources"], "resource", "leases"), nullptr);
  EXPECT_EQ(body["items"][1]["metadata"]["name"], "apps");
  EXPECT_EQ(body["items"][2]["metadata"]["name"], "rbac.authorization.k8s.io");
  EXPECT_EQ(body["items"][3]["metadata"]["name"], "admissionregistration.k8s.io");
}

TEST(DiscoveryAggregated, ChosenOverPlainJsonListedFirstUnlessItsQualityIsLower) {
  std::string plain_first =
      "application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
  EXPECT_EQ(Body(Discover("/api", plain_first))["kind"], "APIGroupDiscoveryList");
  std::string lower_q =
      "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5, "
      "application/json";
  EXPECT_EQ(Body(Discover("/api", lower_q))["kind"], "APIVersions");
  std::string refused = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0";
  EXPECT_EQ(Body(Discover("/api", refused))["kind"], "APIVersions");
}

TEST(DiscoveryLegacy, ApiVersionsWhenAcceptOffersNoAggregatedForm) {
  for (std::string_view accept : {"application/json", "", "*/*", "application/json, */*",
                                  "application/json;g=apidiscovery.k8s.io;v=v3;as=Other"}) {
    Rendered r = Discover("/api", accept);
    EXPECT_EQ(r.content_type, "application/json") << accept;
    json body = Body(r);
    EXPECT_EQ(body["kind"], "APIVersions") << accept;
    EXPECT_EQ(body["versions"], json::array({"v1"}));
    EXPECT_EQ(body["serverAddressByClientCIDRs"][0]["serverAddress"], "127.0.0.1:6443");
  }
}

TEST(DiscoveryLegacy, GroupListAndGroupNameThePreferredVersion) {
  json list = Body(Discover("/apis"));
  EXPECT_EQ(list["kind"], "APIGroupList");
  ASSERT_EQ(list["groups"].size(), 6u);
  json expected_version = {{"groupVersion", "coordination.k8s.io/v1"}, {"version", "v1"}};
  EXPECT_EQ(list["groups"][0]["name"], "coordination.k8s.io");
  EXPECT_EQ(list["groups"][0]["versions"], json::array({expected_version}));
  EXPECT_EQ(list["groups"][0]["preferredVersion"], expected_version);

  json group = Body(Discover("/apis/coordination.k8s.io"));
  EXPECT_EQ(group["kind"], "APIGroup");
  EXPECT_EQ(group["preferredVersion"], expected_version);
}

TEST(DiscoveryLegacy, CoreResourceListWithSubresources) {
  json list = Body(Discover("/api/v1", "application/json, */*"));
  EXPECT_EQ(list["kind"], "APIResourceList");
  EXPECT_EQ(list["groupVersion"], "v1");
  const json& resources = list["resources"];
  for (const Resource& r : hami::kube::AllResources()) {
    if (!r.group.empty()) continue;
    const json* e = FindBy(resources, "name", r.plural);
    ASSERT_NE(e, nullptr) << r.plural;
    EXPECT_EQ((*e)["singularName"], r.singular);
    EXPECT_EQ((*e)["namespaced"], r.namespaced);
    EXPECT_EQ((*e)["kind"], r.kind);
    EXPECT_TRUE(Strings((*e)["verbs"]).contains("watch"));
    if (!r.short_name.empty()) {
      EXPECT_EQ((*e)["shortNames"], json::array({r.short_name}));
    }
  }
  const json* binding = FindBy(resources, "name", "pods/binding");
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ((*binding)["kind"], "Binding");
  EXPECT_EQ((*binding)["verbs"], json::array({"create"}));
  ASSERT_NE(FindBy(resources, "name", "pods/status"), nullptr);
  const json* node_status = FindBy(resources, "name", "nodes/status");
  ASSERT_NE(node_status, nullptr);
  EXPECT_EQ((*node_status)["namespaced"], false);
  EXPECT_EQ(FindBy(resources, "name", "leases"), nullptr);
}

TEST(DiscoveryLegacy, CoordinationResourceList) {
  json list = Body(Discover("/apis/coordination.k8s.io/v1"));
  EXPECT_EQ(list["groupVersion"], "coordination.k8s.io/v1");
  ASSERT_EQ(list["resources"].size(), 1u);
  EXPECT_EQ(list["resources"][0]["name"], "leases");
  EXPECT_EQ(list["resources"][0]["kind"], "Lease");
  EXPECT_EQ(list["resources"][0]["namespaced"], true);
}

TEST(DiscoveryPaths, IgnoresQueryStringAndOneTrailingSlash) {
  EXPECT_EQ(Body(Discover("/version?timeout=32s"))["minor"], "32");
  EXPECT_EQ(Body(Discover("/api/v1/"))["kind"], "APIResourceList");
}

TEST(DiscoveryPaths, LeavesResourceAndUnknownPathsToTheServer) {
  for (std::string_view path :
       {"/", "/api/v1/pods", "/api/v1/namespaces/default/pods",
        "/apis/coordination.k8s.io/v1/leases", "/apis/batch", "/apis/batch/v1", "/api/v2",
        "/healthz", "/openapi/v3/apis/batch/v1", "/apis/apps/v1/deployments", "/versions"}) {
    EXPECT_FALSE(RenderDiscovery(path, "application/json", "h:1").has_value()) << path;
  }
}

TEST(DiscoveryOpenApi, RootNamesEachGroupVersionWithAStableHash) {
  json root = Body(Discover("/openapi/v3"));
  ASSERT_TRUE(root["paths"].contains("api/v1"));
  ASSERT_TRUE(root["paths"].contains("apis/coordination.k8s.io/v1"));
  ASSERT_TRUE(root["paths"].contains("apis/apps/v1"));
  ASSERT_TRUE(root["paths"].contains("apis/rbac.authorization.k8s.io/v1"));
  ASSERT_TRUE(root["paths"].contains("apis/admissionregistration.k8s.io/v1"));
  ASSERT_TRUE(root["paths"].contains("apis/scheduling.k8s.io/v1"));
  ASSERT_TRUE(root["paths"].contains("apis/resource.k8s.io/v1"));
  EXPECT_EQ(root["paths"].size(), 7u);
  std::string url = root["paths"]["api/v1"]["serverRelativeURL"];
  EXPECT_TRUE(url.starts_with("/openapi/v3/api/v1?hash=")) << url;
  EXPECT_GT(url.size(), std::string("/openapi/v3/api/v1?hash=").size());
  EXPECT_EQ(Body(Discover("/openapi/v3")), root);
  EXPECT_EQ(Discover(url).status, 200);
}

// kubectl sends fieldValidation=Strict only when it finds a PATCH operation carrying the
// kind's group-version-kind and a fieldValidation query parameter (protocol sheet, section 3).
TEST(DiscoveryOpenApi, EveryKindHasAPatchOperationTakingFieldValidation) {
  for (const Resource& r : hami::kube::AllResources()) {
    std::string path = r.group.empty() ? "/openapi/v3/api/" + std::string(r.version)
                                       : "/openapi/v3/apis/" + r.ApiVersion();
    Rendered answer = Discover(path);
    EXPECT_EQ(answer.content_type, "application/json");
    json doc = Body(answer);
    EXPECT_TRUE(doc["openapi"].get<std::string>().starts_with("3.")) << path;
    bool found = false;
    for (const auto& [key, item] : doc["paths"].items()) {
      if (!item.contains("patch")) continue;
      const json& op = item["patch"];
      json gvk = {{"group", r.group}, {"version", r.version}, {"kind", r.kind}};
      if (op["x-kubernetes-group-version-kind"] != gvk) continue;
      const json* param = FindBy(op["parameters"], "name", "fieldValidation");
      ASSERT_NE(param, nullptr) << key;
      EXPECT_EQ((*param)["in"], "query");
      EXPECT_EQ(key, hami::kube::ObjectPath(r, "{namespace}", "{name}"));
      found = true;
    }
    EXPECT_TRUE(found) << r.kind;
  }
}

TEST(DiscoveryOpenApi, V2IsNotFoundAsAStatus) {
  Rendered r = Discover("/openapi/v2");
  EXPECT_EQ(r.status, 404);
  json body = Body(r);
  EXPECT_EQ(body["kind"], "Status");
  EXPECT_EQ(body["reason"], "NotFound");
  EXPECT_EQ(body["code"], 404);
}

TEST(DiscoveryWantsTable, KubectlsTableAcceptAndNothingElse) {
  EXPECT_TRUE(WantsTable(kKubectlTable));
  EXPECT_TRUE(WantsTable("application/json;as=Table;v=v1beta1;g=meta.k8s.io"));
  EXPECT_TRUE(WantsTable("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"));
  EXPECT_FALSE(WantsTable("application/json"));
  EXPECT_FALSE(WantsTable(""));
  EXPECT_FALSE(WantsTable("*/*"));
  EXPECT_FALSE(WantsTable("application/json;as=Table;v=v2;g=meta.k8s.io"));
  EXPECT_FALSE(WantsTable("application/json;as=Table;v=v1;g=other.io"));
  EXPECT_FALSE(WantsTable("application/json;as=Table;v=v1;g=meta.k8s.io;q=0, application/json"));
}

TEST(DiscoveryFormatAge, MatchesKubectlsHumanDuration) {
  using std::chrono::hours;
  using std::chrono::minutes;
  using std::chrono::seconds;
  constexpr auto kDay = hours(24);
  constexpr auto kYear = kDay * 365;
  struct Case {
    std::chrono::system_clock::duration d;
    const char* text;
  };
  const Case cases[] = {
      {-3s, "<invalid>"},
      {-1500ms, "0s"},
      {0s, "0s"},
      {5s, "5s"},
      {119s, "119s"},
      {120s, "2m"},
      {182s, "3m2s"},
      {minutes(9) + 59s, "9m59s"},
      {minutes(10) + 30s, "10m"},
      {minutes(179), "179m"},
      {hours(3), "3h"},
      {hours(3) + minutes(4), "3h4m"},
      {hours(7) + minutes(59), "7h59m"},
      {hours(8) + minutes(30), "8h"},
      {hours(47), "47h"},
      {hours(48), "2d"},
      {hours(51), "2d3h"},
      {kDay * 7 + hours(23), "7d23h"},
      {kDay * 8, "8d"},
      {kDay * 729, "729d"},
      {kYear * 2, "2y"},
      {kYear * 2 + kDay * 5, "2y5d"},
      {kYear * 8 + kDay * 100, "8y"},
  };
  for (const Case& c : cases) EXPECT_EQ(FormatAge(c.d), c.text) << c.text;
}

// ---- Tables -------------------------------------------------------------------------------

const hami::kube::WallTime kNow = [] {
  auto t = hami::kube::ParseTime("2026-03-01T12:00:00Z");
  return t.ok() ? *t : hami::kube::WallTime{};
}();

std::vector<std::string> ColumnNames(const json& table, int priority) {
  std::vector<std::string> names;
  for (const json& c : table["columnDefinitions"]) {
    if (c["priority"] == priority) names.push_back(c["name"]);
  }
  return names;
}

json Cells(const Resource& r, const json& obj) {
  json table = RenderTable(r, {&obj}, "7", true, kNow);
  EXPECT_EQ(table["rows"].size(), 1u);
  EXPECT_EQ(table["rows"][0]["cells"].size(), table["columnDefinitions"].size());
  return table["rows"][0]["cells"];
}

json Pod(json status = json::object(), json spec_extra = json::object()) {
  json pod = {{"metadata",
               {{"name", "p"},
                {"namespace", "ns1"},
                {"creationTimestamp", "2026-03-01T11:59:55Z"},
                {"labels", {{"app", "x"}}}}},
              {"spec", {{"containers", json::array({{{"name", "main"}}})}}},
              {"status", status}};
  pod["spec"].update(spec_extra);
  return pod;
}

TEST(DiscoveryTable, PodColumnsAsKubectlPrintsThem) {
  json table = RenderTable(hami::kube::kPods, {}, "42", true, kNow);
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["apiVersion"], "meta.k8s.io/v1");
  EXPECT_EQ(table["metadata"]["resourceVersion"], "42");
  EXPECT_EQ(table["rows"], json::array());
  EXPECT_EQ(ColumnNames(table, 0),
            std::vector<std::string>({"Name", "Ready", "Status", "Restarts", "Age"}));
  EXPECT_EQ(ColumnNames(table, 1),
            std::vector<std::string>({"IP", "Node", "Nominated Node", "Readiness Gates"}));
  EXPECT_EQ(table["columnDefinitions"][0]["format"], "name");
}

TEST(DiscoveryTable, PendingPodRowCarriesItsMetadataWithNamespace) {
  json pod = Pod({{"phase", "Pending"}});
  json table = RenderTable(hami::kube::kPods, {&pod}, "7", true, kNow);
  const json& row = table["rows"][0];
  EXPECT_EQ(row["cells"], json::array({"p", "0/1", "Pending", "0", "5s", "<none>", "<none>",
                                       "<none>", "<none>"}));
  EXPECT_EQ(row["object"]["kind"], "PartialObjectMetadata");
  EXPECT_EQ(row["object"]["apiVersion"], "meta.k8s.io/v1");
  EXPECT_EQ(row["object"]["metadata"], pod["metadata"]);
}

TEST(DiscoveryTable, RowsCarryWhatIncludeObjectAsksFor) {
  json pod = Pod({{"phase", "Pending"}});
  json whole = RenderTable(hami::kube::kPods, {&pod}, "7", true, kNow, TableRowObject::kObject);
  const json& object = whole["rows"][0]["object"];
  EXPECT_EQ(object["kind"], "Pod");
  EXPECT_EQ(object["apiVersion"], "v1");
  EXPECT_EQ(object["status"], pod["status"]);
  EXPECT_EQ(object["metadata"], pod["metadata"]);
  json none = RenderTable(hami::kube::kPods, {&pod}, "7", true, kNow, TableRowObject::kNone);
  EXPECT_FALSE(none["rows"][0].contains("object"));
  EXPECT_EQ(none["rows"][0]["cells"], whole["rows"][0]["cells"]);

  EXPECT_EQ(ParseIncludeObject(""), TableRowObject::kMetadata);
  EXPECT_EQ(ParseIncludeObject("Metadata"), TableRowObject::kMetadata);
  EXPECT_EQ(ParseIncludeObject("Object"), TableRowObject::kObject);
  EXPECT_EQ(ParseIncludeObject("None"), TableRowObject::kNone);
  EXPECT_EQ(ParseIncludeObject("object"), std::nullopt);
}

TEST(DiscoveryTable, RunningPodOnANodeWithRestarts) {
  json status = {
      {"phase", "Running"},
      {"podIPs", json::array({{{"ip", "10.0.0.5"}}})},
      {"nominatedNodeName", "n2"},
      {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}},
                                  {{"type", "example.com/gate"}, {"status", "False"}}})},
      {"containerStatuses",
       json::array(
           {{{"name", "main"},
             {"ready", true},
             {"restartCount", 3},
             {"state", {{"running", {{"startedAt", "2026-03-01T11:59:00Z"}}}}},
             {"lastState",
              {{"terminated", {{"exitCode", 1}, {"finishedAt", "2026-03-01T11:57:55Z"}}}}}}})}};
  json spec = {{"nodeName", "n1"},
               {"readinessGates", json::array({{{"conditionType", "example.com/gate"}},
                                               {{"conditionType", "Ready"}}})}};
  EXPECT_EQ(
      Cells(hami::kube::kPods, Pod(status, spec)),
      json::array({"p", "1/1", "Running", "3 (2m5s ago)", "5s", "10.0.0.5", "n1", "n2", "1/2"}));
}

TEST(DiscoveryTable, PodStatusReasonsFromContainersAndInitContainers) {
  json waiting = {{"phase", "Running"},
                  {"containerStatuses",
                   json::array({{{"name", "main"},
                                 {"state", {{"waiting", {{"reason", "CrashLoopBackOff"}}}}}}})}};
  EXPECT_EQ(Cells(hami::kube::kPods, Pod(waiting))[2], "CrashLoopBackOff");

  json killed = {
      {"phase", "Failed"},
      {"containerStatuses",
       json::array(
           {{{"name", "main"}, {"state", {{"terminated", {{"exitCode", 137}, {"signal", 9}}}}}}})}};
  EXPECT_EQ(Cells(hami::kube::kPods, Pod(killed))[2], "Signal:9");

  json init_spec = {{"initContainers", json::array({{{"name", "setup"}}})}};
  json initializing = {
      {"phase", "Pending"},
      {"initContainerStatuses",
       json::array({{{"name", "setup"}, {"state", {{"running", json::object()}}}}})}};
  EXPECT_EQ(Cells(hami::kube::kPods, Pod(initializing, init_spec))[2], "Init:0/1");
  json init_failed = {
      {"phase", "Pending"},
      {"initContainerStatuses",
       json::array({{{"name", "setup"}, {"state", {{"terminated", {{"exitCode", 2}}}}}}})}};
  EXPECT_EQ(Cells(hami::kube::kPods, Pod(init_failed, init_spec))[2], "Init:ExitCode:2");

  json evicted = {{"phase", "Failed"}, {"reason", "Evicted"}};
  EXPECT_EQ(Cells(hami::kube::kPods, Pod(evicted))[2], "Evicted");

  json deleting = Pod({{"phase", "Running"}});
  deleting["metadata"]["deletionTimestamp"] = "2026-03-01T11:59:59Z";
  EXPECT_EQ(Cells(hami::kube::kPods, deleting)[2], "Terminating");
}

TEST(DiscoveryTable, WatchEventsAfterTheFirstCarryNoColumns) {
  json pod = Pod({{"phase", "Pending"}});
  json table = RenderTable(hami::kube::kPods, {&pod}, "9", false, kNow);
  EXPECT_EQ(table["columnDefinitions"], json::array());
  EXPECT_EQ(table["rows"][0]["cells"][0], "p");
}

TEST(DiscoveryTable, NodeStatusRolesAndVersion) {
  json table = RenderTable(hami::kube::kNodes, {}, "1", true, kNow);
  EXPECT_EQ(ColumnNames(table, 0),
            std::vector<std::string>({"Name", "Status", "Roles", "Age", "Version"}));
  json node = {{"metadata",
                {{"name", "n1"},
                 {"creationTimestamp", "2026-02-27T09:00:00Z"},
                 {"labels",
                  {{"node-role.kubernetes.io/worker", ""},
                   {"node-role.kubernetes.io/control-plane", ""},
                   {"kubernetes.io/role", "gpu"}}}}},
               {"spec", {{"unschedulable", true}}},
               {"status",
                {{"conditions", json::array({{{"type", "MemoryPressure"}, {"status", "False"}},
                                             {{"type", "Ready"}, {"status", "True"}}})},
                 {"addresses", json::array({{{"type", "InternalIP"}, {"address", "192.168.1.2"}}})},
                 {"nodeInfo", {{"kubeletVersion", "v1.32.4"}, {"osImage", "Debian"}}}}}};
  EXPECT_EQ(Cells(hami::kube::kNodes, node),
            json::array({"n1", "Ready,SchedulingDisabled", "control-plane,gpu,worker", "2d3h",
                         "v1.32.4", "192.168.1.2", "<none>", "Debian", "<unknown>", "<unknown>"}));

  json bare = {{"metadata", {{"name", "n2"}}}};
  json cells = Cells(hami::kube::kNodes, bare);
  EXPECT_EQ(cells[1], "Unknown");
  EXPECT_EQ(cells[2], "<none>");
  EXPECT_EQ(cells[3], "<unknown>");
  EXPECT_EQ(cells[4], "");

  json not_ready = bare;
  not_ready["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "Unknown"}}});
  EXPECT_EQ(Cells(hami::kube::kNodes, not_ready)[1], "NotReady");
}

TEST(DiscoveryTable, OtherResourcesHaveTheirOwnColumns) {
  json lease = {{"metadata", {{"name", "l"}, {"creationTimestamp", "2026-03-01T11:57:00Z"}}},
                {"spec", {{"holderIdentity", "hami-scheduler-0"}}}};
  EXPECT_EQ(Cells(hami::kube::kLeases, lease), json::array({"l", "hami-scheduler-0", "3m"}));
  lease["spec"].erase("holderIdentity");
  EXPECT_EQ(Cells(hami::kube::kLeases, lease)[1], "<unknown>");

  json cm = {{"metadata", {{"name", "c"}}},
             {"data", {{"a", "1"}, {"b", "2"}}},
             {"binaryData", {{"z", "AA=="}}}};
  EXPECT_EQ(Cells(hami::kube::kConfigMaps, cm), json::array({"c", 3, "<unknown>"}));

  json ns = {{"metadata", {{"name", "default"}}}, {"status", {{"phase", "Terminating"}}}};
  EXPECT_EQ(Cells(hami::kube::kNamespaces, ns),
            json::array({"default", "Terminating", "<unknown>"}));

  json quota = {{"metadata", {{"name", "q"}}},
                {"spec", {{"hard", {{"limits.memory", "2Gi"}, {"pods", "10"}}}}},
                {"status",
                 {{"hard", {{"limits.memory", "2Gi"}, {"pods", "10"}, {"requests.cpu", "4"}}},
                  {"used", {{"pods", "3"}}}}}};
  EXPECT_EQ(
      Cells(hami::kube::kResourceQuotas, quota),
      json::array({"q", "<unknown>", "pods: 3/10, requests.cpu: 0/4", "limits.memory: 0/2Gi"}));

  json event = {{"metadata", {{"name", "p.1"}, {"namespace", "default"}}},
                {"involvedObject", {{"kind", "Pod"}, {"name", "p"}}},
                {"reason", "Scheduled"},
                {"message", "assigned"},
                {"type", "Normal"},
                {"count", 2},
                {"source", {{"component", "hami-scheduler"}}},
                {"firstTimestamp", "2026-03-01T11:50:00Z"},
                {"lastTimestamp", "2026-03-01T11:59:30Z"}};
  json event_table = RenderTable(hami::kube::kEvents, {&event}, "3", true, kNow);
  EXPECT_EQ(ColumnNames(event_table, 0),
            std::vector<std::string>({"Last Seen", "Type", "Reason", "Object", "Message"}));
  EXPECT_EQ(event_table["rows"][0]["cells"],
            json::array({"30s", "Normal", "Scheduled", "pod/p", "", "hami-scheduler", "assigned",
                         "10m", "2", "p.1"}));
  EXPECT_EQ(event_table["rows"][0]["object"]["metadata"]["namespace"], "default");
}

TEST(DiscoveryLegacy, AppsResourcesHaveShortNamesStatusAndTheAllCategory) {
  json list = Body(Discover("/apis/apps/v1", "application/json, */*"));
  EXPECT_EQ(list["groupVersion"], "apps/v1");
  const json* deploy = FindBy(list["resources"], "name", "deployments");
  ASSERT_NE(deploy, nullptr);
  EXPECT_EQ((*deploy)["shortNames"], json::array({"deploy"}));
  EXPECT_EQ((*deploy)["categories"], json::array({"all"}));
  ASSERT_NE(FindBy(list["resources"], "name", "deployments/status"), nullptr);
  ASSERT_NE(FindBy(list["resources"], "name", "daemonsets/status"), nullptr);
  json core = Body(Discover("/api/v1", "application/json, */*"));
  const json* log = FindBy(core["resources"], "name", "pods/log");
  ASSERT_NE(log, nullptr);
  EXPECT_EQ((*log)["verbs"], json::array({"get"}));
  EXPECT_EQ((*FindBy(core["resources"], "name", "services"))["shortNames"], json::array({"svc"}));
  EXPECT_FALSE(FindBy(core["resources"], "name", "secrets")->contains("shortNames"));
  json rbac = Body(Discover("/apis/rbac.authorization.k8s.io/v1", "application/json"));
  EXPECT_EQ((*FindBy(rbac["resources"], "name", "clusterroles"))["namespaced"], false);
  EXPECT_EQ((*FindBy(rbac["resources"], "name", "rolebindings"))["namespaced"], true);
}

TEST(DiscoveryTable, ControllerServiceSecretRbacAndWebhookColumns) {
  json deploy = {
      {"metadata", {{"name", "d"}, {"creationTimestamp", "2026-03-01T11:57:00Z"}}},
      {"spec",
       {{"replicas", 2},
        {"selector", {{"matchLabels", {{"app", "x"}}}}},
        {"template",
         {{"spec", {{"containers", {{{"name", "a"}, {"image", "i:1"}}, {{"name", "b"}}}}}}}}}},
      {"status", {{"readyReplicas", 1}, {"updatedReplicas", 2}, {"availableReplicas", 1}}}};
  json table = RenderTable(hami::kube::kDeployments, {&deploy}, "1", true, kNow);
  EXPECT_EQ(ColumnNames(table, 0),
            std::vector<std::string>({"Name", "Ready", "Up-to-date", "Available", "Age"}));
  EXPECT_EQ(table["rows"][0]["cells"],
            json::array({"d", "1/2", 2, 1, "3m", "a,b", "i:1,", "app=x"}));

  json ds = {{"metadata", {{"name", "ds"}}},
             {"spec", {{"template", {{"spec", {{"nodeSelector", {{"gpu", "on"}}}}}}}}},
             {"status", {{"desiredNumberScheduled", 3}, {"numberReady", 2}}}};
  EXPECT_EQ(Cells(hami::kube::kDaemonSets, ds),
            json::array({"ds", 3, 0, 2, 0, 0, "gpu=on", "<unknown>", "", "", "<none>"}));

  json svc = {{"metadata", {{"name", "s"}}},
              {"spec",
               {{"type", "NodePort"},
                {"clusterIP", "10.96.0.2"},
                {"ports", {{{"port", 443}, {"nodePort", 31998}, {"protocol", "TCP"}}}},
                {"selector", {{"app", "hami"}}}}}};
  EXPECT_EQ(Cells(hami::kube::kServices, svc),
            json::array({"s", "NodePort", "10.96.0.2", "<none>", "443:31998/TCP", "<unknown>",
                         "app=hami"}));

  json secret = {{"metadata", {{"name", "t"}}},
                 {"type", "kubernetes.io/tls"},
                 {"data", {{"tls.crt", "AA=="}, {"tls.key", "AA=="}}}};
  EXPECT_EQ(Cells(hami::kube::kSecrets, secret),
            json::array({"t", "kubernetes.io/tls", 2, "<unknown>"}));
  json sa = {{"metadata", {{"name", "a"}}}};
  EXPECT_EQ(Cells(hami::kube::kServiceAccounts, sa), json::array({"a", 0, "<unknown>"}));

  json role = {{"metadata", {{"name", "r"}, {"creationTimestamp", "2026-03-01T11:57:00Z"}}}};
  EXPECT_EQ(Cells(hami::kube::kClusterRoles, role), json::array({"r", "2026-03-01T11:57:00Z"}));
  json binding = {{"metadata", {{"name", "b"}}},
                  {"roleRef", {{"kind", "ClusterRole"}, {"name", "r"}}},
                  {"subjects",
                   {{{"kind", "ServiceAccount"}, {"name", "hami"}, {"namespace", "kube-system"}},
                    {{"kind", "User"}, {"name", "alice"}}}}};
  EXPECT_EQ(Cells(hami::kube::kClusterRoleBindings, binding),
            json::array({"b", "ClusterRole/r", "<unknown>", "alice", "", "kube-system/hami"}));
  json hooks = {{"metadata", {{"name", "w"}}}, {"webhooks", {{{"name", "a.b.c"}}}}};
  EXPECT_EQ(Cells(hami::kube::kMutatingWebhookConfigurations, hooks),
            json::array({"w", 1, "<unknown>"}));
}

TEST(DiscoveryLegacy, ResourceGroupServesTheFourDraKindsAndClaimStatus) {
  json list = Body(Discover("/apis/resource.k8s.io/v1", "application/json, */*"));
  EXPECT_EQ(list["groupVersion"], "resource.k8s.io/v1");
  for (const char* name : {"deviceclasses", "resourceslices"}) {
    const json* r = FindBy(list["resources"], "name", name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ((*r)["namespaced"], false) << name;
  }
  for (const char* name : {"resourceclaims", "resourceclaimtemplates"}) {
    const json* r = FindBy(list["resources"], "name", name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ((*r)["namespaced"], true) << name;
  }
  const json* status = FindBy(list["resources"], "name", "resourceclaims/status");
  ASSERT_NE(status, nullptr);
  EXPECT_EQ((*status)["kind"], "ResourceClaim");
  EXPECT_EQ(FindBy(list["resources"], "name", "resourceslices/status"), nullptr);
  json group = Body(Discover("/apis/resource.k8s.io"));
  EXPECT_EQ(group["preferredVersion"]["groupVersion"], "resource.k8s.io/v1");

  json aggregated = Body(Discover("/apis", kKubectlAggregated));
  const json* item = nullptr;
  for (const json& i : aggregated["items"]) {
    if (i["metadata"]["name"] == "resource.k8s.io") item = &i;
  }
  ASSERT_NE(item, nullptr);
  ASSERT_EQ((*item)["metadata"]["name"], "resource.k8s.io");
  const json* slices = FindBy((*item)["versions"][0]["resources"], "resource", "resourceslices");
  ASSERT_NE(slices, nullptr);
  EXPECT_EQ((*slices)["scope"], "Cluster");
  const json* claims = FindBy((*item)["versions"][0]["resources"], "resource", "resourceclaims");
  ASSERT_NE(claims, nullptr);
  EXPECT_EQ((*claims)["subresources"][0]["subresource"], "status");
}

TEST(DiscoveryTable, ClaimStateAndSliceColumns) {
  json table = RenderTable(hami::kube::kResourceClaims, {}, "1", true, kNow);
  std::vector<std::string> names;
  for (const json& c : table["columnDefinitions"]) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"Name", "State", "Age"}));
  table = RenderTable(hami::kube::kResourceSlices, {}, "1", true, kNow);
  names.clear();
  for (const json& c : table["columnDefinitions"]) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"Name", "Node", "Driver", "Pool", "Age"}));

  json claim = {{"metadata", {{"name", "c"}}}, {"spec", json::object()}};
  EXPECT_EQ(Cells(hami::kube::kResourceClaims, claim), json::array({"c", "pending", "<unknown>"}));
  claim["status"]["allocation"] = {{"devices", {{"results", json::array()}}}};
  EXPECT_EQ(Cells(hami::kube::kResourceClaims, claim)[1], "allocated");
  claim["status"]["reservedFor"] = {{{"resource", "pods"}, {"name", "p"}, {"uid", "u"}}};
  EXPECT_EQ(Cells(hami::kube::kResourceClaims, claim)[1], "allocated,reserved");
  claim["metadata"]["deletionTimestamp"] = "2026-03-01T11:57:00Z";
  EXPECT_EQ(Cells(hami::kube::kResourceClaims, claim)[1], "deleted,allocated,reserved");
  claim["status"].erase("reservedFor");
  EXPECT_EQ(Cells(hami::kube::kResourceClaims, claim)[1], "deleted,allocated,deallocating");
  claim["status"].erase("allocation");
  EXPECT_EQ(Cells(hami::kube::kResourceClaims, claim)[1], "deleted");

  json slice = {{"metadata", {{"name", "n1-gpu"}}},
                {"spec",
                 {{"driver", "gpu.example.com"},
                  {"nodeName", "n1"},
                  {"pool", {{"name", "n1"}, {"generation", 2}, {"resourceSliceCount", 1}}}}}};
  EXPECT_EQ(Cells(hami::kube::kResourceSlices, slice),
            json::array({"n1-gpu", "n1", "gpu.example.com", "n1", "<unknown>"}));
  slice["spec"].erase("nodeName");
  slice["spec"]["allNodes"] = true;
  EXPECT_EQ(Cells(hami::kube::kResourceSlices, slice)[1], "<none>");
  json cls = {{"metadata", {{"name", "gpu"}}}};
  EXPECT_EQ(Cells(hami::kube::kDeviceClasses, cls), json::array({"gpu", "<unknown>"}));
}

TEST(DiscoveryTable, MalformedObjectsRenderDefaultsInsteadOfThrowing) {
  const json objects[] = {
      json::object(),
      json::array({1, 2}),
      json("text"),
      {{"metadata", "x"}, {"spec", 3}, {"status", json::array()}},
      {{"metadata", {{"name", 5}, {"creationTimestamp", "yesterday"}}},
       {"spec", {{"containers", "main"}, {"initContainers", json::array({1})}}},
       {"status",
        {{"containerStatuses", json::array({"x", {{"state", 1}, {"restartCount", "3"}}})},
         {"initContainerStatuses", json::object()},
         {"podIPs", json::array({7})}}}},
  };
  for (const Resource& r : hami::kube::AllResources()) {
    for (const json& obj : objects) {
      json table;
      ASSERT_NO_THROW(table = RenderTable(r, {&obj}, "1", true, kNow)) << r.plural << obj;
      ASSERT_EQ(table["rows"].size(), 1u);
      EXPECT_EQ(table["rows"][0]["cells"].size(), table["columnDefinitions"].size());
      EXPECT_TRUE(table["rows"][0]["object"]["metadata"].is_object());
    }
  }
  json bad_time = objects[4];
  EXPECT_EQ(Cells(hami::kube::kPods, bad_time)[4], "<unknown>");
}

}  // namespace
}  // namespace hami::sim::kube
