#include "plugin/allocate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hami::plugin {
namespace {

using nlohmann::json;

constexpr char kNode[] = "node1";
constexpr char kGpu0[] = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448";
constexpr char kGpu1[] = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec";
constexpr char kHook[] = "/usr/local";

const std::vector<NodeGpu> kGpus = {{kGpu0, 0, true}, {kGpu1, 1, true}};

struct PodSpec {
  std::string name = "gpu-pod";
  std::string uid = "5b1b4a3c-0000-4000-8000-000000000001";
  std::vector<std::string> init_containers;
  std::vector<std::string> containers = {"main"};
  json env = json::array();  // of the first container
  std::string to_allocate = std::string(kGpu0) + ",NVIDIA,3000,30:;";
  std::string allocated;  // empty: same as to_allocate
  std::string bind_phase = "allocating";
  std::string bind_time = "1716199325";
  std::string node = kNode;
  json extra_annotations = json::object();
};

json PodJson(const PodSpec& s) {
  json ann = {
      {"hami.io/bind-phase", s.bind_phase},
      {"hami.io/bind-time", s.bind_time},
      {"hami.io/vgpu-node", s.node},
      {"hami.io/vgpu-devices-to-allocate", s.to_allocate},
      {"hami.io/vgpu-devices-allocated", s.allocated.empty() ? s.to_allocate : s.allocated}};
  for (auto it = s.extra_annotations.begin(); it != s.extra_annotations.end(); ++it) {
    if (it.value().is_null()) {
      ann.erase(it.key());
    } else {
      ann[it.key()] = it.value();
    }
  }
  json containers = json::array();
  for (size_t i = 0; i < s.containers.size(); ++i) {
    json c = {{"name", s.containers[i]}, {"image", "cuda"}};
    if (i == 0) c["env"] = s.env;
    containers.push_back(c);
  }
  json inits = json::array();
  for (const auto& n : s.init_containers) inits.push_back({{"name", n}, {"image", "init"}});
  return {{"metadata",
           {{"name", s.name}, {"namespace", "default"}, {"uid", s.uid}, {"annotations", ann}}},
          {"spec", {{"nodeName", s.node}, {"containers", containers}, {"initContainers", inits}}},
          {"status", {{"phase", "Pending"}}}};
}

kube::Pod MakePod(const PodSpec& s) {
  auto p = kube::ParsePod(PodJson(s));
  EXPECT_TRUE(p.ok()) << p.error().message();
  return p.ok() ? *p : kube::Pod{};
}

PluginConfig Config() {
  PluginConfig c;
  c.node_name = kNode;
  return c;
}

struct Call {
  std::vector<ContainerRequest> requests = {{{std::string(kGpu0) + "-3"}}};
  PluginConfig config = Config();
  Broker broker = Broker::kDisabled;
  const std::map<std::string, int>* known = nullptr;
};

Result<AllocatePlan> RunAllocate(const kube::Pod& pod, const Call& call) {
  AllocateInput in;
  in.pod = &pod;
  in.requests = call.requests;
  in.config = &call.config;
  in.gpus = kGpus;
  in.hook_path = kHook;
  in.broker = call.broker;
  in.known_chunks = call.known;
  return Allocate(in);
}

std::string ErrorOf(const kube::Pod& pod, const Call& call) {
  auto r = RunAllocate(pod, call);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error().message();
}

// The plan as the golden files show it: per container its env (sorted), its mounts in order and
// its limits file, field by field; then the annotation patch.
std::string Render(const AllocatePlan& plan) {
  std::ostringstream o;
  o << "delivery: " << LimitDeliveryName(plan.delivery) << "\n";
  for (const ContainerPlan& c : plan.containers) {
    o << "container " << c.container << " (chunk " << c.chunk << (c.replay ? ", replay" : "")
      << ")\n";
    o << "  env:\n";
    for (const auto& [k, v] : c.response.envs) o << "    " << k << "=" << v << "\n";
    o << "  mounts:\n";
    for (const Mount& m : c.response.mounts) {
      o << "    " << m.host_path << " -> " << m.container_path << (m.read_only ? " ro" : " rw")
        << "\n";
    }
    o << "  container dir: " << (c.container_dir.empty() ? "(none)" : c.container_dir) << "\n";
    o << "  limits file: " << (c.limits_path.empty() ? "(none)" : c.limits_path) << "\n";
    if (!c.limits_path.empty()) {
      auto text = limits::LimitsText(c.limits);
      std::istringstream lines(text.ok() ? *text : "error: " + text.error().message());
      for (std::string line; std::getline(lines, line);) o << "    " << line << "\n";
    }
  }
  o << "hami.io/vgpu-devices-to-allocate: " << plan.devices_to_allocate
    << (plan.annotation_changed ? " (changed)" : " (unchanged)") << "\n";
  o << "bind-phase: " << (plan.complete ? "success, node lock released" : "allocating") << "\n";
  for (const std::string& w : plan.warnings) o << "warning: " << w << "\n";
  return o.str();
}

void ExpectGolden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(HAMI_PLUGIN_TESTDATA) + "/" + name + ".golden";
  const char* update = std::getenv("HAMI_UPDATE_GOLDEN");
  if (update != nullptr && std::string_view(update) == "1") {
    std::ofstream(path) << actual;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing golden file " << path << " (HAMI_UPDATE_GOLDEN=1 writes it)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(actual, want.str()) << "golden file " << path;
}

void Golden(const std::string& name, const kube::Pod& pod, const Call& call) {
  auto plan = RunAllocate(pod, call);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  ExpectGolden(name, Render(*plan));
}

// ---- golden responses -------------------------------------------------------------------------

TEST(AllocateGolden, FileMode) { Golden("file_mode", MakePod({}), {}); }

TEST(AllocateGolden, EnvModeFromThePodAnnotation) {
  PodSpec s;
  s.extra_annotations = {{"hami.io/limit-delivery", "env"}};
  Golden("env_mode", MakePod(s), {});
}

TEST(AllocateGolden, EnvModeFromTheNodeConfig) {
  Call call;
  call.config.limit_delivery = LimitDelivery::kEnv;
  auto a = RunAllocate(MakePod({}), call);
  PodSpec s;
  s.extra_annotations = {{"hami.io/limit-delivery", "env"}};
  auto b = RunAllocate(MakePod(s), {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Render(*a), Render(*b));
}

TEST(AllocateGolden, PodAnnotationFileBeatsNodeEnv) {
  Call call;
  call.config.limit_delivery = LimitDelivery::kEnv;
  PodSpec s;
  s.extra_annotations = {{"hami.io/limit-delivery", "file"}};
  auto a = RunAllocate(MakePod(s), call);
  auto b = RunAllocate(MakePod({}), {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Render(*a), Render(*b));
}

TEST(AllocateGolden, MigMode) {
  Call call;
  call.config.operating_mode = OperatingMode::kMig;
  Golden("mig_mode", MakePod({}), call);
}

TEST(AllocateGolden, BrokerEnabled) {
  Call call;
  call.broker = Broker::kEnabled;
  Golden("broker_on", MakePod({}), call);
}

TEST(AllocateGolden, CudaDisableControlDropsThePreload) {
  PodSpec s;
  s.env = json::array({{{"name", "CUDA_DISABLE_CONTROL"}, {"value", "true"}}});
  Golden("disable_control", MakePod(s), {});
}

TEST(AllocateGolden, CudaDisableControlFalseKeepsThePreload) {
  PodSpec s;
  s.env = json::array({{{"name", "CUDA_DISABLE_CONTROL"}, {"value", "false"}}});
  auto plan = RunAllocate(MakePod(s), {});
  ASSERT_TRUE(plan.ok());
  bool preload = false;
  for (const Mount& m : plan->containers[0].response.mounts) {
    preload |= m.container_path == "/etc/ld.so.preload";
  }
  EXPECT_TRUE(preload);
}

TEST(AllocateGolden, MultiGpuInTheKubeletsOrder) {
  PodSpec s;
  s.to_allocate = std::string(kGpu0) + ",NVIDIA,3000,30:" + kGpu1 + ",NVIDIA,5000,30:;";
  Call call;
  call.requests = {{{std::string(kGpu1) + "-7", std::string(kGpu0) + "-2"}}};
  Golden("multi_gpu", MakePod(s), call);
}

TEST(AllocateGolden, OptionsAndContainerSpecVariables) {
  PodSpec s;
  s.env = json::array({{{"name", "CUDA_TASK_PRIORITY"}, {"value", "0"}},
                       {{"name", "GPU_CORE_UTILIZATION_POLICY"}, {"value", "force"}}});
  Call call;
  call.config.device.device_memory_scaling = 1.5;
  call.config.device.lib_cuda_log_level = 4;
  call.broker = Broker::kEnabled;
  Golden("options", MakePod(s), call);
}

TEST(AllocateGolden, DisableCoreLimitWinsOverTheSpecPolicy) {
  PodSpec s;
  s.env = json::array({{{"name", "GPU_CORE_UTILIZATION_POLICY"}, {"value", "force"}}});
  Call call;
  call.config.device.disable_core_limit = true;
  auto plan = RunAllocate(MakePod(s), call);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->containers[0].response.envs.at("GPU_CORE_UTILIZATION_POLICY"), "disable");
}

TEST(AllocateGolden, GpuCorePolicyAppliesWhereTheSpecSetsNone) {
  Call call;
  call.config.device.gpu_core_policy = "force";
  auto plan = RunAllocate(MakePod(PodSpec{}), call);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->containers[0].response.envs.at("GPU_CORE_UTILIZATION_POLICY"), "force");

  // The container's own value wins; the default policy sets nothing.
  PodSpec s;
  s.env = json::array({{{"name", "GPU_CORE_UTILIZATION_POLICY"}, {"value", "disable"}}});
  plan = RunAllocate(MakePod(s), call);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->containers[0].response.envs.at("GPU_CORE_UTILIZATION_POLICY"), "disable");
  call.config.device.gpu_core_policy = "default";
  plan = RunAllocate(MakePod(PodSpec{}), call);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->containers[0].response.envs.count("GPU_CORE_UTILIZATION_POLICY"), 0u);
}

