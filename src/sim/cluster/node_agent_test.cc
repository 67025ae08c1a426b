// The simulated kubelet's pure parts: a pod's plan, restart decisions, the phase and the
// status it writes, the Node's status.
#include "sim/cluster/node_agent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami::sim::cluster {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using Kind = ContainerState::Kind;

json Pod(json containers) {
  for (json& c : containers) {
    if (!c.contains("image")) c["image"] = "hami.local/sim/base:1";
  }
  return {{"metadata", {{"name", "p"}, {"namespace", "ns"}, {"uid", "u-1"}}},
          {"spec", {{"nodeName", "node-1"}, {"containers", std::move(containers)}}}};
}

TEST(PlanPod, KeepsCommandAndArgsResolvesFieldRefsAndCountsDeviceLimits) {
  json pod =
      Pod({{{"name", "main"},
            {"command", {"sh", "-c"}},
            {"args", {"echo hi"}},
            {"env",
             {{{"name", "A"}, {"value", "1"}},
              {{"name", "POD"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
              {{"name", "NODE"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}}}},
            {"resources",
             {{"limits", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", 3000}, {"cpu", "1"}}}}}}});
  pod["spec"]["restartPolicy"] = "OnFailure";
  pod["spec"]["terminationGracePeriodSeconds"] = 3;
  auto plan = PlanPod(pod, "127.0.0.1", {"nvidia.com/gpu"});
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->restart_policy, RestartPolicy::kOnFailure);
  EXPECT_EQ(plan->grace_period, std::chrono::seconds(3));
  ASSERT_EQ(plan->containers.size(), 1u);
  const ContainerPlan& c = plan->containers[0];
  EXPECT_EQ(c.command, (std::vector<std::string>{"sh", "-c"}));
  EXPECT_EQ(c.args, (std::vector<std::string>{"echo hi"}));
  EXPECT_EQ(c.image, "hami.local/sim/base:1");
  EXPECT_EQ(c.env.at("A"), "1");
  EXPECT_EQ(c.env.at("POD"), "p");
  EXPECT_EQ(c.env.at("NODE"), "node-1");
  EXPECT_EQ(c.devices, (std::map<std::string, int64_t>{{"nvidia.com/gpu", 2}}));
}

TEST(PlanPod, RefusesWhatTheSimulatedKubeletCannotRunNamingTheField) {
  auto no_image = PlanPod(Pod({{{"name", "main"}, {"image", ""}}}), "127.0.0.1", {});
  ASSERT_FALSE(no_image.ok());
  EXPECT_THAT(no_image.error().message(), HasSubstr("spec.containers[0] (main): image is empty"));
  auto image_command = PlanPod(Pod({{{"name", "main"}, {"image", "busybox"}}}), "127.0.0.1", {});
  ASSERT_TRUE(image_command.ok()) << "no command: the image's entrypoint runs";
  EXPECT_TRUE(image_command->containers[0].command.empty());

  json pod = Pod({{{"name", "m"}, {"command", {"true"}}}});
  pod["spec"]["restartPolicy"] = "Sometimes";
  auto policy = PlanPod(pod, "127.0.0.1", {});
  ASSERT_FALSE(policy.ok());
  EXPECT_THAT(policy.error().message(), HasSubstr("spec.restartPolicy 'Sometimes'"));

  auto bad_count = PlanPod(Pod({{{"name", "m"},
                                 {"command", {"true"}},
                                 {"resources", {{"limits", {{"nvidia.com/gpu", "1.5"}}}}}}}),
                           "127.0.0.1", {"nvidia.com/gpu"});
  ASSERT_FALSE(bad_count.ok());
  EXPECT_THAT(bad_count.error().message(), HasSubstr("limits[nvidia.com/gpu]: '1.5'"));

  auto secret = PlanPod(
      Pod({{{"name", "m"},
            {"command", {"true"}},
            {"env", {{{"name", "S"}, {"valueFrom", {{"secretKeyRef", {{"name", "x"}}}}}}}}}}),
      "127.0.0.1", {});
  ASSERT_FALSE(secret.ok());
  EXPECT_THAT(secret.error().message(), HasSubstr("env[0] (S): valueFrom"));

  EXPECT_FALSE(PlanPod(Pod(json::array()), "127.0.0.1", {}).ok());
}

TEST(Restart, FollowsThePolicyAndBacksOffUpToThirtySeconds) {
  EXPECT_TRUE(ShouldRestart(RestartPolicy::kAlways, 0));
  EXPECT_TRUE(ShouldRestart(RestartPolicy::kOnFailure, 1));
  EXPECT_FALSE(ShouldRestart(RestartPolicy::kOnFailure, 0));
  EXPECT_FALSE(ShouldRestart(RestartPolicy::kNever, 1));
  EXPECT_EQ(RestartBackoff(1), std::chrono::milliseconds(1000));
  EXPECT_EQ(RestartBackoff(3), std::chrono::milliseconds(4000));
  EXPECT_EQ(RestartBackoff(20), std::chrono::milliseconds(30000));
}

ContainerState State(Kind kind, int exit_code = 0, bool will_restart = false) {
  ContainerState s;
  s.kind = kind;
  s.exit_code = exit_code;
  s.will_restart = will_restart;
  return s;
}

TEST(PodPhase, IsRunningWhileAContainerRunsOrWillRestartAndFinalOnceAllEnded) {
  EXPECT_EQ(PodPhase({State(Kind::kWaiting)}), "Pending");
  EXPECT_EQ(PodPhase({State(Kind::kRunning), State(Kind::kTerminated)}), "Running");
  EXPECT_EQ(PodPhase({State(Kind::kWaiting, 1, true)}), "Running");
  EXPECT_EQ(PodPhase({State(Kind::kTerminated), State(Kind::kTerminated)}), "Succeeded");
  EXPECT_EQ(PodPhase({State(Kind::kTerminated), State(Kind::kTerminated, 2)}), "Failed");
}

TEST(PodStatusJson, CarriesContainerStatesIdsAndConditions) {
  auto plan =
      PlanPod(Pod({{{"name", "a"}, {"command", {"x"}}}, {{"name", "b"}, {"command", {"y"}}}}),
              "127.0.0.1", {});
  ASSERT_TRUE(plan.ok());
  ContainerState run = State(Kind::kRunning);
  run.container_id = "containerd://abc";
  run.started_at = "2026-12-01T10:00:00Z";
  ContainerState done = State(Kind::kTerminated, 3);
  done.reason = "Error";
  done.restart_count = 2;
  json s = PodStatusJson(*plan, {run, done}, "127.0.0.1", "2026-12-01T09:00:00Z");
  EXPECT_EQ(s["phase"], "Running");
  EXPECT_EQ(s["hostIP"], "127.0.0.1");
  EXPECT_EQ(s["startTime"], "2026-12-01T09:00:00Z");
  ASSERT_EQ(s["containerStatuses"].size(), 2u);
  EXPECT_EQ(s["containerStatuses"][0]["containerID"], "containerd://abc");
  EXPECT_EQ(s["containerStatuses"][0]["state"]["running"]["startedAt"], "2026-12-01T10:00:00Z");
  EXPECT_EQ(s["containerStatuses"][1]["state"]["terminated"]["exitCode"], 3);
  EXPECT_EQ(s["containerStatuses"][1]["restartCount"], 2);
  bool ready_false = false;
  for (const json& c : s["conditions"]) {
    if (c["type"] == "Ready") ready_false = c["status"] == "False";
  }
  EXPECT_TRUE(ready_false) << "one container is not running";
}

TEST(PlanPod, TakesHostPathAndEmptyDirVolumesAndRefusesOtherKindsNamingThem) {
  json pod = Pod({{{"name", "m"},
                   {"command", {"true"}},
                   {"volumeMounts",
                    {{{"name", "data"}, {"mountPath", "/data"}, {"readOnly", true}},
                     {{"name", "scratch"}, {"mountPath", "/scratch"}}}}}});
  pod["spec"]["volumes"] = {
      {{"name", "data"}, {"hostPath", {{"path", "/srv/data"}, {"type", "DirectoryOrCreate"}}}},
      {{"name", "scratch"}, {"emptyDir", json::object()}}};
  auto plan = PlanPod(pod, "127.0.0.1", {});
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->volumes.at("data").host_path, "/srv/data");
  EXPECT_TRUE(plan->volumes.at("data").create);
  EXPECT_EQ(plan->volumes.at("scratch").kind, VolumePlan::Kind::kEmptyDir);
  ASSERT_EQ(plan->containers[0].volume_mounts.size(), 2u);
  EXPECT_TRUE(plan->containers[0].volume_mounts[0].read_only);

  pod["spec"]["volumes"][1] = {{"name", "scratch"}, {"configMap", {{"name", "c"}}}};
  auto refused = PlanPod(pod, "127.0.0.1", {});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message(),
              HasSubstr("spec.volumes[1] (scratch): the simulated node offers hostPath and "
                        "emptyDir volumes only"));
  pod["spec"]["volumes"].erase(1);
  auto unknown = PlanPod(pod, "127.0.0.1", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message(),
              HasSubstr("volumeMounts[1]: no volume named 'scratch' in spec.volumes"));
}

TEST(GetsGpu, ADevicePluginResourceOrTheToolkitsVariableGivesTheGpu) {
  ContainerPlan c;
  EXPECT_FALSE(GetsGpu(c));
  c.env["NVIDIA_VISIBLE_DEVICES"] = "none";
  EXPECT_FALSE(GetsGpu(c));
  c.env["NVIDIA_VISIBLE_DEVICES"] = "void";
  EXPECT_FALSE(GetsGpu(c));
  c.env["NVIDIA_VISIBLE_DEVICES"] = "all";
  EXPECT_TRUE(GetsGpu(c)) << "the toolkit's default honours the variable";
  c.env.clear();
  c.devices["nvidia.com/gpu"] = 1;
  EXPECT_TRUE(GetsGpu(c));
}

TEST(PodCgroupPath, IsTheKubeletsBestEffortPodCgroup) {
  PodPlan p;
  p.uid = "0c9e";
  EXPECT_EQ(PodCgroupPath(p), "kubepods/besteffort/pod0c9e");
}

TEST(NodeStatusJson, ListsCapacityWithTheDeviceCountsAndIsReady) {
  NodeAgentOptions o;
  o.name = "node-1";
  json s = NodeStatusJson(o, {{"nvidia.com/gpu", 20}}, "containerd://1.6.20",
                          "2026-12-01T10:00:00Z", 41234);
  EXPECT_EQ(s["nodeInfo"]["containerRuntimeVersion"], "containerd://1.6.20");
  EXPECT_EQ(s["daemonEndpoints"]["kubeletEndpoint"]["Port"], 41234);
  EXPECT_EQ(s["capacity"]["nvidia.com/gpu"], "20");
  EXPECT_EQ(s["allocatable"]["pods"], "110");
  EXPECT_EQ(s["capacity"]["cpu"], "16000m");
  bool ready = false;
  for (const json& c : s["conditions"]) {
    if (c["type"] == "Ready") ready = c["status"] == "True";
  }
  EXPECT_TRUE(ready);
  EXPECT_EQ(s["addresses"][1]["address"], "node-1");
}

// A pod with two claims (one direct, one from a template) and a KEP-5004 claim.
json ClaimPod() {
  json pod = Pod(
      {{{"name", "a"},
        {"command", {"x"}},
        {"resources", {{"claims", {{{"name", "gpu"}}, {{"name", "tmpl"}, {"request", "big"}}}}}}},
       {{"name", "b"}, {"command", {"y"}}}});
  pod["spec"]["resourceClaims"] = {{{"name", "gpu"}, {"resourceClaimName", "shared"}},
                                   {{"name", "tmpl"}, {"resourceClaimTemplateName", "t"}}};
  pod["status"]["resourceClaimStatuses"] = {{{"name", "tmpl"}, {"resourceClaimName", "p-tmpl-x1"}}};
  pod["status"]["extendedResourceClaimStatus"] = {{"resourceClaimName", "p-extended-resources-9"},
                                                  {"requestMappings",
                                                   {{{"containerName", "b"},
                                                     {"resourceName", "nvidia.com/gpu"},
                                                     {"requestName", "container-1-request-0"}}}}};
  return pod;
}

TEST(PlanPod, TakesTheContainersClaimsAndRefusesOneThePodDoesNotList) {
  auto plan = PlanPod(ClaimPod(), "127.0.0.1", {});
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_TRUE(plan->uses_claims);
  ASSERT_EQ(plan->containers[0].claims.size(), 2u);
  EXPECT_EQ(plan->containers[0].claims[1].name, "tmpl");
  EXPECT_EQ(plan->containers[0].claims[1].request, "big");
  EXPECT_FALSE(PlanPod(Pod({{{"name", "m"}, {"command", {"x"}}}}), "127.0.0.1", {})->uses_claims);

  json pod = ClaimPod();
  pod["spec"]["containers"][0]["resources"]["claims"][0]["name"] = "other";
  auto refused = PlanPod(pod, "127.0.0.1", {});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message(),
              HasSubstr("spec.containers[0].resources.claims[0].name 'other' is not in "
                        "spec.resourceClaims"));
}

TEST(PodClaimRefs, ResolvesDirectTemplateAndExtendedClaimsAndWaitsForATemplatesClaim) {
  auto refs = PodClaimRefs(ClaimPod());
  ASSERT_TRUE(refs.ok()) << refs.error().message();
  ASSERT_EQ(refs->size(), 3u);
  EXPECT_EQ((*refs)[0].pod_claim, "gpu");
  EXPECT_EQ((*refs)[0].claim, "shared");
  EXPECT_EQ((*refs)[1].claim, "p-tmpl-x1");
  EXPECT_EQ((*refs)[2].pod_claim, "");
  EXPECT_EQ((*refs)[2].claim, "p-extended-resources-9");

  json pod = ClaimPod();
  pod["status"].erase("resourceClaimStatuses");
  auto waiting = PodClaimRefs(pod);
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(waiting.error().message(),
              HasSubstr("spec.resourceClaims[1] (tmpl): the claim of template t is not named in "
                        "status.resourceClaimStatuses yet"));
  pod["status"]["resourceClaimStatuses"] = {{{"name", "tmpl"}}};
  auto skipped = PodClaimRefs(pod);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(skipped->size(), 2u) << "an entry without a name: no claim is needed";

  pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "also";
  auto both = PodClaimRefs(pod);
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.error().message(), HasSubstr("exactly one of resourceClaimName and "
                                                "resourceClaimTemplateName must be set"));
}

json AllocatedClaim(json reserved_for) {
  return {
      {"metadata", {{"namespace", "ns"}, {"name", "shared"}, {"uid", "c-1"}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results",
             {{{"request", "gpu"}, {"driver", "b.example"}, {"pool", "n"}, {"device", "d0"}},
              {{"request", "gpu"}, {"driver", "a.example"}, {"pool", "n"}, {"device", "d1"}},
              {{"request", "gpu"}, {"driver", "b.example"}, {"pool", "n"}, {"device", "d2"}}}}}}}},
        {"reservedFor", std::move(reserved_for)}}}};
}

