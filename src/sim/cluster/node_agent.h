// One simulated node's kubelet (`hami sim node`): the Node object, the device manager of the
// simulated kubelet (sim/kubelet/kubelet.h) and a pod worker that runs each pod bound to the
// node in the simulated container runtime (sim/kubelet/runtime.h). Test and demo
// infrastructure, as the rest of src/sim.
//
// What it does, as the kubelet does it:
//   Node     creates (or adopts) the Node `name` with labels kubernetes.io/hostname=<name> and
//            gpu=on; its status has capacity and allocatable for cpu, memory, pods and each
//            device-plugin resource (the healthy count its plugin reports through
//            ListAndWatch, rewritten whenever that count changes), a Ready condition, the
//            addresses (127.0.0.1) and nodeInfo. It is refreshed every heartbeat.
//   pods     an informer on pods with spec.nodeName=<name>. A pod seen for the first time
//            that is not Succeeded, Failed or being deleted gets a worker: its status goes
//            Pending, then each container that limits a device-plugin resource gets
//            AllocateContainer (a failure fails the pod: reason UnexpectedAdmissionError,
//            "Pod was rejected: Allocate failed due to <error>, which is unexpected"), then
//            every container starts in the runtime: its command and args, its env (values,
//            and fieldRef metadata.name, metadata.namespace, metadata.uid, spec.nodeName,
//            status.hostIP, status.podIP) over the image's PATH and the Allocate response's
//            envs (and CUDA_VISIBLE_DEVICES = its NVIDIA_VISIBLE_DEVICES, standing for the
//            toolkit's device nodes, which the simulated GPU has not), its mounts; stdout and
//            stderr appended to <pod_log_dir>/<namespace>_<pod>_<container>.log. restartPolicy
//            Always and OnFailure restart a container after a backoff of 1 s doubling to 30 s; the
//            phase is Running while a container runs, Succeeded or Failed once all have ended for
//            good. Every change is written through pods/<name>/status.
//   deletion a DELETED event, or a deletionTimestamp, ends the pod's containers (SIGTERM, then
//            SIGKILL after terminationGracePeriodSeconds, 30 by default, at most
//            max_grace_period) and releases its devices (ReleasePod). Stop() does the same for
//            every pod.
//   events   Events of component "kubelet" on the pod, as the kubelet records them: Started,
//            Failed (a container that could not start), Killing, BackOff,
//            UnexpectedAdmissionError.
// Every container sees options.bin_dir read-only at kContainerBinDir, first in PATH, so a
// pod's command may name the project's programs.
//
// Thread safety: Start and Stop from one thread; the rest runs on the agent's own threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace hami::sim::cluster {

// Where the project's programs appear in every container.
inline constexpr char kContainerBinDir[] = "/opt/hami/bin";
inline constexpr char kImagePath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct NodeAgentOptions {
  std::string name;                              // the Node's name
  std::string kubeconfig;                        // the API server
  std::string device_plugin_dir;                 // kubelet.sock and the plugins' sockets
  std::string pod_log_dir;                       // <namespace>_<pod>_<container>.log
  std::string bin_dir;                           // bound read-only at kContainerBinDir ("": none)
  std::vector<std::string> driver_libs;          // host files bound into the runtime's driver dir
  std::string sim_state;                         // the node's simulated GPU ("": none)
  std::map<std::string, std::string> image_env;  // added to every container's image env
  std::vector<std::string> resources = {"nvidia.com/gpu"};  // device-plugin resources
  int64_t cpu_millis = 16000;
  int64_t memory_bytes = int64_t{64} << 30;
  int64_t max_pods = 110;
  std::chrono::milliseconds heartbeat{10000};
  std::chrono::seconds max_grace_period{30};
};

// ---- pure parts (tested without a cluster) ----

// One container of a pod as the worker runs it.
struct ContainerPlan {
  std::string name;
  std::vector<std::string> command;        // command + args
  std::map<std::string, std::string> env;  // spec env, fieldRefs resolved
  std::map<std::string, int64_t> devices;  // device-plugin resource -> count (limits)
  std::string working_dir;                 // "" : "/"
};

enum class RestartPolicy { kAlways, kOnFailure, kNever };

struct PodPlan {
  std::string ns, name, uid;
  RestartPolicy restart_policy = RestartPolicy::kAlways;
  std::chrono::seconds grace_period{30};
  std::vector<ContainerPlan> containers;
};

// The plan for `pod` (the API's JSON) on node `node` (host IP `host_ip`): kInvalidArgument
// naming the field for a pod without containers, a container without a name or command (an
// image entrypoint cannot be known here), an unknown restartPolicy, a fieldRef other than those
// listed above, env valueFrom of other kinds, or a device count that is not a whole number.
// `resources` are the device-plugin resources (others in limits are ignored).
Result<PodPlan> PlanPod(const nlohmann::json& pod, const std::string& host_ip,
                        const std::vector<std::string>& resources);

// Whether a container that exited with `exit_code` starts again under `policy`.
bool ShouldRestart(RestartPolicy policy, int exit_code);

// The backoff before restart number `restarts` (1-based): 1 s doubling, at most 30 s.
std::chrono::milliseconds RestartBackoff(int restarts);

// A container's state as the worker records it.
struct ContainerState {
  enum class Kind { kWaiting, kRunning, kTerminated } kind = Kind::kWaiting;
  std::string reason = "ContainerCreating";  // waiting / terminated
  std::string message;
  int exit_code = 0;
  int restart_count = 0;
  std::string container_id;  // "sim://<hex>", set once started
  std::string started_at;    // RFC 3339
  std::string finished_at;
  bool will_restart = false;  // terminated, waiting for its backoff
};

// "Pending", "Running", "Succeeded" or "Failed" from the containers' states: Running while one
// runs or will restart; Succeeded when all ended for good with 0; Failed when all ended for
// good and one did not exit 0; Pending otherwise.
std::string PodPhase(const std::vector<ContainerState>& states);

// The pods/status body (status: phase, conditions, hostIP, podIP(s), startTime,
// containerStatuses) for the plan's containers in `states` (same order).
nlohmann::json PodStatusJson(const PodPlan& plan, const std::vector<ContainerState>& states,
                             const std::string& host_ip, const std::string& start_time);

// The Node's status for `allocatable` extended resources (name -> count).
nlohmann::json NodeStatusJson(const NodeAgentOptions& options,
                              const std::map<std::string, int64_t>& devices,
                              const std::string& now);

class NodeAgent {
 public:
  // Connects, creates or updates the Node, starts the device manager on
  // options.device_plugin_dir and the pod worker. Errors name the step (kubeconfig, the Node,
  // the device manager's socket).
  static Result<std::unique_ptr<NodeAgent>> Start(NodeAgentOptions options);
  ~NodeAgent();  // Stop()
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Ends every pod's containers (as a deletion), releases their devices, stops the device
  // manager and the informer. Idempotent.
  void Stop();

  // The number of pods with a live worker.
  size_t active_pods() const;

  struct Impl;

 private:
  explicit NodeAgent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hami::sim::cluster
