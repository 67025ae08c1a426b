// Allocate and GetPreferredAllocation as pure functions (seed 004's bind flow, seeds 000 and
// 003's response): from the pod the scheduler bound, the kubelet's request, the plugin's
// configuration and the node's GPUs to the container responses, the limits files to publish
// and the pod's annotation patch. No I/O: allocator.h does the API calls and the files.
//
// The flow, as HAMi's plugin does it:
//   1. FindPendingPod: the pod named by the node lock hami.io/mutex.lock, else the pods on the
//      node with hami.io/bind-time, hami.io/bind-phase allocating or success and
//      hami.io/vgpu-node = this node.
//   2. Allocate: hami.io/vgpu-devices-to-allocate holds one chunk per container (init
//      containers first, then containers, as the scheduler wrote it); each container request
//      of the kubelet takes the first non-empty chunk, whose device count must equal the
//      kubelet's ("device number not matched"), and the chunk's position names the container
//      (position i < init containers: init container i; else container i - inits).
//   3. The response of a container (hami-core mode):
//        env     CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m per device (in the kubelet's device order),
//                CUDA_DEVICE_SM_LIMIT=<cores of the first device>,
//                CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache,
//                NVIDIA_VISIBLE_DEVICES=<GPU UUIDs, comma-separated>,
//                with deviceMemoryScaling > 1 the memory limits are the device part of each
//                share (SplitScaledShare) and CUDA_OVERSUBSCRIBE=true with
//                CUDA_OVERSUBSCRIBE_HOST_LIMIT=<the host parts added up>,
//                LIBCUDA_LOG_LEVEL when libCudaLogLevel is not libvgpu's default 2,
//                GPU_CORE_UTILIZATION_POLICY=disable when disableCoreLimit, else the
//                container spec's value, else gpuCorePolicy when it is not `default`,
//                CUDA_TASK_PRIORITY from the container spec (the webhook sets it),
//                LIBVGPU_HOSTPID_BROKER=1 when the broker is enabled (never set otherwise);
//        mounts  in this order:
//                <hook>/vgpu/containers/<podUID>_<container>  -> /usr/local/vgpu        rw
//                <hook>/vgpu/libvgpu.so              -> /usr/local/vgpu/libvgpu.so       ro
//                /tmp/vgpulock                       -> /tmp/vgpulock                   rw
//                /var/run/hami/hostpid               -> /tmp/vgpulock/hostpid  ro (broker on)
//                <hook>/vgpu/ld.so.preload           -> /etc/ld.so.preload     ro (unless the
//                                                  container's env has CUDA_DISABLE_CONTROL=true)
//                <hook>/vgpu/containers/<podUID>_<container>.limits -> /overrideEnv  ro (file)
//        (a parent is always listed before a mount nested in it);
//        limits  file mode: the variables libvgpu.so reads (all of the env above but
//                NVIDIA_VISIBLE_DEVICES), sorted, HAMI_LIMITS_FORMAT=1 (limits_file.h adds it).
//      Env mode: the same variables, no file, no /overrideEnv mount. MIG mode:
//      NVIDIA_VISIBLE_DEVICES only: no variables, no file, no mounts.
//   4. The pod's new hami.io/vgpu-devices-to-allocate (the chunks taken emptied); when no
//      non-empty chunk is left, bind-phase success and the node lock released.
//
// Retries: a kubelet may call Allocate again for a container it already got an answer for
// (the answer was lost). Its chunk is then empty; the function answers again from
// hami.io/vgpu-devices-allocated (which keeps every chunk) when it can tell which container it
// is: by `known_chunks` (what the allocator remembers of earlier answers), else by the one
// emptied chunk whose GPUs are those of the kubelet's replicas. The second answer equals the
// first.
//
// Replica IDs: the kubelet names replicas "<GPU-UUID>-<i>". The answer follows the kubelet's
// order: each replica takes the chunk's device on its GPU; where the kubelet chose a GPU the
// chunk does not hold (it ignored GetPreferredAllocation), the scheduler's device stays (the
// scheduler's accounting decides which GPU a container gets) and a warning says so.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/annotations.h"
#include "kube/objects.h"
#include "limits/limits_file.h"
#include "limits/vocabulary.h"
#include "node/paths.h"
#include "plugin/config.h"
#include "plugin/container_state.h"
#include "plugin/types.h"

