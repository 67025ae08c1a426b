// The device plugin end to end, every part real but the cluster: the real hami-device-plugin
// binary on the simulated GPU, against the simulated API server (HTTP) and the simulated
// kubelet (gRPC on Unix sockets); the kubelet's Allocate answer applied by the simulated
// container runtime with real bind mounts; CUDA programs with libvgpu.so preloaded through
// the mounted /etc/ld.so.preload inside that container.
//
// Root only (mount namespaces, the root-owned /tmp/vgpulock, the broker).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "sim/kubelet/kubelet.h"
#include "sim/kubelet/runtime.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace rt = sim::runtime;

constexpr char kNode[] = "gpu-node-1";
constexpr char kResource[] = "nvidia.com/gpu";
// The simulated GPU's default machine: a process with an empty environment (a login session
// in the container) names no profile and gets this one, so the node must be it.
constexpr char kProfile[] = "h100-80g:2";

std::string Bin(const std::string& name) { return std::string(HAMI_BIN_DIR) + "/" + name; }
std::string SimLib(const std::string& name) {
  return std::string(HAMI_SIM_LIBRARY_DIR) + "/" + name;
}

// "GPU-xxxx-3" -> "GPU-xxxx".
std::string GpuOf(const std::string& replica) { return replica.substr(0, replica.rfind('-')); }

// Reads everything from `fd` until EOF.
std::string Drain(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) r = fds[0], w = fds[1];
  }
  ~Pipe() {
    if (r >= 0) close(r);
    if (w >= 0) close(w);
  }
  void CloseWrite() {
    if (w >= 0) close(w);
    w = -1;
  }
};

// Runs hami-memory-demo in `container` with the container's environment: it must report
// device 0's own limit (CUDA_DEVICE_MEMORY_LIMIT_0, the one that applies to it).
void ExpectDeviceZerosOwnLimit(rt::Container& container) {
  Pipe out;
  rt::ExecSpec spec;
  spec.command = {Bin("hami-memory-demo"), "limit", "3000m"};
  spec.stdout_fd = out.w;
  spec.stderr_fd = out.w;
  auto process = container.StartExec(spec);
  ASSERT_TRUE(process.ok()) << process.error().message();
  out.CloseWrite();
  std::string text = Drain(out.r);
  auto code = (*process)->Wait();
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << text;
  EXPECT_THAT(text, HasSubstr("device 0: CUDA_DEVICE_MEMORY_LIMIT_0=3000m (its own limit)"));
}

class PluginEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: mount namespaces for the simulated container runtime, the "
                      "root-owned /tmp/vgpulock, and the host-PID broker";
    }
    ASSERT_TRUE(dir_.ok());
    auto api = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(api.ok()) << api.error().message();
    api_ = std::move(api).value();
    kubeconfig_ = dir_.path() + "/kubeconfig";
    ASSERT_TRUE(api_->WriteKubeconfig(kubeconfig_).ok());
    kube::Config c;
    c.server = api_->url();
    c.source = "plugin e2e test";
    auto client = kube::Client::Create(c, {});
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();
    ASSERT_TRUE(api_->CreateObject(kube::kNodes, {{"metadata", {{"name", kNode}}}}).ok());

    state_ = testing::SimEnv::NewStatePath();
    hook_ = dir_.path() + "/hook";
    kubelet_dir_ = dir_.path() + "/device-plugins";
    ASSERT_EQ(mkdir(kubelet_dir_.c_str(), 0755), 0);
    sim::kubelet::KubeletOptions ko;
    ko.dir = kubelet_dir_;
    kubelet_ = std::make_unique<sim::kubelet::Kubelet>(ko);
    ASSERT_TRUE(kubelet_->Start().ok());
  }

  void TearDown() override {
    if (plugin_ != nullptr) {
      plugin_->Kill(SIGTERM);
      EXPECT_EQ(plugin_->Wait(20000), 0) << "the plugin stops cleanly on SIGTERM";
    }
    plugin_.reset();
    kubelet_.reset();
    client_.reset();
    if (api_ != nullptr) api_->Stop();
  }

  std::map<std::string, std::string> SimEnvVars() const {
    return {{"HAMI_SIM_STATE", state_}, {"HAMI_SIM_PROFILE", kProfile}};
  }

  // Starts the real binary and waits until the kubelet has its devices.
  void StartPlugin(bool broker) {
    broker_dir_ = dir_.path() + "/hostpid";
    std::map<std::string, std::string> env = SimEnvVars();
    env["LIBVGPU_HOSTPID_BROKER"] = broker ? "1" : "";
    env["NODE_NAME"] = kNode;
    plugin_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{Bin("hami-device-plugin"), "--kubeconfig", kubeconfig_,
                                 "--kubelet-socket", kubelet_dir_ + "/kubelet.sock", "--hook-path",
                                 hook_, "--vgpu-library", HAMI_VGPU_LIBRARY, "--nvml-library",
                                 SimLib("libnvidia-ml.so.1"), "--cuda-library",
                                 SimLib("libcuda.so.1"), "--node-config-file",
                                 dir_.path() + "/no-config.json", "--broker-dir", broker_dir_},
        env);
    auto line = plugin_->WaitForLine("hami-device-plugin: serving", 30000);
    ASSERT_TRUE(line.has_value()) << "the plugin did not start: " << plugin_->ReadAll(1000);
    ASSERT_TRUE(kubelet_->WaitForRegistrations(1, 10000)) << kubelet_->last_rejection();
    ASSERT_TRUE(kubelet_->WaitForDevicesMatching(
        kResource, [](const auto& devices) { return !devices.empty(); }, 10000));
    gpu_ = GpuOf(kubelet_->Devices(kResource).front().id);
  }

  // Waits (on a watch, not a poll) until the Node satisfies `pred`; returns it.
  std::optional<json> WaitForNode(const std::function<bool(const json&)>& pred) {
    std::optional<json> found;
    kube::WatchOptions wo;
    wo.field_selector = std::string("metadata.name=") + kNode;
    wo.timeout_seconds = 20;
    auto end = client_->Watch(kube::kNodes, "", wo, [&](kube::WatchEvent&& e) {
      if (e.type != kube::WatchEventType::kAdded && e.type != kube::WatchEventType::kModified) {
        return true;
      }
      if (!pred(e.object)) return true;
      found = std::move(e.object);
      return false;
    });
    EXPECT_TRUE(end.ok()) << end.error().message();
    return found;
  }

  static std::string Annotation(const json& obj, const std::string& key) {
    const json& ann = obj["metadata"].value("annotations", json::object());
    auto it = ann.find(key);
    return it == ann.end() ? std::string("(absent)") : it->get<std::string>();
  }

  // A pod as hami-scheduler leaves it after its bind: 3000 MiB and 30% of the node's GPU,
  // bind-phase allocating, the node locked for it.
  std::string CreateScheduledPod(const std::string& name) {
    const std::string devices = gpu_ + ",NVIDIA,3000,30:;";
    json pod = {{"metadata",
                 {{"name", name},
                  {"namespace", "default"},
                  {"annotations",
                   {{"hami.io/bind-phase", "allocating"},
                    {"hami.io/bind-time", "1716199325"},
                    {"hami.io/vgpu-node", kNode},
                    {"hami.io/vgpu-devices-to-allocate", devices},
                    {"hami.io/vgpu-devices-allocated", devices}}}}},
                {"spec",
                 {{"nodeName", kNode},
                  {"containers",
                   {{{"name", "main"},
                     {"image", "cuda"},
                     {"resources", {{"limits", {{kResource, "1"}}}}}}}}}}};
    auto created = api_->CreateObject(kube::kPods, pod);
    EXPECT_TRUE(created.ok()) << created.error().message();
    auto lock = kube::EncodeNodeLock({std::chrono::system_clock::now(), "default", name});
    EXPECT_TRUE(lock.ok());
    json patch = {{"metadata", {{"annotations", {{"hami.io/mutex.lock", *lock}}}}}};
    auto patched = client_->Patch(kube::kNodes, "", kNode, kube::PatchType::kMerge, patch);
    EXPECT_TRUE(patched.ok()) << patched.error().message();
    return created.ok() ? std::string(kube::MetadataString(*created, "uid")) : std::string();
  }

  json Pod(const std::string& name) {
    auto pod = api_->GetObject(kube::kPods, "default", name);
    EXPECT_TRUE(pod.ok());
    return pod.ok() ? *pod : json::object();
  }

  // The container as containerd and the NVIDIA toolkit would make it from the answer: the
  // response's mounts and environment, the (simulated) driver libraries where the loader finds
  // them, and the simulated GPU's state at its default path, so that a process with an empty
  // environment still reaches the GPU.
  rt::ContainerSpec Spec(const sim::kubelet::ContainerAllocation& response,
                         std::vector<std::string> command) const {
    rt::ContainerSpec spec;
    spec.response = response;
    spec.command = std::move(command);
    spec.image_env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
    spec.driver_libs = {SimLib("libcuda.so.1"), SimLib("libnvidia-ml.so.1")};
    spec.sim_state = state_;
    // The programs come from the build tree, which the container's own /tmp would hide when
    // the tree is under /tmp.
    spec.host_mounts = {{HAMI_BUILD_DIR, HAMI_BUILD_DIR, true}};
    return spec;
  }

  std::string RegionPath(const std::string& uid) const {
    return hook_ + "/vgpu/containers/" + uid + "_main/usage.cache";
  }

  // `hami inspect --json` of a container's region, from the host (its own records: the host
  // here has no NVML for the cross-check).
  json Inspect(const std::string& uid) {
    testing::Subprocess inspect({Bin("hami"), "inspect", "--json", "--no-nvml", RegionPath(uid)},
                                {});
    std::string out = inspect.ReadAll(20000);
    EXPECT_EQ(inspect.Wait(20000), 0) << out;
    json j = json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j;
  }

  TempDir dir_{"plugin-e2e"};
  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<sim::kubelet::Kubelet> kubelet_;
  std::unique_ptr<testing::Subprocess> plugin_;
  std::string kubeconfig_, state_, hook_, kubelet_dir_, broker_dir_, gpu_;
};

