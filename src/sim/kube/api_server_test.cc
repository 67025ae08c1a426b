// The simulated API server over real HTTP: every verb's success and failure, watch semantics,
// pagination, faults, request framing and shutdown.
#include "sim/kube/api_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/cleanup.h"
#include "common/temp_dir.h"
#include "kube/resource.h"
#include "sim/kube/discovery.h"
#include "sim/kube/store.h"
#include "support/subprocess.h"

namespace hami::sim::kube {
namespace {

using hami::kube::kConfigMaps;
using hami::kube::kLeases;
using hami::kube::kNamespaces;
using hami::kube::kNodes;
using hami::kube::kPods;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kTableAccept[] =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s."
    "io,application/json";

struct Reply {
  int status = -1;
  std::string text;
  json body;
  httplib::Headers headers;
  std::string Header(const std::string& key) const {
    auto it = headers.find(key);
    return it == headers.end() ? "" : it->second;
  }
  std::string Rv() const { return body["metadata"].value("resourceVersion", ""); }
};

Reply FromResult(const httplib::Result& r) {
  Reply out;
  if (!r) {
    out.text = "transport error " + httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.text = r->body;
  out.headers = r->headers;
  out.body = json::parse(r->body, nullptr, false);
  return out;
}

json Pod(const std::string& name, json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"labels", std::move(labels)}}},
          {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox:1.36"}}}}}}};
}

json Node(const std::string& name) {
  return {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
}

json ConfigMap(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}}},
          {"data", {{"k", "v"}}}};
}

// A watch stream read on its own thread, one event per line.
class Watch {
 public:
  Watch(int port, std::string path, httplib::Headers headers = {}) {
    thread_ = std::thread([this, port, path = std::move(path), headers = std::move(headers)] {
      httplib::Client client("127.0.0.1", port);
      client.set_read_timeout(60, 0);
      {
        std::lock_guard lock(mu_);
        if (closing_) return Finish(false);
        client_ = &client;
      }
      auto res = client.Get(
          path, headers,
          [this](const httplib::Response& r) {
            std::lock_guard lock(mu_);
            status_ = r.status;
            content_type_ = r.get_header_value("Content-Type");
            return true;
          },
          [this](const char* data, size_t n) {
            std::lock_guard lock(mu_);
            buffer_.append(data, n);
            for (size_t nl; (nl = buffer_.find('\n')) != std::string::npos;) {
              events_.push_back(json::parse(buffer_.substr(0, nl), nullptr, false));
              buffer_.erase(0, nl + 1);
            }
            cv_.notify_all();
            return !closing_;
          });
      Finish(bool(res));
    });
  }
  ~Watch() { Close(); }

  void Close() {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      if (client_ != nullptr) client_->stop();
    }
    if (thread_.joinable()) thread_.join();
  }

  // The next event, or a null json after `timeout` or at the end of the stream.
  json Next(milliseconds timeout = milliseconds(10000)) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return !events_.empty() || ended_; });
    if (events_.empty()) return json();
    json e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  // The next event that is not a BOOKMARK.
  json NextObjectEvent(milliseconds timeout = milliseconds(10000)) {
    for (;;) {
      json e = Next(timeout);
      if (e.is_null() || e.value("type", "") != "BOOKMARK") return e;
    }
  }
  // Whether the stream ended within `timeout`; `complete` tells whether it ended with the
  // final chunk (a clean end) rather than a dropped connection.
  bool WaitEnded(milliseconds timeout, bool* complete = nullptr) {
    std::unique_lock lock(mu_);
    const bool ended = cv_.wait_for(lock, timeout, [this] { return ended_; });
    if (complete != nullptr) *complete = complete_;
    return ended;
  }
  bool Pending() {
    std::lock_guard lock(mu_);
    return !events_.empty();
  }
  int status() {
    std::lock_guard lock(mu_);
    return status_;
  }
  std::string content_type() {
    std::lock_guard lock(mu_);
    return content_type_;
  }

 private:
  void Finish(bool complete) {
    std::lock_guard lock(mu_);
    client_ = nullptr;
    ended_ = true;
    complete_ = complete;
    cv_.notify_all();
  }

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  httplib::Client* client_ = nullptr;
  bool closing_ = false;
  bool ended_ = false;
  bool complete_ = false;
  int status_ = -1;
  std::string content_type_;
  std::string buffer_;
  std::deque<json> events_;
};

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(ApiServerOptions{}); }

  void Start(ApiServerOptions options) {
    client_.reset();
    server_.reset();
    auto s = ApiServer::Start(options);
    ASSERT_TRUE(s.ok()) << s.error().message();
    server_ = std::move(*s);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(30, 0);
  }

  Reply Get(const std::string& path, const std::string& accept = "application/json") {
    return FromResult(client_->Get(path, {{"Accept", accept}}));
  }
  Reply Post(const std::string& path, const json& body) {
    return FromResult(client_->Post(path, body.dump(), "application/json"));
  }
  Reply PostText(const std::string& path, const std::string& body) {
    return FromResult(client_->Post(path, body, "application/json"));
  }
  Reply Put(const std::string& path, const json& body) {
    return FromResult(client_->Put(path, body.dump(), "application/json"));
  }
  Reply Patch(const std::string& path, const json& body,
              const std::string& type = "application/merge-patch+json") {
    return FromResult(client_->Patch(path, body.dump(), type));
  }
  Reply Delete(const std::string& path, const std::string& body = "") {
    if (body.empty()) return FromResult(client_->Delete(path));
    return FromResult(client_->Delete(path, body, "application/json"));
  }

  std::string PodPath(const std::string& name, const std::string& sub = "") {
    return hami::kube::ObjectPath(kPods, "default", name, sub);
  }
  std::string Pods() { return hami::kube::CollectionPath(kPods, "default"); }
  Reply CreatePod(const std::string& name, json labels = json::object()) {
    return Post(Pods(), Pod(name, std::move(labels)));
  }
  int WatchPort() const { return server_->port(); }

  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

void ExpectStatus(const Reply& r, int code, const std::string& reason) {
  EXPECT_EQ(r.status, code) << r.text;
  EXPECT_EQ(r.body.value("kind", ""), "Status") << r.text;
  EXPECT_EQ(r.body.value("apiVersion", ""), "v1") << r.text;
  EXPECT_EQ(r.body.value("status", ""), "Failure") << r.text;
  EXPECT_EQ(r.body.value("reason", ""), reason) << r.text;
  EXPECT_EQ(r.body.value("code", 0), code) << r.text;
  EXPECT_TRUE(r.body.contains("metadata")) << r.text;
}

// --- create, get -------------------------------------------------------------------------

TEST_F(ApiServerTest, CreateAnswers201WithUidTimestampVersionKindAndApiVersion) {
  Reply r = CreatePod("a");
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["kind"], "Pod");
  EXPECT_EQ(r.body["apiVersion"], "v1");
  const json& m = r.body["metadata"];
  EXPECT_EQ(m["namespace"], "default");
  EXPECT_EQ(m["uid"].get<std::string>().size(), 36u);
  EXPECT_EQ(m["uid"].get<std::string>()[14], '4');
  EXPECT_TRUE(m["creationTimestamp"].get<std::string>().ends_with("Z"));
  EXPECT_TRUE(m["resourceVersion"].is_string());
  EXPECT_EQ(m["resourceVersion"].get<std::string>(), std::to_string(server_->resource_version()));

  Reply g = Get(PodPath("a"));
  ASSERT_EQ(g.status, 200);
  EXPECT_EQ(g.body, r.body);
}

