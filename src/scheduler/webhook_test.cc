#include "scheduler/webhook.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kube/base64.h"
#include "kube/objects.h"
#include "kube/patch.h"
#include "scheduler/quota.h"

namespace hami::scheduler::webhook {
namespace {

using nlohmann::json;

json Review(const json& pod, const std::string& operation = "CREATE",
            const std::string& ns = "default") {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
            {"requestKind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"namespace", ns},
            {"operation", operation},
            {"userInfo", {{"username", "admin"}}},
            {"object", pod},
            {"oldObject", nullptr},
            {"dryRun", false}}}};
}

json Container(const std::string& name, const json& limits, const json& extra = json::object()) {
  json c = {{"name", name}, {"image", "cuda:12"}, {"resources", {{"limits", limits}}}};
  c.update(extra);
  return c;
}

json Pod(const std::vector<json>& containers, const json& spec_extra = json::object(),
         const json& labels = json::object()) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "train"}, {"namespace", "default"}, {"labels", labels}}},
              {"spec", {{"containers", containers}}}};
  pod["spec"].update(spec_extra);
  return pod;
}

// What the webhook answered about `pod`, and the pod with its patch applied.
struct Answer {
  json response;
  json patch = json::array();
  json patched;
};

Answer Admit(const json& pod, const WebhookContext& ctx, const std::string& operation = "CREATE") {
  Answer a;
  auto out = webhook::Review(Review(pod, operation).dump(), ctx);
  EXPECT_TRUE(out.ok()) << out.error().message();
  if (!out.ok()) return a;
  json review = json::parse(*out);
  EXPECT_EQ(review["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(review["kind"], "AdmissionReview");
  a.response = review["response"];
  EXPECT_EQ(a.response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
  a.patched = pod;
  if (a.response.contains("patch")) {
    EXPECT_EQ(a.response["patchType"], "JSONPatch");
    auto bytes = kube::DecodeBase64(a.response["patch"].get<std::string>());
    EXPECT_TRUE(bytes.ok()) << bytes.error().message();
    if (!bytes.ok()) return a;
    a.patch = json::parse(*bytes);
    auto applied = kube::ApplyJsonPatch(pod, a.patch);
    EXPECT_TRUE(applied.ok()) << applied.error().message() << "\npatch: " << a.patch.dump();
    if (applied.ok()) a.patched = *applied;
  }
  return a;
}

bool Allowed(const Answer& a) { return a.response.value("allowed", false); }
bool Unchanged(const Answer& a) { return Allowed(a) && !a.response.contains("patch"); }
std::string DenialMessage(const Answer& a) {
  if (Allowed(a)) return "(allowed)";
  return a.response["status"].value("message", "");
}

class WebhookTest : public ::testing::Test {
 protected:
  WebhookContext ctx_;
};

TEST_F(WebhookTest, MemoryWithoutCountGainsOneGpuInLimitsAndRequestsAndTheScheduler) {
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}},
                            {{"resources",
                              {{"limits", {{"nvidia.com/gpumem", "3000"}}},
                               {"requests", {{"nvidia.com/gpumem", "3000"}}}}}})});
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  json want = pod;
  want["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1";
  want["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1";
  want["spec"]["schedulerName"] = "hami-scheduler";
  EXPECT_EQ(a.patched, want);
  // Resource names hold '/': the paths escape it.
  EXPECT_EQ(a.patch[0]["path"], "/spec/containers/0/resources/limits/nvidia.com~1gpu");
}

TEST_F(WebhookTest, AnswersExactlyAsDocsWebhookMdShows) {
  auto out = webhook::Review(
      Review(Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})})).dump(), ctx_);
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_EQ(
      *out,
      R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{)"
      R"("allowed":true,"patch":"W3sib3AiOiJhZGQiLCJwYXRoIjoiL3NwZWMvY29udGFpbmVycy8wL3Jlc2)"
      R"(91cmNlcy9saW1pdHMvbnZpZGlhLmNvbX4xZ3B1IiwidmFsdWUiOiIxIn0seyJvcCI6ImFkZCIsInBhdGgiOi)"
      R"(Ivc3BlYy9zY2hlZHVsZXJOYW1lIiwidmFsdWUiOiJoYW1pLXNjaGVkdWxlciJ9XQ==",)"
      R"("patchType":"JSONPatch","uid":"705ab4f5-6393-11e8-b7cc-42010a800002"}})");
}

TEST_F(WebhookTest, CoresOrPercentageWithoutCountGainDefaultGpuNumInLimitsOnly) {
  ctx_.device_config.default_gpu_num = 2;
  json pod = Pod({Container("a", {{"nvidia.com/gpucores", "30"}}),
                  Container("b", {{"nvidia.com/gpumem-percentage", 50}})});
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_EQ(a.patched["spec"]["containers"][0]["resources"],
            (json{{"limits", {{"nvidia.com/gpucores", "30"}, {"nvidia.com/gpu", "2"}}}}));
  EXPECT_EQ(a.patched["spec"]["containers"][1]["resources"],
            (json{{"limits", {{"nvidia.com/gpumem-percentage", 50}, {"nvidia.com/gpu", "2"}}}}));
}

TEST_F(WebhookTest, BareGpuCountIsExclusive) {
  json pod = Pod({Container(
      "main", {{"nvidia.com/gpu", "1"}},
      {{"resources",
        {{"limits", {{"nvidia.com/gpu", "1"}}}, {"requests", {{"nvidia.com/gpu", "1"}}}}}})});
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  const json& res = a.patched["spec"]["containers"][0]["resources"];
  EXPECT_EQ(res["limits"]["nvidia.com/gpucores"], "100");
  EXPECT_EQ(res["requests"]["nvidia.com/gpucores"], "100");
  EXPECT_EQ(a.patched["spec"]["schedulerName"], "hami-scheduler");
}