TEST(AllocateGolden, SecondContainerAfterTheFirst) {
  PodSpec s;
  s.init_containers = {"setup"};
  s.containers = {"main", "side", "worker"};
  // init container and main without GPUs; side and worker with one each.
  s.to_allocate = std::string(";;") + kGpu0 + ",NVIDIA,1000,10:;" + kGpu1 + ",NVIDIA,2000,20:;";
  Call call;
  call.requests = {{{std::string(kGpu0) + "-1"}}};
  auto first = RunAllocate(MakePod(s), call);
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_EQ(first->containers[0].container, "side");
  EXPECT_FALSE(first->complete);
  s.to_allocate = first->devices_to_allocate;
  call.requests = {{{std::string(kGpu1) + "-4"}}};
  Golden("second_container", MakePod(s), call);
}

// ---- retries ----------------------------------------------------------------------------------

TEST(AllocateRetry, RepeatedRequestAfterEveryChunkIsTakenAnswersTheSame) {
  PodSpec s;
  auto first = RunAllocate(MakePod(s), {});
  ASSERT_TRUE(first.ok());
  s.to_allocate = first->devices_to_allocate;
  s.allocated = std::string(kGpu0) + ",NVIDIA,3000,30:;";
  s.bind_phase = "success";
  auto again = RunAllocate(MakePod(s), {});
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_TRUE(again->containers[0].replay);
  EXPECT_FALSE(again->annotation_changed);
  EXPECT_TRUE(again->complete);
  EXPECT_EQ(again->containers[0].response, first->containers[0].response);
  EXPECT_EQ(again->containers[0].limits, first->containers[0].limits);
  EXPECT_EQ(again->containers[0].limits_path, first->containers[0].limits_path);
}

