// The driver against the simulated API server, in process: the node's ResourceSlice published,
// rewritten with a higher pool generation when a GPU turns unhealthy or goes, left alone on a
// restart with unchanged GPUs, and other slices of this driver and node removed; and claims
// read by ApiClaimSource, allocated through the claim's status as the scheduler writes it,
// prepared by the driver.
#include "dra/publisher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/temp_dir.h"
#include "dra/claim.h"
#include "dra/driver.h"
#include "dra/slices.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"

namespace hami::dra {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kNode[] = "n1";
constexpr char kSliceName[] = "n1-hami-core-gpu";
constexpr uint64_t kGiB = uint64_t{1} << 30;

inventory::Device Gpu(int index, std::string uuid) {
  inventory::Device d;
  d.index = index;
  d.uuid = std::move(uuid);
  d.name = "NVIDIA H100 80GB HBM3";
  d.memory_bytes = 80 * kGiB;
  d.cc_major = 9;
  return d;
}

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(server.ok()) << server.error().message();
    api_ = std::move(server).value();
    kube::Config config;
    config.server = api_->url();
    config.source = "test";
    kube::ClientOptions co;
    co.qps = 0;
    co.max_retries = 0;
    auto c = kube::Client::Create(config, co);
    ASSERT_TRUE(c.ok()) << c.error().message();
    client_ = std::move(c).value();
    auto node = api_->CreateObject(kube::kNodes, {{"metadata", {{"name", kNode}}}});
    ASSERT_TRUE(node.ok()) << node.error().message();
    node_uid_ = (*node)["metadata"]["uid"];
    inventory_.driver_version = "550.54.15";
    inventory_.devices = {Gpu(0, "GPU-aaaa"), Gpu(1, "GPU-bbbb")};
  }

  void TearDown() override {
    client_.reset();
    if (api_) api_->Stop();
  }

  PublisherOptions Options() {
    PublisherOptions o;
    o.driver = kDriverName;
    o.node_name = kNode;
    o.log = [this](std::string_view line) { log_ += std::string(line) + "\n"; };
    return o;
  }

  json Slice(const std::string& name = kSliceName) {
    auto s = api_->GetObject(kube::kResourceSlices, "", name);
    EXPECT_TRUE(s.ok()) << name << ": " << s.error().message();
    return s.ok() ? *s : json();
  }

  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::string node_uid_;
  inventory::Inventory inventory_;
  std::string log_;
};

TEST_F(PublisherTest, CreatesTheNodesSliceOwnedByTheNode) {
  SlicePublisher publisher(*client_, Options());
  auto r = publisher.Sync(inventory_);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->action, SyncResult::Action::kCreated);
  EXPECT_EQ(r->name, kSliceName);
  EXPECT_EQ(r->generation, 1);
  json slice = Slice();
  EXPECT_EQ(slice["spec"]["driver"], kDriverName);
  EXPECT_EQ(slice["spec"]["nodeName"], kNode);
  EXPECT_EQ(slice["spec"]["pool"],
            json({{"name", kNode}, {"generation", 1}, {"resourceSliceCount", 1}}));
  ASSERT_EQ(slice["spec"]["devices"].size(), 2u);
  EXPECT_EQ(slice["spec"]["devices"][1]["name"], "hami-gpu-1");
  EXPECT_EQ(slice["spec"]["devices"][1]["attributes"]["uuid"]["string"], "GPU-bbbb");
  EXPECT_EQ(slice["metadata"]["ownerReferences"][0]["uid"], node_uid_);
  EXPECT_EQ(slice["metadata"]["ownerReferences"][0]["kind"], "Node");
  EXPECT_THAT(log_, HasSubstr("dra event=slice_created name=n1-hami-core-gpu generation=1"));

  // Nothing changed: nothing written (a plugin restarting on the same GPUs).
  const int64_t rv = api_->resource_version();
  SlicePublisher restarted(*client_, Options());
  r = restarted.Sync(inventory_);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->action, SyncResult::Action::kUnchanged);
  EXPECT_EQ(r->generation, 1);
  EXPECT_EQ(api_->resource_version(), rv);
}

TEST_F(PublisherTest, AnUnhealthyGpuIsTaintedAndAGoneGpuRemovedEachWithANewGeneration) {
  SlicePublisher publisher(*client_, Options());
  ASSERT_TRUE(publisher.Sync(inventory_).ok());

  inventory_.devices[1].healthy = false;
  inventory_.devices[1].health_reason = "Xid 79";
  auto r = publisher.Sync(inventory_);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->action, SyncResult::Action::kUpdated);
  EXPECT_EQ(r->generation, 2);
  json slice = Slice();
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 2);
  EXPECT_FALSE(slice["spec"]["devices"][0].contains("taints"));
  const json& taints = slice["spec"]["devices"][1]["taints"];
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_EQ(taints[0]["key"], kUnhealthyTaintKey);
  EXPECT_EQ(taints[0]["effect"], "NoSchedule");
  EXPECT_EQ(taints[0]["value"], "Xid_79");
  EXPECT_EQ(slice["spec"]["devices"][1]["attributes"]["healthy"]["bool"], false);
  EXPECT_THAT(log_, HasSubstr("dra event=slice_updated name=n1-hami-core-gpu generation=2"));

  inventory_.devices.pop_back();
  r = publisher.Sync(inventory_);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->generation, 3);
  slice = Slice();
  ASSERT_EQ(slice["spec"]["devices"].size(), 1u);
  EXPECT_EQ(slice["spec"]["devices"][0]["name"], "hami-gpu-0");
  EXPECT_EQ(slice["metadata"]["generation"], 3);  // the API server's count of spec changes

  // A new publisher (the plugin restarted) continues above the pool's generation.
  inventory_.devices.push_back(Gpu(1, "GPU-bbbb"));
  SlicePublisher restarted(*client_, Options());
  r = restarted.Sync(inventory_);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->generation, 4);
}