TEST_F(WebhookTest, BareGpuCountSharesWhenDefaultMemoryIsSet) {
  ctx_.device_config.default_memory_mib = 2000;
  Answer a = Admit(Pod({Container("main", {{"nvidia.com/gpu", 1}})}), ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_FALSE(
      a.patched["spec"]["containers"][0]["resources"]["limits"].contains("nvidia.com/gpucores"));
  EXPECT_EQ(a.patched["spec"]["schedulerName"], "hami-scheduler");
}

TEST_F(WebhookTest, CompleteRequestOnlyGetsTheSchedulerAndNothingWhenItHasIt) {
  json pod = Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}})},
                 {{"schedulerName", "default-scheduler"}});
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_EQ(a.patch,
            (json::array(
                {{{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", "hami-scheduler"}}})));
  pod["spec"]["schedulerName"] = "hami-scheduler";
  EXPECT_TRUE(Unchanged(Admit(pod, ctx_)));
}

TEST_F(WebhookTest, PriorityBecomesCudaTaskPriorityOnThatContainer) {
  json pod = Pod(
      {Container("fresh",
                 {{"nvidia.com/gpu", 1}, {"nvidia.com/gpumem", 1000}, {"nvidia.com/priority", 0}}),
       Container("with-env", {{"nvidia.com/gpu", 1}, {"nvidia.com/gpumem", 1000}},
                 {{"env", {{{"name", "A"}, {"value", "1"}}}}}),
       Container("stale",
                 {{"nvidia.com/gpu", 1}, {"nvidia.com/gpumem", 1000}, {"nvidia.com/priority", "1"}},
                 {{"env",
                   {{{"name", "CUDA_TASK_PRIORITY"}, {"value", "0"}},
                    {{"name", "B"}, {"value", "2"}}}}})});
  pod["spec"]["containers"][1]["resources"]["limits"]["nvidia.com/priority"] = "1";
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  const json& c = a.patched["spec"]["containers"];
  EXPECT_EQ(c[0]["env"], (json{{{"name", "CUDA_TASK_PRIORITY"}, {"value", "0"}}}));
  EXPECT_EQ(c[1]["env"], (json{{{"name", "A"}, {"value", "1"}},
                               {{"name", "CUDA_TASK_PRIORITY"}, {"value", "1"}}}));
  EXPECT_EQ(c[2]["env"], (json{{{"name", "CUDA_TASK_PRIORITY"}, {"value", "1"}},
                               {{"name", "B"}, {"value", "2"}}}));
}

TEST_F(WebhookTest, InitContainersAreMutatedToo) {
  json pod = Pod({Container("main", {{"cpu", "1"}})});
  pod["spec"]["initContainers"] = {Container("warmup", {{"nvidia.com/gpumem", "500"}})};
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_EQ(a.patched["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(a.patched["spec"]["schedulerName"], "hami-scheduler");
  EXPECT_EQ(a.patched["spec"]["containers"], pod["spec"]["containers"]);
}

TEST_F(WebhookTest, RequestsWithoutLimitsGainLimitsForTheCount) {
  json pod = Pod({{{"name", "main"},
                   {"image", "i"},
                   {"resources", {{"requests", {{"nvidia.com/gpucores", "20"}}}}}}});
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_EQ(a.patched["spec"]["containers"][0]["resources"],
            (json{{"requests", {{"nvidia.com/gpucores", "20"}, {"nvidia.com/gpu", "1"}}},
                  {"limits", {{"nvidia.com/gpu", "1"}}}}));
}

TEST_F(WebhookTest, EscapesTildeAndSlashInConfiguredResourceNames) {
  EXPECT_EQ(EscapeJsonPointerToken("a/b~c"), "a~1b~0c");
  EXPECT_EQ(EscapeJsonPointerToken("~1"), "~01");
  ctx_.device_config.resource_count_name = "example.com/g~pu";
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "100"}})});
  pod["spec"]["containers"][0]["resources"]["requests"] = json::object();
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_EQ(a.patch[0]["path"], "/spec/containers/0/resources/limits/example.com~1g~0pu");
  EXPECT_EQ(a.patched["spec"]["containers"][0]["resources"]["limits"]["example.com/g~pu"], "1");
  EXPECT_EQ(a.patched["spec"]["containers"][0]["resources"]["requests"]["example.com/g~pu"], "1");
}

TEST_F(WebhookTest, ContainerWithoutResourcesIsLeftAsItIs) {
  json pod = Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "10"}}),
                  {{"name", "side"}, {"image", "i"}}});
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_EQ(a.patched["spec"]["containers"][1], pod["spec"]["containers"][1]);
}

TEST_F(WebhookTest, LeavesPodsOfOtherSchedulersAndPodsWithoutGpusAlone) {
  EXPECT_TRUE(Unchanged(Admit(
      Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})}, {{"schedulerName", "volcano"}}),
      ctx_)));
  int lookups = 0;
  ctx_.lookup_namespace = [&](std::string_view) -> Result<NamespaceView> {
    ++lookups;
    return NamespaceView{};
  };
  EXPECT_TRUE(Unchanged(Admit(Pod({Container("main", {{"cpu", "2"}, {"memory", "1Gi"}})}), ctx_)));
  EXPECT_EQ(lookups, 0);  // a pod without HAMi resources costs no lookup
}

