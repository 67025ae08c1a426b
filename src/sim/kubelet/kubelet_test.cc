#include "sim/kubelet/kubelet.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "kubeletapi/api.grpc.pb.h"

namespace hami::sim::kubelet {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kWaitMs = 20'000;  // bounds a failure; never reached when things work

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::chrono::system_clock::time_point DeadlineIn(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

// A device plugin written here on the generated service, independent of the project's plugin
// (src/plugin), with a fake Allocate (NVIDIA_VISIBLE_DEVICES = the IDs) and a preference for
// the last available devices, so that the kubelet's use of the answer shows.
class FakePlugin final : public v1beta1::DevicePlugin::Service {
 public:
  FakePlugin(const std::string& dir, bool offer_preferred)
      : path_(dir + "/hami-nvidia.sock"), offer_preferred_(offer_preferred) {}
  ~FakePlugin() override { StopServing(); }

  void Serve() {
    StopServing();  // the old server first: gRPC unlinks its path when it shuts down
    {
      std::lock_guard lock(mu_);
      stopping_ = false;
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path_, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr) << "cannot serve on " << path_;
  }

  grpc::Status Register(const std::string& kubelet_socket, const std::string& version,
                        const std::string& resource = "nvidia.com/gpu") {
    auto stub = v1beta1::Registration::NewStub(
        grpc::CreateChannel("unix:" + kubelet_socket, grpc::InsecureChannelCredentials()));
    v1beta1::RegisterRequest request;
    request.set_version(version);
    request.set_endpoint("hami-nvidia.sock");
    request.set_resource_name(resource);
    request.mutable_options()->set_get_preferred_allocation_available(offer_preferred_);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(kWaitMs));
    v1beta1::Empty empty;
    return stub->Register(&ctx, request, &empty);
  }

  // Sends `devices` on every open ListAndWatch stream and to later ones.
  void SetDevices(const std::vector<Device>& devices) {
    v1beta1::ListAndWatchResponse message;
    for (const Device& d : devices) {
      v1beta1::Device* out = message.add_devices();
      out->set_id(d.id);
      out->set_health(d.health);
      for (int64_t node : d.numa_nodes) out->mutable_topology()->add_nodes()->set_id(node);
    }
    std::lock_guard lock(mu_);
    message_ = std::move(message);
    ++version_;
    changed_.notify_all();
  }

  const std::string& path() const { return path_; }
  int allocate_calls() {
    std::lock_guard lock(mu_);
    return allocate_calls_;
  }
  int prefer_calls() {
    std::lock_guard lock(mu_);
    return prefer_calls_;
  }
  void FailWith(std::string message) {
    std::lock_guard lock(mu_);
    fail_with_ = std::move(message);
  }

  // ---- the service ----
  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* options) override {
    options->set_get_preferred_allocation_available(offer_preferred_);
    return grpc::Status::OK;
  }