TEST(CheckedClaim, NeedsAnAllocationReservedForThePodAndListsItsDriversOnce) {
  auto claim =
      CheckedClaim(AllocatedClaim({{{"resource", "pods"}, {"name", "p"}, {"uid", "u-1"}}}), "u-1");
  ASSERT_TRUE(claim.ok()) << claim.error().message();
  EXPECT_EQ(claim->uid, "c-1");
  EXPECT_EQ(claim->ns, "ns");
  EXPECT_EQ(claim->drivers, (std::vector<std::string>{"b.example", "a.example"}));

  auto other =
      CheckedClaim(AllocatedClaim({{{"resource", "pods"}, {"name", "q"}, {"uid", "u-2"}}}), "u-1");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(other.error().message(),
              HasSubstr("ResourceClaim ns/shared is not reserved for pod UID u-1 "
                        "(status.reservedFor: [q (u-2)])"));
  json pending = AllocatedClaim(json::array());
  pending["status"].erase("allocation");
  auto unallocated = CheckedClaim(pending, "u-1");
  ASSERT_FALSE(unallocated.ok());
  EXPECT_THAT(unallocated.error().message(),
              HasSubstr("ResourceClaim ns/shared is not allocated yet"));
}

kubelet::DraDevice Dev(std::vector<std::string> requests, std::vector<std::string> ids) {
  kubelet::DraDevice d;
  d.request_names = std::move(requests);
  d.cdi_device_ids = std::move(ids);
  return d;
}