TEST_F(PluginEndToEnd, APodIsAllocatedAndALoginSessionInItsContainerIsHeldToTheSameLimit) {
  StartPlugin(/*broker=*/false);
  // The node's inventory is published.
  auto node = WaitForNode(
      [](const json& n) { return Annotation(n, "hami.io/node-nvidia-register") != "(absent)"; });
  ASSERT_TRUE(node.has_value());
  auto inventory = kube::DecodeNodeInventory(Annotation(*node, "hami.io/node-nvidia-register"));
  ASSERT_TRUE(inventory.ok()) << inventory.error().message();
  ASSERT_EQ(inventory->size(), 2u);
  EXPECT_EQ((*inventory)[0].id, gpu_);
  EXPECT_EQ((*inventory)[0].count, 10);
  EXPECT_TRUE((*inventory)[0].health);

  const std::string uid = CreateScheduledPod("trainer");
  auto allocated = kubelet_->AllocateContainer(uid, "main", kResource, 1);
  ASSERT_TRUE(allocated.ok()) << allocated.error().message();
  const sim::kubelet::ContainerAllocation& response = allocated->response;
  EXPECT_EQ(response.envs.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "3000m");
  EXPECT_EQ(response.envs.at("CUDA_DEVICE_SM_LIMIT"), "30");

  // The pod's side of the handshake: done, the node unlocked, nothing left to allocate.
  json pod = Pod("trainer");
  EXPECT_EQ(Annotation(pod, "hami.io/bind-phase"), "success");
  EXPECT_EQ(Annotation(pod, "hami.io/vgpu-devices-to-allocate"), ";");
  auto unlocked = api_->GetObject(kube::kNodes, "", kNode);
  ASSERT_TRUE(unlocked.ok());
  EXPECT_EQ(Annotation(*unlocked, "hami.io/mutex.lock"), "(absent)");

  // The container's first process holds 1000 MiB.
  Pipe in, out;
  rt::ContainerSpec spec = Spec(response, {Bin("hami-memory-demo"), "hold", "1000m"});
  spec.stdin_fd = in.r;
  spec.stdout_fd = out.w;
  auto container = rt::StartContainer(spec);
  ASSERT_TRUE(container.ok()) << container.error().message();
  out.CloseWrite();
  char line[64] = {};
  ssize_t n = read(out.r, line, sizeof(line) - 1);
  ASSERT_GT(n, 0) << "the holding process printed nothing";
  ASSERT_THAT(std::string(line, size_t(n)), HasSubstr("holding"));

  // A login session: no environment at all. It sees 3000 MiB and is refused past it.
  Pipe login_out;
  rt::ExecSpec login;
  login.command = {Bin("hami-memory-demo"), "limit", "3000m"};
  login.env = rt::Env{};
  login.stdout_fd = login_out.w;
  login.stderr_fd = login_out.w;
  auto limited = (*container)->StartExec(login);
  ASSERT_TRUE(limited.ok()) << limited.error().message();
  login_out.CloseWrite();
  std::string text = Drain(login_out.r);
  auto code = (*limited)->Wait();
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << text;
  EXPECT_THAT(text, HasSubstr("device 0: neither CUDA_DEVICE_MEMORY_LIMIT_0 nor "
                              "CUDA_DEVICE_MEMORY_LIMIT (only the limits file can say)"))
      << "the session had no variables";
  EXPECT_THAT(text, HasSubstr("total 3000 MiB"));

  // ... and it is accounted in the same region as the holder: what it saw free leaves out
  // the holder's 1000 MiB, and the container's usage.cache on the host has the limit and the
  // holder's bytes.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("total 3000 MiB, free ([0-9]+) MiB"))) << text;
  EXPECT_LE(std::stoi(m[1].str()), 2000) << text;
  json region = Inspect(uid);
  ASSERT_TRUE(region.contains("devices")) << region.dump();
  EXPECT_EQ(region["devices"][0].value("memory_limit_bytes", uint64_t{0}), uint64_t{3000} << 20)
      << region.dump();
  EXPECT_GE(region["devices"][0].value("used_bytes", uint64_t{0}), uint64_t{1000} << 20)
      << region.dump();
  // A process with the container's environment reports device 0's own limit, the one that
  // applies to it.
  ExpectDeviceZerosOwnLimit(**container);

  in.CloseWrite();
  auto held = (*container)->init().Wait();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, 0);

  // A kubelet retry of the same Allocate answers the same, and changes nothing.
  auto again = kubelet_->Allocate(kResource, {{allocated->device_ids}});
  ASSERT_TRUE(again.ok()) << again.error().message();
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0], response);
}

