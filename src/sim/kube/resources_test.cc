// The simulated API server's workload, service, secret, RBAC and webhook-configuration
// resources (defaults, validation, generation, status), its audit log and pods/log, over HTTP.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/temp_dir.h"
#include "kube/resource.h"
#include "kube/time.h"
#include "sim/kube/api_test_support.h"
#include "sim/kube/audit.h"

namespace hami::sim::kube {
namespace {

using hami::kube::CollectionPath;
using hami::kube::ObjectPath;
using nlohmann::json;
using testing::ExpectStatus;
using testing::FromResult;
using testing::Reply;

json Deployment(const std::string& name, json selector_labels, json template_labels) {
  return {{"apiVersion", "apps/v1"},
          {"kind", "Deployment"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"selector", {{"matchLabels", std::move(selector_labels)}}},
            {"template",
             {{"metadata", {{"labels", std::move(template_labels)}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "hami:1"}}}}}}}}}}};
}

json PodWith(const std::string& name, std::initializer_list<const char*> containers) {
  json list = json::array();
  for (const char* c : containers) list.push_back({{"name", c}, {"image", "busybox"}});
  return {{"metadata", {{"name", name}}}, {"spec", {{"containers", list}}}};
}

class ResourcesTest : public testing::ServerFixture {
 protected:
  void SetUp() override { Start(); }
};

TEST_F(ResourcesTest, DeploymentGetsTheApiDefaultsGenerationAndAnEmptyStatus) {
  const std::string deployments = CollectionPath(hami::kube::kDeployments, "default");
  Reply r = Post(deployments, Deployment("d", {{"app", "x"}}, {{"app", "x"}}));
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["kind"], "Deployment");
  EXPECT_EQ(r.body["apiVersion"], "apps/v1");
  EXPECT_EQ(r.body["spec"]["replicas"], 1);
  EXPECT_EQ(r.body["spec"]["strategy"],
            json({{"type", "RollingUpdate"},
                  {"rollingUpdate", {{"maxUnavailable", "25%"}, {"maxSurge", "25%"}}}}));
  EXPECT_EQ(r.body["spec"]["revisionHistoryLimit"], 10);
  EXPECT_EQ(r.body["spec"]["progressDeadlineSeconds"], 600);
  EXPECT_EQ(r.body["spec"]["template"]["spec"]["restartPolicy"], "Always");
  EXPECT_EQ(r.body["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
  EXPECT_EQ(r.body["metadata"]["generation"], 1);
  EXPECT_EQ(r.body["status"], json::object());

  const std::string path = ObjectPath(hami::kube::kDeployments, "default", "d");
  Reply labelled = Patch(path, {{"metadata", {{"labels", {{"tier", "gpu"}}}}}});
  ASSERT_EQ(labelled.status, 200) << labelled.text;
  EXPECT_EQ(labelled.body["metadata"]["generation"], 1) << "metadata is not the desired state";
  Reply scaled = Patch(path, {{"spec", {{"replicas", 3}}}});
  ASSERT_EQ(scaled.status, 200) << scaled.text;
  EXPECT_EQ(scaled.body["metadata"]["generation"], 2);

  Reply status = Patch(path + "/status", {{"status", {{"readyReplicas", 3}}}, {"spec", nullptr}});
  ASSERT_EQ(status.status, 200) << status.text;
  EXPECT_EQ(status.body["status"]["readyReplicas"], 3);
  EXPECT_EQ(status.body["spec"]["replicas"], 3) << "the status subresource keeps the spec";
  Reply main = Patch(path, {{"status", {{"readyReplicas", 0}}}});
  EXPECT_EQ(main.body["status"]["readyReplicas"], 3) << "the main resource keeps the status";
}

TEST_F(ResourcesTest, DeploymentSelectorMustMatchTheTemplateAndCannotChange) {
  const std::string deployments = CollectionPath(hami::kube::kDeployments, "default");
  ExpectStatus(Post(deployments, Deployment("d", {{"app", "x"}}, {{"app", "y"}})), 422, "Invalid",
               "spec.template.metadata.labels: Invalid value: {\"app\":\"y\"}: `selector` does "
               "not match template `labels`");
  json no_selector = Deployment("d", {}, {{"app", "x"}});
  no_selector["spec"].erase("selector");
  ExpectStatus(Post(deployments, no_selector), 422, "Invalid", "spec.selector: Required value");
  json no_containers = Deployment("d", {{"app", "x"}}, {{"app", "x"}});
  no_containers["spec"]["template"]["spec"]["containers"] = json::array();
  ExpectStatus(Post(deployments, no_containers), 422, "Invalid",
               "spec.template.spec.containers: Required value");

  ASSERT_EQ(Post(deployments, Deployment("d", {{"app", "x"}}, {{"app", "x"}})).status, 201);
  ExpectStatus(Patch(ObjectPath(hami::kube::kDeployments, "default", "d"),
                     {{"spec",
                       {{"selector", {{"matchLabels", {{"app", "z"}}}}},
                        {"template", {{"metadata", {{"labels", {{"app", "z"}}}}}}}}}}),
               422, "Invalid", "spec.selector: Invalid value");
}

TEST_F(ResourcesTest, DaemonSetGetsItsUpdateStrategyDefaults) {
  json ds = Deployment("hami-device-plugin", {{"app", "p"}}, {{"app", "p"}});
  ds["kind"] = "DaemonSet";
  Reply r = Post(CollectionPath(hami::kube::kDaemonSets, "kube-system"), ds);
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["spec"]["updateStrategy"],
            json({{"type", "RollingUpdate"},
                  {"rollingUpdate", {{"maxUnavailable", 1}, {"maxSurge", 0}}}}));
  EXPECT_FALSE(r.body["spec"].contains("replicas"));
  EXPECT_EQ(r.body["metadata"]["namespace"], "kube-system");
}