TEST(AllocateRetry, KnownChunkIsAnsweredAgainWhileOthersArePending) {
  PodSpec s;
  s.containers = {"a", "b"};
  s.to_allocate = std::string(kGpu0) + ",NVIDIA,1000,10:;" + kGpu0 + ",NVIDIA,2000,20:;";
  const std::string original = s.to_allocate;
  Call call;
  call.requests = {{{std::string(kGpu0) + "-1"}}};
  auto first = RunAllocate(MakePod(s), call);
  ASSERT_TRUE(first.ok());
  std::map<std::string, int> known = {{first->containers[0].request_key, 0}};
  s.to_allocate = first->devices_to_allocate;
  s.allocated = original;
  call.known = &known;
  auto again = RunAllocate(MakePod(s), call);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_TRUE(again->containers[0].replay);
  EXPECT_EQ(again->containers[0].container, "a");
  EXPECT_EQ(again->containers[0].response, first->containers[0].response);
  EXPECT_FALSE(again->annotation_changed);
  EXPECT_FALSE(again->complete);
  // Without the memory it would take b's chunk (HAMi's behaviour).
  call.known = nullptr;
  auto wrong = RunAllocate(MakePod(s), call);
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->containers[0].container, "b");
}

TEST(AllocateRetry, AmbiguousRepeatIsRefused) {
  PodSpec s;
  s.containers = {"a", "b"};
  s.allocated = std::string(kGpu0) + ",NVIDIA,1000,10:;" + kGpu0 + ",NVIDIA,2000,20:;";
  s.to_allocate = ";;";
  s.bind_phase = "success";
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: hami.io/vgpu-devices-to-allocate: no container is left to "
            "allocate, and the kubelet's devices " +
                std::string(kGpu0) +
                "-3 match 2 allocated containers: cannot tell which one this request repeats");
}

