// The simulated cluster in DRA mode (`hami sim cluster up --mode dra`, one node, two simulated
// GPUs): the real hami-dra-plugin registered with the node's DRA manager, the DeviceClass
// created, and a pod bound to the node whose ResourceClaim the test allocates itself (status
// written through the API, as the scheduler would): the kubelet stand-in waits for the
// allocation (a FailedPrepareDynamicResources event says why), prepares the claim through the
// plugin, gives the container the CDI spec's env and mounts (its limits file at /overrideEnv),
// and on the pod's deletion unprepares it, after which every file the plugin made is gone.
// Then the examples of examples/dra, end to end: two pods with claims from one template share
// a GPU, a pod asking `nvidia.com/gpu: 1` is served through the DeviceClass's extended
// resource, a pod written for the device plugin is rewritten by the webhook into a claim; each
// container and its `env -i` process are held to their share by libvgpu; deleting the pods
// deletes their claims and every file.
//
// Root only (the container runtime's namespaces); kubectl needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/file.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "support/cri_log.h"
#include "support/subprocess.h"

namespace hami {
namespace {

using ::hami::testing::Ran;
using ::hami::testing::RunCommand;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kDriver[] = "hami-core-gpu.project-hami.io";

std::string Bin(const std::string& name) { return std::string(HAMI_BIN_DIR) + "/" + name; }

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Waits until `path` no longer exists, on inotify events of its parent directory.
bool WaitForRemoval(const std::string& path, int timeout_ms) {
  UniqueFd fd(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!fd.valid()) return false;
  const std::string parent = std::filesystem::path(path).parent_path();
  if (inotify_add_watch(fd.get(), parent.c_str(), IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF) < 0) {
    return !Exists(path);
  }
  const int64_t deadline = MonotonicNs() + int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    if (!Exists(path)) return true;
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    if (left_ms <= 0) return false;
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, int(left_ms)) > 0) {
      char buf[4096];
      while (read(fd.get(), buf, sizeof(buf)) > 0) {
      }
    }
  }
}

class DraClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    base_ = new TempDir("hami-dra-cluster");
    dir_ = base_->path() + "/cluster";
    Ran up = RunCommand({Bin("hami"), "sim", "cluster", "up", "--mode", "dra", "--dir", dir_,
                         "--nodes", "1", "--gpus", "h100-80g:2"},
                        {}, 150000);
    up_output_ = up.out;
    up_code_ = up.code;
    if (up.code == 0) {
      auto text = ReadFileToString(dir_ + "/cluster.json", 1 << 20);
      if (text.ok()) info_ = json::parse(*text, nullptr, false);
    }
  }
  static void TearDownTestSuite() {
    if (base_ == nullptr) return;
    if (Exists(dir_))
      RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", dir_}, {}, 120000);
    delete base_;
    base_ = nullptr;
  }

  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the node runs containerd (namespaces, mounts, cgroups), "
                      "and hami-dra-plugin prepares the root-owned /tmp/vgpulock";
    }
    if (access("/usr/bin/kubectl", X_OK) != 0) GTEST_SKIP() << "needs kubectl (/usr/bin/kubectl)";
    ASSERT_EQ(up_code_, 0) << "hami sim cluster up --mode dra failed:\n" << up_output_;
    ASSERT_TRUE(info_.is_object()) << "no cluster.json in " << dir_;
  }

  static Ran Kubectl(std::vector<std::string> args, int timeout_ms = 60000) {
    args.insert(args.begin(), "/usr/bin/kubectl");
    return RunCommand(args, {{"KUBECONFIG", info_["kubeconfig"].get<std::string>()}}, timeout_ms);
  }
  static json Get(const std::vector<std::string>& what) {
    std::vector<std::string> args = {"get"};
    args.insert(args.end(), what.begin(), what.end());
    args.insert(args.end(), {"-o", "json"});
    Ran r = Kubectl(args);
    if (r.code != 0) return json();
    return json::parse(r.out, nullptr, false);
  }
  // What the pod's container printed, from its newest log file (support/cri_log.h).
  static std::string PodLog(const std::string& pod, const std::string& container) {
    return ::hami::testing::ReadContainerLog(dir_ + "/logs/pods", "default", pod, container);
  }

  static TempDir* base_;
  static std::string dir_;
  static std::string up_output_;
  static int up_code_;
  static json info_;
};

TempDir* DraClusterTest::base_ = nullptr;
std::string DraClusterTest::dir_;
std::string DraClusterTest::up_output_;
int DraClusterTest::up_code_ = -1;
json DraClusterTest::info_;

