// The kubelet driver against the simulated API server: a pod left as hami-scheduler leaves it
// after its bind is allocated by the node's real Allocator (bind-phase success, chunk taken,
// lock released, limits file published); a chunk no kubelet would ask for and a node without
// an inventory are failures that name what was wrong.
#include "plugin/kubelet_driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/node_lock.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "support/subprocess.h"

namespace hami::plugin {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class KubeletDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(server.ok()) << server.error().message();
    api_ = std::move(server).value();
    kube::Config c;
    c.server = api_->url();
    c.source = "test";
    kube::ClientOptions o;
    o.qps = 0;
    auto client = kube::Client::Create(c, o);
    ASSERT_TRUE(client.ok()) << client.error().message();
    client_ = std::move(client).value();
  }

  void TearDown() override {
    driver_.reset();
    client_.reset();
    if (api_) api_->Stop();
  }

  // A node with `gpus` GPUs "GPU-<name>-<i>" in its inventory, locked by default/<lock_pod>.
  void AddNode(const std::string& name, int gpus, const std::string& lock_pod) {
    std::vector<kube::NodeDevice> devices;
    for (int i = 0; i < gpus; ++i) {
      devices.push_back({"GPU-" + name + "-" + std::to_string(i), i, 10, 16384, 100, "NVIDIA-A100",
                         0, "hami-core", true});
    }
    json annotations = json::object();
    if (gpus > 0) {
      annotations[std::string(kube::kNodeRegisterAnnotation)] = kube::EncodeNodeInventory(devices);
    }
    auto lock = kube::EncodeNodeLock({std::chrono::system_clock::now(), "default", lock_pod});
    ASSERT_TRUE(lock.ok());
    annotations[std::string(kube::kNodeLockAnnotation)] = *lock;
    json node = {{"metadata", {{"name", name}, {"annotations", annotations}}}};
    ASSERT_TRUE(api_->CreateObject(kube::kNodes, node).ok());
  }

  // A pod as hami-scheduler leaves it after its bind: bound to `node`, allocating, both device
  // annotations `devices`. `containers`: name -> nvidia.com/gpu asked (0: none).
  std::string AddBoundPod(const std::string& name, const std::string& node,
                          const std::string& devices,
                          const std::vector<std::pair<std::string, int>>& containers) {
    json specs = json::array();
    for (const auto& [c, gpus] : containers) {
      json container = {{"name", c}, {"image", "cuda"}};
      if (gpus > 0) {
        container["resources"] = {{"limits", {{"nvidia.com/gpu", std::to_string(gpus)}}}};
      }
      specs.push_back(container);
    }
    json pod = {{"metadata",
                 {{"name", name},
                  {"namespace", "default"},
                  {"annotations",
                   {{"hami.io/bind-phase", "allocating"},
                    {"hami.io/bind-time", "1716199325"},
                    {"hami.io/vgpu-node", node},
                    {"hami.io/vgpu-devices-to-allocate", devices},
                    {"hami.io/vgpu-devices-allocated", devices}}}}},
                {"spec", {{"nodeName", node}, {"containers", specs}}}};
    auto created = api_->CreateObject(kube::kPods, pod);
    EXPECT_TRUE(created.ok()) << created.error().message();
    return created.ok() ? std::string(kube::MetadataString(*created, "uid")) : "";
  }

  // Starts the driver and waits until it has settled `pods` pods. (Polled: the driver's counts
  // move with each admission; nothing announces one.)
  bool RunUntilSettled(uint64_t pods) {
    driver_ = std::make_unique<KubeletDriver>(*client_, 2);
    driver_->Start();
    return testing::PollUntil([&] { return driver_->allocated() + driver_->failures() >= pods; },
                              20000, 2000);
  }

  std::string PodAnnotation(const std::string& pod, std::string_view key) {
    auto p = api_->GetObject(kube::kPods, "default", pod);
    if (!p.ok()) return "(no pod)";
    return (*p)["metadata"]["annotations"].value(std::string(key), "(absent)");
  }

  bool NodeLocked(const std::string& node) {
    auto n = api_->GetObject(kube::kNodes, "", node);
    return n.ok() && (*n)["metadata"]["annotations"].contains("hami.io/mutex.lock");
  }

  std::string Messages() const {
    std::string all;
    for (const std::string& m : driver_->failure_messages()) all += m + "\n";
    return all;
  }

  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<KubeletDriver> driver_;
};

