// The whole system on a simulated cluster: `hami sim cluster up` (two nodes with two simulated
// GPUs each: the API server, per node the simulated kubelet and container runtime, the real
// hami-device-plugin and hami-monitor, then the real hami-scheduler behind the kube-scheduler
// stand-in), the example pods applied with kubectl, and then what a user would check: where the
// pods landed (binpack), that each container's CUDA program and a login-style process in it are
// held to the pod's share (its log), the monitor's metrics for each pod (promtool), a deleted
// pod's directory and limits file cleaned up while a live pod's stay, the components' requests
// against the deployment's RBAC, and `hami sim cluster down` leaving no process and no file.
//
// Root only (the container runtime's namespaces); kubectl needed.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "support/cri_log.h"
#include "support/subprocess.h"

namespace hami {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kMiB = 1 << 20;
const char* const kSharedPods[] = {"vgpu-3000m-30", "vgpu-half-1", "vgpu-half-2"};

std::string Bin(const std::string& name) { return std::string(HAMI_BIN_DIR) + "/" + name; }
std::string Example(const std::string& name) { return std::string(HAMI_EXAMPLES_DIR) + "/" + name; }

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

using ::hami::testing::Ran;
using ::hami::testing::RunCommand;

// Waits until `path` no longer exists, on inotify events of its parent directory.
bool WaitForRemoval(const std::string& path, int timeout_ms) {
  UniqueFd fd(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!fd.valid()) return false;
  const std::string parent = std::filesystem::path(path).parent_path();
  if (inotify_add_watch(fd.get(), parent.c_str(), IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF) < 0) {
    return !Exists(path);
  }
  const int64_t deadline = MonotonicNs() + int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    if (!Exists(path)) return true;
    const int64_t left_ms = (deadline - MonotonicNs()) / 1'000'000;
    if (left_ms <= 0) return false;
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, int(left_ms)) > 0) {
      char buf[4096];
      while (read(fd.get(), buf, sizeof(buf)) > 0) {
      }
    }
  }
}

// The processes whose environment carries HAMI_SIM_CLUSTER=<dir>.
// The processes whose /proc/<pid>/<file> (NUL-separated fields) satisfies `match`.
std::vector<pid_t> ProcessesWhere(const char* file,
                                  const std::function<bool(const std::string&)>& match) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    auto text = ReadFileToString("/proc/" + std::to_string(pid) + "/" + file, 1 << 20);
    if (text.ok() && match(*text)) out.push_back(pid);
  }
  closedir(proc);
  return out;
}

std::vector<pid_t> ClusterProcesses(const std::string& dir) {
  const std::string mark = "HAMI_SIM_CLUSTER=" + dir;
  return ProcessesWhere("environ", [&](const std::string& env) {
    for (size_t pos = 0; pos < env.size();) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      if (env.compare(pos, end - pos, mark) == 0) return true;
      pos = end + 1;
    }
    return false;
  });
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    base_ = new TempDir("hami-cluster-test");
    dir_ = base_->path() + "/cluster";
    // A short resync interval, so that the monitor's cleanup of a deleted pod shows in the test.
    Ran up = RunCommand({Bin("hami"), "sim", "cluster", "up", "--dir", dir_, "--nodes", "2",
                         "--gpus", "h100-80g:2", "--monitor-resync-interval", "2s"},
                        {}, 120000);
    up_output_ = up.out;
    up_code_ = up.code;
    if (up.code == 0) {
      auto text = ReadFileToString(dir_ + "/cluster.json", 1 << 20);
      if (text.ok()) info_ = json::parse(*text, nullptr, false);
    }
  }
  static void TearDownTestSuite() {
    if (base_ == nullptr) return;
    if (Exists(dir_))
      RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", dir_}, {}, 120000);
    delete base_;
    base_ = nullptr;
  }

  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the nodes run containerd (namespaces, mounts, cgroups), "
                      "and the device plugin prepares /tmp/vgpulock";
    }
    if (access("/usr/bin/kubectl", X_OK) != 0) GTEST_SKIP() << "needs kubectl (/usr/bin/kubectl)";
    ASSERT_EQ(up_code_, 0) << "hami sim cluster up failed:\n" << up_output_;
    ASSERT_TRUE(info_.is_object()) << "no cluster.json in " << dir_;
  }

  static Ran Kubectl(std::vector<std::string> args, int timeout_ms = 60000) {
    args.insert(args.begin(), "/usr/bin/kubectl");
    return RunCommand(args, {{"KUBECONFIG", info_["kubeconfig"].get<std::string>()}}, timeout_ms);
  }
  static json Get(const std::string& what) {
    Ran r = Kubectl({"get", what, "-o", "json"});
    if (r.code != 0) return json();
    return json::parse(r.out, nullptr, false);
  }
  static std::string Annotation(const json& obj, const std::string& key) {
    const json& ann = obj["metadata"].value("annotations", json::object());
    auto it = ann.find(key);
    return it == ann.end() ? std::string() : it->get<std::string>();
  }
  static std::string PodLog(const std::string& pod) {
    if (info_.value("pod_logs", false)) {
      Ran r = Kubectl({"logs", pod});
      if (r.code == 0) return r.out;
    }
    return PodLogFile(pod, "cuda");
  }
  // What `container` of `pod` printed, from its newest log file (support/cri_log.h).
  static std::string PodLogFile(const std::string& pod, const std::string& container) {
    return testing::ReadContainerLog(dir_ + "/logs/pods", "default", pod, container);
  }
  static json Node(const std::string& name) {
    for (const json& n : info_["nodes"]) {
      if (n["name"] == name) return n;
    }
    return json();
  }
  static std::string Metrics(const std::string& node) {
    // Python's urllib rather than curl: python3 is a dependency already (tests/deploy).
    Ran r = RunCommand({"/usr/bin/python3", "-c",
                        "import sys, urllib.request; "
                        "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10)"
                        ".read().decode())",
                        Node(node)["monitor_url"].get<std::string>() + "/metrics"});
    return r.code == 0 ? r.out : std::string();
  }

  // Applies an example and waits (kubectl wait, on the pods' watch) until its pods are Ready.
  static void ApplyAndWait(const std::string& file, const std::vector<std::string>& pods) {
    Ran applied = Kubectl({"apply", "-f", Example(file)});
    ASSERT_EQ(applied.code, 0) << applied.out;
    std::vector<std::string> args = {"wait", "--for=condition=Ready", "--timeout=60s"};
    for (const std::string& p : pods) args.push_back("pod/" + p);
    Ran waited = Kubectl(args, 90000);
    if (waited.code != 0) {
      std::string logs;
      for (const std::string& p : pods) logs += "--- " + p + ":\n" + PodLog(p);
      FAIL() << "pods of " << file << " not Ready: " << waited.out << "\n"
             << Kubectl({"get", "pods", "-o", "wide"}).out << logs;
    }
  }

  static TempDir* base_;
  static std::string dir_;
  static std::string up_output_;
  static int up_code_;
  static json info_;
};

