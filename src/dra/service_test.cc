// The kubelet's two gRPC services over real Unix sockets, with a grpc++ client built from the
// product's protos (the independent client is grpcio_test.cc).
#include "dra/service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/temp_dir.h"

namespace hami::dra {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::shared_ptr<grpc::Channel> Channel(const std::string& path) {
  return grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(root_.ok());
    const std::string hook = root_.File("hook");
    ASSERT_TRUE(std::filesystem::create_directories(hook + "/vgpu"));
    ASSERT_TRUE(std::ofstream(hook + "/vgpu/libvgpu.so") << "ELF");
    ASSERT_TRUE(std::ofstream(hook + "/vgpu/ld.so.preload") << "/usr/local/vgpu/libvgpu.so\n");
    DriverOptions o;
    o.node_name = "n1";
    o.checkpoint_path = root_.File("checkpoint.json");
    o.cdi_dir = root_.File("cdi");
    o.hook_path = hook;
    o.lock_dir.parent = root_.path();
    o.lock_dir.expected_owner = geteuid();
    o.log = [](std::string_view) {};
    source_.Put({{"metadata", {{"namespace", "ml"}, {"name", "c"}, {"uid", "u-1"}}},
                 {"status",
                  {{"allocation",
                    {{"devices",
                      {{"results",
                        {{{"request", "gpu"},
                          {"driver", kDriverName},
                          {"pool", "n1"},
                          {"device", "hami-gpu-0"},
                          {"shareID", "s-1"},
                          {"consumedCapacity", {{"memory", "1Gi"}, {"cores", "30"}}}}}}}}}}}}});
    auto d = Driver::Create(source_, {{"hami-gpu-0", "GPU-aaaa", uint64_t{8} << 30, true}}, o);
    ASSERT_TRUE(d.ok()) << d.error().message();
    driver_ = std::move(d).value();
    v1_ = std::make_unique<DraV1Service>(*driver_);
    v1beta1_ = std::make_unique<DraV1beta1Service>(*driver_);
    registration_ =
        std::make_unique<RegistrationService>(kDriverName, "/var/lib/kubelet/plugins/x/dra.sock",
                                              Health::kServed, [](std::string_view) {});
    health_ = std::make_unique<HealthService>(std::vector<DeviceHealth>{
        {"n1", "hami-gpu-0", true, "", 100}, {"n1", "hami-gpu-1", false, "Xid 79", 200}});
    auto dra =
        SocketServer::Start(root_.File("dra.sock"), {v1_.get(), v1beta1_.get(), health_.get()},
                            [this] { health_->EndStreams(); });
    ASSERT_TRUE(dra.ok()) << dra.error().message();
    dra_ = std::move(dra).value();
    auto reg =
        SocketServer::Start(root_.File(RegistrationSocketName(kDriverName)), {registration_.get()});
    ASSERT_TRUE(reg.ok()) << reg.error().message();
    reg_ = std::move(reg).value();
  }

  TempDir root_{"hami-dra-svc"};
  StaticClaimSource source_;
  std::unique_ptr<Driver> driver_;
  std::unique_ptr<DraV1Service> v1_;
  std::unique_ptr<DraV1beta1Service> v1beta1_;
  std::unique_ptr<RegistrationService> registration_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<SocketServer> dra_, reg_;
};

