// The node's half of a resize against the simulated API server, a real region and a real limits
// file in a temporary hook directory.
#include "plugin/resize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/temp_dir.h"
#include "kube/annotations.h"
#include "kube/resize.h"
#include "kube/resource.h"
#include "limits/vocabulary.h"
#include "node/paths.h"
#include "region/region.h"
#include "sim/kube/api_server.h"

namespace hami::plugin {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;
constexpr char kGpu[] = "GPU-node1-0";

class ResizeApplierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(hook_.ok());
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
    // The pod, running on node1 (the API server gives it its uid).
    json pod = {
        {"metadata", {{"name", "p"}, {"namespace", "default"}}},
        {"spec", {{"nodeName", "node1"}, {"containers", {{{"name", "main"}, {"image", "x"}}}}}},
        {"status", {{"phase", "Running"}}}};
    auto created = api_->CreateObject(kube::kPods, pod);
    ASSERT_TRUE(created.ok()) << created.error().message();
    uid_ = (*created)["metadata"]["uid"].get<std::string>();
    const node::ContainerRef ref{uid_, "main"};
    limits_path_ = *node::ContainerLimitsPath(hook_.path(), ref);
    region_path_ = *node::ContainerRegionPath(hook_.path(), ref);
    ASSERT_EQ(mkdir((hook_.path() + "/vgpu").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((hook_.path() + "/vgpu/containers").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(node::ContainerDir(hook_.path(), ref)->c_str(), 0777), 0);
    // What Allocate left: a 4000 MiB, 30 % share.
    ASSERT_TRUE(limits::PublishLimitsFile(limits_path_, Allocated(4000, 30)).ok());
    region::PolicySpec spec;
    spec.device_count = 1;
    spec.memory_limit[0] = 4000 * kMiB;
    spec.sm_limit[0] = 30;
    spec.uuid[0] = kGpu;
    auto reg = region::Region::Open(region_path_, &spec, region::Create::kIfMissing, nullptr);
    ASSERT_TRUE(reg.ok()) << reg.error().message();
    region_ = std::move(reg).value();
    ASSERT_TRUE(region_->Register().ok());
    // The container's view of its limits file: the same inode under another name.
    mounted_ = hook_.File("mounted");
    ASSERT_EQ(link(limits_path_.c_str(), mounted_.c_str()), 0);
    ResizeApplierOptions ao;
    ao.node_name = "node1";
    ao.hook_path = hook_.path();
    applier_ = std::make_unique<ResizeApplier>(*client_, ao);
  }

  void TearDown() override {
    applier_.reset();
    client_.reset();
    if (api_) api_->Stop();
  }

  static std::vector<limits::Entry> Allocated(int32_t mem, int32_t cores) {
    return {limits::SetDeviceMemoryLimit(0, uint64_t(mem) * kMiB),
            limits::SetSmLimit(uint32_t(cores)),
            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/x"}};
  }
  static std::string Devices(int32_t mem, int32_t cores) {
    return *kube::EncodePodDevices({{{kGpu, "NVIDIA", mem, cores}}},
                                   kube::kDevicesAllocatedAnnotation);
  }

  // The pod as the scheduler left it after accepting `mem`/`cores` over 4000/30.
  json AcceptedPod(int32_t mem, int32_t cores) {
    kube::ResizeStatus st{"main:gpumem=" + std::to_string(mem), kube::ResizePhase::kAccepted, "",
                          Devices(4000, 30)};
    json patch = {
        {"metadata",
         {{"annotations",
           {{std::string(kube::kVgpuNodeAnnotation), "node1"},
            {std::string(kube::kDevicesAllocatedAnnotation), Devices(mem, cores)},
            {std::string(kube::kResizeStatusAnnotation), kube::EncodeResizeStatus(st)}}}}}};
    auto r = client_->Patch(kube::kPods, "default", "p", kube::PatchType::kMerge, patch);
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : json();
  }

  json Pod() { return *api_->GetObject(kube::kPods, "default", "p"); }
  kube::ResizeStatus Status() {
    return *kube::DecodeResizeStatus(
        Pod()["metadata"]["annotations"][std::string(kube::kResizeStatusAnnotation)]
            .get<std::string>());
  }
  std::string FileText(const std::string& path) { return *ReadFileToString(path); }

  TempDir hook_{"plugin-resize"};
  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<region::Region> region_;
  std::unique_ptr<ResizeApplier> applier_;
  std::string uid_, limits_path_, region_path_, mounted_;
};

TEST_F(ResizeApplierTest, AnAcceptedShareReachesTheRegionAndTheMountedLimitsFile) {
  ASSERT_TRUE(applier_->Reconcile(AcceptedPod(8000, 50)).ok());
  EXPECT_EQ(region_->MemoryLimit(0), 8000 * kMiB);
  EXPECT_EQ(region_->SmLimit(0), 50u);
  EXPECT_EQ(FileText(mounted_),
            "CUDA_DEVICE_MEMORY_LIMIT_0=8000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/x\n"
            "CUDA_DEVICE_SM_LIMIT=50\nHAMI_LIMITS_FORMAT=1\n")
      << "the container's bind mount holds the inode: it must change in place";
  struct stat st {};
  ASSERT_EQ(stat(limits_path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  kube::ResizeStatus s = Status();
  EXPECT_EQ(s.phase, kube::ResizePhase::kApplied);
  EXPECT_TRUE(s.previous.empty());
  EXPECT_EQ(Pod()["metadata"]["annotations"][std::string(kube::kDevicesAllocatedAnnotation)],
            Devices(8000, 50));
}

TEST_F(ResizeApplierTest, LoweringBelowWhatTheContainerHoldsIsRefusedAndTheOldShareRestored) {
  ASSERT_EQ(region_->Reserve(0, 3000 * kMiB, region::UsageKind::kData), region::Admission::kOk);
  const std::string before = FileText(mounted_);
  ASSERT_TRUE(applier_->Reconcile(AcceptedPod(2000, 30)).ok());
  kube::ResizeStatus s = Status();
  EXPECT_EQ(s.phase, kube::ResizePhase::kRefused);
  EXPECT_THAT(s.reason, HasSubstr("container main holds 3000 MiB on GPU-node1-0, more than the "
                                  "new 2000 MiB"));
  EXPECT_EQ(Pod()["metadata"]["annotations"][std::string(kube::kDevicesAllocatedAnnotation)],
            Devices(4000, 30));
  EXPECT_EQ(region_->MemoryLimit(0), 4000 * kMiB);
  EXPECT_EQ(FileText(mounted_), before);
}

TEST_F(ResizeApplierTest, AContainerWithoutALimitsFileIsRefused) {
  ASSERT_EQ(unlink(limits_path_.c_str()), 0);
  ASSERT_TRUE(applier_->Reconcile(AcceptedPod(8000, 50)).ok());
  kube::ResizeStatus s = Status();
  EXPECT_EQ(s.phase, kube::ResizePhase::kRefused);
  EXPECT_THAT(s.reason, HasSubstr("is absent"));
  EXPECT_EQ(region_->MemoryLimit(0), 4000 * kMiB);
}

// The record fails (the API server answers nothing but errors): the pod stays accepted, and the
// next pass — as after a restart of the plugin — finishes it without changing anything twice.
TEST_F(ResizeApplierTest, AFailedRecordIsFinishedByTheNextPass) {
  json pod = AcceptedPod(8000, 50);
  sim::kube::Faults down;
  down.rate_500 = 1;
  api_->SetFaults(down);
  EXPECT_FALSE(applier_->Reconcile(pod).ok());
  api_->SetFaults({});
  EXPECT_EQ(Status().phase, kube::ResizePhase::kAccepted);
  ResizeApplier restarted(*client_, {"node1", hook_.path()});
  ASSERT_TRUE(restarted.ReconcileAll().ok());
  EXPECT_EQ(Status().phase, kube::ResizePhase::kApplied);
  EXPECT_EQ(region_->MemoryLimit(0), 8000 * kMiB);
  EXPECT_THAT(FileText(mounted_), HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=8000m\n"));
}

TEST(ResizedLimits, SetsTheDevicesAndTheSmLimitAndKeepsTheRest) {
  std::vector<limits::Entry> current = {{"CUDA_DEVICE_MEMORY_LIMIT_0", "1000m"},
                                        {"CUDA_TASK_PRIORITY", "0"},
                                        {"HAMI_LIMITS_FORMAT", "1"}};
  auto out = ResizedLimits(current, {{"GPU-a", "NVIDIA", 3000, 40}, {"GPU-b", "NVIDIA", 3000, 40}});
  EXPECT_THAT(out, ::testing::ElementsAre(::testing::Pair("CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"),
                                          ::testing::Pair("CUDA_DEVICE_MEMORY_LIMIT_1", "3000m"),
                                          ::testing::Pair("CUDA_DEVICE_SM_LIMIT", "40"),
                                          ::testing::Pair("CUDA_TASK_PRIORITY", "0")));
}

// On a node with deviceMemoryScaling above 1, a resize writes the shares as Allocate does.
TEST(ResizedLimits, WithScalingTheDevicePartsAndTheHostBudget) {
  auto out = ResizedLimits({{"CUDA_OVERSUBSCRIBE", "true"}},
                           {{"GPU-a", "NVIDIA", 3000, 40}, {"GPU-b", "NVIDIA", 1000, 40}}, 2);
  EXPECT_THAT(out,
              ::testing::ElementsAre(::testing::Pair("CUDA_DEVICE_MEMORY_LIMIT_0", "1500m"),
                                     ::testing::Pair("CUDA_DEVICE_MEMORY_LIMIT_1", "500m"),
                                     ::testing::Pair("CUDA_DEVICE_SM_LIMIT", "40"),
                                     ::testing::Pair("CUDA_OVERSUBSCRIBE", "true"),
                                     ::testing::Pair("CUDA_OVERSUBSCRIBE_HOST_LIMIT", "2000m")));
}

}  // namespace
}  // namespace hami::plugin
