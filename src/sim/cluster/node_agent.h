// One simulated node's kubelet (`hami sim node`): the Node object, the device manager of the
// simulated kubelet (sim/kubelet/kubelet.h), the node's containerd (sim/cri/containerd.h) and a
// pod worker that runs each pod bound to the node through CRI, as the kubelet does. Test and
// demo infrastructure, as the rest of src/sim.
//
// Start: containerd in <dir>/containerd with the pods' cgroups under options.cgroup_parent; the
// pause image (from options.pause_program) and the base image (sim/oci/image.h) built into
// <dir>/images and imported; the GPU toolkit's mounts prepared in <dir>/toolkit
// (sim/cluster/gpu_toolkit.h); then the Node and the device manager.
//
// What it does, as the kubelet does it:
//   Node     creates (or adopts) the Node `name` with labels kubernetes.io/hostname=<name> and
//            gpu=on; its status has capacity and allocatable for cpu, memory, pods and each
//            device-plugin resource (the healthy count its plugin reports through
//            ListAndWatch, rewritten whenever that count changes), a Ready condition, the
//            addresses (127.0.0.1) and nodeInfo (containerRuntimeVersion from CRI Version).
//            It is refreshed every heartbeat.
//   pods     an informer on pods with spec.nodeName=<name>. A pod seen for the first time
//            that is not Succeeded, Failed or being deleted gets a worker: its status goes
//            Pending, then each container that limits a device-plugin resource gets
//            AllocateContainer (a failure fails the pod: reason UnexpectedAdmissionError,
//            "Pod was rejected: Allocate failed due to <error>, which is unexpected"), then
//            the pod's sandbox (RunPodSandbox; a failure is a FailedCreatePodSandBox event and a
//            retry after the backoff), then per container: its image must be on the node
//            (ImageStatus; nothing is pulled: ErrImagePull, then ImagePullBackOff),
//            CreateContainer with the config of sim/cluster/cri_config.h (a failure:
//            CreateContainerError with the runtime's message, retried after the backoff),
//            StartContainer, and a wait for its exit, which a relist of the runtime's
//            containers every relist_period notices (the kubelet's PLEG). The exit code,
//            reason and message are the runtime's. restartPolicy Always and OnFailure restart
//            a container after a backoff of 1 s doubling to 30 s, as a new container of the
//            next attempt; the one before stays (its log serves --previous), older ones are
//            removed with their logs. The phase is Running while a container runs, Succeeded
//            or Failed once all have ended for good. Every change is written through
//            pods/<name>/status.
//   logs     <pod_log_dir>/<namespace>_<name>_<uid>/<container>/<attempt>.log, written by
//            containerd in the CRI log format; kept after the pod ends.
//   DRA      with options.dra_registry_dir set, the DRA manager (sim/kubelet/dra.h) watches
//            that plugins-registry directory. A pod with spec.resourceClaims or
//            status.extendedResourceClaimStatus has its claims prepared after admission and
//            before its sandbox, as the kubelet's SyncPod does: each claim's name is resolved
//            (resourceClaimName; for a template, the pod's status.resourceClaimStatuses, read
//            afresh from the API server at each try; the KEP-5004 claim of
//            extendedResourceClaimStatus), the ResourceClaim read and checked (allocated, and
//            reserved for this pod's UID), and the claims sent to the drivers of their
//            allocation's results (DraManager::Prepare: one call per driver; a claim another
//            pod on the node prepared is not sent again). Any failure, a claim not allocated
//            or not reserved yet included, is a Warning event FailedPrepareDynamicResources
//            ("Failed to prepare dynamic resources: <error>") and a try again after the
//            backoff; no container starts before every claim is prepared. Each container
//            gets the CDI IDs of the devices whose request_names hold the request its
//            resources.claims[] names (every device of the claim when it names none) and,
//            for KEP-5004, those whose request_names hold the requestName its
//            extendedResourceClaimStatus.requestMappings map to it. The node resolves them
//            itself against options.cdi_dirs (sim/cluster/cdi.h: containerd 1.6 has no CDI)
//            before each CreateContainer, into envs, mounts and device nodes added to the
//            container's config as a device plugin's answer would be (cri_config.h); a
//            failure to resolve is a CreateContainerError, retried after the backoff. Such a
//            container is a GPU container (the toolkit's NVIDIA_VISIBLE_DEVICES comes from
//            its CDI edits). On a DRA node, an extended resource in a container's limits
//            that no device plugin registered is not given to the device manager (the
//            kubelet drops what the node's allocatable does not list). Once the pod's
//            containers and sandbox are gone (deletion or end), the claims no other pod on
//            the node uses are unprepared (DraManager::Unprepare); a failed unprepare is
//            logged and tried again at every heartbeat.
//   deletion a DELETED event, or a deletionTimestamp, stops the pod's containers
//            (StopContainer with terminationGracePeriodSeconds, 30 by default, at most
//            max_grace_period), removes them and the sandbox, and releases its devices
//            (ReleasePod) and its claims (above). Stop() does the same for every pod, then
//            stops containerd.
//   runtime  containerd is watched: when it exits, the Node's Ready condition goes False
//            (KubeletNotReady, "container runtime is down: containerd exited with status N
//            (its log: ...)") and running pods' Ready and ContainersReady False (reason
//            ContainerRuntimeDown); it is started again 5 s later (containerd.service's
//            RestartSec), and every 5 s while that fails, with its root and state, lists the
//            sandboxes and containers its shims kept, and the pods carry on with the same
//            containers.
//   exec     the kubelet server (sim/cluster/kubelet_server.h) on 127.0.0.1 and a free port,
//            published as the Node's status.daemonEndpoints.kubeletEndpoint.Port: the API
//            server's pods/exec gets a container's streaming URL (CRI Exec) there.
//   events   Events of component "kubelet" on the pod, as the kubelet records them: Pulled,
//            Created, Started, Failed, Killing, BackOff, FailedCreatePodSandBox,
//            UnexpectedAdmissionError.
// Every container sees options.bin_dir read-only at kContainerBinDir, first in PATH, so a
// pod's command may name the project's programs.
//
// Needs effective UID 0 (containerd).
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
#include "sim/kubelet/dra.h"

