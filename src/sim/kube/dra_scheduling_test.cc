// The kube-scheduler stand-in allocating DRA claims against the simulated API server: claims
// from templates shared on one GPU, KEP-5004's special claim, refusals with their reasons, and
// claims released when their pods go.
#include "sim/kube/dra_scheduling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kube/client.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "sim/kube/dra_allocator.h"
#include "sim/kube/dra_test_devices.h"
#include "sim/kube/scheduler_standin.h"
#include "support/kube_control.h"

namespace hami::sim::kube {
namespace {

using namespace std::chrono_literals;
using hami::kube::control_test::StartServer;
using hami::kube::control_test::WaitUntil;
using nlohmann::json;

constexpr char kDriver[] = "hami-core-gpu.project-hami.io";
constexpr char kClass[] = "hami-core-gpu.project-hami.io";

json Node(const std::string& name, json allocatable = json::object()) {
  allocatable["pods"] = "110";
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}},
          {"spec", json::object()},
          {"status",
           {{"allocatable", std::move(allocatable)},
            {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

using ::hami::sim::kube::testing::DraGpu;

json Slice(const std::string& node, const std::string& memory) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", node + "-hami-core-gpu"}}},
          {"spec",
           {{"driver", kDriver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", json::array({DraGpu(0, memory), DraGpu(1, memory)})}}}};
}

json DeviceClass(const std::string& name, const std::string& expression,
                 const std::string& extended = "") {
  json c = {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "DeviceClass"},
            {"metadata", {{"name", name}}},
            {"spec", {{"selectors", json::array({{{"cel", {{"expression", expression}}}}})}}}};
  if (!extended.empty()) c["spec"]["extendedResourceName"] = extended;
  return c;
}

json ClaimSpec(json capacity, const std::string& cls = kClass) {
  return {{"devices",
           {{"requests", json::array({{{"name", "gpu"},
                                       {"exactly",
                                        {{"deviceClassName", cls},
                                         {"capacity", {{"requests", std::move(capacity)}}}}}}})}}}};
}

json Template(const std::string& name, json capacity) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaimTemplate"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", {{"spec", ClaimSpec(std::move(capacity))}}}};
}

// A pod whose claim `gpu` comes from template `tmpl`, or names the claim `claim`.
json ClaimPod(const std::string& name, const std::string& tmpl, const std::string& claim = "") {
  json ref = {{"name", "gpu"}};
  if (claim.empty()) {
    ref["resourceClaimTemplateName"] = tmpl;
  } else {
    ref["resourceClaimName"] = claim;
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"schedulerName", "hami-scheduler"},
            {"resourceClaims", json::array({ref})},
            {"containers", json::array({{{"name", "c"},
                                         {"image", "i"},
                                         {"resources", {{"claims", {{{"name", "gpu"}}}}}}}})}}}};
}

