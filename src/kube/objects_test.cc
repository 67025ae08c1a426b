#include "kube/objects.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace hami::kube {
namespace {

using nlohmann::json;

WallTime At(int y, unsigned mo, unsigned d, int h, int mi, int s) {
  return WallTime(
      std::chrono::sys_days(std::chrono::year(y) / std::chrono::month(mo) / std::chrono::day(d)) +
      std::chrono::hours(h) + std::chrono::minutes(mi) + std::chrono::seconds(s));
}

json SamplePod() {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {
      "name": "x", "namespace": "default", "uid": "3f0c-uid", "resourceVersion": "42",
      "generation": 3,
      "labels": {"app": "train"},
      "annotations": {"hami.io/vgpu-node": "node-1", "hami.io/bind-phase": "allocating"},
      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                           "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true}],
      "creationTimestamp": "2024-05-20T10:02:05Z",
      "managedFields": [{"manager": "kubectl"}]
    },
    "spec": {
      "initContainers": [{"name": "init", "image": "busybox",
                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
      "containers": [
        {"name": "main", "image": "cuda:12",
         "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000",
                                  "nvidia.com/gpucores": 30, "memory": "1.5Gi"},
                       "requests": {"cpu": "500m"}},
         "env": [{"name": "A", "value": "1"},
                 {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]},
        {"name": "side", "image": "sidecar"}
      ],
      "nodeName": "node-1", "schedulerName": "hami-scheduler", "priority": 1000
    },
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
  })");
}

TEST(ParsePod, ReadsEveryFieldTheControlPlaneUses) {
  auto pod = ParsePod(SamplePod());
  ASSERT_TRUE(pod.ok()) << pod.error().message();
  const ObjectMeta& m = pod->metadata;
  EXPECT_EQ(m.name, "x");
  EXPECT_EQ(m.ns, "default");
  EXPECT_EQ(m.uid, "3f0c-uid");
  EXPECT_EQ(m.resource_version, "42");
  EXPECT_EQ(m.generation, 3);
  ASSERT_NE(m.Label("app"), nullptr);
  EXPECT_EQ(*m.Label("app"), "train");
  EXPECT_EQ(m.Label("absent"), nullptr);
  ASSERT_NE(m.Annotation("hami.io/vgpu-node"), nullptr);
  EXPECT_EQ(*m.Annotation("hami.io/vgpu-node"), "node-1");
  ASSERT_EQ(m.owner_references.size(), 1u);
  EXPECT_EQ(m.owner_references[0].api_version, "apps/v1");
  EXPECT_EQ(m.owner_references[0].kind, "ReplicaSet");
  EXPECT_EQ(m.owner_references[0].name, "rs");
  EXPECT_EQ(m.owner_references[0].uid, "rs-uid");
  EXPECT_TRUE(m.owner_references[0].controller);
  EXPECT_EQ(m.creation_timestamp, At(2024, 5, 20, 10, 2, 5));
  EXPECT_FALSE(m.deletion_timestamp.has_value());

  ASSERT_EQ(pod->init_containers.size(), 1u);
  EXPECT_EQ(pod->init_containers[0].name, "init");
  EXPECT_EQ(pod->init_containers[0].limits.at("nvidia.com/gpu").Value(), 1);
  ASSERT_EQ(pod->containers.size(), 2u);
  const Container& c = pod->containers[0];
  EXPECT_EQ(c.name, "main");
  EXPECT_EQ(c.image, "cuda:12");
  EXPECT_EQ(c.limits.at("nvidia.com/gpu").Value(), 2);
  EXPECT_EQ(c.limits.at("nvidia.com/gpumem").Value(), 3000);
  EXPECT_EQ(c.limits.at("nvidia.com/gpucores").Value(), 30);  // a JSON number
  EXPECT_EQ(c.limits.at("memory").Value(), 1610612736);
  EXPECT_EQ(c.requests.at("cpu").MilliValue(), 500);
  ASSERT_EQ(c.env.size(), 2u);
  EXPECT_EQ(c.env[0].name, "A");
  EXPECT_EQ(c.env[0].value, "1");
  EXPECT_EQ(c.env[1].name, "NODE");
  EXPECT_EQ(c.env[1].value, "");
  EXPECT_TRUE(pod->containers[1].limits.empty());
  EXPECT_EQ(pod->node_name, "node-1");
  EXPECT_EQ(pod->scheduler_name, "hami-scheduler");
  EXPECT_EQ(pod->priority, 1000);
  EXPECT_EQ(pod->phase, PodPhase::kRunning);
  EXPECT_FALSE(pod->IsTerminated());
}