TEST_F(DraClusterTest, TheNodeRunsTheDraPluginAndTheClusterHasTheDeviceClass) {
  EXPECT_EQ(info_["mode"], "dra");
  bool dra_plugin = false, device_plugin = false;
  for (const json& c : info_["components"]) {
    dra_plugin = dra_plugin || c["name"] == "dra-plugin/node-1";
    device_plugin = device_plugin || c["name"] == "device-plugin/node-1";
  }
  EXPECT_TRUE(dra_plugin);
  EXPECT_FALSE(device_plugin) << "a node serves one mode";
  json cls = Get({"deviceclass", kDriver});
  ASSERT_TRUE(cls.is_object());
  EXPECT_EQ(cls["spec"]["extendedResourceName"], "nvidia.com/gpu");
  json slices = Get({"resourceslices"});
  ASSERT_TRUE(slices.is_object());
  ASSERT_FALSE(slices["items"].empty());
  EXPECT_EQ(slices["items"][0]["spec"]["nodeName"], "node-1");
  EXPECT_EQ(slices["items"][0]["spec"]["driver"], kDriver);
}

TEST_F(DraClusterTest, AnAllocatedClaimIsPreparedIntoTheContainerAndUnpreparedOnDeletion) {
  const std::string manifest = base_->path() + "/claim-pod.yaml";
  ASSERT_TRUE(std::ofstream(manifest) << R"(apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: shared-gpu
  namespace: default
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: hami-core-gpu.project-hami.io
        capacity:
          requests:
            memory: 3000Mi
            cores: "30"
---
apiVersion: v1
kind: Pod
metadata:
  name: claimer
  namespace: default
  labels:
    hami.io/webhook: ignore
spec:
  nodeName: node-1
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - name: gpu
    resourceClaimName: shared-gpu
  containers:
  - name: main
    image: hami.local/sim/base:1
    command: ["sh", "-c"]
    args:
    - |
        echo "limit=${CUDA_DEVICE_MEMORY_LIMIT_0:-unset} sm=${CUDA_DEVICE_SM_LIMIT:-unset}"
        echo "visible=${NVIDIA_VISIBLE_DEVICES:-unset}"
        echo "limits file:"; cat /overrideEnv
        echo "end of limits file"
        trap 'exit 0' TERM
        sleep 600 & wait
    resources:
      claims:
      - name: gpu
)");
  Ran applied = Kubectl({"apply", "-f", manifest});
  ASSERT_EQ(applied.code, 0) << applied.out;
  json pod = Get({"pod", "claimer"});
  ASSERT_TRUE(pod.is_object());
  const std::string pod_uid = pod["metadata"]["uid"];
  json claim = Get({"resourceclaim", "shared-gpu"});
  ASSERT_TRUE(claim.is_object());
  const std::string claim_uid = claim["metadata"]["uid"];

  // Not allocated yet: the node waits, and says why. Events announce nothing to a client
  // here but through a watch, so the list is polled, bounded.
  const bool waited = ::hami::testing::PollUntil(
      [&] {
        json events = Get({"events"});
        if (!events.is_object()) return false;
        for (const json& e : events.value("items", json::array())) {
          if (e.value("reason", "") == "FailedPrepareDynamicResources" &&
              e.value("message", "")
                      .find("ResourceClaim default/shared-gpu is not allocated "
                            "yet") != std::string::npos) {
            return true;
          }
        }
        return false;
      },
      60000, 200'000);
  EXPECT_TRUE(waited) << "no FailedPrepareDynamicResources event for the unallocated claim";
  EXPECT_NE(Get({"pod", "claimer"})["status"].value("phase", ""), "Running");

  // The scheduler's part, done by hand: the allocation and the reservation for the pod.
  const json status = {
      {"status",
       {{"allocation",
         {{"devices",
           {{"results",
             json::array({{{"request", "gpu"},
                           {"driver", kDriver},
                           {"pool", "node-1"},
                           {"device", "hami-gpu-0"},
                           {"shareID", "5b7a3d2e-1f4c-4e8a-9b6d-0c2e4f6a8b1d"},
                           {"consumedCapacity", {{"memory", "3000Mi"}, {"cores", "30"}}}}})}}}}},
        {"reservedFor",
         json::array({{{"resource", "pods"}, {"name", "claimer"}, {"uid", pod_uid}}})}}}};
  Ran patched = Kubectl({"patch", "resourceclaim", "shared-gpu", "--subresource=status",
                         "--type=merge", "-p", status.dump()});
  ASSERT_EQ(patched.code, 0) << patched.out;

  Ran running = Kubectl(
      {"wait", "--for=jsonpath={.status.phase}=Running", "--timeout=90s", "pod/claimer"}, 120000);
  ASSERT_EQ(running.code, 0) << running.out;
  const std::string cdi_dir = info_["nodes"][0]["cdi_dir"];
  const std::string hook = info_["nodes"][0]["hook_path"];
  const std::string spec = cdi_dir + "/k8s." + kDriver + "-claim_" + claim_uid + ".json";
  const std::string claim_dir = hook + "/vgpu/containers/" + claim_uid + "_claim";
  const std::string limits = claim_dir + ".limits";
  EXPECT_TRUE(Exists(spec)) << spec;
  EXPECT_TRUE(Exists(claim_dir)) << claim_dir;
  EXPECT_TRUE(Exists(limits)) << limits;

  // The container writes its log as it runs: the file is read until its last line shows.
  std::string log;
  ::hami::testing::PollUntil(
      [&] {
        log = PodLog("claimer", "main");
        return log.find("end of limits file") != std::string::npos;
      },
      30000, 100'000);
  EXPECT_THAT(log, HasSubstr("limit=3000m sm=30")) << log;
  EXPECT_THAT(log, Not(HasSubstr("visible=unset"))) << log;
  EXPECT_THAT(log, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=3000m")) << "the limits file:\n" << log;
  EXPECT_THAT(log, HasSubstr("HAMI_LIMITS_FORMAT=1")) << log;

  Ran deleted = Kubectl({"delete", "pod", "claimer", "--timeout=60s"}, 90000);
  ASSERT_EQ(deleted.code, 0) << deleted.out;
  EXPECT_TRUE(WaitForRemoval(spec, 30000)) << spec;
  EXPECT_TRUE(WaitForRemoval(limits, 30000)) << limits;
  EXPECT_TRUE(WaitForRemoval(claim_dir, 30000)) << claim_dir;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(cdi_dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ADD_FAILURE() << "left in the CDI directory: " << it->path();
  }
  Kubectl({"delete", "resourceclaim", "shared-gpu", "--wait=false"});
}

// The claim a pod's status names for its pod claim `name` (a template's), or its KEP-5004 claim
// when `name` is empty; "" while it names none.
std::string ClaimOf(const json& pod, const std::string& name) {
  const json& st = pod["status"];
  if (name.empty()) {
    if (!st.contains("extendedResourceClaimStatus")) return "";
    return st["extendedResourceClaimStatus"].value("resourceClaimName", "");
  }
  for (const json& c : st.value("resourceClaimStatuses", json::array())) {
    if (c.value("name", "") == name) return c.value("resourceClaimName", "");
  }
  return "";
}

TEST_F(DraClusterTest, TheExamplesShareAGpuHeldByLibvgpuAndLeaveNothingBehind) {
  const std::string examples = std::string(HAMI_EXAMPLES_DIR) + "/dra/";
  const std::vector<std::string> pods = {"dra-share-a", "dra-share-b", "dra-gpu-extended",
                                         "dra-vgpu-webhook"};
  for (const char* f : {"claim-template-3000m-30.yaml", "share-a.yaml", "share-b.yaml",
                        "gpu-extended.yaml", "vgpu-webhook.yaml"}) {
    Ran applied = Kubectl({"apply", "-f", examples + f});
    ASSERT_EQ(applied.code, 0) << f << ": " << applied.out;
  }
  for (const std::string& pod : pods) {
    Ran ready = Kubectl({"wait", "--for=condition=Ready", "--timeout=120s", "pod/" + pod}, 150000);
    ASSERT_EQ(ready.code, 0) << pod << ": " << ready.out
                             << Kubectl({"get", "pods", "-o", "wide"}).out
                             << Kubectl({"get", "events"}).out << PodLog(pod, "cuda");
  }

  // The allocations: the two template claims and the webhook's share one GPU with shares of
  // their own; the extended resource's claim takes a whole GPU, the other one.
  std::map<std::string, json> result_of;
  std::map<std::string, std::string> claim_of;
  for (const std::string& pod : pods) {
    const json p = Get({"pod", pod});
    ASSERT_TRUE(p.is_object()) << pod;
    std::string claim;
    if (pod == "dra-gpu-extended") {
      claim = ClaimOf(p, "");
    } else if (pod == "dra-vgpu-webhook") {
      ASSERT_EQ(p["spec"]["resourceClaims"].size(), 1u) << p["spec"].dump();
      claim = ClaimOf(p, p["spec"]["resourceClaims"][0].value("name", ""));
      EXPECT_FALSE(p["spec"]["containers"][0]["resources"]
                       .value("limits", json::object())
                       .contains("nvidia.com/gpumem"))
          << "the webhook keeps no gpumem limit in DRA mode";
    } else {
      claim = ClaimOf(p, "gpu");
    }
    ASSERT_FALSE(claim.empty()) << pod << " has no claim in its status: " << p["status"].dump();
    claim_of[pod] = claim;
    const json c = Get({"resourceclaim", claim});
    ASSERT_TRUE(c.is_object()) << claim;
    const json& results = c["status"]["allocation"]["devices"]["results"];
    ASSERT_EQ(results.size(), 1u) << claim << ": " << c["status"].dump();
    result_of[pod] = results[0];
    ASSERT_EQ(c["status"]["reservedFor"].size(), 1u);
    EXPECT_EQ(c["status"]["reservedFor"][0]["name"], pod);
  }
  EXPECT_EQ(result_of["dra-share-a"]["device"], result_of["dra-share-b"]["device"]);
  EXPECT_EQ(result_of["dra-share-a"]["device"], result_of["dra-vgpu-webhook"]["device"]);
  EXPECT_NE(result_of["dra-share-a"]["shareID"], result_of["dra-share-b"]["shareID"]);
  EXPECT_NE(result_of["dra-gpu-extended"]["device"], result_of["dra-share-a"]["device"]);
  for (const char* pod : {"dra-share-a", "dra-share-b", "dra-vgpu-webhook"}) {
    EXPECT_EQ(result_of[pod]["consumedCapacity"]["memory"], "3000Mi") << pod;
    EXPECT_EQ(result_of[pod]["consumedCapacity"]["cores"], "30") << pod;
  }

  // Each container and its env -i process are held to the share by libvgpu.
  auto held_log = [&](const std::string& pod) {
    std::string log;
    ::hami::testing::PollUntil(
        [&] {
          log = PodLog(pod, "cuda");
          return log.find("\nholding ") != std::string::npos;
        },
        60000, 100'000);
    return log;
  };
  const std::regex refused("ok: +an allocation past the limit is refused");
  for (const std::string& pod : pods) {
    const std::string log = held_log(pod);
    EXPECT_THAT(log, Not(HasSubstr("FAILED"))) << pod << ":\n" << log;
    const auto n = std::distance(std::sregex_iterator(log.begin(), log.end(), refused),
                                 std::sregex_iterator());
    EXPECT_EQ(n, pod == "dra-gpu-extended" ? 0 : 2)
        << pod << ": every process of the pod is held:\n"
        << log;
  }
  EXPECT_THAT(PodLog("dra-share-a", "cuda"), HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=3000m"));
  // The extended resource's claim: a whole GPU, its memory (81559 MiB) as the limit.
  EXPECT_THAT(PodLog("dra-gpu-extended", "cuda"), HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=81559m"));
  EXPECT_THAT(PodLog("dra-vgpu-webhook", "cuda"), HasSubstr("cuMemGetInfo: total 3000 MiB"));

  // Deleting the pods deletes their claims and every file the plugin made for them.
  const std::string cdi_dir = info_["nodes"][0]["cdi_dir"];
  Ran deleted = Kubectl({"delete", "-f", examples, "--timeout=90s"}, 120000);
  ASSERT_EQ(deleted.code, 0) << deleted.out;
  for (const auto& [pod, claim] : claim_of) {
    EXPECT_TRUE(::hami::testing::PollUntil(
        [&] {
          return Kubectl({"get", "resourceclaim", claim}).code != 0;
        },
        60000, 200'000))
        << pod << "'s claim " << claim << " is still there";
  }
  EXPECT_TRUE(::hami::testing::PollUntil([&] { return std::filesystem::is_empty(cdi_dir); }, 60000,
                                         200'000))
      << "CDI specs left in " << cdi_dir;
  const std::string containers =
      info_["nodes"][0]["hook_path"].get<std::string>() + "/vgpu/containers";
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(containers, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().find("_claim") != std::string::npos) {
      ADD_FAILURE() << "left behind: " << it->path();
    }
  }
}

}  // namespace
}  // namespace hami