TEST(AllocateRetry, NothingLeftAndNoMatch) {
  PodSpec s;
  s.to_allocate = ";";
  s.allocated = std::string(kGpu1) + ",NVIDIA,1000,10:;";
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: hami.io/vgpu-devices-to-allocate: no container is left to "
            "allocate (every chunk is empty), and no allocated container has the kubelet's "
            "devices " +
                std::string(kGpu0) + "-3");
  s.extra_annotations = {{"hami.io/vgpu-devices-allocated", nullptr}};
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: hami.io/vgpu-devices-to-allocate: no container is left to "
            "allocate, and hami.io/vgpu-devices-allocated (to answer a repeated request) is "
            "missing");
}

// ---- bad input --------------------------------------------------------------------------------

TEST(AllocateErrors, MissingOrMalformedAnnotationsNameTheAnnotation) {
  PodSpec s;
  s.extra_annotations = {{"hami.io/vgpu-devices-to-allocate", nullptr}};
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: hami.io/vgpu-devices-to-allocate: missing");
  s.extra_annotations = {{"hami.io/vgpu-devices-to-allocate", "GPU-x,NVIDIA:;"}};
  const std::string malformed = ErrorOf(MakePod(s), {});
  EXPECT_EQ(malformed.rfind("pod default/gpu-pod: hami.io/vgpu-devices-to-allocate", 0), 0u)
      << malformed;
  s.extra_annotations = {{"hami.io/limit-delivery", "files"}};
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: hami.io/limit-delivery: 'files' is not one of file, env");
  s.to_allocate = ";";
  s.extra_annotations = {{"hami.io/vgpu-devices-allocated", "GPU-x,NVIDIA,x,0:;"}};
  const std::string bad_allocated = ErrorOf(MakePod(s), {});
  EXPECT_EQ(bad_allocated.rfind("pod default/gpu-pod: hami.io/vgpu-devices-allocated", 0), 0u)
      << bad_allocated;
}

TEST(AllocateErrors, DeviceNumberNotMatched) {
  Call call;
  call.requests = {{{std::string(kGpu0) + "-1", std::string(kGpu1) + "-1"}}};
  EXPECT_EQ(ErrorOf(MakePod({}), call),
            "pod default/gpu-pod: container request 0: device number not matched: the kubelet "
            "allocated 2 devices, hami.io/vgpu-devices-to-allocate has 1 for container main");
}

