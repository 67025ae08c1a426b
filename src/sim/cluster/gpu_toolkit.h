// The simulated node's stand-in for the NVIDIA container toolkit: what a GPU container gets
// from the node beside the device plugin's Allocate answer, as the toolkit brings a real
// driver into a container. The device plugin never adds these.
//
// Which containers: those given a device-plugin resource, and, as the real toolkit does by
// default, those whose own env sets NVIDIA_VISIBLE_DEVICES (node_agent.h, GetsGpu).
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
// Prepare makes <dir> (driver/, usr-lib/) and mounts the overlay; Unmount (and the destructor)
// detaches it. A failure names the step and the path.
//
// Needs effective UID 0 (the overlay mount).
//
// Thread safety: one thread at a time; mounts() is a value.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
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

class GpuToolkit {
 public:
  // `driver_libs`: host files (libcuda.so.1, libnvidia-ml.so.1), copied into the driver layer
  // under their file names. `sim_state`: the node's state file.
  static Result<std::unique_ptr<GpuToolkit>> Prepare(const std::string& dir,
                                                     const std::vector<std::string>& driver_libs,
                                                     const std::string& sim_state);
  ~GpuToolkit();
  GpuToolkit(const GpuToolkit&) = delete;
  GpuToolkit& operator=(const GpuToolkit&) = delete;

  // The mounts a GPU container gets (see the top of this file), the host userland included.
  const std::vector<kubelet::Mount>& mounts() const { return mounts_; }
  const std::string& usr_lib() const { return usr_lib_; }

  // Detaches the overlay. Idempotent.
  Status Unmount();

 private:
  GpuToolkit() = default;
  std::string usr_lib_;
  bool mounted_ = false;
  std::vector<kubelet::Mount> mounts_;
};

}  // namespace hami::sim::cluster
