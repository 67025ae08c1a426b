// The simulated kubelet's DRA manager against DRA drivers written here on the generated
// services (independent of src/dra), over real Unix sockets in a temporary directory; and
// against the real hami-dra-plugin when the build has it (root: the plugin prepares a
// root-owned lock directory).
#include "sim/kubelet/dra.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.h"
#include "draapi/dra_v1.grpc.pb.h"
#include "draapi/dra_v1beta1.grpc.pb.h"
#include "draapi/registration.grpc.pb.h"
#include "support/subprocess.h"

namespace hami::sim::kubelet {
namespace {

namespace reg = ::pluginregistration;
namespace v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1b = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kWaitMs = 20'000;  // bounds a failure; never reached when things work

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// A DRA driver of the test's own: the registration service on <reg>/<socket name> and the DRA
// service (v1 and v1beta1) on <plugins>/<name>/dra.sock. Each prepared claim gets one device
// "dev-<uid>" of request "gpu" with the CDI ID "<name>/claim=<uid>".
class FakeDriver {
 public:
  struct Options {
    std::string name = "gpu.example.com";
    std::string type = kDraPluginType;
    std::vector<std::string> versions = {kDraV1Service, kDraV1beta1Service};
    std::string socket_name;  // "": <name>-reg.sock
    bool endpoint = true;     // false: GetInfo gives none
  };

  FakeDriver(const TempDir& root, Options o)
      : o_(std::move(o)), reg_(*this), dra_v1_(*this), dra_v1beta1_(*this) {
    const std::string dir = root.File("plugins") + "/" + o_.name;
    std::filesystem::create_directories(dir);
    endpoint_ = dir + "/dra.sock";
    reg_socket_ =
        root.File("reg") + "/" + (o_.socket_name.empty() ? o_.name + "-reg.sock" : o_.socket_name);
  }
  ~FakeDriver() { Stop(); }

  // The DRA service first, then the registration socket (which the kubelet then sees).
  void Serve() {
    grpc::ServerBuilder dra;
    dra.AddListeningPort("unix:" + endpoint_, grpc::InsecureServerCredentials());
    dra.RegisterService(&dra_v1_);
    dra.RegisterService(&dra_v1beta1_);
    dra_server_ = dra.BuildAndStart();
    ASSERT_NE(dra_server_, nullptr);
    grpc::ServerBuilder r;
    r.AddListeningPort("unix:" + reg_socket_, grpc::InsecureServerCredentials());
    r.RegisterService(&reg_);
    reg_server_ = r.BuildAndStart();
    ASSERT_NE(reg_server_, nullptr);
  }
  // Stops serving registration: gRPC removes the socket.
  void StopRegistration() {
    if (reg_server_) {
      reg_server_->Shutdown(std::chrono::system_clock::now());
      reg_server_->Wait();
      reg_server_.reset();
    }
  }
  void Stop() {
    StopRegistration();
    if (dra_server_) {
      dra_server_->Shutdown(std::chrono::system_clock::now());
      dra_server_->Wait();
      dra_server_.reset();
    }
  }

  bool WaitForNotification(size_t count) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(kWaitMs),
                        [&] { return notifications_.size() >= count; });
  }

  const std::string& endpoint() const { return endpoint_; }
  const std::string& registration_socket() const { return reg_socket_; }

  // What the kubelet sent, under the lock.
  struct Seen {
    int get_info = 0;
    std::vector<std::pair<bool, std::string>> notifications;
    std::vector<std::string> calls;  // "v1 prepare uid1,uid2", "v1beta1 unprepare uid1"
  };
  Seen seen() {
    std::lock_guard l(mu_);
    return {get_info_, notifications_, calls_};
  }

  // Per claim UID: an error to answer, a claim to leave out, a UID to add.
  void FailClaim(const std::string& uid, const std::string& error) {
    std::lock_guard l(mu_);
    errors_[uid] = error;
  }
  void ClearFailures() {
    std::lock_guard l(mu_);
    errors_.clear();
    skip_.clear();
    extra_.clear();
  }
  void SkipClaim(const std::string& uid) {
    std::lock_guard l(mu_);
    skip_.insert(uid);
  }
  void AddUnaskedClaim(const std::string& uid) {
    std::lock_guard l(mu_);
    extra_ = uid;
  }

