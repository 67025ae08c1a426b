#include "plugin/api.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "support/subprocess.h"

namespace hami::plugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---- conversions ----

TEST(PluginApiConversion, DeviceCarriesHealthAndTopologyOnlyWithANumaNode) {
  v1beta1::Device with = ToProto(ReplicaDevice{"GPU-a-0", true, 1});
  EXPECT_EQ(with.id(), "GPU-a-0");
  EXPECT_EQ(with.health(), "Healthy");
  ASSERT_TRUE(with.has_topology());
  ASSERT_EQ(with.topology().nodes_size(), 1);
  EXPECT_EQ(with.topology().nodes(0).id(), 1);

  v1beta1::Device without = ToProto(ReplicaDevice{"GPU-a-1", false, -1});
  EXPECT_EQ(without.health(), "Unhealthy");
  EXPECT_FALSE(without.has_topology());

  EXPECT_EQ(FromProto(with), (ReplicaDevice{"GPU-a-0", true, 1}));
  EXPECT_EQ(FromProto(without), (ReplicaDevice{"GPU-a-1", false, -1}));
}

TEST(PluginApiConversion, AnyHealthOtherThanHealthyIsUnhealthy) {
  v1beta1::Device d;
  d.set_id("x");
  d.set_health("healthy");  // the API's constant is "Healthy", exactly
  EXPECT_FALSE(FromProto(d).healthy);
}

TEST(PluginApiConversion, ContainerResponseKeepsMountOrderAndEveryField) {
  ContainerResponse r;
  r.envs = {{"CUDA_DEVICE_SM_LIMIT", "30"}, {"A", "1"}};
  r.mounts = {{"/tmp/vgpulock", "/tmp/vgpulock", false},
              {"/tmp/vgpulock/hostpid", "/var/run/hami/hostpid", true},
              {"/usr/local/vgpu", "/usr/local/vgpu/containers/u_c", false}};
  r.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  r.annotations = {{"k", "v"}};
  v1beta1::ContainerAllocateResponse p = ToProto(r);
  ASSERT_EQ(p.mounts_size(), 3);
  EXPECT_EQ(p.mounts(1).container_path(), "/tmp/vgpulock/hostpid");
  EXPECT_TRUE(p.mounts(1).read_only());
  EXPECT_EQ(p.envs().at("CUDA_DEVICE_SM_LIMIT"), "30");
  EXPECT_EQ(p.devices(0).permissions(), "rw");
  EXPECT_EQ(p.cdi_devices_size(), 0);
  EXPECT_EQ(FromProto(p), r);

  std::vector<ContainerResponse> two{r, ContainerResponse{}};
  EXPECT_EQ(FromProto(ToAllocateResponse(two)), two);
}

TEST(PluginApiConversion, RequestsUseTheApiFieldNames) {
  v1beta1::AllocateRequest a = ToAllocateRequest({ContainerRequest{{"GPU-a-0", "GPU-b-3"}}});
  ASSERT_EQ(a.container_requests_size(), 1);
  EXPECT_THAT(a.container_requests(0).devices_ids(), ElementsAre("GPU-a-0", "GPU-b-3"));
  EXPECT_THAT(FromProto(a)[0].device_ids, ElementsAre("GPU-a-0", "GPU-b-3"));

  v1beta1::PreferredAllocationRequest p =
      ToPreferredAllocationRequest({PreferredRequest{{"a", "b", "c"}, {"b"}, 2}});
  EXPECT_THAT(p.container_requests(0).available_deviceids(), ElementsAre("a", "b", "c"));
  EXPECT_THAT(p.container_requests(0).must_include_deviceids(), ElementsAre("b"));
  EXPECT_EQ(p.container_requests(0).allocation_size(), 2);
  PreferredRequest back = FromProto(p)[0];
  EXPECT_THAT(back.available_device_ids, ElementsAre("a", "b", "c"));
  EXPECT_THAT(back.must_include_device_ids, ElementsAre("b"));
  EXPECT_EQ(back.allocation_size, 2);

  auto chosen = FromProto(ToPreferredAllocationResponse({{"b", "c"}, {}}));
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_THAT(chosen[0], ElementsAre("b", "c"));
  EXPECT_TRUE(chosen[1].empty());
}