TEST(ParsePod, MissingAndNullFieldsTakeTheirZeroValue) {
  auto pod = ParsePod(json::parse(
      R"({"metadata": {"name": "p", "labels": null, "deletionTimestamp": null},
          "spec": {"containers": [{"name": "c", "resources": {"limits": null}}],
                   "priority": null},
          "status": null})"));
  ASSERT_TRUE(pod.ok()) << pod.error().message();
  EXPECT_EQ(pod->metadata.name, "p");
  EXPECT_EQ(pod->metadata.ns, "");
  EXPECT_TRUE(pod->metadata.labels.empty());
  EXPECT_EQ(pod->metadata.generation, 0);
  EXPECT_TRUE(pod->init_containers.empty());
  ASSERT_EQ(pod->containers.size(), 1u);
  EXPECT_TRUE(pod->containers[0].limits.empty());
  EXPECT_FALSE(pod->priority.has_value());
  EXPECT_EQ(pod->phase, PodPhase::kUnset);
  EXPECT_TRUE(ParsePod(json::object()).ok());
}

TEST(ParsePod, TerminatedMeansSucceededOrFailed) {
  for (auto [phase, want] :
       std::vector<std::pair<std::string, PodPhase>>{{"Pending", PodPhase::kPending},
                                                     {"Running", PodPhase::kRunning},
                                                     {"Succeeded", PodPhase::kSucceeded},
                                                     {"Failed", PodPhase::kFailed},
                                                     {"Unknown", PodPhase::kUnknown}}) {
    auto pod = ParsePod(json{{"status", {{"phase", phase}}}});
    ASSERT_TRUE(pod.ok()) << pod.error().message();
    EXPECT_EQ(pod->phase, want);
    EXPECT_EQ(PodPhaseName(want), phase);
    EXPECT_EQ(pod->IsTerminated(), want == PodPhase::kSucceeded || want == PodPhase::kFailed)
        << phase;
  }
}

struct BadPod {
  std::string pointer;  // JSON pointer into SamplePod() to replace
  json value;
  std::string message;  // the whole error message
};

class ParsePodReject : public ::testing::TestWithParam<BadPod> {};