  // Writes the list whenever it changes, until the client goes or the server stops.
  grpc::Status ListAndWatch(grpc::ServerContext*, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    std::unique_lock lock(mu_);
    uint64_t sent = 0;
    while (!stopping_) {
      if (sent == version_) {
        changed_.wait(lock);
        continue;
      }
      v1beta1::ListAndWatchResponse message = message_;
      sent = version_;
      lock.unlock();
      const bool written = writer->Write(message);
      lock.lock();
      if (!written) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    if (!offer_preferred_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "not offered");
    std::lock_guard lock(mu_);
    ++prefer_calls_;
    for (const auto& c : request->container_requests()) {
      auto* out = response->add_container_responses();
      const int n = c.available_deviceids_size();
      for (int i = std::max(0, n - c.allocation_size()); i < n; ++i) {
        out->add_deviceids(c.available_deviceids(i));
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    std::lock_guard lock(mu_);
    ++allocate_calls_;
    if (!fail_with_.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, fail_with_);
    for (const auto& c : request->container_requests()) {
      std::string ids;
      for (const auto& id : c.devices_ids()) ids += (ids.empty() ? "" : ",") + id;
      (*response->add_container_responses()->mutable_envs())["NVIDIA_VISIBLE_DEVICES"] = ids;
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  void StopServing() {
    if (!server_) return;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;  // ends the ListAndWatch handlers, so the shutdown waits for none
      changed_.notify_all();
    }
    server_->Shutdown(DeadlineIn(1000));
    server_.reset();
  }

  const std::string path_;
  const bool offer_preferred_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable changed_;
  v1beta1::ListAndWatchResponse message_;
  uint64_t version_ = 0;
  bool stopping_ = false;
  int allocate_calls_ = 0;
  int prefer_calls_ = 0;
  std::string fail_with_;
};

std::vector<Device> FourReplicas() {
  return {{"GPU-a-0", "Healthy", {0}},
          {"GPU-a-1", "Healthy", {0}},
          {"GPU-b-0", "Unhealthy", {1}},
          {"GPU-b-1", "Healthy", {1}}};
}

class SimKubelet : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    KubeletOptions options;
    options.dir = dir_.path();
    options.dial_timeout_ms = 2000;
    kubelet_ = std::make_unique<Kubelet>(options);
    ASSERT_TRUE(kubelet_->Start().ok());
  }

  // Serves the fake plugin with FourReplicas and registers it; waits for the first list.
  void RegisterPlugin(bool offer_preferred = true) {
    plugin_ = std::make_unique<FakePlugin>(dir_.path(), offer_preferred);
    plugin_->SetDevices(FourReplicas());
    ASSERT_NO_FATAL_FAILURE(plugin_->Serve());
    grpc::Status s = plugin_->Register(kubelet_->socket_path(), "v1beta1");
    ASSERT_TRUE(s.ok()) << s.error_message();
    auto devices = kubelet_->WaitForDevices("nvidia.com/gpu", 0, kWaitMs);
    ASSERT_TRUE(devices.ok()) << devices.error().message();
    ASSERT_EQ(*devices, FourReplicas());
  }

  TempDir dir_{"hami-kubelet"};
  std::unique_ptr<Kubelet> kubelet_;
  std::unique_ptr<FakePlugin> plugin_;
};

TEST_F(SimKubelet, RecordsARegistrationAndFollowsListAndWatch) {
  ASSERT_NO_FATAL_FAILURE(RegisterPlugin());
  EXPECT_EQ(kubelet_->registrations(), 1u);
  auto p = kubelet_->Plugin("nvidia.com/gpu");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->endpoint, "hami-nvidia.sock");
  EXPECT_EQ(p->version, "v1beta1");
  EXPECT_TRUE(p->get_preferred_allocation_available);
  EXPECT_TRUE(kubelet_->Connected("nvidia.com/gpu"));

  const uint64_t generation = kubelet_->DeviceGeneration("nvidia.com/gpu");
  std::vector<Device> changed = FourReplicas();
  changed[0].health = "Unhealthy";
  changed[1].numa_nodes = {};
  plugin_->SetDevices(changed);
  auto devices = kubelet_->WaitForDevices("nvidia.com/gpu", generation, kWaitMs);
  ASSERT_TRUE(devices.ok()) << devices.error().message();
  EXPECT_EQ(*devices, changed);
}

TEST_F(SimKubelet, RefusesAnotherVersionAsTheKubeletDoes) {
  plugin_ = std::make_unique<FakePlugin>(dir_.path(), true);
  ASSERT_NO_FATAL_FAILURE(plugin_->Serve());
  grpc::Status s = plugin_->Register(kubelet_->socket_path(), "v1alpha");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(s.error_message(),
            "requested API version \"v1alpha\" is not supported by kubelet. Supported versions "
            "are [\"v1beta1\"]");
  EXPECT_EQ(kubelet_->registrations(), 0u);
  EXPECT_EQ(kubelet_->rejected_registrations(), 1u);
  EXPECT_FALSE(kubelet_->Plugin("nvidia.com/gpu").has_value());
}

TEST_F(SimKubelet, RefusesAResourceNameThatIsNotExtended) {
  plugin_ = std::make_unique<FakePlugin>(dir_.path(), true);
  ASSERT_NO_FATAL_FAILURE(plugin_->Serve());
  grpc::Status s = plugin_->Register(kubelet_->socket_path(), "v1beta1", "gpu");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.error_message(), "the ResourceName \"gpu\" is invalid");
  s = plugin_->Register(kubelet_->socket_path(), "v1beta1", "kubernetes.io/gpu");
  EXPECT_FALSE(s.ok());
}

TEST_F(SimKubelet, RefusesAnEndpointNobodyServes) {
  plugin_ = std::make_unique<FakePlugin>(dir_.path(), true);  // not serving
  grpc::Status s = plugin_->Register(kubelet_->socket_path(), "v1beta1");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.error_message(), HasSubstr("failed to dial device plugin"));
  EXPECT_THAT(kubelet_->last_rejection(), HasSubstr("hami-nvidia.sock"));
}