TEST_F(ResourcesTest, ServiceGetsAClusterIpThatStaysAcrossUpdates) {
  const std::string services = CollectionPath(hami::kube::kServices, "default");
  json svc = {{"metadata", {{"name", "a"}}},
              {"spec", {{"selector", {{"app", "a"}}}, {"ports", {{{"port", 443}}}}}}};
  Reply a = Post(services, svc);
  ASSERT_EQ(a.status, 201) << a.text;
  const std::string ip = a.body["spec"]["clusterIP"];
  EXPECT_TRUE(ip.starts_with("10.96.")) << ip;
  EXPECT_EQ(a.body["spec"]["clusterIPs"], json::array({ip}));
  EXPECT_EQ(a.body["spec"]["type"], "ClusterIP");
  EXPECT_EQ(a.body["spec"]["ports"][0]["protocol"], "TCP");
  EXPECT_EQ(a.body["spec"]["ports"][0]["targetPort"], 443);
  svc["metadata"]["name"] = "b";
  Reply b = Post(services, svc);
  ASSERT_EQ(b.status, 201) << b.text;
  EXPECT_NE(b.body["spec"]["clusterIP"], ip);

  json replaced = a.body;
  replaced["spec"].erase("clusterIP");
  replaced["spec"].erase("clusterIPs");
  replaced["metadata"].erase("resourceVersion");
  Reply put = Put(ObjectPath(hami::kube::kServices, "default", "a"), replaced);
  ASSERT_EQ(put.status, 200) << put.text;
  EXPECT_EQ(put.body["spec"]["clusterIP"], ip);
  ExpectStatus(Patch(ObjectPath(hami::kube::kServices, "default", "a"),
                     {{"spec", {{"clusterIP", "10.96.9.9"}}}}),
               422, "Invalid", "may not change once set");

  json headless = {{"metadata", {{"name", "h"}}}, {"spec", {{"clusterIP", "None"}}}};
  Reply h = Post(services, headless);
  ASSERT_EQ(h.status, 201) << h.text;
  EXPECT_EQ(h.body["spec"]["clusterIP"], "None");
  ExpectStatus(Post(services, {{"metadata", {{"name", "p"}}}, {"spec", json::object()}}), 422,
               "Invalid", "spec.ports: Required value");
}