TEST_P(ParsePodReject, NamesTheObjectAndTheFieldPath) {
  json pod = SamplePod();
  pod[json::json_pointer(GetParam().pointer)] = GetParam().value;
  auto parsed = ParsePod(pod);
  ASSERT_FALSE(parsed.ok()) << GetParam().pointer;
  EXPECT_EQ(parsed.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(parsed.error().message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, ParsePodReject,
    ::testing::Values(
        BadPod{"/spec/containers/1/resources",
               {{"limits", {{"nvidia.com/gpumem", "1.5.3"}}}},
               "Pod default/x: spec.containers[1].resources.limits.nvidia.com/gpumem: quantity "
               "'1.5.3': more than one decimal point"},
        BadPod{"/spec/containers/0/resources/requests/cpu", true,
               "Pod default/x: spec.containers[0].resources.requests.cpu: expected a quantity "
               "string, got boolean"},
        BadPod{"/spec/initContainers/0/resources/limits", json::array(),
               "Pod default/x: spec.initContainers[0].resources.limits: expected an object, got "
               "array"},
        BadPod{"/metadata/labels/app", 5,
               "Pod default/x: metadata.labels.app: expected a string, got number"},
        BadPod{"/metadata/annotations", "a=b",
               "Pod default/x: metadata.annotations: expected an object, got string"},
        BadPod{"/metadata/uid", 1, "Pod default/x: metadata.uid: expected a string, got number"},
        BadPod{"/metadata/generation", "3",
               "Pod default/x: metadata.generation: expected an integer, got string"},
        BadPod{"/metadata/ownerReferences/0/controller", "yes",
               "Pod default/x: metadata.ownerReferences[0].controller: expected a boolean, got "
               "string"},
        BadPod{"/metadata/ownerReferences/0", "rs",
               "Pod default/x: metadata.ownerReferences[0]: expected an object, got string"},
        BadPod{"/metadata/creationTimestamp", "yesterday",
               "Pod default/x: metadata.creationTimestamp: invalid time \"yesterday\" (want RFC "
               "3339, e.g. 2026-12-01T09:15:39Z): the date is not YYYY-MM-DD"},
        BadPod{"/metadata/deletionTimestamp", 1716199325,
               "Pod default/x: metadata.deletionTimestamp: expected a timestamp string, got "
               "number"},
        BadPod{"/spec/containers", json::object(),
               "Pod default/x: spec.containers: expected an array, got object"},
        BadPod{"/spec/containers/1", "side",
               "Pod default/x: spec.containers[1]: expected an object, got string"},
        BadPod{"/spec/containers/0/env/1/value", 7,
               "Pod default/x: spec.containers[0].env[1].value: expected a string, got number"},
        BadPod{"/spec/containers/0/env/0", json::array(),
               "Pod default/x: spec.containers[0].env[0]: expected an object, got array"},
        BadPod{"/spec/containers/0/name", json::array(),
               "Pod default/x: spec.containers[0].name: expected a string, got array"},
        BadPod{"/spec/nodeName", false,
               "Pod default/x: spec.nodeName: expected a string, got boolean"},
        BadPod{"/spec/priority", 1.5,
               "Pod default/x: spec.priority: expected an integer, got number"},
        BadPod{"/spec/priority", 3000000000,
               "Pod default/x: spec.priority: integer 3000000000 is out of range"},
        BadPod{"/spec", json::array(), "Pod default/x: spec: expected an object, got array"},
        BadPod{"/status/phase", "Exploded",
               "Pod default/x: status.phase: unknown phase 'Exploded' (expected Pending, Running, "
               "Succeeded, Failed or Unknown)"},
        BadPod{"/kind", "Node", "Pod default/x: kind: expected Pod, got Node"},
        BadPod{"/kind", 1, "Pod default/x: kind: expected a string, got number"},
        BadPod{"/metadata/name", 12, "Pod (no name): metadata.name: expected a string, got number"},
        BadPod{"/metadata", "x", "Pod (no name): metadata: expected an object, got string"}));

TEST(ParsePod, RejectsANonObjectDocument) {
  auto pod = ParsePod(json::array());
  ASSERT_FALSE(pod.ok());
  EXPECT_EQ(pod.error().message(), "Pod (no name): expected a JSON object, got array");
}

TEST(ParseObjectMeta, ReadsTheMetadataOfAnyKind) {
  auto meta = ParseObjectMeta(json::parse(R"({"metadata": {"name": "n", "uid": "u",
      "deletionTimestamp": "2024-05-20T10:02:05.5+00:00"}})"),
                              "Widget");
  ASSERT_TRUE(meta.ok()) << meta.error().message();
  EXPECT_EQ(meta->name, "n");
  EXPECT_EQ(meta->deletion_timestamp, At(2024, 5, 20, 10, 2, 5) + std::chrono::milliseconds(500));
  auto bad =
      ParseObjectMeta(json::parse(R"({"metadata": {"name": "n", "labels": [1]}})"), "Widget");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "Widget n: metadata.labels: expected an object, got array");
  EXPECT_FALSE(ParseObjectMeta(json(3), "Widget").ok());
}