TEST(AllocateErrors, RequestWithoutDevicesOrContainers) {
  Call call;
  call.requests = {{{}}};
  EXPECT_EQ(ErrorOf(MakePod({}), call),
            "pod default/gpu-pod: container request 0: names no devices");
  call.requests = {};
  EXPECT_EQ(ErrorOf(MakePod({}), call),
            "pod default/gpu-pod: the kubelet's Allocate request names no container");
}

TEST(AllocateErrors, ChunkBeyondThePodsContainers) {
  PodSpec s;
  s.to_allocate = std::string(";") + kGpu0 + ",NVIDIA,3000,30:;";
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: hami.io/vgpu-devices-to-allocate: container 1 has devices but "
            "the pod has 1 containers");
}

TEST(AllocateErrors, GpuNotOnThisNodeOrFilteredOut) {
  PodSpec s;
  s.to_allocate = "GPU-elsewhere,NVIDIA,3000,30:;";
  Call call;
  call.requests = {{{"GPU-elsewhere-1"}}};
  EXPECT_EQ(ErrorOf(MakePod(s), call),
            "pod default/gpu-pod: hami.io/vgpu-devices-to-allocate: container main device 0: "
            "'GPU-elsewhere' is not a GPU of node node1");
  Call filtered;
  filtered.config.filter.indices = {0};
  EXPECT_EQ(ErrorOf(MakePod({}), filtered),
            "pod default/gpu-pod: hami.io/vgpu-devices-to-allocate: container main device 0: " +
                std::string(kGpu0) + " is excluded by this node's filterdevices");
}

TEST(AllocateErrors, ZeroMemoryIsNeverNoLimit) {
  PodSpec s;
  s.to_allocate = std::string(kGpu0) + ",NVIDIA,0,30:;";
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: hami.io/vgpu-devices-to-allocate: container main device " +
                std::string(kGpu0) + ": 0 MiB of memory would be no limit; refusing to allocate");
}

// ---- deviceMemoryScaling above 1: what is advertised past the GPU's memory is host memory ----

TEST(AllocateScaling, EachShareIsHeldOnTheDeviceForItsPartOfTheGpuAndOnTheHostForTheRest) {
  PodSpec s;
  s.to_allocate = std::string(kGpu0) + ",NVIDIA,3000,30:" + kGpu1 + ",NVIDIA,5000,30:;";
  Call call;
  call.requests = {{{std::string(kGpu0) + "-1", std::string(kGpu1) + "-2"}}};
  call.config.device.device_memory_scaling = 2;
  auto plan = RunAllocate(MakePod(s), call);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const auto& env = plan->containers[0].response.envs;
  EXPECT_EQ(env.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "1500m");
  EXPECT_EQ(env.at("CUDA_DEVICE_MEMORY_LIMIT_1"), "2500m");
  EXPECT_EQ(env.at("CUDA_OVERSUBSCRIBE"), "true");
  EXPECT_EQ(env.at("CUDA_OVERSUBSCRIBE_HOST_LIMIT"), "4000m");
  // The limits file carries the same.
  std::map<std::string, std::string> file(plan->containers[0].limits.begin(),
                                          plan->containers[0].limits.end());
  EXPECT_EQ(file.at("CUDA_DEVICE_MEMORY_LIMIT_1"), "2500m");
  EXPECT_EQ(file.at("CUDA_OVERSUBSCRIBE_HOST_LIMIT"), "4000m");

  // At 1 (and below) every byte is device memory and nothing is oversubscribed.
  for (double scaling : {1.0, 0.8}) {
    call.config.device.device_memory_scaling = scaling;
    plan = RunAllocate(MakePod(s), call);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->containers[0].response.envs.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "3000m");
    EXPECT_EQ(plan->containers[0].response.envs.count("CUDA_OVERSUBSCRIBE"), 0u) << scaling;
    EXPECT_EQ(plan->containers[0].response.envs.count("CUDA_OVERSUBSCRIBE_HOST_LIMIT"), 0u);
  }
}