json GpuPod(const std::string& name, const std::string& node) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"schedulerName", "hami-scheduler"},
            {"nodeSelector", {{"kubernetes.io/hostname", node}}},
            {"containers",
             json::array({{{"name", "main"},
                           {"image", "i"},
                           {"resources",
                            {{"limits", {{"nvidia.com/gpu", "1"}}},
                             {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", "1"}}}}}}})}}}};
}

class DraStandinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
    hami::kube::ClientOptions o;
    o.qps = 0;
    o.max_retries = 1;
    o.retry_base = 10ms;
    client_ = hami::kube::control_test::ConnectTo(server_->url(), "dra_scheduling_test", o);
    ASSERT_NE(client_, nullptr);
    Create(hami::kube::kNodes, Node("n1"));
    Create(hami::kube::kResourceSlices, Slice("n1", "80Gi"));
    Create(
        hami::kube::kDeviceClasses,
        DeviceClass(kClass, std::string("device.driver == \"") + kDriver + "\"", "nvidia.com/gpu"));
  }

  void TearDown() override { standin_.reset(); }

  void Create(const hami::kube::Resource& r, const json& object) {
    auto created = server_->CreateObject(r, object);
    ASSERT_TRUE(created.ok()) << created.error().message();
  }

  void StartStandin(int parallelism = 1, std::chrono::milliseconds backoff = 10ms) {
    auto config = ParseSchedulerConfig(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: hami-scheduler\n",
        "test");
    ASSERT_TRUE(config.ok()) << config.error().message();
    StandinOptions options;
    options.seed = 1;
    options.parallelism = parallelism;
    options.initial_backoff = backoff;
    options.max_backoff = std::max(backoff, std::chrono::milliseconds(50));
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

  json Pod(const std::string& name) {
    auto p = server_->GetObject(hami::kube::kPods, "default", name);
    return p.ok() ? *p : json();
  }
  std::string NodeOf(const std::string& pod) {
    json p = Pod(pod);
    return p.is_null() ? "" : p["spec"].value("nodeName", "");
  }
  bool WaitBound(const std::string& pod) {
    return WaitUntil([&] { return !NodeOf(pod).empty(); }, 20s);
  }
  json Claim(const std::string& name) {
    auto c = server_->GetObject(hami::kube::kResourceClaims, "default", name);
    return c.ok() ? *c : json();
  }
  // The claim the controller made for the pod's claim `gpu`.
  std::string GeneratedClaim(const std::string& pod) {
    json p = Pod(pod);
    for (const json& s : p["status"].value("resourceClaimStatuses", json::array())) {
      if (s.value("name", "") == "gpu") return s.value("resourceClaimName", "");
    }
    return "";
  }
  // The last unschedulable attempt's message for `pod`, waiting for one that contains `part`.
  std::string UnschedulableMessage(const std::string& pod, const std::string& part) {
    std::string found;
    WaitUntil(
        [&] {
          std::lock_guard lock(mu_);
          for (const ScheduleAttempt& a : attempts_) {
            if (a.pod == "default/" + pod &&
                a.outcome == ScheduleAttempt::Outcome::kUnschedulable &&
                a.message.find(part) != std::string::npos) {
              found = a.message;
              return true;
            }
          }
          return false;
        },
        20s);
    return found;
  }
  const json& Result0(const json& claim) {
    return claim["status"]["allocation"]["devices"]["results"][0];
  }

  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<hami::kube::Client> client_;
  std::unique_ptr<SchedulerStandin> standin_;
  std::mutex mu_;
  std::vector<ScheduleAttempt> attempts_;
};

TEST_F(DraStandinTest, TwoTemplateClaimsShareOneGpuWithDistinctShareIds) {
  Create(hami::kube::kResourceClaimTemplates,
         Template("share", {{"memory", "3000Mi"}, {"cores", "30"}}));
  StartStandin();
  Create(hami::kube::kPods, ClaimPod("p1", "share"));
  Create(hami::kube::kPods, ClaimPod("p2", "share"));
  ASSERT_TRUE(WaitBound("p1"));
  ASSERT_TRUE(WaitBound("p2"));
  EXPECT_EQ(NodeOf("p1"), "n1");
  EXPECT_EQ(NodeOf("p2"), "n1");

  std::set<std::string> share_ids;
  for (const std::string pod : {"p1", "p2"}) {
    const std::string name = GeneratedClaim(pod);
    ASSERT_EQ(name.rfind(pod + "-gpu-", 0), 0u) << name;
    json claim = Claim(name);
    ASSERT_FALSE(claim.is_null());
    EXPECT_EQ(claim["metadata"]["annotations"][kPodClaimNameAnnotation], "gpu");
    const json& owner = claim["metadata"]["ownerReferences"][0];
    EXPECT_EQ(owner["kind"], "Pod");
    EXPECT_EQ(owner["uid"], Pod(pod)["metadata"]["uid"]);
    EXPECT_EQ(owner["controller"], true);
    EXPECT_EQ(claim["metadata"]["finalizers"], json::array({kDraFinalizer}));
    const json& result = Result0(claim);
    EXPECT_EQ(result["driver"], kDriver);
    EXPECT_EQ(result["pool"], "n1");
    EXPECT_EQ(result["device"], "hami-gpu-0");
    EXPECT_EQ(result["consumedCapacity"], (json{{"cores", "30"}, {"memory", "3000Mi"}}));
    share_ids.insert(result.value("shareID", ""));
    EXPECT_EQ(claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"]
                   [0]["values"],
              json::array({"n1"}));
    const json& reserved = claim["status"]["reservedFor"];
    ASSERT_EQ(reserved.size(), 1u);
    EXPECT_EQ(reserved[0],
              (json{{"resource", "pods"}, {"name", pod}, {"uid", Pod(pod)["metadata"]["uid"]}}));
  }
  EXPECT_EQ(share_ids.size(), 2u);
  EXPECT_FALSE(share_ids.contains(""));
}

TEST_F(DraStandinTest, APodWaitingForItsTemplateClaimIsTriedAgainOnceTheClaimIsRecorded) {
  Create(hami::kube::kResourceClaimTemplates, Template("share", {{"memory", "1Gi"}}));
  // A backoff longer than the wait below: only the pod's status change can bring it back.
  StartStandin(1, 120s);
  Create(hami::kube::kPods, ClaimPod("eager", "share"));
  ASSERT_TRUE(WaitBound("eager"));
  EXPECT_FALSE(GeneratedClaim("eager").empty());
}

TEST_F(DraStandinTest, AFinishedPodLosesItsGeneratedClaimAndANamedClaimIsReleasedButKept) {
  Create(hami::kube::kResourceClaimTemplates, Template("share", {{"memory", "1Gi"}}));
  Create(hami::kube::kResourceClaims,
         json{{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceClaim"},
              {"metadata", {{"name", "mine"}, {"namespace", "default"}}},
              {"spec", ClaimSpec({{"memory", "2Gi"}})}});
  StartStandin();
  Create(hami::kube::kPods, ClaimPod("done", "share"));
  Create(hami::kube::kPods, ClaimPod("named", "", "mine"));
  ASSERT_TRUE(WaitBound("done"));
  ASSERT_TRUE(WaitBound("named"));
  const std::string generated = GeneratedClaim("done");
  ASSERT_TRUE(Claim(generated)["status"].contains("allocation"));
  ASSERT_TRUE(Claim("mine")["status"].contains("allocation"));

  auto finished =
      client_->Patch(hami::kube::kPods, "default", "done", hami::kube::PatchType::kMerge,
                     json{{"status", {{"phase", "Succeeded"}}}}, "status");
  ASSERT_TRUE(finished.ok()) << finished.error().message();
  EXPECT_TRUE(WaitUntil([&] { return Claim(generated).is_null(); }, 20s));

  ASSERT_TRUE(server_->DeleteObject(hami::kube::kPods, "default", "named").ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        json c = Claim("mine");
        return !c.is_null() && !c["status"].contains("allocation") &&
               !c["metadata"].contains("finalizers");
      },
      20s))
      << Claim("mine").dump();
  EXPECT_FALSE(Claim("mine")["status"].contains("reservedFor"));
}

TEST_F(DraStandinTest, AnExtendedResourceGetsTheSpecialClaimWhereTheNodeDoesNotListIt) {
  Create(hami::kube::kNodes, Node("n2", {{"nvidia.com/gpu", "2"}}));  // the device plugin's
  StartStandin();
  Create(hami::kube::kPods, GpuPod("whole", "n1"));
  ASSERT_TRUE(WaitBound("whole"));
  ASSERT_TRUE(WaitUntil(
      [&] { return Pod("whole")["status"].contains("extendedResourceClaimStatus"); }, 10s));
  const json status = Pod("whole")["status"]["extendedResourceClaimStatus"];
  // Requests are sorted: cpu is request 0, nvidia.com/gpu request 1.
  EXPECT_EQ(status["requestMappings"], json::array({{{"containerName", "main"},
                                                     {"resourceName", "nvidia.com/gpu"},
                                                     {"requestName", "container-0-request-1"}}}));
  const std::string name = status.value("resourceClaimName", "");
  ASSERT_EQ(name.rfind("whole-extended-resources-", 0), 0u) << name;
  json claim = Claim(name);
  ASSERT_FALSE(claim.is_null());
  EXPECT_EQ(claim["metadata"]["annotations"][kExtendedResourceClaimAnnotation], "true");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["uid"], Pod("whole")["metadata"]["uid"]);
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["exactly"],
            (json{{"deviceClassName", kClass}, {"allocationMode", "ExactCount"}, {"count", 1}}));
  // Only a count: every capacity's default is consumed.
  EXPECT_EQ(Result0(claim)["request"], "container-0-request-1");
  EXPECT_EQ(Result0(claim)["consumedCapacity"], (json{{"cores", "0"}, {"memory", "80Gi"}}));
  EXPECT_EQ(claim["status"]["reservedFor"][0]["name"], "whole");

  // A node that lists nvidia.com/gpu serves it through its device plugin: no claim.
  Create(hami::kube::kPods, GpuPod("plugin", "n2"));
  ASSERT_TRUE(WaitBound("plugin"));
  EXPECT_FALSE(Pod("plugin")["status"].contains("extendedResourceClaimStatus"));
  EXPECT_EQ(server_->ListObjects(hami::kube::kResourceClaims, "default").size(), 1u);

  // The pod goes, and its special claim with it.
  ASSERT_TRUE(server_->DeleteObject(hami::kube::kPods, "default", "whole").ok());
  EXPECT_TRUE(WaitUntil([&] { return Claim(name).is_null(); }, 20s));
}

TEST_F(DraStandinTest, ACapacityOutsideThePolicyIsUnschedulableWithTheReason) {
  Create(hami::kube::kResourceClaims,
         json{{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceClaim"},
              {"metadata", {{"name", "too-many-cores"}, {"namespace", "default"}}},
              {"spec", ClaimSpec({{"cores", "200"}})}});
  StartStandin();
  Create(hami::kube::kPods, ClaimPod("greedy", "", "too-many-cores"));
  const std::string message = UnschedulableMessage("greedy", "cores");
  EXPECT_EQ(message,
            "0/1 nodes are available: 1 cannot allocate all claims: claim default/too-many-cores, "
            "request gpu: hami-gpu-0, hami-gpu-1: capacity cores: 200 is outside its request "
            "policy (validRange min 0, max 100, step 1, default 0). preemption: 0/1 nodes are "
            "available: 1 Preemption is not helpful for scheduling.");
  json pod = Pod("greedy");
  EXPECT_TRUE(pod["spec"].value("nodeName", "").empty());
  bool condition = false;
  for (const json& c : pod["status"].value("conditions", json::array())) {
    condition = condition ||
                (c.value("type", "") == "PodScheduled" &&
                 c.value("reason", "") == "Unschedulable" && c.value("message", "") == message);
  }
  EXPECT_TRUE(condition) << pod.dump();
  EXPECT_FALSE(Claim("too-many-cores")["status"].contains("allocation"));
}

TEST_F(DraStandinTest, ADeviceClassOutsideTheCelSubsetIsNamedInTheError) {
  const std::string expression = "device.attributes['x'].exists(a, a == 'b')";
  Create(hami::kube::kDeviceClasses, DeviceClass("fancy", expression));
  Create(hami::kube::kResourceClaims,
         json{{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceClaim"},
              {"metadata", {{"name", "fancy-claim"}, {"namespace", "default"}}},
              {"spec", ClaimSpec({{"cores", "10"}}, "fancy")}});
  StartStandin();
  Create(hami::kube::kPods, ClaimPod("fancy-pod", "", "fancy-claim"));
  EXPECT_EQ(UnschedulableMessage("fancy-pod", "fancy"),
            "0/1 nodes are available: DeviceClass fancy: spec.selectors[0]: CEL expression '" +
                expression + "': column 24: unsupported function 'exists'.");
}

TEST_F(DraStandinTest, DeletingAPodReleasesItsClaimForTheNextPodAndNothingIsDoubleBooked) {
  Create(hami::kube::kResourceClaimTemplates, Template("whole", {{"memory", "80Gi"}}));
  StartStandin(/*parallelism=*/2);
  for (const std::string pod : {"a", "b", "c"}) Create(hami::kube::kPods, ClaimPod(pod, "whole"));
  // Two GPUs, three whole-GPU claims scheduled two at a time: two pods fit, never three.
  ASSERT_TRUE(WaitUntil(
      [&] { return !NodeOf("a").empty() + !NodeOf("b").empty() + !NodeOf("c").empty() == 2; },
      20s));
  std::string waiting;
  for (const std::string pod : {"a", "b", "c"}) {
    if (NodeOf(pod).empty()) waiting = pod;
  }
  EXPECT_NE(UnschedulableMessage(waiting, "capacity memory: 80Gi requested, 0 of 80Gi free"), "");
  std::string first = waiting == "a" ? "b" : "a";
  const std::string first_claim = GeneratedClaim(first);
  const std::string freed = Result0(Claim(first_claim))["device"];
  std::set<std::string> devices;
  for (const std::string pod : {"a", "b", "c"}) {
    if (pod != waiting) devices.insert(Result0(Claim(GeneratedClaim(pod)))["device"]);
  }
  EXPECT_EQ(devices.size(), 2u);
  EXPECT_TRUE(NodeOf(waiting).empty());

  ASSERT_TRUE(server_->DeleteObject(hami::kube::kPods, "default", first).ok());
  ASSERT_TRUE(WaitUntil([&] { return Claim(first_claim).is_null(); }, 20s));
  ASSERT_TRUE(WaitBound(waiting));
  EXPECT_EQ(Result0(Claim(GeneratedClaim(waiting)))["device"], freed);
}

TEST(DraExtendedRequests, NameRequestsByContainerAndSortedResource) {
  auto cls = std::make_shared<const json>(DeviceClass(kClass, "true", "nvidia.com/gpu"));
  auto other = std::make_shared<const json>(DeviceClass("other", "true"));
  const json pod = json::parse(R"({"spec": {
      "initContainers": [{"name": "init", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
      "containers": [
        {"name": "a", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1",
                                                 "deviceclass.resource.kubernetes.io/other": "2"}}},
        {"name": "b", "resources": {"requests": {"example.com/x": "1"}}}]}})");
  auto requests = DraScheduler::ExtendedRequests(pod, {cls, other});
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].request, "container-0-request-0");
  EXPECT_EQ(requests[0].container, "init");
  EXPECT_EQ(requests[1].request, "container-1-request-1");
  EXPECT_EQ(requests[1].device_class, "other");
  EXPECT_EQ(requests[1].count, 2);
  EXPECT_EQ(requests[2].request, "container-1-request-2");
  EXPECT_EQ(requests[2].resource, "nvidia.com/gpu");
  EXPECT_EQ(requests[2].device_class, kClass);
}

}  // namespace
}  // namespace hami::sim::kube