namespace hami::sim::cluster {

// Where the project's programs appear in every container.
inline constexpr char kContainerBinDir[] = "/opt/hami/bin";
inline constexpr char kImagePath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct NodeAgentOptions {
  std::string name;                              // the Node's name
  std::string kubeconfig;                        // the API server
  std::string device_plugin_dir;                 // kubelet.sock and the plugins' sockets
  std::string dir;                               // the node's: containerd/, images/, toolkit/
  std::string pod_log_dir;                       // the pods' log directories (see above)
  std::string bin_dir;                           // bound read-only at kContainerBinDir ("": none)
  std::string pause_program;                     // the sandbox image's program (hami-sim-pause)
  std::vector<std::string> driver_libs;          // the simulated libcuda.so.1, libnvidia-ml.so.1
  std::string sim_state;                         // the node's simulated GPU
  std::map<std::string, std::string> image_env;  // added to every container's environment
  // The pods' cgroups go under this relative path ("hami-sim/<name>-<hash of dir>" when empty).
  std::string cgroup_parent;
  std::string containerd_log_level = "info";
  std::chrono::milliseconds relist_period{100};
  std::vector<std::string> resources = {"nvidia.com/gpu"};  // device-plugin resources
  int64_t cpu_millis = 16000;
  int64_t memory_bytes = int64_t{64} << 30;
  int64_t max_pods = 110;
  std::chrono::milliseconds heartbeat{10000};
  std::chrono::seconds max_grace_period{30};
  // DRA: the plugins-registry directory the DRA manager watches ("": no DRA manager), and the
  // CDI spec directories in priority order, lowest first (sim/cluster/cdi.h).
  std::string dra_registry_dir;
  std::vector<std::string> cdi_dirs = {"/etc/cdi", "/var/run/cdi"};
};

// ---- pure parts (tested without a cluster) ----

// One container of a pod as the worker runs it.
// A volume of the pod the node can give: a host path (spec.volumes[].hostPath, its type ""
// or DirectoryOrCreate) or an emptyDir (a directory of the node's, made for the pod).
struct VolumePlan {
  enum class Kind { kHostPath, kEmptyDir } kind = Kind::kHostPath;
  std::string host_path;  // kHostPath
  bool create = false;    // kHostPath of type DirectoryOrCreate
};

// A container's volumeMount.
struct VolumeMountPlan {
  std::string volume;
  std::string mount_path;
  bool read_only = false;
};

// A container's resources.claims[] entry: the pod's claim and, optionally, one request of it.
struct ContainerClaimPlan {
  std::string name;     // a spec.resourceClaims[].name
  std::string request;  // "": every request of the claim
};

struct ContainerPlan {
  std::string name;
  std::vector<ContainerClaimPlan> claims;  // resources.claims
  std::vector<VolumeMountPlan> volume_mounts;
  std::string image;                       // as written in the pod
  std::vector<std::string> command;        // empty: the image's entrypoint
  std::vector<std::string> args;           // empty: the image's command (with no command)
  std::map<std::string, std::string> env;  // spec env, fieldRefs resolved
  std::map<std::string, int64_t> devices;  // device-plugin resource -> count (limits)
  std::string working_dir;                 // "": the image's
};

enum class RestartPolicy { kAlways, kOnFailure, kNever };

struct PodPlan {
  std::string ns, name, uid;
  std::map<std::string, std::string> labels, annotations;
  std::map<std::string, VolumePlan> volumes;  // by name
  bool host_network = false;                  // spec.hostNetwork
  bool host_pid = false;                      // spec.hostPID
  bool share_process_namespace = false;       // spec.shareProcessNamespace
  RestartPolicy restart_policy = RestartPolicy::kAlways;
  std::chrono::seconds grace_period{30};
  std::vector<ContainerPlan> containers;
  // spec.resourceClaims is not empty, or status.extendedResourceClaimStatus names a claim.
  bool uses_claims = false;
};

// The plan for `pod` (the API's JSON) on node `node` (host IP `host_ip`): kInvalidArgument
// naming the field for a volume of another kind than hostPath or emptyDir (or a hostPath type
// other than "" and DirectoryOrCreate), a volumeMount of no such volume, a container's
// resources.claims entry naming no spec.resourceClaims entry, a pod without
// containers, a container without a name or command (an
// image entrypoint cannot be known here), an unknown restartPolicy, a fieldRef other than those
// listed above, env valueFrom of other kinds, or a device count that is not a whole number.
// `resources` are the device-plugin resources (others in limits are ignored).
Result<PodPlan> PlanPod(const nlohmann::json& pod, const std::string& host_ip,
                        const std::vector<std::string>& resources);

// One claim of a pod, resolved to the ResourceClaim's name.
struct PodClaimRef {
  std::string pod_claim;  // the spec.resourceClaims[].name; "" for the KEP-5004 claim
  std::string claim;      // the ResourceClaim's name, in the pod's namespace
};

// The pod's claims (the pod's JSON, its status as current as the caller has it):
// spec.resourceClaims in order, then status.extendedResourceClaimStatus.resourceClaimName. A
// template's claim is the one status.resourceClaimStatuses names; an entry there without a
// name means the pod needs no claim for it (skipped). kUnavailable while a template's claim
// is not yet named in the status; kInvalidArgument naming the field for an entry with neither
// or both of resourceClaimName and resourceClaimTemplateName.
Result<std::vector<PodClaimRef>> PodClaimRefs(const nlohmann::json& pod);

// The kubelet's checks of a ResourceClaim (the API's JSON) before it prepares it for pod
// `pod_uid`: allocated (status.allocation), and reserved for the pod (status.reservedFor holds
// its UID). kUnavailable naming the claim and what it lacks (the kubelet waits for the
// scheduler); kInvalidArgument for a result without a driver. The drivers come from
// status.allocation.devices.results, each once, in order.
Result<kubelet::DraClaim> CheckedClaim(const nlohmann::json& claim, const std::string& pod_uid);

// The CDI device IDs of each container of `pod` (by name), as the kubelet hands them to the
// runtime (see the top of this file), from the prepared devices of each ResourceClaim (by
// claim name) of `refs`. Each ID once, in the order found.
std::map<std::string, std::vector<std::string>> ContainerCdiIds(
    const nlohmann::json& pod, const std::vector<PodClaimRef>& refs,
    const std::map<std::string, std::vector<kubelet::DraDevice>>& devices);

// The pod's cgroup under the node's parent, as the kubelet's cgroupfs driver names it:
// "kubepods/besteffort/pod<uid>" (every simulated pod is BestEffort).
std::string PodCgroupPath(const PodPlan& plan);

// Whether the node's GPU toolkit gives `container` the GPU: it was given a device-plugin
// resource, or, as the NVIDIA container toolkit does by default for unprivileged containers
// (accept-nvidia-visible-devices-envvar-when-unprivileged), its own env sets
// NVIDIA_VISIBLE_DEVICES to something other than "", "void" or "none". The second is how a
// container escapes the device plugin; hami-monitor reports its memory as unaccounted, and
// the webhook's overwriteEnv closes it.
bool GetsGpu(const ContainerPlan& container);

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
  std::string container_id;  // "containerd://<id>", set once created
  std::string image_id;      // the image's ID as the runtime names it
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
// `not_ready`: why the node's runtime is down ("" while it answers); a pod whose containers
// all run is then Ready False with reason ContainerRuntimeDown and this message.
nlohmann::json PodStatusJson(const PodPlan& plan, const std::vector<ContainerState>& states,
                             const std::string& host_ip, const std::string& start_time,
                             const std::string& not_ready = "");

// The Node's status for `allocatable` extended resources (name -> count).
// `runtime_version` as the kubelet reports it ("containerd://1.6.20"); `kubelet_port`: the
// kubelet server's (daemonEndpoints.kubeletEndpoint.Port); `not_ready`: why the runtime is down
// ("" while it answers), the Ready condition's message with reason KubeletNotReady.
nlohmann::json NodeStatusJson(const NodeAgentOptions& options,
                              const std::map<std::string, int64_t>& devices,
                              const std::string& runtime_version, const std::string& now,
                              int kubelet_port, const std::string& not_ready = "");

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