TEST_F(SimKubelet, ChoosesPreferredHealthyDevicesThenAllocates) {
  ASSERT_NO_FATAL_FAILURE(RegisterPlugin());
  // Healthy and free: GPU-a-0, GPU-a-1, GPU-b-1; the plugin prefers the last one.
  auto a = kubelet_->AllocateContainer("pod-1", "main", "nvidia.com/gpu", 1);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_THAT(a->device_ids, ElementsAre("GPU-b-1"));
  EXPECT_EQ(a->response.envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b-1");
  EXPECT_EQ(plugin_->prefer_calls(), 1);

  // GPU-b-1 is held by pod-1 now: two of GPU-a-0, GPU-a-1.
  auto b = kubelet_->AllocateContainer("pod-2", "main", "nvidia.com/gpu", 2);
  ASSERT_TRUE(b.ok()) << b.error().message();
  EXPECT_THAT(b->device_ids, ElementsAre("GPU-a-0", "GPU-a-1"));

  auto c = kubelet_->AllocateContainer("pod-3", "main", "nvidia.com/gpu", 1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message(),
            "requested number of devices unavailable for nvidia.com/gpu. Requested: 1, "
            "Available: 0");

  kubelet_->ReleasePod("pod-1");
  auto d = kubelet_->AllocateContainer("pod-3", "main", "nvidia.com/gpu", 1);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_THAT(d->device_ids, ElementsAre("GPU-b-1"));
}

TEST_F(SimKubelet, WithoutPreferredAllocationTakesTheListInOrder) {
  ASSERT_NO_FATAL_FAILURE(RegisterPlugin(/*offer_preferred=*/false));
  auto a = kubelet_->AllocateContainer("pod-1", "main", "nvidia.com/gpu", 2);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_THAT(a->device_ids, ElementsAre("GPU-a-0", "GPU-a-1"));
  EXPECT_EQ(plugin_->prefer_calls(), 0);
}

TEST_F(SimKubelet, ARetriedAdmissionReusesTheDevicesAndAFailureFreesThem) {
  ASSERT_NO_FATAL_FAILURE(RegisterPlugin(false));
  plugin_->FailWith("no binding pod found on node n1");
  auto failed = kubelet_->AllocateContainer("pod-1", "main", "nvidia.com/gpu", 1);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(failed.error().message(),
            "Allocate for nvidia.com/gpu: no binding pod found on node n1 (gRPC INVALID_ARGUMENT)");

  plugin_->FailWith("");
  auto first = kubelet_->AllocateContainer("pod-1", "main", "nvidia.com/gpu", 1);
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_THAT(first->device_ids, ElementsAre("GPU-a-0"));  // the failure held nothing
  auto again = kubelet_->AllocateContainer("pod-1", "main", "nvidia.com/gpu", 1);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(again->device_ids, first->device_ids);
  EXPECT_EQ(plugin_->allocate_calls(), 3);
}

TEST_F(SimKubelet, AllocateWithoutAPluginNamesTheResource) {
  auto r = kubelet_->Allocate("nvidia.com/gpu", {{"GPU-a-0"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "no device plugin is registered for nvidia.com/gpu");
}

TEST_F(SimKubelet, RestartEndsTheStreamsAndRecreatesItsSocketRemovingThePlugins) {
  ASSERT_NO_FATAL_FAILURE(RegisterPlugin());
  kubelet_->Stop();
  EXPECT_FALSE(Exists(kubelet_->socket_path()));
  EXPECT_FALSE(kubelet_->Connected("nvidia.com/gpu"));
  EXPECT_TRUE(Exists(plugin_->path()));
  ASSERT_TRUE(kubelet_->Start().ok());
  EXPECT_TRUE(Exists(kubelet_->socket_path()));
  EXPECT_FALSE(Exists(plugin_->path())) << "the kubelet cleans its directory at start";
  // The restarted kubelet keeps what it recorded and accepts the plugin again.
  EXPECT_EQ(kubelet_->Plugin("nvidia.com/gpu")->registrations, 1u);
  ASSERT_NO_FATAL_FAILURE(plugin_->Serve());
  ASSERT_TRUE(plugin_->Register(kubelet_->socket_path(), "v1beta1").ok());
  EXPECT_TRUE(kubelet_->WaitForRegistrations(2, kWaitMs));
  EXPECT_EQ(kubelet_->Plugin("nvidia.com/gpu")->registrations, 2u);
}

}  // namespace
}  // namespace hami::sim::kubelet