TEST_F(WebhookTest, OverwriteEnvHidesGpusFromContainersThatAskForNone) {
  ctx_.device_config.overwrite_env = true;
  // A pod with no GPU at all: every container, init containers too, is told to see none.
  json plain =
      Pod({Container("main", {{"cpu", "1"}}),
           {{"name", "side"},
            {"image", "i"},
            {"env", json::array({{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "all"}}})}}},
          {{"initContainers", json::array({{{"name", "init"}, {"image", "i"}}})}});
  Answer a = Admit(plain, ctx_);
  ASSERT_TRUE(Allowed(a));
  const json none = json::array({{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "none"}}});
  EXPECT_EQ(a.patched["spec"]["containers"][0]["env"], none);
  EXPECT_EQ(a.patched["spec"]["containers"][1]["env"], none);  // replaced, not duplicated
  EXPECT_EQ(a.patched["spec"]["initContainers"][0]["env"], none);
  EXPECT_FALSE(a.patched["spec"].contains("schedulerName"));

  // In a GPU pod, only the container without a GPU; the GPU container keeps its own view.
  json gpu = Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}),
                  {{"name", "side"}, {"image", "i"}}});
  a = Admit(gpu, ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_FALSE(a.patched["spec"]["containers"][0].contains("env"));
  EXPECT_EQ(a.patched["spec"]["containers"][1]["env"], none);
  EXPECT_EQ(a.patched["spec"]["schedulerName"], "hami-scheduler");

  // Off (the default): a pod without GPUs is left alone.
  ctx_.device_config.overwrite_env = false;
  EXPECT_TRUE(Unchanged(Admit(plain, ctx_)));
}

TEST_F(WebhookTest, RuntimeClassNameGoesToGpuPodsThatNameNone) {
  ctx_.device_config.runtime_class_name = "nvidia";
  Answer a = Admit(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}), ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_EQ(a.patched["spec"]["runtimeClassName"], "nvidia");
  a = Admit(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}, {{"runtimeClassName", "kata"}}),
            ctx_);
  EXPECT_EQ(a.patched["spec"]["runtimeClassName"], "kata");
  EXPECT_TRUE(Unchanged(Admit(Pod({Container("main", {{"cpu", "1"}})}), ctx_)));
}

TEST_F(WebhookTest, SkipsPodsAndNamespacesLabelledIgnore) {
  json gpu = Container("main", {{"nvidia.com/gpumem", "3000"}},
                       {{"securityContext", {{"privileged", true}}}});
  EXPECT_TRUE(Unchanged(Admit(Pod({gpu}, json::object(), {{"hami.io/webhook", "ignore"}}), ctx_)));
  ctx_.lookup_namespace = [](std::string_view ns) -> Result<NamespaceView> {
    NamespaceView v;
    if (ns == "default") v.labels = {{"hami.io/webhook", "ignore"}};
    return v;
  };
  EXPECT_TRUE(Unchanged(Admit(Pod({gpu}), ctx_)));
}

TEST_F(WebhookTest, DeniesPrivilegedContainerRequestingGpus) {
  json pod = Pod({Container("side", {{"cpu", "1"}}, {{"securityContext", {{"privileged", true}}}}),
                  Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "100"}},
                            {{"securityContext", {{"privileged", true}}}})});
  Answer a = Admit(pod, ctx_);
  ASSERT_FALSE(Allowed(a));
  EXPECT_EQ(a.response["status"]["code"], 403);
  EXPECT_EQ(a.response["status"]["reason"], "Forbidden");
  EXPECT_EQ(DenialMessage(a),
            "container \"main\" (spec.containers[1]) is privileged and requests GPUs: a "
            "privileged container sees every GPU of its node, outside HAMi's limits");
  EXPECT_FALSE(a.response.contains("patch"));
  // A privileged container that requests no GPU is the pod's business.
  pod["spec"]["containers"][1].erase("securityContext");
  EXPECT_TRUE(Allowed(Admit(pod, ctx_)));
}

TEST_F(WebhookTest, DeniesPresetNodeName) {
  Answer a =
      Admit(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}, {{"nodeName", "node-1"}}), ctx_);
  EXPECT_EQ(DenialMessage(a),
            "spec.nodeName is already set (\"node-1\"): a pod that requests GPUs must be placed "
            "by hami-scheduler, which chooses its GPUs");
  // Without GPUs a preset node is fine.
  EXPECT_TRUE(
      Unchanged(Admit(Pod({Container("main", {{"cpu", "1"}})}, {{"nodeName", "n"}}), ctx_)));
}

NamespaceView QuotaOf(int64_t limit_mib, int64_t used_mib) {
  auto q = kube::ParseResourceQuota(
      json{{"metadata", {{"name", "gpu-quota"}, {"namespace", "default"}}},
           {"spec", {{"hard", {{"limits.nvidia.com/gpumem", std::to_string(limit_mib)}}}}}});
  EXPECT_TRUE(q.ok()) << q.error().message();
  NamespaceView v;
  v.quota = QuotaFromResourceQuotas({*q}, config::DeviceConfig{});
  v.used.memory_mib = used_mib;
  return v;
}

TEST_F(WebhookTest, DeniesARequestOverTheNamespaceQuota) {
  ctx_.lookup_namespace = [](std::string_view) -> Result<NamespaceView> {
    return QuotaOf(4000, 3000);
  };
  json pod = Pod({Container("main", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "1000"}})});
  Answer a = Admit(pod, ctx_);
  EXPECT_EQ(DenialMessage(a),
            "GPU quota exceeded: namespace default: limits.nvidia.com/gpumem of ResourceQuota "
            "gpu-quota is 4000 MiB, 3000 are used and the pod needs 2000");
  pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1";
  EXPECT_TRUE(Allowed(Admit(pod, ctx_)));
}

TEST_F(WebhookTest, DeniesValuesTheSchedulerCannotReadNamingThem) {
  Answer a = Admit(
      Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", 150}})}), ctx_);
  EXPECT_EQ(a.response["status"]["code"], 400);
  EXPECT_EQ(DenialMessage(a),
            "Pod default/train: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/gpucores: 150 is out of range 0..100");
  Answer bad = Admit(Pod({Container("main", {{"nvidia.com/gpumem", "1.5.3"}})}), ctx_);
  EXPECT_EQ(bad.response["status"]["code"], 400);
  EXPECT_NE(DenialMessage(bad).find("spec.containers[0].resources.limits.nvidia.com/gpumem"),
            std::string::npos)
      << DenialMessage(bad);
  Answer prio = Admit(
      Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "2"}})}), ctx_);
  EXPECT_NE(DenialMessage(prio).find("nvidia.com/priority: 2 is out of range 0..1"),
            std::string::npos)
      << DenialMessage(prio);
}

