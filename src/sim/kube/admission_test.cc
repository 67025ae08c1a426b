// Mutating admission of pod creates: webhook matching and the review's wire form as pure
// functions, then the simulated API server calling a small test webhook (HTTP and HTTPS with a
// caBundle: patch, denial, failurePolicy, selectors) and hami-scheduler's own webhook.
#include "sim/kube/admission.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include "common/file.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "kube/base64.h"
#include "kube/config.h"
#include "kube/resource.h"
#include "scheduler/daemon.h"
#include "sim/kube/api_test_support.h"

namespace hami::sim::kube {
namespace {

using hami::kube::CollectionPath;
using hami::kube::kPods;
using nlohmann::json;
using testing::ExpectStatus;
using testing::Reply;

json Rule(json resources = {"pods"}, json operations = {"CREATE"}) {
  return {{"operations", std::move(operations)},
          {"apiGroups", {""}},
          {"apiVersions", {"v1"}},
          {"resources", std::move(resources)}};
}

json Hook(const std::string& name, const std::string& url, json extra = json::object()) {
  json h = {{"name", name},          {"clientConfig", {{"url", url}}},    {"rules", {Rule()}},
            {"sideEffects", "None"}, {"admissionReviewVersions", {"v1"}}, {"timeoutSeconds", 5}};
  h.update(extra);
  return h;
}

json Configuration(const std::string& name, json hooks) {
  return {{"apiVersion", "admissionregistration.k8s.io/v1"},
          {"kind", "MutatingWebhookConfiguration"},
          {"metadata", {{"name", name}}},
          {"webhooks", std::move(hooks)}};
}

AdmissionAttributes PodCreate(json labels = json::object(), std::string ns = "default") {
  AdmissionAttributes a;
  a.resource = &kPods;
  a.operation = "CREATE";
  a.ns = std::move(ns);
  a.name = "p";
  a.object = {{"kind", "Pod"},
              {"apiVersion", "v1"},
              {"metadata", {{"name", "p"}, {"labels", std::move(labels)}}}};
  return a;
}

std::vector<std::string> Names(const std::vector<MatchedWebhook>& hooks) {
  std::vector<std::string> out;
  for (const MatchedWebhook& m : hooks)
    out.push_back(m.configuration + "/" + m.webhook["name"].get<std::string>());
  return out;
}

TEST(MatchWebhooks, RulesPickOperationGroupVersionResourceAndScope) {
  const std::string url = "https://h/w";
  json cluster = Rule();
  cluster["scope"] = "Cluster";
  json namespaced = Rule();
  namespaced["scope"] = "Namespaced";
  json apps = Rule();
  apps["apiGroups"] = {"apps"};
  std::vector<json> configs = {Configuration(
      "c", {Hook("pods.a.b", url), Hook("all.a.b", url, {{"rules", {Rule({"*"}, {"*"})}}}),
            Hook("sub.a.b", url, {{"rules", {Rule({"pods/*"})}}}),
            Hook("status.a.b", url, {{"rules", {Rule({"pods/status"})}}}),
            Hook("update.a.b", url, {{"rules", {Rule({"pods"}, {"UPDATE"})}}}),
            Hook("nodes.a.b", url, {{"rules", {Rule({"nodes"})}}}),
            Hook("cluster.a.b", url, {{"rules", {cluster}}}),
            Hook("namespaced.a.b", url, {{"rules", {namespaced}}}),
            Hook("apps.a.b", url, {{"rules", {apps}}}),
            Hook("norules.a.b", url, {{"rules", json::array()}})})};
  EXPECT_EQ(Names(MatchWebhooks(configs, PodCreate(), nullptr)),
            (std::vector<std::string>{"c/pods.a.b", "c/all.a.b", "c/sub.a.b", "c/namespaced.a.b"}));
}

TEST(MatchWebhooks, SelectorsConfigurationOrderAndServiceReferences) {
  const std::string url = "https://h/w";
  json not_ignored = {
      {"matchExpressions",
       {{{"key", "hami.io/webhook"}, {"operator", "NotIn"}, {"values", {"ignore"}}}}}};
  std::vector<json> configs = {
      Configuration("z", {Hook("z.a.b", url)}),
      Configuration("a",
                    {Hook("object.a.b", url, {{"objectSelector", not_ignored}}),
                     Hook("ns.a.b", url,
                          {{"namespaceSelector",
                            {{"matchLabels", {{"kubernetes.io/metadata.name", "gpu"}}}}}}),
                     Hook("team.a.b", url,
                          {{"namespaceSelector",
                            {{"matchExpressions", {{{"key", "team"}, {"operator", "Exists"}}}}}}}),
                     Hook("service.a.b", "", {{"clientConfig", {{"service", {{"name", "s"}}}}}})})};
  std::vector<std::string> skipped;
  EXPECT_EQ(Names(MatchWebhooks(configs, PodCreate(), &skipped)),
            (std::vector<std::string>{"a/object.a.b", "z/z.a.b"}));
  EXPECT_EQ(skipped, std::vector<std::string>{"a/service.a.b"});
  EXPECT_EQ(Names(MatchWebhooks(configs, PodCreate({{"hami.io/webhook", "ignore"}}), nullptr)),
            std::vector<std::string>{"z/z.a.b"});
  AdmissionAttributes in_gpu = PodCreate({}, "gpu");
  in_gpu.namespace_labels = {{"team", "ml"}};
  EXPECT_EQ(Names(MatchWebhooks(configs, in_gpu, nullptr)),
            (std::vector<std::string>{"a/object.a.b", "a/ns.a.b", "a/team.a.b", "z/z.a.b"}));
}

TEST(ReviewRequest, CarriesWhatTheApiServerSends) {
  AdmissionAttributes a = PodCreate();
  a.username = "kubectl";
  json r = ReviewRequest(a, "u-1");
  EXPECT_EQ(r["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(r["kind"], "AdmissionReview");
  const json& q = r["request"];
  EXPECT_EQ(q["uid"], "u-1");
  EXPECT_EQ(q["kind"], json({{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}));
  EXPECT_EQ(q["resource"], json({{"group", ""}, {"version", "v1"}, {"resource", "pods"}}));
  EXPECT_EQ(q["requestKind"], q["kind"]);
  EXPECT_EQ(q["requestResource"], q["resource"]);
  EXPECT_EQ(q["operation"], "CREATE");
  EXPECT_EQ(q["namespace"], "default");
  EXPECT_EQ(q["name"], "p");
  EXPECT_EQ(q["userInfo"]["username"], "kubectl");
  EXPECT_EQ(q["object"], a.object);
  EXPECT_TRUE(q["oldObject"].is_null());
  EXPECT_EQ(q["dryRun"], false);
  EXPECT_EQ(q["options"]["kind"], "CreateOptions");
}

std::string Answer(const std::string& uid, bool allowed, json extra = json::object()) {
  json response = {{"uid", uid}, {"allowed", allowed}};
  response.update(extra);
  return json({{"apiVersion", "admission.k8s.io/v1"},
               {"kind", "AdmissionReview"},
               {"response", response}})
      .dump();
}

TEST(ParseReviewResponse, DecodesAllowDenyAndPatch) {
  const std::string patch = hami::kube::EncodeBase64(R"([{"op":"add","path":"/x","value":1}])");
  auto allowed =
      ParseReviewResponse(Answer("u", true, {{"patchType", "JSONPatch"}, {"patch", patch}}), "u");
  ASSERT_TRUE(allowed.ok()) << allowed.error().message();
  EXPECT_TRUE(allowed->allowed);
  EXPECT_EQ(allowed->patch[0]["path"], "/x");
  auto denied = ParseReviewResponse(
      Answer("u", false, {{"status", {{"code", 403}, {"reason", "Forbidden"}, {"message", "no"}}}}),
      "u");
  ASSERT_TRUE(denied.ok());
  EXPECT_FALSE(denied->allowed);
  EXPECT_EQ(denied->code, 403);
  EXPECT_EQ(denied->message, "no");
}

TEST(ParseReviewResponse, RejectsAnswersThatAreNotForThisReview) {
  auto error_of = [](const std::string& body) {
    auto r = ParseReviewResponse(body, "u");
    return r.ok() ? std::string("accepted") : r.error().message();
  };
  EXPECT_NE(error_of("{").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"})")
                .find("expected admission.k8s.io/v1 AdmissionReview"),
            std::string::npos);
  EXPECT_NE(error_of(Answer("other", true)).find("expected response.uid=\"u\", got \"other\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
                         "response":{"uid":"u","allowed":"yes"}})")
                .find("response.allowed"),
            std::string::npos);
  EXPECT_NE(error_of(Answer("u", true, {{"patch", hami::kube::EncodeBase64("[]")}}))
                .find("only JSONPatch"),
            std::string::npos);
  EXPECT_NE(error_of(Answer("u", true, {{"patchType", "JSONPatch"}, {"patch", "%%"}}))
                .find("response.patch"),
            std::string::npos);
  EXPECT_NE(
      error_of(Answer("u", true,
                      {{"patchType", "JSONPatch"}, {"patch", hami::kube::EncodeBase64("{}")}}))
          .find("must be a list"),
      std::string::npos);
}

// ---- against a webhook over HTTP(S) ------------------------------------------------------------

// A webhook server whose answer a test decides; it records the reviews it was sent.
class TestWebhook {
 public:
  using Decide = std::function<std::string(const json& review)>;

  explicit TestWebhook(Decide decide, const std::string& cert = "", const std::string& key = "")
      : decide_(std::move(decide)) {
    if (cert.empty()) {
      server_ = std::make_unique<httplib::Server>();
    } else {
      server_ = std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str());
    }
    server_->Post("/mutate", [this](const httplib::Request& req, httplib::Response& res) {
      json review = json::parse(req.body, nullptr, false);
      {
        std::lock_guard lock(mu_);
        reviews_.push_back(review);
        queries_.push_back(req.get_param_value("timeout"));
      }
      res.set_content(decide_(review), "application/json");
    });
    // One request per connection: no idle kept-alive connection holds up Stop.
    server_->set_keep_alive_max_count(1);
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
  }
  ~TestWebhook() {
    server_->stop();
    thread_.join();
  }
  std::string Url(bool tls) const {
    return std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_) +
           "/mutate";
  }
  std::vector<json> reviews() {
    std::lock_guard lock(mu_);
    return reviews_;
  }
  std::vector<std::string> queries() {
    std::lock_guard lock(mu_);
    return queries_;
  }