TEST_F(PublisherTest, OtherSlicesOfThisDriverAndNodeAreDeletedAndNoOneElses) {
  auto slice = [](const std::string& name, const std::string& driver, const std::string& node) {
    return json{{"metadata", {{"name", name}}},
                {"spec",
                 {{"driver", driver},
                  {"nodeName", node},
                  {"pool", {{"name", node}, {"generation", 7}, {"resourceSliceCount", 1}}},
                  {"devices", json::array()}}}};
  };
  ASSERT_TRUE(api_->CreateObject(kube::kResourceSlices, slice("old-n1", kDriverName, kNode)).ok());
  ASSERT_TRUE(api_->CreateObject(kube::kResourceSlices, slice("n2-hami", kDriverName, "n2")).ok());
  ASSERT_TRUE(
      api_->CreateObject(kube::kResourceSlices, slice("n1-other", "gpu.nvidia.com", kNode)).ok());

  SlicePublisher publisher(*client_, Options());
  auto r = publisher.Sync(inventory_);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->deleted, 1);
  EXPECT_EQ(r->generation, 8);  // above the pool's old slice
  EXPECT_FALSE(api_->GetObject(kube::kResourceSlices, "", "old-n1").ok());
  EXPECT_TRUE(api_->GetObject(kube::kResourceSlices, "", "n2-hami").ok());
  EXPECT_TRUE(api_->GetObject(kube::kResourceSlices, "", "n1-other").ok());
  EXPECT_THAT(log_, HasSubstr("dra event=slice_deleted name='old-n1' node=n1"));
}

TEST_F(PublisherTest, ASliceChangedBehindThePublishersBackIsRewritten) {
  SlicePublisher publisher(*client_, Options());
  ASSERT_TRUE(publisher.Sync(inventory_).ok());
  json edited = Slice();
  edited["spec"]["devices"].erase(1);
  auto put = client_->Update(kube::kResourceSlices, edited);
  ASSERT_TRUE(put.ok()) << put.error().message();
  auto r = publisher.Sync(inventory_);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->action, SyncResult::Action::kUpdated);
  EXPECT_EQ(Slice()["spec"]["devices"].size(), 2u);
}

TEST_F(PublisherTest, TheLoopPublishesAtStartOnEveryChangeAndAfterADeletion) {
  SliceLoop loop(*client_, Options(), inventory_, std::chrono::milliseconds(200));
  ASSERT_TRUE(loop.WaitSynced(0, std::chrono::seconds(20)));
  EXPECT_EQ(Slice()["spec"]["pool"]["generation"], 1);

  const uint64_t before = loop.Synced();
  inventory_.devices[0].healthy = false;
  inventory_.devices[0].health_reason = "Xid 48";
  loop.Set(inventory_);
  ASSERT_TRUE(loop.WaitSynced(before, std::chrono::seconds(20)));
  json slice = Slice();
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 2);
  EXPECT_EQ(slice["spec"]["devices"][0]["taints"][0]["value"], "Xid_48");

  // Deleted by someone else: the next resync puts it back, above the generation it had.
  ASSERT_TRUE(api_->DeleteObject(kube::kResourceSlices, "", kSliceName).ok());
  const uint64_t after_delete = loop.Synced();
  ASSERT_TRUE(loop.WaitSynced(after_delete, std::chrono::seconds(20)));
  slice = Slice();
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 3);
  loop.Stop();
}

TEST_F(PublisherTest, ARefusedSliceIsAnErrorAndTheLoopKeepsTryingUntilStopped) {
  PublisherOptions bad = Options();
  bad.driver = "Not A Driver";
  SlicePublisher refused(*client_, bad);
  auto r = refused.Sync(inventory_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr("spec.driver"));

  SliceLoop loop(*client_, bad, inventory_, std::chrono::milliseconds(200));
  EXPECT_FALSE(loop.WaitSynced(0, std::chrono::milliseconds(1500)));  // one failure, one retry
  loop.Stop();  // at once, although it is waiting to retry
  EXPECT_EQ(loop.Synced(), 0u);
  EXPECT_THAT(log_, HasSubstr("dra event=slice_publish_failed retry_ms=1000 error="));
}

// ---- Claims from the simulated API server --------------------------------------------------