 private:
  class Registration final : public reg::Registration::Service {
   public:
    explicit Registration(FakeDriver& d) : d_(d) {}
    grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*,
                         reg::PluginInfo* info) override {
      std::lock_guard l(d_.mu_);
      ++d_.get_info_;
      info->set_type(d_.o_.type);
      info->set_name(d_.o_.name);
      if (d_.o_.endpoint) info->set_endpoint(d_.endpoint_);
      for (const std::string& v : d_.o_.versions) info->add_supported_versions(v);
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const reg::RegistrationStatus* s,
                                          reg::RegistrationStatusResponse*) override {
      std::lock_guard l(d_.mu_);
      d_.notifications_.emplace_back(s->plugin_registered(), s->error());
      d_.cv_.notify_all();
      return grpc::Status::OK;
    }

   private:
    FakeDriver& d_;
  };

  template <typename Request>
  std::string Record(const char* version, const char* verb, const Request& r) {
    std::string uids;
    for (const auto& c : r.claims()) uids += (uids.empty() ? "" : ",") + c.uid();
    calls_.push_back(std::string(version) + " " + verb + " " + uids);
    return uids;
  }

  template <typename Request, typename Response>
  void Prepare(const char* version, const Request& r, Response* out, bool share_id) {
    std::lock_guard l(mu_);
    Record(version, "prepare", r);
    for (const auto& c : r.claims()) {
      if (skip_.contains(c.uid())) continue;
      auto& entry = (*out->mutable_claims())[c.uid()];
      if (auto e = errors_.find(c.uid()); e != errors_.end()) {
        entry.set_error(e->second);
        continue;
      }
      auto* d = entry.add_devices();
      d->add_request_names("gpu");
      d->set_pool_name("node-a");
      d->set_device_name("dev-" + c.uid());
      d->add_cdi_device_ids(o_.name + "/claim=" + c.uid());
      if constexpr (std::is_same_v<Response, v1::NodePrepareResourcesResponse>) {
        if (share_id) d->set_share_id("share-" + c.uid());
      }
    }
    if (!extra_.empty()) (*out->mutable_claims())[extra_];
  }

  template <typename Request, typename Response>
  void Unprepare(const char* version, const Request& r, Response* out) {
    std::lock_guard l(mu_);
    Record(version, "unprepare", r);
    for (const auto& c : r.claims()) {
      auto& entry = (*out->mutable_claims())[c.uid()];
      if (auto e = errors_.find(c.uid()); e != errors_.end()) entry.set_error(e->second);
    }
  }

  class DraV1 final : public v1::DRAPlugin::Service {
   public:
    explicit DraV1(FakeDriver& d) : d_(d) {}
    grpc::Status NodePrepareResources(grpc::ServerContext*,
                                      const v1::NodePrepareResourcesRequest* r,
                                      v1::NodePrepareResourcesResponse* out) override {
      d_.Prepare("v1", *r, out, true);
      return grpc::Status::OK;
    }
    grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                        const v1::NodeUnprepareResourcesRequest* r,
                                        v1::NodeUnprepareResourcesResponse* out) override {
      d_.Unprepare("v1", *r, out);
      return grpc::Status::OK;
    }

   private:
    FakeDriver& d_;
  };
  class DraV1beta1 final : public v1b::DRAPlugin::Service {
   public:
    explicit DraV1beta1(FakeDriver& d) : d_(d) {}
    grpc::Status NodePrepareResources(grpc::ServerContext*,
                                      const v1b::NodePrepareResourcesRequest* r,
                                      v1b::NodePrepareResourcesResponse* out) override {
      d_.Prepare("v1beta1", *r, out, false);
      return grpc::Status::OK;
    }
    grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                        const v1b::NodeUnprepareResourcesRequest* r,
                                        v1b::NodeUnprepareResourcesResponse* out) override {
      d_.Unprepare("v1beta1", *r, out);
      return grpc::Status::OK;
    }

   private:
    FakeDriver& d_;
  };

  const Options o_;
  std::string endpoint_, reg_socket_;
  Registration reg_;
  DraV1 dra_v1_;
  DraV1beta1 dra_v1beta1_;
  std::unique_ptr<grpc::Server> dra_server_, reg_server_;
  std::mutex mu_;
  std::condition_variable cv_;
  int get_info_ = 0;
  std::vector<std::pair<bool, std::string>> notifications_;
  std::vector<std::string> calls_;
  std::map<std::string, std::string> errors_;
  std::set<std::string> skip_;
  std::string extra_;
};

