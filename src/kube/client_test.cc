#include "kube/client.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common/temp_dir.h"
#include "kube/config.h"
#include "sim/kube/api_server.h"

namespace hami::kube {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;
using std::chrono::milliseconds;

// What a fake server saw of one request.
struct Seen {
  std::string method;
  std::string target;  // path and raw query
  std::string path;
  httplib::Params params;
  httplib::Headers headers;
  std::string body;
  int remote_port = 0;
  std::string Header(const char* name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// An httplib server on 127.0.0.1, port 0, recording every request its routes see (the route
// helpers wrap each handler). Register routes before Start().
class FakeServer {
 public:
  using Handler = httplib::Server::Handler;
  explicit FakeServer(std::unique_ptr<httplib::Server> server = std::make_unique<httplib::Server>())
      : server_(std::move(server)) {
    server_->set_keep_alive_max_count(1000);
    server_->set_tcp_nodelay(true);
  }
  ~FakeServer() {
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  void Get(const std::string& path, Handler h) { server_->Get(path, Record(std::move(h))); }
  void Post(const std::string& path, Handler h) { server_->Post(path, Record(std::move(h))); }
  void Put(const std::string& path, Handler h) { server_->Put(path, Record(std::move(h))); }
  void Patch(const std::string& path, Handler h) { server_->Patch(path, Record(std::move(h))); }
  void Delete(const std::string& path, Handler h) { server_->Delete(path, Record(std::move(h))); }

  void Start(bool tls = false) {
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    // stop() before the accept loop runs would be lost: wait for it (bounded).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_->is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(server_->is_running());
    url_ = std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
  }
  const std::string& url() const { return url_; }
  std::vector<Seen> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  int requests() { return int(seen().size()); }
  int connections() {  // distinct client ports: one per TCP connection
    std::set<int> ports;
    for (const Seen& s : seen()) ports.insert(s.remote_port);
    return int(ports.size());
  }

 private:
  Handler Record(Handler h) {
    return [this, h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mu_);
        seen_.push_back(
            {req.method, req.target, req.path, req.params, req.headers, req.body, req.remote_port});
      }
      h(req, res);
    };
  }

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::string url_;
  std::mutex mu_;
  std::vector<Seen> seen_;
};

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

ClientOptions Unlimited(int max_retries = 5) {
  ClientOptions o;
  o.qps = 0;
  o.max_retries = max_retries;
  return o;
}

ClientOptions Limited(double qps, int burst) {
  ClientOptions o;
  o.qps = qps;
  o.burst = burst;
  return o;
}

ClientOptions WithTimeout(milliseconds timeout) {
  ClientOptions o = Unlimited();
  o.request_timeout = timeout;
  return o;
}

ListOptions ListAt(const std::string& rv) {
  ListOptions o;
  o.resource_version = rv;
  return o;
}

ListOptions Pages(int64_t limit) {
  ListOptions o;
  o.limit = limit;
  return o;
}

WatchOptions WatchFrom(const std::string& rv) {
  WatchOptions o;
  o.resource_version = rv;
  return o;
}

json Pod(const std::string& name, const std::string& rv) {
  return {{"kind", "Pod"},
          {"apiVersion", "v1"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"resourceVersion", rv}}}};
}

class ClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> MakeClient(ClientOptions options = {}, Config config = {}) {
    if (config.server.empty()) config.server = server_.url();
    if (options.clock == nullptr) options.clock = &clock_;
    auto c = Client::Create(std::move(config), std::move(options));
    EXPECT_TRUE(c.ok()) << c.error().message();
    return c.ok() ? std::move(*c) : nullptr;
  }
  FakeServer server_;
  FakeClock clock_;
};

TEST_F(ClientTest, GetReturnsTheObjectAndSendsJsonHeadersUserAgentAndToken) {
  server_.Get("/api/v1/namespaces/default/pods/x",
              [](const auto&, auto& res) { Reply(res, 200, Pod("x", "7")); });
  server_.Start();
  Config config;
  config.bearer_token = "sekret";
  ClientOptions options;
  options.user_agent = "hami-test/1";
  auto client = MakeClient(options, config);
  auto pod = client->Get(kPods, "default", "x");
  ASSERT_TRUE(pod.ok()) << pod.error().message();
  EXPECT_EQ((*pod)["metadata"]["resourceVersion"], "7");
  auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[0].Header("Accept"), "application/json");
  EXPECT_EQ(seen[0].Header("User-Agent"), "hami-test/1");
  EXPECT_EQ(seen[0].Header("Authorization"), "Bearer sekret");
}

TEST_F(ClientTest, EmptyNamespaceMeansTheConfigsDefaultForObjectVerbs) {
  server_.Get("/api/v1/namespaces/team-a/pods/x",
              [](const auto&, auto& res) { Reply(res, 200, Pod("x", "1")); });
  server_.Get("/api/v1/nodes/n1", [](const auto&, auto& res) {
    Reply(res, 200, {{"kind", "Node"}});
  });
  server_.Start();
  Config config;
  config.default_namespace = "team-a";
  auto client = MakeClient({}, config);
  EXPECT_TRUE(client->Get(kPods, "", "x").ok());
  EXPECT_TRUE(client->Get(kNodes, "ignored", "n1").ok());  // cluster-scoped
}

TEST_F(ClientTest, NotFoundNamesVerbObjectStatusAndMessage) {
  server_.Get("/api/v1/namespaces/default/pods/x", [](const auto&, auto& res) {
    Reply(res, 404, StatusBody(404, "NotFound", "pods \"x\" not found"));
  });
  server_.Start();
  auto r = MakeClient()->Get(kPods, "default", "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(r.error().message(), "get pods default/x: 404 Not Found: pods \"x\" not found");
}