TEST_F(ApiServerTest, PodCreateResetsStatusToPendingAndFillsDefaults) {
  json pod = Pod("p");
  pod["status"] = {{"phase", "Running"}, {"podIP", "10.0.0.1"}};
  Reply r = Post(Pods(), pod);
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["status"], (json{{"phase", "Pending"}}));
  EXPECT_EQ(r.body["spec"]["schedulerName"], "default-scheduler");
  EXPECT_EQ(r.body["spec"]["restartPolicy"], "Always");
  EXPECT_EQ(r.body["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
}

TEST_F(ApiServerTest, APodsLimitsBecomeTheRequestsItDoesNotName) {
  json pod = Pod("p");
  pod["spec"]["containers"][0]["resources"] = {
      {"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}, {"cpu", "2"}}},
      {"requests", {{"cpu", "1"}}}};
  Reply r = Post(Pods(), pod);
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["spec"]["containers"][0]["resources"]["requests"],
            (json{{"cpu", "1"}, {"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}}));
  EXPECT_FALSE(
      Post(Pods(), Pod("q")).body["spec"]["containers"][0]["resources"].contains("requests"));
}

TEST_F(ApiServerTest, CreateOfAnExistingNameIs409AlreadyExists) {
  ASSERT_EQ(CreatePod("dup").status, 201);
  Reply r = CreatePod("dup");
  ExpectStatus(r, 409, "AlreadyExists");
  EXPECT_EQ(r.body["message"], "pods \"dup\" already exists");
  EXPECT_EQ(r.body["details"]["name"], "dup");
  EXPECT_EQ(r.body["details"]["kind"], "pods");
}

TEST_F(ApiServerTest, CreateInAMissingNamespaceIs404) {
  Reply r = Post(hami::kube::CollectionPath(kPods, "nowhere"), Pod("a"));
  ExpectStatus(r, 404, "NotFound");
  EXPECT_EQ(r.body["message"], "namespaces \"nowhere\" not found");
}

TEST_F(ApiServerTest, CreateWithAnotherNamespaceInTheBodyIs400) {
  json pod = Pod("a");
  pod["metadata"]["namespace"] = "kube-system";
  ExpectStatus(Post(Pods(), pod), 400, "BadRequest");
}

TEST_F(ApiServerTest, CreateWithoutNameOrWithABadNameIs422Invalid) {
  json pod = Pod("x");
  pod["metadata"].erase("name");
  ExpectStatus(Post(Pods(), pod), 422, "Invalid");
  Reply bad = CreatePod("Bad_Name");
  ExpectStatus(bad, 422, "Invalid");
  EXPECT_NE(bad.body["message"].get<std::string>().find("metadata.name"), std::string::npos);
}

TEST_F(ApiServerTest, PodWithoutContainersIs422Invalid) {
  json pod = Pod("x");
  pod["spec"] = json::object();
  Reply r = Post(Pods(), pod);
  ExpectStatus(r, 422, "Invalid");
  EXPECT_EQ(r.body["message"], "Pod \"x\" is invalid: spec.containers: Required value");
}

TEST_F(ApiServerTest, GenerateNameMakesDistinctNames) {
  json pod = Pod("");
  pod["metadata"].erase("name");
  pod["metadata"]["generateName"] = "web-";
  Reply a = Post(Pods(), pod);
  Reply b = Post(Pods(), pod);
  ASSERT_EQ(a.status, 201) << a.text;
  ASSERT_EQ(b.status, 201) << b.text;
  const std::string na = a.body["metadata"]["name"], nb = b.body["metadata"]["name"];
  EXPECT_TRUE(na.starts_with("web-")) << na;
  EXPECT_EQ(na.size(), 9u);
  EXPECT_NE(na, nb);
}

TEST_F(ApiServerTest, GetOfAMissingObjectIs404WithAStatusBody) {
  Reply r = Get(PodPath("ghost"));
  ExpectStatus(r, 404, "NotFound");
  EXPECT_EQ(r.body["message"], "pods \"ghost\" not found");
  EXPECT_EQ(r.body["details"]["name"], "ghost");
  Reply lease = Get(hami::kube::ObjectPath(kLeases, "default", "l"));
  EXPECT_EQ(lease.body["message"], "leases.coordination.k8s.io \"l\" not found");
  EXPECT_EQ(lease.body["details"]["group"], "coordination.k8s.io");
}

TEST_F(ApiServerTest, ResourceVersionIncreasesAcrossKinds) {
  std::vector<int64_t> rvs;
  rvs.push_back(std::stoll(CreatePod("a").Rv()));
  rvs.push_back(std::stoll(Post("/api/v1/nodes", Node("n1")).Rv()));
  rvs.push_back(
      std::stoll(Post(hami::kube::CollectionPath(kConfigMaps, "default"), ConfigMap("c")).Rv()));
  json lease = {{"metadata", {{"name", "l"}}}, {"spec", {{"holderIdentity", "me"}}}};
  rvs.push_back(std::stoll(Post(hami::kube::CollectionPath(kLeases, "default"), lease).Rv()));
  rvs.push_back(std::stoll(Patch(PodPath("a"), {{"metadata", {{"labels", {{"x", "1"}}}}}}).Rv()));
  for (size_t i = 1; i < rvs.size(); ++i) EXPECT_GT(rvs[i], rvs[i - 1]);
  EXPECT_EQ(rvs.back(), server_->resource_version());
}

TEST_F(ApiServerTest, TimestampsAreParsedAndWrittenInTheApiForm) {
  json lease = {{"metadata", {{"name", "t"}}},
                {"spec",
                 {{"holderIdentity", "a"},
                  {"renewTime", "2026-12-01T09:15:39.169933+00:00"},
                  {"acquireTime", "2026-12-01T11:15:39.5+02:00"}}}};
  Reply r = Post(hami::kube::CollectionPath(kLeases, "default"), lease);
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["spec"]["renewTime"], "2026-12-01T09:15:39.169933Z");
  EXPECT_EQ(r.body["spec"]["acquireTime"], "2026-12-01T09:15:39.500000Z");
  lease["metadata"]["name"] = "bad";
  lease["spec"]["renewTime"] = "yesterday";
  Reply bad = Post(hami::kube::CollectionPath(kLeases, "default"), lease);
  ExpectStatus(bad, 400, "BadRequest");
  EXPECT_NE(bad.body["message"].get<std::string>().find("spec.renewTime"), std::string::npos);
  ASSERT_EQ(Post("/api/v1/nodes", Node("n")).status, 201);
  json conditions = {{"status",
                      {{"conditions",
                        {{{"type", "Ready"},
                          {"status", "True"},
                          {"lastHeartbeatTime", "2026-12-01T10:00:00.9-01:00"}}}}}}};
  Reply node = Patch("/api/v1/nodes/n/status", conditions);
  ASSERT_EQ(node.status, 200) << node.text;
  EXPECT_EQ(node.body["status"]["conditions"][0]["lastHeartbeatTime"], "2026-12-01T11:00:00Z");
}

// --- update ------------------------------------------------------------------------------

TEST_F(ApiServerTest, UpdateWithAStaleResourceVersionIs409WithTheApiMessage) {
  json lease = {{"metadata", {{"name", "lock"}}}, {"spec", {{"holderIdentity", "a"}}}};
  const std::string path = hami::kube::ObjectPath(kLeases, "default", "lock");
  Reply created = Post(hami::kube::CollectionPath(kLeases, "default"), lease);
  ASSERT_EQ(created.status, 201);
  json update = created.body;
  update["spec"]["holderIdentity"] = "b";
  Reply first = Put(path, update);
  ASSERT_EQ(first.status, 200) << first.text;
  EXPECT_NE(first.Rv(), created.Rv());
  update["spec"]["holderIdentity"] = "c";  // still carries the first version
  Reply stale = Put(path, update);
  ExpectStatus(stale, 409, "Conflict");
  EXPECT_EQ(stale.body["message"],
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"lock\": the object has "
            "been modified; please apply your changes to the latest version and try again");
  EXPECT_EQ(Get(path).body["spec"]["holderIdentity"], "b");
}

TEST_F(ApiServerTest, UpdateWithoutResourceVersionIsUnconditional) {
  Reply created = Post("/api/v1/nodes", Node("n"));
  json update = Node("n");
  update["metadata"]["labels"] = {{"zone", "a"}};
  Reply r = Put("/api/v1/nodes/n", update);
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["metadata"]["labels"]["zone"], "a");
  EXPECT_EQ(r.body["metadata"]["uid"], created.body["metadata"]["uid"]);
  EXPECT_EQ(r.body["metadata"]["creationTimestamp"], created.body["metadata"]["creationTimestamp"]);
}

TEST_F(ApiServerTest, UpdateOfAMissingObjectIs404ButCreatesALease) {
  ExpectStatus(Put(PodPath("none"), Pod("none")), 404, "NotFound");
  json lease = {{"metadata", {{"name", "new"}}}, {"spec", {{"holderIdentity", "x"}}}};
  Reply r = Put(hami::kube::ObjectPath(kLeases, "default", "new"), lease);
  EXPECT_EQ(r.status, 201) << r.text;
}

TEST_F(ApiServerTest, UpdateWithAnotherNameIs400) {
  ASSERT_EQ(CreatePod("a").status, 201);
  ExpectStatus(Put(PodPath("a"), Pod("b")), 400, "BadRequest");
}

TEST_F(ApiServerTest, NoOpUpdateAndPatchKeepTheVersionAndEmitNoEvent) {
  Reply created = CreatePod("same", {{"a", "1"}});
  Watch w(WatchPort(), Pods() + "?watch=true&resourceVersion=" + created.Rv());
  Reply put = Put(PodPath("same"), created.body);
  ASSERT_EQ(put.status, 200) << put.text;
  EXPECT_EQ(put.Rv(), created.Rv());
  Reply patch = Patch(PodPath("same"), {{"metadata", {{"labels", {{"a", "1"}}}}}});
  ASSERT_EQ(patch.status, 200) << patch.text;
  EXPECT_EQ(patch.Rv(), created.Rv());
  EXPECT_EQ(server_->resource_version(), std::stoll(created.Rv()));
  // The next event is the next real change.
  Reply change = Patch(PodPath("same"), {{"metadata", {{"labels", {{"a", "2"}}}}}});
  json e = w.Next();
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["type"], "MODIFIED");
  EXPECT_EQ(e["object"]["metadata"]["resourceVersion"], change.Rv());
}

TEST_F(ApiServerTest, MainUpdateKeepsStatusAndStatusUpdateKeepsSpecAndMetadata) {
  Reply created = CreatePod("s");
  json body = created.body;
  body["status"] = {{"phase", "Running"}};
  body["metadata"]["labels"] = {{"x", "y"}};
  Reply main = Put(PodPath("s"), body);
  ASSERT_EQ(main.status, 200) << main.text;
  EXPECT_EQ(main.body["status"]["phase"], "Pending");
  EXPECT_EQ(main.body["metadata"]["labels"]["x"], "y");

  body = main.body;
  body["status"] = {{"phase", "Running"}};
  body["spec"]["nodeName"] = "elsewhere";
  body["metadata"]["labels"] = {{"x", "z"}};
  Reply status = Put(PodPath("s", "status"), body);
  ASSERT_EQ(status.status, 200) << status.text;
  EXPECT_EQ(status.body["status"]["phase"], "Running");
  EXPECT_FALSE(status.body["spec"].contains("nodeName"));
  EXPECT_EQ(status.body["metadata"]["labels"]["x"], "y");

  Reply patched = Patch(PodPath("s", "status"), {{"status", {{"phase", "Succeeded"}}}});
  ASSERT_EQ(patched.status, 200) << patched.text;
  EXPECT_EQ(patched.body["status"]["phase"], "Succeeded");
  EXPECT_EQ(Get(PodPath("s", "status")).body["status"]["phase"], "Succeeded");

  ASSERT_EQ(Post("/api/v1/nodes", Node("n")).status, 201);
  Reply node =
      Patch("/api/v1/nodes/n/status", {{"status", {{"capacity", {{"nvidia.com/gpu", "4"}}}}}});
  ASSERT_EQ(node.status, 200) << node.text;
  EXPECT_EQ(node.body["status"]["capacity"]["nvidia.com/gpu"], "4");
  Reply node_main =
      Patch("/api/v1/nodes/n", {{"status", {{"capacity", {{"nvidia.com/gpu", "9"}}}}}});
  EXPECT_EQ(node_main.body["status"]["capacity"]["nvidia.com/gpu"], "4");
}

TEST_F(ApiServerTest, PodSpecMayChangeOnlyWhereTheApiAllows) {
  Reply created = CreatePod("img");
  json body = created.body;
  body["spec"]["containers"][0]["image"] = "busybox:1.37";
  Reply image = Put(PodPath("img"), body);
  ASSERT_EQ(image.status, 200) << image.text;
  EXPECT_EQ(image.body["spec"]["containers"][0]["image"], "busybox:1.37");
  Reply node = Patch(PodPath("img"), {{"spec", {{"nodeName", "n1"}}}});
  ExpectStatus(node, 422, "Invalid");
}

// --- patch -------------------------------------------------------------------------------

TEST_F(ApiServerTest, MergePatchSetsAndRemovesAnnotations) {
  ASSERT_EQ(CreatePod("m").status, 201);
  Reply set =
      Patch(PodPath("m"), {{"metadata", {{"annotations", {{"hami.io/a", "1"}, {"b", "2"}}}}}});
  ASSERT_EQ(set.status, 200) << set.text;
  Reply removed = Patch(PodPath("m"), {{"metadata", {{"annotations", {{"b", nullptr}}}}}});
  ASSERT_EQ(removed.status, 200) << removed.text;
  EXPECT_EQ(removed.body["metadata"]["annotations"], (json{{"hami.io/a", "1"}}));
}

TEST_F(ApiServerTest, JsonPatchAppliesAndAFailedTestIs422Invalid) {
  ASSERT_EQ(CreatePod("j", {{"probe", "a"}}).status, 201);
  json ok =
      json::array({{{"op", "test"}, {"path", "/metadata/labels/probe"}, {"value", "a"}},
                   {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", json::object()}},
                   {{"op", "add"}, {"path", "/metadata/annotations/hami.io~1x"}, {"value", "1"}}});
  Reply r = Patch(PodPath("j"), ok, "application/json-patch+json");
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["metadata"]["annotations"]["hami.io/x"], "1");
  json failing =
      json::array({{{"op", "test"}, {"path", "/metadata/labels/probe"}, {"value", "b"}}});
  Reply bad = Patch(PodPath("j"), failing, "application/json-patch+json");
  ExpectStatus(bad, 422, "Invalid");
  EXPECT_NE(bad.body["message"].get<std::string>().find("/metadata/labels/probe"),
            std::string::npos)
      << bad.text;
  ExpectStatus(Patch(PodPath("j"), {{"op", "add"}}, "application/json-patch+json"), 400,
               "BadRequest");
}

TEST_F(ApiServerTest, PatchCarryingAStaleResourceVersionIs409) {
  Reply created = CreatePod("c");
  ASSERT_EQ(Patch(PodPath("c"), {{"metadata", {{"labels", {{"n", "1"}}}}}}).status, 200);
  json stale = {{"metadata", {{"resourceVersion", created.Rv()}, {"labels", {{"n", "2"}}}}}};
  ExpectStatus(Patch(PodPath("c"), stale, "application/strategic-merge-patch+json"), 409,
               "Conflict");
  ExpectStatus(Patch(PodPath("c"), stale), 409, "Conflict");
  json fresh = {
      {"metadata", {{"resourceVersion", Get(PodPath("c")).Rv()}, {"labels", {{"n", "3"}}}}}};
  EXPECT_EQ(Patch(PodPath("c"), fresh).status, 200);
}

TEST_F(ApiServerTest, StrategicPatchMergesContainersByNameAndKeepsTheirResources) {
  json pod = Pod("sp");
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"nvidia.com/gpu", "1"}}}};
  ASSERT_EQ(Post(Pods(), pod).status, 201);
  json patch = {{"spec",
                 {{"$setElementOrder/containers", {{{"name", "main"}}}},
                  {"containers", {{{"name", "main"}, {"image", "busybox:1.37"}}}}}}};
  Reply r = Patch(PodPath("sp"), patch, "application/strategic-merge-patch+json");
  ASSERT_EQ(r.status, 200) << r.text;
  const json& c = r.body["spec"]["containers"][0];
  EXPECT_EQ(c["image"], "busybox:1.37");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_FALSE(r.body["spec"].contains("$setElementOrder/containers"));
}