TEST_F(KubeletDriverTest, AllocatesABoundPodThroughTheNodesRealAllocator) {
  AddNode("n1", 2, "p");
  const std::string uid = AddBoundPod("p", "n1", "GPU-n1-1,NVIDIA,3000,30:;", {{"main", 1}});
  ASSERT_TRUE(RunUntilSettled(1));
  EXPECT_EQ(driver_->allocated(), 1u) << Messages();
  EXPECT_EQ(driver_->failures(), 0u) << Messages();
  EXPECT_EQ(PodAnnotation("p", "hami.io/bind-phase"), "success");
  EXPECT_EQ(PodAnnotation("p", "hami.io/vgpu-devices-to-allocate"), ";");
  EXPECT_EQ(PodAnnotation("p", "hami.io/vgpu-devices-allocated"), "GPU-n1-1,NVIDIA,3000,30:;");
  EXPECT_FALSE(NodeLocked("n1"));
  std::ifstream limits(driver_->HookPath("n1") + "/vgpu/containers/" + uid + "_main.limits");
  ASSERT_TRUE(limits.good()) << "no limits file";
  std::stringstream text;
  text << limits.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n"));
  EXPECT_THAT(text.str(), HasSubstr("CUDA_DEVICE_SM_LIMIT=30\n"));
}

TEST_F(KubeletDriverTest, AChunkForAContainerThatAsksForNoGpuIsAFailureNamingIt) {
  AddNode("n1", 1, "p");
  AddBoundPod("p", "n1", "GPU-n1-0,NVIDIA,1000,0:;GPU-n1-0,NVIDIA,1000,0:;",
              {{"main", 1}, {"sidecar", 0}});
  ASSERT_TRUE(RunUntilSettled(1));
  EXPECT_EQ(driver_->failures(), 1u);
  EXPECT_THAT(Messages(), HasSubstr("pod default/p on node n1: hami.io/vgpu-devices-to-allocate "
                                    "assigns 1 devices to container sidecar (position 1), which "
                                    "asks for no nvidia.com/gpu"));
  // main's chunk was taken; the pod waits for a chunk no kubelet asks for.
  EXPECT_EQ(PodAnnotation("p", "hami.io/vgpu-devices-to-allocate"), ";GPU-n1-0,NVIDIA,1000,0:;");
  EXPECT_EQ(PodAnnotation("p", "hami.io/bind-phase"), "allocating");
  EXPECT_TRUE(NodeLocked("n1"));
}

TEST_F(KubeletDriverTest, ANodeWithoutAnInventoryIsAFailureNamingTheAnnotation) {
  AddNode("bare", 0, "p");
  AddBoundPod("p", "bare", "GPU-bare-0,NVIDIA,1000,0:;", {{"main", 1}});
  ASSERT_TRUE(RunUntilSettled(1));
  EXPECT_EQ(driver_->failures(), 1u);
  EXPECT_THAT(Messages(), HasSubstr("pod default/p on node bare: node bare: no "
                                    "hami.io/node-nvidia-register"));
  EXPECT_EQ(PodAnnotation("p", "hami.io/bind-phase"), "allocating");
}

TEST_F(KubeletDriverTest, PodsBoundOneAfterAnotherShareAGpu) {
  // As the scheduler binds them: the second pod is bound (and the lock names it) once the
  // first has been allocated and its lock released.
  AddNode("n1", 1, "a");
  const std::string a = AddBoundPod("a", "n1", "GPU-n1-0,NVIDIA,1000,10:;", {{"main", 1}});
  ASSERT_TRUE(RunUntilSettled(1));
  ASSERT_FALSE(NodeLocked("n1"));
  auto lock = kube::EncodeNodeLock({std::chrono::system_clock::now(), "default", "b"});
  ASSERT_TRUE(lock.ok());
  ASSERT_TRUE(client_
                  ->Patch(kube::kNodes, "", "n1", kube::PatchType::kMerge,
                          {{"metadata", {{"annotations", {{"hami.io/mutex.lock", *lock}}}}}})
                  .ok());
  const std::string b = AddBoundPod("b", "n1", "GPU-n1-0,NVIDIA,2000,20:;", {{"main", 1}});
  // (Polled: as above.)
  ASSERT_TRUE(testing::PollUntil([&] { return driver_->allocated() + driver_->failures() >= 2; },
                                 20000, 2000));
  EXPECT_EQ(driver_->allocated(), 2u) << Messages();
  EXPECT_EQ(PodAnnotation("b", "hami.io/bind-phase"), "success");
  EXPECT_FALSE(NodeLocked("n1"));
  for (const auto& [uid, mib] : {std::pair{a, "1000m"}, std::pair{b, "2000m"}}) {
    std::ifstream limits(driver_->HookPath("n1") + "/vgpu/containers/" + uid + "_main.limits");
    std::stringstream text;
    text << limits.rdbuf();
    EXPECT_THAT(text.str(), HasSubstr(std::string("CUDA_DEVICE_MEMORY_LIMIT_0=") + mib + "\n"));
  }
}

}  // namespace
}  // namespace hami::plugin