TEST_F(ClientTest, GoneIsExpired) {
  server_.Get("/api/v1/pods", [](const auto&, auto& res) {
    Reply(res, 410, StatusBody(410, "Expired", "too old resource version: 2 (8)"));
  });
  server_.Start();
  auto r = MakeClient()->List(kPods, "", ListAt("2"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kExpired);
  EXPECT_EQ(r.error().message(), "list pods: 410 Gone: too old resource version: 2 (8)");
}

TEST_F(ClientTest, ErrorBodyThatIsNotAStatusIsQuotedInTheMessage) {
  server_.Get("/api/v1/nodes/n", [](const auto&, auto& res) {
    res.status = 403;
    res.set_content("forbidden by policy\n", "text/plain");
  });
  server_.Start();
  auto r = MakeClient()->Get(kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(r.error().message(), "get nodes n: 403 Forbidden: forbidden by policy");
}

TEST_F(ClientTest, SuccessBodyThatIsNotJsonIsCorrupt) {
  server_.Get("/api/v1/nodes/n",
              [](const auto&, auto& res) { res.set_content("<html>", "text/html"); });
  server_.Start();
  auto r = MakeClient()->Get(kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(r.error().message(), HasSubstr("get nodes n: 200 OK: the response is not JSON"));
}

TEST_F(ClientTest, ListSendsUrlEncodedSelectorsAndPagination) {
  server_.Get("/api/v1/namespaces/default/pods", [](const auto&, auto& res) {
    Reply(
        res, 200,
        {{"kind", "PodList"}, {"metadata", {{"resourceVersion", "9"}}}, {"items", json::array()}});
  });
  server_.Start();
  ListOptions o;
  o.label_selector = "app in (a,b),tier!=db";
  o.field_selector = "spec.nodeName=node-1";
  o.limit = 50;
  o.continue_token = "abc+/=";
  o.resource_version = "0";
  auto r = MakeClient()->List(kPods, "default", o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].target,
            "/api/v1/namespaces/default/pods?labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Ddb"
            "&fieldSelector=spec.nodeName%3Dnode-1&limit=50&continue=abc%2B%2F%3D"
            "&resourceVersion=0");
  EXPECT_EQ(seen[0].params.find("labelSelector")->second, o.label_selector);
}

// Pages of pods p0..p4, two per page; the continue token is the index of the next item.
void ServePages(FakeServer& server, std::atomic<int>* expire_first_continue) {
  server.Get("/api/v1/pods", [=](const httplib::Request& req, httplib::Response& res) {
    size_t start = 0;
    if (req.has_param("continue")) {
      if (expire_first_continue != nullptr && expire_first_continue->fetch_sub(1) > 0) {
        Reply(res, 410, StatusBody(410, "Expired", "The provided continue parameter is too old"));
        return;
      }
      start = std::stoul(req.get_param_value("continue"));
    }
    json list = {{"kind", "PodList"},
                 {"apiVersion", "v1"},
                 {"metadata", {{"resourceVersion", "rv" + std::to_string(start)}}},
                 {"items", json::array()}};
    for (size_t i = start; i < std::min<size_t>(start + 2, 5); ++i) {
      list["items"].push_back(Pod("p" + std::to_string(i), "1"));
    }
    if (start + 2 < 5) list["metadata"]["continue"] = std::to_string(start + 2);
    Reply(res, 200, list);
  });
}

TEST_F(ClientTest, ListAllFollowsContinueAndKeepsTheFirstPagesVersion) {
  ServePages(server_, nullptr);
  server_.Start();
  ListOptions o = Pages(2);
  o.resource_version = "0";
  auto r = MakeClient()->ListAll(kPods, "", o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ((*r)["items"].size(), 5u);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ((*r)["items"][size_t(i)]["metadata"]["name"], "p" + std::to_string(i));
  EXPECT_EQ((*r)["metadata"]["resourceVersion"], "rv0");
  EXPECT_FALSE((*r)["metadata"].contains("continue"));
  EXPECT_EQ(server_.requests(), 3);
  auto seen = server_.seen();
  EXPECT_EQ(seen[0].target, "/api/v1/pods?limit=2&resourceVersion=0");
  EXPECT_EQ(seen[2].target, "/api/v1/pods?limit=2&continue=4");  // no version with continue
}

TEST_F(ClientTest, ListAllRestartsOnceWhenALaterPageExpired) {
  std::atomic<int> expire{1};
  ServePages(server_, &expire);
  server_.Start();
  auto r = MakeClient()->ListAll(kPods, "", Pages(2));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ((*r)["items"].size(), 5u);
  EXPECT_EQ(server_.requests(), 5);  // first page, expired second page, then three pages
}

TEST_F(ClientTest, ListAllGivesUpWhenTheRestartExpiresToo) {
  std::atomic<int> expire{2};
  ServePages(server_, &expire);
  server_.Start();
  auto r = MakeClient()->ListAll(kPods, "", Pages(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kExpired);
}

TEST_F(ClientTest, CreatePostsTheObjectToTheCollection) {
  server_.Post("/api/v1/namespaces/default/pods", [](const auto& req, auto& res) {
    json obj = json::parse(req.body);
    obj["metadata"]["uid"] = "u-1";
    Reply(res, 201, obj);
  });
  server_.Start();
  auto r = MakeClient()->Create(kPods, "default", Pod("x", ""));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ((*r)["metadata"]["uid"], "u-1");
  EXPECT_EQ(server_.seen()[0].Header("Content-Type"), "application/json");
}

TEST_F(ClientTest, CreateOfAnExistingNameIsConflict) {
  server_.Post("/api/v1/namespaces/default/pods", [](const auto&, auto& res) {
    Reply(res, 409, StatusBody(409, "AlreadyExists", "pods \"x\" already exists"));
  });
  server_.Start();
  auto r = MakeClient()->Create(kPods, "", Pod("x", ""));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kConflict);
  EXPECT_EQ(r.error().message(), "create pods default/x: 409 Conflict: pods \"x\" already exists");
}

TEST_F(ClientTest, BindingIsPostedToThePodsBindingSubresource) {
  std::atomic<int> calls{0};
  server_.Post("/api/v1/namespaces/default/pods/x/binding", [&](const auto& req, auto& res) {
    if (calls++ > 0) {
      Reply(res, 409, StatusBody(409, "Conflict", "pod x is already assigned"));
      return;
    }
    EXPECT_EQ(json::parse(req.body)["target"]["name"], "node-1");
    Reply(res, 201, {{"kind", "Status"}, {"status", "Success"}, {"code", 201}});
  });
  server_.Start();
  auto client = MakeClient();
  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", "x"}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "node-1"}}}};
  auto r = client->CreateSubresource(kPods, "default", "x", "binding", binding);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ((*r)["status"], "Success");
  auto again = client->CreateSubresource(kPods, "default", "x", "binding", binding);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), ErrorCode::kConflict);
  EXPECT_EQ(again.error().message(),
            "create pods default/x binding: 409 Conflict: pod x is already assigned");
}

TEST_F(ClientTest, UpdatePutsToTheObjectAndAStaleVersionIsConflict) {
  server_.Put("/api/v1/namespaces/default/pods/x", [](const auto& req, auto& res) {
    json obj = json::parse(req.body);
    if (obj["metadata"]["resourceVersion"] != "5") {
      Reply(res, 409,
            StatusBody(409, "Conflict",
                       "Operation cannot be fulfilled on pods \"x\": the object has been "
                       "modified; please apply your changes to the latest version and try again"));
      return;
    }
    obj["metadata"]["resourceVersion"] = "6";
    Reply(res, 200, obj);
  });
  server_.Put("/api/v1/namespaces/default/pods/x/status",
              [](const auto& req, auto& res) { Reply(res, 200, json::parse(req.body)); });
  server_.Start();
  auto client = MakeClient();
  auto ok = client->Update(kPods, Pod("x", "5"));
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  EXPECT_EQ((*ok)["metadata"]["resourceVersion"], "6");
  auto stale = client->Update(kPods, Pod("x", "4"));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code(), ErrorCode::kConflict);
  EXPECT_EQ(stale.error().message(),
            "update pods default/x: 409 Conflict: Operation cannot be fulfilled on pods \"x\": the "
            "object has been modified; please apply your changes to the latest version and try "
            "again");
  EXPECT_TRUE(client->Update(kPods, Pod("x", "4"), "status").ok());
  EXPECT_EQ(server_.seen().back().path, "/api/v1/namespaces/default/pods/x/status");
}

