// The new resources, pods/log and the audit log through clients nobody here wrote: kubectl
// 1.32 (apply -f and -k, get with its tables and short names, delete, logs with --previous,
// --timestamps, --since and --since-time over the kubelet's CRI log files) against the
// simulated API server in this process, and the project's own client naming itself by
// User-Agent. A kubectl test skips when kubectl is not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/event_recorder.h"
#include "kube/resource.h"
#include "sim/kube/api_test_support.h"
#include "support/subprocess.h"

namespace hami::sim::kube {
namespace {

using hami::testing::Subprocess;
using nlohmann::json;

constexpr int kCommandTimeoutMs = 60000;

std::optional<std::string> FindKubectl() {
  for (const char* path : {"/usr/bin/kubectl", "/usr/local/bin/kubectl"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return std::nullopt;
}

struct Outcome {
  int status;
  std::string out;  // stdout and stderr, merged
};

// The manifests of a small HAMi-like deployment: every kind the deployment uses.
constexpr char kManifests[] = R"(apiVersion: v1
kind: ServiceAccount
metadata: {name: hami-scheduler, namespace: kube-system}
---
apiVersion: v1
kind: Secret
metadata: {name: hami-scheduler-tls, namespace: kube-system}
type: kubernetes.io/tls
data: {tls.crt: AAAA, tls.key: AAAA}
---
apiVersion: v1
kind: Service
metadata: {name: hami-scheduler, namespace: kube-system}
spec:
  selector: {app: hami-scheduler}
  ports: [{name: https, port: 443, targetPort: 9443}, {name: metrics, port: 9395}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: hami-scheduler}
rules: [{apiGroups: [""], resources: [pods, nodes], verbs: [get, list, watch, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: hami-scheduler}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: hami-scheduler}
subjects: [{kind: ServiceAccount, name: hami-scheduler, namespace: kube-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: hami-scheduler, namespace: kube-system}
rules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, create, update]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: hami-scheduler, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: hami-scheduler}
subjects: [{kind: ServiceAccount, name: hami-scheduler, namespace: kube-system}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hami-scheduler, namespace: kube-system}
spec:
  selector: {matchLabels: {app: hami-scheduler}}
  template:
    metadata: {labels: {app: hami-scheduler}}
    spec:
      serviceAccountName: hami-scheduler
      containers:
      - name: scheduler
        image: hami:1
        resources: {limits: {cpu: "1"}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: hami-device-plugin, namespace: kube-system}
spec:
  selector: {matchLabels: {app: hami-device-plugin}}
  template:
    metadata: {labels: {app: hami-device-plugin}}
    spec:
      nodeSelector: {gpu: "on"}
      containers: [{name: plugin, image: hami:1}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: hami-webhook}
webhooks:
- name: vgpu.hami.io
  clientConfig: {url: "https://127.0.0.1:9443/webhook"}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}]
  objectSelector: {matchLabels: {never: "true"}}
  sideEffects: None
  admissionReviewVersions: [v1]
)";

class KubectlTest : public testing::ServerFixture {
 protected:
  void SetUp() override {
    kubectl_ = FindKubectl();
    if (!kubectl_) GTEST_SKIP() << "kubectl is not installed (scripts/setup.sh installs it)";
    ASSERT_TRUE(dir_.ok());
    std::filesystem::create_directories(dir_.File("logs"));
    ApiServerOptions o;
    o.pod_log_dir = dir_.File("logs");
    Start(o);
    ASSERT_TRUE(server_->WriteKubeconfig(dir_.File("kubeconfig")).ok());
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    std::ofstream(path) << text;
    return path;
  }

  // A container's log file as the kubelet lays it out and containerd writes it (CRI format).
  void WriteLog(const std::string& pod, const std::string& uid, const std::string& container,
                int restart, const std::string& text) {
    const std::string dir = "logs/default_" + pod + "_" + uid + "/" + container;
    std::filesystem::create_directories(dir_.File(dir));
    Write(dir + "/" + std::to_string(restart) + ".log", text);
  }