TempDir* ClusterTest::base_ = nullptr;
std::string ClusterTest::dir_;
std::string ClusterTest::up_output_;
int ClusterTest::up_code_ = -1;
json ClusterTest::info_;

// Runs before the main test (which ends with down); its pods hold no devices and are deleted.
TEST_F(ClusterTest, ThePodStatusShowsAFailedAdmissionARestartAndACompletion) {
  // A GPU pod placed without hami-scheduler (the default-scheduler stand-in; the label keeps
  // the webhook away): the device plugin finds no binding pod, and the kubelet rejects it.
  const std::string unplaced = base_->path() + "/unplaced.yaml";
  ASSERT_TRUE(std::ofstream(unplaced) << R"(apiVersion: v1
kind: Pod
metadata:
  name: unplaced
  labels:
    hami.io/webhook: ignore
spec:
  schedulerName: default-scheduler
  restartPolicy: Never
  containers:
  - name: main
    image: hami.local/sim/base:1
    command: ["true"]
    resources:
      limits:
        nvidia.com/gpu: 1
---
apiVersion: v1
kind: Pod
metadata:
  name: crashing
spec:
  restartPolicy: OnFailure
  containers:
  - name: main
    image: hami.local/sim/base:1
    command: ["sh", "-c", "echo attempt; exit 3"]
)");
  Ran applied = Kubectl({"apply", "-f", unplaced});
  ASSERT_EQ(applied.code, 0) << applied.out;
  Ran plain = Kubectl({"apply", "-f", Example("plain-pod.yaml")});
  ASSERT_EQ(plain.code, 0) << plain.out;

  Ran rejected = Kubectl({"wait", "--for=jsonpath={.status.reason}=UnexpectedAdmissionError",
                          "--timeout=60s", "pod/unplaced"},
                         90000);
  EXPECT_EQ(rejected.code, 0) << rejected.out
                              << Kubectl({"get", "pod", "unplaced", "-o", "yaml"}).out;
  json pod = Get("pod/unplaced");
  EXPECT_EQ(pod["status"].value("phase", ""), "Failed");
  EXPECT_THAT(pod["status"].value("message", ""),
              HasSubstr("Pod was rejected: Allocate failed due to "));

  bool event = false;
  json events = Get("events");
  for (const json& e : events.value("items", json::array())) {
    if (e["involvedObject"].value("name", "") == "unplaced" &&
        e.value("reason", "") == "UnexpectedAdmissionError") {
      event = e.value("type", "") == "Warning" && e["source"].value("component", "") == "kubelet";
    }
  }
  EXPECT_TRUE(event) << "the kubelet's Warning event for the rejection: " << events.dump();

  // Restarted at least once: how often by now depends on how busy the machine is, so the
  // count is not waited for as one value (it may have passed it before the wait began).
  const bool restarted = ::hami::testing::PollUntil(
      [&] {
        json p = Get("pod/crashing");
        const json& statuses = p["status"]["containerStatuses"];
        return statuses.is_array() && !statuses.empty() &&
               statuses[0].value("restartCount", 0) >= 1;
      },
      60000, 100000);
  EXPECT_TRUE(restarted) << Kubectl({"get", "pod", "crashing", "-o", "yaml"}).out;
  pod = Get("pod/crashing");
  EXPECT_EQ(pod["status"].value("phase", ""), "Running") << "OnFailure restarts a failed container";

  Ran done = Kubectl(
      {"wait", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s", "pod/plain"}, 90000);
  EXPECT_EQ(done.code, 0) << done.out;
  pod = Get("pod/plain");
  const json& cs = pod["status"]["containerStatuses"][0];
  EXPECT_EQ(cs["state"]["terminated"].value("exitCode", -1), 0) << cs.dump();
  EXPECT_EQ(cs["state"]["terminated"].value("reason", ""), "Completed") << cs.dump();
  EXPECT_THAT(cs.value("containerID", ""), ::testing::StartsWith("containerd://"));
  EXPECT_THAT(PodLogFile("plain", "main"), HasSubstr("hello from plain on node-"));

  Ran deleted = Kubectl({"delete", "pod", "unplaced", "crashing", "plain", "--timeout=60s"}, 90000);
  EXPECT_EQ(deleted.code, 0) << deleted.out;
}

// The processes whose command line holds `needle` (argv joined by spaces).
std::vector<pid_t> ProcessesRunning(const std::string& needle) {
  return ProcessesWhere("cmdline", [&](std::string line) {
    std::replace(line.begin(), line.end(), '\0', ' ');
    return line.find(needle) != std::string::npos;
  });
}

// What a node has to live through: its containerd dying while pods run (the node goes
// NotReady, its pods report it, containerd comes back with the same containers), a container
// killed from outside, a mount source that cannot be made, and the device plugin's hook file
// gone. Its pods are deleted.
TEST_F(ClusterTest, ANodeLivesThroughItsRuntimeDyingAKilledContainerAndBadMountSources) {
  const std::string file = base_->path() + "/failures.yaml";
  ASSERT_TRUE(std::ofstream(file) << R"(apiVersion: v1
kind: Pod
metadata:
  name: survivor
spec:
  restartPolicy: Never
  nodeSelector:
    kubernetes.io/hostname: node-1
  containers:
  - name: main
    image: hami.local/sim/base:1
    command: ["sleep", "3601"]
)");
  Ran applied = Kubectl({"apply", "-f", file});
  ASSERT_EQ(applied.code, 0) << applied.out;
  Ran ready = Kubectl({"wait", "--for=condition=Ready", "--timeout=60s", "pod/survivor"}, 90000);
  ASSERT_EQ(ready.code, 0) << ready.out << Kubectl({"get", "pod", "survivor", "-o", "yaml"}).out;
  const std::string container_id =
      Get("pod/survivor")["status"]["containerStatuses"][0].value("containerID", "");
  ASSERT_THAT(container_id, ::testing::StartsWith("containerd://"));

  // containerd killed: the node is NotReady with the reason, the pod reports it.
  const std::string config = dir_ + "/nodes/node-1/containerd/config.toml";
  std::vector<pid_t> containerd = ProcessesRunning("containerd --config " + config);
  ASSERT_EQ(containerd.size(), 1u) << "node-1's containerd";
  ASSERT_EQ(kill(containerd[0], SIGKILL), 0);
  // The objects as `kubectl wait` saw them meet the condition (containerd is started again
  // 5 s after it died).
  Ran down = Kubectl(
      {"wait", "--for=condition=Ready=false", "--timeout=30s", "node/node-1", "-o", "json"}, 60000);
  ASSERT_EQ(down.code, 0) << down.out;
  json node = json::parse(down.out, nullptr, false);
  std::string ready_message;
  for (const json& c : node["status"]["conditions"]) {
    if (c.value("type", "") == "Ready") ready_message = c.value("message", "");
  }
  EXPECT_THAT(ready_message, HasSubstr("container runtime is down: containerd exited with status"));
  Ran pod_down = Kubectl(
      {"wait", "--for=condition=Ready=false", "--timeout=10s", "pod/survivor", "-o", "json"},
      30000);
  ASSERT_EQ(pod_down.code, 0) << pod_down.out;
  std::string pod_reason;
  const json pod_seen = json::parse(pod_down.out, nullptr, false);
  for (const json& c : pod_seen["status"]["conditions"]) {
    if (c.value("type", "") == "Ready") pod_reason = c.value("reason", "");
  }
  EXPECT_EQ(pod_reason, "ContainerRuntimeDown") << pod_down.out;

  // containerd back: the same container runs on, never started twice.
  Ran back = Kubectl({"wait", "--for=condition=Ready", "--timeout=60s", "node/node-1"}, 90000);
  ASSERT_EQ(back.code, 0) << back.out;
  ready = Kubectl({"wait", "--for=condition=Ready", "--timeout=30s", "pod/survivor"}, 60000);
  ASSERT_EQ(ready.code, 0) << ready.out;
  json cs = Get("pod/survivor")["status"]["containerStatuses"][0];
  EXPECT_EQ(cs.value("containerID", ""), container_id);
  EXPECT_EQ(cs.value("restartCount", -1), 0);
  EXPECT_TRUE(cs["state"].contains("running")) << cs.dump();
  auto node_log = ReadFileToString(dir_ + "/logs/node-node-1.log", 8 << 20);
  ASSERT_TRUE(node_log.ok());
  EXPECT_THAT(*node_log, ::testing::ContainsRegex("event=runtime_restarted .*containers=[1-9]"));
  EXPECT_THAT(ProcessesRunning("containerd --config " + config), ::testing::SizeIs(1));

  // The container's process killed from outside: its exit code and reason in the status.
  std::vector<pid_t> sleeper = ProcessesRunning("sleep 3601");
  ASSERT_EQ(sleeper.size(), 1u);
  ASSERT_EQ(kill(sleeper[0], SIGKILL), 0);
  Ran failed = Kubectl(
      {"wait", "--for=jsonpath={.status.phase}=Failed", "--timeout=30s", "pod/survivor"}, 60000);
  ASSERT_EQ(failed.code, 0) << failed.out;
  cs = Get("pod/survivor")["status"]["containerStatuses"][0];
  EXPECT_EQ(cs["state"]["terminated"].value("exitCode", 0), 137) << cs.dump();
  EXPECT_EQ(cs["state"]["terminated"].value("reason", ""), "Error") << cs.dump();

  // A mount source the runtime cannot make (containerd makes a missing one a directory, which
  // fails under a regular file): CreateContainerError with containerd's message.
  ASSERT_TRUE(std::ofstream(file) << R"(apiVersion: v1
kind: Pod
metadata:
  name: unmountable
spec:
  restartPolicy: Never
  nodeSelector:
    kubernetes.io/hostname: node-1
  volumes:
  - name: data
    hostPath:
      path: /etc/hostname/data
  containers:
  - name: main
    image: hami.local/sim/base:1
    command: ["true"]
    volumeMounts:
    - name: data
      mountPath: /data
)");
  applied = Kubectl({"apply", "-f", file});
  ASSERT_EQ(applied.code, 0) << applied.out;
  Ran waiting = Kubectl({"wait",
                         "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}="
                         "CreateContainerError",
                         "--timeout=60s", "pod/unmountable"},
                        90000);
  ASSERT_EQ(waiting.code, 0) << waiting.out
                             << Kubectl({"get", "pod", "unmountable", "-o", "yaml"}).out;
  EXPECT_THAT(Get("pod/unmountable")["status"]["containerStatuses"][0]["state"]["waiting"].value(
                  "message", ""),
              HasSubstr("/etc/hostname/data"));

  // The device plugin's hook file gone: containerd would bind an empty directory at
  // /etc/ld.so.preload and the container would run without libvgpu; the plugin refuses the
  // Allocate instead, and the kubelet fails the pod naming the file.
  const std::string preload = dir_ + "/nodes/node-1/hook/vgpu/ld.so.preload";
  ASSERT_TRUE(Exists(preload));
  ASSERT_EQ(rename(preload.c_str(), (preload + ".away").c_str()), 0);
  ASSERT_TRUE(std::ofstream(file) << R"(apiVersion: v1
kind: Pod
metadata:
  name: unhooked
spec:
  restartPolicy: Never
  nodeSelector:
    kubernetes.io/hostname: node-1
  containers:
  - name: cuda
    image: hami.local/sim/base:1
    command: ["true"]
    resources:
      limits:
        nvidia.com/gpu: 1
        nvidia.com/gpumem: 1000
)");
  applied = Kubectl({"apply", "-f", file});
  Ran rejected = Kubectl({"wait", "--for=jsonpath={.status.reason}=UnexpectedAdmissionError",
                          "--timeout=60s", "pod/unhooked"},
                         90000);
  const json unhooked = Get("pod/unhooked");
  ASSERT_EQ(rename((preload + ".away").c_str(), preload.c_str()), 0);
  ASSERT_EQ(applied.code, 0) << applied.out;
  ASSERT_EQ(rejected.code, 0) << rejected.out << unhooked.dump();
  EXPECT_THAT(unhooked["status"].value("message", ""),
              HasSubstr("ld.so.preload (bound at /etc/ld.so.preload"));
  EXPECT_THAT(unhooked["status"].value("message", ""),
              HasSubstr("the container would run without its limits"));

  Ran deleted =
      Kubectl({"delete", "pod", "survivor", "unmountable", "unhooked", "--timeout=60s"}, 90000);
  EXPECT_EQ(deleted.code, 0) << deleted.out;
}

// One test: the steps depend on each other (the pods applied are those deleted and cleaned up).
TEST_F(ClusterTest, PodsArePlacedHeldMeasuredCleanedUpAndDownLeavesNothing) {
  // The nodes are Ready with their GPUs.
  json nodes = Get("nodes");
  ASSERT_EQ(nodes["items"].size(), 2u) << nodes.dump();
  for (const json& n : nodes["items"]) {
    EXPECT_EQ(n["status"]["capacity"].value("nvidia.com/gpu", ""), "20")
        << "2 GPUs split 10 ways: " << n["status"].dump();
    EXPECT_THAT(Annotation(n, "hami.io/node-nvidia-register"), Not(::testing::IsEmpty()));
  }

  // status lists every component running.
  Ran status = RunCommand({Bin("hami"), "sim", "cluster", "status", "--dir", dir_});
  EXPECT_EQ(status.code, 0) << status.out;
  for (const char* c : {"apiserver", "node/node-1", "device-plugin/node-2", "monitor/node-1",
                        "hami-scheduler", "kube-scheduler"}) {
    EXPECT_THAT(status.out, ::testing::ContainsRegex(std::string(c) + " +[0-9]+ +running"));
  }

  // The demo's four pods, one after another, so that each placement sees the ones before it.
  ApplyAndWait("vgpu-3000m-30.yaml", {"vgpu-3000m-30"});
  ApplyAndWait("vgpu-half-1.yaml", {"vgpu-half-1"});
  ApplyAndWait("vgpu-half-2.yaml", {"vgpu-half-2"});
  ApplyAndWait("gpu-exclusive.yaml", {"gpu-exclusive"});
  if (HasFailure()) return;

  // Placement: from the scheduler's annotations. hami.io/vgpu-devices-allocated is
  // "UUID,NVIDIA,MiB,cores:;" per container.
  std::map<std::string, std::string> node_of;
  std::map<std::string, std::vector<std::pair<std::string, int64_t>>>
      gpus_of;  // pod -> (uuid, MiB)
  json pods = Get("pods");
  for (const json& p : pods["items"]) {
    const std::string name = p["metadata"]["name"];
    node_of[name] = p["spec"].value("nodeName", "");
    EXPECT_EQ(Annotation(p, "hami.io/vgpu-node"), node_of[name]) << name;
    EXPECT_EQ(Annotation(p, "hami.io/bind-phase"), "success") << name;
    if (info_.value("webhook", false)) {
      EXPECT_EQ(p["spec"].value("schedulerName", ""), "hami-scheduler")
          << name << ": the examples name no scheduler; hami-scheduler's webhook gives it";
    }
    std::smatch m;
    std::string devices = Annotation(p, "hami.io/vgpu-devices-allocated");
    std::regex entry("(GPU-[0-9a-f-]+),NVIDIA,([0-9]+),([0-9]+)");
    for (auto it = std::sregex_iterator(devices.begin(), devices.end(), entry);
         it != std::sregex_iterator(); ++it) {
      gpus_of[name].push_back({(*it)[1].str(), std::stoll((*it)[2].str())});
    }
    EXPECT_EQ(gpus_of[name].size(), 1u) << name << ": " << devices;
  }
  // binpack: the three shared pods fill one node before the other is used (81559 MiB GPUs:
  // 3000 + 40779 + 40779 MiB fit in two GPUs), and the exclusive pod, which needs a whole
  // GPU, goes to the other node.
  EXPECT_EQ(node_of["vgpu-half-1"], node_of["vgpu-3000m-30"]);
  EXPECT_EQ(node_of["vgpu-half-2"], node_of["vgpu-3000m-30"]);
  EXPECT_NE(node_of["gpu-exclusive"], node_of["vgpu-3000m-30"]);
  std::map<std::string, int64_t> used_mib;
  std::map<std::string, int> pods_on_gpu;
  for (const auto& [pod, gpus] : gpus_of) {
    for (const auto& [uuid, mib] : gpus) {
      used_mib[uuid] += mib;
      pods_on_gpu[uuid] += 1;
    }
  }
  for (const auto& [uuid, mib] : used_mib) EXPECT_LE(mib, 81559) << uuid << " is overcommitted";
  ASSERT_FALSE(gpus_of["gpu-exclusive"].empty());
  EXPECT_EQ(pods_on_gpu[gpus_of["gpu-exclusive"][0].first], 1) << "the exclusive GPU is shared";
  ASSERT_FALSE(gpus_of["vgpu-3000m-30"].empty());
  EXPECT_EQ(gpus_of["vgpu-3000m-30"][0].second, 3000);
  EXPECT_EQ(gpus_of["vgpu-half-1"][0].second, 40779) << "50% of an H100's 81559 MiB";

  // Limits: each shared pod's program, and a login-style process with an empty environment,
  // saw the share and were refused past it. Ready says only that a container started; its
  // script reaches its hold after those checks, and nothing announces that but the log line,
  // so the log is polled for it (the timeout bounds a pod that never gets there).
  auto held_log = [](const std::string& pod) {
    std::string log;
    testing::PollUntil(
        [&] {
          log = PodLog(pod);
          return log.find("\nholding ") != std::string::npos;
        },
        60000, 100000);
    return log;
  };
  for (const char* pod : kSharedPods) {
    const std::string log = held_log(pod);
    EXPECT_THAT(log, Not(HasSubstr("FAILED"))) << pod << ":\n" << log;
    EXPECT_THAT(log, HasSubstr("a login-style session")) << pod << ":\n" << log;
    const std::regex refused("ok: +an allocation past the limit is refused");
    auto n = std::distance(std::sregex_iterator(log.begin(), log.end(), refused),
                           std::sregex_iterator());
    EXPECT_EQ(n, 2) << pod << ": the process and the env -i session are both held:\n" << log;
    EXPECT_THAT(log, HasSubstr("holding")) << pod;
  }
  EXPECT_THAT(PodLog("vgpu-3000m-30"), HasSubstr("cuMemGetInfo: total 3000 MiB"));
  EXPECT_THAT(PodLog("vgpu-half-1"), HasSubstr("cuMemGetInfo: total 40779 MiB"));
  EXPECT_THAT(held_log("gpu-exclusive"), HasSubstr("holding"));

  // Metrics: each node's monitor shows its pods' limits and usage; the exposition passes
  // promtool.
  const std::map<std::string, int64_t> limit_mib = {
      {"vgpu-3000m-30", 3000}, {"vgpu-half-1", 40779}, {"vgpu-half-2", 40779}};
  for (const json& n : info_["nodes"]) {
    const std::string node = n["name"];
    if (n.value("monitor_url", "").empty()) {
      ADD_FAILURE() << "node " << node << " runs without hami-monitor";
      continue;
    }
    // The monitor scans the container directories every --feedback-interval (5 s): no event
    // says a scan has seen the pods, so the scrape is repeated until it shows them all.
    std::string text;
    testing::PollUntil(
        [&] {
          text = Metrics(node);
          for (const auto& [pod, node_name] : node_of) {
            if (node_name == node && text.find("pod=\"" + pod + "\"") == std::string::npos) {
              return false;
            }
          }
          return true;
        },
        30000, 200000);
    ASSERT_THAT(text, HasSubstr("hami_vgpu_memory_limit_bytes")) << node << ":\n" << text;
    const std::string file = base_->path() + "/metrics-" + node + ".txt";
    ASSERT_TRUE(std::ofstream(file) << text);
    Ran lint = RunCommand({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file + " 2>&1"});
    EXPECT_EQ(lint.code, 0) << "promtool on " << node << "'s metrics:\n" << lint.out;
    for (const auto& [pod, node_name] : node_of) {
      if (node_name != node) continue;
      EXPECT_THAT(text, HasSubstr("pod=\"" + pod + "\"")) << pod << " has no series on " << node;
      auto limit = limit_mib.find(pod);
      if (limit == limit_mib.end()) continue;
      // On the GPU it was given: the container sees only that one.
      std::regex series("hami_vgpu_memory_limit_bytes\\{[^}]*pod=\"" + pod +
                        "\"[^}]*device_uuid=\"" + gpus_of[pod][0].first + "\"[^}]*\\} " +
                        std::to_string(limit->second * kMiB));
      EXPECT_TRUE(std::regex_search(text, series)) << pod << "'s limit on " << node << ":\n"
                                                   << text;
    }
  }

  // Deletion and cleanup: the deleted pod's directory and limits file go (the monitor's
  // resync interval is 2 s here); the live pod's stay.
  const std::string hook = Node(node_of["vgpu-3000m-30"])["hook_path"];
  const std::string containers = hook + "/vgpu/containers/";
  auto uid = [&](const std::string& pod) {
    for (const json& p : pods["items"]) {
      if (p["metadata"]["name"] == pod) return p["metadata"]["uid"].get<std::string>();
    }
    return std::string();
  };
  const std::string gone = containers + uid("vgpu-3000m-30") + "_cuda";
  const std::string live = containers + uid("vgpu-half-1") + "_cuda";
  ASSERT_TRUE(Exists(gone)) << gone;
  ASSERT_TRUE(Exists(gone + ".limits"));
  ASSERT_TRUE(Exists(live));
  // The toolkit's stand-in for each GPU container's device nodes: its GPU alone, gone with
  // the pod (the node removes it when the pod's containers have ended).
  const std::string toolkit =
      Node(node_of["vgpu-3000m-30"])["dir"].get<std::string>() + "/toolkit/containers/";
  const std::string gone_nodes = toolkit + uid("vgpu-3000m-30") + "_cuda";
  const std::string live_nodes = toolkit + uid("vgpu-half-1") + "_cuda/device-nodes";
  for (const auto& [path, pod] : {std::pair{gone_nodes + "/device-nodes", "vgpu-3000m-30"},
                                  std::pair{live_nodes, "vgpu-half-1"}}) {
    auto text = ReadFileToString(path, 1 << 16);
    ASSERT_TRUE(text.ok()) << text.error().message();
    EXPECT_EQ(*text, gpus_of[pod][0].first + "\n") << path;
  }
  Ran deleted = Kubectl({"delete", "pod", "vgpu-3000m-30", "--timeout=60s"}, 90000);
  ASSERT_EQ(deleted.code, 0) << deleted.out;
  EXPECT_TRUE(WaitForRemoval(gone, 60000)) << gone << " is still there";
  EXPECT_TRUE(WaitForRemoval(gone + ".limits", 10000));
  EXPECT_TRUE(Exists(live)) << "a live pod's directory was removed";
  EXPECT_TRUE(Exists(live + ".limits"));
  EXPECT_TRUE(WaitForRemoval(gone_nodes, 10000)) << gone_nodes << " is still there";
  EXPECT_TRUE(Exists(live_nodes)) << "a live pod's device-nodes file was removed";

  // RBAC: every request the components made is granted by the deployment's roles.
  const std::string rbac = std::string(HAMI_SOURCE_DIR) + "/tests/deploy/rbac_check.py";
  Ran audit = Kubectl({"get", "--raw", "/sim/audit"});
  if (Exists(rbac) && audit.code == 0) {
    const std::string audit_file = base_->path() + "/audit.json";
    ASSERT_TRUE(std::ofstream(audit_file) << audit.out);
    const std::string manifests = base_->path() + "/manifests.yaml";
    Ran rendered = RunCommand(
        {"/usr/bin/kubectl", "kustomize", std::string(HAMI_SOURCE_DIR) + "/deploy/base"});
    ASSERT_EQ(rendered.code, 0) << rendered.out;
    ASSERT_TRUE(std::ofstream(manifests) << rendered.out);
    Ran checked = RunCommand({"/bin/sh", "-c",
                              "/usr/bin/python3 " + rbac + " --manifests " + manifests +
                                  " --audit " + audit_file + " 2>&1"});
    EXPECT_EQ(checked.code, 0) << "rbac_check.py:\n" << checked.out;
  } else {
    std::printf("(RBAC check skipped: %s)\n", Exists(rbac) ? "the API server has no /sim/audit"
                                                           : "no tests/deploy/rbac_check.py");
  }

  // Down: no process and no file left.
  Ran down = RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", dir_}, {}, 120000);
  EXPECT_EQ(down.code, 0) << down.out;
  EXPECT_FALSE(Exists(dir_)) << dir_ << " was left behind";
  EXPECT_THAT(ClusterProcesses(dir_), ::testing::IsEmpty()) << "processes of the cluster live on";
  // Down again: nothing to do, and fine.
  Ran again = RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", dir_});
  EXPECT_EQ(again.code, 0) << again.out;
}

// The commands' refusals and `down` on what is left of a cluster, without starting one.
TEST(ClusterCommand, UpRefusesWithoutRootSayingWhy) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop to another user";
  TempDir dir("hami-cluster-noroot");
  // As nobody: setpriv drops the user and every capability.
  Ran up =
      RunCommand({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh",
                  "-c", Bin("hami") + " sim cluster up --dir " + dir.path() + "/c 2>&1"});
  EXPECT_EQ(up.code, 1) << up.out;
  EXPECT_THAT(up.out, HasSubstr("needs root: the nodes run containerd, which makes namespaces, "
                                "mounts and cgroups"));
  EXPECT_FALSE(Exists(dir.path() + "/c")) << "nothing was made";
}

// The live region slot of the example's holding process (`hami-memory-demo hold`) in the
// container "cuda" of pod `uid` on node-1 of cluster `c`, as `hami inspect` shows it (null
// when none shows within 30 s).
json HolderSlot(const std::string& c, const std::string& uid) {
  const std::string region = c + "/nodes/node-1/hook/vgpu/containers/" + uid + "_cuda/usage.cache";
  json slot;
  ::hami::testing::PollUntil(
      [&] {
        Ran inspect = RunCommand({Bin("hami"), "inspect", "--json", "--no-nvml", region});
        json r = json::parse(inspect.out, nullptr, false);
        if (!r.is_object() || !r.contains("slots")) return false;
        for (const json& s : r["slots"]) {
          if (s.value("state", "") != "live" || !s.value("alive", false)) continue;
          auto cmdline = ReadFileToString(
              "/proc/" + std::to_string(s.value("host_pid", 0)) + "/cmdline", 1 << 16);
          if (cmdline.ok() && cmdline->find("hold") != std::string::npos) {
            slot = s;
            return true;
          }
        }
        return false;
      },
      30000, 100000);
  return slot;
}

// The PIDs of `pid` in its namespaces, from the host's /proc/<pid>/status (NSpid).
std::vector<pid_t> NsPids(pid_t pid) {
  std::vector<pid_t> out;
  auto status = ReadFileToString("/proc/" + std::to_string(pid) + "/status", 1 << 16);
  if (!status.ok()) return out;
  std::istringstream lines(*status);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("NSpid:")) continue;
    std::istringstream f(line.substr(6));
    for (pid_t p; f >> p;) out.push_back(p);
  }
  return out;
}

