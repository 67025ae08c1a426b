// hami-dra-plugin itself, as the kubelet meets it: the real binary on the simulated NVML, an
// HTTP server answering for resource.k8s.io/v1 claims, and a gRPC client on its sockets. The plugin
// is killed (SIGKILL) between prepare and unprepare, the claim deleted, and a new plugin started on
// the same directories answers the repeat from its checkpoint and removes every file on unprepare;
// it stops on SIGTERM with the kubelet's health stream open. Root: the plugin prepares its lock
// directory root-owned (seed 000). And the binary against the simulated API server: the node's
// ResourceSlice published at start.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/temp_dir.h"
#include "dra/service.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "support/subprocess.h"

namespace hami::dra {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0)
      GTEST_SKIP() << "needs root: the plugin prepares a root-owned lock directory";
    ASSERT_TRUE(root_.ok());
    for (const char* d : {"reg", "plugins", "cdi", "hook", "lock"}) {
      ASSERT_TRUE(std::filesystem::create_directories(root_.File(d)));
    }
    ASSERT_TRUE(std::ofstream(root_.File("libvgpu.so")) << "ELF");
    server_.Get("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c",
                [this](const httplib::Request&, httplib::Response& res) {
                  if (claim_deleted_) {
                    res.status = 404;
                    res.set_content(R"({"kind":"Status","apiVersion":"v1","status":"Failure",)"
                                    R"("reason":"NotFound","code":404})",
                                    "application/json");
                    return;
                  }
                  res.set_content(Claim().dump(), "application/json");
                });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    serving_ = std::thread([this] { server_.listen_after_bind(); });
    std::ofstream(root_.File("kubeconfig"))
        << "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: "
           "\"http://127.0.0.1:"
        << port_
        << "\"}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
           "users:\n- name: u\n  user: {token: t}\n";
  }

  void TearDown() override {
    if (serving_.joinable()) {
      server_.stop();
      serving_.join();
    }
  }

  static json Claim() {
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaim"},
            {"metadata", {{"namespace", "ml"}, {"name", "c"}, {"uid", "u-1"}}},
            {"status",
             {{"allocation",
               {{"devices",
                 {{"results",
                   {{{"request", "gpu"},
                     {"driver", kDriverName},
                     {"pool", "n1"},
                     {"device", "hami-gpu-0"},
                     {"shareID", "s-1"},
                     {"consumedCapacity", {{"memory", "3000Mi"}, {"cores", "30"}}}}}}}}}}}}};
  }

  std::unique_ptr<testing::Subprocess> StartPlugin() {
    auto p = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{
            HAMI_DRA_PLUGIN_BIN, "--node-name=n1", "--kubeconfig=" + root_.File("kubeconfig"),
            "--plugins-registry-dir=" + root_.File("reg"), "--plugins-dir=" + root_.File("plugins"),
            "--cdi-dir=" + root_.File("cdi"), "--hook-path=" + root_.File("hook"),
            "--lock-parent=" + root_.File("lock"), "--vgpu-library=" + root_.File("libvgpu.so"),
            "--nvml-library=" HAMI_SIM_NVML_LIB, "--cuda-library=" HAMI_SIM_CUDA_LIB},
        std::map<std::string, std::string>{{"HAMI_SIM_PROFILE", "h100-80g:1"}});
    auto line = p->WaitForLine("hami-dra-plugin: serving", 30000);
    EXPECT_TRUE(line.has_value()) << "the plugin did not start";
    return p;
  }

  std::string DraSocket() {
    return root_.File("plugins") + "/hami-core-gpu.project-hami.io/dra.sock";
  }
  std::string RegSocket() { return root_.File("reg") + "/hami-core-gpu.project-hami.io-reg.sock"; }

  drav1::NodePrepareResourceResponse Prepare() {
    auto stub = drav1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix:" + DraSocket(), grpc::InsecureChannelCredentials()));
    drav1::NodePrepareResourcesRequest req;
    auto* c = req.add_claims();
    c->set_namespace_("ml");
    c->set_uid("u-1");
    c->set_name("c");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
    drav1::NodePrepareResourcesResponse resp;
    grpc::Status s = stub->NodePrepareResources(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.claims().count("u-1") ? resp.claims().at("u-1")
                                      : drav1::NodePrepareResourceResponse{};
  }

  std::string Unprepare() {
    auto stub = drav1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix:" + DraSocket(), grpc::InsecureChannelCredentials()));
    drav1::NodeUnprepareResourcesRequest req;
    auto* c = req.add_claims();
    c->set_namespace_("ml");
    c->set_uid("u-1");
    c->set_name("c");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
    drav1::NodeUnprepareResourcesResponse resp;
    grpc::Status s = stub->NodeUnprepareResources(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.claims().count("u-1") ? resp.claims().at("u-1").error() : "no answer";
  }

  TempDir root_{"hami-dra-daemon"};
  httplib::Server server_;
  std::thread serving_;
  int port_ = 0;
  std::atomic<bool> claim_deleted_{false};
};

TEST_F(DaemonTest, KilledBetweenPrepareAndUnprepareItsSuccessorCleansUp) {
  const std::string spec = root_.File("cdi") + "/k8s.hami-core-gpu.project-hami.io-claim_u-1.json";
  const std::string dir = root_.File("hook") + "/vgpu/containers/u-1_claim";
  const std::string limits = dir + ".limits";
  drav1::NodePrepareResourceResponse first;
  {
    auto plugin = StartPlugin();
    // Registration, as the kubelet reads it.
    auto reg = ::pluginregistration::Registration::NewStub(
        grpc::CreateChannel("unix:" + RegSocket(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ::pluginregistration::PluginInfo info;
    ASSERT_TRUE(reg->GetInfo(&ctx, {}, &info).ok());
    EXPECT_EQ(info.endpoint(), DraSocket());
    EXPECT_THAT(info.supported_versions(),
                ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"));

    first = Prepare();
    ASSERT_EQ(first.error(), "");
    ASSERT_EQ(first.devices_size(), 1);
    EXPECT_THAT(first.devices(0).cdi_device_ids(),
                ElementsAre("k8s.hami-core-gpu.project-hami.io/claim=u-1-hami-gpu-0-s-1"));
    EXPECT_TRUE(Exists(spec));
    EXPECT_TRUE(Exists(dir));
    std::ifstream in(limits);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n"));
    EXPECT_THAT(text, HasSubstr("CUDA_DEVICE_SM_LIMIT=30\n"));
    plugin->Kill(SIGKILL);
    EXPECT_EQ(plugin->Wait(30000), 128 + SIGKILL);
  }
  claim_deleted_ = true;
  auto successor = StartPlugin();
  // The kubelet, restarted too, prepares again: the same answer, from the checkpoint.
  drav1::NodePrepareResourceResponse again = Prepare();
  EXPECT_EQ(again.SerializeAsString(), first.SerializeAsString());
  EXPECT_EQ(Unprepare(), "");
  EXPECT_FALSE(Exists(spec));
  EXPECT_FALSE(Exists(dir));
  EXPECT_FALSE(Exists(limits));
  EXPECT_TRUE(Exists(root_.File("lock") + "/vgpulock"));
  // The kubelet's health stream is open when the plugin is told to stop: it ends, and the
  // plugin stops without waiting for it.
  auto health = ::v1alpha1::DRAResourceHealth::NewStub(
      grpc::CreateChannel("unix:" + DraSocket(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext hctx;
  auto stream = health->NodeWatchResources(&hctx, {});
  ::v1alpha1::NodeWatchResourcesResponse devices;
  ASSERT_TRUE(stream->Read(&devices));
  ASSERT_EQ(devices.devices_size(), 1);
  EXPECT_EQ(devices.devices(0).device().pool_name(), "n1");
  EXPECT_EQ(devices.devices(0).device().device_name(), "hami-gpu-0");
  EXPECT_EQ(devices.devices(0).health(), ::v1alpha1::HEALTHY);
  successor->Kill(SIGTERM);
  EXPECT_EQ(successor->Wait(30000), 0);
  EXPECT_FALSE(Exists(DraSocket()));
  EXPECT_FALSE(Exists(RegSocket()));
  EXPECT_FALSE(stream->Read(&devices));
}

TEST_F(DaemonTest, PublishesTheNodesSliceToTheApiServerAtStart) {
  auto api = sim::kube::ApiServer::Start({});
  ASSERT_TRUE(api.ok()) << api.error().message();
  auto node = (*api)->CreateObject(kube::kNodes, {{"metadata", {{"name", "n1"}}}});
  ASSERT_TRUE(node.ok()) << node.error().message();
  ASSERT_TRUE((*api)->WriteKubeconfig(root_.File("kubeconfig")).ok());
  kube::Config config;
  config.server = (*api)->url();
  config.source = "test";
  auto client = kube::Client::Create(config);
  ASSERT_TRUE(client.ok()) << client.error().message();

  auto plugin = StartPlugin();
  // The slice as the API server announces it: a watch from the start, until it is there.
  json slice;
  kube::WatchOptions wo;
  wo.field_selector = "spec.nodeName=n1";
  wo.timeout_seconds = 30;
  auto watched = (*client)->Watch(kube::kResourceSlices, "", wo, [&](kube::WatchEvent&& e) {
    if (e.type != kube::WatchEventType::kAdded) return true;
    slice = std::move(e.object);
    return false;
  });
  ASSERT_TRUE(watched.ok()) << watched.error().message();
  ASSERT_TRUE(slice.is_object()) << "no slice within the watch's 30 s";
  EXPECT_EQ(slice["metadata"]["name"], "n1-hami-core-gpu");
  EXPECT_EQ(slice["metadata"]["ownerReferences"][0]["uid"], (*node)["metadata"]["uid"]);
  EXPECT_EQ(slice["spec"]["driver"], kDriverName);
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 1);
  ASSERT_EQ(slice["spec"]["devices"].size(), 1u);  // h100-80g:1
  EXPECT_EQ(slice["spec"]["devices"][0]["name"], "hami-gpu-0");
  EXPECT_EQ(slice["spec"]["devices"][0]["attributes"]["productName"]["string"],
            "NVIDIA H100 80GB HBM3");

  plugin->Kill(SIGTERM);
  EXPECT_EQ(plugin->Wait(30000), 0);
  client->reset();
  (*api)->Stop();
}

}  // namespace
}  // namespace hami::dra
