// Resizing a running pod's GPU share in place (kube/resize.h has the annotations).
//
// DecideResize  pure: whether a container's new gpumem and/or gpucores fit on the GPUs it holds
//               now (never others: a pod is never moved) against the GPUs' current usage and,
//               for growth, the namespace's quota; the new allocation, or the reason it is
//               refused, naming the container, the GPU and the amounts.
// ResizeController  watches pods (the scheduler's pod informer); for each pod whose
//               hami.io/resize names a request its hami.io/resize-status does not answer yet, it
//               reads the pod from the API server, decides, and writes in one patch carrying
//               the pod's resourceVersion either the refusal (status only: the running share is
//               untouched) or the acceptance (hami.io/vgpu-devices-allocated and the status with
//               the previous allocation), then records an event (ResizeAccepted, Normal;
//               ResizeRefused, Warning). The node's device plugin applies an accepted share to
//               the container's limits file and region, or refuses it when the container holds
//               more than the new limit (plugin/resize.h). A write that fails is retried (a
//               409 re-reads and re-decides); nothing is applied on the node before it is
//               stored, so an API server that is away leaves the pod as it was.
//
// Thread safety: DecideResize is pure; the controller's methods may be called from any thread
// (it has one worker thread of its own).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "config/device_config.h"
#include "kube/client.h"
#include "kube/event_recorder.h"
#include "kube/informer.h"
#include "kube/objects.h"
#include "kube/resize.h"
#include "scheduler/fit.h"
#include "scheduler/quota.h"
#include "scheduler/state.h"

namespace hami::scheduler {

struct ResizeDecision {
  bool accepted = false;
  std::string reason;        // refused: why; accepted: what changes
  kube::PodDevices devices;  // accepted: the pod's new allocation
};

// `share` is what the pod holds now (its hami.io/vgpu-devices-allocated); `node` its node's
// GPUs with their usage, this pod's share included; `quota` and `ns_used` the namespace's limits
// and what its pods hold, this pod included.
ResizeDecision DecideResize(const kube::Pod& pod, const kube::ResizeRequest& request,
                            const PodShare& share, const NodeGpus& node,
                            const NamespaceQuota& quota, const QuotaAmounts& ns_used,
                            const config::DeviceConfig& config);

struct ResizeOptions {
  // How long a failed write waits before the pod is read and decided again.
  std::chrono::milliseconds retry{1000};
};

// Runs `decide` with the GPUs of node `node` as they are while it is held for pod `ns/name`
// against binds (Scheduler::WithNodeLocked); an error when it cannot be held.
using NodeLockedFn =
    std::function<Status(const std::string& node, const std::string& ns, const std::string& name,
                         const std::function<Status(const NodeGpus&)>& decide)>;

class ResizeController {
 public:
  // Adds a handler to `pods` (an informer of every namespace's pods) and starts the worker.
  // `events` may be nullptr. `synced` says whether `state` holds the cluster's usage yet (its
  // informers synced, Scheduler::Ready): until then no request is decided, only retried, so
  // that a GPU is never judged by a partial view. Everything passed must outlive the controller.
  // A request is decided and written with the pod's node held (`node_locked`), so that a
  // bind to the node never comes in between and counts a GPU's room the resize takes.
  ResizeController(kube::Client& client, kube::Informer& pods, kube::EventRecorder* events,
                   const ClusterState& state, std::function<bool()> synced,
                   NodeLockedFn node_locked, ResizeOptions options = {});
  ~ResizeController();  // stops the worker (a request in flight is finished)
  ResizeController(const ResizeController&) = delete;
  ResizeController& operator=(const ResizeController&) = delete;

  struct Stats {
    uint64_t accepted = 0;
    uint64_t refused = 0;
    uint64_t retries = 0;  // passes that failed (a write, or the node held) and are tried again
  };
  Stats stats() const;

 private:
  void Enqueue(const kube::ObjectPtr& pod);
  void Run(std::stop_token stop);
  // One pass over pod `key` ("ns/name"); false when it must be tried again later.
  bool Handle(const std::string& key);

  kube::Client& client_;
  kube::EventRecorder* events_;
  const ClusterState& state_;
  const std::function<bool()> synced_;
  const NodeLockedFn node_locked_;
  const ResizeOptions options_;

  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::string> queue_;
  std::set<std::string> queued_;
  std::map<std::chrono::steady_clock::time_point, std::set<std::string>> retry_at_;
  Stats stats_;
  std::jthread worker_;
};

}  // namespace hami::scheduler
