// The device plugin end to end, every part real but the cluster: the real hami-device-plugin
// binary on the simulated GPU, against the simulated API server (HTTP) and the simulated
// kubelet's device manager (gRPC on Unix sockets); the kubelet's Allocate answer applied as a
// node applies it: a pod run by a real containerd through CRI (sim/cri/containerd.h), its
// container built as the simulated kubelet builds it (sim/cluster/cri_config.h), the simulated
// driver and GPU brought in by the toolkit stand-in (sim/cluster/gpu_toolkit.h); CUDA programs
// with libvgpu.so preloaded through the mounted /etc/ld.so.preload inside that container.
// Then the order of the answer's lock-directory mounts (seed 000), with runc applying an OCI
// spec as written and with containerd.
//
// Root only (containerd and runc, the root-owned /tmp/vgpulock, the broker).
#include <errno.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "sim/cluster/cri_config.h"
#include "sim/cluster/gpu_toolkit.h"
#include "sim/cluster/node_agent.h"
#include "sim/cri/containerd.h"
#include "sim/cri/host.h"
#include "sim/device_nodes.h"
#include "sim/kube/api_server.h"
#include "sim/kubelet/kubelet.h"
#include "sim/oci/blob.h"
#include "sim/oci/image.h"
#include "support/subprocess.h"

