#include "plugin/registrar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "sim/kubelet/kubelet.h"

namespace hami::plugin {
namespace {

using ::testing::HasSubstr;

// Bounds a failure; reached only when something is broken.
constexpr int64_t kWaitMs = 20'000;
// The bound for re-registration after a kubelet restart, with the default backoff.
constexpr int64_t kReRegisterMs = 5'000;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

ino_t Inode(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

std::unique_ptr<DevicePluginService> NewService() {
  ServiceOptions options;
  options.allocate = [](const std::vector<ContainerRequest>& containers)
      -> Result<std::vector<ContainerResponse>> {
    return std::vector<ContainerResponse>(containers.size());
  };
  options.prefer = [](const std::vector<PreferredRequest>& containers)
      -> Result<std::vector<std::vector<std::string>>> {
    return std::vector<std::vector<std::string>>(containers.size());
  };
  auto service = std::make_unique<DevicePluginService>(std::move(options));
  service->SetDevices({{"GPU-a-0", true, -1}, {"GPU-a-1", true, -1}});
  return service;
}

class PluginRegistrar : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    sim::kubelet::KubeletOptions k;
    k.dir = dir_.path();
    kubelet_ = std::make_unique<sim::kubelet::Kubelet>(k);
    service_ = NewService();
  }

  RegistrarOptions Options(int64_t initial_backoff_ms = 20) const {
    RegistrarOptions o;
    o.kubelet_socket = dir_.File("kubelet.sock");
    o.backoff = {initial_backoff_ms, 4 * initial_backoff_ms};
    return o;
  }

  void StartRegistrar(RegistrarOptions options) {
    registrar_ = std::make_unique<Registrar>(service_.get(), std::move(options));
    Status s = registrar_->Start();
    ASSERT_TRUE(s.ok()) << s.error().message();
  }

  TempDir dir_{"hami-preg"};
  std::unique_ptr<sim::kubelet::Kubelet> kubelet_;
  std::unique_ptr<DevicePluginService> service_;
  std::unique_ptr<Registrar> registrar_;
};

TEST_F(PluginRegistrar, ServesThenRegistersAsTheApiAsks) {
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_NO_FATAL_FAILURE(StartRegistrar(Options()));
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWaitMs));
  auto p = kubelet_->Plugin("nvidia.com/gpu");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->version, "v1beta1");
  EXPECT_EQ(p->endpoint, "hami-nvidia.sock");
  EXPECT_TRUE(p->get_preferred_allocation_available);
  EXPECT_EQ(registrar_->plugin_socket(), dir_.File("hami-nvidia.sock"));
  auto devices = kubelet_->WaitForDevices("nvidia.com/gpu", 0, kWaitMs);
  ASSERT_TRUE(devices.ok()) << devices.error().message();
  EXPECT_EQ(devices->size(), 2u);
  ASSERT_TRUE(registrar_->WaitForRegistrations(1, kWaitMs));
  RegistrarCounters c = registrar_->Counters();
  EXPECT_EQ(c.serves, 1u);
  EXPECT_TRUE(c.registered);
  EXPECT_THAT(c.ToKeyValues(), HasSubstr("registrations=1"));
}

TEST_F(PluginRegistrar, RegistersAgainAfterAKubeletRestart) {
  ASSERT_TRUE(kubelet_->Start().ok());
  // The default backoff: re-registration is driven by the new kubelet.sock, not by retries.
  ASSERT_NO_FATAL_FAILURE(StartRegistrar(Options(/*initial_backoff_ms=*/1000)));
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWaitMs));
  ASSERT_TRUE(kubelet_->Restart().ok());  // removes the plugin's socket, as the kubelet does
  EXPECT_TRUE(kubelet_->WaitForRegistrations(2, kReRegisterMs))
      << registrar_->Counters().ToKeyValues();
  // The new kubelet.sock is seen (it may come after the lost socket already led to a
  // registration with the new kubelet; then the plugin serves and registers once more).
  ASSERT_TRUE(registrar_->WaitForCounters(
      [](const RegistrarCounters& c) { return c.kubelet_restarts >= 1 && c.registered; }, kWaitMs));
  EXPECT_TRUE(Exists(registrar_->plugin_socket()));
  EXPECT_TRUE(kubelet_->Connected("nvidia.com/gpu"));
}

