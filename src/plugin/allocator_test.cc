// The allocator against the simulated API server over real HTTP, with real files in a temporary
// hook path and lock-directory parent.
#include "plugin/allocator.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/temp_dir.h"
#include "kube/annotations.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"

namespace hami::plugin {
namespace {

using nlohmann::json;

constexpr char kNode[] = "node1";
constexpr char kGpu[] = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448";
constexpr char kUid[] = "5b1b4a3c-0000-4000-8000-000000000001";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class AllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the lock directory must be root-owned: run as root";
    ASSERT_TRUE(hook_.ok() && lock_parent_.ok());
    auto server = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(server.ok()) << server.error().message();
    api_ = std::move(server).value();
    kube::Config c;
    c.server = api_->url();
    c.source = "test";
    kube::ClientOptions o;
    o.qps = 0;
    o.max_retries = 1;
    o.retry_base = std::chrono::milliseconds(1);
    o.retry_cap = std::chrono::milliseconds(2);
    auto client = kube::Client::Create(c, o);
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();

    auto lock = kube::EncodeNodeLock({std::chrono::system_clock::now(), "default", "gpu-pod"});
    ASSERT_TRUE(lock.ok());
    json node = {{"metadata", {{"name", kNode}, {"annotations", {{"hami.io/mutex.lock", *lock}}}}}};
    ASSERT_TRUE(api_->CreateObject(kube::kNodes, node).ok());
    config_.node_name = kNode;
    options_.hook_path = hook_.path();
    // The hook files the device plugin installs at its start.
    ASSERT_TRUE(std::filesystem::create_directories(hook_.path() + "/vgpu"));
    ASSERT_TRUE(std::ofstream(hook_.path() + "/vgpu/libvgpu.so") << "ELF");
    ASSERT_TRUE(std::ofstream(hook_.path() + "/vgpu/ld.so.preload")
                << "/usr/local/vgpu/libvgpu.so\n");
    options_.lock_dir.parent = lock_parent_.path();
    options_.log = [this](std::string_view line) { log_ += std::string(line) + "\n"; };
  }

  void TearDown() override {
    client_.reset();
    if (api_) api_->Stop();
  }

  void AddPod(std::string to_allocate = std::string(kGpu) + ",NVIDIA,3000,30:;") {
    json pod = {
        {"metadata",
         {{"name", "gpu-pod"},
          {"namespace", "default"},
          {"annotations",
           {{"hami.io/bind-phase", "allocating"},
            {"hami.io/bind-time", "1716199325"},
            {"hami.io/vgpu-node", kNode},
            {"hami.io/vgpu-devices-to-allocate", to_allocate},
            {"hami.io/vgpu-devices-allocated", to_allocate}}}}},
        {"spec", {{"nodeName", kNode}, {"containers", {{{"name", "main"}, {"image", "cuda"}}}}}}};
    auto created = api_->CreateObject(kube::kPods, pod);
    ASSERT_TRUE(created.ok()) << created.error().message();
    uid_ = kube::MetadataString(*created, "uid");
  }

  std::unique_ptr<Allocator> Make() {
    return std::make_unique<Allocator>(*client_, config_, std::vector<NodeGpu>{{kGpu, 0, true}},
                                       options_);
  }

  std::vector<ContainerRequest> Request() const { return {{{std::string(kGpu) + "-1"}}}; }

  std::string PodAnnotation(std::string_view key) {
    auto pod = api_->GetObject(kube::kPods, "default", "gpu-pod");
    if (!pod.ok()) return "(no pod)";
    const json& ann = (*pod)["metadata"]["annotations"];
    auto it = ann.find(std::string(key));
    return it == ann.end() ? "(absent)" : it->get<std::string>();
  }

  bool NodeLocked() {
    auto node = api_->GetObject(kube::kNodes, "", kNode);
    return node.ok() && (*node)["metadata"].contains("annotations") &&
           (*node)["metadata"]["annotations"].contains("hami.io/mutex.lock");
  }

  std::string ContainerDir() const { return hook_.path() + "/vgpu/containers/" + uid_ + "_main"; }
  std::string LimitsPath() const { return ContainerDir() + ".limits"; }

  TempDir hook_{"plugin-hook"};
  TempDir lock_parent_{"plugin-lock"};
  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  PluginConfig config_;
  AllocatorOptions options_;
  std::string uid_;
  std::string log_;
};