json SampleNode() {
  return json::parse(R"({
    "kind": "Node",
    "metadata": {"name": "node-1", "labels": {"gpu": "on"},
                 "annotations": {"hami.io/node-handshake": "Requesting_2024-01-23 04:30:04"}},
    "spec": {"unschedulable": true},
    "status": {
      "capacity": {"cpu": "16", "memory": "131900088Ki", "nvidia.com/gpu": "20"},
      "allocatable": {"cpu": "15500m", "memory": "128Gi", "nvidia.com/gpu": "20"},
      "conditions": [{"type": "MemoryPressure", "status": "False"},
                     {"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    }
  })");
}

TEST(ParseNode, ReadsLabelsAnnotationsCapacityAllocatableAndReadiness) {
  auto node = ParseNode(SampleNode());
  ASSERT_TRUE(node.ok()) << node.error().message();
  EXPECT_EQ(node->metadata.name, "node-1");
  EXPECT_EQ(node->metadata.ns, "");
  EXPECT_EQ(*node->metadata.Label("gpu"), "on");
  EXPECT_EQ(*node->metadata.Annotation("hami.io/node-handshake"), "Requesting_2024-01-23 04:30:04");
  EXPECT_TRUE(node->unschedulable);
  EXPECT_EQ(node->capacity.at("memory").Value(), int64_t{131900088} * 1024);
  EXPECT_EQ(node->allocatable.at("cpu").MilliValue(), 15500);
  EXPECT_EQ(node->allocatable.at("nvidia.com/gpu").Value(), 20);
  EXPECT_EQ(node->ready, ConditionStatus::kTrue);
}

TEST(ParseNode, ReadyIsTheReadyConditionsStatusOrAbsent) {
  for (auto [status, want] : std::vector<std::pair<std::string, ConditionStatus>>{
           {"True", ConditionStatus::kTrue},
           {"False", ConditionStatus::kFalse},
           {"Unknown", ConditionStatus::kUnknown}}) {
    json node = SampleNode();
    node["status"]["conditions"][1]["status"] = status;
    auto parsed = ParseNode(node);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message();
    EXPECT_EQ(parsed->ready, want) << status;
  }
  json none = SampleNode();
  none["status"].erase("conditions");
  auto parsed = ParseNode(none);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->ready, ConditionStatus::kAbsent);
  EXPECT_FALSE(ParseNode(json::object())->unschedulable);
}

TEST(ParseNode, NamesTheClusterScopedNodeAndTheField) {
  json node = SampleNode();
  node["status"]["allocatable"]["nvidia.com/gpu"] = "20 GPUs";
  auto parsed = ParseNode(node);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().message().rfind(
                "Node node-1: status.allocatable.nvidia.com/gpu: quantity '20 GPUs': unknown "
                "suffix",
                0),
            0u)
      << parsed.error().message();
  json cond = SampleNode();
  cond["status"]["conditions"][1]["status"] = "Maybe";
  parsed = ParseNode(cond);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().message(),
            "Node node-1: status.conditions[1].status: unknown condition status 'Maybe' "
            "(expected True, False or Unknown)");
  json type = SampleNode();
  type["status"]["conditions"][0] = "Ready";
  parsed = ParseNode(type);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().message(),
            "Node node-1: status.conditions[0]: expected an object, got string");
  json spec = SampleNode();
  spec["spec"]["unschedulable"] = "true";
  parsed = ParseNode(spec);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().message(),
            "Node node-1: spec.unschedulable: expected a boolean, got string");
}

TEST(ParseLease, ReadsHolderDurationMicroTimesAndTransitions) {
  auto lease = ParseLease(json::parse(R"({
    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
    "metadata": {"name": "hami-scheduler", "namespace": "kube-system", "resourceVersion": "7"},
    "spec": {"holderIdentity": "host-a_1234", "leaseDurationSeconds": 15,
             "acquireTime": "2024-05-20T10:02:05.000000Z",
             "renewTime": "2024-05-20T10:02:07.250000Z", "leaseTransitions": 2}})"));
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  EXPECT_EQ(lease->metadata.ns, "kube-system");
  EXPECT_EQ(lease->holder_identity, "host-a_1234");
  EXPECT_EQ(lease->lease_duration_seconds, 15);
  EXPECT_EQ(lease->acquire_time, At(2024, 5, 20, 10, 2, 5));
  EXPECT_EQ(lease->renew_time, At(2024, 5, 20, 10, 2, 7) + std::chrono::milliseconds(250));
  EXPECT_EQ(lease->lease_transitions, 2);
  auto empty = ParseLease(json::parse(R"({"metadata": {"name": "l"}, "spec": {}})"));
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->lease_duration_seconds.has_value());
  EXPECT_FALSE(empty->renew_time.has_value());
}

TEST(ParseLease, RejectsWrongTypesNamingTheLease) {
  auto lease = ParseLease(json::parse(
      R"({"metadata": {"name": "l", "namespace": "ns"}, "spec": {"renewTime": "soon"}})"));
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.error().message().rfind("Lease ns/l: spec.renewTime: invalid time", 0), 0u)
      << lease.error().message();
  lease = ParseLease(json::parse(
      R"({"metadata": {"name": "l", "namespace": "ns"}, "spec": {"leaseDurationSeconds": "15"}})"));
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.error().message(),
            "Lease ns/l: spec.leaseDurationSeconds: expected an integer, got string");
}