// However the scheduler fills a scaled GPU, the device parts of its shares fit its memory and
// the parts together are what it advertised.
TEST(AllocateScaling, TheDevicePartsOfAFullGpuFitItsMemory) {
  constexpr uint64_t kMiB = 1ull << 20;
  const uint64_t physical = 81559 * kMiB;
  for (double scaling : {1.5, 2.0, 3.0, 1.3, 7.77}) {
    const uint64_t advertised =
        uint64_t(std::floor(double(physical / kMiB) * scaling + 1e-9)) * kMiB;
    for (uint64_t share_mib : {1ull, 1000ull, 3000ull, 7777ull, 16384ull}) {
      uint64_t device = 0, total = 0;
      for (uint64_t left = advertised; left >= share_mib * kMiB; left -= share_mib * kMiB) {
        const ScaledShare part = SplitScaledShare(share_mib * kMiB, scaling);
        EXPECT_EQ(part.device_bytes + part.host_bytes, share_mib * kMiB);
        device += part.device_bytes;
        total += share_mib * kMiB;
      }
      EXPECT_LE(device, physical) << scaling << " " << share_mib;
      EXPECT_LE(total, advertised);
    }
  }
  EXPECT_EQ(SplitScaledShare(3000 * kMiB, 1).device_bytes, 3000 * kMiB);
  EXPECT_EQ(SplitScaledShare(3000 * kMiB, 1.5).device_bytes, 2000 * kMiB);
  EXPECT_EQ(SplitScaledShare(3000 * kMiB, 1.5).host_bytes, 1000 * kMiB);
}

TEST(AllocateScaling, AScalingThatLeavesNoDeviceMemoryIsRefusedNamingTheKey) {
  PodSpec s;
  s.to_allocate = std::string(kGpu0) + ",NVIDIA,1,30:;";
  Call call;
  call.config.device.device_memory_scaling = 4e9;
  const std::string error = ErrorOf(MakePod(s), call);
  EXPECT_NE(error.find("deviceMemoryScaling"), std::string::npos) << error;
  EXPECT_NE(error.find("leaves no device memory of its 1 MiB share"), std::string::npos) << error;
}

TEST(AllocateErrors, BadContainerSpecVariables) {
  PodSpec s;
  s.env = json::array({{{"name", "CUDA_TASK_PRIORITY"}, {"value", "high"}}});
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: container main: env CUDA_TASK_PRIORITY 'high' is not 0 (high) "
            "or 1 (low)");
  s.env = json::array({{{"name", "GPU_CORE_UTILIZATION_POLICY"}, {"value", "max"}}});
  EXPECT_EQ(ErrorOf(MakePod(s), {}),
            "pod default/gpu-pod: container main: env GPU_CORE_UTILIZATION_POLICY 'max' is not "
            "one of default, force, disable");
}

TEST(AllocateErrors, UnsafePathComponents) {
  PodSpec s;
  s.uid = "../x";
  const std::string uid = ErrorOf(MakePod(s), {});
  EXPECT_NE(uid.find("pod UID"), std::string::npos) << uid;
  s.uid = "ok";
  s.containers = {"a/b"};
  const std::string name = ErrorOf(MakePod(s), {});
  EXPECT_NE(name.find("container name 'a/b'"), std::string::npos) << name;
}

TEST(AllocateWarnings, KubeletReplicaOfAnotherGpuKeepsTheSchedulersGpu) {
  Call call;
  call.requests = {{{std::string(kGpu1) + "-0"}}};
  auto plan = RunAllocate(MakePod({}), call);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->containers[0].response.envs.at("NVIDIA_VISIBLE_DEVICES"), kGpu0);
  ASSERT_EQ(plan->warnings.size(), 1u);
  EXPECT_NE(plan->warnings[0].find("not of a GPU the scheduler assigned"), std::string::npos);
}

// ---- the pending pod --------------------------------------------------------------------------

json Pods(std::initializer_list<PodSpec> specs) {
  json items = json::array();
  for (const auto& s : specs) items.push_back(PodJson(s));
  return {{"kind", "PodList"}, {"items", items}};
}

PodSpec Named(std::string name, std::string bind_time, std::string phase = "allocating") {
  PodSpec s;
  s.name = std::move(name);
  s.bind_time = std::move(bind_time);
  s.bind_phase = std::move(phase);
  return s;
}