// gpumem is MiB: a Kubernetes memory quantity is refused, saying the unit and what to write.
TEST_F(WebhookTest, DeniesGpumemWithAUnitOrThatIsNotACountSayingItIsMibAndWhatToWrite) {
  const std::string where =
      "Pod default/train: container \"main\" (spec.containers[0]): "
      "resources.limits.nvidia.com/gpumem: ";
  struct Case {
    json value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"3000Mi", where + "3000Mi has a unit suffix (Mi), but nvidia.com/gpumem is a plain "
                         "integer count of MiB (3000Mi would ask for 3145728000 MiB): for 3000Mi "
                         "of memory write 3000"},
      {"2Gi", where + "2Gi has a unit suffix (Gi), but nvidia.com/gpumem is a plain integer "
                      "count of MiB (2Gi would ask for 2147483648 MiB): for 2Gi of memory write "
                      "2048"},
      {"3G", where + "3G has a unit suffix (G), but nvidia.com/gpumem is a plain integer count "
                     "of MiB (3G would ask for 3000000000 MiB): for 3G of memory write 2862 "
                     "(rounded up)"},
      {"500Mi", where + "500Mi has a unit suffix (Mi), but nvidia.com/gpumem is a plain integer "
                        "count of MiB (500Mi would ask for 524288000 MiB): for 500Mi of memory "
                        "write 500"},
      {1.5, where + "1500m (1.5) is not a whole number: nvidia.com/gpumem is a plain integer "
                    "count of MiB (write 3000 for 3000 MiB)"},
      {"-1", where + "-1 is negative: nvidia.com/gpumem is a plain integer count of MiB (write "
                     "3000 for 3000 MiB)"},
  };
  for (const Case& c : cases) {
    Answer a = Admit(
        Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", c.value}})}), ctx_);
    EXPECT_FALSE(Allowed(a)) << c.value;
    EXPECT_EQ(a.response["status"]["code"], 400) << c.value;
    EXPECT_EQ(DenialMessage(a), c.message);
  }
  Answer abc = Admit(
      Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "abc"}})}), ctx_);
  EXPECT_EQ(abc.response["status"]["code"], 400);
  const std::string text = DenialMessage(abc);
  EXPECT_EQ(text.rfind("Pod default/train: spec.containers[0].resources.limits.nvidia.com/gpumem: "
                       "quantity 'abc'",
                       0),
            0u)
      << text;
  EXPECT_TRUE(
      text.ends_with(": nvidia.com/gpumem is a plain integer count of MiB (write 3000 "
                     "for 3000 MiB)"))
      << text;
  // A plain count is admitted, as is the form the API server gives one that ends in 000.
  for (const char* ok : {"3000", "3k", "2048"}) {
    Answer a =
        Admit(Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", ok}})}), ctx_);
    EXPECT_TRUE(Allowed(a)) << ok << ": " << DenialMessage(a);
  }
}

TEST_F(WebhookTest, NamespaceLookupFailureFailsTheReviewAndNotFoundIsNoQuota) {
  json pod = Pod({Container("main", {{"nvidia.com/gpu", "1"}})});
  ctx_.lookup_namespace = [](std::string_view) -> Result<NamespaceView> {
    return Error(ErrorCode::kUnavailable, "informer not synced");
  };
  auto out = webhook::Review(Review(pod).dump(), ctx_);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(out.error().message(), "webhook: namespace default: informer not synced");
  ctx_.lookup_namespace = [](std::string_view) -> Result<NamespaceView> {
    return Error(ErrorCode::kNotFound, "no namespace default");
  };
  EXPECT_TRUE(Allowed(Admit(pod, ctx_)));
}

TEST_F(WebhookTest, OnlyPodCreatesAreReviewed) {
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "1"}})}, {{"nodeName", "n"}});
  EXPECT_TRUE(Unchanged(Admit(pod, ctx_, "UPDATE")));
  json review = Review(pod);
  review["request"]["resource"]["resource"] = "configmaps";
  review["request"]["kind"]["kind"] = "ConfigMap";
  auto out = webhook::Review(review.dump(), ctx_);
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_EQ(json::parse(*out)["response"],
            (json{{"uid", "705ab4f5-6393-11e8-b7cc-42010a800002"}, {"allowed", true}}));
  review = Review(pod);
  review["request"]["subResource"] = "status";
  out = webhook::Review(review.dump(), ctx_);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(json::parse(*out)["response"]["allowed"], true);
}