TEST_F(ClientTest, UpdateWithoutANameFailsBeforeSending) {
  server_.Start();
  auto r = MakeClient()->Update(kPods, {{"metadata", json::object()}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr("metadata.name is missing"));
  EXPECT_EQ(server_.requests(), 0);
}

TEST_F(ClientTest, PatchSendsTheContentTypeOfEachPatchType) {
  server_.Patch("/api/v1/nodes/n1", [](const auto& req, auto& res) {
    Reply(res, 200, {{"echo", json::parse(req.body)}});
  });
  server_.Start();
  auto client = MakeClient();
  json merge = {{"metadata", {{"annotations", {{"hami.io/node-handshake", "Requesting_x"}}}}}};
  auto r = client->Patch(kNodes, "", "n1", PatchType::kMerge, merge);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ((*r)["echo"], merge);
  ASSERT_TRUE(client->Patch(kNodes, "", "n1", PatchType::kJson, json::array()).ok());
  ASSERT_TRUE(client->Patch(kNodes, "", "n1", PatchType::kStrategic, merge).ok());
  auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].Header("Content-Type"), "application/merge-patch+json");
  EXPECT_EQ(seen[1].Header("Content-Type"), "application/json-patch+json");
  EXPECT_EQ(seen[2].Header("Content-Type"), "application/strategic-merge-patch+json");
}

TEST_F(ClientTest, FailedJsonPatchTestIsInvalidArgumentNaming422) {
  server_.Patch("/api/v1/namespaces/default/pods/x", [](const auto&, auto& res) {
    Reply(res, 422,
          StatusBody(422, "Invalid",
                     "the server rejected our request due to an error in our "
                     "request: testing value /metadata/resourceVersion failed"));
  });
  server_.Start();
  json patch = json::array({{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", "3"}},
                            {{"op", "add"}, {"path", "/metadata/labels/a"}, {"value", "b"}}});
  auto r = MakeClient()->Patch(kPods, "default", "x", PatchType::kJson, patch);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(),
              StartsWith("patch pods default/x: 422 Unprocessable Entity: the server rejected"));
  EXPECT_THAT(r.error().message(), HasSubstr("testing value /metadata/resourceVersion failed"));
}

TEST_F(ClientTest, DeleteWithAPreconditionSendsDeleteOptions) {
  server_.Delete("/api/v1/namespaces/default/pods/x", [](const auto& req, auto& res) {
    if (req.body.empty()) {
      Reply(res, 200, Pod("x", "3"));
      return;
    }
    json o = json::parse(req.body);
    if (o["preconditions"]["resourceVersion"] != "3") {
      Reply(res, 409,
            StatusBody(409, "Conflict",
                       "Operation cannot be fulfilled on pods \"x\": the ResourceVersion in the "
                       "precondition (2) does not match the ResourceVersion in record (3)"));
      return;
    }
    Reply(res, 200, Pod("x", "3"));
  });
  server_.Start();
  auto client = MakeClient();
  auto stale = client->Delete(kPods, "default", "x", "2");
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(stale.error().message(), StartsWith("delete pods default/x: 409 Conflict: "));
  auto ok = client->Delete(kPods, "default", "x", "3");
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  EXPECT_EQ((*ok)["metadata"]["name"], "x");
  EXPECT_EQ(json::parse(server_.seen()[1].body)["kind"], "DeleteOptions");
  EXPECT_TRUE(client->Delete(kPods, "default", "x").ok());
  EXPECT_EQ(server_.seen()[2].body, "");
}

// Answers with `failures` errors (status, optional Retry-After), then 200; counts calls.
struct Flaky {
  int failures;
  int status;
  std::string retry_after;
  std::atomic<int> calls{0};
};

httplib::Server::Handler FlakyHandler(Flaky* f) {
  return [f](const httplib::Request&, httplib::Response& res) {
    if (f->calls++ < f->failures) {
      if (!f->retry_after.empty()) res.set_header("Retry-After", f->retry_after);
      Reply(res, f->status, StatusBody(f->status, "TooManyRequests", "slow down"));
      return;
    }
    Reply(res, 200, Pod("x", "1"));
  };
}

TEST_F(ClientTest, TooManyRequestsIsRetriedAfterTheRetryAfterSeconds) {
  Flaky f{2, 429, "3"};
  server_.Get("/api/v1/namespaces/default/pods/x", FlakyHandler(&f));
  server_.Start();
  auto r = MakeClient(Unlimited())->Get(kPods, "default", "x");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(f.calls, 3);
  EXPECT_EQ(clock_.sleeps(), 2);
  EXPECT_EQ(clock_.slept(), std::chrono::seconds(6));  // exactly the header's 3 s, twice
}

TEST_F(ClientTest, TooManyRequestsIsRetriedEvenForCreate) {
  Flaky f{1, 429, "1"};
  server_.Post("/api/v1/namespaces/default/pods", FlakyHandler(&f));
  server_.Start();
  EXPECT_TRUE(MakeClient(Unlimited())->Create(kPods, "default", Pod("x", "")).ok());
  EXPECT_EQ(f.calls, 2);
}

TEST_F(ClientTest, ServerErrorIsRetriedWithJitteredExponentialBackoffThenSucceeds) {
  Flaky f{3, 500, ""};
  server_.Get("/api/v1/namespaces/default/pods/x", FlakyHandler(&f));
  server_.Start();
  ClientOptions o = Unlimited();
  o.retry_base = milliseconds(100);
  o.retry_cap = milliseconds(250);
  auto r = MakeClient(o)->Get(kPods, "default", "x");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(f.calls, 4);
  EXPECT_EQ(clock_.sleeps(), 3);
  // 100, 200, then 400 capped at 250 ms; each drawn from the upper half of its step.
  EXPECT_GE(clock_.slept(), milliseconds(50 + 100 + 125));
  EXPECT_LE(clock_.slept(), milliseconds(100 + 200 + 250));
}

TEST_F(ClientTest, RetriesExhaustedIsUnavailableNamingTheAttempts) {
  Flaky f{100, 503, ""};
  server_.Get("/api/v1/namespaces/default/pods/x", FlakyHandler(&f));
  server_.Start();
  auto r = MakeClient(Unlimited(3))->Get(kPods, "default", "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(r.error().message(),
            "get pods default/x: 503 Service Unavailable: slow down (gave up after 4 attempts)");
  EXPECT_EQ(f.calls, 4);
}

TEST_F(ClientTest, CreateIsNotRetriedOnServerError) {
  Flaky f{1, 500, ""};
  server_.Post("/api/v1/namespaces/default/pods", FlakyHandler(&f));
  server_.Start();
  auto r = MakeClient(Unlimited())->Create(kPods, "default", Pod("x", ""));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(f.calls, 1);
}

TEST_F(ClientTest, UnavailableWithRetryAfterIsRetriedEvenForCreate) {
  Flaky f{1, 503, "2"};
  server_.Post("/api/v1/namespaces/default/pods", FlakyHandler(&f));
  server_.Start();
  EXPECT_TRUE(MakeClient(Unlimited())->Create(kPods, "default", Pod("x", "")).ok());
  EXPECT_EQ(f.calls, 2);
  EXPECT_EQ(clock_.slept(), std::chrono::seconds(2));
}