TEST_F(AllocatorTest, HappyPathPublishesTheFileMarksSuccessAndReleasesTheLock) {
  AddPod();
  auto allocator = Make();
  auto r = allocator->Allocate(Request());
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].envs.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "3000m");
  EXPECT_EQ((*r)[0].mounts[2].host_path, lock_parent_.path() + "/vgpulock");
  EXPECT_EQ(ReadAll(LimitsPath()),
            "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n"
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache\n"
            "CUDA_DEVICE_SM_LIMIT=30\n"
            "HAMI_LIMITS_FORMAT=1\n");
  struct stat st {};
  ASSERT_EQ(::stat(LimitsPath().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  ASSERT_EQ(::stat(ContainerDir().c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0777u);
  // The pod record names the pod the directory (named by UID) belongs to.
  EXPECT_EQ(ReadAll(ContainerDir() + "/pod.json"),
            "{\"container\":\"main\",\"name\":\"gpu-pod\",\"namespace\":\"default\",\"uid\":\"" +
                uid_ + "\"}\n");
  ASSERT_EQ(::stat((ContainerDir() + "/pod.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  ASSERT_EQ(::lstat((lock_parent_.path() + "/vgpulock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "success");
  EXPECT_EQ(PodAnnotation("hami.io/vgpu-devices-to-allocate"), ";");
  EXPECT_FALSE(NodeLocked());
  EXPECT_EQ(allocator->stats().allocations, 1u);
}

TEST_F(AllocatorTest, RepeatedAllocateIsIdempotent) {
  AddPod();
  auto allocator = Make();
  auto first = allocator->Allocate(Request());
  ASSERT_TRUE(first.ok()) << first.error().message();
  const std::string file = ReadAll(LimitsPath());
  auto again = allocator->Allocate(Request());
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(ReadAll(LimitsPath()), file);
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "success");
  EXPECT_EQ(allocator->stats().replays, 1u);
  // A new plugin (nothing remembered) answers the repeat the same way.
  auto restarted = Make()->Allocate(Request());
  ASSERT_TRUE(restarted.ok()) << restarted.error().message();
  EXPECT_EQ(*restarted, *first);
}

// The kubelet hands an ended container's replicas to the next pod: that Allocate is the new
// pod's, with its own limits, never a replay of the old pod's answer.
TEST_F(AllocatorTest, ReplicasOfAnEndedPodGoToTheNextPodNotToAReplay) {
  AddPod();
  auto allocator = Make();
  auto first = allocator->Allocate(Request());
  ASSERT_TRUE(first.ok()) << first.error().message();
  // The first pod ends (a Job's pod stays listed as Succeeded).
  auto ended = client_->Patch(kube::kPods, "default", "gpu-pod", kube::PatchType::kMerge,
                              json{{"status", {{"phase", "Succeeded"}}}}, "status");
  ASSERT_TRUE(ended.ok()) << ended.error().message();
  const std::string devices = std::string(kGpu) + ",NVIDIA,1000,10:;";
  json next = {
      {"metadata",
       {{"name", "next-pod"},
        {"namespace", "default"},
        {"annotations",
         {{"hami.io/bind-phase", "allocating"},
          {"hami.io/bind-time", "1716199400"},
          {"hami.io/vgpu-node", kNode},
          {"hami.io/vgpu-devices-to-allocate", devices},
          {"hami.io/vgpu-devices-allocated", devices}}}}},
      {"spec", {{"nodeName", kNode}, {"containers", {{{"name", "main"}, {"image", "cuda"}}}}}}};
  ASSERT_TRUE(api_->CreateObject(kube::kPods, next).ok());
  auto lock = kube::EncodeNodeLock({std::chrono::system_clock::now(), "default", "next-pod"});
  ASSERT_TRUE(lock.ok());
  ASSERT_TRUE(client_
                  ->Patch(kube::kNodes, "", kNode, kube::PatchType::kMerge,
                          json{{"metadata", {{"annotations", {{"hami.io/mutex.lock", *lock}}}}}})
                  .ok());

  auto second = allocator->Allocate(Request());  // the same replica
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_EQ((*second)[0].envs.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "1000m") << "the new pod's limit";
  EXPECT_EQ(allocator->stats().replays, 0u);
  auto pod = api_->GetObject(kube::kPods, "default", "next-pod");
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ((*pod)["metadata"]["annotations"]["hami.io/bind-phase"], "success");
  EXPECT_EQ((*pod)["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"], ";");
  EXPECT_FALSE(NodeLocked());
}

TEST_F(AllocatorTest, LimitsFileFailureFailsAndLeavesNoPartialFile) {
  AddPod();
  options_.publish.inject = [](limits::PublishStep step) {
    return step == limits::PublishStep::kWrite ? ENOSPC : 0;
  };
  auto r = Make()->Allocate(Request());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("No space left on device"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find(LimitsPath()), std::string::npos) << r.error().message();
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(hook_.path() + "/vgpu/containers")) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{uid_ + "_main"});  // the directory, no file
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "failed");
  EXPECT_FALSE(NodeLocked());
}