TEST_F(ResourcesTest, SecretDataMustBeBase64AndStringDataIsEncodedIntoIt) {
  const std::string secrets = CollectionPath(hami::kube::kSecrets, "default");
  ExpectStatus(
      Post(secrets, {{"metadata", {{"name", "s"}}}, {"data", {{"tls.key", "not base64!"}}}}), 400,
      "BadRequest", "data[\"tls.key\"]: illegal base64 data");
  ExpectStatus(Post(secrets, {{"metadata", {{"name", "s"}}}, {"data", {{"k", 5}}}}), 400,
               "BadRequest", "data[\"k\"]: must be a string");
  ExpectStatus(Post(secrets, {{"metadata", {{"name", "s"}}}, {"data", {{"a b", "AA=="}}}}), 422,
               "Invalid", "data[a b]");
  Reply r = Post(
      secrets,
      {{"metadata", {{"name", "s"}}}, {"data", {{"a", "YQ=="}}}, {"stringData", {{"b", "bee"}}}});
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["type"], "Opaque");
  EXPECT_EQ(r.body["data"], json({{"a", "YQ=="}, {"b", "YmVl"}}));
  EXPECT_FALSE(r.body.contains("stringData"));
}

TEST_F(ResourcesTest, ServiceAccountIsStoredAsSent) {
  Reply r =
      Post(CollectionPath(hami::kube::kServiceAccounts, "kube-system"),
           {{"metadata", {{"name", "hami-scheduler"}}}, {"automountServiceAccountToken", true}});
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["kind"], "ServiceAccount");
  EXPECT_EQ(Get(ObjectPath(hami::kube::kServiceAccounts, "kube-system", "hami-scheduler"))
                .body["automountServiceAccountToken"],
            true);
}

TEST_F(ResourcesTest, RoleRulesAreListsOfStringsWithVerbs) {
  const std::string roles = CollectionPath(hami::kube::kClusterRoles, "");
  auto role = [](json rule) {
    return json{{"metadata", {{"name", "r"}}}, {"rules", json::array({std::move(rule)})}};
  };
  ExpectStatus(Post(roles, role({{"apiGroups", {""}}, {"resources", {"pods"}}})), 422, "Invalid",
               "rules[0].verbs: Required value");
  ExpectStatus(Post(roles, role({{"apiGroups", {""}}, {"resources", {"pods"}}, {"verbs", "get"}})),
               422, "Invalid", "rules[0].verbs: Invalid value: must be a list of strings");
  ExpectStatus(
      Post(roles, role({{"apiGroups", {""}}, {"resources", {"pods", 3}}, {"verbs", {"get"}}})), 422,
      "Invalid", "rules[0].resources[1]");
  ExpectStatus(Post(roles, role({{"resources", {"pods"}}, {"verbs", {"get"}}})), 422, "Invalid",
               "rules[0].apiGroups: Required value");
  ExpectStatus(Post(CollectionPath(hami::kube::kRoles, "default"),
                    role({{"nonResourceURLs", {"/metrics"}}, {"verbs", {"get"}}})),
               422, "Invalid", "namespaced rules cannot apply to non-resource URLs");
  Reply ok = Post(
      roles,
      role({{"apiGroups", {""}}, {"resources", {"pods"}}, {"verbs", {"get", "list", "watch"}}}));
  ASSERT_EQ(ok.status, 201) << ok.text;
  EXPECT_EQ(Post(roles, {{"metadata", {{"name", "m"}}},
                         {"rules", {{{"nonResourceURLs", {"/metrics"}}, {"verbs", {"get"}}}}}})
                .status,
            201);
}