TEST_F(WebhookTest, MalformedReviewsNameTheField) {
  const json good = Review(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}));
  struct Case {
    std::string body;
    std::string message;
  };
  auto with = [&](const std::function<void(json&)>& edit) {
    json r = good;
    edit(r);
    return r.dump();
  };
  const std::vector<Case> cases = {
      {"", "AdmissionReview: not JSON"},
      {"{\"request\":", "AdmissionReview: not JSON"},
      {"[]", "AdmissionReview: not a JSON object"},
      {std::string(600, '[') + std::string(600, ']'),
       "AdmissionReview: nested deeper than 512 levels"},
      {with([](json& r) { r.erase("apiVersion"); }),
       "AdmissionReview: apiVersion: missing (want admission.k8s.io/v1)"},
      {with([](json& r) { r["apiVersion"] = "admission.k8s.io/v1beta1"; }),
       "AdmissionReview: apiVersion: 'admission.k8s.io/v1beta1' is not served (want "
       "admission.k8s.io/v1)"},
      {with([](json& r) { r["apiVersion"] = 1; }), "AdmissionReview: apiVersion: not a string"},
      {with([](json& r) { r["kind"] = "Pod"; }),
       "AdmissionReview: kind: 'Pod' (want AdmissionReview)"},
      {with([](json& r) { r.erase("request"); }), "AdmissionReview: request: missing"},
      {with([](json& r) { r["request"] = "x"; }), "AdmissionReview: request: not an object"},
      {with([](json& r) { r["request"].erase("uid"); }), "AdmissionReview: request.uid: missing"},
      {with([](json& r) { r["request"]["uid"] = 7; }),
       "AdmissionReview: request.uid: not a string"},
      {with([](json& r) { r["request"].erase("kind"); }), "AdmissionReview: request.kind: missing"},
      {with([](json& r) { r["request"]["kind"].erase("kind"); }),
       "AdmissionReview: request.kind.kind: missing"},
      {with([](json& r) { r["request"]["kind"]["kind"] = "Node"; }),
       "AdmissionReview: request.kind.kind: 'Node' for resource pods (want Pod)"},
      {with([](json& r) { r["request"]["resource"] = nullptr; }),
       "AdmissionReview: request.resource: missing"},
      {with([](json& r) { r["request"]["resource"]["resource"] = ""; }),
       "AdmissionReview: request.resource.resource: missing"},
      {with([](json& r) { r["request"]["resource"]["group"] = false; }),
       "AdmissionReview: request.resource.group: not a string"},
      {with([](json& r) { r["request"].erase("operation"); }),
       "AdmissionReview: request.operation: missing"},
      {with([](json& r) { r["request"]["operation"] = "PATCH"; }),
       "AdmissionReview: request.operation: 'PATCH' is not CREATE, UPDATE, DELETE or CONNECT"},
      {with([](json& r) { r["request"]["subResource"] = 1; }),
       "AdmissionReview: request.subResource: not a string"},
      {with([](json& r) { r["request"].erase("object"); }),
       "AdmissionReview: request.object: missing"},
      {with([](json& r) { r["request"]["object"] = json::array(); }),
       "AdmissionReview: request.object: not an object"},
      {with([](json& r) {
         r["request"].erase("namespace");
         r["request"]["object"]["metadata"].erase("namespace");
       }),
       "AdmissionReview: request.namespace: missing for a pod"},
  };
  for (const Case& c : cases) {
    auto out = webhook::Review(c.body, ctx_);
    ASSERT_FALSE(out.ok()) << c.body.substr(0, 200);
    EXPECT_EQ(out.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(out.error().message(), c.message) << c.body.substr(0, 200);
  }
}

TEST_F(WebhookTest, NamespaceComesFromTheObjectWhenTheRequestLacksIt) {
  json review = Review(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}), "CREATE", "");
  review["request"]["object"]["metadata"]["namespace"] = "team-a";
  std::string seen;
  ctx_.lookup_namespace = [&](std::string_view ns) -> Result<NamespaceView> {
    seen = ns;
    return NamespaceView{};
  };
  auto out = webhook::Review(review.dump(), ctx_);
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_EQ(seen, "team-a");
}

// ---- DRA mode ----------------------------------------------------------------------------------

class WebhookDraTest : public ::testing::Test {
 protected:
  WebhookDraTest() {
    ctx_.mode = WebhookMode::kDra;
    ctx_.ensure_claim_template = [this](const json& t) -> Status {
      ensured_.push_back(t);
      if (!fail_ensure_.empty()) return Error(ErrorCode::kUnavailable, fail_ensure_);
      return OkStatus();
    };
  }
  // The expression of selector `i` of a template's one request.
  static std::string Selector(const json& t, size_t i) {
    return t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][i]["cel"]
            ["expression"];
  }
  WebhookContext ctx_;
  std::vector<json> ensured_;
  std::string fail_ensure_;
};

TEST_F(WebhookDraTest, ASharedContainerBecomesAClaimFromATemplateAndThePodIsLabelledAndRecorded) {
  json pod = Pod({Container("main",
                            {{"nvidia.com/gpu", "2"},
                             {"nvidia.com/gpumem", "3000"},
                             {"nvidia.com/gpucores", "30"},
                             {"cpu", "1"}},
                            {{"resources",
                              {{"limits",
                                {{"nvidia.com/gpu", "2"},
                                 {"nvidia.com/gpumem", "3000"},
                                 {"nvidia.com/gpucores", "30"},
                                 {"cpu", "1"}}},
                               {"requests", {{"nvidia.com/gpumem", "3000"}, {"cpu", "1"}}}}}})});
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a)) << DenialMessage(a);
  ASSERT_EQ(ensured_.size(), 1u);
  const json& t = ensured_[0];
  const std::string name = t["metadata"]["name"];
  EXPECT_EQ(name.rfind("hami-", 0), 0u);
  EXPECT_EQ(name.size(), 5u + 16u);
  EXPECT_EQ(t["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(t["kind"], "ResourceClaimTemplate");
  EXPECT_EQ(t["metadata"]["namespace"], "default");
  EXPECT_EQ(t["spec"], json::parse(R"({"spec":{"devices":{"requests":[{"name":"gpu","exactly":{
              "deviceClassName":"hami-core-gpu.project-hami.io","allocationMode":"ExactCount",
              "count":2,"capacity":{"requests":{"memory":"3000Mi","cores":"30"}}}}]}}})"));

  json want = pod;
  json& ctr = want["spec"]["containers"][0];
  ctr["resources"]["limits"] = {{"cpu", "1"}};
  ctr["resources"]["requests"] = {{"cpu", "1"}};
  ctr["resources"]["claims"] = json::array({{{"name", "hami-main"}}});
  want["spec"]["resourceClaims"] =
      json::array({{{"name", "hami-main"}, {"resourceClaimTemplateName", name}}});
  want["metadata"]["labels"]["hami.io/dra"] = "true";
  want["metadata"]["annotations"]["hami.io/dra-request"] =
      R"({"containers":[{"cores":30,"count":2,"memory":3000,"name":"main"}],"initContainers":[]})";
  // No schedulerName: the scheduler's DRA allocation places the pod.
  EXPECT_EQ(a.patched, want);
  EXPECT_FALSE(a.patched["spec"].contains("schedulerName"));
}