// containerd makes a missing bind source an empty directory: a container would start with a
// directory at /etc/ld.so.preload, without libvgpu. The answer is refused instead.
TEST_F(AllocatorTest, AMissingOrReplacedHookFileFailsTheAllocateNamingIt) {
  AddPod();
  const std::string preload = hook_.path() + "/vgpu/ld.so.preload";
  ASSERT_EQ(unlink(preload.c_str()), 0);
  auto r = Make()->Allocate(Request());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find(preload + " (bound at /etc/ld.so.preload in container main"),
            std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("is missing: the container would run without its limits"),
            std::string::npos)
      << r.error().message();
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "failed");
}

TEST_F(AllocatorTest, AHookFileThatIsADirectoryFailsTheAllocate) {
  AddPod();
  const std::string preload = hook_.path() + "/vgpu/ld.so.preload";
  ASSERT_EQ(unlink(preload.c_str()), 0);
  ASSERT_EQ(mkdir(preload.c_str(), 0755), 0);  // what containerd leaves behind
  auto r = Make()->Allocate(Request());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find(preload + " (bound at /etc/ld.so.preload"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("is not a regular file"), std::string::npos)
      << r.error().message();
}

TEST_F(AllocatorTest, UnwritableContainersDirectoryFails) {
  AddPod();
  std::filesystem::create_directories(hook_.path() + "/vgpu");
  std::ofstream(hook_.path() + "/vgpu/containers") << "not a directory";
  auto r = Make()->Allocate(Request());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find(hook_.path() + "/vgpu/containers"), std::string::npos)
      << r.error().message();
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "failed");
}

TEST_F(AllocatorTest, LockDirectoryThatIsASymlinkFails) {
  AddPod();
  ASSERT_EQ(::symlink("/tmp", (lock_parent_.path() + "/vgpulock").c_str()), 0);
  auto r = Make()->Allocate(Request());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("preparing " + lock_parent_.path() + "/vgpulock"),
            std::string::npos)
      << r.error().message();
  EXPECT_FALSE(std::filesystem::exists(LimitsPath()));
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "failed");
  EXPECT_FALSE(NodeLocked());
}

TEST_F(AllocatorTest, LockDirectoryOfAnotherOwnerFails) {
  AddPod();
  const std::string dir = lock_parent_.path() + "/vgpulock";
  ASSERT_EQ(::mkdir(dir.c_str(), 01777), 0);
  ASSERT_EQ(::chown(dir.c_str(), 1234, 1234), 0);
  auto r = Make()->Allocate(Request());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find(dir), std::string::npos) << r.error().message();
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "failed");
}

TEST_F(AllocatorTest, ApiServerDownThenBackRetrySucceeds) {
  AddPod();
  auto allocator = Make();
  sim::kube::Faults faults;
  faults.rate_500 = 1;
  api_->SetFaults(faults);
  auto down = allocator->Allocate(Request());
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.error().code(), ErrorCode::kUnavailable) << down.error().message();
  EXPECT_NE(down.error().message().find("reading node node1"), std::string::npos);
  api_->SetFaults({});
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "allocating");  // nothing was changed
  auto back = allocator->Allocate(Request());
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "success");
  EXPECT_FALSE(NodeLocked());
}

TEST_F(AllocatorTest, BadRequestMarksFailedAndReleasesTheLock) {
  AddPod();
  auto r = Make()->Allocate({{{std::string(kGpu) + "-1", std::string(kGpu) + "-2"}}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("device number not matched"), std::string::npos);
  EXPECT_EQ(PodAnnotation("hami.io/bind-phase"), "failed");
  EXPECT_FALSE(NodeLocked());
  EXPECT_NE(log_.find("event=allocation_failed"), std::string::npos) << log_;
}

TEST_F(AllocatorTest, NoPendingPodChangesNothing) {
  auto r = Make()->Allocate(Request());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "no binding pod found on node node1");
  EXPECT_TRUE(NodeLocked());
}

TEST_F(AllocatorTest, PreferAnswersReplicasOfTheSchedulersGpu) {
  AddPod();
  PreferredRequest req;
  req.available_device_ids = {"GPU-other-0", std::string(kGpu) + "-4", std::string(kGpu) + "-5"};
  req.allocation_size = 1;
  auto r = Make()->Prefer({req});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0], std::vector<std::string>{std::string(kGpu) + "-4"});
}

}  // namespace
}  // namespace hami::plugin