TEST_F(ApiServerTest, ApplyPatchNeedsAFieldManagerAndCreatesWhenAbsent) {
  const std::string type = "application/apply-patch+yaml";
  json cm = ConfigMap("applied");
  const std::string path = hami::kube::ObjectPath(kConfigMaps, "default", "applied");
  ExpectStatus(Patch(path, cm, type), 400, "BadRequest");
  Reply created = Patch(path + "?fieldManager=kubectl&force=false", cm, type);
  EXPECT_EQ(created.status, 201) << created.text;
  cm["data"]["k2"] = "v2";
  Reply updated = Patch(path + "?fieldManager=kubectl", cm, type);
  EXPECT_EQ(updated.status, 200) << updated.text;
  EXPECT_EQ(updated.body["data"], (json{{"k", "v"}, {"k2", "v2"}}));
}

TEST_F(ApiServerTest, UnsupportedPatchTypeIs415AndPatchOfAMissingObjectIs404) {
  ASSERT_EQ(CreatePod("u").status, 201);
  ExpectStatus(Patch(PodPath("u"), json::object(), "text/plain"), 415, "UnsupportedMediaType");
  ExpectStatus(Patch(PodPath("none"), json::object()), 404, "NotFound");
}

// --- binding -----------------------------------------------------------------------------