TEST(PluginApiConversion, EachErrorCodeHasItsStatusCodeAndTheMessageIsKept) {
  struct Row {
    ErrorCode error;
    grpc::StatusCode status;
  };
  const Row rows[] = {
      {ErrorCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {ErrorCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {ErrorCode::kIo, grpc::StatusCode::INTERNAL},
      {ErrorCode::kCorrupt, grpc::StatusCode::DATA_LOSS},
      {ErrorCode::kIncompatible, grpc::StatusCode::FAILED_PRECONDITION},
      {ErrorCode::kBusy, grpc::StatusCode::UNAVAILABLE},
      {ErrorCode::kPermission, grpc::StatusCode::PERMISSION_DENIED},
      {ErrorCode::kUnsupported, grpc::StatusCode::UNIMPLEMENTED},
      {ErrorCode::kInternal, grpc::StatusCode::INTERNAL},
      {ErrorCode::kConflict, grpc::StatusCode::ABORTED},
      {ErrorCode::kExpired, grpc::StatusCode::ABORTED},
      {ErrorCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {ErrorCode::kTimeout, grpc::StatusCode::DEADLINE_EXCEEDED},
  };
  for (const Row& row : rows) {
    grpc::Status s = ToGrpcStatus(Error(row.error, "no binding pod found on node n1"));
    EXPECT_EQ(s.error_code(), row.status) << int(row.error);
    EXPECT_EQ(s.error_message(), "no binding pod found on node n1");
  }
  Error back = FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "gone"), "Allocate");
  EXPECT_EQ(back.code(), ErrorCode::kNotFound);
  EXPECT_EQ(back.message(), "Allocate: gone (gRPC NOT_FOUND)");
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, ""), "x").code(),
            ErrorCode::kUnavailable);
}

TEST(PluginApiConversion, CountersRenderAsKeyValuesInListOrder) {
  ServiceCounters c;
  c.rpcs[size_t(Rpc::kAllocate)] = {3, 1};
  c.list_and_watch_sends = 2;
  const std::string kv = c.ToKeyValues();
  EXPECT_THAT(kv, HasSubstr("allocate_calls=3 allocate_errors=1"));
  EXPECT_EQ(kv.find("get_device_plugin_options_calls=0"), 0u);
  EXPECT_THAT(kv, HasSubstr("list_and_watch_sends=2 open_streams=0"));
}

// ---- the service over a real Unix socket ----

std::vector<ReplicaDevice> TwoDevices() {
  return {{"GPU-aaaa-0", true, 0}, {"GPU-aaaa-1", true, 1}};
}

class PluginApiServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    Start(true);
  }

  void Start(bool offer_preferred) {
    ServiceOptions options;
    options.offer_preferred_allocation = offer_preferred;
    options.allocate = [this](const std::vector<ContainerRequest>& containers)
        -> Result<std::vector<ContainerResponse>> {
      {
        std::lock_guard lock(seen_mu_);
        allocate_seen_ = containers;
      }
      if (!allocate_error_.empty()) return Error(ErrorCode::kNotFound, allocate_error_);
      std::vector<ContainerResponse> out;
      for (const ContainerRequest& c : containers) {
        ContainerResponse r;
        r.envs["NVIDIA_VISIBLE_DEVICES"] = c.device_ids.empty() ? "" : c.device_ids[0];
        r.mounts = {{"/usr/local/vgpu", "/host/vgpu", false}, {"/overrideEnv", "/host/l", true}};
        out.push_back(r);
      }
      if (allocate_short_) out.pop_back();
      return out;
    };
    options.prefer = [](const std::vector<PreferredRequest>& containers)
        -> Result<std::vector<std::vector<std::string>>> {
      std::vector<std::vector<std::string>> out;
      for (const PreferredRequest& c : containers) {
        // The last `allocation_size` available devices, to show the answer is the plugin's.
        std::vector<std::string> ids(c.available_device_ids.end() - c.allocation_size,
                                     c.available_device_ids.end());
        out.push_back(ids);
      }
      return out;
    };
    service_ = std::make_unique<DevicePluginService>(std::move(options));
    auto server = ServeDevicePlugin(dir_.File("hami-nvidia.sock"), service_.get());
    ASSERT_TRUE(server.ok()) << server.error().message();
    server_ = std::move(*server);
    stub_ = v1beta1::DevicePlugin::NewStub(
        grpc::CreateChannel(UnixTarget(server_->path()), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_) server_->Stop();
  }

  // Bounds every call: a failure ends the test instead of hanging it.
  static std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  }

  TempDir dir_{"hami-papi"};
  std::unique_ptr<DevicePluginService> service_;
  std::unique_ptr<UnixServer> server_;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub_;
  std::mutex seen_mu_;
  std::vector<ContainerRequest> allocate_seen_;
  std::string allocate_error_;
  bool allocate_short_ = false;
};

TEST_F(PluginApiServer, OptionsOfferPreferredAllocationAndNoPreStart) {
  auto ctx = Context();
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(stub_->GetDevicePluginOptions(ctx.get(), v1beta1::Empty(), &options).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());
  EXPECT_FALSE(options.pre_start_required());
  EXPECT_EQ(service_->Counters()[Rpc::kGetDevicePluginOptions].calls, 1u);
}

TEST_F(PluginApiServer, ListAndWatchSendsTheListThenResendsItOnAHealthChange) {
  service_->SetDevices(TwoDevices());
  auto ctx = Context();
  auto reader = stub_->ListAndWatch(ctx.get(), v1beta1::Empty());
  v1beta1::ListAndWatchResponse first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ(FromProto(first), TwoDevices());
  ASSERT_EQ(first.devices_size(), 2);
  EXPECT_EQ(first.devices(1).health(), "Healthy");
  ASSERT_EQ(first.devices(1).topology().nodes_size(), 1);
  EXPECT_EQ(first.devices(1).topology().nodes(0).id(), 1);

  std::vector<ReplicaDevice> changed = TwoDevices();
  changed[1].healthy = false;
  service_->SetDevices(changed);
  v1beta1::ListAndWatchResponse second;
  ASSERT_TRUE(reader->Read(&second));
  EXPECT_EQ(FromProto(second), changed);
  EXPECT_EQ(second.devices(1).health(), "Unhealthy");
  EXPECT_EQ(second.devices(0).health(), "Healthy");

  ServiceCounters c = service_->Counters();
  EXPECT_EQ(c[Rpc::kListAndWatch].calls, 1u);
  EXPECT_EQ(c.list_and_watch_sends, 2u);
  EXPECT_EQ(c.open_streams, 1u);
  ctx->TryCancel();
}

TEST_F(PluginApiServer, EveryOpenStreamGetsTheChange) {
  service_->SetDevices(TwoDevices());
  auto ctx1 = Context(), ctx2 = Context();
  auto r1 = stub_->ListAndWatch(ctx1.get(), v1beta1::Empty());
  auto r2 = stub_->ListAndWatch(ctx2.get(), v1beta1::Empty());
  v1beta1::ListAndWatchResponse m;
  ASSERT_TRUE(r1->Read(&m));
  ASSERT_TRUE(r2->Read(&m));
  service_->SetDevices({{"GPU-bbbb-0", false, -1}});
  ASSERT_TRUE(r1->Read(&m));
  EXPECT_EQ(FromProto(m), (std::vector<ReplicaDevice>{{"GPU-bbbb-0", false, -1}}));
  ASSERT_TRUE(r2->Read(&m));
  EXPECT_EQ(FromProto(m), (std::vector<ReplicaDevice>{{"GPU-bbbb-0", false, -1}}));
  ctx1->TryCancel();
  ctx2->TryCancel();
}