// Options for a fake driver named `name`, changed by `change`.
template <typename Change>
FakeDriver::Options Driver(const std::string& name, Change change) {
  FakeDriver::Options o;
  o.name = name;
  change(o);
  return o;
}
FakeDriver::Options Driver(const std::string& name) {
  return Driver(name, [](FakeDriver::Options&) {});
}

class DraManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(root_.ok());
    std::filesystem::create_directories(root_.File("reg"));
    std::filesystem::create_directories(root_.File("plugins"));
    DraManagerOptions o;
    o.registry_dir = root_.File("reg");
    o.call_timeout_ms = kWaitMs;
    manager_ = std::make_unique<DraManager>(o);
    ASSERT_TRUE(manager_->Start().ok());
  }

  static DraClaim Claim(const std::string& uid, std::vector<std::string> drivers) {
    return {"ns", "claim-" + uid, uid, std::move(drivers)};
  }

  TempDir root_{"hami-sim-dra"};
  std::unique_ptr<DraManager> manager_;
};

TEST_F(DraManagerTest, RegistersADriverAndPreparesItsClaimsInOneCallPerDriver) {
  FakeDriver a(root_, Driver("a.example.com"));
  FakeDriver b(root_, Driver("b.example.com"));
  a.Serve();
  b.Serve();
  ASSERT_TRUE(manager_->WaitForPlugin("a.example.com", kWaitMs));
  ASSERT_TRUE(manager_->WaitForPlugin("b.example.com", kWaitMs));
  ASSERT_TRUE(a.WaitForNotification(1));
  EXPECT_THAT(a.seen().notifications, ElementsAre(std::pair<bool, std::string>(true, "")));
  auto plugin = manager_->Plugin("a.example.com");
  ASSERT_TRUE(plugin.has_value());
  EXPECT_EQ(plugin->version, kDraV1Service) << "the first entry of the list that it knows";
  EXPECT_EQ(plugin->endpoint, a.endpoint());
  EXPECT_EQ(plugin->registration, a.registration_socket());

  auto out = manager_->Prepare(
      "pod-1", {Claim("u1", {"a.example.com"}), Claim("u2", {"a.example.com", "b.example.com"}),
                Claim("u3", {"b.example.com"})});
  EXPECT_THAT(a.seen().calls, ElementsAre("v1 prepare u1,u2"));
  EXPECT_THAT(b.seen().calls, ElementsAre("v1 prepare u2,u3"));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out["u1"].error, "");
  ASSERT_EQ(out["u1"].devices.size(), 1u);
  const DraDevice& d = out["u1"].devices[0];
  EXPECT_EQ(d.driver, "a.example.com");
  EXPECT_THAT(d.request_names, ElementsAre("gpu"));
  EXPECT_EQ(d.pool, "node-a");
  EXPECT_EQ(d.device, "dev-u1");
  EXPECT_THAT(d.cdi_device_ids, ElementsAre("a.example.com/claim=u1"));
  EXPECT_EQ(d.share_id, std::optional<std::string>("share-u1"));
  ASSERT_EQ(out["u2"].devices.size(), 2u) << "one device from each of its drivers";
  EXPECT_EQ(out["u2"].devices[0].driver, "a.example.com");
  EXPECT_EQ(out["u2"].devices[1].driver, "b.example.com");
  EXPECT_EQ(manager_->PreparedClaims(), (std::set<std::string>{"u1", "u2", "u3"}));

  EXPECT_THAT(manager_->Unprepare("pod-1"), IsEmpty());
  EXPECT_THAT(a.seen().calls, ElementsAre("v1 prepare u1,u2", "v1 unprepare u1,u2"));
  EXPECT_THAT(b.seen().calls, ElementsAre("v1 prepare u2,u3", "v1 unprepare u2,u3"));
  EXPECT_THAT(manager_->PreparedClaims(), IsEmpty());
}