TEST_F(ApiServerTest, BindingSetsTheNodeOnceAndCopiesItsAnnotations) {
  ASSERT_EQ(CreatePod("b").status, 201);
  json binding = {
      {"apiVersion", "v1"},
      {"kind", "Binding"},
      {"metadata", {{"name", "b"}, {"annotations", {{"hami.io/bind-phase", "allocating"}}}}},
      {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "n1"}}}};
  Reply r = Post(PodPath("b", "binding"), binding);
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body, (json{{"kind", "Status"},
                          {"apiVersion", "v1"},
                          {"metadata", json::object()},
                          {"status", "Success"},
                          {"code", 201}}));
  Reply pod = Get(PodPath("b"));
  EXPECT_EQ(pod.body["spec"]["nodeName"], "n1");
  EXPECT_EQ(pod.body["metadata"]["annotations"]["hami.io/bind-phase"], "allocating");
  EXPECT_EQ(pod.body["status"]["conditions"][0]["type"], "PodScheduled");

  binding["target"]["name"] = "n2";
  Reply again = Post(PodPath("b", "binding"), binding);
  ExpectStatus(again, 409, "Conflict");
  EXPECT_NE(again.body["message"].get<std::string>().find("already assigned to node \"n1\""),
            std::string::npos);
  ExpectStatus(Post(PodPath("nobody", "binding"), {{"target", {{"name", "n1"}}}}), 404, "NotFound");
  ExpectStatus(Post(PodPath("other", "binding"), binding), 400, "BadRequest");  // named "b"
  json no_target = {{"metadata", {{"name", "b"}}}};
  ExpectStatus(Post(PodPath("b", "binding"), no_target), 422, "Invalid");
}

// --- delete ------------------------------------------------------------------------------

TEST_F(ApiServerTest, DeleteAnswersTheObjectAndHonoursPreconditions) {
  Reply created = CreatePod("d");
  json wrong = {{"preconditions", {{"resourceVersion", "1"}}}};
  Reply refused = Delete(PodPath("d"), wrong.dump());
  ExpectStatus(refused, 409, "Conflict");
  json right = {{"preconditions", {{"resourceVersion", created.Rv()}}},
                {"propagationPolicy", "Background"}};
  Reply deleted = Delete(PodPath("d"), right.dump());
  ASSERT_EQ(deleted.status, 200) << deleted.text;
  EXPECT_EQ(deleted.body["kind"], "Pod");
  EXPECT_EQ(deleted.body["metadata"]["name"], "d");
  ExpectStatus(Get(PodPath("d")), 404, "NotFound");
  ExpectStatus(Delete(PodPath("d")), 404, "NotFound");
}

TEST_F(ApiServerTest, DeletedEventCarriesTheLastStateWithANewVersion) {
  Reply created = CreatePod("gone", {{"k", "v"}});
  Watch w(WatchPort(), Pods() + "?watch=1&resourceVersion=" + created.Rv());
  ASSERT_EQ(Delete(PodPath("gone")).status, 200);
  json e = w.Next();
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["type"], "DELETED");
  EXPECT_EQ(e["object"]["metadata"]["labels"]["k"], "v");
  EXPECT_EQ(e["object"]["metadata"]["resourceVersion"],
            std::to_string(server_->resource_version()));
  EXPECT_GT(std::stoll(e["object"]["metadata"]["resourceVersion"].get<std::string>()),
            std::stoll(created.Rv()));
}

TEST_F(ApiServerTest, AnObjectWithFinalizersIsMarkedAndGoesWithItsLastFinalizer) {
  json pod = Pod("held");
  pod["metadata"]["finalizers"] = {"test.hami.io/a", "test.hami.io/b"};
  ASSERT_EQ(Post(Pods(), pod).status, 201);
  Reply marked = Delete(PodPath("held"));
  ASSERT_EQ(marked.status, 200) << marked.text;
  EXPECT_TRUE(marked.body["metadata"]["deletionTimestamp"].is_string()) << marked.text;
  EXPECT_EQ(marked.body["metadata"]["deletionGracePeriodSeconds"], 0);
  Reply got = Get(PodPath("held"));
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.body["metadata"]["deletionTimestamp"],
            marked.body["metadata"]["deletionTimestamp"]);
  // Deleting again changes nothing; an update can neither clear nor move the mark.
  EXPECT_EQ(Delete(PodPath("held")).body["metadata"]["resourceVersion"],
            marked.body["metadata"]["resourceVersion"]);
  Reply kept =
      Patch(PodPath("held"),
            {{"metadata", {{"deletionTimestamp", nullptr}, {"finalizers", {"test.hami.io/b"}}}}});
  ASSERT_EQ(kept.status, 200) << kept.text;
  EXPECT_EQ(kept.body["metadata"]["deletionTimestamp"],
            marked.body["metadata"]["deletionTimestamp"]);
  Watch w(WatchPort(), Pods() + "?watch=1&resourceVersion=" + kept.Rv());
  Reply last = Patch(PodPath("held"), {{"metadata", {{"finalizers", nullptr}}}});
  ASSERT_EQ(last.status, 200) << last.text;
  json e = w.Next();
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["type"], "DELETED");
  ExpectStatus(Get(PodPath("held")), 404, "NotFound");
  // Without finalizers a delete is immediate, and an update cannot mark an object.
  ASSERT_EQ(CreatePod("plain").status, 201);
  Reply unmarked =
      Patch(PodPath("plain"), {{"metadata", {{"deletionTimestamp", "2026-01-01T00:00:00Z"}}}});
  ASSERT_EQ(unmarked.status, 200) << unmarked.text;
  EXPECT_FALSE(unmarked.body["metadata"].contains("deletionTimestamp"));
}

TEST_F(ApiServerTest, DeletingANamespaceDeletesItsObjectsButDefaultIsProtected) {
  ASSERT_EQ(Post("/api/v1/namespaces", {{"metadata", {{"name", "team"}}}}).status, 201);
  ASSERT_EQ(Post(hami::kube::CollectionPath(kPods, "team"), Pod("p")).status, 201);
  ASSERT_EQ(Post(hami::kube::CollectionPath(kConfigMaps, "team"), ConfigMap("c")).status, 201);
  Reply ns = Get("/api/v1/namespaces/team");
  EXPECT_EQ(ns.body["status"]["phase"], "Active");
  ASSERT_EQ(Delete("/api/v1/namespaces/team").status, 200);
  ExpectStatus(Get("/api/v1/namespaces/team/pods/p"), 404, "NotFound");
  EXPECT_TRUE(Get("/api/v1/namespaces/team/configmaps").body["items"].empty());
  ExpectStatus(Delete("/api/v1/namespaces/default"), 403, "Forbidden");
}

TEST_F(ApiServerTest, DeleteCollectionDeletesWhatTheSelectorMatches) {
  ASSERT_EQ(CreatePod("a", {{"app", "x"}}).status, 201);
  ASSERT_EQ(CreatePod("b", {{"app", "y"}}).status, 201);
  Reply r = Delete(Pods() + "?labelSelector=app%3Dx");
  ASSERT_EQ(r.status, 200) << r.text;
  ASSERT_EQ(r.body["items"].size(), 1u);
  EXPECT_EQ(Get(PodPath("a")).status, 404);
  EXPECT_EQ(Get(PodPath("b")).status, 200);
}

// --- list --------------------------------------------------------------------------------

TEST_F(ApiServerTest, ListHasKindVersionAndAnItemsArrayEvenWhenEmpty) {
  Reply empty = Get("/api/v1/nodes");
  ASSERT_EQ(empty.status, 200) << empty.text;
  EXPECT_EQ(empty.body["kind"], "NodeList");
  EXPECT_EQ(empty.body["apiVersion"], "v1");
  EXPECT_TRUE(empty.body["items"].is_array());
  EXPECT_TRUE(empty.body["items"].empty());
  EXPECT_EQ(empty.Rv(), std::to_string(server_->resource_version()));
  ASSERT_EQ(Post("/api/v1/nodes", Node("n1")).status, 201);
  Reply one = Get("/api/v1/nodes");
  ASSERT_EQ(one.body["items"].size(), 1u);
  EXPECT_EQ(one.body["items"][0]["metadata"]["name"], "n1");
  Reply leases = Get("/apis/coordination.k8s.io/v1/leases");
  EXPECT_EQ(leases.body["kind"], "LeaseList");
  EXPECT_EQ(leases.body["apiVersion"], "coordination.k8s.io/v1");
}

