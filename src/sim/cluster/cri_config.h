// The CRI messages the simulated kubelet sends for a pod (sim/cluster/node_agent.h), built as
// the kubelet builds them (pkg/kubelet/kuberuntime): pure functions, tested alone.
//
// Sandbox (RunPodSandbox):
//   metadata     the pod's name, UID, namespace and the sandbox attempt
//   hostname     empty: every simulated pod is on the node's network (runc refuses a hostname
//                without a private UTS namespace)
//   log_directory <pod_log_root>/<namespace>_<name>_<uid> (PodLogDirectory)
//   labels       the pod's labels, then io.kubernetes.pod.{name,namespace,uid}
//   annotations  the pod's annotations
//   linux        cgroup_parent as given (a relative path: see sim/cri/containerd.h); namespace
//                options network NODE, pid as the pod asks (PidMode), ipc POD
// Container (CreateContainer):
//   metadata     name and attempt (the restart count)
//   image        the container's image, as written in the pod
//   command/args the pod's command and args (empty: the image's entrypoint and command)
//   envs         HOSTNAME=<pod name> unless the pod asked for hostNetwork (every pod is on the
//                node's network here, but a pod that did not ask sees its own name, as in a
//                network namespace of its own); the node's variables; then, in the kubelet's
//                order, the device plugin's envs (sorted by name: the response is a map) and the
//                pod's env (fieldRefs resolved). The runtime keeps the last value of a repeated
//                name, so the pod's spec wins over the plugin, and both over the image. The node
//                adds no variable for the GPUs: a real container has none (below, device nodes).
//   mounts       the node's mounts for every container, then its GPU mounts and the
//                container's device-nodes file read-only at kDefaultDeviceNodesPath (GPU
//                containers; sim/cluster/gpu_toolkit.h: the simulated GPU's stand-in for the
//                device nodes the toolkit gives a real container) or its plain mounts (the
//                others), then the device plugin's mounts in the response's order, then the
//                pod's volume mounts, each with its read-only flag (the runtime orders them by
//                destination depth itself)
//   devices      the device plugin's device specs, in order
//   labels       io.kubernetes.container.name, io.kubernetes.pod.{name,namespace,uid}
//   annotations  io.kubernetes.container.restartCount, then the device plugin's annotations
//   log_path     <container>/<attempt>.log (ContainerLogPath), relative to log_directory
//   linux        namespace options as the sandbox's (the kubelet sets them on every container:
//                without them the runtime puts the container in the pod's PID namespace)
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/cluster/node_agent.h"
#include "sim/cri/client.h"
#include "sim/kubelet/types.h"

namespace hami::sim::cluster {

// The label and annotation keys the kubelet puts on sandboxes and containers.
inline constexpr char kPodNameLabel[] = "io.kubernetes.pod.name";
inline constexpr char kPodNamespaceLabel[] = "io.kubernetes.pod.namespace";
inline constexpr char kPodUidLabel[] = "io.kubernetes.pod.uid";
inline constexpr char kContainerNameLabel[] = "io.kubernetes.container.name";
inline constexpr char kRestartCountAnnotation[] = "io.kubernetes.container.restartCount";

// What the node adds to containers beside the pod's spec and the device plugin's answer.
struct NodeAdditions {
  std::map<std::string, std::string> envs;   // every container, first
  std::vector<kubelet::Mount> mounts;        // every container, in order
  std::vector<kubelet::Mount> gpu_mounts;    // GPU containers (GetsGpu), before device nodes
  std::vector<kubelet::Mount> plain_mounts;  // the other containers
};

// <root>/<namespace>_<name>_<uid>.
std::string PodLogDirectory(const std::string& root, const PodPlan& plan);
// <container>/<attempt>.log.
std::string ContainerLogPath(const std::string& container, int attempt);

// The PID namespace the pod's containers get: NODE for hostPID, POD for
// shareProcessNamespace, CONTAINER otherwise.
cri::v1::NamespaceMode PidMode(const PodPlan& plan);

cri::v1::PodSandboxConfig SandboxConfigFor(const PodPlan& plan, const std::string& pod_log_root,
                                           const std::string& cgroup_parent, int attempt);

// `device_nodes`: for a GPU container (node_agent.h, GetsGpu), the host path of its
// device-nodes file (GpuToolkit::WriteDeviceNodes), with which the node's GPU additions apply;
// empty for the others. `volumes`: the container's volumeMounts with their host paths resolved
// by the node.
cri::v1::ContainerConfig ContainerConfigFor(const PodPlan& plan, const ContainerPlan& container,
                                            const kubelet::ContainerAllocation& response,
                                            const NodeAdditions& node,
                                            const std::string& device_nodes, int attempt,
                                            const std::vector<kubelet::Mount>& volumes = {});

}  // namespace hami::sim::cluster