TEST(LeaseToJson, WritesWhatLeaderElectionUpdatesAndParsesBack) {
  Lease lease;
  lease.metadata.name = "hami-scheduler";
  lease.metadata.ns = "kube-system";
  lease.metadata.resource_version = "7";
  lease.holder_identity = "host-a_1234";
  lease.lease_duration_seconds = 15;
  lease.acquire_time = At(2024, 5, 20, 10, 2, 5);
  lease.renew_time = At(2024, 5, 20, 10, 2, 7) + std::chrono::microseconds(250001);
  lease.lease_transitions = 2;
  json j = LeaseToJson(lease);
  EXPECT_EQ(j, json::parse(R"({
    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
    "metadata": {"name": "hami-scheduler", "namespace": "kube-system", "resourceVersion": "7"},
    "spec": {"holderIdentity": "host-a_1234", "leaseDurationSeconds": 15,
             "acquireTime": "2024-05-20T10:02:05.000000Z",
             "renewTime": "2024-05-20T10:02:07.250001Z", "leaseTransitions": 2}})"));
  auto back = ParseLease(j);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->holder_identity, lease.holder_identity);
  EXPECT_EQ(back->lease_duration_seconds, lease.lease_duration_seconds);
  EXPECT_EQ(back->acquire_time, lease.acquire_time);
  EXPECT_EQ(back->renew_time, lease.renew_time);
  EXPECT_EQ(back->lease_transitions, lease.lease_transitions);
  EXPECT_EQ(back->metadata.resource_version, "7");

  Lease fresh;
  fresh.metadata.name = "l";
  EXPECT_EQ(LeaseToJson(fresh), json::parse(R"({"apiVersion": "coordination.k8s.io/v1",
      "kind": "Lease", "metadata": {"name": "l"}, "spec": {}})"));
}

TEST(LeaseToJson, OnTheObjectAsReadKeepsWhatTheViewDoesNotModel) {
  json read = json::parse(R"({
    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
    "metadata": {"name": "hami-scheduler", "namespace": "kube-system", "uid": "u-1",
                 "resourceVersion": "7", "creationTimestamp": "2024-05-20T10:00:00Z",
                 "labels": {"app": "hami"},
                 "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                      "uid": "p-uid"}],
                 "managedFields": [{"manager": "hami"}]},
    "spec": {"holderIdentity": "host-a_1234", "leaseDurationSeconds": 15,
             "acquireTime": "2024-05-20T10:02:05.000000Z",
             "renewTime": "2024-05-20T10:02:07.250000Z", "leaseTransitions": 2,
             "preferredHolder": "host-b_1", "strategy": "OldestEmulationVersion"}})");
  auto lease = ParseLease(read);
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  EXPECT_EQ(LeaseToJson(*lease, read), read);  // nothing changed, nothing lost

  lease->holder_identity.clear();  // released: the view's empty fields leave the object
  lease->lease_transitions.reset();
  lease->metadata.labels.clear();
  lease->renew_time = At(2024, 5, 20, 10, 2, 9) + std::chrono::microseconds(7);
  lease->metadata.resource_version = "8";
  json written = LeaseToJson(*lease, read);
  json want = read;
  want["spec"].erase("holderIdentity");
  want["spec"].erase("leaseTransitions");
  want["metadata"].erase("labels");
  want["spec"]["renewTime"] = "2024-05-20T10:02:09.000007Z";
  want["metadata"]["resourceVersion"] = "8";
  EXPECT_EQ(written, want);

  json odd = {{"kind", "Lease"}, {"metadata", "garbled"}, {"spec", 3}};
  EXPECT_EQ(LeaseToJson(*lease, odd)["metadata"]["name"], "hami-scheduler");
  EXPECT_EQ(LeaseToJson(*lease, odd)["spec"]["leaseDurationSeconds"], 15);
  EXPECT_EQ(LeaseToJson(*lease, json::array()), LeaseToJson(*lease));
}