TEST_F(DraManagerTest, UsesTheFirstKnownVersionOfThePluginsList) {
  FakeDriver d(root_, Driver("gpu.example.com", [](FakeDriver::Options& o) {
                 o.versions = {"v1alpha1.DRAResourceHealth", kDraV1beta1Service, kDraV1Service};
               }));
  d.Serve();
  ASSERT_TRUE(manager_->WaitForPlugin("gpu.example.com", kWaitMs));
  EXPECT_EQ(manager_->Plugin("gpu.example.com")->version, kDraV1beta1Service);
  auto out = manager_->Prepare("pod-1", {Claim("u1", {"gpu.example.com"})});
  EXPECT_THAT(d.seen().calls, ElementsAre("v1beta1 prepare u1"));
  ASSERT_EQ(out["u1"].devices.size(), 1u);
  EXPECT_EQ(out["u1"].devices[0].share_id, std::nullopt) << "v1beta1 has no share_id";
}

TEST_F(DraManagerTest, RefusesARegistrationThatIsNotAUsableDraPluginAndTellsIt) {
  struct Case {
    FakeDriver::Options options;
    std::string error;
  };
  const std::vector<Case> cases = {
      {Driver("t.example.com", [](FakeDriver::Options& o) { o.type = "CSIPlugin"; }),
       "plugin type \"CSIPlugin\" is not \"DRAPlugin\""},
      {Driver("", [](FakeDriver::Options& o) { o.socket_name = "noname-reg.sock"; }),
       "the plugin gave no name"},
      {Driver("e.example.com", [](FakeDriver::Options& o) { o.endpoint = false; }),
       "plugin e.example.com gave no endpoint"},
      {Driver("v.example.com",
              [](FakeDriver::Options& o) {
                o.versions = {"v1alpha1.DRAResourceHealth", "v2.DRAPlugin"};
              }),
       "plugin v.example.com: none of its supported versions [\"v1alpha1.DRAResourceHealth\", "
       "\"v2.DRAPlugin\"] is known to this kubelet (v1.DRAPlugin, v1beta1.DRAPlugin)"},
  };
  uint64_t rejected = 0;
  for (const Case& c : cases) {
    FakeDriver d(root_, c.options);
    d.Serve();
    ASSERT_TRUE(manager_->WaitForRejections(++rejected, kWaitMs)) << c.error;
    EXPECT_THAT(manager_->last_rejection(), HasSubstr(c.error));
    EXPECT_THAT(manager_->last_rejection(), HasSubstr(d.registration_socket()))
        << "the message names the socket";
    ASSERT_TRUE(d.WaitForNotification(1));
    EXPECT_THAT(d.seen().notifications, ElementsAre(std::pair<bool, std::string>(false, c.error)));
    EXPECT_FALSE(manager_->Plugin(c.options.name).has_value());
  }
}

TEST_F(DraManagerTest, IgnoresSocketsWhoseNameStartsWithADot) {
  FakeDriver hidden(root_, Driver("hidden.example.com", [](FakeDriver::Options& o) {
                      o.socket_name = ".hidden-reg.sock";
                    }));
  hidden.Serve();
  FakeDriver shown(root_, Driver("shown.example.com"));
  shown.Serve();
  // One watcher handles the directory's events in order: once the later socket is
  // registered, the earlier one has been passed over.
  ASSERT_TRUE(manager_->WaitForPlugin("shown.example.com", kWaitMs));
  EXPECT_EQ(hidden.seen().get_info, 0);
  EXPECT_FALSE(manager_->Plugin("hidden.example.com").has_value());
}

