// hami sim node, hami sim cluster up/down/status: one simulated node's kubelet
// (sim/cluster/node_agent.h) and the whole simulated cluster (sim/cluster/cluster.h).
// docs/sim-cluster.md describes both.
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "cli/paths.h"
#include "common/exit_status.h"
#include "common/proc.h"
#include "common/stop_signals.h"
#include "sim/cluster/cluster.h"
#include "sim/cluster/node_agent.h"

namespace hami::cli {
namespace {

namespace cl = sim::cluster;

std::string RealPath(const std::string& path) {
  char real[PATH_MAX];
  return realpath(path.c_str(), real) != nullptr ? std::string(real) : path;
}

struct NodeFlags {
  std::string name;
  std::string kubeconfig;
  std::string dir;
  std::string gpus = "h100-80g:2";
  std::string pod_log_dir;
  std::string bin_dir;
  std::string sim_lib_dir;
  std::string pause_program;
  std::string containerd_log_level = "info";
  std::vector<std::string> resources = {"nvidia.com/gpu"};
  std::string dra_registry_dir;
  std::vector<std::string> cdi_dirs;
};

int RunNode(const NodeFlags& f) {
  if (geteuid() != 0) {
    std::fprintf(stderr,
                 "hami sim node: needs root: the node runs its pods in a containerd of its own "
                 "(namespaces, mounts, cgroups)\n");
    return 1;
  }
  cl::NodeAgentOptions o;
  o.name = f.name;
  o.kubeconfig = f.kubeconfig;
  o.device_plugin_dir = f.dir + "/device-plugins";
  o.pod_log_dir = f.pod_log_dir.empty() ? f.dir + "/pods" : f.pod_log_dir;
  o.bin_dir = f.bin_dir.empty() ? RealPath(ExecutableDir()) : f.bin_dir;
  o.pause_program = f.pause_program.empty() ? o.bin_dir + "/hami-sim-pause" : f.pause_program;
  o.containerd_log_level = f.containerd_log_level;
  const std::string libs = f.sim_lib_dir.empty() ? SimLibraryDir() : f.sim_lib_dir;
  if (libs.empty()) {
    std::fprintf(stderr,
                 "hami sim node: the simulated libcuda.so.1 was not found beside %s (give "
                 "--sim-lib-dir)\n",
                 ExecutableDir().c_str());
    return 1;
  }
  o.driver_libs = {libs + "/libcuda.so.1", libs + "/libnvidia-ml.so.1"};
  // The simulated GPU's own variables stand for the node's hardware: every container gets them
  // (a real node's GPU is there whatever a process's environment).
  o.image_env = {{"HAMI_SIM_PROFILE", f.gpus}, {"HAMI_SIM_NODE", f.name}};
  // A sanitizer build's settings are the test run's, not a workload's: they reach every
  // container (the pod's own env still wins).
  for (const char* v : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"}) {
    if (const char* value = getenv(v); value != nullptr) o.image_env[v] = value;
  }
  o.resources = f.resources;
  o.dra_registry_dir = f.dra_registry_dir;
  if (!f.cdi_dirs.empty()) o.cdi_dirs = f.cdi_dirs;
  for (const std::string& d : {o.device_plugin_dir, o.pod_log_dir}) {
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    if (ec) {
      std::fprintf(stderr, "hami sim node: creating %s: %s\n", d.c_str(), ec.message().c_str());
      return 1;
    }
  }
  o.dir = RealPath(f.dir);  // created above, with device-plugins/
  o.sim_state = o.dir + "/sim.state";
  if (auto blocked = BlockStopSignals(); !blocked.ok()) {
    std::fprintf(stderr, "hami sim node: %s\n", blocked.error().message().c_str());
    return ExitStatusOf(blocked.error());
  }
  signal(SIGPIPE, SIG_IGN);
  auto agent = cl::NodeAgent::Start(o);
  if (!agent.ok()) {
    std::fprintf(stderr, "hami sim node: %s\n", agent.error().message().c_str());
    return ExitStatusOf(agent.error());
  }
  std::printf("hami sim node: %s serving %s\n", f.name.c_str(), o.device_plugin_dir.c_str());
  std::fflush(stdout);
  const sigset_t stop = StopSignals();
  int sig = 0;
  while (sig != SIGINT && sig != SIGTERM) {
    siginfo_t info{};
    sig = sigwaitinfo(&stop, &info);
    if (sig < 0 && errno != EINTR) break;
  }
  (*agent)->Stop();
  return 0;
}

struct ClusterFlags {
  std::string mode = "device-plugin";
  int nodes = 2;
  std::string gpus = "h100-80g:2";
  std::string dir;
  bool broker = false;
  std::string config_dir;
  std::string resync = "5m";
  std::string feedback = "5s";
  int timeout_s = 90;
};

// The cluster's directory as an absolute path: the default when none is given, a relative one
// taken from the working directory. Empty (with the reason on stderr) when that cannot be made.
std::string AbsoluteDir(const char* command, const std::string& dir) {
  if (dir.empty()) return cl::DefaultClusterDir();
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(dir, ec);
  if (ec) {
    std::fprintf(stderr, "hami sim cluster %s: --dir '%s': cannot make it absolute: %s\n", command,
                 dir.c_str(), ec.message().c_str());
    return "";
  }
  std::string out = path.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::vector<std::string>& SimLogArgs() {
  static std::vector<std::string> args;
  return args;
}

int ClusterUp(const ClusterFlags& f) {
  cl::ClusterOptions o;
  o.log_args = SimLogArgs();
  o.dir = AbsoluteDir("up", f.dir);
  if (o.dir.empty()) return kExitFailure;
  auto mode = cl::ParseClusterMode(f.mode);
  if (!mode.ok()) {
    std::fprintf(stderr, "hami sim cluster up: %s\n", mode.error().message().c_str());
    return ExitStatusOf(mode.error());
  }
  o.mode = *mode;
  o.nodes = f.nodes;
  o.gpus = f.gpus;
  o.broker = f.broker;
  o.bin_dir = RealPath(ExecutableDir());
  o.sim_lib_dir = SimLibraryDir();
  o.vgpu_library = RealPath(o.bin_dir + "/../lib/libvgpu.so");
  if (access(o.vgpu_library.c_str(), R_OK) != 0) {
    o.vgpu_library = RealPath(o.bin_dir + "/../lib/hami/libvgpu.so");
  }
  o.config_dir = f.config_dir.empty() ? ShareDir("config", HAMI_DEPLOY_CONFIG_DIR) : f.config_dir;
  o.monitor_resync_interval = f.resync;
  o.monitor_feedback_interval = f.feedback;
  o.ready_timeout = std::chrono::seconds(f.timeout_s);
  auto up = cl::Up(o, stdout);
  if (!up.ok()) {
    std::fprintf(stderr, "hami sim cluster up: %s\n", up.error().message().c_str());
    return ExitStatusOf(up.error());
  }
  // The first example to try: in DRA mode, two pods sharing a GPU through claims.
  const bool dra = o.mode == cl::ClusterMode::kDra;
  const std::string examples = ShareDir("examples", HAMI_EXAMPLES_DIR);
  const std::string try_it =
      dra ? "  kubectl get resourceslices,deviceclasses\n"
            "  kubectl apply -f " +
                examples + "/dra/claim-template-3000m-30.yaml -f " + examples +
                "/dra/share-a.yaml -f " + examples +
                "/dra/share-b.yaml\n"
                "  kubectl get pods,resourceclaims -o wide; kubectl logs dra-share-a\n"
          : "  kubectl apply -f " + examples +
                "/vgpu-3000m-30.yaml\n"
                "  kubectl get pods -o wide; kubectl logs vgpu-3000m-30\n";
  std::printf(
      "\nThe simulated cluster is up%s: %zu node(s), API server %s, hami-scheduler %s.\n"
      "  export KUBECONFIG=%s\n"
      "  kubectl get nodes\n"
      "%s"
      "Logs: %s/logs/ (pods: %s/logs/pods/). Stop it: hami sim cluster down%s%s\n",
      dra ? " in DRA mode" : "", up->nodes.size(), up->api_server.c_str(), up->scheduler.c_str(),
      up->kubeconfig.c_str(), try_it.c_str(), up->dir.c_str(), up->dir.c_str(),
      f.dir.empty() ? "" : " --dir ", f.dir.empty() ? "" : up->dir.c_str());
  if (!up->webhook) {
    std::printf("(No admission webhook: give GPU pods schedulerName: hami-scheduler.)\n");
  }
  return 0;
}

int ClusterDown(const std::string& given) {
  const std::string dir = AbsoluteDir("down", given);
  if (dir.empty()) return kExitFailure;
  if (geteuid() != 0) {
    std::fprintf(stderr,
                 "hami sim cluster down: needs root, as the cluster's processes run as "
                 "root\n");
    return 1;
  }
  if (Status s = cl::Down(dir, std::chrono::seconds(15), stdout); !s.ok()) {
    std::fprintf(stderr, "hami sim cluster down: %s\n", s.error().message().c_str());
    return kExitFailure;  // down's one failure status, whatever the cause (docs/sim-cluster.md)
  }
  return 0;
}

int ClusterStatus(const std::string& given, bool json) {
  const std::string dir = AbsoluteDir("status", given);
  if (dir.empty()) return kExitFailure;
  auto info = cl::ReadClusterInfo(dir);
  if (!info.ok()) {
    std::fprintf(stderr, "hami sim cluster status: %s\n", info.error().message().c_str());
    return ExitStatusOf(info.error());
  }
  if (json) {
    nlohmann::json j = cl::ClusterInfoToJson(*info);
    for (size_t i = 0; i < info->components.size(); ++i) {
      j["components"][i]["alive"] = cl::ComponentAlive(info->components[i]);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("simulated cluster in %s\n  KUBECONFIG=%s\n  API server %s\n  hami-scheduler %s\n",
              info->dir.c_str(), info->kubeconfig.c_str(), info->api_server.c_str(),
              info->scheduler.c_str());
  for (const cl::NodeInfo& n : info->nodes) {
    std::printf("  %s: hook %s, GPU state %s%s%s\n", n.name.c_str(), n.hook_path.c_str(),
                n.sim_state.c_str(), n.monitor_url.empty() ? "" : ", metrics ",
                n.monitor_url.empty() ? "" : (n.monitor_url + "/metrics").c_str());
  }
  std::printf("\n%-26s %-8s %-8s %s\n", "COMPONENT", "PID", "STATE", "LOG");
  int dead = 0;
  for (const cl::Component& c : info->components) {
    const bool alive = cl::ComponentAlive(c);
    dead += alive ? 0 : 1;
    std::printf("%-26s %-8d %-8s %s\n", c.name.c_str(), int(c.pid), alive ? "running" : "exited",
                c.log.c_str());
  }
  return dead == 0 ? 0 : 3;
}

}  // namespace

void SetSimLogArgs(std::vector<std::string> args) { SimLogArgs() = std::move(args); }

void AddSimClusterCommands(CLI::App& sim) {
  static NodeFlags node;
  CLI::App* n = sim.add_subcommand(
      "node",
      "Run one simulated node's kubelet: its Node object, the device manager on DIR/device-plugins "
      "and the pods bound to it, through CRI in a containerd of its own (DIR/containerd), until "
      "SIGINT or SIGTERM (root)");
  n->add_option("--name", node.name, "the node's name")->required();
  n->add_option("--kubeconfig", node.kubeconfig, "the API server's kubeconfig")->required();
  n->add_option("--dir", node.dir,
                "the node's directory (device-plugins/, sim.state, containerd/, images/, toolkit/)")
      ->required();
  n->add_option("--gpus", node.gpus, "the node's simulated GPUs (HAMI_SIM_PROFILE)")
      ->capture_default_str();
  n->add_option("--pod-log-dir", node.pod_log_dir,
                "the pods' logs as the kubelet lays them out: "
                "<namespace>_<pod>_<uid>/<container>/<restart>.log (default DIR/pods)");
  n->add_option("--bin-dir", node.bin_dir,
                "bound read-only at /opt/hami/bin in every container (default: this program's "
                "directory)");
  n->add_option("--sim-lib-dir", node.sim_lib_dir,
                "the simulated libcuda.so.1 and libnvidia-ml.so.1 (default: beside this program)");
  n->add_option("--pause-program", node.pause_program,
                "the static program of the node's sandbox image (default: hami-sim-pause in "
                "--bin-dir)");
  n->add_option("--containerd-log-level", node.containerd_log_level,
                "containerd's --log-level (its log: DIR/containerd/containerd.log)")
      ->capture_default_str();
  n->add_option("--resource", node.resources, "a device-plugin resource to manage (repeatable)")
      ->capture_default_str();
  n->add_option("--dra-plugins-registry-dir", node.dra_registry_dir,
                "run the kubelet's DRA manager on this plugins-registry directory (default: "
                "none, no DRA)");
  n->add_option("--cdi-dir", node.cdi_dirs,
                "a CDI spec directory, lowest priority first (repeatable; default /etc/cdi "
                "then /var/run/cdi)");
  n->callback([] { std::exit(RunNode(node)); });

  CLI::App* cluster =
      sim.add_subcommand("cluster", "A whole simulated cluster on this machine: up, down, status");
  cluster->require_subcommand(1);
  static ClusterFlags up;
  CLI::App* u = cluster->add_subcommand(
      "up",
      "Start the API server, per node a simulated GPU, kubelet, hami-device-plugin and "
      "hami-monitor, then hami-scheduler with the kube-scheduler stand-in (root)");
  u->add_option("--mode", up.mode,
                "how nodes serve GPUs: device-plugin (hami-device-plugin) or dra "
                "(hami-dra-plugin, the kubelet's DRA manager, DeviceClass "
                "hami-core-gpu.project-hami.io)")
      ->capture_default_str();
  u->add_option("--nodes", up.nodes, "number of nodes")->capture_default_str();
  u->add_option("--gpus", up.gpus, "each node's GPUs (a HAMI_SIM_PROFILE)")->capture_default_str();
  u->add_option("--dir", up.dir,
                "the cluster's directory, absolute or relative to the working directory "
                "(default $XDG_RUNTIME_DIR/hami-cluster or /tmp/hami-cluster)");
  u->add_flag("--broker", up.broker, "the device plugins run the host-PID broker");
  u->add_option("--config-dir", up.config_dir,
                "device-config.yaml, config.json, kube-scheduler-config.yaml (default "
                "<prefix>/share/hami/config when installed, else the source tree's "
                "deploy/base/config)");
  u->add_option("--monitor-resync-interval", up.resync,
                "hami-monitor's --resync-interval (cleanup of deleted pods' directories)")
      ->capture_default_str();
  u->add_option("--monitor-feedback-interval", up.feedback,
                "hami-monitor's --feedback-interval (scans, NVML samples and the priority "
                "feedback loop, which turns compute limits of policy default on and off)")
      ->capture_default_str();
  u->add_option("--timeout", up.timeout_s, "seconds to wait for each component to be ready")
      ->capture_default_str();
  u->callback([] { std::exit(ClusterUp(up)); });

  static std::string down_dir;
  CLI::App* d = cluster->add_subcommand(
      "down", "Stop everything the cluster started (containers included) and remove its directory");
  d->add_option("--dir", down_dir, "the cluster's directory");
  d->callback([] { std::exit(ClusterDown(down_dir)); });

  static std::string status_dir;
  static bool status_json = false;
  CLI::App* s = cluster->add_subcommand("status", "List the cluster's components and endpoints");
  s->add_option("--dir", status_dir, "the cluster's directory");
  s->add_flag("--json", status_json, "print JSON");
  s->callback([] { std::exit(ClusterStatus(status_dir, status_json)); });
}

}  // namespace hami::cli