TEST_F(ResourcesTest, BindingsNeedAValidRoleRefThatCannotChange) {
  const std::string bindings = CollectionPath(hami::kube::kClusterRoleBindings, "");
  json b = {{"metadata", {{"name", "b"}}},
            {"roleRef",
             {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "ClusterRole"}, {"name", "r"}}},
            {"subjects", {{{"kind", "ServiceAccount"}, {"name", "hami"}}}}};
  ExpectStatus(Post(bindings, b), 422, "Invalid", "subjects[0].namespace: Required value");
  b["subjects"][0]["namespace"] = "kube-system";
  b["subjects"].push_back({{"kind", "User"}, {"name", "alice"}});
  Reply ok = Post(bindings, b);
  ASSERT_EQ(ok.status, 201) << ok.text;
  EXPECT_EQ(ok.body["subjects"][1]["apiGroup"], "rbac.authorization.k8s.io");
  ExpectStatus(Patch(ObjectPath(hami::kube::kClusterRoleBindings, "", "b"),
                     {{"roleRef", {{"name", "other"}}}}),
               422, "Invalid", "cannot change roleRef");
  json rb = b;
  rb["roleRef"]["kind"] = "Role";
  EXPECT_EQ(Post(CollectionPath(hami::kube::kRoleBindings, "default"), rb).status, 201);
  ExpectStatus(Post(bindings, rb), 422, "Invalid", "roleRef.kind: Unsupported value: \"Role\"");
}

json WebhookConfiguration(json hook) {
  return {{"metadata", {{"name", "hami-webhook"}}}, {"webhooks", json::array({std::move(hook)})}};
}

json Hook() {
  return {{"name", "vgpu.hami.io"},
          {"clientConfig", {{"url", "https://127.0.0.1:9443/webhook"}}},
          {"rules",
           {{{"operations", {"CREATE"}},
             {"apiGroups", {""}},
             {"apiVersions", {"v1"}},
             {"resources", {"pods"}}}}},
          {"sideEffects", "None"},
          {"admissionReviewVersions", {"v1"}}};
}

TEST_F(ResourcesTest, WebhookConfigurationIsDefaultedAndValidated) {
  const std::string path = CollectionPath(hami::kube::kMutatingWebhookConfigurations, "");
  Reply r = Post(path, WebhookConfiguration(Hook()));
  ASSERT_EQ(r.status, 201) << r.text;
  const json& h = r.body["webhooks"][0];
  EXPECT_EQ(h["failurePolicy"], "Fail");
  EXPECT_EQ(h["matchPolicy"], "Equivalent");
  EXPECT_EQ(h["timeoutSeconds"], 10);
  EXPECT_EQ(h["namespaceSelector"], json::object());
  EXPECT_EQ(h["objectSelector"], json::object());
  EXPECT_EQ(h["reinvocationPolicy"], "Never");
  EXPECT_EQ(h["rules"][0]["scope"], "*");
  EXPECT_EQ(r.body["metadata"]["generation"], 1);

  auto bad = [&](json hook, const std::string& message) {
    json config = WebhookConfiguration(std::move(hook));
    config["metadata"]["name"] = "bad";
    ExpectStatus(Post(path, config), 422, "Invalid", message);
  };
  json h1 = Hook();
  h1.erase("sideEffects");
  bad(h1, "webhooks[0].sideEffects: Required value");
  json h2 = Hook();
  h2["admissionReviewVersions"] = {"v1beta1"};
  bad(h2, "webhooks[0].admissionReviewVersions: Invalid value");
  json h3 = Hook();
  h3["name"] = "vgpu";
  bad(h3, "at least three segments");
  json h4 = Hook();
  h4["clientConfig"] = {{"url", "ftp://x"}};
  bad(h4, "'https' is the only allowed URL scheme");
  json h5 = Hook();
  h5["clientConfig"]["service"] = {{"name", "s"}, {"namespace", "n"}};
  bad(h5, "exactly one of url or service");
  json h6 = Hook();
  h6["timeoutSeconds"] = 31;
  bad(h6, "between 1 and 30 seconds");
  json h7 = Hook();
  h7["objectSelector"] = {{"matchExpressions", {{{"key", "a"}, {"operator", "Near"}}}}};
  bad(h7, "webhooks[0].objectSelector.matchExpressions[0].operator: Unsupported value");
  json h8 = Hook();
  h8["rules"][0]["operations"] = {"READ"};
  bad(h8, "webhooks[0].rules[0].operations: Unsupported value: \"READ\"");
  json h9 = Hook();
  h9["clientConfig"]["caBundle"] = "%%";
  bad(h9, "caBundle: Invalid value: must be base64");
}