namespace hami {
namespace {

namespace fs = std::filesystem;
namespace v1 = sim::cri::v1;
using nlohmann::json;
using sim::cluster::kContainerBinDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kNode[] = "gpu-node-1";
constexpr char kResource[] = "nvidia.com/gpu";
// The simulated GPU's default machine: a process with an empty environment (a login session
// in the container) names no profile and gets this one, so the node must be it.
constexpr char kProfile[] = "h100-80g:2";

// Inside the containers.
constexpr char kLockDir[] = "/tmp/vgpulock";
constexpr char kBrokerDir[] = "/tmp/vgpulock/hostpid";
constexpr char kBrokerSocket[] = "/tmp/vgpulock/hostpid/broker.sock";
constexpr char kGateDir[] = "/hami-test";  // the test's gate (see Gate below)
const std::string kDemo = std::string(kContainerBinDir) + "/hami-memory-demo";
const std::string kHami = std::string(kContainerBinDir) + "/hami";

std::string Bin(const std::string& name) { return std::string(HAMI_BIN_DIR) + "/" + name; }
std::string SimLib(const std::string& name) {
  return std::string(HAMI_SIM_LIBRARY_DIR) + "/" + name;
}

// "GPU-xxxx-3" -> "GPU-xxxx".
std::string GpuOf(const std::string& replica) { return replica.substr(0, replica.rfind('-')); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// The index of the mount at `container_path` in `mounts`, or -1.
int IndexOf(const std::vector<sim::kubelet::Mount>& mounts, const std::string& container_path) {
  for (size_t i = 0; i < mounts.size(); ++i) {
    if (mounts[i].container_path == container_path) return int(i);
  }
  return -1;
}

// The index of `item` in `list`, or -1.
int IndexOf(const std::vector<std::string>& list, const std::string& item) {
  auto it = std::find(list.begin(), list.end(), item);
  return it == list.end() ? -1 : int(it - list.begin());
}

// The answer's mounts with the broker's moved right before its parent: the order seed 000
// warns about.
std::vector<sim::kubelet::Mount> BrokerFirst(std::vector<sim::kubelet::Mount> mounts) {
  const int parent = IndexOf(mounts, kLockDir), broker = IndexOf(mounts, kBrokerDir);
  EXPECT_GE(parent, 0);
  EXPECT_GT(broker, parent) << "the plugin lists the parent first";
  if (parent < 0 || broker <= parent) return mounts;
  std::rotate(mounts.begin() + parent, mounts.begin() + broker, mounts.begin() + broker + 1);
  return mounts;
}

// The text of a CRI-format log (<time> <stream> <F|P> <text> per line), the texts joined by
// newlines.
std::string LogText(const std::string& path) {
  std::string out;
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    size_t a = line.find(' ');
    size_t b = a == std::string::npos ? a : line.find(' ', a + 1);
    size_t c = b == std::string::npos ? b : line.find(' ', b + 1);
    if (c == std::string::npos) {
      ADD_FAILURE() << "not a CRI log line: '" << line << "'";
      continue;
    }
    out += line.substr(c + 1) + "\n";
  }
  return out;
}

// The /proc/<pid>/status line starting with `key` ("NSpid:"), or "".
std::string StatusLine(pid_t pid, const std::string& key) {
  std::istringstream st(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(st, line);) {
    if (line.rfind(key, 0) == 0) return line;
  }
  return "";
}

// "ro" or "rw": the access of the topmost mount at `mount_point` in `mounts`, "" when none.
std::string AccessOf(const std::vector<sim::cri::MountInfo>& mounts,
                     const std::string& mount_point) {
  std::string access;
  for (const sim::cri::MountInfo& m : mounts) {
    if (m.mount_point == mount_point) access = m.mount_options.substr(0, 2);
  }
  return access;
}

// A gate that holds a container's process: a FIFO in a directory of its own, bound into the
// container at kGateDir. The test opens it read-write (which never blocks) before the
// container starts, so the process's open for reading returns at once and its read waits;
// Release closes the test's end, and the process reads end of file. CRI attaches no stdin
// here, and this keeps the wait on an event, never on time.
class Gate {
 public:
  // Makes <dir>/gate and opens it.
  void Open(const std::string& dir) {
    dir_ = dir;
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir << ": " << strerror(errno);
    const std::string fifo = dir + "/gate";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << fifo << ": " << strerror(errno);
    fd_ = UniqueFd(open(fifo.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(fd_.valid()) << fifo << ": " << strerror(errno);
  }
  void Release() { fd_.Reset(); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  UniqueFd fd_;
};

// `command` run by /bin/sh with its stdin from the gate: `exec` keeps the process the
// container's first (PID 1 of its namespace), ending when the gate is released.
std::vector<std::string> Gated(const std::string& command) {
  return {"/bin/sh", "-c", "exec " + command + " < " + kGateDir + "/gate"};
}

// A pod run by the node's containerd: one container "main".
struct RunningPod {
  v1::PodSandboxConfig sandbox;
  std::string sandbox_id, container_id;
  v1::ContainerConfig config;  // as sent to CreateContainer
  std::string log;             // the container's log on the host
};

class PluginEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: containerd and runc, the root-owned /tmp/vgpulock, and the "
                      "host-PID broker";
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

    state_ = dir_.File("sim.state");
    hook_ = dir_.path() + "/hook";
    kubelet_dir_ = dir_.path() + "/device-plugins";
    ASSERT_EQ(mkdir(kubelet_dir_.c_str(), 0755), 0);
    sim::kubelet::KubeletOptions ko;
    ko.dir = kubelet_dir_;
    kubelet_ = std::make_unique<sim::kubelet::Kubelet>(ko);
    ASSERT_TRUE(kubelet_->Start().ok());
  }

  void TearDown() override {
    StopNode();
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

  // The node's container runtime, as `hami sim node` starts it (sim/cluster/node_agent.h): a
  // containerd of its own with the pods' cgroups under a relative parent unique to this test
  // process, the pause and base images imported, the GPU toolkit's mounts prepared over the
  // simulated GPU the plugin runs on, the project's programs at /opt/hami/bin, first in PATH.
  void StartNode() {
    ASSERT_TRUE(Exists(state_)) << "the plugin made the simulated GPU's state " << state_;
    const std::string images = dir_.File("images");
    ASSERT_EQ(mkdir(images.c_str(), 0755), 0);
    Result<sim::oci::ImageDefinition> pause = sim::oci::PauseImage(Bin("hami-sim-pause"));
    ASSERT_TRUE(pause.ok()) << pause.error().message();
    ASSERT_TRUE(sim::oci::WriteImageLayout(*pause, images + "/pause.tar").ok());
    ASSERT_TRUE(sim::oci::WriteImageLayout(sim::oci::BaseImage(), images + "/base.tar").ok());
    sim::cri::ContainerdOptions o;
    o.dir = dir_.File("containerd");
    o.cgroup_parent = cgroup_parent_;
    const int64_t t0 = MonotonicNs();
    auto started = sim::cri::Containerd::Start(o);
    ASSERT_TRUE(started.ok()) << started.error().message();
    containerd_ = std::move(started).value();
    for (const auto& [tar, name] :
         {std::pair{images + "/pause.tar", pause->name},
          std::pair{images + "/base.tar", std::string(sim::oci::kBaseImage)}}) {
      Status imported = containerd_->ImportImage(tar, name);
      ASSERT_TRUE(imported.ok()) << imported.error().message();
    }
    // The simulated GPU's variables stand for the node's hardware: every container gets them.
    const std::map<std::string, std::string> sim_env = {{"HAMI_SIM_PROFILE", kProfile}};
    auto toolkit = sim::cluster::GpuToolkit::Prepare(
        dir_.File("toolkit"), {SimLib("libcuda.so.1"), SimLib("libnvidia-ml.so.1")}, state_,
        sim_env);
    ASSERT_TRUE(toolkit.ok()) << toolkit.error().message();
    toolkit_ = std::move(toolkit).value();
    additions_.envs = sim_env;
    additions_.envs["PATH"] = std::string(kContainerBinDir) + ":" + sim::cluster::kImagePath;
    additions_.mounts = {{kContainerBinDir, HAMI_BIN_DIR, true}};
    additions_.gpu_mounts = toolkit_->mounts();
    additions_.plain_mounts = sim::cluster::HostUserlandMounts();
    std::printf("timing: node runtime ready in %.0f ms (containerd answered after %lld ms)\n",
                double(MonotonicNs() - t0) / 1e6, static_cast<long long>(containerd_->start_ms()));
  }

  // Runs pod `name` (UID `uid`) with one GPU container "main" given `response`, as the node's
  // pod worker runs it: RunPodSandbox with the sandbox config, the container's log directory,
  // CreateContainer with the container config the node builds from the plugin's answer and
  // the node's additions (plus the gate's directory at kGateDir), StartContainer.
  void RunPod(const std::string& name, const std::string& uid,
              const sim::kubelet::ContainerAllocation& response,
              const std::vector<std::string>& command, const Gate& gate, RunningPod* pod) {
    ASSERT_NE(containerd_, nullptr) << "StartNode first";
    sim::cluster::PodPlan plan;
    plan.ns = "default";
    plan.name = name;
    plan.uid = uid;
    sim::cluster::ContainerPlan c;
    c.name = "main";
    c.image = sim::oci::kBaseImage;
    c.command = command;
    c.devices = {{kResource, 1}};
    plan.containers = {c};
    sim::cluster::NodeAdditions additions = additions_;
    additions.mounts.push_back({kGateDir, gate.dir(), false});
    sim::cri::CriClient& cri = containerd_->client();
    pod->sandbox = sim::cluster::SandboxConfigFor(plan, dir_.File("pods"),
                                                  containerd_->PodCgroupParent("pod" + uid), 0);
    std::error_code ec;
    fs::create_directories(pod->sandbox.log_directory() + "/main", ec);
    ASSERT_FALSE(ec) << ec.message();
    Result<std::string> sandbox = cri.RunPodSandbox(pod->sandbox);
    ASSERT_TRUE(sandbox.ok()) << sandbox.error().message();
    pod->sandbox_id = *sandbox;
    sandboxes_.push_back(*sandbox);
    // The container's device nodes, as the node's toolkit gives them.
    Result<std::string> device_nodes = toolkit_->WriteDeviceNodes(uid, c, response);
    ASSERT_TRUE(device_nodes.ok()) << device_nodes.error().message();
    pod->config = sim::cluster::ContainerConfigFor(plan, c, response, additions, *device_nodes, 0);
    Result<std::string> id = cri.CreateContainer(pod->sandbox_id, pod->config, pod->sandbox);
    ASSERT_TRUE(id.ok()) << id.error().message();
    pod->container_id = *id;
    containers_.push_back(*id);
    pod->log = pod->sandbox.log_directory() + "/" + pod->config.log_path();
    Status started = cri.StartContainer(*id);
    ASSERT_TRUE(started.ok()) << started.error().message();
  }

  // Waits until the container's log holds `text`: containerd writes it, no event reaches a
  // CRI client, so the file is polled (bounded).
  void WaitForLog(const RunningPod& pod, const std::string& text) {
    ASSERT_TRUE(testing::PollUntil(
        [&] { return ReadFile(pod.log).find(text) != std::string::npos; }, 30000, 2000))
        << "no '" << text << "' in the container's log:\n"
        << ReadFile(pod.log);
  }

  // Polls ContainerStatus until the container has exited (no event reaches a CRI client).
  v1::ContainerStatus WaitExited(const RunningPod& pod) {
    v1::ContainerStatus status;
    EXPECT_TRUE(testing::PollUntil(
        [&] {
          auto r = containerd_->client().ContainerStatus(pod.container_id);
          if (!r.ok()) return false;
          status = r->status();
          return status.state() == v1::CONTAINER_EXITED;
        },
        30000, 5000))
        << "the container did not exit; its log:\n"
        << ReadFile(pod.log);
    return status;
  }

  // The container's first process, by its host PID; remembered for the check that it ends.
  pid_t ContainerPid(const RunningPod& pod) {
    Result<pid_t> pid = containerd_->client().ContainerPid(pod.container_id);
    EXPECT_TRUE(pid.ok()) << pid.error().message();
    if (!pid.ok()) return -1;
    pids_.push_back(*pid);
    return *pid;
  }

  // `cmd` in the running container (kubectl exec): stdout then stderr, and the exit code.
  std::pair<std::string, int> Exec(const RunningPod& pod, const std::vector<std::string>& cmd) {
    Result<v1::ExecSyncResponse> r = containerd_->client().ExecSync(pod.container_id, cmd, 60);
    EXPECT_TRUE(r.ok()) << r.error().message();
    if (!r.ok()) return {"", -1};
    return {r->stdout() + r->stderr(), r->exit_code()};
  }

  // Runs hami-memory-demo in the container with the container's environment: it must report
  // device 0's own limit (CUDA_DEVICE_MEMORY_LIMIT_0, the one that applies to it).
  void ExpectDeviceZerosOwnLimit(const RunningPod& pod) {
    auto [text, code] = Exec(pod, {kDemo, "limit", "3000m"});
    EXPECT_EQ(code, 0) << text;
    EXPECT_THAT(text, HasSubstr("device 0: CUDA_DEVICE_MEMORY_LIMIT_0=3000m (its own limit)"));
  }

  // What a node shows of a GPU container started from the plugin's answer, from the host:
  // its process in a PID namespace of its own, its cgroups under the node's parent, and the
  // answer's mounts with their access as the kernel has them.
  void ExpectWhatANodeShows(const RunningPod& pod, const std::string& uid, pid_t pid, bool broker) {
    EXPECT_EQ(StatusLine(pid, "NSpid:"), "NSpid:\t" + std::to_string(pid) + "\t1")
        << "two entries: the host's PID, then PID 1 of the container's own namespace";
    Result<std::vector<sim::cri::CgroupDir>> cgroups = sim::cri::CgroupDirsOfProcess(pid);
    ASSERT_TRUE(cgroups.ok()) << cgroups.error().message();
    size_t under_parent = 0;
    for (const sim::cri::CgroupDir& d : *cgroups) {
      for (const sim::cri::CgroupDir& root : containerd_->pod_cgroup_roots()) {
        if (root.hierarchy != d.hierarchy) continue;
        EXPECT_EQ(d.dir, root.dir + "/pod" + uid + "/" + pod.container_id)
            << "hierarchy " << d.hierarchy;
        ++under_parent;
      }
    }
    EXPECT_EQ(under_parent, containerd_->pod_cgroup_roots().size())
        << "in every hierarchy, under " << cgroup_parent_ << " in containerd's own cgroup";
    const std::string mountinfo_path = "/proc/" + std::to_string(pid) + "/mountinfo";
    Result<std::vector<sim::cri::MountInfo>> mounts =
        sim::cri::ParseMountInfo(ReadFile(mountinfo_path), mountinfo_path);
    ASSERT_TRUE(mounts.ok()) << mounts.error().message();
    EXPECT_EQ(AccessOf(*mounts, "/overrideEnv"), "ro") << "the limits file";
    EXPECT_EQ(AccessOf(*mounts, sim::kDefaultDeviceNodesPath), "ro")
        << "the toolkit's stand-in for the GPU's device nodes";
    EXPECT_EQ(AccessOf(*mounts, "/etc/ld.so.preload"), "ro");
    EXPECT_EQ(AccessOf(*mounts, kLockDir), "rw");
    EXPECT_EQ(AccessOf(*mounts, kBrokerDir), broker ? "ro" : "");
  }

  // Ends what StartNode and RunPod started, the way the kubelet does, then the runtime
  // itself, and checks that nothing of them is left on the host.
  void StopNode() {
    // containerd 1.6 names a sandbox's shim socket /run/containerd/s/<SHA-256 of
    // "<containerd's address>/<namespace>/<sandbox ID>">, outside its directory; other
    // containerds on the machine use /run/containerd/s too, so only ours are checked.
    std::vector<std::string> shim_sockets;
    if (containerd_ != nullptr) {
      for (const std::string& id : sandboxes_) {
        Result<std::string> digest =
            sim::oci::Sha256Digest(containerd_->paths().socket + "/k8s.io/" + id);
        if (!digest.ok()) continue;
        shim_sockets.push_back("/run/containerd/s/" + digest->substr(digest->find(':') + 1));
        EXPECT_TRUE(Exists(shim_sockets.back())) << "the shim's socket is not where it was sought";
      }
      sim::cri::CriClient& cri = containerd_->client();
      for (const std::string& id : containers_) {
        for (Status s : {cri.StopContainer(id, 0), cri.RemoveContainer(id)}) {
          EXPECT_TRUE(s.ok()) << s.error().message();
        }
      }
      for (const std::string& id : sandboxes_) {
        for (Status s : {cri.StopPodSandbox(id), cri.RemovePodSandbox(id)}) {
          EXPECT_TRUE(s.ok()) << s.error().message();
        }
      }
      Status s = containerd_->Stop();
      EXPECT_TRUE(s.ok()) << s.error().message();
    }
    gates_.clear();
    if (toolkit_ != nullptr) {
      Status s = toolkit_->Unmount();
      EXPECT_TRUE(s.ok()) << s.error().message();
    }
    if (containerd_ == nullptr) return;
    EXPECT_TRUE(sim::cri::ProcessesWithArgument(containerd_->paths().socket).empty())
        << "a process (containerd, a shim) still names " << containerd_->paths().socket;
    for (pid_t pid : pids_) {
      EXPECT_NE(kill(pid, 0), 0) << "container process " << pid << " is still there";
    }
    Result<std::vector<std::string>> left = sim::cri::MountPointsUnder(dir_.path());
    EXPECT_TRUE(left.ok()) << left.error().message();
    if (left.ok()) {
      EXPECT_TRUE(left->empty()) << "still mounted: " << left->front();
    }
    for (const sim::cri::CgroupDir& root : containerd_->pod_cgroup_roots()) {
      EXPECT_FALSE(Exists(root.dir)) << root.dir;
    }
    for (const std::string& socket : shim_sockets) {
      EXPECT_FALSE(Exists(socket)) << "a shim's socket is left: " << socket;
    }
    containerd_.reset();
  }

  // A gate for one container, in the test's directory.
  Gate& NewGate(const std::string& name) {
    gates_.push_back(std::make_unique<Gate>());
    gates_.back()->Open(dir_.File("gate-" + name));
    return *gates_.back();
  }

  static std::string Annotation(const json& obj, const std::string& key) {
    const json& ann = obj["metadata"].value("annotations", json::object());
    auto it = ann.find(key);
    return it == ann.end() ? std::string("(absent)") : it->get<std::string>();
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
  // The node's runtime (StartNode) and what the test ran in it.
  const std::string cgroup_parent_ = "hami-test/plugin-e2e-" + std::to_string(getpid());
  std::unique_ptr<sim::cri::Containerd> containerd_;
  std::unique_ptr<sim::cluster::GpuToolkit> toolkit_;
  sim::cluster::NodeAdditions additions_;
  std::vector<std::string> sandboxes_, containers_;
  std::vector<pid_t> pids_;
  std::vector<std::unique_ptr<Gate>> gates_;
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

  // The container's first process holds 1000 MiB until the gate is released.
  ASSERT_NO_FATAL_FAILURE(StartNode());
  Gate& gate = NewGate("trainer");
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  RunningPod running;
  ASSERT_NO_FATAL_FAILURE(
      RunPod("trainer", uid, response, Gated(kDemo + " hold 1000m"), gate, &running));
  ASSERT_NO_FATAL_FAILURE(WaitForLog(running, "holding"));
  const pid_t pid = ContainerPid(running);
  ASSERT_GT(pid, 0);
  ExpectWhatANodeShows(running, uid, pid, /*broker=*/false);

  // A login session: none of the pod's variables (CRI's exec inherits the container's
  // environment; env -i clears it), only the simulated GPU's, as the examples' sessions keep
  // them (they stand for the node's hardware). The container's GPU comes from its device
  // nodes (sim/cluster/gpu_toolkit.h), which no environment can take away. It sees 3000 MiB
  // and is refused past it.
  auto [text, code] = Exec(
      running, {"/bin/sh", "-c",
                "exec env -i HAMI_SIM_PROFILE=\"$HAMI_SIM_PROFILE\" " + kDemo + " limit 3000m"});
  EXPECT_EQ(code, 0) << text;
  EXPECT_THAT(text, HasSubstr("device 0: neither CUDA_DEVICE_MEMORY_LIMIT_0 nor "
                              "CUDA_DEVICE_MEMORY_LIMIT (only the limits file can say)"))
      << "the session had no variables";
  EXPECT_THAT(text, Not(HasSubstr("device 1:"))) << "the container's one GPU, not the node's two";
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
  ExpectDeviceZerosOwnLimit(running);

  gate.Release();
  v1::ContainerStatus held = WaitExited(running);
  EXPECT_EQ(held.exit_code(), 0) << LogText(running.log);

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

  ASSERT_NO_FATAL_FAILURE(StartNode());
  Gate& gate = NewGate("brokered");
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  RunningPod running;
  ASSERT_NO_FATAL_FAILURE(
      RunPod("brokered", uid, allocated->response, Gated(kDemo + " hold 64m"), gate, &running));
  ASSERT_NO_FATAL_FAILURE(WaitForLog(running, "holding"));
  const pid_t pid = ContainerPid(running);
  ASSERT_GT(pid, 0);
  ExpectWhatANodeShows(running, uid, pid, /*broker=*/true);

  json region = Inspect(uid);
  ASSERT_TRUE(region.contains("slots")) << region.dump();
  bool seen = false;
  for (const json& slot : region["slots"]) {
    if (slot.value("state", "") != "live" || !slot.value("alive", false)) continue;
    seen = true;
    EXPECT_EQ(slot.value("identity", ""), "broker") << slot.dump();
    EXPECT_EQ(slot.value("host_pid", 0), pid) << slot.dump();
    EXPECT_EQ(slot.value("pid", 0), 1) << "the process is PID 1 of its own namespace";
  }
  EXPECT_TRUE(seen) << region.dump();
  // A process with the container's environment reports device 0's own limit, the one that
  // applies to it.
  ExpectDeviceZerosOwnLimit(running);

  gate.Release();
  v1::ContainerStatus held = WaitExited(running);
  EXPECT_EQ(held.exit_code(), 0) << LogText(running.log);
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

// The order of the answer's lock-directory mounts (seed 000): the writable parent
// /tmp/vgpulock first, then the read-only broker directory /tmp/vgpulock/hostpid nested in it.
// Applied as listed the other way round, the parent is bound over the broker's mount and
// hides the socket: runc applies an OCI spec's mounts in the order written, shown here with a
// spec of the test's own. containerd 1.6 sorts a container's CRI mounts by the number of
// components of their destination before it writes the spec, so through containerd both
// orders work; the plugin orders them anyway, for every runtime or tool between the kubelet
// and runc that passes the list on as given.
class BrokerMountOrder : public PluginEndToEnd {
 protected:
  void TearDown() override {
    PluginEndToEnd::TearDown();
    if (runc_ids_.empty()) return;
    // `runc run` removes its container when the process ends; this covers a run that failed.
    for (const std::string& id : runc_ids_) {
      testing::Subprocess del({runc_, "--root", dir_.File("runc-state"), "delete", "--force", id},
                              {});
      del.ReadAll(10000);
      del.Wait(10000);
    }
    // runc removes a container's own cgroups, never the parents of its relative path.
    Result<std::vector<sim::cri::CgroupDir>> own = sim::cri::CgroupDirsOfProcess(0);
    ASSERT_TRUE(own.ok()) << own.error().message();
    for (const sim::cri::CgroupDir& d : *own) {
      std::vector<std::string> dirs;
      for (const std::string& id : runc_ids_) dirs.push_back(d.dir + "/" + RuncCgroupsPath(id));
      dirs.push_back(d.dir + "/" + RuncCgroupParent());
      dirs.push_back(d.dir + "/hami-test");
      for (const std::string& path : dirs) {
        if (rmdir(path.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EBUSY) {
          ADD_FAILURE() << "rmdir " << path << ": " << strerror(errno);
        }
      }
      EXPECT_FALSE(Exists(d.dir + "/" + RuncCgroupParent())) << "a cgroup is left in " << d.dir;
    }
  }

  // The plugin's answer for a pod, with the broker on.
  sim::kubelet::ContainerAllocation Allocate(const std::string& name) {
    const std::string uid = CreateScheduledPod(name);
    auto allocated = kubelet_->AllocateContainer(uid, "main", kResource, 1);
    EXPECT_TRUE(allocated.ok()) << allocated.error().message();
    return allocated.ok() ? allocated->response : sim::kubelet::ContainerAllocation{};
  }

  static std::string RuncCgroupParent() {
    return "hami-test/mount-order-" + std::to_string(getpid());
  }
  static std::string RuncCgroupsPath(const std::string& id) {
    return RuncCgroupParent() + "/" + id;
  }

  // What the container of the mount-order runs: whether the socket is there, then the broker
  // query as the container's first process (exec), with libvgpu.so's checks (a root-owned
  // directory on a read-only mount).
  static std::vector<std::string> CheckBroker() {
    return {"/bin/sh", "-c",
            std::string("if [ -S ") + kBrokerSocket +
                " ]; then echo socket=visible; else echo socket=hidden; fi; exec " + kHami +
                " broker query --socket " + kBrokerSocket};
  }

  struct RuncRun {
    std::string output;  // stdout and stderr, runc's and the container's
    int code = -1;
    pid_t pid = -1;  // the container's process, by its host PID (runc's --pid-file)
  };

  // Runs CheckBroker in a runc container (`runc run`, in the foreground) whose spec lists
  // `binds` in order after the basic filesystems: a bundle in the test's directory with the
  // base image's tree (sim/oci/image.h) as its root, the host's /usr directories and the
  // project's programs bound read-only as the node binds them, a relative cgroups path.
  void RunWithRunc(const std::string& name, const std::vector<sim::kubelet::Mount>& binds,
                   RuncRun* run) {
    if (runc_.empty()) {
      Result<std::string> runc = sim::cri::FindProgram("runc", "runc");
      ASSERT_TRUE(runc.ok()) << runc.error().message();
      runc_ = *runc;
    }
    const std::string bundle = dir_.File("runc-" + name), rootfs = bundle + "/rootfs";
    ASSERT_TRUE(fs::create_directories(rootfs));
    for (const sim::oci::LayerEntry& e : sim::oci::BaseImage().layer) {
      const std::string path = rootfs + "/" + e.path;
      switch (e.kind) {
        case sim::oci::LayerEntry::Kind::kDirectory:
          ASSERT_EQ(mkdir(path.c_str(), e.mode), 0) << path << ": " << strerror(errno);
          break;
        case sim::oci::LayerEntry::Kind::kFile:
          std::ofstream(path) << e.data;
          break;
        case sim::oci::LayerEntry::Kind::kSymlink:
          ASSERT_EQ(symlink(e.data.c_str(), path.c_str()), 0) << path << ": " << strerror(errno);
          continue;
      }
      ASSERT_EQ(chmod(path.c_str(), e.mode), 0) << path << ": " << strerror(errno);
    }
    std::vector<sim::kubelet::Mount> all = sim::cluster::HostUserlandMounts();
    all.push_back({kContainerBinDir, HAMI_BIN_DIR, true});
    all.insert(all.end(), binds.begin(), binds.end());
    const std::string id = "hami-e2e-" + std::to_string(getpid()) + "-" + name;
    {
      std::ofstream(bundle + "/config.json") << RuncConfig(CheckBroker(), all, RuncCgroupsPath(id));
    }
    runc_ids_.push_back(id);
    const std::string pid_file = bundle + "/pid";
    // Through a shell, for runc's stderr.
    testing::Subprocess runc(
        {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", runc_, "--root", dir_.File("runc-state"),
         "run", "--bundle", bundle, "--pid-file", pid_file, id},
        {});
    run->output = runc.ReadAll(30000);
    run->code = runc.Wait(30000);
    const std::string pid = ReadFile(pid_file);
    run->pid = pid.empty() ? -1 : std::stoi(pid);
  }

  // An OCI runtime spec in the shape `runc spec` writes (root's process with its small set of
  // capabilities, private PID, mount, IPC, UTS and network namespaces, /proc, /dev, /sys),
  // no terminal, a writable root so that runc makes the mount points it needs there, and
  // `binds` as bind mounts in the given order.
  static std::string RuncConfig(const std::vector<std::string>& args,
                                const std::vector<sim::kubelet::Mount>& binds,
                                const std::string& cgroups_path) {
    const json caps = json::array({"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"});
    json mounts = json::array();
    auto add = [&mounts](const std::string& destination, const std::string& type,
                         const std::string& source, std::vector<std::string> options) {
      mounts.push_back(json::object({{"destination", destination},
                                     {"type", type},
                                     {"source", source},
                                     {"options", options}}));
    };
    add("/proc", "proc", "proc", {});
    add("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"});
    add("/dev/pts", "devpts", "devpts",
        {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"});
    add("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"});
    add("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"});
    for (const sim::kubelet::Mount& m : binds) {
      add(m.container_path, "bind", m.host_path, {"rbind", m.read_only ? "ro" : "rw"});
    }
    json namespaces = json::array();
    for (const char* type : {"pid", "network", "ipc", "uts", "mount"}) {
      namespaces.push_back(json::object({{"type", type}}));
    }
    json spec = json::object();
    spec["ociVersion"] = "1.0.2";
    spec["process"] = json::object(
        {{"terminal", false},
         {"user", json::object({{"uid", 0}, {"gid", 0}})},
         {"args", args},
         {"env",
          json::array({std::string("PATH=") + kContainerBinDir + ":" + sim::cluster::kImagePath})},
         {"cwd", "/"},
         {"capabilities",
          json::object(
              {{"bounding", caps}, {"effective", caps}, {"permitted", caps}, {"ambient", caps}})},
         {"noNewPrivileges", true}});
    spec["root"] = json::object({{"path", "rootfs"}, {"readonly", false}});
    spec["hostname"] = "mount-order";
    spec["mounts"] = mounts;
    spec["linux"] = json::object(
        {{"cgroupsPath", cgroups_path},
         {"resources",
          json::object(
              {{"devices", json::array({json::object({{"allow", false}, {"access", "rwm"}})})}})},
         {"namespaces", namespaces},
         {"maskedPaths", json::array({"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/timer_list",
                                      "/sys/firmware"})},
         {"readonlyPaths", json::array({"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                        "/proc/sysrq-trigger"})}});
    return spec.dump(2);
  }

  // The mounts' destinations in the OCI spec containerd wrote for the container (CRI
  // ContainerStatus's verbose info, "runtimeSpec").
  std::vector<std::string> SpecMountOrder(const RunningPod& pod) {
    std::vector<std::string> out;
    auto status = containerd_->client().ContainerStatus(pod.container_id, /*verbose=*/true);
    EXPECT_TRUE(status.ok()) << status.error().message();
    if (!status.ok()) return out;
    auto info = status->info().find("info");
    EXPECT_NE(info, status->info().end());
    if (info == status->info().end()) return out;
    json j = json::parse(info->second, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("runtimeSpec")) << info->second;
    if (!j.is_object() || !j.contains("runtimeSpec")) return out;
    for (const json& m : j["runtimeSpec"].value("mounts", json::array())) {
      out.push_back(m.value("destination", ""));
    }
    return out;
  }

  std::string runc_;
  std::vector<std::string> runc_ids_;
};

TEST_F(BrokerMountOrder, RuncAppliesTheListAsGivenSoOnlyTheParentFirstOrderShowsTheBroker) {
  StartPlugin(/*broker=*/true);
  const sim::kubelet::ContainerAllocation response = Allocate("ordered");
  const std::vector<sim::kubelet::Mount> plugin_order = response.mounts;
  const std::vector<sim::kubelet::Mount> broker_first = BrokerFirst(response.mounts);
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the plugin's answer has both, parent first";

  RuncRun as_answered;
  ASSERT_NO_FATAL_FAILURE(RunWithRunc("as-answered", plugin_order, &as_answered));
  EXPECT_EQ(as_answered.code, 0) << as_answered.output;
  EXPECT_THAT(as_answered.output, HasSubstr("socket=visible\n"));
  EXPECT_THAT(as_answered.output, HasSubstr("host_pid=" + std::to_string(as_answered.pid) + "\n"))
      << "the broker names the container's process by its host PID";

  RuncRun swapped;
  ASSERT_NO_FATAL_FAILURE(RunWithRunc("broker-first", broker_first, &swapped));
  EXPECT_EQ(swapped.code, 1) << swapped.output;
  EXPECT_THAT(swapped.output, HasSubstr("socket=hidden\n"))
      << "the parent, bound second, covers the broker's mount";
  EXPECT_THAT(swapped.output, HasSubstr("failure=missing"));
  std::printf("runc, the broker's mount before its parent's:\n%s", swapped.output.c_str());
}

TEST_F(BrokerMountOrder, ContainerdSortsTheMountsByDepthSoEitherOrderShowsTheBroker) {
  StartPlugin(/*broker=*/true);
  const sim::kubelet::ContainerAllocation response = Allocate("ordered");
  sim::kubelet::ContainerAllocation swapped = response;
  swapped.mounts = BrokerFirst(response.mounts);
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the plugin's answer has both, parent first";
  ASSERT_NO_FATAL_FAILURE(StartNode());

  int n = 0;
  for (const auto& [name, answer] :
       {std::pair{"as-answered", response}, std::pair{"broker-first", swapped}}) {
    SCOPED_TRACE(name);
    Gate& gate = NewGate(name);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    // The check waits at the gate, so that its host PID can be taken while it runs: it opens
    // the gate, says so, reads to its end, and closes it before going on.
    std::vector<std::string> command = CheckBroker();
    command[2] = std::string("exec 3< ") + kGateDir + "/gate; echo gated; read _ <&3; exec 3<&-; " +
                 command[2];
    RunningPod running;
    ASSERT_NO_FATAL_FAILURE(
        RunPod(name, "order-" + std::to_string(++n), answer, command, gate, &running));
    // The CRI request lists the mounts as the answer does ...
    std::vector<std::string> requested;
    for (const v1::Mount& m : running.config.mounts()) requested.push_back(m.container_path());
    EXPECT_EQ(IndexOf(requested, kBrokerDir) < IndexOf(requested, kLockDir),
              std::string(name) == "broker-first");
    // ... and containerd's spec for runc has the parent first either way: after the default
    // spec's own mounts, the container's are ordered by the number of their path's
    // components (not stably: mounts of one depth may change places).
    const std::vector<std::string> spec = SpecMountOrder(running);
    std::string listed;
    size_t depth = 0;
    for (const std::string& d : spec) {
      listed += " " + d;
      if (IndexOf(requested, d) < 0) continue;
      const size_t components = size_t(std::count(d.begin(), d.end(), '/'));
      EXPECT_GE(components, depth) << d << " comes after a deeper mount:" << listed;
      depth = components;
    }
    std::printf("containerd's spec for runc (%s), mounts in order:%s\n", name, listed.c_str());
    EXPECT_GE(IndexOf(spec, kLockDir), 0);
    EXPECT_GT(IndexOf(spec, kBrokerDir), IndexOf(spec, kLockDir));
    ASSERT_NO_FATAL_FAILURE(WaitForLog(running, "gated"));
    const pid_t pid = ContainerPid(running);
    ASSERT_GT(pid, 0);
    gate.Release();
    v1::ContainerStatus exited = WaitExited(running);
    const std::string log = LogText(running.log);
    EXPECT_EQ(exited.exit_code(), 0) << log;
    EXPECT_THAT(log, HasSubstr("socket=visible\n"));
    EXPECT_THAT(log, HasSubstr("host_pid=" + std::to_string(pid) + "\n"));
  }
}

}  // namespace
}  // namespace hami