TEST_F(ApiServerTest, ListSelectsByLabelAndFieldAcrossNamespaces) {
  ASSERT_EQ(CreatePod("a", {{"app", "x"}}).status, 201);
  ASSERT_EQ(CreatePod("b", {{"app", "y"}}).status, 201);
  ASSERT_EQ(Post(hami::kube::CollectionPath(kPods, "kube-system"), Pod("c", {{"app", "x"}})).status,
            201);
  json binding = {{"target", {{"name", "n1"}}}};
  ASSERT_EQ(Post(PodPath("b", "binding"), binding).status, 201);

  auto names = [&](const std::string& path) {
    std::set<std::string> out;
    const Reply r = Get(path);
    for (const json& item : r.body["items"]) out.insert(item["metadata"]["name"]);
    return out;
  };
  EXPECT_EQ(names("/api/v1/pods?labelSelector=app%3Dx"), (std::set<std::string>{"a", "c"}));
  EXPECT_EQ(names(Pods() + "?labelSelector=app%20in%20(x,y)"), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(names("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"), (std::set<std::string>{"b"}));
  EXPECT_EQ(names("/api/v1/pods?fieldSelector=spec.nodeName%3D"),
            (std::set<std::string>{"a", "c"}));
  EXPECT_EQ(names("/api/v1/pods?fieldSelector=metadata.namespace%3Dkube-system"),
            (std::set<std::string>{"c"}));
  EXPECT_EQ(names("/api/v1/pods?fieldSelector=status.phase%3DPending,metadata.name!%3Da"),
            (std::set<std::string>{"b", "c"}));
  Reply bogus = Get("/api/v1/pods?fieldSelector=bogus%3D1");
  ExpectStatus(bogus, 400, "BadRequest");
  EXPECT_EQ(bogus.body["message"], "field label not supported: bogus");
  ExpectStatus(Get("/api/v1/nodes?fieldSelector=spec.nodeName%3Dx"), 400, "BadRequest");
  ExpectStatus(Get(Pods() + "?labelSelector=%3D%3D%3D"), 400, "BadRequest");
}

TEST_F(ApiServerTest, PaginationIsCompleteAndConsistentUnderConcurrentWrites) {
  const std::string path = hami::kube::CollectionPath(kConfigMaps, "default");
  std::set<std::string> expected;
  for (int i = 0; i < 60; ++i) {
    const std::string name = "cm-" + std::to_string(i);
    ASSERT_EQ(Post(path, ConfigMap(name)).status, 201);
    expected.insert(name);
  }
  Reply first = Get(path + "?limit=7");  // the snapshot: before any concurrent write
  ASSERT_EQ(first.status, 200) << first.text;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    httplib::Client c("127.0.0.1", server_->port());
    for (int i = 0; !done; ++i) {
      c.Post(path, ConfigMap("extra-" + std::to_string(i)).dump(), "application/json");
      c.Delete(path + "/cm-" + std::to_string(i % 60));
    }
  });
  std::set<std::string> seen;
  std::string token;
  std::string rv;
  int pages = 0;
  do {
    Reply page = pages == 0 ? first : Get(path + "?limit=7&continue=" + token);
    ASSERT_EQ(page.status, 200) << page.text;
    if (rv.empty()) rv = page.Rv();
    EXPECT_EQ(page.Rv(), rv);
    EXPECT_LE(page.body["items"].size(), 7u);
    for (const json& item : page.body["items"]) {
      EXPECT_TRUE(seen.insert(item["metadata"]["name"]).second) << "duplicate";
    }
    token = page.body["metadata"].value("continue", "");
    ++pages;
  } while (!token.empty() && pages < 100);
  done = true;
  writer.join();
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(pages, 9);
}

TEST_F(ApiServerTest, ContinueTokensExpireWithTheWindowAndMustBeWellFormed) {
  ApiServerOptions o;
  o.watch_window = 5;
  Start(o);
  const std::string path = hami::kube::CollectionPath(kConfigMaps, "default");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Post(path, ConfigMap("c" + std::to_string(i))).status, 201);
  Reply first = Get(path + "?limit=1");
  const std::string token = first.body["metadata"].value("continue", "");
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(first.body["metadata"]["remainingItemCount"], 2);
  EXPECT_EQ(Get(path + "?limit=1&continue=" + token).status, 200);
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(Post("/api/v1/nodes", Node("n" + std::to_string(i))).status, 201);
  ExpectStatus(Get(path + "?limit=1&continue=" + token), 410, "Expired");
  ExpectStatus(Get(path + "?limit=1&continue=garbage!"), 400, "BadRequest");
  ExpectStatus(Get("/api/v1/nodes?limit=1&continue=" + token), 400, "BadRequest");
}

TEST_F(ApiServerTest, TableIsServedWhenTheAcceptHeaderAsksForIt) {
  ASSERT_EQ(CreatePod("t").status, 201);
  Reply list = Get(Pods(), kTableAccept);
  ASSERT_EQ(list.status, 200) << list.text;
  EXPECT_EQ(list.Header("Content-Type"), kTableContentType);
  EXPECT_EQ(list.body["kind"], "Table");
  ASSERT_EQ(list.body["rows"].size(), 1u);
  EXPECT_EQ(list.body["rows"][0]["object"]["metadata"]["namespace"], "default");
  Reply one = Get(PodPath("t"), kTableAccept);
  EXPECT_EQ(one.body["kind"], "Table");
  EXPECT_EQ(one.body["rows"][0]["cells"][0], "t");
}

// --- watch -------------------------------------------------------------------------------

TEST_F(ApiServerTest, WatchFromAVersionSendsOnlyLaterEvents) {
  ASSERT_EQ(CreatePod("old1").status, 201);
  Reply old2 = CreatePod("old2");
  Watch w(WatchPort(), Pods() + "?watch=true&resourceVersion=" + old2.Rv());
  Reply fresh = CreatePod("fresh");
  json e = w.Next();
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["type"], "ADDED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "fresh");
  EXPECT_EQ(e["object"]["kind"], "Pod");
  EXPECT_EQ(e["object"]["apiVersion"], "v1");
  EXPECT_EQ(w.status(), 200);
  EXPECT_TRUE(w.content_type().starts_with("application/json")) << w.content_type();
  // Events between the watched version and now are replayed from the window, in order.
  Watch replay(WatchPort(),
               Pods() + "?watch=true&resourceVersion=" + std::to_string(std::stoll(old2.Rv()) - 1));
  EXPECT_EQ(replay.Next()["object"]["metadata"]["name"], "old2");
  EXPECT_EQ(replay.Next()["object"]["metadata"]["name"], "fresh");
  EXPECT_FALSE(w.Pending());
}

TEST_F(ApiServerTest, WatchWithoutVersionStartsWithAddedForEveryObject) {
  ASSERT_EQ(CreatePod("a").status, 201);
  ASSERT_EQ(CreatePod("b").status, 201);
  for (const std::string rv : {"", "&resourceVersion=0"}) {
    Watch w(WatchPort(), Pods() + "?watch=True" + rv);
    std::set<std::string> names;
    for (int i = 0; i < 2; ++i) {
      json e = w.Next();
      ASSERT_EQ(e.value("type", ""), "ADDED") << e.dump();
      names.insert(e["object"]["metadata"]["name"]);
    }
    EXPECT_EQ(names, (std::set<std::string>{"a", "b"}));
  }
}

TEST_F(ApiServerTest, WatchOfAllNamespacesAndOfOneObjectKind) {
  Reply start = CreatePod("x");
  Watch all(WatchPort(), "/api/v1/pods?watch=1&resourceVersion=" + start.Rv());
  Watch nodes(WatchPort(), "/api/v1/nodes?watch=1&resourceVersion=" + start.Rv());
  ASSERT_EQ(Post(hami::kube::CollectionPath(kPods, "kube-system"), Pod("y")).status, 201);
  ASSERT_EQ(Post("/api/v1/nodes", Node("n")).status, 201);
  EXPECT_EQ(all.Next()["object"]["metadata"]["namespace"], "kube-system");
  EXPECT_EQ(nodes.Next()["object"]["metadata"]["name"], "n");
  EXPECT_FALSE(all.Pending());
}

TEST_F(ApiServerTest, WatchSelectorTurnsTransitionsIntoAddedAndDeleted) {
  Reply created = CreatePod("p", {{"app", "other"}});
  Watch w(WatchPort(),
          Pods() + "?watch=true&labelSelector=app%3Dweb&resourceVersion=" + created.Rv());
  Reply in = Patch(PodPath("p"), {{"metadata", {{"labels", {{"app", "web"}}}}}});
  json e = w.Next();
  EXPECT_EQ(e["type"], "ADDED");
  EXPECT_EQ(e["object"]["metadata"]["resourceVersion"], in.Rv());
  Patch(PodPath("p"), {{"metadata", {{"annotations", {{"a", "1"}}}}}});
  EXPECT_EQ(w.Next()["type"], "MODIFIED");
  Reply out = Patch(PodPath("p"), {{"metadata", {{"labels", {{"app", "other"}}}}}});
  e = w.Next();
  EXPECT_EQ(e["type"], "DELETED");
  EXPECT_EQ(e["object"]["metadata"]["labels"]["app"], "web");  // the last state that matched
  EXPECT_EQ(e["object"]["metadata"]["resourceVersion"], out.Rv());
  ASSERT_EQ(Delete(PodPath("p")).status, 200);
  Reply marker = CreatePod("q", {{"app", "web"}});
  e = w.Next();
  EXPECT_EQ(e["type"], "ADDED");
  EXPECT_EQ(e["object"]["metadata"]["name"], "q");
}