// ---- audit -----------------------------------------------------------------------------------

TEST(AuditVerb, FollowsTheRbacNames) {
  EXPECT_EQ(AuditVerb("GET", false, false), "get");
  EXPECT_EQ(AuditVerb("HEAD", true, false), "list");
  EXPECT_EQ(AuditVerb("GET", true, true), "watch");
  EXPECT_EQ(AuditVerb("POST", true, false), "create");
  EXPECT_EQ(AuditVerb("PUT", false, false), "update");
  EXPECT_EQ(AuditVerb("PATCH", false, false), "patch");
  EXPECT_EQ(AuditVerb("DELETE", false, false), "delete");
  EXPECT_EQ(AuditVerb("DELETE", true, false), "deletecollection");
  EXPECT_EQ(AuditVerb("OPTIONS", true, false), "options");
}

TEST(AuditUserAgent, IsTheHeaderUpToTheFirstSlashOrSpace) {
  EXPECT_EQ(AuditUserAgent("kubectl/v1.32.4 (linux/amd64) kubernetes/abc"), "kubectl");
  EXPECT_EQ(AuditUserAgent("hami-scheduler"), "hami-scheduler");
  EXPECT_EQ(AuditUserAgent("hami-monitor hami-cpp"), "hami-monitor");
  EXPECT_EQ(AuditUserAgent(""), "");
}

TEST(AuditLog, KeepsTheLastEntriesAndCountsTheDropped) {
  AuditLog log(2);
  for (const char* name : {"a", "b", "c"}) log.Record({"x", "get", "", "pods", "", "ns", name});
  json j = log.ToJson();
  ASSERT_EQ(j["requests"].size(), 2u);
  EXPECT_EQ(j["requests"][0]["name"], "b");
  EXPECT_EQ(j["dropped"], 1);
  log.Clear();
  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(log.dropped(), 0u);
}

json Entry(const std::string& verb, const std::string& group, const std::string& resource,
           const std::string& sub, const std::string& ns, const std::string& name,
           const std::string& agent = "hami-scheduler") {
  return {{"user_agent", agent}, {"verb", verb},    {"group", group}, {"resource", resource},
          {"subresource", sub},  {"namespace", ns}, {"name", name}};
}