TEST_F(PluginEndToEnd, WithTheBrokerAContainerProcessLearnsItsHostPidFromIt) {
  StartPlugin(/*broker=*/true);
  const std::string uid = CreateScheduledPod("brokered");
  auto allocated = kubelet_->AllocateContainer(uid, "main", kResource, 1);
  ASSERT_TRUE(allocated.ok()) << allocated.error().message();
  EXPECT_EQ(allocated->response.envs.at("LIBVGPU_HOSTPID_BROKER"), "1");

  Pipe in, out;
  rt::ContainerSpec spec = Spec(allocated->response, {Bin("hami-memory-demo"), "hold", "64m"});
  spec.pid_namespace = rt::PidNamespace::kPrivate;
  spec.stdin_fd = in.r;
  spec.stdout_fd = out.w;
  auto container = rt::StartContainer(spec);
  ASSERT_TRUE(container.ok()) << container.error().message();
  out.CloseWrite();
  char line[64] = {};
  ASSERT_GT(read(out.r, line, sizeof(line) - 1), 0);

  json region = Inspect(uid);
  ASSERT_TRUE(region.contains("slots")) << region.dump();
  bool seen = false;
  for (const json& slot : region["slots"]) {
    if (slot.value("state", "") != "live" || !slot.value("alive", false)) continue;
    seen = true;
    EXPECT_EQ(slot.value("identity", ""), "broker") << slot.dump();
    EXPECT_EQ(slot.value("host_pid", 0), (*container)->pid()) << slot.dump();
    EXPECT_EQ(slot.value("pid", 0), 1) << "the process is PID 1 of its own namespace";
  }
  EXPECT_TRUE(seen) << region.dump();
  // A process with the container's environment reports device 0's own limit, the one that
  // applies to it.
  ExpectDeviceZerosOwnLimit(**container);

  in.CloseWrite();
  auto held = (*container)->init().Wait();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, 0);
}