namespace hami::plugin {

// The error when no pod is waiting for devices on the node (HAMi's exact text).
std::string NoBindingPodMessage(std::string_view node_name);  // "no binding pod found on node n1"

// A GPU of this node, as Allocate needs it.
struct NodeGpu {
  std::string uuid;
  int index = -1;
  bool healthy = true;
};

// ---- 1. the pending pod ---------------------------------------------------------------------

// `pods`: a PodList (an object with "items") or an array of Pod objects, the pods bound to
// `node_name`. `node_lock`: the Node's hami.io/mutex.lock value, nullptr when absent.
// Candidates are the listed pods that are Pending (or have no phase yet), carry
// hami.io/bind-time, have hami.io/bind-phase allocating or success and hami.io/vgpu-node =
// `node_name`. The lock's pod wins when it is a candidate; otherwise (no lock, a lock of a pod
// not listed or not a candidate, an unreadable lock, a lock of unknown holder) allocating
// candidates come before success ones, then the oldest bind-time first (one that does not
// parse sorts last), then namespace/name. A pod that does not parse is skipped. None:
// kNotFound with NoBindingPodMessage's text.
Result<kube::Pod> FindPendingPod(std::string_view node_name, const std::string* node_lock,
                                 const nlohmann::json& pods);

// ---- 2. mounts: NormalizePath, ReconcileLockMounts (plugin/container_state.h) ---------------

// ---- 3. Allocate ------------------------------------------------------------------------------

// SplitScaledShare: plugin/container_state.h.

struct AllocateInput {
  const kube::Pod* pod = nullptr;  // from FindPendingPod
  std::span<const ContainerRequest> requests;
  const PluginConfig* config = nullptr;
  std::span<const NodeGpu> gpus;  // this node's GPUs (filterdevices already applied or not)
  std::string hook_path = node::kDefaultHookPath;
  Broker broker = Broker::kDisabled;
  std::string lock_host_dir = node::kLockDir;
  std::string broker_host_dir = node::kBrokerHostDir;
  // RequestKey -> chunk position, from answers given before (the allocator's memory).
  const std::map<std::string, int>* known_chunks = nullptr;
};

struct ContainerPlan {
  int chunk = -1;                  // position in hami.io/vgpu-devices-to-allocate
  std::string container;           // the container's name
  std::string request_key;         // RequestKey of the kubelet's request
  bool replay = false;             // answered before; no annotation change
  kube::ContainerDevices devices;  // in the kubelet's order
  ContainerResponse response;
  std::string container_dir;          // host directory to recreate; empty in MIG mode
  std::string limits_path;            // host limits file to publish; empty unless file mode
  std::vector<limits::Entry> limits;  // its entries (without HAMI_LIMITS_FORMAT)
};

struct AllocatePlan {
  LimitDelivery delivery = LimitDelivery::kFile;
  std::vector<ContainerPlan> containers;  // one per request, in order
  std::string devices_to_allocate;        // the annotation's new value
  bool annotation_changed = false;        // whether it differs from the pod's
  bool complete = false;                  // no chunk left: bind-phase success, release the lock
  std::vector<std::string> warnings;      // for the log
};

// The kubelet's replica IDs, sorted and comma-separated: what identifies one container's
// request (the kubelet never hands a replica to two containers at once).
std::string RequestKey(const ContainerRequest& request);

// The GPU UUID of replica `id`: the listed GPU whose UUID followed by "-<digits>" is `id`;
// else `id` itself (a whole GPU or a MIG device).
std::string PhysicalUuid(std::string_view id, std::span<const NodeGpu> gpus);

// Every error names what was wrong; those about the pod's annotations name the annotation:
//   pod default/p: hami.io/vgpu-devices-to-allocate: missing
//   pod default/p: container request 0: device number not matched: the kubelet allocated 2
//     devices, hami.io/vgpu-devices-to-allocate has 1 for container main
Result<AllocatePlan> Allocate(const AllocateInput& input);

// ---- 4. GetPreferredAllocation ----------------------------------------------------------------

// One answer per request: request i takes the i-th non-empty chunk of `pending` (the pod's
// hami.io/vgpu-devices-to-allocate): its must-include replicas, then for each of the chunk's
// first allocation_size devices not covered by them, the first available replica of that
// device's GPU. When that is impossible (no pending pod, fewer chunks or devices than asked,
// no replica of a chosen GPU available), the answer is the must-include replicas followed by
// the first available ones, and a warning says why.
struct PreferredPlan {
  std::vector<std::vector<std::string>> answers;
  std::vector<std::string> warnings;
};
PreferredPlan PreferredAllocation(const kube::PodDevices* pending,
                                  std::span<const PreferredRequest> requests,
                                  std::span<const NodeGpu> gpus);

}  // namespace hami::plugin