TEST_F(ResourcesTest, AuditRecordsEveryResourceRequestWithItsRbacAttributes) {
  Start({}, "hami-scheduler/0.1 (linux)");
  const std::string pods = CollectionPath(hami::kube::kPods, "default");
  ASSERT_EQ(Post(pods, PodWith("p", {"main"})).status, 201);
  Get(pods);
  Get(ObjectPath(hami::kube::kPods, "default", "p"));
  Get(CollectionPath(hami::kube::kPods, "") + "?watch=true&timeoutSeconds=1");
  Patch(ObjectPath(hami::kube::kPods, "default", "p"), {{"metadata", {{"labels", {{"a", "b"}}}}}});
  Put(ObjectPath(hami::kube::kPods, "default", "p", "status"), PodWith("p", {"main"}));
  Post(ObjectPath(hami::kube::kPods, "default", "p", "binding"),
       {{"metadata", {{"name", "p"}}}, {"target", {{"name", "n1"}}}});
  Get(ObjectPath(hami::kube::kNodes, "", "n1"));  // 404: recorded all the same
  Get(ObjectPath(hami::kube::kLeases, "kube-system", "hami"));
  Get(ObjectPath(hami::kube::kNamespaces, "", "default"));
  Delete(ObjectPath(hami::kube::kPods, "default", "p"));
  Delete(pods);
  // Not resource requests: never recorded.
  Get("/api");
  Get("/apis/apps/v1");
  Get("/version");
  Get("/healthz");
  Get("/sim/faults");

  Reply audit = Get("/sim/audit");
  ASSERT_EQ(audit.status, 200) << audit.text;
  const std::string lease_group = "coordination.k8s.io";
  json expected = json::array({
      Entry("create", "", "pods", "", "default", ""),
      Entry("list", "", "pods", "", "default", ""),
      Entry("get", "", "pods", "", "default", "p"),
      Entry("watch", "", "pods", "", "", ""),
      Entry("patch", "", "pods", "", "default", "p"),
      Entry("update", "", "pods", "status", "default", "p"),
      Entry("create", "", "pods", "binding", "default", "p"),
      Entry("get", "", "nodes", "", "", "n1"),
      Entry("get", lease_group, "leases", "", "kube-system", "hami"),
      Entry("get", "", "namespaces", "", "default", "default"),
      Entry("delete", "", "pods", "", "default", "p"),
      Entry("deletecollection", "", "pods", "", "default", ""),
  });
  EXPECT_EQ(audit.body["requests"], expected);
  EXPECT_EQ(audit.body["dropped"], 0);

  EXPECT_EQ(Get("/sim/audit?user_agent=kubectl").body["requests"], json::array());
  EXPECT_EQ(Get("/sim/audit?user_agent=hami-scheduler").body["requests"].size(), expected.size());
  ASSERT_EQ(Delete("/sim/audit").status, 200);
  EXPECT_EQ(Get("/sim/audit").body["requests"], json::array());
  ExpectStatus(FromResult(client_->Put("/sim/audit", "{}", "application/json")), 405,
               "MethodNotAllowed");
}

TEST_F(ResourcesTest, AuditIsBoundedAndCanBeTurnedOff) {
  ApiServerOptions bounded;
  bounded.audit_capacity = 2;
  Start(bounded);
  for (const char* name : {"a", "b", "c"}) Get(ObjectPath(hami::kube::kPods, "default", name));
  Reply audit = Get("/sim/audit");
  ASSERT_EQ(audit.body["requests"].size(), 2u);
  EXPECT_EQ(audit.body["requests"][1], Entry("get", "", "pods", "", "default", "c", "hami-test"));
  EXPECT_EQ(audit.body["dropped"], 1);

  ApiServerOptions off;
  off.audit = false;
  Start(off);
  Get(ObjectPath(hami::kube::kPods, "default", "a"));
  EXPECT_EQ(Get("/sim/audit").body["requests"], json::array());
}

// ---- pods/log --------------------------------------------------------------------------------

// The kubelet's layout: <dir>/<namespace>_<pod>_<uid>/<container>/<restart count>.log, each
// file in the CRI log format as containerd writes it.
class PodLogTest : public testing::ServerFixture {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    ApiServerOptions o;
    o.pod_log_dir = dir_.path();
    Start(o);
  }
  // Creates the pod; its uid.
  std::string CreatePod(const std::string& name, std::initializer_list<const char*> containers) {
    Reply r = Post(CollectionPath(hami::kube::kPods, "default"), PodWith(name, containers));
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body["metadata"].value("uid", "");
  }
  void WriteLog(const std::string& pod, const std::string& uid, const std::string& container,
                int restart, const std::string& text) {
    const std::string dir = dir_.File("default_" + pod + "_" + uid + "/" + container);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/" + std::to_string(restart) + ".log") << text;
  }
  std::string LogPath(const std::string& pod, const std::string& query = "") {
    return ObjectPath(hami::kube::kPods, "default", pod, "log") + query;
  }
  TempDir dir_{"hami-pod-logs"};
};

constexpr char kThreeLines[] =
    "2026-12-07T10:00:00.123456789Z stdout F one\n"
    "2026-12-07T10:00:01.5Z stderr F two\n"
    "2026-12-07T10:00:02Z stdout P th\n"
    "2026-12-07T10:00:02.000000001Z stdout F ree\n";