TEST_F(WebhookDraTest, PodsOfTheSameShapeShareOneTemplateAndAnotherShapeGetsAnother) {
  Admit(Pod({Container("a", {{"nvidia.com/gpumem", "1024"}, {"nvidia.com/gpucores", "10"}})}),
        ctx_);
  Admit(Pod({Container("b", {{"nvidia.com/gpumem", "1024"}, {"nvidia.com/gpucores", "10"}})}),
        ctx_);
  Admit(Pod({Container("c", {{"nvidia.com/gpumem", "1024"}, {"nvidia.com/gpucores", "11"}})}),
        ctx_);
  ASSERT_EQ(ensured_.size(), 3u);
  EXPECT_EQ(ensured_[0], ensured_[1]);
  EXPECT_NE(ensured_[0]["metadata"]["name"], ensured_[2]["metadata"]["name"]);
  // Memory is written in canonical form, as the API server stores it.
  EXPECT_EQ(ensured_[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
                    ["memory"],
            "1Gi");
  // No count: the default GPU number, written into the claim.
  EXPECT_EQ(ensured_[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"], 1);
}

TEST_F(WebhookDraTest, InitContainersAndSeveralContainersEachGetTheirClaim) {
  json pod =
      Pod({Container("one", {{"nvidia.com/gpumem", "1000"}}), Container("cpu-only", {{"cpu", "1"}}),
           Container("two", {{"nvidia.com/gpumem", "2000"}, {"nvidia.com/gpucores", "20"}},
                     {{"resources",
                       {{"limits", {{"nvidia.com/gpumem", "2000"}}},
                        {"claims", json::array({{{"name", "own"}}})}}}})},
          {{"initContainers", json::array({Container("setup", {{"nvidia.com/gpumem", "500"}})})},
           {"resourceClaims", json::array({{{"name", "own"}, {"resourceClaimName", "mine"}}})}});
  pod["spec"]["containers"][2]["resources"]["limits"]["nvidia.com/gpucores"] = "20";
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a)) << DenialMessage(a);
  const json& spec = a.patched["spec"];
  EXPECT_EQ(spec["initContainers"][0]["resources"]["claims"],
            json::array({{{"name", "hami-setup"}}}));
  EXPECT_EQ(spec["initContainers"][0]["resources"]["limits"], json::object());
  EXPECT_EQ(spec["containers"][0]["resources"]["claims"], json::array({{{"name", "hami-one"}}}));
  EXPECT_FALSE(spec["containers"][1]["resources"].contains("claims"));
  EXPECT_EQ(spec["containers"][2]["resources"]["claims"],
            json::array({{{"name", "own"}}, {{"name", "hami-two"}}}));
  ASSERT_EQ(spec["resourceClaims"].size(), 4u);
  EXPECT_EQ(spec["resourceClaims"][0]["name"], "own");
  EXPECT_EQ(spec["resourceClaims"][1]["name"], "hami-setup");
  EXPECT_EQ(spec["resourceClaims"][2]["name"], "hami-one");
  EXPECT_EQ(spec["resourceClaims"][3]["name"], "hami-two");
  EXPECT_EQ(ensured_.size(), 3u);
  auto record = DecodeDraRequest(
      a.patched["metadata"]["annotations"]["hami.io/dra-request"].get<std::string>());
  ASSERT_TRUE(record.ok()) << record.error().message();
  ASSERT_EQ(record->init_containers.size(), 1u);
  EXPECT_EQ(record->init_containers[0].mem_mib, 500);
  ASSERT_EQ(record->containers.size(), 2u);
  EXPECT_EQ(record->containers[1].name, "two");
  EXPECT_EQ(record->containers[1].cores, 20);
  // The init container runs first, alone: the pod takes max(500, 1000 + 2000).
  EXPECT_EQ(RequestAmounts(*record).memory_mib, 3000);
}

TEST_F(WebhookDraTest, AGenerateNamePodIsRewrittenAndItsTemplateDoesNotDependOnTheName) {
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})});
  pod["metadata"].erase("name");
  pod["metadata"]["generateName"] = "train-";
  pod["metadata"].erase("labels");
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a)) << DenialMessage(a);
  EXPECT_EQ(a.patched["metadata"]["labels"], json({{"hami.io/dra", "true"}}));
  EXPECT_EQ(a.patched["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
            ensured_.at(0)["metadata"]["name"]);
  json named = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})});
  Admit(named, ctx_);
  EXPECT_EQ(ensured_.at(1), ensured_.at(0));
  // Without metadata at all, the label and the record arrive together.
  json bare = named;
  bare.erase("metadata");
  a = Admit(bare, ctx_);
  ASSERT_TRUE(Allowed(a)) << DenialMessage(a);
  EXPECT_EQ(a.patched["metadata"]["labels"], json({{"hami.io/dra", "true"}}));
  EXPECT_TRUE(a.patched["metadata"]["annotations"].contains("hami.io/dra-request"));
}