class ApiClaimsTest : public PublisherTest {
 protected:
  void SetUp() override {
    PublisherTest::SetUp();
    ASSERT_TRUE(root_.ok());
    hook_ = root_.File("hook");
    ASSERT_TRUE(std::filesystem::create_directories(hook_ + "/vgpu"));
    ASSERT_TRUE(std::ofstream(hook_ + "/vgpu/libvgpu.so") << "ELF");
    ASSERT_TRUE(std::ofstream(hook_ + "/vgpu/ld.so.preload") << "/usr/local/vgpu/libvgpu.so\n");
    options_.node_name = kNode;
    options_.checkpoint_path = root_.File("checkpoint.json");
    options_.cdi_dir = root_.File("cdi");
    options_.hook_path = hook_;
    options_.lock_dir.parent = root_.path();
    options_.lock_dir.expected_owner = geteuid();
    options_.log = [this](std::string_view line) { log_ += std::string(line) + "\n"; };
    ASSERT_TRUE(api_->CreateObject(kube::kNamespaces, {{"metadata", {{"name", "ml"}}}}).ok());
  }

  // A claim created as a user does, then allocated through /status as the scheduler does.
  json AllocatedClaim(const std::string& name, const std::string& device) {
    json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", {{"name", name}, {"namespace", "ml"}}},
        {"spec",
         {{"devices",
           {{"requests",
             {{{"name", "gpu"},
               {"exactly",
                {{"deviceClassName", kDriverName},
                 {"capacity", {{"requests", {{"memory", "3000Mi"}, {"cores", "30"}}}}}}}}}}}}}}};
    auto created = client_->Create(kube::kResourceClaims, "ml", claim);
    EXPECT_TRUE(created.ok()) << created.error().message();
    if (!created.ok()) return json();
    json allocated = *created;
    allocated["status"]["allocation"] = {
        {"devices",
         {{"results",
           {{{"request", "gpu"},
             {"driver", kDriverName},
             {"pool", kNode},
             {"device", device},
             {"shareID", "0b6f8c2e-6d1a-4f0e-9a55-3c2d1e7f9a10"},
             {"consumedCapacity", {{"memory", "3000Mi"}, {"cores", "30"}}}}}}}}};
    allocated["status"]["reservedFor"] = {{{"resource", "pods"}, {"name", "p"}, {"uid", "p-1"}}};
    auto updated = client_->Update(kube::kResourceClaims, allocated, "status");
    EXPECT_TRUE(updated.ok()) << updated.error().message();
    return updated.ok() ? *updated : json();
  }

  TempDir root_{"hami-dra-api"};
  std::string hook_;
  DriverOptions options_;
};

TEST_F(ApiClaimsTest, PrepareReadsTheAllocationTheApiServerHolds) {
  json claim = AllocatedClaim("c", "hami-gpu-1");
  ASSERT_TRUE(claim.is_object());
  const std::string uid = claim["metadata"]["uid"];
  ApiClaimSource source(*client_);
  auto driver = Driver::Create(source, GpusFromInventory(inventory_), options_);
  ASSERT_TRUE(driver.ok()) << driver.error().message();

  auto answers = (*driver)->Prepare({{"ml", uid, "c"}});
  ASSERT_EQ(answers.count(uid), 1u);
  const PrepareAnswer& a = answers[uid];
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].device, "hami-gpu-1");
  EXPECT_EQ(a.devices[0].share_id, "0b6f8c2e-6d1a-4f0e-9a55-3c2d1e7f9a10");
  std::ifstream limits(hook_ + "/vgpu/containers/" + uid + "_claim.limits");
  std::string text((std::istreambuf_iterator<char>(limits)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=3000m"));
  EXPECT_THAT(text, HasSubstr("CUDA_DEVICE_SM_LIMIT=30"));

  // A claim deleted and created again under its name is another claim: refused by UID.
  ASSERT_TRUE(client_->Delete(kube::kResourceClaims, "ml", "c").ok());
  json again = AllocatedClaim("c", "hami-gpu-0");
  ASSERT_TRUE(again.is_object());
  auto stale = (*driver)->Prepare({{"ml", "not-" + uid, "c"}});
  EXPECT_THAT(stale["not-" + uid].error, HasSubstr("the kubelet's claim is gone"));

  // Not allocated (status empty, as a create leaves it).
  json pending = {
      {"metadata", {{"name", "pending"}, {"namespace", "ml"}}},
      {"spec",
       {{"devices",
         {{"requests", {{{"name", "gpu"}, {"exactly", {{"deviceClassName", kDriverName}}}}}}}}}}};
  auto created = client_->Create(kube::kResourceClaims, "ml", pending);
  ASSERT_TRUE(created.ok()) << created.error().message();
  const std::string pending_uid = (*created)["metadata"]["uid"];
  auto refused = (*driver)->Prepare({{"ml", pending_uid, "pending"}});
  EXPECT_THAT(refused[pending_uid].error, HasSubstr("status.allocation: missing"));
  // Missing altogether.
  auto missing = (*driver)->Prepare({{"ml", "u-x", "nope"}});
  EXPECT_THAT(missing["u-x"].error, HasSubstr("claim ml/nope (uid u-x)"));
}

}  // namespace
}  // namespace hami::dra