TEST_F(PodLogTest, ServesTheContainersOutputDecodedFromTheCriLog) {
  const std::string uid = CreatePod("p", {"main"});
  WriteLog("p", uid, "main", 0, kThreeLines);
  Reply r = Get(LogPath("p"));
  EXPECT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.text, "one\ntwo\nthree\n");
  EXPECT_EQ(r.content_type, "text/plain");
  EXPECT_EQ(Get(LogPath("p", "?container=main&tailLines=2")).text, "two\nthree\n");
  EXPECT_EQ(Get(LogPath("p", "?tailLines=0")).text, "");
  EXPECT_EQ(Get(LogPath("p", "?tailLines=9")).text, "one\ntwo\nthree\n");
  EXPECT_EQ(Get(LogPath("p", "?limitBytes=5")).text, "one\nt");
  EXPECT_EQ(Get(LogPath("p", "?follow=true")).text, "one\ntwo\nthree\n");
  EXPECT_EQ(Get(LogPath("p", "?timestamps=true")).text,
            "2026-12-07T10:00:00.123456789Z one\n"
            "2026-12-07T10:00:01.5Z two\n"
            "2026-12-07T10:00:02Z three\n");
  EXPECT_EQ(Get(LogPath("p", "?timestamps=true&tailLines=1")).text, "2026-12-07T10:00:02Z three\n");
  ExpectStatus(Get(LogPath("p", "?tailLines=x")), 400, "BadRequest", "tailLines");
  ExpectStatus(Get(LogPath("p", "?timestamps=maybe")), 400, "BadRequest", "timestamps");
}

TEST_F(PodLogTest, SkipsMalformedLinesOfTheFile) {
  const std::string uid = CreatePod("p", {"main"});
  WriteLog("p", uid, "main", 0,
           "2026-12-07T10:00:00Z stdout F kept\n"
           "not a cri line\n"
           "2026-12-07T10:00:00Z stdin F wrong stream\n"
           "2026-12-07T10:00:00Z stdout Q wrong tag\n"
           "\n"
           "2026-12-07T10:00:01Z stdout F also kept\n");
  Reply r = Get(LogPath("p"));
  EXPECT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.text, "kept\nalso kept\n");
}

TEST_F(PodLogTest, CurrentIsTheHighestRestartAndPreviousTheOneBeforeIt) {
  const std::string uid = CreatePod("p", {"main"});
  WriteLog("p", uid, "main", 0, "2026-12-07T10:00:00Z stdout F first run\n");
  ExpectStatus(Get(LogPath("p", "?previous=true")), 400, "BadRequest",
               "previous terminated container \"main\" in pod \"p\" not found");
  WriteLog("p", uid, "main", 2, "2026-12-07T10:02:00Z stdout F third run\n");
  EXPECT_EQ(Get(LogPath("p")).text, "third run\n");
  EXPECT_EQ(Get(LogPath("p", "?previous=true")).text, "first run\n")
      << "a missing restart count is skipped";
  WriteLog("p", uid, "main", 1, "2026-12-07T10:01:00Z stdout F second run\n");
  WriteLog("p", uid, "main", 10, "2026-12-07T10:10:00Z stdout F eleventh run\n");
  EXPECT_EQ(Get(LogPath("p")).text, "eleventh run\n") << "counts compare as numbers";
  EXPECT_EQ(Get(LogPath("p", "?previous=true")).text, "third run\n");
  EXPECT_EQ(Get(LogPath("p", "?previous=false")).text, "eleventh run\n");
}

TEST_F(PodLogTest, RecreatedPodDoesNotShowItsPredecessorsOutput) {
  const std::string first = CreatePod("p", {"main"});
  WriteLog("p", first, "main", 0, "2026-12-07T10:00:00Z stdout F from the first pod\n");
  EXPECT_EQ(Get(LogPath("p")).text, "from the first pod\n");
  ASSERT_EQ(Delete(ObjectPath(hami::kube::kPods, "default", "p")).status, 200);
  const std::string second = CreatePod("p", {"main"});
  ASSERT_NE(first, second);
  ExpectStatus(Get(LogPath("p")), 400, "BadRequest",
               "container \"main\" in pod \"p\" is waiting to start: no log");
  ExpectStatus(Get(LogPath("p", "?previous=true")), 400, "BadRequest",
               "previous terminated container \"main\" in pod \"p\" not found");
  WriteLog("p", second, "main", 0, "2026-12-07T11:00:00Z stdout F from the second pod\n");
  EXPECT_EQ(Get(LogPath("p")).text, "from the second pod\n");
}