TEST_F(ServiceTest, RegistrationAnswersTheDraPluginInfo) {
  EXPECT_EQ(RegistrationSocketName(kDriverName), "hami-core-gpu.project-hami.io-reg.sock");
  auto stub = ::pluginregistration::Registration::NewStub(Channel(reg_->path()));
  grpc::ClientContext ctx;
  ::pluginregistration::PluginInfo info;
  ASSERT_TRUE(stub->GetInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.type(), "DRAPlugin");
  EXPECT_EQ(info.name(), "hami-core-gpu.project-hami.io");
  EXPECT_EQ(info.endpoint(), "/var/lib/kubelet/plugins/x/dra.sock");
  EXPECT_THAT(info.supported_versions(),
              ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"));

  EXPECT_FALSE(registration_->state().notified);
  grpc::ClientContext ctx2;
  ::pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(false);
  status.set_error("no such version");
  ::pluginregistration::RegistrationStatusResponse r;
  ASSERT_TRUE(stub->NotifyRegistrationStatus(&ctx2, status, &r).ok());
  EXPECT_TRUE(registration_->state().notified);
  EXPECT_FALSE(registration_->state().registered);
  EXPECT_EQ(registration_->state().error, "no such version");
}

TEST_F(ServiceTest, V1PreparesWithShareIdAndUnprepares) {
  auto stub = drav1::DRAPlugin::NewStub(Channel(dra_->path()));
  drav1::NodePrepareResourcesRequest req;
  auto* c = req.add_claims();
  c->set_namespace_("ml");
  c->set_uid("u-1");
  c->set_name("c");
  auto* missing = req.add_claims();
  missing->set_namespace_("ml");
  missing->set_uid("u-2");
  missing->set_name("gone");
  grpc::ClientContext ctx;
  drav1::NodePrepareResourcesResponse resp;
  ASSERT_TRUE(stub->NodePrepareResources(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.claims().size(), 2u);
  const auto& ok = resp.claims().at("u-1");
  EXPECT_EQ(ok.error(), "");
  ASSERT_EQ(ok.devices_size(), 1);
  EXPECT_THAT(ok.devices(0).request_names(), ElementsAre("gpu"));
  EXPECT_EQ(ok.devices(0).pool_name(), "n1");
  EXPECT_EQ(ok.devices(0).device_name(), "hami-gpu-0");
  EXPECT_THAT(ok.devices(0).cdi_device_ids(),
              ElementsAre("k8s.hami-core-gpu.project-hami.io/claim=u-1-hami-gpu-0-s-1"));
  ASSERT_TRUE(ok.devices(0).has_share_id());
  EXPECT_EQ(ok.devices(0).share_id(), "s-1");
  EXPECT_THAT(resp.claims().at("u-2").error(), HasSubstr("not found"));
  EXPECT_EQ(resp.claims().at("u-2").devices_size(), 0);

  drav1::NodeUnprepareResourcesRequest ureq;
  *ureq.add_claims() = *c;
  grpc::ClientContext uctx;
  drav1::NodeUnprepareResourcesResponse uresp;
  ASSERT_TRUE(stub->NodeUnprepareResources(&uctx, ureq, &uresp).ok());
  ASSERT_EQ(uresp.claims().size(), 1u);
  EXPECT_EQ(uresp.claims().at("u-1").error(), "");
  EXPECT_TRUE(driver_->Prepared().empty());
}

TEST_F(ServiceTest, V1beta1AnswersTheSameWithoutShareId) {
  auto stub = drav1beta1::DRAPlugin::NewStub(Channel(dra_->path()));
  drav1beta1::NodePrepareResourcesRequest req;
  auto* c = req.add_claims();
  c->set_namespace_("ml");
  c->set_uid("u-1");
  c->set_name("c");
  grpc::ClientContext ctx;
  drav1beta1::NodePrepareResourcesResponse resp;
  ASSERT_TRUE(stub->NodePrepareResources(&ctx, req, &resp).ok());
  const auto& ok = resp.claims().at("u-1");
  EXPECT_EQ(ok.error(), "");
  ASSERT_EQ(ok.devices_size(), 1);
  EXPECT_THAT(ok.devices(0).cdi_device_ids(),
              ElementsAre("k8s.hami-core-gpu.project-hami.io/claim=u-1-hami-gpu-0-s-1"));
}

TEST_F(ServiceTest, AClaimWithoutUidFailsTheCall) {
  auto stub = drav1::DRAPlugin::NewStub(Channel(dra_->path()));
  drav1::NodePrepareResourcesRequest req;
  req.add_claims()->set_name("c");
  grpc::ClientContext ctx;
  drav1::NodePrepareResourcesResponse resp;
  grpc::Status s = stub->NodePrepareResources(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(DraRegistration, OffersHealthOnlyWhenServed) {
  RegistrationService r(kDriverName, "/x/dra.sock", Health::kNotServed, [](std::string_view) {});
  ::pluginregistration::PluginInfo info;
  ASSERT_TRUE(r.GetInfo(nullptr, nullptr, &info).ok());
  EXPECT_THAT(info.supported_versions(), ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin"));
}

TEST_F(ServiceTest, HealthStreamSendsTheWholeListThenEachChange) {
  auto stub = ::v1alpha1::DRAResourceHealth::NewStub(Channel(dra_->path()));
  grpc::ClientContext ctx;
  auto stream = stub->NodeWatchResources(&ctx, {});
  ::v1alpha1::NodeWatchResourcesResponse msg;
  ASSERT_TRUE(stream->Read(&msg));
  ASSERT_EQ(msg.devices_size(), 2);
  EXPECT_EQ(msg.devices(0).device().pool_name(), "n1");
  EXPECT_EQ(msg.devices(0).device().device_name(), "hami-gpu-0");
  EXPECT_EQ(msg.devices(0).health(), ::v1alpha1::HEALTHY);
  EXPECT_EQ(msg.devices(0).last_updated_time(), 100);
  EXPECT_EQ(msg.devices(1).health(), ::v1alpha1::UNHEALTHY);
  EXPECT_EQ(msg.devices(1).message(), "Xid 79");

  health_->Set({{"n1", "hami-gpu-0", false, "Xid 48", 300}, {"n1", "hami-gpu-1", false, "", 200}});
  ASSERT_TRUE(stream->Read(&msg));
  ASSERT_EQ(msg.devices_size(), 2);  // the complete list again
  EXPECT_EQ(msg.devices(0).health(), ::v1alpha1::UNHEALTHY);
  EXPECT_EQ(msg.devices(0).message(), "Xid 48");
  EXPECT_EQ(msg.devices(0).last_updated_time(), 300);

  // A stop ends the open stream at once rather than at the shutdown's deadline.
  dra_->Stop(60'000);
  EXPECT_FALSE(stream->Read(&msg));
  grpc::Status s = stream->Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(health_->open_streams(), 0u);
}

TEST_F(ServiceTest, StopRemovesTheSocket) {
  const std::string path = dra_->path();
  ASSERT_TRUE(std::filesystem::exists(path));
  dra_->Stop();
  EXPECT_FALSE(std::filesystem::exists(path));
  // A regular file where the socket would go is refused, not removed.
  ASSERT_TRUE(std::ofstream(path) << "x");
  auto again = SocketServer::Start(path, {v1_.get()});
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.error().message(), HasSubstr("not a socket"));
  EXPECT_TRUE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace hami::dra