TEST(ContainerCdiIds, GivesEachContainerTheDevicesOfItsRequestsAndItsExtendedMapping) {
  const json pod = ClaimPod();
  auto refs = PodClaimRefs(pod);
  ASSERT_TRUE(refs.ok());
  const std::map<std::string, std::vector<kubelet::DraDevice>> devices = {
      {"shared", {Dev({"gpu"}, {"v/c=s0", "v/c=common"}), Dev({"gpu"}, {"v/c=s1", "v/c=common"})}},
      {"p-tmpl-x1", {Dev({"small"}, {"v/c=t0"}), Dev({"big"}, {"v/c=t1"}), Dev({}, {"v/c=t2"})}},
      {"p-extended-resources-9",
       {Dev({"container-0-request-0"}, {"v/c=e0"}), Dev({"container-1-request-0"}, {"v/c=e1"})}}};
  auto ids = ContainerCdiIds(pod, *refs, devices);
  EXPECT_EQ(ids["a"],
            (std::vector<std::string>{"v/c=s0", "v/c=common", "v/c=s1", "v/c=t1", "v/c=t2"}))
      << "all of claim gpu (each ID once), and of tmpl request big and the device that names "
         "no request";
  EXPECT_EQ(ids["b"], (std::vector<std::string>{"v/c=e1"})) << "the mapped request only";
}

}  // namespace
}  // namespace hami::sim::cluster