TEST_F(ClientTest, MergePatchIsRetriedOnServerErrorButJsonPatchIsNot) {
  Flaky merge{1, 500, ""};
  Flaky json_patch{1, 500, ""};
  server_.Patch("/api/v1/nodes/merge", FlakyHandler(&merge));
  server_.Patch("/api/v1/nodes/json", FlakyHandler(&json_patch));
  server_.Start();
  auto client = MakeClient(Unlimited());
  EXPECT_TRUE(client->Patch(kNodes, "", "merge", PatchType::kMerge, json::object()).ok());
  EXPECT_EQ(merge.calls, 2);
  EXPECT_FALSE(client->Patch(kNodes, "", "json", PatchType::kJson, json::array()).ok());
  EXPECT_EQ(json_patch.calls, 1);
}

TEST_F(ClientTest, RequestTimeoutIsTimeoutAndNotRetried) {
  // The server answers only once the client has given up (or after 10 s): no answer can
  // arrive within the client's deadline, however slow the machine. The handler's state is
  // shared with it: the handler may still be waking when this test's body has returned.
  struct Gate {
    std::atomic<int> calls{0};
    std::mutex mu;
    std::condition_variable cv;
    bool client_done = false;
  };
  auto gate = std::make_shared<Gate>();
  server_.Get("/api/v1/nodes/slow", [gate](const auto&, auto& res) {
    ++gate->calls;
    std::unique_lock lock(gate->mu);
    gate->cv.wait_for(lock, std::chrono::seconds(10), [&] { return gate->client_done; });
    Reply(res, 200, json::object());
  });
  server_.Start();
  auto r = MakeClient(WithTimeout(milliseconds(150)))->Get(kNodes, "", "slow");
  {
    std::lock_guard lock(gate->mu);
    gate->client_done = true;
  }
  gate->cv.notify_all();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kTimeout);
  EXPECT_THAT(r.error().message(), StartsWith("get nodes slow: no answer within the deadline"));
  EXPECT_EQ(gate->calls, 1);
}

TEST_F(ClientTest, StopDuringTheWaitBeforeARetryEndsTheListAtOnce) {
  server_.Get("/api/v1/pods", [](const auto&, auto& res) {
    res.set_header("Retry-After", "30");
    Reply(res, 429, StatusBody(429, "TooManyRequests", "slow down"));
  });
  server_.Start();
  ClientOptions options = Unlimited();
  options.clock = Clock::Steady();  // a real wait, to interrupt
  auto client = MakeClient(options);
  std::stop_source stop;
  auto list = std::async(std::launch::async,
                         [&] { return client->ListAll(kPods, "", Pages(2), stop.get_token()); });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server_.requests() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(server_.requests(), 1);
  auto stopped_at = std::chrono::steady_clock::now();
  stop.request_stop();
  ASSERT_EQ(list.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, std::chrono::seconds(1));
  auto r = list.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kTimeout);
  EXPECT_EQ(r.error().message(), "list pods: stopped by the caller");
  EXPECT_EQ(server_.requests(), 1);  // no retry after the stop
}

TEST_F(ClientTest, RefusedConnectionIsRetriedThenUnavailable) {
  // A port that was just free: bound, never listened on, closed.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int port = ntohs(addr.sin_port);
  close(fd);
  Config config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  auto client = MakeClient(Unlimited(2), config);
  auto r = client->Create(kPods, "default", Pod("x", ""));  // nothing sent: safe even for POST
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message(), HasSubstr("(gave up after 3 attempts)"));
  EXPECT_EQ(clock_.sleeps(), 2);
}

// A body cut short: Content-Length promises more than is sent, then the connection closes.
httplib::Server::Handler CutBodyOnce(std::atomic<int>* calls) {
  return [calls](const httplib::Request&, httplib::Response& res) {
    if ((*calls)++ == 0) {
      res.set_content_provider(1000, "application/json",
                               [](size_t, size_t, httplib::DataSink& sink) {
                                 sink.write("{\"kind\":", 8);
                                 return false;
                               });
      return;
    }
    Reply(res, 200, Pod("x", "1"));
  };
}

TEST_F(ClientTest, ConnectionClosedMidBodyIsRetriedForGetButNotForCreate) {
  std::atomic<int> gets{0}, posts{0};
  server_.Get("/api/v1/namespaces/default/pods/x", CutBodyOnce(&gets));
  server_.Post("/api/v1/namespaces/default/pods", CutBodyOnce(&posts));
  server_.Start();
  auto client = MakeClient(Unlimited());
  auto got = client->Get(kPods, "default", "x");
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(gets, 2);
  auto created = client->Create(kPods, "default", Pod("x", ""));
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(posts, 1);
}

TEST_F(ClientTest, SequentialRequestsReuseOneConnection) {
  server_.Get("/api/v1/nodes/n", [](const auto&, auto& res) { Reply(res, 200, json::object()); });
  server_.Start();
  auto client = MakeClient(Unlimited());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(client->Get(kNodes, "", "n").ok());
  EXPECT_EQ(server_.requests(), 20);
  EXPECT_EQ(server_.connections(), 1);
}

TEST_F(ClientTest, ConcurrentRequestsShareAPoolOfConnections) {
  server_.Get("/api/v1/nodes/n", [](const auto&, auto& res) { Reply(res, 200, json::object()); });
  server_.Start();
  auto client = MakeClient(Unlimited());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) failures += client->Get(kNodes, "", "n").ok() ? 0 : 1;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(server_.requests(), 100);
  EXPECT_LE(server_.connections(), 4);  // at most one per concurrent caller
}

TEST_F(ClientTest, RequestsAreRateLimitedWithQpsAndBurst) {
  server_.Get("/api/v1/nodes/n", [](const auto&, auto& res) { Reply(res, 200, json::object()); });
  server_.Start();
  auto client = MakeClient(Limited(10, 2));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(client->Get(kNodes, "", "n").ok());
  // Two from the burst, then three at 100 ms each (the fake clock does not move otherwise).
  EXPECT_EQ(clock_.sleeps(), 3);
  EXPECT_NEAR(double(clock_.slept().count()), 300e6, 1e3);
}

class TokenFileTest : public ClientTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    WriteToken("old-token");
    server_.Get("/api/v1/nodes/n", [this](const httplib::Request& req, auto& res) {
      if (req.get_header_value("Authorization") != "Bearer " + accepted_) {
        Reply(res, 401, StatusBody(401, "Unauthorized", "Unauthorized"));
        return;
      }
      Reply(res, 200, json::object());
    });
    server_.Start();
  }
  void WriteToken(const std::string& token) {
    std::string tmp = dir_.File("token.tmp");
    std::ofstream(tmp) << token << "\n";
    ASSERT_EQ(rename(tmp.c_str(), dir_.File("token").c_str()), 0);  // as the kubelet swaps it
  }
  std::unique_ptr<Client> TokenClient() {
    Config config;
    config.bearer_token_file = dir_.File("token");
    return MakeClient(Unlimited(), config);
  }
  TempDir dir_{"kube-token"};
  std::string accepted_ = "old-token";
};

TEST_F(TokenFileTest, UnauthorizedRereadsARotatedTokenFileAndRepeatsTheRequest) {
  auto client = TokenClient();
  ASSERT_TRUE(client->Get(kNodes, "", "n").ok());
  accepted_ = "new-token-which-is-longer";
  WriteToken(accepted_);
  auto r = client->Get(kNodes, "", "n");  // the clock has not moved: no periodic check yet
  ASSERT_TRUE(r.ok()) << r.error().message();
  auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1].Header("Authorization"), "Bearer old-token");
  EXPECT_EQ(seen[2].Header("Authorization"), "Bearer " + accepted_);
  EXPECT_EQ(clock_.sleeps(), 0);  // not a retry: no backoff
}

