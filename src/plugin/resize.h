// The node's half of resizing a running pod (kube/resize.h; the scheduler's half is
// scheduler/resize.h). The device plugin does it: it wrote the container's limits file and made
// its directory at Allocate, runs as root (the limits file must stay root's), and already reads
// and patches the node's pods; hami-monitor only reads regions and cleans up after dead pods.
//
// For a pod of this node whose hami.io/resize-status is `accepted`, every container with GPUs
// is brought to its share in hami.io/vgpu-devices-allocated (which the scheduler stored in the
// same write as the status):
//   1. checked first, changing nothing: the container's limits file must exist (a container
//      whose limits came only from its environment cannot follow a change: refused) and its
//      region must open; a memory limit lower than what the container holds on the device now
//      is refused (nothing is killed to make room);
//   2. the region's memory and SM limits are set, each memory limit checked against what the
//      device holds under the device's lock (region::Region::LowerMemoryLimitAboveUse), so no
//      allocation slips in after step 1; one that did puts every region back and is refused;
//   3. the limits file is rewritten in place, under its lock (limits/limits_file.h,
//      UpdateLimitsFileInPlace: the container's bind mount holds the file's inode, so a renamed
//      file would never reach it), with CUDA_DEVICE_MEMORY_LIMIT_<i> and CUDA_DEVICE_SM_LIMIT
//      as Allocate writes them and every other line kept; libvgpu in the running processes
//      follows it (vgpu/watch.h), new processes read it;
//   4. the status becomes `applied` (a patch carrying the pod's resourceVersion).
// A refusal restores the previous allocation and says why in the status (`refused`), in one
// patch. Every step is idempotent and the pod's annotations are the only record: a plugin that
// restarts, or a patch that fails, finds the status still `accepted` and does it again (steps 2
// and 3 then change nothing), so a resize is finished or rolled back, never left half done.
// Nothing on the node changes before the scheduler's write is stored.
//
// Thread safety: one Reconcile at a time per applier (the loop's thread).
#pragma once

#include <chrono>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/objects.h"
#include "limits/limits_file.h"

namespace hami::plugin {

// The limits file's entries with device `i`'s memory limit and the first device's SM limit set
// as Allocate sets them (with a `memory_scaling` above 1: each share's device part, and the
// host parts added up as CUDA_OVERSUBSCRIBE_HOST_LIMIT), every other entry kept (pure).
std::vector<limits::Entry> ResizedLimits(const std::vector<limits::Entry>& current,
                                         const kube::ContainerDevices& devices,
                                         double memory_scaling = 1);

struct ResizeApplierOptions {
  std::string node_name;
  std::string hook_path;
  std::chrono::milliseconds period{2000};  // how often the node's pods are listed
  double memory_scaling = 1;               // deviceMemoryScaling, as Allocate applied it
};

class ResizeApplier {
 public:
  ResizeApplier(kube::Client& client, ResizeApplierOptions options);
  ~ResizeApplier();  // Stop()

  // Brings one pod (as the API server answered it) to its accepted share, or refuses it; does
  // nothing for a pod without an accepted resize on this node. An error is an API write or
  // read that failed: the pod is left `accepted` for the next try.
  Status Reconcile(const nlohmann::json& pod);
  // Lists this node's pods and reconciles each.
  Status ReconcileAll();

  // Runs ReconcileAll every period on a thread of its own, until Stop.
  void Start();
  void Stop();

 private:
  kube::Client& client_;
  const ResizeApplierOptions options_;
  std::jthread loop_;
};

}  // namespace hami::plugin