TEST_F(WebhookDraTest, UseAndNouseAnnotationsBecomeCelSelectors) {
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})});
  pod["metadata"]["annotations"] = {{"nvidia.com/use-gpuuuid", "GPU-a,GPU-b"},
                                    {"nvidia.com/nouse-gpuuuid", "GPU-c"},
                                    {"nvidia.com/use-gputype", "A100"},
                                    {"nvidia.com/nouse-gputype", "MIG,pcie"}};
  ASSERT_TRUE(Allowed(Admit(pod, ctx_)));
  ASSERT_EQ(ensured_.size(), 1u);
  const std::string d = R"(device.attributes["hami-core-gpu.project-hami.io"])";
  EXPECT_EQ(Selector(ensured_[0], 0), d + R"(.uuid == "GPU-a" || )" + d + R"(.uuid == "GPU-b")");
  EXPECT_EQ(Selector(ensured_[0], 1), d + R"(.uuid != "GPU-c")");
  EXPECT_EQ(Selector(ensured_[0], 2), d + R"(.productName.lowerAscii().contains("a100"))");
  EXPECT_EQ(Selector(ensured_[0], 3), "!" + d +
                                          R"(.productName.lowerAscii().contains("mig") && !)" + d +
                                          R"(.productName.lowerAscii().contains("pcie"))");
  EXPECT_EQ(ensured_[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"].size(),
            4u);

  pod["metadata"]["annotations"] = {{"nvidia.com/use-gpuuuid", "GPU-\"x"}};
  Answer bad = Admit(pod, ctx_);
  EXPECT_EQ(bad.response["status"]["code"], 400);
  EXPECT_EQ(DenialMessage(bad),
            "Pod default/train: annotation nvidia.com/use-gpuuuid: 'GPU-\"x' holds a character "
            "that a DRA selector cannot carry (a quote, a backslash, or one outside printable "
            "ASCII)");
  EXPECT_EQ(ensured_.size(), 1u);
}

TEST_F(WebhookDraTest, ACountOnlyContainerIsLeftToTheExtendedResourceMapping) {
  json pod = Pod({Container("main", {{"nvidia.com/gpu", "1"}})});
  Answer a = Admit(pod, ctx_);
  // No cores 100, no schedulerName, no claim: KEP-5004 serves nvidia.com/gpu as it is.
  EXPECT_TRUE(Unchanged(a)) << a.patch.dump();
  EXPECT_TRUE(ensured_.empty());
  // Beside a rewritten container it stays as it is too.
  json mixed = Pod({Container("whole", {{"nvidia.com/gpu", "1"}}),
                    Container("share", {{"nvidia.com/gpumem", "100"}})});
  a = Admit(mixed, ctx_);
  ASSERT_TRUE(Allowed(a));
  EXPECT_EQ(a.patched["spec"]["containers"][0], mixed["spec"]["containers"][0]);
  EXPECT_EQ(a.patched["spec"]["resourceClaims"].size(), 1u);
}

TEST_F(WebhookDraTest, PercentageOtherThan100IsDeniedAnd100AsksForTheDevicesDefaultMemory) {
  Answer a = Admit(Pod({Container("main", {{"nvidia.com/gpumem-percentage", "50"}})}), ctx_);
  EXPECT_EQ(a.response["status"]["code"], 400);
  EXPECT_EQ(DenialMessage(a),
            "Pod default/train: container \"main\" (spec.containers[0]): "
            "resources.limits.nvidia.com/gpumem-percentage: 50 cannot be carried by a DRA claim: "
            "a claim asks for an amount, and a device's memory is not known before one is "
            "chosen; ask for nvidia.com/gpumem in MiB (100 percent asks for the whole memory)");
  EXPECT_TRUE(ensured_.empty());
  a = Admit(Pod({Container(
                "main", {{"nvidia.com/gpumem-percentage", "100"}, {"nvidia.com/gpucores", "40"}})}),
            ctx_);
  ASSERT_TRUE(Allowed(a)) << DenialMessage(a);
  EXPECT_EQ(ensured_.at(0)["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"],
            json({{"requests", {{"cores", "40"}}}}));
  EXPECT_EQ(a.patched["spec"]["containers"][0]["resources"]["limits"], json::object());
}

TEST_F(WebhookDraTest, MalformedValuesAreDeniedNamingTheContainerAndResource) {
  Answer a = Admit(Pod({Container("main", {{"nvidia.com/gpumem", "1000"}}),
                        Container("bad", {{"nvidia.com/gpucores", "150"}})}),
                   ctx_);
  EXPECT_EQ(a.response["status"]["code"], 400);
  EXPECT_EQ(DenialMessage(a),
            "Pod default/train: container \"bad\" (spec.containers[1]): "
            "resources.limits.nvidia.com/gpucores: 150 is out of range 0..100");
  a = Admit(Pod({Container("main", {{"nvidia.com/gpumem", "2Gi"}})}), ctx_);
  EXPECT_EQ(a.response["status"]["code"], 400);
  EXPECT_NE(DenialMessage(a).find("container \"main\""), std::string::npos) << DenialMessage(a);
  EXPECT_NE(DenialMessage(a).find("nvidia.com/gpumem"), std::string::npos) << DenialMessage(a);
  EXPECT_TRUE(ensured_.empty());
}

TEST_F(WebhookDraTest, QuotaCountsTheRequestAndDeniesWhatWouldPassIt) {
  ctx_.lookup_namespace = [](std::string_view) -> Result<NamespaceView> {
    return QuotaOf(4000, 3000);
  };
  json pod = Pod({Container("main", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "1000"}})});
  Answer a = Admit(pod, ctx_);
  EXPECT_EQ(a.response["status"]["code"], 403);
  EXPECT_EQ(DenialMessage(a),
            "GPU quota exceeded: namespace default: limits.nvidia.com/gpumem of ResourceQuota "
            "gpu-quota is 4000 MiB, 3000 are used and the pod needs 2000");
  EXPECT_TRUE(ensured_.empty());  // nothing is created for a denied pod
  pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1";
  EXPECT_TRUE(Allowed(Admit(pod, ctx_)));
  // Memory that is only known once a device is chosen cannot be counted: denied under a
  // memory quota, whether asked by percentage, by cores alone or by a bare count.
  for (const json& limits : {json{{"nvidia.com/gpumem-percentage", "100"}},
                             json{{"nvidia.com/gpucores", "10"}}, json{{"nvidia.com/gpu", "1"}}}) {
    a = Admit(Pod({Container("main", limits)}), ctx_);
    EXPECT_EQ(a.response["status"]["code"], 403) << limits.dump();
    EXPECT_NE(DenialMessage(a).find("namespace default limits nvidia.com/gpumem (ResourceQuota "
                                    "gpu-quota), and Pod default/train: container \"main\""),
              std::string::npos)
        << DenialMessage(a);
  }
}