TEST_F(TokenFileTest, TokenFileIsCheckedForChangesAfterASecond) {
  auto client = TokenClient();
  ASSERT_TRUE(client->Get(kNodes, "", "n").ok());
  accepted_ = "rotated";
  WriteToken(accepted_);
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(client->Get(kNodes, "", "n").ok());
  auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 2u);  // no 401 first
  EXPECT_EQ(seen[1].Header("Authorization"), "Bearer rotated");
}

TEST_F(TokenFileTest, UnauthorizedWithAnUnchangedTokenIsPermission) {
  accepted_ = "something-else";
  auto r = TokenClient()->Get(kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kPermission);
  EXPECT_EQ(r.error().message(), "get nodes n: 401 Unauthorized: Unauthorized");
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(TokenFileTest, CreateFailsWhenTheTokenFileIsUnreadable) {
  Config config;
  config.server = server_.url();
  config.bearer_token_file = dir_.File("missing");
  config.source = "kubeconfig /k (context c)";
  auto c = Client::Create(config);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.error().message(), StartsWith("kubeconfig /k (context c): token file "));
}

TEST(ClientCreate, RefusesAServerThatIsNotAnHttpUrl) {
  Config config;
  config.server = "ftp://h";
  auto c = Client::Create(config);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kInvalidArgument);
}

TEST(DescribeObject, NamesObjectsAndCollections) {
  EXPECT_EQ(DescribeObject(kPods, "default", "x"), "pods default/x");
  EXPECT_EQ(DescribeObject(kNodes, "ignored", "node-1"), "nodes node-1");
  EXPECT_EQ(DescribeObject(kLeases, "kube-system", "hami"),
            "leases.coordination.k8s.io kube-system/hami");
  EXPECT_EQ(DescribeObject(kPods, "default", ""), "pods in default");
  EXPECT_EQ(DescribeObject(kPods, "", ""), "pods");
}

// --- Watch ---

std::string Event(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

// Serves a watch on /api/v1/pods whose body is `chunks`, one chunk per write; after the last,
// the stream ends cleanly (`cut` false) or the connection is dropped mid-stream (`cut` true).
void ServeWatch(FakeServer& server, std::vector<std::string> chunks, bool cut = false) {
  server.Get("/api/v1/pods", [chunks, cut](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("application/json",
                                     [chunks, cut](size_t, httplib::DataSink& sink) {
                                       for (const std::string& c : chunks) {
                                         sink.write(c.data(), c.size());
                                       }
                                       if (cut) return false;
                                       sink.done();
                                       return true;
                                     });
  });
}

struct Collected {
  std::vector<WatchEvent> events;
  std::function<bool(WatchEvent&&)> handler() {
    return [this](WatchEvent&& e) {
      events.push_back(std::move(e));
      return true;
    };
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& e : events) out.push_back(e.object["metadata"].value("name", "?"));
    return out;
  }
};

TEST_F(ClientTest, WatchDeliversEventsSplitAcrossChunksAndSeveralPerChunk) {
  std::string a = Event("ADDED", Pod("a", "11"));
  std::string b = Event("MODIFIED", Pod("b", "12"));
  std::string c = Event("DELETED", Pod("c", "13"));
  std::string bookmark = Event(
      "BOOKMARK", {{"kind", "Pod"}, {"metadata", {{"name", "bm"}, {"resourceVersion", "14"}}}});
  ServeWatch(server_,
             {a.substr(0, 10), a.substr(10) + b + c.substr(0, 5), c.substr(5) + "\n" + bookmark});
  server_.Start();
  Collected got;
  WatchOptions o;
  o.resource_version = "10";
  o.timeout_seconds = 30;
  o.label_selector = "app=x";
  auto end = MakeClient()->Watch(kPods, "", o, got.handler());
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(*end, WatchEnd::kServerClosed);
  ASSERT_EQ(got.events.size(), 4u);
  EXPECT_EQ(got.events[0].type, WatchEventType::kAdded);
  EXPECT_EQ(got.events[1].type, WatchEventType::kModified);
  EXPECT_EQ(got.events[2].type, WatchEventType::kDeleted);
  EXPECT_EQ(got.events[3].type, WatchEventType::kBookmark);
  EXPECT_EQ(got.Names(), (std::vector<std::string>{"a", "b", "c", "bm"}));
  auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].target,
            "/api/v1/pods?watch=true&labelSelector=app%3Dx&resourceVersion=10"
            "&allowWatchBookmarks=true&timeoutSeconds=30");
}

TEST_F(ClientTest, WatchAcceptsALastEventWithoutItsNewline) {
  std::string a = Event("ADDED", Pod("a", "1"));
  a.pop_back();
  ServeWatch(server_, {a});
  server_.Start();
  Collected got;
  auto end = MakeClient()->Watch(kPods, "", {}, got.handler());
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(got.Names(), (std::vector<std::string>{"a"}));
}

TEST_F(ClientTest, WatchGarbageLineIsCorruptAndNeverHandedOn) {
  ServeWatch(server_, {Event("ADDED", Pod("a", "1")) + "this is not json\n" +
                       Event("ADDED", Pod("b", "2"))});
  server_.Start();
  Collected got;
  auto end = MakeClient()->Watch(kPods, "", {}, got.handler());
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(end.error().message(), "watch pods: event 2: not JSON: this is not json");
  EXPECT_EQ(got.Names(), (std::vector<std::string>{"a"}));
}

TEST_F(ClientTest, WatchEventOfUnknownTypeOrWithoutObjectIsCorrupt) {
  ServeWatch(server_, {"{\"type\":\"RENAMED\",\"object\":{}}\n"});
  server_.Get("/api/v1/nodes", [](const auto&, auto& res) {
    res.set_content("{\"type\":\"ADDED\"}\n", "application/json");
  });
  server_.Start();
  Collected got;
  auto client = MakeClient();
  auto end = client->Watch(kPods, "", {}, got.handler());
  ASSERT_FALSE(end.ok());
  EXPECT_THAT(end.error().message(), HasSubstr("unknown event type \"RENAMED\""));
  end = client->Watch(kNodes, "", {}, got.handler());
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(end.error().message(), HasSubstr("no \"object\""));
  EXPECT_TRUE(got.events.empty());
}

TEST_F(ClientTest, WatchErrorEventWith410IsHandedOnThenExpired) {
  ServeWatch(server_,
             {Event("ERROR", StatusBody(410, "Expired", "too old resource version: 2 (8)"))});
  server_.Start();
  Collected got;
  auto end = MakeClient()->Watch(kPods, "", WatchFrom("2"), got.handler());
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().code(), ErrorCode::kExpired);
  EXPECT_EQ(end.error().message(),
            "watch pods: ERROR event: 410 Gone: too old resource version: 2 (8)");
  ASSERT_EQ(got.events.size(), 1u);
  EXPECT_EQ(got.events[0].type, WatchEventType::kError);
  EXPECT_EQ(got.events[0].object["code"], 410);
}