TEST_F(PodLogTest, SinceSecondsAndSinceTimeLeaveOutOlderEntries) {
  const std::string uid = CreatePod("p", {"main"});
  const auto now = std::chrono::system_clock::now();
  WriteLog("p", uid, "main", 0,
           "2020-01-01T00:00:00Z stdout F long ago\n" +
               hami::kube::FormatMicroTime(now - std::chrono::hours(1)) +
               " stdout F an hour ago\n" + hami::kube::FormatMicroTime(now) +
               " stderr F just now\n");
  EXPECT_EQ(Get(LogPath("p", "?sinceSeconds=600")).text, "just now\n");
  EXPECT_EQ(Get(LogPath("p", "?sinceSeconds=7200")).text, "an hour ago\njust now\n");
  const std::string since =
      hami::kube::FormatTime(now - std::chrono::hours(1) - std::chrono::seconds(1));
  EXPECT_EQ(Get(LogPath("p", "?sinceTime=" + since)).text, "an hour ago\njust now\n");
  ExpectStatus(Get(LogPath("p", "?sinceSeconds=0")), 422, "Invalid",
               "PodLogOptions \"p\" is invalid: sinceSeconds: Invalid value: 0: must be greater "
               "than 0");
  ExpectStatus(Get(LogPath("p", "?sinceSeconds=1&sinceTime=" + since)), 422, "Invalid",
               "at most one of `sinceTime` or `sinceSeconds` may be specified");
  ExpectStatus(Get(LogPath("p", "?sinceTime=yesterday")), 400, "BadRequest",
               "sinceTime: invalid value \"yesterday\"");
}

TEST_F(PodLogTest, ContainerMustBeNamedWhenThePodHasSeveral) {
  const std::string uid = CreatePod("p", {"a", "b"});
  WriteLog("p", uid, "b", 0, "2026-12-07T10:00:00Z stdout F from b\n");
  ExpectStatus(Get(LogPath("p")), 400, "BadRequest",
               "a container name must be specified for pod p, choose one of: [a b]");
  EXPECT_EQ(Get(LogPath("p", "?container=b")).text, "from b\n");
  ExpectStatus(Get(LogPath("p", "?container=c")), 400, "BadRequest",
               "container c is not valid for pod p");
  ExpectStatus(Get(LogPath("p", "?container=a")), 400, "BadRequest",
               "container \"a\" in pod \"p\" is waiting to start");
  ExpectStatus(Get(LogPath("q")), 404, "NotFound", "pods \"q\" not found");
  ExpectStatus(FromResult(client_->Post(LogPath("p"), "{}", "application/json")), 405,
               "MethodNotAllowed");
}

TEST_F(PodLogTest, ContainerNameThatIsNotOnePathComponentReadsNoFile) {
  const std::string uid = CreatePod("p", {"..", "../main"});
  WriteLog("p", uid, "main", 0, "2026-12-07T10:00:00Z stdout F not for ../main\n");
  for (const char* name : {"..", "../main"}) {
    ExpectStatus(Get(LogPath("p", std::string("?container=") + name)), 400, "BadRequest",
                 "is waiting to start: no log (the container name is not a file name)");
  }
}

TEST_F(ResourcesTest, PodLogWithoutALogDirectoryEveryContainerIsWaiting) {
  ASSERT_EQ(Post(CollectionPath(hami::kube::kPods, "default"), PodWith("p", {"main"})).status, 201);
  ExpectStatus(Get(ObjectPath(hami::kube::kPods, "default", "p", "log")), 400, "BadRequest",
               "container \"main\" in pod \"p\" is waiting to start: no log (the server has no pod "
               "log directory)");
}

}  // namespace
}  // namespace hami::sim::kube