TEST_F(WebhookDraTest, ATemplateThatCannotBeMadeSureOfDeniesThePodNamingIt) {
  fail_ensure_ = "create: connection refused";
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})});
  Answer a = Admit(pod, ctx_);
  ASSERT_EQ(ensured_.size(), 1u);
  EXPECT_FALSE(Allowed(a));
  EXPECT_EQ(a.response["status"]["code"], 500);
  EXPECT_EQ(a.response["status"]["reason"], "InternalError");
  EXPECT_EQ(DenialMessage(a), "ResourceClaimTemplate default/" +
                                  ensured_[0]["metadata"]["name"].get<std::string>() +
                                  " for Pod default/train: container \"main\" "
                                  "(spec.containers[0]) could not be made sure of: create: "
                                  "connection refused");
  // Without API access at all: denied too, never admitted without its limits.
  ctx_.ensure_claim_template = nullptr;
  a = Admit(pod, ctx_);
  EXPECT_EQ(a.response["status"]["code"], 500);
  EXPECT_NE(DenialMessage(a).find("no API access"), std::string::npos) << DenialMessage(a);
}

TEST_F(WebhookDraTest, ADryRunCreatesNothingButAnswersTheSamePatch) {
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})});
  json review = Review(pod);
  review["request"]["dryRun"] = true;
  auto out = webhook::Review(review.dump(), ctx_);
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_TRUE(ensured_.empty());
  Answer real = Admit(pod, ctx_);
  EXPECT_EQ(json::parse(*out)["response"]["patch"], real.response["patch"]);
  review["request"]["dryRun"] = "yes";
  auto bad = webhook::Review(review.dump(), ctx_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "AdmissionReview: request.dryRun: not a boolean");
}

TEST_F(WebhookDraTest, PriorityGoesToTheEnvAndLeavesTheResources) {
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}, {"nvidia.com/priority", "0"}}),
                  Container("whole", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "1"}})});
  Answer a = Admit(pod, ctx_);
  ASSERT_TRUE(Allowed(a)) << DenialMessage(a);
  const json& c = a.patched["spec"]["containers"];
  EXPECT_EQ(c[0]["resources"]["limits"], json::object());
  EXPECT_EQ(c[0]["env"], json::array({{{"name", "CUDA_TASK_PRIORITY"}, {"value", "0"}}}));
  EXPECT_EQ(c[1]["resources"]["limits"], json({{"nvidia.com/gpu", "1"}}));
  EXPECT_EQ(c[1]["env"], json::array({{{"name", "CUDA_TASK_PRIORITY"}, {"value", "1"}}}));
}

TEST_F(WebhookDraTest, PrivilegedAndPresetNodeNameAndTakenClaimNamesAreDenied) {
  json priv = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}},
                             {{"securityContext", {{"privileged", true}}}})});
  EXPECT_EQ(Admit(priv, ctx_).response["status"]["code"], 403);
  json placed = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})}, {{"nodeName", "n1"}});
  EXPECT_NE(DenialMessage(Admit(placed, ctx_)).find("spec.nodeName is already set"),
            std::string::npos);
  json taken =
      Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})},
          {{"resourceClaims", json::array({{{"name", "hami-main"}, {"resourceClaimName", "x"}}})}});
  Answer a = Admit(taken, ctx_);
  EXPECT_EQ(a.response["status"]["code"], 400);
  EXPECT_EQ(DenialMessage(a),
            "Pod default/train: container \"main\" (spec.containers[0]): the pod claim name "
            "'hami-main' that DRA mode gives this container is already in spec.resourceClaims");
  EXPECT_TRUE(ensured_.empty());
}

TEST(WebhookDra, ATemplateServesWhenTheStoredSpecHoldsEveryWantedField) {
  const json want = ClaimTemplate("default", 1, 1024, 30, {});
  json stored = want;
  stored["metadata"]["uid"] = "u";
  stored["spec"]["metadata"] = {{"creationTimestamp", nullptr}};  // added by the server
  EXPECT_TRUE(ClaimTemplateServes(stored, want));
  stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] =
      "1024Mi";  // the same quantity
  EXPECT_TRUE(ClaimTemplateServes(stored, want));
  stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] =
      "2Gi";
  EXPECT_FALSE(ClaimTemplateServes(stored, want));
  json more = want;
  more["spec"]["spec"]["devices"]["requests"].push_back(
      more["spec"]["spec"]["devices"]["requests"][0]);
  EXPECT_FALSE(ClaimTemplateServes(more, want));
  EXPECT_FALSE(ClaimTemplateServes(json::object(), want));
}

TEST(WebhookDra, ParsesTheModeNamingTheFlag) {
  EXPECT_EQ(*ParseWebhookMode("dra", "--webhook-mode"), WebhookMode::kDra);
  EXPECT_EQ(*ParseWebhookMode("device-plugin", "--webhook-mode"), WebhookMode::kDevicePlugin);
  auto bad = ParseWebhookMode("DRA", "--webhook-mode");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "--webhook-mode: 'DRA' is not device-plugin or dra");
}

}  // namespace
}  // namespace hami::scheduler::webhook