TEST_F(ApiServerTest, WatchSendsBookmarksWhenAsked) {
  Reply created = CreatePod("bm");
  Watch w(WatchPort(),
          Pods() + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + created.Rv());
  ASSERT_EQ(Post("/api/v1/nodes", Node("n")).status, 201);  // another kind moves the version
  json e = w.Next(milliseconds(5000));
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["type"], "BOOKMARK");
  EXPECT_EQ(e["object"]["kind"], "Pod");
  EXPECT_EQ(e["object"]["apiVersion"], "v1");
  EXPECT_EQ(e["object"]["metadata"]["resourceVersion"],
            std::to_string(server_->resource_version()));
  Watch plain(WatchPort(), Pods() + "?watch=1&resourceVersion=" + created.Rv());
  Reply later = CreatePod("later");
  EXPECT_EQ(plain.Next()["type"], "ADDED");  // no bookmark came first
}

TEST_F(ApiServerTest, WatchEndsCleanlyAfterTimeoutSeconds) {
  Reply created = CreatePod("t");
  const auto start = std::chrono::steady_clock::now();
  Watch w(WatchPort(),
          Pods() + "?watch=true&timeoutSeconds=1&allowWatchBookmarks=true&resourceVersion=" +
              created.Rv());
  bool complete = false;
  ASSERT_TRUE(w.WaitEnded(milliseconds(5000), &complete));
  EXPECT_TRUE(complete);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(900));
  json e = w.Next(milliseconds(0));
  EXPECT_EQ(e.value("type", ""), "BOOKMARK");  // the bookmark at the end
}

TEST_F(ApiServerTest, WatchFromAVersionOlderThanTheWindowGetsExpired) {
  ApiServerOptions o;
  o.watch_window = 3;
  Start(o);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(CreatePod("p" + std::to_string(i)).status, 201);
  Watch w(WatchPort(), Pods() + "?watch=true&resourceVersion=1");
  json e = w.Next();
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["type"], "ERROR");
  EXPECT_EQ(e["object"]["kind"], "Status");
  EXPECT_EQ(e["object"]["code"], 410);
  EXPECT_EQ(e["object"]["reason"], "Expired");
  const int64_t rv = server_->resource_version();
  EXPECT_EQ(e["object"]["message"], "too old resource version: 1 (" + std::to_string(rv - 3) + ")");
  EXPECT_TRUE(w.WaitEnded(milliseconds(5000)));
  EXPECT_EQ(w.status(), 200);
  Watch ok(WatchPort(), Pods() + "?watch=true&resourceVersion=" + std::to_string(rv - 3));
  EXPECT_EQ(ok.Next()["type"], "ADDED");
}

TEST_F(ApiServerTest, WatchOfATableSendsOneRowTablesWithColumnsFirst) {
  Reply created = CreatePod("a");
  Watch w(WatchPort(), Pods() + "?watch=true&resourceVersion=" + created.Rv(),
          {{"Accept", kTableAccept}});
  CreatePod("b");
  CreatePod("c");
  json first = w.Next(), second = w.Next();
  EXPECT_EQ(w.content_type(), kTableContentType);
  EXPECT_EQ(first["object"]["kind"], "Table");
  EXPECT_FALSE(first["object"]["columnDefinitions"].empty());
  EXPECT_TRUE(second["object"]["columnDefinitions"].empty());
  EXPECT_EQ(second["object"]["rows"][0]["cells"][0], "c");
}

TEST_F(ApiServerTest, WatchQueryBooleansAcceptTrueCapitalTrueAndOne) {
  for (const char* v : {"true", "True", "1"}) {
    Watch w(WatchPort(), Pods() + "?watch=" + v + "&timeoutSeconds=1");
    EXPECT_TRUE(w.WaitEnded(milliseconds(5000)));
    EXPECT_EQ(w.status(), 200) << v;
    EXPECT_TRUE(w.content_type().starts_with("application/json"));
  }
  ExpectStatus(Get(Pods() + "?watch=yes"), 400, "BadRequest");
}

TEST_F(ApiServerTest, WatcherThatFallsBehindTheWindowIsMarkedOverflowed) {
  Store store(Store::Options{4});
  ASSERT_TRUE(store.Create(kNamespaces, "", {{"metadata", {{"name", "default"}}}}).ok());
  auto start = store.Watch(kPods, "default", store.resource_version());
  ASSERT_TRUE(start.ok());
  std::shared_ptr<Watcher> w = start->watcher;
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(store.Create(kPods, "default", Pod("p" + std::to_string(i))).ok());
  EXPECT_EQ(w->state(), Watcher::State::kOpen);
  EXPECT_EQ(w->Take().size(), 4u);
  for (int i = 4; i < 9; ++i)
    ASSERT_TRUE(store.Create(kPods, "default", Pod("p" + std::to_string(i))).ok());
  EXPECT_EQ(w->state(), Watcher::State::kOverflowed);
  EXPECT_TRUE(w->Take().empty());
  store.Unwatch(w);
  EXPECT_EQ(store.watcher_count(), 0u);
}

TEST_F(ApiServerTest, WatchThatFallsAWindowBehindEndsWithExpired) {
  ApiServerOptions o;
  o.watch_window = 5;
  Start(o);
  const std::string path = hami::kube::CollectionPath(kConfigMaps, "default");
  std::mutex mu;
  std::condition_variable cv;
  bool writes_done = false;
  bool first_chunk = false;
  std::string received;
  std::thread reader([&] {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30, 0);
    c.set_socket_options([](socket_t sock) {
      const int bytes = 64 * 1024;  // a fixed receive buffer: no autotuning past the writes
      setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    });
    c.Get(path + "?watch=true&resourceVersion=" + std::to_string(server_->resource_version()),
          [&](const char* data, size_t n) {
            std::unique_lock lock(mu);
            if (!first_chunk) {
              first_chunk = true;
              cv.notify_all();
              // Stop reading until the writer is done: the socket fills, the server's
              // stream blocks, and its queue overflows. (The bound only ends a test whose
              // writer is stuck.)
              cv.wait_for(lock, seconds(240), [&] { return writes_done; });
            }
            received.append(data, n);
            return true;
          });
  });
  // The reader is released and joined after the writes, and also if an ASSERT ends them.
  auto release_reader = [&] {
    {
      std::lock_guard lock(mu);
      writes_done = true;
    }
    cv.notify_all();
    if (reader.joinable()) reader.join();
  };
  Cleanup release_on_return(release_reader);
  json big = ConfigMap("big-0");
  big["data"]["k"] = std::string(256 * 1024, 'x');
  ASSERT_EQ(Post(path, big).status, 201);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, seconds(10), [&] { return first_chunk; }));
  }
  // Written until the server counts the watch as fallen behind (within 60 writes), then the
  // reader resumes: at once, well inside the server's write timeout, however slow the build.
  for (int i = 1; i < 60 && server_->stats().watches_overflowed == 0; ++i) {
    big["metadata"]["name"] = "big-" + std::to_string(i);
    ASSERT_EQ(Post(path, big).status, 201);
  }
  EXPECT_EQ(server_->stats().watches_overflowed, 1u);
  release_reader();
  ASSERT_FALSE(received.empty());
  received.pop_back();  // the last newline
  const json last = json::parse(received.substr(received.rfind('\n') + 1), nullptr, false);
  ASSERT_EQ(last.value("type", ""), "ERROR") << received.size();
  EXPECT_EQ(last["object"].value("code", 0), 410);
  EXPECT_EQ(last["object"].value("reason", ""), "Expired");
}