  Outcome Kubectl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/bin/sh", "-c",          "exec \"$0\" \"$@\" 2>&1",
                                     *kubectl_, "--cache-dir", dir_.File("cache")};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess p(argv, {{"KUBECONFIG", dir_.File("kubeconfig")}, {"HOME", dir_.path()}});
    std::string out = p.ReadAll(kCommandTimeoutMs);
    return {p.Wait(kCommandTimeoutMs), out};
  }

  std::string KubectlOk(const std::vector<std::string>& args) {
    Outcome o = Kubectl(args);
    EXPECT_EQ(o.status, 0) << ::testing::PrintToString(args) << ": " << o.out;
    return o.out;
  }

  std::optional<std::string> kubectl_;
  TempDir dir_{"hami-sim-kubectl"};
};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(KubectlTest, ApplyCreatesConfiguresAndLeavesUnchangedEveryDeploymentKind) {
  const std::string file = Write("all.yaml", kManifests);
  std::string out = KubectlOk({"apply", "-f", file});
  for (const char* line :
       {"serviceaccount/hami-scheduler created", "secret/hami-scheduler-tls created",
        "service/hami-scheduler created",
        "clusterrole.rbac.authorization.k8s.io/hami-scheduler created",
        "clusterrolebinding.rbac.authorization.k8s.io/hami-scheduler created",
        "role.rbac.authorization.k8s.io/hami-scheduler created",
        "rolebinding.rbac.authorization.k8s.io/hami-scheduler created",
        "deployment.apps/hami-scheduler created", "daemonset.apps/hami-device-plugin created",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/hami-webhook created"}) {
    EXPECT_TRUE(Has(out, line)) << line << " in:\n" << out;
  }

  std::string changed = kManifests;
  for (const std::string from : {"image: hami:1", "image: hami:1", "port: 9395"}) {
    changed.replace(changed.find(from), from.size(),
                    from == "port: 9395" ? "port: 9396" : "image: hami:2");
  }
  out = KubectlOk({"apply", "-f", Write("changed.yaml", changed)});
  EXPECT_TRUE(Has(out, "deployment.apps/hami-scheduler configured")) << out;
  EXPECT_TRUE(Has(out, "daemonset.apps/hami-device-plugin configured")) << out;
  EXPECT_TRUE(Has(out, "service/hami-scheduler configured")) << out;
  EXPECT_TRUE(Has(out, "serviceaccount/hami-scheduler unchanged")) << out;
  EXPECT_TRUE(Has(out, "clusterrole.rbac.authorization.k8s.io/hami-scheduler unchanged")) << out;

  // The strategic merge kept what the manifest did not change.
  json deploy = json::parse(
      KubectlOk({"-n", "kube-system", "get", "deploy", "hami-scheduler", "-o", "json"}));
  const json& container = deploy["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["image"], "hami:2");
  EXPECT_EQ(container["resources"]["limits"]["cpu"], "1");
  EXPECT_EQ(deploy["metadata"]["generation"], 2);
  json svc =
      json::parse(KubectlOk({"-n", "kube-system", "get", "svc", "hami-scheduler", "-o", "json"}));
  ASSERT_EQ(svc["spec"]["ports"].size(), 2u);
  EXPECT_EQ(svc["spec"]["ports"][0]["targetPort"], 9443);
  EXPECT_EQ(svc["spec"]["ports"][1]["port"], 9396);
  json hooks = json::parse(KubectlOk({"get", "mutatingwebhookconfiguration", "-o", "json"}));
  EXPECT_EQ(hooks["items"][0]["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/webhook");

  out = KubectlOk({"-n", "kube-system", "get", "deploy,ds,svc,sa"});
  EXPECT_TRUE(Has(out, "READY   UP-TO-DATE   AVAILABLE")) << out;
  EXPECT_TRUE(Has(out, "deployment.apps/hami-scheduler   0/1")) << out;
  EXPECT_TRUE(Has(out, "NODE SELECTOR")) << out;
  EXPECT_TRUE(Has(out, "gpu=on")) << out;
  EXPECT_TRUE(Has(out, "443/TCP,9396/TCP")) << out;
  EXPECT_TRUE(Has(out, "serviceaccount/hami-scheduler")) << out;
  out = KubectlOk({"get", "clusterrolebindings"});
  EXPECT_TRUE(Has(out, "ClusterRole/hami-scheduler")) << out;

  out = KubectlOk({"delete", "-f", Write("changed.yaml", changed)});
  EXPECT_TRUE(Has(out, "daemonset.apps \"hami-device-plugin\" deleted")) << out;
  EXPECT_TRUE(Has(out, "secret \"hami-scheduler-tls\" deleted")) << out;
  Outcome gone = Kubectl({"-n", "kube-system", "get", "deploy", "hami-scheduler"});
  EXPECT_NE(gone.status, 0);
  EXPECT_TRUE(Has(gone.out, "NotFound")) << gone.out;
}

TEST_F(KubectlTest, PriorityClassesAreServedAndGivePodsTheirPriority) {
  const std::string classes = Write("classes.yaml", R"(apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: gpu-high}
value: 1000
description: GPU jobs that may take a GPU from batch work
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: gpu-polite}
value: 500
preemptionPolicy: Never
)");
  std::string out = KubectlOk({"apply", "-f", classes});
  EXPECT_TRUE(Has(out, "priorityclass.scheduling.k8s.io/gpu-high created")) << out;
  out = KubectlOk({"get", "pc"});
  EXPECT_TRUE(Has(out, "NAME")) << out;
  EXPECT_TRUE(Has(out, "GLOBAL-DEFAULT")) << out;
  EXPECT_TRUE(Has(out, "PREEMPTIONPOLICY")) << out;
  EXPECT_TRUE(Has(out, "system-node-critical")) << out;  // as every API server has
  json high = json::parse(KubectlOk({"get", "priorityclass", "gpu-high", "-o", "json"}));
  EXPECT_EQ(high["value"], 1000);
  EXPECT_EQ(high["preemptionPolicy"], "PreemptLowerPriority");

  auto pod = [&](const std::string& name, const std::string& extra) {
    return Write(name + ".yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name +
                                     "}\nspec:\n" + extra +
                                     "  containers: [{name: main, image: cuda}]\n");
  };
  auto spec_of = [&](const std::string& name) {
    return json::parse(KubectlOk({"get", "pod", name, "-o", "json"}))["spec"];
  };
  KubectlOk({"create", "-f", pod("named", "  priorityClassName: gpu-high\n")});
  EXPECT_EQ(spec_of("named")["priority"], 1000);
  EXPECT_EQ(spec_of("named")["preemptionPolicy"], "PreemptLowerPriority");
  KubectlOk({"create", "-f", pod("polite", "  priorityClassName: gpu-polite\n")});
  EXPECT_EQ(spec_of("polite")["priority"], 500);
  EXPECT_EQ(spec_of("polite")["preemptionPolicy"], "Never");
  KubectlOk({"create", "-f", pod("plain", "")});
  EXPECT_EQ(spec_of("plain")["priority"], 0);
  EXPECT_FALSE(spec_of("plain").contains("priorityClassName"));

  // Refused as the API server refuses them.
  Outcome unknown = Kubectl({"create", "-f", pod("unknown", "  priorityClassName: nope\n")});
  EXPECT_NE(unknown.status, 0);
  EXPECT_TRUE(Has(unknown.out, "Forbidden")) << unknown.out;
  EXPECT_TRUE(Has(unknown.out,
                  "pods \"unknown\" is forbidden: no PriorityClass with name nope "
                  "was found"))
      << unknown.out;
  Outcome mismatch =
      Kubectl({"create", "-f", pod("mismatch", "  priorityClassName: gpu-high\n  priority: 7\n")});
  EXPECT_NE(mismatch.status, 0);
  EXPECT_TRUE(Has(mismatch.out,
                  "the integer value of priority (7) must not be provided in pod "
                  "spec; priority admission controller computed 1000"))
      << mismatch.out;
  // (kubectl create priorityclass sends protobuf, which this server does not read: files.)
  auto priority_class = [&](const std::string& name, const std::string& rest) {
    return Write(name + ".yaml",
                 "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: " + name +
                     "}\n" + rest);
  };
  Outcome too_high = Kubectl({"create", "-f", priority_class("huge", "value: 1000000001\n")});
  EXPECT_NE(too_high.status, 0);
  EXPECT_TRUE(Has(too_high.out, "maximum allowed value of a user defined priority is 1000000000"))
      << too_high.out;
  Outcome changed = Kubectl({"patch", "pc", "gpu-high", "--type=merge", "-p", R"({"value":5})"});
  EXPECT_NE(changed.status, 0);
  EXPECT_TRUE(Has(changed.out, "value: Forbidden: may not be changed in an update")) << changed.out;
  Outcome no_value =
      Kubectl({"apply", "-f", Write("novalue.yaml", R"(apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: novalue}
)")});
  EXPECT_NE(no_value.status, 0);
  EXPECT_TRUE(Has(no_value.out, "value: Required value")) << no_value.out;

  // A globalDefault class applies to a pod that names none; only one may exist.
  KubectlOk({"create", "-f", priority_class("batch", "value: 100\nglobalDefault: true\n")});
  Outcome second =
      Kubectl({"create", "-f", priority_class("batch2", "value: 50\nglobalDefault: true\n")});
  EXPECT_NE(second.status, 0);
  EXPECT_TRUE(Has(second.out, "PriorityClass batch is already marked as default")) << second.out;
  KubectlOk({"create", "-f", pod("defaulted", "")});
  EXPECT_EQ(spec_of("defaulted")["priority"], 100);
  EXPECT_EQ(spec_of("defaulted")["priorityClassName"], "batch");

  out = KubectlOk({"delete", "pc", "batch", "gpu-polite"});
  EXPECT_TRUE(Has(out, "priorityclass.scheduling.k8s.io \"batch\" deleted")) << out;
  KubectlOk({"create", "-f", pod("after", "")});
  EXPECT_EQ(spec_of("after")["priority"], 0);
  out = KubectlOk({"get", "priorityclasses", "-o", "name"});
  EXPECT_TRUE(Has(out, "priorityclass.scheduling.k8s.io/gpu-high")) << out;
  EXPECT_FALSE(Has(out, "priorityclass.scheduling.k8s.io/batch\n")) << out;
}

// A DeviceClass, a node's ResourceSlice, a claim template and a claim, as a DRA driver and its
// user write them.
constexpr char kDraManifests[] = R"(apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: hami-core-gpu.project-hami.io}
spec:
  selectors: [{cel: {expression: "device.driver == 'hami-core-gpu.project-hami.io'"}}]
  extendedResourceName: nvidia.com/gpu
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-hami-core-gpu}
spec:
  driver: hami-core-gpu.project-hami.io
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: hami-gpu-0
    allowMultipleAllocations: true
    attributes: {uuid: {string: GPU-1}, index: {int: 0}}
    capacity:
      memory: {value: 80Gi, requestPolicy: {default: 80Gi, validRange: {min: 1Mi, max: 80Gi, step: 1Mi}}}
      cores: {value: "100"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu-share}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: hami-core-gpu.project-hami.io, capacity: {requests: {memory: 3000Mi, cores: "30"}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: trainer-gpu}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: hami-core-gpu.project-hami.io, capacity: {requests: {memory: 3000Mi, cores: "30"}}}
)";

TEST_F(KubectlTest, DraKindsAreServedWithTablesDescribeAndClaimStatus) {
  std::string out = KubectlOk({"apply", "-f", Write("dra.yaml", kDraManifests)});
  for (const char* line : {"deviceclass.resource.k8s.io/hami-core-gpu.project-hami.io created",
                           "resourceslice.resource.k8s.io/n1-hami-core-gpu created",
                           "resourceclaimtemplate.resource.k8s.io/gpu-share created",
                           "resourceclaim.resource.k8s.io/trainer-gpu created"}) {
    EXPECT_TRUE(Has(out, line)) << line << " in:\n" << out;
  }
  out = KubectlOk({"get", "deviceclasses,resourceslices,resourceclaims,resourceclaimtemplates"});
  for (const char* part : {"deviceclass.resource.k8s.io/hami-core-gpu.project-hami.io",
                           "resourceslice.resource.k8s.io/n1-hami-core-gpu", "NODE", "DRIVER",
                           "POOL", "STATE", "resourceclaim.resource.k8s.io/trainer-gpu", "pending",
                           "resourceclaimtemplate.resource.k8s.io/gpu-share"}) {
    EXPECT_TRUE(Has(out, part)) << part << " in:\n" << out;
  }
  out = KubectlOk({"get", "resourceslices"});
  EXPECT_TRUE(Has(out, "n1-hami-core-gpu   n1     hami-core-gpu.project-hami.io   n1")) << out;

  json slice = json::parse(KubectlOk({"get", "resourceslice", "n1-hami-core-gpu", "-o", "json"}));
  EXPECT_EQ(slice["kind"], "ResourceSlice");
  EXPECT_EQ(slice["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(slice["metadata"]["generation"], 1);
  EXPECT_EQ(
      slice["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"],
      "1Mi");
  json claim = json::parse(KubectlOk({"get", "resourceclaim", "trainer-gpu", "-o", "json"}));
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"], "ExactCount");
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["exactly"]["count"], 1);
  json list = json::parse(KubectlOk({"get", "resourceclaimtemplates", "-o", "json"}));
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["spec"]["spec"]["devices"]["requests"][0]["name"], "gpu");
  out = KubectlOk({"get", "resourceslices", "--field-selector",
                   "spec.driver=hami-core-gpu.project-hami.io,spec.nodeName=n1", "-o", "name"});
  EXPECT_EQ(out, "resourceslice.resource.k8s.io/n1-hami-core-gpu\n");
  out = KubectlOk({"get", "resourceslices", "--field-selector", "spec.nodeName=n2", "-o", "name"});
  EXPECT_EQ(out, "");

  // describe (kubectl 1.32 has no describer of its own for v1: the generic one, over GET).
  out = KubectlOk({"describe", "resourceslice", "n1-hami-core-gpu"});
  for (const char* part : {"Name:         n1-hami-core-gpu", "Kind:         ResourceSlice",
                           "Node Name:       n1", "Allow Multiple Allocations:  true"}) {
    EXPECT_TRUE(Has(out, part)) << part << " in:\n" << out;
  }
  out = KubectlOk({"describe", "deviceclass", "hami-core-gpu.project-hami.io"});
  EXPECT_TRUE(Has(out, "Extended Resource Name:  nvidia.com/gpu")) << out;
  out = KubectlOk({"describe", "resourceclaimtemplate", "gpu-share"});
  EXPECT_TRUE(Has(out, "Device Class Name:  hami-core-gpu.project-hami.io")) << out;
  out = KubectlOk({"describe", "resourceclaim", "trainer-gpu"});
  EXPECT_TRUE(Has(out, "Namespace:    default")) << out;
  EXPECT_TRUE(Has(out, "Memory:         3000Mi")) << out;

  // The allocation goes through /status; the main resource keeps the status it has.
  const std::string allocation =
      R"({"status":{"allocation":{"devices":{"results":[{"request":"gpu",)"
      R"("driver":"hami-core-gpu.project-hami.io","pool":"n1","device":"hami-gpu-0",)"
      R"("consumedCapacity":{"memory":"3000Mi","cores":"30"}}]}},)"
      R"("reservedFor":[{"resource":"pods","name":"trainer","uid":"u1"}]}})";
  out = KubectlOk({"patch", "resourceclaim", "trainer-gpu", "--type=merge", "-p", allocation});
  EXPECT_TRUE(Has(out, "patched (no change)")) << out;
  EXPECT_TRUE(Has(KubectlOk({"get", "resourceclaims"}), "pending"));
  KubectlOk({"patch", "resourceclaim", "trainer-gpu", "--subresource=status", "--type=merge", "-p",
             allocation});
  EXPECT_TRUE(Has(KubectlOk({"get", "resourceclaims"}), "allocated,reserved"));
  claim = json::parse(KubectlOk({"get", "resourceclaim", "trainer-gpu", "-o", "json"}));
  EXPECT_EQ(claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"],
            "30");
  out = KubectlOk({"describe", "resourceclaim", "trainer-gpu"});
  EXPECT_TRUE(Has(out, "Reserved For:")) << out;

  // Refusals in the API server's words.
  Outcome immutable =
      Kubectl({"patch", "resourceclaim", "trainer-gpu", "--type=json", "-p",
               R"([{"op":"replace","path":"/spec/devices/requests/0/name","value":"x"}])"});
  EXPECT_NE(immutable.status, 0);
  EXPECT_TRUE(Has(immutable.out, "The ResourceClaim \"trainer-gpu\" is invalid: spec:"))
      << immutable.out;
  EXPECT_TRUE(Has(immutable.out, "field is immutable")) << immutable.out;
  Outcome no_driver = Kubectl({"apply", "-f", Write("bad.yaml", R"(apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: bad}
spec:
  nodeName: n1
  pool: {name: n1, resourceSliceCount: 1}
)")});
  EXPECT_NE(no_driver.status, 0);
  EXPECT_TRUE(Has(no_driver.out, "spec.driver: Required value")) << no_driver.out;
  Outcome two_nodes = Kubectl({"apply", "-f", Write("bad2.yaml", R"(apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: bad}
spec:
  driver: gpu.example.com
  nodeName: n1
  allNodes: true
  pool: {name: n1, resourceSliceCount: 1}
)")});
  EXPECT_NE(two_nodes.status, 0);
  EXPECT_TRUE(Has(two_nodes.out, "but multiple fields are set")) << two_nodes.out;

  out = KubectlOk({"delete", "resourceclaim", "trainer-gpu"});
  EXPECT_TRUE(Has(out, "resourceclaim.resource.k8s.io \"trainer-gpu\" deleted")) << out;
  EXPECT_EQ(KubectlOk({"get", "resourceclaims", "-o", "name"}), "");
}

TEST_F(KubectlTest, PodClaimFieldsRoundTrip) {
  KubectlOk({"apply", "-f", Write("pod.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimName: trainer-gpu}
  - {name: scratch, resourceClaimTemplateName: gpu-share}
  containers:
  - name: main
    image: cuda
    resources:
      claims: [{name: gpu, request: gpu}, {name: scratch}]
)")});
  KubectlOk(
      {"patch", "pod", "trainer", "--subresource=status", "--type=merge", "-p",
       R"({"status":{"resourceClaimStatuses":[{"name":"scratch",)"
       R"("resourceClaimName":"trainer-scratch-x7k2p"}],)"
       R"("extendedResourceClaimStatus":{"resourceClaimName":"trainer-extended-resources-ab12c",)"
       R"("requestMappings":[{"containerName":"main","resourceName":"nvidia.com/gpu",)"
       R"("requestName":"container-0-request-0"}]}}})"});
  json pod = json::parse(KubectlOk({"get", "pod", "trainer", "-o", "json"}));
  EXPECT_EQ(pod["spec"]["resourceClaims"],
            json::parse(R"([{"name":"gpu","resourceClaimName":"trainer-gpu"},)"
                        R"({"name":"scratch","resourceClaimTemplateName":"gpu-share"}])"));
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["claims"],
            json::parse(R"([{"name":"gpu","request":"gpu"},{"name":"scratch"}])"));
  EXPECT_EQ(pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"],
            "trainer-scratch-x7k2p");
  EXPECT_EQ(pod["status"]["extendedResourceClaimStatus"]["requestMappings"][0]["requestName"],
            "container-0-request-0");
  // A relabel keeps them (the pod's spec.resourceClaims cannot change).
  KubectlOk({"label", "pod", "trainer", "team=ml"});
  pod = json::parse(KubectlOk({"get", "pod", "trainer", "-o", "json"}));
  EXPECT_EQ(pod["spec"]["resourceClaims"].size(), 2u);
  EXPECT_EQ(pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"],
            "trainer-extended-resources-ab12c");
  Outcome changed = Kubectl({"patch", "pod", "trainer", "--type=json", "-p",
                             R"([{"op":"remove","path":"/spec/resourceClaims/1"}])"});
  EXPECT_NE(changed.status, 0);
  EXPECT_TRUE(Has(changed.out, "pod updates may not change fields")) << changed.out;
}

TEST_F(KubectlTest, ApplyOfAKustomization) {
  std::filesystem::create_directories(dir_.File("base"));
  Write("base/all.yaml", kManifests);
  Write("base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [all.yaml]\ncommonLabels: {app.kubernetes.io/part-of: hami}\n");
  std::string out = KubectlOk({"apply", "-k", dir_.File("base")});
  EXPECT_TRUE(Has(out, "deployment.apps/hami-scheduler created")) << out;
  out = KubectlOk({"get", "clusterroles", "-l", "app.kubernetes.io/part-of=hami", "-o", "name"});
  EXPECT_EQ(out, "clusterrole.rbac.authorization.k8s.io/hami-scheduler\n");
}

TEST_F(KubectlTest, BadObjectsAreRefusedWithTheFieldNamed) {
  Outcome o = Kubectl({"apply", "-f",
                       Write("secret.yaml",
                             "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
                             "data: {key: not-base64!}\n")});
  EXPECT_NE(o.status, 0);
  EXPECT_TRUE(Has(o.out, "data[\"key\"]: illegal base64 data")) << o.out;
  o = Kubectl({"apply", "-f",
               Write("role.yaml",
                     "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n"
                     "metadata: {name: r}\nrules: [{apiGroups: [\"\"], resources: [pods]}]\n")});
  EXPECT_NE(o.status, 0);
  EXPECT_TRUE(Has(o.out, "The ClusterRole \"r\" is invalid: rules[0].verbs: Required value"))
      << o.out;
}

TEST_F(KubectlTest, LogsDecodesTheKubeletsCriLogFiles) {
  auto pod = server_->CreateObject(
      hami::kube::kPods,
      {{"metadata", {{"name", "two"}}},
       {"spec",
        {{"containers", {{{"name", "a"}, {"image", "x"}}, {{"name", "b"}, {"image", "x"}}}}}}});
  ASSERT_TRUE(pod.ok());
  const std::string uid = (*pod)["metadata"]["uid"];
  WriteLog("two", uid, "b", 0, "2026-12-07T09:00:00.5Z stdout F before the restart\n");
  WriteLog("two", uid, "b", 1,
           "2026-12-07T10:00:00.123456789Z stdout F line 1\n"
           "2026-12-07T10:00:01Z stderr P line\n"
           "2026-12-07T10:00:01.1Z stderr F  2\n"
           "2026-12-07T10:00:02.25Z stdout F line 3\n");
  EXPECT_EQ(KubectlOk({"logs", "two", "-c", "b"}), "line 1\nline 2\nline 3\n");
  EXPECT_EQ(KubectlOk({"logs", "two", "-c", "b", "--tail", "1"}), "line 3\n");
  EXPECT_EQ(KubectlOk({"logs", "two", "-c", "b", "--timestamps"}),
            "2026-12-07T10:00:00.123456789Z line 1\n"
            "2026-12-07T10:00:01Z line 2\n"
            "2026-12-07T10:00:02.25Z line 3\n");
  EXPECT_EQ(KubectlOk({"logs", "two", "-c", "b", "--previous"}), "before the restart\n");
  EXPECT_EQ(KubectlOk({"logs", "two", "-c", "b", "--previous", "--timestamps"}),
            "2026-12-07T09:00:00.5Z before the restart\n");
  EXPECT_EQ(KubectlOk({"logs", "two", "-c", "b", "--since", "87600h"}), "line 1\nline 2\nline 3\n");
  EXPECT_EQ(KubectlOk({"logs", "two", "-c", "b", "--since-time", "2026-12-07T10:00:01Z"}),
            "line 2\nline 3\n");
  // kubectl picks the first container itself (the API's refusal to guess is tested over HTTP).
  Outcome o = Kubectl({"logs", "two"});
  EXPECT_NE(o.status, 0);
  EXPECT_TRUE(Has(o.out, "container \"a\" in pod \"two\" is waiting to start: no log")) << o.out;
  WriteLog("two", uid, "a", 0, "2026-12-07T10:00:00Z stdout F only run\n");
  o = Kubectl({"logs", "two", "-c", "a", "--previous"});
  EXPECT_NE(o.status, 0);
  EXPECT_TRUE(Has(o.out, "previous terminated container \"a\" in pod \"two\" not found")) << o.out;
}

TEST_F(KubectlTest, LogsOfARecreatedPodLeaveOutItsPredecessor) {
  const json pod = {{"metadata", {{"name", "p"}}},
                    {"spec", {{"containers", {{{"name", "main"}, {"image", "x"}}}}}}};
  auto first = server_->CreateObject(hami::kube::kPods, pod);
  ASSERT_TRUE(first.ok());
  WriteLog("p", (*first)["metadata"]["uid"], "main", 0,
           "2026-12-07T10:00:00Z stdout F from the first pod\n");
  EXPECT_EQ(KubectlOk({"logs", "p"}), "from the first pod\n");
  ASSERT_TRUE(server_->DeleteObject(hami::kube::kPods, "default", "p").ok());
  auto second = server_->CreateObject(hami::kube::kPods, pod);
  ASSERT_TRUE(second.ok());
  Outcome o = Kubectl({"logs", "p"});
  EXPECT_NE(o.status, 0);
  EXPECT_TRUE(Has(o.out, "container \"main\" in pod \"p\" is waiting to start: no log")) << o.out;
  WriteLog("p", (*second)["metadata"]["uid"], "main", 0,
           "2026-12-07T11:00:00Z stdout F from the second pod\n");
  EXPECT_EQ(KubectlOk({"logs", "p"}), "from the second pod\n");
}

TEST_F(KubectlTest, AuditNamesKubectlAndTheProjectsClientByUserAgent) {
  KubectlOk({"get", "pods", "-A"});
  KubectlOk({"-n", "kube-system", "get", "deploy"});
  json audit = json::parse(Get("/sim/audit?user_agent=kubectl").text);
  json expected_list = {
      {"user_agent", "kubectl"}, {"verb", "list"},  {"group", ""}, {"resource", "pods"},
      {"subresource", ""},       {"namespace", ""}, {"name", ""}};
  json expected_deploy = expected_list;
  expected_deploy["group"] = "apps";
  expected_deploy["resource"] = "deployments";
  expected_deploy["namespace"] = "kube-system";
  EXPECT_EQ(audit["requests"], json::array({expected_list, expected_deploy}));

  hami::kube::Config config;
  config.server = server_->url();
  config.source = "test";
  hami::kube::ClientOptions options;
  options.user_agent = "hami-monitor";
  options.qps = 0;
  auto client = hami::kube::Client::Create(config, options);
  ASSERT_TRUE(client.ok()) << client.error().message();
  ASSERT_TRUE((*client)->List(hami::kube::kPods, "", {}).ok());
  json mine = json::parse(Get("/sim/audit?user_agent=hami-monitor").text);
  ASSERT_EQ(mine["requests"].size(), 1u);
  EXPECT_EQ(mine["requests"][0]["verb"], "list");
  EXPECT_EQ(mine["requests"][0]["resource"], "pods");
}

TEST_F(KubectlTest, GetEventsSortsByLastTimestamp) {
  // --sort-by asks for the Table with includeObject=Object and sorts its rows by the field.
  const std::pair<const char*, const char*> events[] = {{"Second", "2026-12-07T10:00:02Z"},
                                                        {"Third", "2026-12-07T10:00:03Z"},
                                                        {"First", "2026-12-07T10:00:01Z"}};
  int n = 0;
  for (const auto& [reason, time] : events) {
    json e = {{"metadata", {{"name", "e" + std::to_string(n++)}, {"namespace", "default"}}},
              {"involvedObject", {{"kind", "Pod"}, {"name", "p"}, {"namespace", "default"}}},
              {"reason", reason},
              {"message", std::string("event ") + reason},
              {"type", "Normal"},
              {"source", {{"component", "kubelet"}}},
              {"firstTimestamp", time},
              {"lastTimestamp", time},
              {"count", 1}};
    ASSERT_TRUE(server_->CreateObject(hami::kube::kEvents, e).ok());
  }
  std::string out = KubectlOk({"get", "events", "--sort-by=.lastTimestamp"});
  const size_t first = out.find("First"), second = out.find("Second"), third = out.find("Third");
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_NE(second, std::string::npos) << out;
  ASSERT_NE(third, std::string::npos) << out;
  EXPECT_LT(first, second) << out;
  EXPECT_LT(second, third) << out;

  // An event as the simulated kubelet records one carries the timestamps kubectl sorts by.
  hami::kube::Config config;
  config.server = server_->url();
  config.source = "test";
  auto client = hami::kube::Client::Create(config, {});
  ASSERT_TRUE(client.ok()) << client.error().message();
  {
    hami::kube::EventRecorderOptions eo;
    eo.component = "kubelet";
    eo.instance = "node-1";
    hami::kube::EventRecorder recorder(**client, eo);
    recorder.Record({"v1", "Pod", "default", "p", "uid-1", "", ""}, hami::kube::EventType::kNormal,
                    "Recorded", "by the recorder");
    ASSERT_TRUE(recorder.Flush(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  }
  out = KubectlOk({"get", "events", "--sort-by=.lastTimestamp"});
  EXPECT_GT(out.find("Recorded"), out.find("Third")) << out;
  out = KubectlOk({"get", "events", "--sort-by=.firstTimestamp", "-o", "name"});
  EXPECT_NE(out.find("event/e2"), std::string::npos) << out;
}

}  // namespace
}  // namespace hami::sim::kube