// A pod's process as a real node shows it: in its own PID namespace, in the kubelet's pod
// cgroup under the node's containerd, its limit files read-only and /tmp/vgpulock writable;
// with --broker its region slot names it by the host's PID, learned from the broker. And a
// container that takes the GPU through the toolkit's variable, without the device plugin, is
// found by hami-monitor through its real cgroup.
TEST(ClusterCommand, ABrokeredNodeNamesPodProcessesByHostPidAndTheMonitorFindsAnEscapee) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the nodes run containerd";
  if (access("/usr/bin/kubectl", X_OK) != 0) GTEST_SKIP() << "needs kubectl (/usr/bin/kubectl)";
  TempDir dir("hami-cluster-broker");
  const std::string c = dir.path() + "/c";
  Ran up = RunCommand({Bin("hami"), "sim", "cluster", "up", "--dir", c, "--nodes", "1", "--broker",
                       "--monitor-resync-interval", "2s", "--monitor-feedback-interval", "1s"},
                      {}, 120000);
  ASSERT_EQ(up.code, 0) << up.out;
  auto info_text = ReadFileToString(c + "/cluster.json", 1 << 20);
  ASSERT_TRUE(info_text.ok());
  const json info = json::parse(*info_text, nullptr, false);
  const std::map<std::string, std::string> env = {{"KUBECONFIG", c + "/kubeconfig"}};
  auto kubectl = [&](std::vector<std::string> args, int timeout_ms = 60000) {
    args.insert(args.begin(), "/usr/bin/kubectl");
    return RunCommand(args, env, timeout_ms);
  };
  Cleanup down([&] {
    RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", c}, {}, 120000);
  });

  Ran applied = kubectl({"apply", "-f", std::string(HAMI_EXAMPLES_DIR) + "/vgpu-3000m-30.yaml"});
  ASSERT_EQ(applied.code, 0) << applied.out;
  Ran ready =
      kubectl({"wait", "--for=condition=Ready", "--timeout=60s", "pod/vgpu-3000m-30"}, 90000);
  ASSERT_EQ(ready.code, 0) << ready.out;
  Ran got = kubectl({"get", "pod", "vgpu-3000m-30", "-o", "json"});
  const std::string uid = json::parse(got.out, nullptr, false)["metadata"].value("uid", "");
  ASSERT_FALSE(uid.empty()) << got.out;

  // The holder (hami-memory-demo hold) as the region's slot names it.
  const json slot = HolderSlot(c, uid);
  ASSERT_TRUE(slot.is_object()) << "no live slot of the holding process of pod " << uid;
  const pid_t host_pid = slot.value("host_pid", 0);
  EXPECT_EQ(slot.value("identity", ""), "broker") << slot.dump();
  const std::vector<pid_t> nspid = NsPids(host_pid);
  ASSERT_EQ(nspid.size(), 2u) << "its own PID namespace";
  EXPECT_EQ(nspid[0], host_pid) << "the host's view of the slot's PID";
  EXPECT_EQ(slot.value("pid", 0), nspid[1]) << "its PID in the container";
  auto cgroup = ReadFileToString("/proc/" + std::to_string(host_pid) + "/cgroup", 1 << 16);
  ASSERT_TRUE(cgroup.ok());
  EXPECT_THAT(*cgroup, HasSubstr("/kubepods/besteffort/pod" + uid + "/"));
  auto mountinfo = ReadFileToString("/proc/" + std::to_string(host_pid) + "/mountinfo", 1 << 20);
  ASSERT_TRUE(mountinfo.ok());
  auto access_of = [&](const std::string& target) {
    std::istringstream lines(*mountinfo);
    std::string found;
    for (std::string line; std::getline(lines, line);) {
      std::istringstream f(line);
      std::string id, parent, dev, root, point, options;
      f >> id >> parent >> dev >> root >> point >> options;
      if (point == target) found = options.substr(0, 2);
    }
    return found;
  };
  EXPECT_EQ(access_of("/overrideEnv"), "ro");
  EXPECT_EQ(access_of("/etc/ld.so.preload"), "ro");
  EXPECT_EQ(access_of("/tmp/vgpulock"), "rw");

  // The escapee: no GPU asked, NVIDIA_VISIBLE_DEVICES=all in its own env.
  const std::string escapee = dir.path() + "/escapee.yaml";
  ASSERT_TRUE(std::ofstream(escapee) << R"(apiVersion: v1
kind: Pod
metadata:
  name: escapee
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: hami.local/sim/base:1
    command: ["sh", "-c", "sleep infinity | hami-memory-demo hold 512m"]
    env:
    - name: NVIDIA_VISIBLE_DEVICES
      value: all
)");
  applied = kubectl({"apply", "-f", escapee});
  ASSERT_EQ(applied.code, 0) << applied.out;
  ready = kubectl({"wait", "--for=condition=Ready", "--timeout=60s", "pod/escapee"}, 90000);
  ASSERT_EQ(ready.code, 0) << ready.out;
  const std::string monitor = info["nodes"][0].value("monitor_url", "");
  ASSERT_FALSE(monitor.empty());
  std::string series;
  const bool seen = ::hami::testing::PollUntil(
      [&] {
        Ran m = RunCommand({"/usr/bin/python3", "-c",
                            "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
                            "sys.argv[1], timeout=10).read().decode())",
                            monitor + "/metrics"});
        std::istringstream lines(m.out);
        for (std::string line; std::getline(lines, line);) {
          if (line.starts_with("hami_container_unaccounted_memory_bytes{") &&
              line.find("pod=\"escapee\"") != std::string::npos) {
            series = line;
            return true;
          }
        }
        return false;
      },
      60000, 200000);
  ASSERT_TRUE(seen) << "no unaccounted series for the escapee";
  EXPECT_THAT(series, HasSubstr("attribution=\"cgroup\""));
  EXPECT_THAT(series, HasSubstr("reason=\"no_region\""));
  bool warned = false;
  ASSERT_TRUE(::hami::testing::PollUntil(
      [&] {
        Ran events = kubectl({"get", "events", "-o", "json"});
        json e = json::parse(events.out, nullptr, false);
        for (const json& item : e.value("items", json::array())) {
          if (item["involvedObject"].value("name", "") == "escapee" &&
              item.value("reason", "") == "UnaccountedGPUMemory") {
            warned = item.value("type", "") == "Warning";
            return true;
          }
        }
        return false;
      },
      30000, 200000));
  EXPECT_TRUE(warned);
}