TEST_F(ClientTest, WatchAnswered410IsExpired) {
  server_.Get("/api/v1/namespaces/default/pods", [](const auto&, auto& res) {
    Reply(res, 410, StatusBody(410, "Expired", "too old"));
  });
  server_.Start();
  Collected got;
  auto end = MakeClient()->Watch(kPods, "default", {}, got.handler());
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().code(), ErrorCode::kExpired);
  EXPECT_EQ(end.error().message(), "watch pods in default: 410 Gone: too old");
}

TEST_F(ClientTest, WatchStartIsRetriedOnTooManyRequests) {
  std::atomic<int> calls{0};
  std::string a = Event("ADDED", Pod("a", "1"));
  server_.Get("/api/v1/pods", [&](const auto&, httplib::Response& res) {
    if (calls++ == 0) {
      res.set_header("Retry-After", "1");
      Reply(res, 429, StatusBody(429, "TooManyRequests", "slow down"));
      return;
    }
    res.set_content(a, "application/json");
  });
  server_.Start();
  Collected got;
  auto end = MakeClient(Unlimited())->Watch(kPods, "", {}, got.handler());
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(clock_.slept(), std::chrono::seconds(1));
  EXPECT_EQ(got.Names(), (std::vector<std::string>{"a"}));
}

TEST_F(ClientTest, WatchCutMidEventEndsAsServerClosedWithoutThePartialEvent) {
  std::string b = Event("ADDED", Pod("b", "2"));
  ServeWatch(server_, {Event("ADDED", Pod("a", "1")), b.substr(0, 15)}, /*cut=*/true);
  server_.Start();
  Collected got;
  auto end = MakeClient()->Watch(kPods, "", {}, got.handler());
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(*end, WatchEnd::kServerClosed);
  EXPECT_EQ(got.Names(), (std::vector<std::string>{"a"}));
  EXPECT_EQ(server_.requests(), 1);  // not retried: the caller resumes from "a"'s version
}

TEST_F(ClientTest, WatchHandlerReturningFalseStops) {
  ServeWatch(server_, {Event("ADDED", Pod("a", "1")) + Event("ADDED", Pod("b", "2"))});
  server_.Start();
  int n = 0;
  auto end = MakeClient()->Watch(kPods, "", {}, [&](WatchEvent&&) { return ++n < 1; });
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(*end, WatchEnd::kStopped);
  EXPECT_EQ(n, 1);
}

// Holds a streaming handler until the test opens it; shared so that a handler thread that is
// still waking up never touches a destroyed mutex.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Wait(std::chrono::seconds limit) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, limit, [&] { return open; });
  }
  void Open() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

TEST_F(ClientTest, StopTokenEndsAnIdleWatchPromptly) {
  auto gate = std::make_shared<Gate>();
  server_.Get("/api/v1/pods", [gate](const auto&, httplib::Response& res) {
    res.set_chunked_content_provider("application/json", [gate](size_t, httplib::DataSink& sink) {
      std::string a = Event("ADDED", Pod("a", "1"));
      sink.write(a.data(), a.size());
      gate->Wait(std::chrono::seconds(20));  // then stays open and silent
      return false;
    });
  });
  server_.Start();
  auto client = MakeClient();
  std::promise<void> first_event;
  std::promise<std::chrono::steady_clock::time_point> returned;
  auto returned_at = returned.get_future();
  std::stop_source stop;
  Result<WatchEnd> end = WatchEnd::kServerClosed;
  std::thread watcher([&] {
    bool once = false;
    end = client->Watch(
        kPods, "", {},
        [&](WatchEvent&&) {
          if (!once) first_event.set_value();
          once = true;
          return true;
        },
        stop.get_token());
    returned.set_value(std::chrono::steady_clock::now());
  });
  auto cleanup = [&] {  // also on a failed ASSERT: never leave the thread or the handler
    stop.request_stop();
    if (watcher.joinable()) watcher.join();
    gate->Open();
  };
  std::future_status first = first_event.get_future().wait_for(std::chrono::seconds(10));
  auto stop_at = std::chrono::steady_clock::now();
  stop.request_stop();
  std::future_status done = returned_at.wait_for(std::chrono::seconds(5));
  auto took = done == std::future_status::ready ? returned_at.get() - stop_at
                                                : std::chrono::steady_clock::duration::max();
  cleanup();
  ASSERT_EQ(first, std::future_status::ready);
  ASSERT_EQ(done, std::future_status::ready);
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(*end, WatchEnd::kStopped);
  EXPECT_LT(took, milliseconds(100))
      << "the stop took " << std::chrono::duration<double, std::milli>(took).count() << " ms";
}

TEST_F(ClientTest, WatchWithTheStopAlreadyRequestedSendsNothing) {
  server_.Start();
  std::stop_source stop;
  stop.request_stop();
  Collected got;
  auto end = MakeClient()->Watch(kPods, "", {}, got.handler(), stop.get_token());
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(*end, WatchEnd::kStopped);
  EXPECT_EQ(server_.requests(), 0);
}

// --- TLS ---

// A key and certificate made at test time. The CA signs the others.
struct Pki {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  Pki() = default;
  Pki(const Pki&) = delete;
  Pki& operator=(const Pki&) = delete;
  ~Pki() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
  std::string CertPem() const {
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(bio, cert);
    return Drain(bio);
  }
  std::string KeyPem() const {
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
    return Drain(bio);
  }