TEST(FindPendingPod, NoneIsHamisMessage) {
  auto r = FindPendingPod(kNode, nullptr, Pods({}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(r.error().message(), "no binding pod found on node node1");
  PodSpec other = Named("x", "1");
  other.node = "node2";
  PodSpec failed = Named("y", "1", "failed");
  PodSpec no_time = Named("z", "1");
  no_time.extra_annotations = {{"hami.io/bind-time", nullptr}};
  EXPECT_FALSE(FindPendingPod(kNode, nullptr, Pods({other, failed, no_time})).ok());
}

TEST(FindPendingPod, OldestAllocatingFirst) {
  auto r = FindPendingPod(
      kNode, nullptr,
      Pods({Named("new", "300"), Named("done", "100", "success"), Named("old", "200")}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->metadata.name, "old");
  r = FindPendingPod(kNode, nullptr, Pods({Named("done", "100", "success")}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->metadata.name, "done");
}

TEST(FindPendingPod, TheNodeLockNamesThePod) {
  const std::string lock = "2024-05-20T10:02:05Z,default,new";
  auto r = FindPendingPod(kNode, &lock, Pods({Named("new", "300"), Named("old", "200")}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->metadata.name, "new");
  const std::string gone = "2024-05-20T10:02:05Z,default,gone";
  r = FindPendingPod(kNode, &gone, Pods({Named("new", "300"), Named("old", "200")}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->metadata.name, "old");
  const std::string garbage = "not a lock";
  r = FindPendingPod(kNode, &garbage, Pods({Named("new", "300")}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->metadata.name, "new");
}

TEST(FindPendingPod, SkipsUnparseablePodsAndTakesArrays) {
  json items = json::array({{{"metadata", {{"name", 5}}}}, PodJson(Named("ok", "1"))});
  auto r = FindPendingPod(kNode, nullptr, items);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->metadata.name, "ok");
  EXPECT_FALSE(FindPendingPod(kNode, nullptr, json("x")).ok());
}

// ---- mounts -----------------------------------------------------------------------------------

TEST(NormalizePath, Lexical) {
  EXPECT_EQ(NormalizePath("/tmp//vgpulock/"), "/tmp/vgpulock");
  EXPECT_EQ(NormalizePath("/tmp/./x/../vgpulock"), "/tmp/vgpulock");
  EXPECT_EQ(NormalizePath("/../.."), "/");
  EXPECT_EQ(NormalizePath(""), "/");
}

TEST(ReconcileLockMounts, ReplacesEquivalentsKeepsUnrelatedAndOrdersParentFirst) {
  std::vector<Mount> in = {{"/a", "/ha", true},
                           {"/tmp/vgpulock/hostpid", "/old/broker", false},
                           {"/tmp//vgpulock/", "/somewhere", true},
                           {"/b", "/hb", false},
                           {"/tmp/vgpulock", "/tmp/vgpulock", false}};
  auto out = ReconcileLockMounts(in, Broker::kEnabled);
  std::vector<Mount> want = {{"/a", "/ha", true},
                             {"/tmp/vgpulock", "/tmp/vgpulock", false},
                             {"/tmp/vgpulock/hostpid", "/var/run/hami/hostpid", true},
                             {"/b", "/hb", false}};
  EXPECT_EQ(out, want);
  EXPECT_EQ(ReconcileLockMounts(out, Broker::kEnabled), want);  // idempotent
}

TEST(ReconcileLockMounts, RemovesStaleBrokerMountsWhenDisabled) {
  std::vector<Mount> in = {{"/tmp/vgpulock", "/tmp/vgpulock", false},
                           {"/tmp/vgpulock/hostpid/", "/var/run/hami/hostpid", true},
                           {"/elsewhere", "/var/run/hami/hostpid/", true},
                           {"/c", "/hc", true}};
  std::vector<Mount> want = {{"/tmp/vgpulock", "/tmp/vgpulock", false}, {"/c", "/hc", true}};
  EXPECT_EQ(ReconcileLockMounts(in, Broker::kDisabled), want);
}

TEST(ReconcileLockMounts, AddsParentBeforeNestedMountsOrAtTheEnd) {
  std::vector<Mount> nested = {{"/a", "/ha", true}, {"/tmp/vgpulock/x", "/hx", true}};
  std::vector<Mount> want = {{"/a", "/ha", true},
                             {"/tmp/vgpulock", "/tmp/vgpulock", false},
                             {"/tmp/vgpulock/x", "/hx", true}};
  EXPECT_EQ(ReconcileLockMounts(nested, Broker::kDisabled), want);
  std::vector<Mount> none = {{"/a", "/ha", true}};
  std::vector<Mount> want_end = {{"/a", "/ha", true},
                                 {"/tmp/vgpulock", "/tmp/vgpulock", false},
                                 {"/tmp/vgpulock/hostpid", "/var/run/hami/hostpid", true}};
  EXPECT_EQ(ReconcileLockMounts(none, Broker::kEnabled), want_end);
}

// ---- replicas and GetPreferredAllocation -------------------------------------------------------

TEST(PhysicalUuid, StripsTheReplicaSuffixOfAKnownGpu) {
  EXPECT_EQ(PhysicalUuid(std::string(kGpu0) + "-12", kGpus), kGpu0);
  EXPECT_EQ(PhysicalUuid(kGpu0, kGpus), kGpu0);
  EXPECT_EQ(PhysicalUuid(std::string(kGpu0) + "-x", kGpus), std::string(kGpu0) + "-x");
  EXPECT_EQ(PhysicalUuid("MIG-abc", kGpus), "MIG-abc");
  EXPECT_EQ(RequestKey({{"b", "a"}}), "a,b");
}

TEST(PreferredAllocation, ReplicasOfTheSchedulersGpus) {
  kube::PodDevices pending = {{}, {{kGpu1, "NVIDIA", 1000, 10}, {kGpu0, "NVIDIA", 1000, 10}}};
  PreferredRequest req;
  for (int i = 0; i < 3; ++i) {
    req.available_device_ids.push_back(std::string(kGpu0) + "-" + std::to_string(i));
    req.available_device_ids.push_back(std::string(kGpu1) + "-" + std::to_string(i));
  }
  req.allocation_size = 2;
  std::vector<PreferredRequest> reqs = {req};
  auto plan = PreferredAllocation(&pending, reqs, kGpus);
  ASSERT_EQ(plan.answers.size(), 1u);
  EXPECT_EQ(plan.answers[0],
            (std::vector<std::string>{std::string(kGpu1) + "-0", std::string(kGpu0) + "-0"}));
  EXPECT_TRUE(plan.warnings.empty());

  reqs[0].must_include_device_ids = {std::string(kGpu0) + "-2"};
  plan = PreferredAllocation(&pending, reqs, kGpus);
  EXPECT_EQ(plan.answers[0],
            (std::vector<std::string>{std::string(kGpu0) + "-2", std::string(kGpu1) + "-0"}));
}

TEST(PreferredAllocation, FallsBackWithAWarning) {
  PreferredRequest req;
  req.available_device_ids = {"r1", "r2", "r3"};
  req.must_include_device_ids = {"r2"};
  req.allocation_size = 2;
  std::vector<PreferredRequest> reqs = {req};
  auto plan = PreferredAllocation(nullptr, reqs, kGpus);
  ASSERT_EQ(plan.answers.size(), 1u);
  EXPECT_EQ(plan.answers[0], (std::vector<std::string>{"r2", "r1"}));
  ASSERT_EQ(plan.warnings.size(), 1u);
  kube::PodDevices pending = {{{kGpu0, "NVIDIA", 1000, 10}, {kGpu1, "NVIDIA", 1000, 10}}};
  plan = PreferredAllocation(&pending, reqs, kGpus);  // no replica of the chosen GPUs
  EXPECT_EQ(plan.answers[0], (std::vector<std::string>{"r2", "r1"}));
  EXPECT_EQ(plan.warnings.size(), 1u);
}

}  // namespace
}  // namespace hami::plugin