TEST_F(ApiServerTest, ClientLeavingAnIdleWatchReleasesItsStream) {
  Reply created = CreatePod("x");
  {
    Watch w(WatchPort(), Pods() + "?watch=true&resourceVersion=" + created.Rv());
    CreatePod("y");
    ASSERT_TRUE(w.Next().is_object());
    EXPECT_EQ(server_->stats().watches_open, 1u);
  }
  // The stream's thread sees the client's socket hang up and then counts the stream closed.
  // It announces that to nobody (stats() is a snapshot, with nothing to wait on), so the
  // count is polled; the deadline only bounds a stream that is never released.
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (server_->stats().watches_open != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(server_->stats().watches_open, 0u);
}

// --- faults ------------------------------------------------------------------------------

TEST_F(ApiServerTest, CutWatchFaultDropsTheStreamAfterNEvents) {
  for (int i = 0; i < 5; ++i) ASSERT_EQ(CreatePod("p" + std::to_string(i)).status, 201);
  Faults f;
  f.cut_watch_after_events = 2;
  server_->SetFaults(f);
  Watch w(WatchPort(), Pods() + "?watch=true");
  bool complete = true;
  ASSERT_TRUE(w.WaitEnded(milliseconds(5000), &complete));
  EXPECT_FALSE(complete);  // dropped, not ended
  EXPECT_EQ(w.Next(milliseconds(0))["type"], "ADDED");
  EXPECT_EQ(w.Next(milliseconds(0))["type"], "ADDED");
  EXPECT_TRUE(w.Next(milliseconds(0)).is_null());
}

TEST_F(ApiServerTest, ForcedGoneFaultExpiresTheNextWatches) {
  Reply created = CreatePod("a");
  Faults f;
  f.force_gone_watches = 1;
  server_->SetFaults(f);
  {
    Watch w(WatchPort(), Pods() + "?watch=true&resourceVersion=" + created.Rv());
    json e = w.Next();
    EXPECT_EQ(e["type"], "ERROR");
    EXPECT_EQ(e["object"]["code"], 410);
    EXPECT_EQ(e["object"]["reason"], "Expired");
  }
  EXPECT_EQ(server_->faults().force_gone_watches, 0);
  Watch w(WatchPort(), Pods() + "?watch=true&resourceVersion=" + created.Rv());
  CreatePod("b");
  EXPECT_EQ(w.Next()["type"], "ADDED");
  EXPECT_GE(server_->stats().faults_injected, 1u);
}

TEST_F(ApiServerTest, Rate429AnswersWithRetryAfterAndIsReproducibleFromTheSeed) {
  Faults f;
  f.rate_429 = 1;
  f.retry_after_seconds = 3;
  server_->SetFaults(f);
  Reply r = Get(Pods());
  ExpectStatus(r, 429, "TooManyRequests");
  EXPECT_EQ(r.Header("Retry-After"), "3");
  EXPECT_EQ(r.body["details"]["retryAfterSeconds"], 3);
  EXPECT_EQ(Get("/version").status, 200);  // discovery is never faulted
  EXPECT_EQ(Get("/healthz").status, 200);

  f.rate_429 = 0.3;
  f.seed = 42;
  auto pattern = [&] {
    server_->SetFaults(f);
    std::string out;
    for (int i = 0; i < 60; ++i) out += Get(Pods()).status == 429 ? 'x' : '.';
    return out;
  };
  const std::string a = pattern();
  EXPECT_EQ(pattern(), a);
  const auto hits = std::count(a.begin(), a.end(), 'x');
  EXPECT_GT(hits, 5) << a;
  EXPECT_LT(hits, 35) << a;
}

TEST_F(ApiServerTest, Rate500AnswersInternalError) {
  Faults f;
  f.rate_500 = 1;
  server_->SetFaults(f);
  ExpectStatus(CreatePod("x"), 500, "InternalError");
  server_->SetFaults(Faults{});
  EXPECT_EQ(Get(PodPath("x")).status, 404);  // the faulted create stored nothing
}

TEST_F(ApiServerTest, LatencyDelaysEveryResourceAnswer) {
  Faults f;
  f.latency = milliseconds(300);
  server_->SetFaults(f);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Get(Pods()).status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
}

TEST_F(ApiServerTest, FaultsAreSetAndReadOverHttpAndBadFieldsAreNamed) {
  json want = {{"latency_ms", 0},
               {"rate_429", 0.25},
               {"retry_after_seconds", 2},
               {"rate_500", 0},
               {"cut_watch_after_events", 7},
               {"force_gone_watches", 1},
               {"seed", 9}};
  Reply put = Put("/sim/faults", want);
  ASSERT_EQ(put.status, 200) << put.text;
  EXPECT_EQ(put.body, want);
  EXPECT_EQ(Get("/sim/faults").body, want);
  EXPECT_EQ(server_->faults().cut_watch_after_events, 7);
  Reply bad = Put("/sim/faults", {{"rate_429", 2}});
  ExpectStatus(bad, 400, "BadRequest");
  EXPECT_NE(bad.body["message"].get<std::string>().find("rate_429"), std::string::npos);
  Reply unknown = Put("/sim/faults", {{"latency", 5}});
  EXPECT_NE(unknown.body["message"].get<std::string>().find("latency"), std::string::npos);
  auto parsed = FaultsFromJson({{"seed", -1}});
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().message().find("seed"), std::string::npos);
}

// --- request framing and bad input --------------------------------------------------------

TEST_F(ApiServerTest, ChunkedRequestBodyIsRead) {
  const std::string body = Pod("chunked").dump();
  auto r = client_->Post(
      Pods(), {},
      [&](size_t offset, httplib::DataSink& sink) {
        if (offset < body.size()) {
          const size_t n = std::min<size_t>(10, body.size() - offset);
          sink.write(body.data() + offset, n);
        } else {
          sink.done();
        }
        return true;
      },
      "");
  Reply reply = FromResult(r);
  ASSERT_EQ(reply.status, 201) << reply.text;
  EXPECT_EQ(Get(PodPath("chunked")).status, 200);
}

TEST_F(ApiServerTest, DeleteBodyIsReadAndTheConnectionStaysUsable) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(CreatePod("d" + std::to_string(i)).status, 201);
  for (int i = 0; i < 3; ++i) {
    Reply r = Delete(PodPath("d" + std::to_string(i)), R"({"propagationPolicy":"Background"})");
    EXPECT_EQ(r.status, 200) << r.text;
    EXPECT_EQ(Get(PodPath("d" + std::to_string(i))).status, 404);
  }
  ExpectStatus(Delete(PodPath("x"), "{nope"), 400, "BadRequest");
}

TEST_F(ApiServerTest, MalformedBodiesAre400NamingTheProblem) {
  Reply syntax = PostText(Pods(), "{\"metadata\":");
  ExpectStatus(syntax, 400, "BadRequest");
  EXPECT_NE(syntax.body["message"].get<std::string>().find("not valid JSON"), std::string::npos);
  ExpectStatus(PostText(Pods(), std::string(100000, '[')), 400, "BadRequest");
  ExpectStatus(PostText(Pods(), "[1,2]"), 400, "BadRequest");
  ExpectStatus(PostText(Pods(), ""), 400, "BadRequest");
  json label = Pod("l");
  label["metadata"]["labels"] = {{"a", 1}};
  Reply typed = Post(Pods(), label);
  ExpectStatus(typed, 400, "BadRequest");
  EXPECT_NE(typed.body["message"].get<std::string>().find("metadata.labels"), std::string::npos);
  json kind = Pod("k");
  kind["kind"] = "Node";
  ExpectStatus(Post(Pods(), kind), 400, "BadRequest");
  ExpectStatus(PostText(Pods(), std::string("{\"a\":\"\xff\xfe\"}")), 400, "BadRequest");
  EXPECT_EQ(Get("/healthz").status, 200);  // still serving
}

TEST_F(ApiServerTest, UnknownPathsAre404AndWrongMethodsAre405) {
  ExpectStatus(Get("/api/v1/widgets"), 404, "NotFound");
  ExpectStatus(Get("/api/v1/namespaces/default/pods/a/log"), 404, "NotFound");
  ExpectStatus(Get("/api/v1/nodes/n/binding"), 404, "NotFound");
  ExpectStatus(Get("/api/v1/pods/a"), 404, "NotFound");
  ExpectStatus(Post("/api/v1/pods", Pod("a")), 405, "MethodNotAllowed");
  ExpectStatus(Put(Pods(), Pod("a")), 405, "MethodNotAllowed");
  ExpectStatus(Get(PodPath("a", "binding")), 405, "MethodNotAllowed");
}

TEST_F(ApiServerTest, HealthAndDiscoveryAreServed) {
  for (const char* p : {"/healthz", "/readyz", "/livez"}) {
    Reply r = Get(p);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.text, "ok");
  }
  Reply v = Get("/version?timeout=32s");
  ASSERT_EQ(v.status, 200) << v.text;
  EXPECT_EQ(v.body["minor"], "32");
  EXPECT_EQ(Get("/api/v1").body["kind"], "APIResourceList");
}