// A node killed before it could stop its containerd leaves the runtime, its shims, a pod's
// processes, mounts and cgroups behind: down finds and removes them all.
TEST(ClusterCommand, DownAfterANodeWasKilledLeavesNoProcessMountCgroupOrRunEntry) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the nodes run containerd";
  if (access("/usr/bin/kubectl", X_OK) != 0) GTEST_SKIP() << "needs kubectl (/usr/bin/kubectl)";
  std::set<std::string> run_before;
  std::error_code ec;
  if (Exists("/run/containerd")) {
    for (auto it = std::filesystem::recursive_directory_iterator("/run/containerd", ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      run_before.insert(it->path().string());
    }
  }
  TempDir dir("hami-cluster-crash");
  const std::string c = dir.path() + "/c";
  Ran up =
      RunCommand({Bin("hami"), "sim", "cluster", "up", "--dir", c, "--nodes", "1"}, {}, 120000);
  ASSERT_EQ(up.code, 0) << up.out;
  const std::map<std::string, std::string> env = {{"KUBECONFIG", c + "/kubeconfig"}};
  const std::string pod = dir.path() + "/pod.yaml";
  ASSERT_TRUE(std::ofstream(pod) << R"(apiVersion: v1
kind: Pod
metadata:
  name: orphan
spec:
  containers:
  - name: main
    image: hami.local/sim/base:1
    command: ["sleep", "3603"]
)");
  Ran applied = RunCommand({"/usr/bin/kubectl", "apply", "-f", pod}, env);
  ASSERT_EQ(applied.code, 0) << applied.out;
  Ran ready = RunCommand(
      {"/usr/bin/kubectl", "wait", "--for=condition=Ready", "--timeout=60s", "pod/orphan"}, env,
      90000);
  ASSERT_EQ(ready.code, 0) << ready.out;
  // Without the broker a container's process is named by the next tier: the simulated NVML
  // reports host PIDs, as the real driver does, and libvgpu's probe finds its own.
  applied = RunCommand(
      {"/usr/bin/kubectl", "apply", "-f", std::string(HAMI_EXAMPLES_DIR) + "/vgpu-3000m-30.yaml"},
      env);
  ASSERT_EQ(applied.code, 0) << applied.out;
  ready = RunCommand(
      {"/usr/bin/kubectl", "wait", "--for=condition=Ready", "--timeout=60s", "pod/vgpu-3000m-30"},
      env, 90000);
  ASSERT_EQ(ready.code, 0) << ready.out;
  Ran got = RunCommand(
      {"/usr/bin/kubectl", "get", "pod", "vgpu-3000m-30", "-o", "jsonpath={.metadata.uid}"}, env);
  const json slot = HolderSlot(c, got.out);
  ASSERT_TRUE(slot.is_object()) << "no live slot of the holding process";
  EXPECT_EQ(slot.value("identity", ""), "nvml-probe") << slot.dump();
  const std::vector<pid_t> nspid = NsPids(slot.value("host_pid", 0));
  ASSERT_EQ(nspid.size(), 2u) << slot.dump();
  EXPECT_EQ(slot.value("pid", 0), nspid[1]) << slot.dump();

  // The pods' cgroups, as the node's containerd recorded them.
  auto record = ReadFileToString(c + "/nodes/node-1/containerd/cleanup", 1 << 16);
  ASSERT_TRUE(record.ok()) << record.error().message();
  std::vector<std::string> cgroups;
  std::istringstream lines(*record);
  for (std::string word, hierarchy, cgroup; lines >> word;) {
    if (word == "root" && lines >> hierarchy >> cgroup) cgroups.push_back(cgroup);
  }
  ASSERT_FALSE(cgroups.empty()) << *record;
  for (const std::string& cg : cgroups) EXPECT_TRUE(Exists(cg)) << cg;

  std::vector<pid_t> node = ProcessesRunning("hami-sim node --name node-1 --kubeconfig " + c);
  ASSERT_EQ(node.size(), 1u);
  ASSERT_EQ(kill(node[0], SIGKILL), 0);
  ASSERT_FALSE(ProcessesRunning("sleep 3603").empty()) << "the pod outlives its node";

  Ran down = RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", c}, {}, 120000);
  EXPECT_EQ(down.code, 0) << down.out;
  EXPECT_FALSE(Exists(c));
  EXPECT_THAT(ProcessesRunning("sleep 3603"), ::testing::IsEmpty());
  EXPECT_THAT(ProcessesRunning(c), ::testing::IsEmpty()) << "containerd, shims, components";
  auto mountinfo = ReadFileToString("/proc/self/mountinfo", 8 << 20);
  ASSERT_TRUE(mountinfo.ok());
  EXPECT_THAT(*mountinfo, ::testing::Not(HasSubstr(c)));
  for (const std::string& cg : cgroups) EXPECT_FALSE(Exists(cg)) << cg;
  std::set<std::string> run_after;
  if (Exists("/run/containerd")) {
    for (auto it = std::filesystem::recursive_directory_iterator("/run/containerd", ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      run_after.insert(it->path().string());
    }
  }
  // /run/containerd is shared with any other containerd of the machine: a new entry is ours
  // when no live socket is bound there.
  auto unix_sockets = ReadFileToString("/proc/net/unix", 16 << 20);
  ASSERT_TRUE(unix_sockets.ok());
  for (const std::string& e : run_after) {
    if (run_before.contains(e) || unix_sockets->find(" " + e + "\n") != std::string::npos) continue;
    if (std::filesystem::is_directory(e)) continue;  // kept while another containerd uses it
    ADD_FAILURE() << "left: " << e;
  }
}

TEST(ClusterCommand, DownRemovesWhatIsLeftOfAClusterAndRefusesAnyOtherDirectory) {
  if (geteuid() != 0) GTEST_SKIP() << "down needs root";
  TempDir dir("hami-cluster-down");
  const std::string c = dir.path() + "/c";
  ASSERT_EQ(mkdir(c.c_str(), 0755), 0);
  // Not a cluster's directory: refused, nothing removed.
  ASSERT_TRUE(std::ofstream(c + "/keep") << "x");
  Ran refused =
      RunCommand({"/bin/sh", "-c", Bin("hami") + " sim cluster down --dir " + c + " 2>&1"});
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("is not a simulated cluster's directory"));
  EXPECT_TRUE(Exists(c + "/keep"));
  // Half started: a marker and a record of a process long gone (PID 1's start time differs).
  ASSERT_TRUE(std::ofstream(c + "/.hami-sim-cluster") << "hami sim cluster\n");
  ASSERT_TRUE(std::ofstream(c + "/cluster.json")
              << R"({"dir":")" << c
              << R"(","components":[{"name":"apiserver","pid":1,"start_ticks":1,"log":""}]})");
  Ran down = RunCommand({"/bin/sh", "-c", Bin("hami") + " sim cluster down --dir " + c + " 2>&1"});
  EXPECT_EQ(down.code, 0) << down.out;
  EXPECT_FALSE(Exists(c));
  EXPECT_EQ(kill(1, 0), 0) << "PID 1 was left alone";
  // Already gone: fine.
  Ran again = RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", c});
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr("nothing to do"));
}

}  // namespace
}  // namespace hami
