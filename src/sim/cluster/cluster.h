// The simulated cluster (`hami sim cluster up/down/status`): every component of a GPU-sharing
// Kubernetes cluster as a background process on this machine, with its log in <dir>/logs/.
//
// Up starts, in this order, and records each process in <dir>/cluster.json as it starts it:
//   apiserver               `hami-sim apiserver` (kubeconfig <dir>/kubeconfig; pods' logs served
//                           from <dir>/logs/pods when the server offers --pod-log-dir)
//   per node N (node-1...): its simulated GPU (state <dir>/nodes/N/sim.state, HAMI_SIM_NODE=N
//                           so UUIDs differ, HAMI_SIM_PROFILE=--gpus), then
//     node/N                `hami-sim node` (the simulated kubelet, node_agent.h)
//     device-plugin/N       the real hami-device-plugin (hook <dir>/nodes/N/hook, kubelet socket
//                           in <dir>/nodes/N/device-plugins, broker dir <dir>/nodes/N/hostpid);
//                           with --mode dra instead:
//     dra-plugin/N          the real hami-dra-plugin (hook <dir>/nodes/N/hook, plugins-registry
//                           dir <dir>/nodes/N/plugins_registry, plugins dir
//                           <dir>/nodes/N/plugins, CDI dir <dir>/nodes/N/cdi), whose
//                           registry dir the node's DRA manager watches and whose CDI dir it
//                           reads (node_agent.h)
//     monitor/N             the real hami-monitor, when it is built (metrics on a port of its own)
//   hami-scheduler          the real scheduler over HTTPS with a certificate made by openssl
//   kube-scheduler          `hami-sim kube-scheduler` with the deployment's
//                           kube-scheduler-config.yaml, its extender URL (and CA) rewritten
//   default-scheduler       a second stand-in, without extenders, for pods of default-scheduler
//   then the MutatingWebhookConfiguration hami-webhook pointing at the scheduler's /webhook
//   (when the API server serves the resource), and waits until every node is Ready with its
//   GPUs registered (hami.io/node-nvidia-register), the scheduler and the monitors ready. With
//   --mode dra, the DeviceClass of deploy/dra/deviceclass.yaml (DraDeviceClass) is created
//   before the nodes start, and a node is ready once it is Ready, its DRA manager registered
//   hami-dra-plugin and the plugin published the node's ResourceSlice.
// The deployment's configuration (device-config.yaml, config.json, kube-scheduler-config.yaml)
// comes from options.config_dir when it has the files, else equivalent defaults are written to
// <dir>/config. A failure stops what was started, keeps <dir> (its logs) and names the component
// and its log file.
//
// Down stops every recorded process that is still the one started (its start time is checked):
// SIGTERM in the reverse order of starting, a wait for its exit, SIGKILL after
// options' bound; then any process left that carries HAMI_SIM_CLUSTER=<dir> in its environment;
// then removes <dir>. A directory that holds no cluster marker is never removed. A cluster half
// started, or already gone, is fine.
//
// Needs root (the container runtime's namespaces and mounts); Up refuses otherwise, after it has
// checked the options.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami::sim::cluster {

inline constexpr char kClusterFile[] = "cluster.json";
inline constexpr char kMarkerFile[] = ".hami-sim-cluster";
inline constexpr char kClusterEnv[] = "HAMI_SIM_CLUSTER";

// How the nodes serve GPUs: the device plugin (the default) or the DRA driver.
enum class ClusterMode { kDevicePlugin, kDra };

// "device-plugin" or "dra"; kInvalidArgument naming --mode otherwise.
Result<ClusterMode> ParseClusterMode(std::string_view text);
const char* ClusterModeName(ClusterMode mode);

// The DRA driver's name, and the DeviceClass that --mode dra creates: the same object as
// deploy/dra/deviceclass.yaml (a test compares them).
inline constexpr char kDraDriverName[] = "hami-core-gpu.project-hami.io";
nlohmann::json DraDeviceClass();