TEST_F(ApiServerTest, ArbitraryRequestsGetAStatusAndTheServerKeepsServing) {
  ASSERT_EQ(CreatePod("p").status, 201);
  std::mt19937 rng(20261201);
  auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  const std::vector<std::string> segments = {
      "api",    "apis",    "v1",     "namespaces",          "default",     "pods",  "nodes",
      "status", "binding", "leases", "coordination.k8s.io", "p",           "%00",   "..",
      "x",      "",        "events", "configmaps",          "kube-system", "%ff%fe"};
  const std::vector<std::string> queries = {"",
                                            "limit=-1",
                                            "limit=abc",
                                            "continue=%%%",
                                            "continue=eyJ2IjoxfQ",
                                            "labelSelector=a%20in%20(",
                                            "fieldSelector=%3D%3D",
                                            "watch=maybe",
                                            "watch=1&resourceVersion=-5",
                                            "watch=1&resourceVersion=abc",
                                            "watch=1&allowWatchBookmarks=2",
                                            "dryRun=Some",
                                            "fieldManager=",
                                            "watch=true&timeoutSeconds=x"};
  const std::vector<std::string> methods = {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
  const std::vector<std::string> types = {"application/json",
                                          "application/merge-patch+json",
                                          "application/json-patch+json",
                                          "application/strategic-merge-patch+json",
                                          "application/apply-patch+yaml",
                                          "text/plain",
                                          ""};
  const std::vector<std::string> bodies = {
      "",
      "{",
      "[]",
      "null",
      "1e999",
      "\"s\"",
      R"({"metadata":{"name":7}})",
      R"({"metadata":{"name":"p","labels":{"a":"b"}},"spec":{"containers":[{"name":"c"}]}})",
      R"([{"op":"replace","path":"/spec/containers/0","value":null}])",
      R"({"spec":{"containers":[{"$patch":"delete","name":"main"}]}})",
      R"({"preconditions":{"uid":5}})",
      R"({"target":{"name":""}})",
      std::string(5000, '{'),
      "\x01\x02\xff"};
  for (int i = 0; i < 400; ++i) {
    std::string path;
    const int n = 1 + int(rng() % 7);
    for (int k = 0; k < n; ++k) path += "/" + pick(segments);
    const std::string query = pick(queries);
    path += "?" + query + (query.empty() ? "" : "&") + "timeoutSeconds=1";
    httplib::Request req;
    req.method = pick(methods);
    req.path = path;
    req.body = pick(bodies);
    const std::string type = pick(types);
    if (!type.empty()) req.set_header("Content-Type", type);
    auto res = client_->send(req);
    ASSERT_TRUE(res) << req.method << " " << path << ": " << httplib::to_string(res.error());
    if (res->status >= 400) {
      json status = json::parse(res->body, nullptr, false);
      ASSERT_TRUE(status.is_object()) << req.method << " " << path << " " << res->body;
      EXPECT_EQ(status.value("kind", ""), "Status") << res->body;
      EXPECT_EQ(status.value("code", 0), res->status) << res->body;
    }
  }
  EXPECT_EQ(Get("/healthz").text, "ok");
  EXPECT_EQ(Get(PodPath("p")).status, 200);
}

// --- lifecycle ---------------------------------------------------------------------------

TEST_F(ApiServerTest, StopWithOpenWatchesAndIdleConnectionsReturnsPromptly) {
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < 4; ++i) {
    watches.push_back(std::make_unique<Watch>(WatchPort(), Pods() + "?watch=true"));
  }
  CreatePod("x");
  for (auto& w : watches) ASSERT_TRUE(w->Next().is_object());
  EXPECT_EQ(Get(Pods()).status, 200);  // leaves an idle keep-alive connection
  const auto start = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(2));
  for (auto& w : watches) {
    bool complete = false;
    EXPECT_TRUE(w->WaitEnded(milliseconds(5000), &complete));
    EXPECT_TRUE(complete);
  }
  server_->Stop();  // idempotent
}

TEST_F(ApiServerTest, InProcessStoreMatchesTheHttpView) {
  auto created = server_->CreateObject(kPods, Pod("inproc"));
  ASSERT_TRUE(created.ok()) << created.error().message();
  EXPECT_EQ((*created)["kind"], "Pod");
  EXPECT_EQ(Get(PodPath("inproc")).body, *created);
  auto got = server_->GetObject(kPods, "default", "inproc");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, *created);
  auto dup = server_->CreateObject(kPods, Pod("inproc"));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code(), ErrorCode::kConflict);
  EXPECT_EQ(server_->ListObjects(kPods).size(), 1u);
  EXPECT_TRUE(server_->DeleteObject(kPods, "default", "inproc").ok());
  EXPECT_EQ(server_->GetObject(kPods, "default", "inproc").error().code(), ErrorCode::kNotFound);
}

TEST_F(ApiServerTest, KubeconfigNamesTheServerAndTheContext) {
  TempDir dir("sim-kube");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("kubeconfig");
  ASSERT_TRUE(server_->WriteKubeconfig(path).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  EXPECT_NE(s.find("server: " + server_->url() + "\n"), std::string::npos) << s;
  EXPECT_NE(s.find("current-context: hami-sim\n"), std::string::npos) << s;
  EXPECT_NE(s.find("  user: {}\n"), std::string::npos) << s;
  EXPECT_EQ(server_->url(), "http://127.0.0.1:" + std::to_string(server_->port()));
  EXPECT_FALSE(server_->WriteKubeconfig(dir.File("missing/dir/kubeconfig")).ok());
}

TEST(ApiServerStart, RejectsHalfATlsPairAndServesHttpsWithAPairExceptExec) {
  ApiServerOptions o;
  o.tls_cert_file = "/nonexistent.crt";
  auto half = ApiServer::Start(o);
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.error().message().find("both"), std::string::npos);

  TempDir dir("sim-kube-tls");
  ASSERT_TRUE(dir.ok());
  const std::string cert = dir.File("tls.crt"), key = dir.File("tls.key");
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl cannot make a test certificate";
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  auto s = ApiServer::Start(o);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_TRUE((*s)->url().starts_with("https://127.0.0.1:"));
  httplib::SSLClient c("127.0.0.1", (*s)->port());
  c.set_ca_cert_path(cert.c_str());
  c.enable_server_certificate_verification(true);
  auto r = c.Get("/api/v1/namespaces/default");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  const std::string kubeconfig = dir.File("kubeconfig");
  ASSERT_TRUE((*s)->WriteKubeconfig(kubeconfig).ok());
  std::ifstream in(kubeconfig);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("certificate-authority-data: "), std::string::npos);
  EXPECT_NE(text.str().find("    token: hami-sim\n"), std::string::npos);  // or kubectl prompts

  // pods/exec needs the raw connection, which TLS holds: refused, saying so.
  ASSERT_TRUE((*s)->CreateObject(kNodes, {{"metadata", {{"name", "n"}}}}).ok());
  ASSERT_TRUE(
      (*s)->CreateObject(kPods,
                         {{"metadata", {{"name", "p"}}},
                          {"spec",
                           {{"nodeName", "n"},
                            {"containers", json::array({{{"name", "main"}, {"image", "i"}}})}}}})
          .ok());
  auto exec = c.Post("/api/v1/namespaces/default/pods/p/exec?command=true&stdout=true",
                     {{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}}, "", "text/plain");
  ASSERT_TRUE(exec) << httplib::to_string(exec.error());
  EXPECT_EQ(exec->status, 501);
  EXPECT_NE(exec->body.find("pods/exec is not served over HTTPS"), std::string::npos) << exec->body;
}

TEST(ApiServerCommand, PrintsItsUrlWritesAKubeconfigAndExitsZeroOnSigterm) {
  TempDir dir("sim-kube-cli");
  ASSERT_TRUE(dir.ok());
  const std::string kubeconfig = dir.File("kubeconfig");
  hami::testing::Subprocess p({std::string(HAMI_BIN_DIR) + "/hami", "sim", "apiserver", "--port",
                               "0", "--kubeconfig-out", kubeconfig, "--watch-window", "100"},
                              {});
  auto line = p.WaitForLine("apiserver: ", 30000);
  ASSERT_TRUE(line.has_value());
  const std::string url = line->substr(std::string("apiserver: ").size());
  ASSERT_TRUE(url.starts_with("http://127.0.0.1:")) << url;
  std::ifstream in(kubeconfig);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("server: " + url), std::string::npos);
  httplib::Client c(url);
  auto r = c.Get("/api/v1/namespaces");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  p.Kill(SIGTERM);
  EXPECT_EQ(p.Wait(10000), 0);
}

}  // namespace
}  // namespace hami::sim::kube