TEST_F(PluginApiServer, EndStreamsEndsOpenStreamsAndLaterStreamsStillWork) {
  service_->SetDevices(TwoDevices());
  auto ctx = Context();
  auto reader = stub_->ListAndWatch(ctx.get(), v1beta1::Empty());
  v1beta1::ListAndWatchResponse m;
  ASSERT_TRUE(reader->Read(&m));
  service_->EndStreams();
  EXPECT_FALSE(reader->Read(&m));
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.error_message(), "the device plugin is stopping");

  auto ctx2 = Context();
  auto again = stub_->ListAndWatch(ctx2.get(), v1beta1::Empty());
  ASSERT_TRUE(again->Read(&m));
  EXPECT_EQ(FromProto(m), TwoDevices());
  EXPECT_EQ(service_->Counters()[Rpc::kListAndWatch].errors, 0u);
  ctx2->TryCancel();
}

TEST_F(PluginApiServer, ShutdownWithAnOpenStreamEndsItAndRemovesTheSocket) {
  service_->SetDevices(TwoDevices());
  auto ctx = Context();
  auto reader = stub_->ListAndWatch(ctx.get(), v1beta1::Empty());
  v1beta1::ListAndWatchResponse m;
  ASSERT_TRUE(reader->Read(&m));
  // A grace far beyond the test's timeout: the stream must end at the shutdown itself (a
  // stream that held it would fail the test by its timeout, not pass at the deadline).
  server_->Stop(/*grace_ms=*/3'600'000);
  EXPECT_FALSE(reader->Read(&m));
  EXPECT_FALSE(reader->Finish().ok());
  struct stat st;
  EXPECT_NE(lstat(dir_.File("hami-nvidia.sock").c_str(), &st), 0);
}

TEST_F(PluginApiServer, AStreamTheClientCancelsIsReleased) {
  auto ctx = Context();
  auto reader = stub_->ListAndWatch(ctx.get(), v1beta1::Empty());
  v1beta1::ListAndWatchResponse m;
  ASSERT_TRUE(reader->Read(&m));
  EXPECT_EQ(m.devices_size(), 0);  // no SetDevices yet: an empty list
  ctx->TryCancel();
  EXPECT_FALSE(reader->Read(&m));
  // The server learns of the cancellation on its own threads and announces it nowhere but in
  // the gauge: a bounded poll of the gauge.
  EXPECT_TRUE(testing::PollUntil([&] { return service_->Counters().open_streams == 0; }, 10000));
  service_->SetDevices(TwoDevices());  // nothing left to write to
}