TEST_F(DraManagerTest, RegistersSocketsPresentAtStartAndDeregistersARemovedOne) {
  manager_->Stop();
  FakeDriver d(root_, Driver("gpu.example.com"));
  d.Serve();
  ASSERT_TRUE(manager_->Start().ok());
  ASSERT_TRUE(manager_->WaitForPlugin("gpu.example.com", kWaitMs));
  d.StopRegistration();
  ASSERT_FALSE(Exists(d.registration_socket()));
  EXPECT_TRUE(manager_->WaitForNoPlugin("gpu.example.com", kWaitMs));
  auto out = manager_->Prepare("pod-1", {Claim("u1", {"gpu.example.com"})});
  EXPECT_EQ(out["u1"].error, "DRA driver gpu.example.com is not registered on this node");
  EXPECT_THAT(manager_->PreparedClaims(), IsEmpty());
}

TEST_F(DraManagerTest, ReportsEachClaimsFailureAndPreparesItAgainOnRetry) {
  FakeDriver d(root_, Driver("gpu.example.com"));
  d.Serve();
  ASSERT_TRUE(manager_->WaitForPlugin("gpu.example.com", kWaitMs));
  d.FailClaim("u1", "device hami-gpu-7 is not on this node");
  auto out = manager_->Prepare(
      "pod-1", {Claim("u1", {"gpu.example.com"}), Claim("u2", {"gpu.example.com"})});
  EXPECT_EQ(out["u1"].error, "gpu.example.com: device hami-gpu-7 is not on this node");
  EXPECT_THAT(out["u1"].devices, IsEmpty());
  EXPECT_EQ(out["u2"].error, "");
  EXPECT_EQ(manager_->PreparedClaims(), std::set<std::string>{"u2"});

  d.ClearFailures();
  d.SkipClaim("u1");
  out = manager_->Prepare("pod-1",
                          {Claim("u1", {"gpu.example.com"}), Claim("u2", {"gpu.example.com"})});
  EXPECT_EQ(out["u1"].error,
            "gpu.example.com: NodePrepareResources skipped claim ns/claim-u1 (u1)");
  EXPECT_EQ(out["u2"].error, "") << "already prepared: not sent again";

  d.ClearFailures();
  d.AddUnaskedClaim("u9");
  out = manager_->Prepare("pod-1", {Claim("u1", {"gpu.example.com"})});
  EXPECT_EQ(out["u1"].error,
            "gpu.example.com: NodePrepareResources answered for claim UID u9, which was not "
            "asked for; the answer is ignored");

  d.ClearFailures();
  out = manager_->Prepare("pod-1", {Claim("u1", {"gpu.example.com"})});
  EXPECT_EQ(out["u1"].error, "");
  EXPECT_THAT(d.seen().calls,
              ElementsAre("v1 prepare u1,u2", "v1 prepare u1", "v1 prepare u1", "v1 prepare u1"));
}

TEST_F(DraManagerTest, AClaimSharedByPodsIsPreparedOnceAndUnpreparedWithItsLastPod) {
  FakeDriver d(root_, Driver("gpu.example.com"));
  d.Serve();
  ASSERT_TRUE(manager_->WaitForPlugin("gpu.example.com", kWaitMs));
  auto first = manager_->Prepare("pod-1", {Claim("u1", {"gpu.example.com"})});
  auto second = manager_->Prepare("pod-2", {Claim("u1", {"gpu.example.com"})});
  EXPECT_EQ(second["u1"].devices, first["u1"].devices);
  EXPECT_THAT(d.seen().calls, ElementsAre("v1 prepare u1"));
  EXPECT_THAT(manager_->Unprepare("pod-1"), IsEmpty());
  EXPECT_THAT(d.seen().calls, ElementsAre("v1 prepare u1")) << "pod-2 still uses it";

  d.FailClaim("u1", "cannot remove /x");
  auto errors = manager_->Unprepare("pod-2");
  EXPECT_EQ(errors["u1"], "gpu.example.com: cannot remove /x");
  EXPECT_EQ(manager_->PreparedClaims(), std::set<std::string>{"u1"}) << "kept to try again";
  d.ClearFailures();
  EXPECT_THAT(manager_->Unprepare("pod-3"), IsEmpty()) << "any later Unprepare retries it";
  EXPECT_THAT(d.seen().calls, ElementsAre("v1 prepare u1", "v1 unprepare u1", "v1 unprepare u1"));
  EXPECT_THAT(manager_->PreparedClaims(), IsEmpty());
}