TEST(ParseConfigMap, ReadsDataAndRejectsANonStringValue) {
  auto cm = ParseConfigMap(json::parse(
      R"({"metadata": {"name": "hami-device-config", "namespace": "kube-system"},
          "data": {"device-config.yaml": "nvidia:\n  deviceSplitCount: 10\n"},
          "binaryData": {"x": "AAAA"}})"));
  ASSERT_TRUE(cm.ok()) << cm.error().message();
  EXPECT_EQ(cm->data.at("device-config.yaml"), "nvidia:\n  deviceSplitCount: 10\n");
  EXPECT_EQ(cm->data.size(), 1u);
  auto bad = ParseConfigMap(
      json::parse(R"({"metadata": {"name": "c", "namespace": "kube-system"}, "data": {"n": 10}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(),
            "ConfigMap kube-system/c: data.n: expected a string, got number");
}

TEST(ParseResourceQuota, ReadsSpecAndStatusQuantities) {
  auto q = ParseResourceQuota(json::parse(R"({
    "metadata": {"name": "gpu-quota", "namespace": "team-a"},
    "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
    "status": {"hard": {"limits.nvidia.com/gpumem": "20000"},
               "used": {"limits.nvidia.com/gpumem": "3000"}}})"));
  ASSERT_TRUE(q.ok()) << q.error().message();
  EXPECT_EQ(q->spec_hard.at("limits.nvidia.com/gpumem").Value(), 20000);
  EXPECT_EQ(q->status_hard.at("limits.nvidia.com/gpumem").Value(), 20000);
  EXPECT_EQ(q->status_used.at("limits.nvidia.com/gpumem").Value(), 3000);
  auto bad = ParseResourceQuota(json::parse(R"({
    "metadata": {"name": "gpu-quota", "namespace": "team-a"},
    "status": {"used": {"limits.nvidia.com/gpumem": "lots"}}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message().rfind(
                "ResourceQuota team-a/gpu-quota: status.used.limits.nvidia.com/gpumem: quantity "
                "'lots'",
                0),
            0u)
      << bad.error().message();
}

TEST(ObjectReference, NamesTheObjectForAnEvent) {
  auto pod = ParsePod(SamplePod());
  ASSERT_TRUE(pod.ok());
  ObjectReference ref = ReferenceTo("v1", "Pod", pod->metadata);
  EXPECT_EQ(ObjectReferenceToJson(ref), json::parse(R"({"apiVersion": "v1", "kind": "Pod",
      "namespace": "default", "name": "x", "uid": "3f0c-uid", "resourceVersion": "42"})"));
  ref.field_path = "spec.containers{main}";
  ref.ns.clear();
  EXPECT_EQ(ObjectReferenceToJson(ref)["fieldPath"], "spec.containers{main}");
  EXPECT_FALSE(ObjectReferenceToJson(ref).contains("namespace"));
}

TEST(MetadataString, ReadsAStringFieldOfTheMetadataAndEmptyForAnythingElse) {
  json pod = SamplePod();
  EXPECT_EQ(MetadataString(pod, "name"), "x");
  EXPECT_EQ(MetadataString(pod, "resourceVersion"), "42");
  EXPECT_EQ(MetadataString(pod, "generation"), "");  // a number
  EXPECT_EQ(MetadataString(pod, "absent"), "");
  EXPECT_EQ(MetadataString(json{{"metadata", "x"}}, "name"), "");
  EXPECT_EQ(MetadataString(json::array(), "name"), "");
}

TEST(ReferenceToObject, TakesKindAndApiVersionFromTheObjectOrElseFromTheResource) {
  json pod = SamplePod();
  ObjectReference ref = ReferenceToObject(kPods, pod);
  EXPECT_EQ(ObjectReferenceToJson(ref), json::parse(R"({"apiVersion": "v1", "kind": "Pod",
      "namespace": "default", "name": "x", "uid": "3f0c-uid", "resourceVersion": "42"})"));

  json item = {{"metadata", {{"name", "hami"}, {"namespace", "kube-system"}}}};  // a list item
  ref = ReferenceToObject(kLeases, item);
  EXPECT_EQ(ref.api_version, "coordination.k8s.io/v1");
  EXPECT_EQ(ref.kind, "Lease");
  EXPECT_EQ(ref.ns, "kube-system");
  EXPECT_EQ(ref.name, "hami");
  EXPECT_EQ(ref.uid, "");

  item["kind"] = "Scale";  // the object's own kind wins
  item["metadata"]["uid"] = 7;
  ref = ReferenceToObject(kLeases, item);
  EXPECT_EQ(ref.kind, "Scale");
  EXPECT_EQ(ref.uid, "");  // not a string: left empty, not an error
  ref = ReferenceToObject(kNodes, json::array());
  EXPECT_EQ(ref.kind, "Node");
  EXPECT_EQ(ref.name, "");
}

}  // namespace
}  // namespace hami::kube