TEST_F(PluginApiServer, AllocatePassesTheKubeletsChoiceAndReturnsTheResponses) {
  auto ctx = Context();
  v1beta1::AllocateResponse response;
  grpc::Status s = stub_->Allocate(
      ctx.get(), ToAllocateRequest({{{"GPU-aaaa-1"}}, {{"GPU-aaaa-0", "GPU-aaaa-1"}}}), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  {
    std::lock_guard lock(seen_mu_);
    ASSERT_EQ(allocate_seen_.size(), 2u);
    EXPECT_THAT(allocate_seen_[1].device_ids, ElementsAre("GPU-aaaa-0", "GPU-aaaa-1"));
  }
  std::vector<ContainerResponse> got = FromProto(response);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-aaaa-1");
  ASSERT_EQ(got[1].mounts.size(), 2u);
  EXPECT_EQ(got[1].mounts[1].container_path, "/overrideEnv");
  EXPECT_TRUE(got[1].mounts[1].read_only);
  EXPECT_EQ(service_->Counters()[Rpc::kAllocate].calls, 1u);
  EXPECT_EQ(service_->Counters()[Rpc::kAllocate].errors, 0u);
}

TEST_F(PluginApiServer, AllocateErrorBecomesItsStatusWithTheMessage) {
  allocate_error_ = "no binding pod found on node n1";
  auto ctx = Context();
  v1beta1::AllocateResponse response;
  grpc::Status s = stub_->Allocate(ctx.get(), ToAllocateRequest({{{"GPU-aaaa-0"}}}), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "no binding pod found on node n1");
  EXPECT_EQ(service_->Counters()[Rpc::kAllocate].errors, 1u);
}

TEST_F(PluginApiServer, AllocateAnswerOfTheWrongSizeIsRefused) {
  allocate_short_ = true;
  auto ctx = Context();
  v1beta1::AllocateResponse response;
  grpc::Status s = stub_->Allocate(ctx.get(), ToAllocateRequest({{{"a"}}, {{"b"}}}), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(s.error_message(), HasSubstr("answered 1 containers for 2 requested"));
}

TEST_F(PluginApiServer, PreferredAllocationIsThePluginsAnswer) {
  auto ctx = Context();
  v1beta1::PreferredAllocationResponse response;
  grpc::Status s = stub_->GetPreferredAllocation(
      ctx.get(), ToPreferredAllocationRequest({{{"a", "b", "c"}, {}, 2}}), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.container_responses_size(), 1);
  EXPECT_THAT(response.container_responses(0).deviceids(), ElementsAre("b", "c"));
}

TEST_F(PluginApiServer, PreStartContainerIsANoOp) {
  auto ctx = Context();
  v1beta1::PreStartContainerRequest request;
  request.add_devices_ids("GPU-aaaa-0");
  v1beta1::PreStartContainerResponse response;
  EXPECT_TRUE(stub_->PreStartContainer(ctx.get(), request, &response).ok());
  EXPECT_EQ(service_->Counters()[Rpc::kPreStartContainer].calls, 1u);
}

TEST_F(PluginApiServer, PreferredAllocationNotOfferedIsUnimplemented) {
  server_->Stop();
  Start(false);
  auto ctx = Context();
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(stub_->GetDevicePluginOptions(ctx.get(), v1beta1::Empty(), &options).ok());
  EXPECT_FALSE(options.get_preferred_allocation_available());
  auto ctx2 = Context();
  v1beta1::PreferredAllocationResponse response;
  grpc::Status s = stub_->GetPreferredAllocation(
      ctx2.get(), ToPreferredAllocationRequest({{{"a"}, {}, 1}}), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(PluginApiServer, TheSameServiceServesAgainAfterAStop) {
  service_->SetDevices(TwoDevices());
  server_->Stop();
  auto server = ServeDevicePlugin(dir_.File("hami-nvidia.sock"), service_.get());
  ASSERT_TRUE(server.ok()) << server.error().message();
  server_ = std::move(*server);
  auto stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel(UnixTarget(server_->path()), grpc::InsecureChannelCredentials()));
  auto ctx = Context();
  auto reader = stub->ListAndWatch(ctx.get(), v1beta1::Empty());
  v1beta1::ListAndWatchResponse m;
  ASSERT_TRUE(reader->Read(&m));
  EXPECT_EQ(FromProto(m), TwoDevices());
  ctx->TryCancel();
}

TEST(PluginApiUnixServer, RefusesAPathThatIsNotASocket) {
  TempDir dir("hami-papi");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("plain");
  ASSERT_EQ(close(creat(path.c_str(), 0600)), 0);
  DevicePluginService service(ServiceOptions{});
  auto server = ServeDevicePlugin(path, &service);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.error().message(), HasSubstr(path + " exists and is not a socket"));
  auto missing = ServeDevicePlugin(dir.File("no/such/dir.sock"), &service);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message(), HasSubstr("No such file or directory"));
}

}  // namespace
}  // namespace hami::plugin