 private:
  static std::string Drain(BIO* bio) {
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    std::string out(data, size_t(n));
    BIO_free(bio);
    return out;
  }
};

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  ASSERT_NE(ext, nullptr) << value;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A P-256 key and a certificate for `cn`, signed by `ca` (self-signed when null).
void MakePki(Pki* out, const char* cn, const Pki* ca, bool is_ca, const char* san = nullptr) {
  static std::atomic<long> serial{1};
  out->key = EVP_EC_gen("P-256");
  ASSERT_NE(out->key, nullptr);
  X509* x = X509_new();
  out->cert = x;
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, out->key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509* issuer = ca != nullptr ? ca->cert : x;
  X509_set_issuer_name(x, X509_get_subject_name(issuer));
  AddExtension(x, issuer, NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
  AddExtension(x, issuer, NID_key_usage,
               is_ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
  AddExtension(x, issuer, NID_subject_key_identifier, "hash");
  if (!is_ca) AddExtension(x, issuer, NID_ext_key_usage, "serverAuth,clientAuth");
  if (san != nullptr) AddExtension(x, issuer, NID_subject_alt_name, san);
  ASSERT_GT(X509_sign(x, ca != nullptr ? ca->key : out->key, EVP_sha256()), 0);
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakePki(&ca_, "hami-test-ca", nullptr, true);
    MakePki(&server_pki_, "127.0.0.1", &ca_, false, "IP:127.0.0.1");
    MakePki(&client_pki_, "hami-client", &ca_, false);
    MakePki(&other_ca_, "other-ca", nullptr, true);
    X509_STORE* client_cas = X509_STORE_new();  // owned by the server from here
    X509_STORE_add_cert(client_cas, ca_.cert);
    auto tls = std::make_unique<httplib::SSLServer>(server_pki_.cert, server_pki_.key, client_cas);
    ASSERT_TRUE(tls->is_valid());
    server_ = std::make_unique<FakeServer>(std::move(tls));
    server_->Get("/api/v1/nodes/n", [](const auto&, auto& res) {
      Reply(res, 200, {{"kind", "Node"}, {"metadata", {{"name", "n"}}}});
    });
    server_->Start(/*tls=*/true);
  }

  Result<std::unique_ptr<Client>> TlsClient(const std::string& ca_pem, bool with_client_cert,
                                            bool insecure = false) {
    Config config;
    config.server = server_->url();
    config.ca_pem = ca_pem;
    if (with_client_cert) {
      config.client_cert_pem = client_pki_.CertPem();
      config.client_key_pem = client_pki_.KeyPem();
    }
    config.insecure_skip_tls_verify = insecure;
    ClientOptions o;
    o.qps = 0;
    o.max_retries = 1;
    o.clock = &clock_;
    return Client::Create(config, o);
  }

  Pki ca_, server_pki_, client_pki_, other_ca_;
  std::unique_ptr<FakeServer> server_;
  FakeClock clock_;
};

TEST_F(TlsTest, TrustsTheServerThroughTheCaFromMemoryAndPresentsTheClientCertificate) {
  auto client = TlsClient(ca_.CertPem(), true);
  ASSERT_TRUE(client.ok()) << client.error().message();
  for (int i = 0; i < 3; ++i) {
    auto r = (*client)->Get(kNodes, "", "n");
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ((*r)["metadata"]["name"], "n");
  }
  EXPECT_EQ(server_->connections(), 1);  // the TLS connection is kept and reused
}

TEST_F(TlsTest, AServerSignedByAnotherCaIsRefusedAsPermission) {
  auto client = TlsClient(other_ca_.CertPem(), true);
  ASSERT_TRUE(client.ok()) << client.error().message();
  auto r = (*client)->Get(kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kPermission);
  EXPECT_THAT(r.error().message(), StartsWith("get nodes n: TLS with " + server_->url()));
  EXPECT_EQ(server_->requests(), 0);
}

TEST_F(TlsTest, WithoutAClientCertificateTheServerRefusesTheRequest) {
  auto client = TlsClient(ca_.CertPem(), false);
  ASSERT_TRUE(client.ok()) << client.error().message();
  auto r = (*client)->Get(kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(server_->requests(), 0);
}

TEST_F(TlsTest, InsecureSkipVerifyConnectsWithoutTheCa) {
  auto client = TlsClient("", true, /*insecure=*/true);
  ASSERT_TRUE(client.ok()) << client.error().message();
  auto r = (*client)->Get(kNodes, "", "n");
  ASSERT_TRUE(r.ok()) << r.error().message();
}

TEST_F(TlsTest, WithoutTheCaTheSystemStoreDoesNotTrustATestServer) {
  auto client = TlsClient("", true);
  ASSERT_TRUE(client.ok()) << client.error().message();
  auto r = (*client)->Get(kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kPermission);
}

// --- Against the simulated API server ---

class SimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(server.ok()) << server.error().message();
    sim_ = std::move(*server);
    ASSERT_TRUE(dir_.ok());
    ASSERT_TRUE(sim_->WriteKubeconfig(dir_.File("kubeconfig")).ok());
    auto config = LoadKubeconfig(dir_.File("kubeconfig"));
    ASSERT_TRUE(config.ok()) << config.error().message();
    ClientOptions o;
    o.qps = 0;
    o.max_retries = 10;
    o.clock = &clock_;
    auto client = Client::Create(*config, o);
    ASSERT_TRUE(client.ok()) << client.error().message();
    client_ = std::move(*client);
  }
  json SimPod(const std::string& name, const std::string& node = "") {
    json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", "x"}}}}},
        {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
    if (!node.empty()) pod["spec"]["nodeName"] = node;
    return pod;
  }
  void SetFaults(const sim::kube::Faults& f) { sim_->SetFaults(f); }

  TempDir dir_{"kube-sim"};
  FakeClock clock_;
  std::unique_ptr<sim::kube::ApiServer> sim_;
  std::unique_ptr<Client> client_;
};

TEST_F(SimTest, EveryVerbSucceedsAndFailsAsTheApiSays) {
  auto created = client_->Create(kPods, "default", SimPod("p"));
  ASSERT_TRUE(created.ok()) << created.error().message();
  std::string rv = (*created)["metadata"]["resourceVersion"];
  EXPECT_EQ(client_->Create(kPods, "default", SimPod("p")).error().code(), ErrorCode::kConflict);

  auto got = client_->Get(kPods, "default", "p");
  ASSERT_TRUE(got.ok()) << got.error().message();
  json updated = *got;
  updated["metadata"]["labels"]["tier"] = "web";
  auto put = client_->Update(kPods, updated);
  ASSERT_TRUE(put.ok()) << put.error().message();
  auto stale = client_->Update(kPods, updated);  // still carries the old version
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code(), ErrorCode::kConflict);
  EXPECT_THAT(stale.error().message(),
              StartsWith("update pods default/p: 409 Conflict: Operation cannot be fulfilled on "
                         "pods \"p\": the object has been modified"));

  json merge = {{"metadata", {{"annotations", {{"hami.io/bind-phase", "allocating"}}}}}};
  auto patched = client_->Patch(kPods, "default", "p", PatchType::kMerge, merge);
  ASSERT_TRUE(patched.ok()) << patched.error().message();
  EXPECT_EQ((*patched)["metadata"]["annotations"]["hami.io/bind-phase"], "allocating");

  json guarded = json::array(
      {{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", rv}},
       {{"op", "add"}, {"path", "/metadata/annotations/hami.io~1vgpu-node"}, {"value", "n1"}}});
  auto refused = client_->Patch(kPods, "default", "p", PatchType::kJson, guarded);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(refused.error().message(), StartsWith("patch pods default/p: 422 "));
  guarded[0]["value"] = (*patched)["metadata"]["resourceVersion"];
  EXPECT_TRUE(client_->Patch(kPods, "default", "p", PatchType::kJson, guarded).ok());

  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", "p"}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "node-1"}}}};
  ASSERT_TRUE(client_->CreateSubresource(kPods, "default", "p", "binding", binding).ok());
  EXPECT_EQ(client_->Get(kPods, "default", "p")->at("spec").at("nodeName"), "node-1");
  EXPECT_EQ(client_->CreateSubresource(kPods, "default", "p", "binding", binding).error().code(),
            ErrorCode::kConflict);

  EXPECT_EQ(client_->Delete(kPods, "default", "p", "1").error().code(), ErrorCode::kConflict);
  ASSERT_TRUE(client_->Delete(kPods, "default", "p").ok());
  auto gone = client_->Get(kPods, "default", "p");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(gone.error().message(), "get pods default/p: 404 Not Found: pods \"p\" not found");
}

TEST_F(SimTest, ListAllPagesThroughSelectedPods) {
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(sim_->CreateObject(kPods, SimPod("p" + std::to_string(i), i % 2 ? "n1" : "")).ok());
  }
  ListOptions o = Pages(2);
  auto all = client_->ListAll(kPods, "default", o);
  ASSERT_TRUE(all.ok()) << all.error().message();
  EXPECT_EQ((*all)["items"].size(), 7u);
  EXPECT_FALSE((*all)["metadata"]["resourceVersion"].get<std::string>().empty());
  o.field_selector = "spec.nodeName=n1";
  o.label_selector = "app=x";
  auto bound = client_->ListAll(kPods, "", o);
  ASSERT_TRUE(bound.ok()) << bound.error().message();
  EXPECT_EQ((*bound)["items"].size(), 3u);
}

