// The side effects around plugin/allocate.h's pure Allocate, for the gRPC service: one
// Allocate call is
//   1. read the Node (its lock hami.io/mutex.lock) and list the pods bound to it
//      (fieldSelector spec.nodeName); pick the pending pod (FindPendingPod, or the pod an
//      earlier answer for the same replicas went to);
//   2. decide (plugin::Allocate);
//   3. prepare /tmp/vgpulock (broker::PrepareLockDirectory: root-owned, 01777, no symlink)
//      unless every container is MIG; recreate each container's directory
//      <hook>/vgpu/containers/<podUID>_<container> (mode 0777, as HAMi) and write its pod
//      record (node/pod_record.h: the pod's namespace and name, for `hami top`; a failure is
//      logged, not returned); in file mode publish its limits file atomically
//      (limits::PublishLimitsFile: no partial file on failure);
//   4. patch the pod (merge patch): the new hami.io/vgpu-devices-to-allocate, and
//      hami.io/bind-phase: success when no chunk is left; then release the node lock
//      (kube::NodeLocker::Unlock; a failure to release is logged, not returned: the lock
//      expires, and the scheduler breaks a lock whose holder is no longer allocating).
// Any failure after the pod is known sets bind-phase failed, releases the lock and returns the
// error (the kubelet shows it in the pod's events). A failure before (the API server
// unreachable, no pending pod) changes nothing, so the kubelet's retry succeeds once the cause
// is gone.
//
// Retries: the allocator remembers, for the last `remembered` answers, which pod and chunk a
// request's replicas went to, so that a repeated request gets the same answer (plugin::Allocate
// answers from hami.io/vgpu-devices-allocated) even after the chunk was taken and the pod's
// bind-phase became success; across a plugin restart the pure function still answers a repeat
// it can tell apart (see allocate.h). A remembered answer is a retry only while its pod still
// waits for its containers: a pod that has ended (Succeeded, Failed) or is being deleted, or
// another pod waiting with bind-phase allocating, means the kubelet handed those replicas to
// a new container, which gets its own pod's allocation.
//
// Thread safety: Allocate and Prefer may be called from any thread; Allocate calls run one at a
// time (the node lock serializes pods anyway). The Client must outlive the Allocator, and the
// Allocator every function AllocateFunction/PreferFunction returned.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "broker/node_prep.h"
#include "common/result.h"
#include "kube/client.h"
#include "limits/limits_file.h"
#include "node/paths.h"
#include "plugin/allocate.h"
#include "plugin/config.h"
#include "plugin/types.h"

namespace hami::plugin {

struct AllocatorOptions {
  std::string hook_path = node::kDefaultHookPath;  // --hook-path
  Broker broker = Broker::kDisabled;
  // The lock directory to prepare; the response mounts <parent>/<name> at /tmp/vgpulock.
  // Tests point `parent` at a temporary directory.
  broker::NodePrepOptions lock_dir;
  std::string broker_host_dir = node::kBrokerHostDir;
  limits::PublishOptions publish;          // tests inject failures
  std::chrono::seconds lock_timeout{300};  // the node lock's timeout (kube::NodeLocker)
  size_t remembered = 256;                 // answers remembered for retries
  // One structured line per event ("plugin event=allocate pod=default/p ..."); nullptr: stderr.
  std::function<void(std::string_view line)> log;
};

class Allocator {
 public:
  Allocator(kube::Client& client, PluginConfig config, std::vector<NodeGpu> gpus,
            AllocatorOptions options = {});
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // The node's GPUs changed (health, inventory).
  void SetGpus(std::vector<NodeGpu> gpus);

  // The kubelet's Allocate: one response per request, in order.
  Result<std::vector<ContainerResponse>> Allocate(const std::vector<ContainerRequest>& requests);
  // The kubelet's GetPreferredAllocation: one answer per request. Never fails (the kubelet
  // would fail the pod's admission): without a pending pod, or when the API server cannot be
  // read, the answer is PreferredAllocation's fallback, and the reason is logged.
  Result<std::vector<std::vector<std::string>>> Prefer(
      const std::vector<PreferredRequest>& requests);

  AllocateFn AllocateFunction();
  PreferFn PreferFunction();

  struct Stats {
    uint64_t allocations = 0;  // Allocate calls answered
    uint64_t replays = 0;      // of which repeats of an earlier answer
    uint64_t failures = 0;     // Allocate calls that returned an error
  };
  Stats stats() const;

 private:
  struct Remembered {
    std::string key;  // RequestKey
    std::string pod_uid;
    int chunk = -1;
  };
  struct NodeView {
    std::string lock;  // the lock annotation, empty when absent
    bool has_lock = false;
    nlohmann::json pods;
  };

  Result<NodeView> ReadNode();
  Result<std::vector<ContainerResponse>> AllocateLocked(const std::vector<ContainerRequest>& reqs);
  Status Apply(const kube::Pod& pod, const AllocatePlan& plan);
  void MarkFailed(const kube::Pod& pod, const Error& error);
  void Log(const std::string& line) const;

  kube::Client& client_;
  const PluginConfig config_;
  const AllocatorOptions options_;
  const std::string lock_host_dir_;

  mutable std::mutex mu_;
  std::mutex allocate_mu_;  // one Allocate at a time
  std::vector<NodeGpu> gpus_;
  std::deque<Remembered> remembered_;
  Stats stats_;
};

}  // namespace hami::plugin