struct ClusterOptions {
  std::string dir;  // absolute; created
  ClusterMode mode = ClusterMode::kDevicePlugin;
  int nodes = 2;                    // 1..16
  std::string gpus = "h100-80g:2";  // HAMI_SIM_PROFILE of every node
  bool broker = false;              // LIBVGPU_HOSTPID_BROKER=1 for the plugins
  std::string bin_dir;              // hami-sim, hami-device-plugin, hami-scheduler, hami-monitor
  std::string sim_lib_dir;          // the simulated libcuda.so.1 and libnvidia-ml.so.1
  std::string vgpu_library;         // libvgpu.so
  std::string config_dir;           // deploy/base/config; "" or incomplete: defaults
  std::string monitor_resync_interval = "5m";
  std::string monitor_feedback_interval = "5s";  // hami-monitor's --feedback-interval
  std::chrono::seconds ready_timeout{90};
  std::chrono::seconds stop_timeout{15};  // per process, before SIGKILL
  // Added to the command line of every component started (`--v=4`, `--log-level=debug`):
  // each takes the daemons' logging flags.
  std::vector<std::string> log_args;
};

// One process the cluster started.
struct Component {
  std::string name;  // "apiserver", "node/node-1", "device-plugin/node-1", ...
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22, to recognise it later
  std::string log;
  std::vector<std::string> argv;
};

struct NodeInfo {
  std::string name;
  std::string dir;        // <dir>/nodes/<name>
  std::string hook_path;  // its hami-device-plugin's and hami-monitor's hook path
  std::string sim_state;
  std::string monitor_url;  // "http://127.0.0.1:PORT" ("" without a monitor)
  std::string cdi_dir;      // its hami-dra-plugin's CDI dir (--mode dra; else "")
};

struct ClusterInfo {
  std::string dir;
  std::string kubeconfig;
  std::string api_server;              // URL
  std::string scheduler;               // https URL of the extender and webhook
  std::string scheduler_metrics;       // http URL of its metrics listener
  std::string ca_file;                 // the scheduler's certificate (its own CA)
  bool webhook = false;                // the MutatingWebhookConfiguration was registered
  bool pod_logs = false;               // the API server serves pods/log from <dir>/logs/pods
  std::string mode = "device-plugin";  // ClusterModeName
  std::vector<NodeInfo> nodes;
  std::vector<Component> components;
};

nlohmann::json ClusterInfoToJson(const ClusterInfo& info);
Result<ClusterInfo> ClusterInfoFromJson(const nlohmann::json& j, const std::string& source);
// Reads <dir>/cluster.json; kNotFound when absent.
Result<ClusterInfo> ReadClusterInfo(const std::string& dir);

// The default directory: $XDG_RUNTIME_DIR/hami-cluster when that is set, else /tmp/hami-cluster.
std::string DefaultClusterDir();

// Rewrites a KubeSchedulerConfiguration (YAML text) for this cluster: every extender's
// urlPrefix becomes `url`, enableHTTPS follows its scheme, and, for https, tlsConfig becomes
// {caData: base64(ca_pem)} (file paths of the deployment do not exist here). Errors name
// `source`.
Result<std::string> RewriteSchedulerConfig(const std::string& yaml, const std::string& source,
                                           const std::string& url, const std::string& ca_pem);

// Checks every option a user gives `up` (--dir absolute, --nodes, --gpus as HAMI_SIM_PROFILE
// with at least one GPU, --broker not with --mode dra (no broker is served there yet),
// --monitor-resync-interval and --monitor-feedback-interval as hami-monitor reads them, --timeout),
// so that a bad one is refused before anything starts. kInvalidArgument naming the flag.
Status ValidateOptions(const ClusterOptions& options);

// Validates the options first (ValidateOptions), then starts the cluster. Progress lines go to
// `out` (may be null).
Result<ClusterInfo> Up(const ClusterOptions& options, std::FILE* out);
Status Down(const std::string& dir, std::chrono::seconds stop_timeout, std::FILE* out);

// Whether the recorded process is still the one that was started.
bool ComponentAlive(const Component& c);

}  // namespace hami::sim::cluster