TEST_F(SimTest, WatchFromAListsVersionSeesALaterChange) {
  ASSERT_TRUE(sim_->CreateObject(kPods, SimPod("before")).ok());
  auto list = client_->List(kPods, "default", {});
  ASSERT_TRUE(list.ok()) << list.error().message();
  WatchOptions o;
  o.resource_version = (*list)["metadata"]["resourceVersion"];
  std::vector<std::string> names;
  std::thread writer([&] {
    // The watch is open once the server counts it; then the change happens.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sim_->stats().watches_open == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    (void)sim_->CreateObject(kPods, SimPod("after"));
  });
  auto end = client_->Watch(kPods, "default", o, [&](WatchEvent&& e) {
    if (e.type == WatchEventType::kBookmark) return true;
    names.push_back(e.object["metadata"]["name"]);
    return false;  // one change is all this test waits for
  });
  writer.join();
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(names, (std::vector<std::string>{"after"}));
}

TEST_F(SimTest, CutWatchEndsAsServerClosedAfterNEvents) {
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(sim_->CreateObject(kPods, SimPod("p" + std::to_string(i))).ok());
  sim::kube::Faults f;
  f.cut_watch_after_events = 2;
  SetFaults(f);
  int events = 0;
  WatchOptions o;
  o.allow_bookmarks = false;
  auto end = client_->Watch(kPods, "default", o, [&](WatchEvent&&) {
    ++events;
    return true;
  });  // no version: a synthetic ADDED per pod, cut after two
  ASSERT_TRUE(end.ok()) << end.error().message();
  EXPECT_EQ(*end, WatchEnd::kServerClosed);
  EXPECT_EQ(events, 2);
}

TEST_F(SimTest, ForcedGoneWatchIsExpired) {
  sim::kube::Faults f;
  f.force_gone_watches = 1;
  SetFaults(f);
  Collected got;
  auto end = client_->Watch(kPods, "default", WatchFrom("1"), got.handler());
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().code(), ErrorCode::kExpired);
}

TEST_F(SimTest, TooManyRequestsAtARateAreRetriedAfterTheServersRetryAfter) {
  ASSERT_TRUE(sim_->CreateObject(kPods, SimPod("p")).ok());
  sim::kube::Faults f;
  f.rate_429 = 0.3;
  f.retry_after_seconds = 2;
  SetFaults(f);
  for (int i = 0; i < 20; ++i) {
    auto r = client_->Get(kPods, "default", "p");
    ASSERT_TRUE(r.ok()) << r.error().message();
  }
  uint64_t injected = sim_->stats().faults_injected;
  EXPECT_GT(injected, 0u);
  EXPECT_EQ(uint64_t(clock_.sleeps()), injected);
  EXPECT_EQ(clock_.slept(), std::chrono::seconds(2) * int64_t(injected));
}

TEST_F(SimTest, InternalErrorsAtARateAreRetriedForReadsButNotForCreates) {
  sim::kube::Faults f;
  f.rate_500 = 0.5;
  SetFaults(f);
  int create_failures = 0;
  for (int i = 0; i < 10; ++i) {
    auto r = client_->Create(kPods, "default", SimPod("p" + std::to_string(i)));
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
      EXPECT_THAT(r.error().message(), HasSubstr("500 Internal Server Error"));
      ++create_failures;
    }
  }
  EXPECT_GT(create_failures, 0);
  for (int i = 0; i < 10; ++i) {
    auto r = client_->List(kPods, "default", {});
    ASSERT_TRUE(r.ok()) << r.error().message();
  }
}

TEST_F(SimTest, LatencyBeyondTheRequestTimeoutIsTimeout) {
  sim::kube::Faults f;
  f.latency = milliseconds(800);
  SetFaults(f);
  auto config = LoadKubeconfig(dir_.File("kubeconfig"));
  ASSERT_TRUE(config.ok());
  auto client = Client::Create(*config, WithTimeout(milliseconds(200)));
  ASSERT_TRUE(client.ok());
  auto r = (*client)->Get(kNodes, "", "n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kTimeout);
}

TEST_F(SimTest, ListAllStoppedWhileAPageIsInFlightEndsAtOnce) {
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(sim_->CreateObject(kPods, SimPod("p" + std::to_string(i))).ok());
  sim::kube::Faults f;
  f.latency = std::chrono::seconds(60);  // beyond the client's request timeout of 30 s
  SetFaults(f);
  uint64_t before = sim_->stats().requests;
  std::stop_source stop;
  auto list = std::async(std::launch::async, [&] {
    return client_->ListAll(kPods, "default", Pages(2), stop.get_token());
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (sim_->stats().requests == before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_GT(sim_->stats().requests, before);  // the first page is being answered
  auto stopped_at = std::chrono::steady_clock::now();
  stop.request_stop();
  ASSERT_EQ(list.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, std::chrono::seconds(1));
  auto r = list.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kTimeout);
  EXPECT_EQ(r.error().message(), "list pods in default: stopped by the caller");

  // Already stopped: nothing is sent.
  SetFaults({});
  uint64_t sent = sim_->stats().requests;
  auto again = client_->List(kPods, "default", {}, stop.get_token());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message(), "list pods in default: stopped by the caller");
  EXPECT_EQ(sim_->stats().requests, sent);
  EXPECT_TRUE(client_->ListAll(kPods, "default", Pages(2)).ok());  // the client still works
}

TEST(SimTlsTest, KubeconfigWrittenByATlsServerConnectsThroughItsCertificate) {
  Pki ca, leaf;
  MakePki(&ca, "sim-ca", nullptr, true);
  MakePki(&leaf, "127.0.0.1", &ca, false, "IP:127.0.0.1");
  TempDir dir("kube-sim-tls");
  ASSERT_TRUE(dir.ok());
  // The server presents its certificate followed by the CA; the kubeconfig carries what the
  // server writes into it.
  std::ofstream(dir.File("tls.crt")) << leaf.CertPem() << ca.CertPem();
  std::ofstream(dir.File("tls.key")) << leaf.KeyPem();
  sim::kube::ApiServerOptions options;
  options.tls_cert_file = dir.File("tls.crt");
  options.tls_key_file = dir.File("tls.key");
  auto sim = sim::kube::ApiServer::Start(options);
  ASSERT_TRUE(sim.ok()) << sim.error().message();
  ASSERT_THAT((*sim)->url(), StartsWith("https://"));
  ASSERT_TRUE((*sim)->WriteKubeconfig(dir.File("kubeconfig")).ok());
  auto config = LoadKubeconfig(dir.File("kubeconfig"));
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_FALSE(config->ca_pem.empty());
  auto client = Client::Create(*config);
  ASSERT_TRUE(client.ok()) << client.error().message();
  auto ns = (*client)->Get(kNamespaces, "", "default");
  ASSERT_TRUE(ns.ok()) << ns.error().message();
  EXPECT_EQ((*ns)["metadata"]["name"], "default");
}

}  // namespace
}  // namespace hami::kube