TEST_F(PluginRegistrar, ServesAgainWhenItsSocketIsRemoved) {
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_NO_FATAL_FAILURE(StartRegistrar(Options()));
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWaitMs));
  ASSERT_TRUE(registrar_->WaitForRegistrations(1, kWaitMs));
  ASSERT_EQ(unlink(registrar_->plugin_socket().c_str()), 0);
  ASSERT_TRUE(registrar_->WaitForRegistrations(2, kWaitMs)) << registrar_->Counters().ToKeyValues();
  EXPECT_TRUE(Exists(registrar_->plugin_socket()));
  EXPECT_EQ(registrar_->Counters().socket_losses, 1u);
  EXPECT_EQ(registrar_->Counters().serves, 2u);
  EXPECT_EQ(kubelet_->registrations(), 2u);
  // The kubelet reaches the new socket: its ListAndWatch delivers the next change.
  service_->SetDevices({{"GPU-a-0", false, -1}});
  EXPECT_TRUE(kubelet_->WaitForDevicesMatching(
      "nvidia.com/gpu",
      [](const std::vector<sim::kubelet::Device>& d) { return d.size() == 1 && !d[0].healthy(); },
      kWaitMs));
}

TEST_F(PluginRegistrar, RegistersOnceTheKubeletAppears) {
  ASSERT_NO_FATAL_FAILURE(StartRegistrar(Options()));
  // Serving happens first; Register fails while there is no kubelet.
  ASSERT_TRUE(registrar_->WaitForCounters(
      [](const RegistrarCounters& c) { return c.register_failures >= 1; }, kWaitMs));
  EXPECT_TRUE(Exists(registrar_->plugin_socket()));
  sim::kubelet::KubeletOptions k;
  k.dir = dir_.path();
  k.clean_directory_on_start = false;
  kubelet_ = std::make_unique<sim::kubelet::Kubelet>(k);
  ASSERT_TRUE(kubelet_->Start().ok());
  EXPECT_TRUE(kubelet_->WaitForRegistrations(1, kWaitMs)) << registrar_->Counters().ToKeyValues();
  EXPECT_TRUE(registrar_->WaitForRegistrations(1, kWaitMs));
}

TEST_F(PluginRegistrar, AFailedRegisterIsRetriedAndItsReasonKept) {
  ASSERT_NO_FATAL_FAILURE(StartRegistrar(Options()));
  // No kubelet: the first attempt fails and is retried after the backoff.
  ASSERT_TRUE(registrar_->WaitForCounters(
      [](const RegistrarCounters& c) { return c.register_failures >= 2; }, kWaitMs));
  RegistrarCounters c = registrar_->Counters();
  EXPECT_THAT(c.last_error, HasSubstr("Register with " + dir_.File("kubelet.sock")));
  EXPECT_THAT(c.last_error, HasSubstr("(gRPC UNAVAILABLE)"));
  EXPECT_FALSE(c.registered);
  EXPECT_EQ(c.serves, 1u);  // the server stays up between attempts

  ASSERT_TRUE(kubelet_->Start().ok());  // cleans the directory: the plugin serves again
  ASSERT_TRUE(registrar_->WaitForCounters(
      [](const RegistrarCounters& k) { return k.kubelet_restarts >= 1 && k.registered; }, kWaitMs));
  c = registrar_->Counters();
  EXPECT_TRUE(c.registered);
  EXPECT_EQ(c.last_error, "");
}

TEST_F(PluginRegistrar, StopRemovesOnlyItsOwnSocket) {
  ASSERT_TRUE(kubelet_->Start().ok());
  ASSERT_NO_FATAL_FAILURE(StartRegistrar(Options()));
  ASSERT_TRUE(registrar_->WaitForRegistrations(1, kWaitMs));
  const ino_t kubelet_inode = Inode(kubelet_->socket_path());
  registrar_->Stop();
  EXPECT_FALSE(Exists(registrar_->plugin_socket()));
  EXPECT_EQ(Inode(kubelet_->socket_path()), kubelet_inode);
  registrar_->Stop();  // idempotent
}

TEST_F(PluginRegistrar, StopsPromptlyWhileTheKubeletIsAbsent) {
  ASSERT_NO_FATAL_FAILURE(StartRegistrar(Options(/*initial_backoff_ms=*/60'000)));
  registrar_->Stop();  // waits for neither the backoff nor a Register deadline
  EXPECT_FALSE(Exists(registrar_->plugin_socket()));
}

TEST_F(PluginRegistrar, RefusesBadOptionsNamingThem) {
  RegistrarOptions o = Options();
  o.kubelet_socket = "kubelet.sock";
  Registrar relative(service_.get(), o);
  Status s = relative.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("'kubelet.sock' is not an absolute path"));

  o = Options();
  o.socket_name = "a/b.sock";
  Registrar slash(service_.get(), o);
  s = slash.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("plugin socket name 'a/b.sock'"));

  o = Options();
  o.kubelet_socket = dir_.File("missing/kubelet.sock");
  Registrar missing(service_.get(), o);
  s = missing.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr(dir_.File("missing")));
}

}  // namespace
}  // namespace hami::plugin