#ifdef HAMI_DRA_PLUGIN_BIN
// The real hami-dra-plugin: it registers as the kubelet expects, prepares a claim that an HTTP
// server of the test's own serves as resource.k8s.io/v1 does, and removes its files again.
TEST(DraManagerRealPlugin, RegistersPreparesAndUnpreparesAClaim) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the plugin prepares a root-owned lock dir";
  TempDir root("hami-sim-dra-real");
  ASSERT_TRUE(root.ok());
  for (const char* d : {"reg", "plugins", "cdi", "hook", "lock"}) {
    ASSERT_TRUE(std::filesystem::create_directories(root.File(d)));
  }
  ASSERT_TRUE(std::ofstream(root.File("libvgpu.so")) << "ELF");
  const nlohmann::json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"namespace", "ml"}, {"name", "c"}, {"uid", "c-1"}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results",
             {{{"request", "gpu"},
               {"driver", "hami-core-gpu.project-hami.io"},
               {"pool", "n1"},
               {"device", "hami-gpu-0"},
               {"shareID", "s-1"},
               {"consumedCapacity", {{"memory", "2000Mi"}, {"cores", "25"}}}}}}}}}}}}};
  httplib::Server server;
  server.Get("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c",
             [&](const httplib::Request&, httplib::Response& res) {
               res.set_content(claim.dump(), "application/json");
             });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  std::ofstream(root.File("kubeconfig"))
      << "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: "
         "\"http://127.0.0.1:"
      << port
      << "\"}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
         "users:\n- name: u\n  user: {token: t}\n";

  DraManagerOptions o;
  o.registry_dir = root.File("reg");
  DraManager manager(o);
  ASSERT_TRUE(manager.Start().ok());
  ::hami::testing::Subprocess plugin(
      {HAMI_DRA_PLUGIN_BIN, "--node-name=n1", "--kubeconfig=" + root.File("kubeconfig"),
       "--plugins-registry-dir=" + root.File("reg"), "--plugins-dir=" + root.File("plugins"),
       "--cdi-dir=" + root.File("cdi"), "--hook-path=" + root.File("hook"),
       "--lock-parent=" + root.File("lock"), "--vgpu-library=" + root.File("libvgpu.so"),
       std::string("--nvml-library=") + HAMI_SIM_NVML_LIB,
       std::string("--cuda-library=") + HAMI_SIM_CUDA_LIB, "--no-publish-resource-slice"},
      std::map<std::string, std::string>{{"HAMI_SIM_PROFILE", "h100-80g:1"}});
  ASSERT_TRUE(manager.WaitForPlugin("hami-core-gpu.project-hami.io", kWaitMs))
      << manager.last_rejection();
  EXPECT_EQ(manager.Plugin("hami-core-gpu.project-hami.io")->version, kDraV1Service);

  auto out = manager.Prepare("pod-1", {{"ml", "c", "c-1", {"hami-core-gpu.project-hami.io"}}});
  ASSERT_EQ(out["c-1"].error, "");
  ASSERT_EQ(out["c-1"].devices.size(), 1u);
  const DraDevice& d = out["c-1"].devices[0];
  EXPECT_THAT(d.request_names, ElementsAre("gpu"));
  EXPECT_EQ(d.pool, "n1");
  EXPECT_EQ(d.device, "hami-gpu-0");
  EXPECT_EQ(d.share_id, std::optional<std::string>("s-1"));
  EXPECT_THAT(d.cdi_device_ids,
              ElementsAre("k8s.hami-core-gpu.project-hami.io/claim=c-1-hami-gpu-0-s-1"));
  const std::string spec = root.File("cdi") + "/k8s.hami-core-gpu.project-hami.io-claim_c-1.json";
  EXPECT_TRUE(Exists(spec));
  EXPECT_THAT(manager.Unprepare("pod-1"), IsEmpty());
  EXPECT_FALSE(Exists(spec));
  plugin.Kill(SIGTERM);
  EXPECT_EQ(plugin.Wait(30000), 0);
  server.stop();
  serving.join();
}
#endif

}  // namespace
}  // namespace hami::sim::kubelet