TEST_F(PluginEndToEnd, AKubeletRestartIsFollowedByANewRegistration) {
  StartPlugin(/*broker=*/false);
  const uint64_t before = kubelet_->registrations();
  ASSERT_TRUE(kubelet_->Restart().ok());
  EXPECT_TRUE(kubelet_->WaitForRegistrations(before + 1, 5000))
      << "re-registered within 5 s of the kubelet's restart";
  EXPECT_TRUE(kubelet_->WaitForDevicesMatching(
      kResource, [](const auto& devices) { return !devices.empty(); }, 5000));
}

TEST_F(PluginEndToEnd, AnXidMarksTheGpuUnhealthyForTheKubeletAndTheScheduler) {
  StartPlugin(/*broker=*/false);
  testing::Subprocess xid({Bin("hami-sim"), "xid", "0", "79", "--state", state_}, {});
  std::string said = xid.ReadAll(10000);
  ASSERT_EQ(xid.Wait(10000), 0) << said;
  EXPECT_TRUE(kubelet_->WaitForDevicesMatching(
      kResource,
      [this](const auto& devices) {
        int sick = 0, well = 0;
        for (const auto& d : devices) {
          if (GpuOf(d.id) == gpu_) {
            sick += d.healthy() ? 0 : 1;
          } else {
            well += d.healthy() ? 1 : 0;
          }
        }
        return sick == 10 && well == 10;
      },
      10000))
      << "ListAndWatch resends the GPU's 10 replicas as unhealthy, the other GPU's as healthy";
  auto node = WaitForNode([](const json& n) {
    auto inv = kube::DecodeNodeInventory(Annotation(n, "hami.io/node-nvidia-register"));
    return inv.ok() && inv->size() == 2 && !(*inv)[0].health && (*inv)[1].health;
  });
  EXPECT_TRUE(node.has_value()) << "the register annotation says health false";
}

TEST_F(PluginEndToEnd, AnAllocateWithoutABindingPodFailsWithTheMessageHamiUsersKnow) {
  StartPlugin(/*broker=*/false);
  auto allocated = kubelet_->AllocateContainer("no-such-pod", "main", kResource, 1);
  ASSERT_FALSE(allocated.ok());
  EXPECT_THAT(allocated.error().message(),
              HasSubstr(std::string("no binding pod found on node ") + kNode));
}

TEST_F(PluginEndToEnd, ABadConfigurationStopsThePluginWithTheFileKeyAndValue) {
  const std::string config = dir_.path() + "/device-config.yaml";
  {
    std::ofstream out(config);
    out << "nvidia:\n  deviceSplitCount: 0\n";
  }
  std::map<std::string, std::string> env = SimEnvVars();
  env["NODE_NAME"] = kNode;
  // Through a shell, for the plugin's stderr.
  testing::Subprocess plugin(
      {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", Bin("hami-device-plugin"), "--kubeconfig",
       kubeconfig_, "--kubelet-socket", kubelet_dir_ + "/kubelet.sock", "--hook-path", hook_,
       "--vgpu-library", HAMI_VGPU_LIBRARY, "--nvml-library", SimLib("libnvidia-ml.so.1"),
       "--device-config-file", config},
      env);
  std::string said = plugin.ReadAll(30000);
  EXPECT_EQ(plugin.Wait(30000), 1) << said;
  EXPECT_THAT(said, HasSubstr(config)) << "names the file";
  EXPECT_THAT(said, HasSubstr("deviceSplitCount")) << "names the key";
  EXPECT_THAT(said, HasSubstr(": 0 ")) << "names the value: " << said;
  EXPECT_EQ(kubelet_->registrations(), 0u) << "nothing was registered";
  EXPECT_FALSE(std::filesystem::exists(hook_ + "/vgpu/libvgpu.so")) << "nothing was installed";
}

}  // namespace
}  // namespace hami