 private:
  Decide decide_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<json> reviews_;
  std::vector<std::string> queries_;
};

std::string AllowWithPatch(const json& review, const json& patch) {
  return Answer(review["request"]["uid"], true,
                {{"patchType", "JSONPatch"}, {"patch", hami::kube::EncodeBase64(patch.dump())}});
}

json SimplePod(const std::string& name, json labels = json::object()) {
  return {{"metadata", {{"name", name}, {"labels", std::move(labels)}}},
          {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
}

class AdmissionTest : public testing::ServerFixture {
 protected:
  void SetUp() override { Start({}, "kubectl/v1.32.4 (linux/amd64)"); }
  Reply AddConfiguration(const json& config) {
    return Post(CollectionPath(hami::kube::kMutatingWebhookConfigurations, ""), config);
  }
  Reply CreatePod(const json& pod, const std::string& ns = "default") {
    return Post(CollectionPath(kPods, ns), pod);
  }
};

TEST_F(AdmissionTest, PatchIsAppliedToTheCreatedPodAndTheReviewCarriesTheDefaultedPod) {
  TestWebhook hook([](const json& review) {
    return AllowWithPatch(
        review,
        json::array({{{"op", "add"}, {"path", "/metadata/labels/admitted"}, {"value", "yes"}}}));
  });
  ASSERT_EQ(AddConfiguration(Configuration("c", {Hook("label.test.io", hook.Url(false))})).status,
            201);
  Reply r = CreatePod(SimplePod("p"));
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["metadata"]["labels"]["admitted"], "yes");
  EXPECT_EQ(r.body["status"]["phase"], "Pending");
  const std::vector<json> reviews = hook.reviews();
  ASSERT_EQ(reviews.size(), 1u);
  const json& q = reviews[0]["request"];
  EXPECT_EQ(q["operation"], "CREATE");
  EXPECT_EQ(q["namespace"], "default");
  EXPECT_EQ(q["object"]["kind"], "Pod");
  EXPECT_EQ(q["object"]["metadata"]["namespace"], "default");
  EXPECT_EQ(q["object"]["spec"]["schedulerName"], "default-scheduler");
  EXPECT_EQ(q["userInfo"]["username"], "kubectl");
  EXPECT_EQ(hook.queries(), std::vector<std::string>{"5s"});

  // Only pod CREATE is admitted: an update and other resources are not sent.
  ASSERT_EQ(Patch(hami::kube::ObjectPath(kPods, "default", "p"),
                  {{"metadata", {{"annotations", {{"a", "b"}}}}}})
                .status,
            200);
  ASSERT_EQ(
      Post(CollectionPath(hami::kube::kConfigMaps, "default"), {{"metadata", {{"name", "cm"}}}})
          .status,
      201);
  EXPECT_EQ(hook.reviews().size(), 1u);
}

TEST_F(AdmissionTest, DenialRefusesTheCreateWithTheWebhooksMessage) {
  TestWebhook hook([](const json& review) {
    return Answer(review["request"]["uid"], false,
                  {{"status", {{"code", 403}, {"reason", "Forbidden"}, {"message", "no GPUs"}}}});
  });
  ASSERT_EQ(AddConfiguration(Configuration("c", {Hook("deny.test.io", hook.Url(false))})).status,
            201);
  ExpectStatus(CreatePod(SimplePod("p")), 403, "Forbidden",
               "admission webhook \"deny.test.io\" denied the request: no GPUs");
  EXPECT_EQ(Get(hami::kube::ObjectPath(kPods, "default", "p")).status, 404);
  // A missing namespace is refused before any webhook is called.
  ExpectStatus(CreatePod(SimplePod("p"), "nowhere"), 404, "NotFound",
               "namespaces \"nowhere\" not found");
}

TEST_F(AdmissionTest, UnreachableWebhookFailsTheCreateUnlessItsPolicyIsIgnore) {
  // A port bound but never listened on: connections to it are refused.
  const int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  UniqueFd bound(sock);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int dead_port = ntohs(addr.sin_port);
  const std::string dead = "http://127.0.0.1:" + std::to_string(dead_port) + "/mutate";
  ASSERT_EQ(AddConfiguration(Configuration("c", {Hook("dead.test.io", dead)})).status, 201);
  ExpectStatus(CreatePod(SimplePod("p")), 500, "InternalError",
               "failed calling webhook \"dead.test.io\": failed to call webhook: Post \"" + dead +
                   "?timeout=5s\"");
  ASSERT_EQ(Patch(hami::kube::ObjectPath(hami::kube::kMutatingWebhookConfigurations, "", "c"),
                  {{"webhooks", {{{"name", "dead.test.io"}, {"failurePolicy", "Ignore"}}}}},
                  "application/strategic-merge-patch+json")
                .status,
            200);
  EXPECT_EQ(CreatePod(SimplePod("p")).status, 201);
}

TEST_F(AdmissionTest, InvalidAnswerIsAWebhookFailure) {
  TestWebhook hook([](const json&) { return Answer("not-the-uid", true); });
  ASSERT_EQ(AddConfiguration(Configuration("c", {Hook("bad.test.io", hook.Url(false))})).status,
            201);
  ExpectStatus(CreatePod(SimplePod("p")), 500, "InternalError",
               "received invalid webhook response: AdmissionReview answer: expected response.uid");
}

TEST_F(AdmissionTest, SelectorsDecideWhichPodsAreSent) {
  TestWebhook hook([](const json& review) { return Answer(review["request"]["uid"], true); });
  json skip_ignored = {
      {"matchExpressions",
       {{{"key", "hami.io/webhook"}, {"operator", "NotIn"}, {"values", {"ignore"}}}}}};
  json selective = Hook("sel.test.io", hook.Url(false),
                        {{"objectSelector", skip_ignored}, {"namespaceSelector", skip_ignored}});
  ASSERT_EQ(AddConfiguration(Configuration("c", {selective})).status, 201);
  ASSERT_EQ(Post(CollectionPath(hami::kube::kNamespaces, ""),
                 {{"metadata", {{"name", "quiet"}, {"labels", {{"hami.io/webhook", "ignore"}}}}}})
                .status,
            201);
  EXPECT_EQ(CreatePod(SimplePod("sent")).status, 201);
  EXPECT_EQ(CreatePod(SimplePod("labelled", {{"hami.io/webhook", "ignore"}})).status, 201);
  EXPECT_EQ(CreatePod(SimplePod("in-quiet"), "quiet").status, 201);
  ASSERT_EQ(hook.reviews().size(), 1u);
  EXPECT_EQ(hook.reviews()[0]["request"]["name"], "sent");
}

// A self-signed certificate for 127.0.0.1 made with openssl; empty when it cannot be made.
bool MakeCertificate(const TempDir& dir, std::string* cert, std::string* key) {
  *cert = dir.File("tls.crt");
  *key = dir.File("tls.key");
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
      *key + " -out " + *cert + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

TEST_F(AdmissionTest, HttpsWebhookIsVerifiedWithTheCaBundle) {
  TempDir dir("hami-admission");
  ASSERT_TRUE(dir.ok());
  std::string cert, key;
  if (!MakeCertificate(dir, &cert, &key)) GTEST_SKIP() << "openssl cannot make a certificate";
  TestWebhook hook(
      [](const json& review) {
        return AllowWithPatch(
            review,
            json::array(
                {{{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{"tls", "ok"}}}}}));
      },
      cert, key);
  auto pem = ReadFileToString(cert);
  ASSERT_TRUE(pem.ok());
  json verified = Hook(
      "tls.test.io", hook.Url(true),
      {{"clientConfig", {{"url", hook.Url(true)}, {"caBundle", hami::kube::EncodeBase64(*pem)}}}});
  ASSERT_EQ(AddConfiguration(Configuration("c", {verified})).status, 201);
  Reply r = CreatePod(SimplePod("p"));
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["metadata"]["annotations"]["tls"], "ok");

  // Without the bundle the system's trust store does not know the certificate.
  ASSERT_EQ(
      Delete(hami::kube::ObjectPath(hami::kube::kMutatingWebhookConfigurations, "", "c")).status,
      200);
  ASSERT_EQ(AddConfiguration(Configuration("c", {Hook("tls.test.io", hook.Url(true))})).status,
            201);
  ExpectStatus(CreatePod(SimplePod("q")), 500, "InternalError",
               "failed calling webhook \"tls.test.io\"");
}

// ---- hami-scheduler's webhook ------------------------------------------------------------------

TEST_F(AdmissionTest, HamiSchedulerWebhookFillsTheGpuCountAndDeniesPrivilegedGpuPods) {
  TempDir dir("hami-admission");
  ASSERT_TRUE(dir.ok());
  std::string cert, key;
  if (!MakeCertificate(dir, &cert, &key)) GTEST_SKIP() << "openssl cannot make a certificate";
  hami::kube::Config config;
  config.server = server_->url();
  config.source = "test";
  scheduler::DaemonOptions o;
  o.server.http_bind = "127.0.0.1:0";
  o.server.metrics_bind = "127.0.0.1:0";
  o.server.cert_file = cert;
  o.server.key_file = key;
  o.handshake_enabled = false;
  o.client.qps = 0;
  auto daemon = scheduler::Daemon::Start(config, o);
  ASSERT_TRUE(daemon.ok()) << daemon.error().message();
  ASSERT_TRUE((*daemon)->WaitReady(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  auto pem = ReadFileToString(cert);
  ASSERT_TRUE(pem.ok());
  const std::string url = "https://127.0.0.1:" + std::to_string((*daemon)->port()) + "/webhook";
  json hook = Hook("vgpu.hami.io", url,
                   {{"clientConfig", {{"url", url}, {"caBundle", hami::kube::EncodeBase64(*pem)}}},
                    {"failurePolicy", "Fail"}});
  ASSERT_EQ(AddConfiguration(Configuration("hami-webhook", {hook})).status, 201);

  json pod = SimplePod("gpu");
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"nvidia.com/gpumem", "3000"}}}};
  Reply r = CreatePod(pod);
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["spec"]["schedulerName"], "hami-scheduler");
  EXPECT_EQ(r.body["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");

  json privileged = pod;
  privileged["metadata"]["name"] = "privileged";
  privileged["spec"]["containers"][0]["securityContext"] = {{"privileged", true}};
  Reply denied = CreatePod(privileged);
  ExpectStatus(denied, 403, "Forbidden", "admission webhook \"vgpu.hami.io\" denied the request: ");
  EXPECT_NE(denied.body.value("message", "").find("privileged"), std::string::npos) << denied.text;

  Reply plain = CreatePod(SimplePod("cpu-only"));
  ASSERT_EQ(plain.status, 201) << plain.text;
  EXPECT_EQ(plain.body["spec"]["schedulerName"], "default-scheduler");
}

}  // namespace
}  // namespace hami::sim::kube
