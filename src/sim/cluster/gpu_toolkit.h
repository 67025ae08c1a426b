// The simulated node's stand-in for the NVIDIA container toolkit: what a GPU container gets
// from the node beside the device plugin's Allocate answer, as the toolkit brings a real
// driver and the GPUs' device nodes into a container. The device plugin never adds these.
//
// Which containers: those given a device-plugin resource, and, as the real toolkit does by
// default, those whose own env sets NVIDIA_VISIBLE_DEVICES (node_agent.h, GetsGpu).
//
// Which GPUs: those NVIDIA_VISIBLE_DEVICES names in the container's environment, as the
// toolkit reads it there (the pod's own value wins over the device plugin's, as the runtime
// keeps the last value of a name): "all" every GPU of the node; "", "void", "none" or unset
// none; else a comma-separated list of the node's GPU UUIDs (whole) and indices (the node's
// enumeration order, as nvidia-smi lists them), blanks around an entry ignored. An entry that
// names no GPU of the node fails the container's creation, as the toolkit's hook fails a real
// one ("nvidia-container-cli: device error: <entry>: unknown device"). The simulated GPU has no
// device nodes: the toolkit writes the container's GPUs, one UUID a line in the node's order,
// to <dir>/containers/<pod uid>_<container>/device-nodes, and the container gets that file
// read-only at sim/device_nodes.h's kDefaultDeviceNodesPath, where the simulated driver looks
// (cri_config.h). Every process of the container, whatever its environment, then sees those
// GPUs alone through CUDA and NVML, as on a real node.
//
// Containers run the base image (sim/oci/image.h): an almost empty root whose /usr/{bin,
// sbin,lib,lib64,libexec,share} are the host's, bound read-only by the node (HostUserlandMounts).
// A GPU container gets instead of the host's /usr/lib a read-only overlay of it with the
// simulated driver's libraries added in the loader's default directory, as the toolkit puts
// libcuda.so.1 and libnvidia-ml.so.1 there (a process started with an empty environment finds
// them), and the node's simulated GPU:
//   /usr/lib                         <dir>/usr-lib: overlay, lower layers <dir>/driver (the
//                                    libraries in <multiarch>/) over the host's /usr/lib, ro
//   /tmp/hami-sim.state              the node's state file (the simulated GPU's default path)
//   /tmp/hami-sim.state.hostpid      its host-PID resolver directory (sim/host_pid.h), created
//                                    here when missing, so that the simulated NVML names a
//                                    container's processes by their host PIDs
//
// Prepare makes <dir> (driver/, usr-lib/, containers/) and mounts the overlay; Unmount (and the
// destructor) detaches it. WriteDeviceNodes writes a container's file before each of its
// creations; RemovePod removes a pod's files when it ends. A failure names the step and the
// path.
//
// Needs effective UID 0 (the overlay mount).
//
// Thread safety: Prepare and Unmount from one thread; mounts() and gpus() are values;
// WriteDeviceNodes and RemovePod from any number of threads at once (the pods' workers): they
// only read the toolkit, and each writes or removes its own container's or pod's files.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sim/cluster/node_agent.h"
#include "sim/kubelet/types.h"

namespace hami::sim::cluster {

// Where the simulated GPU's state file is looked for without HAMI_SIM_STATE.
inline constexpr char kContainerSimState[] = "/tmp/hami-sim.state";

// The host's /usr directories the base image expects bound read-only.
std::vector<kubelet::Mount> HostUserlandMounts();
// The same with /usr/lib replaced by `usr_lib` (the toolkit's overlay), for GPU containers.
std::vector<kubelet::Mount> HostUserlandMounts(const std::string& usr_lib);

// The loader's multiarch directory name for this build's target ("x86_64-linux-gnu").
const char* MultiarchDir();

// The node's GPU UUIDs in enumeration order, from the simulated GPU's variables every
// container gets (`sim_env`: HAMI_SIM_PROFILE, HAMI_SIM_NODE; the simulator's defaults for
// those not set), as the simulated driver in a container reads them. An error names the
// variable.
Result<std::vector<std::string>> NodeGpus(const std::map<std::string, std::string>& sim_env);

// NVIDIA_VISIBLE_DEVICES in `container`'s environment: its own value, else the device
// plugin's (`response`); nullopt when neither sets it.
std::optional<std::string> ToolkitVisibleDevices(const ContainerPlan& container,
                                                 const kubelet::ContainerAllocation& response);

// The UUIDs of the GPUs `visible` (NVIDIA_VISIBLE_DEVICES, see above) names among `node_gpus`,
// in the node's order. kInvalidArgument "nvidia-container-cli: device error: <entry>: unknown
// device" for an entry that names none of them.
Result<std::vector<std::string>> ContainerGpus(std::optional<std::string_view> visible,
                                               std::span<const std::string> node_gpus);

class GpuToolkit {
 public:
  // `driver_libs`: host files (libcuda.so.1, libnvidia-ml.so.1), copied into the driver layer
  // under their file names. `sim_state`: the node's state file. `sim_env`: the simulated GPU's
  // variables every container gets (NodeGpus).
  static Result<std::unique_ptr<GpuToolkit>> Prepare(
      const std::string& dir, const std::vector<std::string>& driver_libs,
      const std::string& sim_state, const std::map<std::string, std::string>& sim_env);
  ~GpuToolkit();
  GpuToolkit(const GpuToolkit&) = delete;
  GpuToolkit& operator=(const GpuToolkit&) = delete;

  // The mounts every GPU container gets (see the top of this file), the host userland
  // included; its device-nodes file comes on top (cri_config.h).
  const std::vector<kubelet::Mount>& mounts() const { return mounts_; }
  const std::string& usr_lib() const { return usr_lib_; }
  // The node's GPU UUIDs, in enumeration order.
  const std::vector<std::string>& gpus() const { return gpus_; }

  // Writes the device-nodes file of GPU container `container` of pod `pod_uid` (replacing
  // it atomically) and returns its host path. Fails, writing nothing, when its
  // NVIDIA_VISIBLE_DEVICES names a GPU the node does not have (ContainerGpus).
  Result<std::string> WriteDeviceNodes(const std::string& pod_uid, const ContainerPlan& container,
                                       const kubelet::ContainerAllocation& response);
  // Removes the files of every container of pod `pod_uid`. Idempotent.
  void RemovePod(const std::string& pod_uid);

  // Detaches the overlay. Idempotent.
  Status Unmount();

 private:
  GpuToolkit() = default;
  std::string containers_dir_;  // <dir>/containers
  std::vector<std::string> gpus_;
  std::string usr_lib_;
  bool mounted_ = false;
  std::vector<kubelet::Mount> mounts_;
};

}  // namespace hami::sim::cluster
