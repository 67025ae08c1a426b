// The extender's three verbs over the cluster view (state.h):
//
// Filter      every candidate node the pod fits (HAMi returns one; kube-scheduler then cannot
//             weigh affinity or spreading, HAMi#2264); each other node with its reason, in
//             FailedAndUnresolvableNodes when no change of usage would help (no GPUs, too
//             small, excluded type) and in FailedNodes otherwise. With single_node_filter, only
//             the best node by the node policy (HAMi's behaviour).
// Prioritize  each candidate's node-policy score, 0..10; a node that does not fit scores 0, and
//             so does one whose node lock another pod holds (its bind would wait), so that
//             kube-scheduler spreads a burst over the nodes it can bind at once. The scores a
//             filter computed for a pod (by uid) are reused while nothing a fit reads has
//             changed since (ClusterState::generation; kube-scheduler calls prioritize right
//             after filter).
// Bind        on the node kube-scheduler chose: take the node lock (waiting up to
//             node_lock_wait for another pod's bind on that node to finish), fit again against
//             the current usage, reserve the GPUs, write hami.io/vgpu-node, hami.io/vgpu-time,
//             hami.io/vgpu-devices-to-allocate and -allocated (equal at first),
//             hami.io/bind-phase: allocating and hami.io/bind-time in one patch, then post
//             pods/binding. The device plugin releases the lock after Allocate. Any failure
//             releases the lock, takes the annotations back, drops the reservation, records a
//             Warning BindingFailed event with the reason, and returns the reason in
//             ExtenderBindingResult.Error, so that kube-scheduler retries the pod.
//
// Preempt    for each node kube-scheduler offers with its candidate victims, the victims among
//             them whose removal makes the pod fit a GPU of that node (preempt.h: never one of
//             equal or higher priority, fewest, lowest priority first); a node where no subset
//             helps is left out of the answer. Pods named that this view does not hold a share
//             of on that node are ignored (the answer is from what it knows). Victims this
//             verb answered for the same pod in the last preempt_memory count as gone (the
//             view may not show their deletion yet) and are not answered again. A node whose
//             GPUs the pod fits already (so far as this view knows) is left out too: nothing
//             there needs to go for the GPUs. A pod asking for no GPU gets the victims as
//             given. NumPDBViolations is kube-scheduler's count, an upper bound for a subset.
//
// Nominations: a pod kube-scheduler nominated to a node (status.nominatedNodeName, set when it
// preempted there) and that is not bound yet has the room it needs on that node held against
// pods of lower or equal priority, in filter, prioritize, bind and preempt alike, until it
// binds, loses its nomination or is deleted (state.h, preempt.h); its own bind there counts
// only the nominees of at least its priority. A filter that fails for that reason says so.
//
// Answers: a body that is not the verb's message, or a pod whose resources or annotations do
// not parse, is a 400 naming the field; before the informers have synced every verb answers 503
// ("hami-scheduler is not ready: ..."). Decisions are answered with 200.
//
// Thread safety: the verbs may be called from any number of threads at once; binds to one node
// are serialized (in this process by a per-node gate, across processes by the node lock).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/result.h"
#include "config/device_config.h"
#include "kube/client.h"
#include "kube/event_recorder.h"
#include "kube/informer.h"
#include "kube/node_lock.h"
#include "scheduler/extender_api.h"
#include "scheduler/metrics.h"
#include "scheduler/policy.h"
#include "scheduler/state.h"

namespace hami::scheduler {

struct SchedulerOptions {
  std::string scheduler_name = "hami-scheduler";
  config::DeviceConfig device_config;
  GpuPolicy gpu_policy;  // empty sort_keys: "spread" (HAMi's default)
  NodePolicy node_policy = NodePolicy::kBinpack;
  std::chrono::seconds node_lock_timeout{300};
  // How long a bind waits for another pod's node lock before failing (kube-scheduler retries);
  // this plus a second is also the age after which a lock whose holder binds elsewhere (or no
  // longer) is broken.
  std::chrono::milliseconds node_lock_wait{10000};
  // A bind's reservation stands until the informer shows the pod's annotations, or this long.
  std::chrono::milliseconds reservation_ttl{120000};
  bool single_node_filter = false;
  // How long victims the preempt verb chose for a pod count as gone for that pod's next
  // preempt (their deletion may not have reached the view).
  std::chrono::milliseconds preempt_memory{60000};
  // Wall time for bind times and lock expiry; nullptr: the system clock. Tests move it.
  std::function<kube::WallTime()> now;
};

// An answer to an HTTP request: status and JSON body.
struct Answer {
  int status = 200;
  std::string body;
};

class Scheduler {
 public:
  // Feeds the state from `informers` (nodes; pods and resourcequotas of every namespace); the
  // caller starts the factory. `events` may be nullptr (no events). Everything passed must
  // outlive the scheduler.
  Scheduler(kube::Client& client, kube::InformerFactory& informers, kube::EventRecorder* events,
            SchedulerMetrics& metrics, SchedulerOptions options);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // True once the informers of nodes, pods and resourcequotas have synced (their first lists
  // applied to the state): the usage is the cluster's, as after any restart.
  bool Ready() const;
  bool WaitReady(std::chrono::steady_clock::time_point deadline, std::stop_token stop = {}) const;

  Answer Filter(std::string_view body);
  Answer Prioritize(std::string_view body);
  Answer Bind(std::string_view body);
  Answer Preempt(std::string_view body);

  // Holds node `node` for pod `ns/name` as a bind holds it — this process's per-node gate,
  // then the node lock (hami.io/mutex.lock) — and runs `decide` with the node's GPUs and their
  // usage as of the lock (the view once it has applied every pod change up to the lock, else
  // the pods the API lists on the node), then releases both. What a resize decides and writes
  // under, so that no bind to the node, of this scheduler or another, comes in between.
  // Errors: kUnavailable (not ready), kBusy (the node stayed held for the lock wait),
  // kNotFound (the node is not in the view), the API's, or `decide`'s own.
  Status WithNodeLocked(const std::string& node, const std::string& ns, const std::string& name,
                        const std::function<Status(const NodeGpus&)>& decide);

  ClusterState& state() { return state_; }
  const ClusterState& state() const { return state_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Prepared;  // a parsed pod and what it asks
  Result<Prepared> Prepare(const kube::Pod& pod) const;
  // Keeps the view's nominations (ClusterState::Nominate) in step with a pod's
  // status.nominatedNodeName; the pods informer's handler.
  void NotePodNomination(const nlohmann::json& pod);
  Result<std::string> BindPod(const ExtenderBindingArgs& args, BindFailure& failure);
  // Takes node `node`'s lock for pod `ns/name`, trying until `deadline`: the Node as the
  // lock's patch stored it. Errors: kBusy (held by another all along; the message says by whom),
  // kNotFound (the node is not, or no longer, in the view), or the API's.
  Result<nlohmann::json> TakeNodeLock(const std::string& node, const std::string& ns,
                                      const std::string& name,
                                      std::chrono::steady_clock::time_point deadline);
  // Whether the holder of `lock` on `node` is still binding there (see node_lock.h).
  bool HolderBinds(const kube::NodeLock& lock, const std::string& node);
  void Fail(const nlohmann::json* pod, const ExtenderBindingArgs& args, BindFailure failure,
            const std::string& reason);
  kube::WallTime Now() const;
  // The per-node gate: one bind of this process per node at a time.
  bool EnterNode(const std::string& node, std::chrono::steady_clock::time_point deadline);
  void LeaveNode(const std::string& node);
  bool Binding(const std::string& node) const;

  kube::Client& client_;
  kube::EventRecorder* events_;
  SchedulerMetrics& metrics_;
  SchedulerOptions options_;
  ClusterState state_;
  kube::NodeLocker locker_;
  std::shared_ptr<kube::Informer> nodes_;
  std::shared_ptr<kube::Informer> pods_;
  std::shared_ptr<kube::Informer> quotas_;

  // Scores of recent filters, by pod uid, with the view's generation they were computed at.
  struct Scores {
    std::string uid;
    uint64_t generation = 0;
    std::unordered_map<std::string, int64_t> by_node;
  };
  void RememberScores(Scores scores);
  std::shared_ptr<const Scores> RecallScores(std::string_view uid, uint64_t generation);
  std::mutex scores_mu_;
  std::list<std::shared_ptr<const Scores>> scores_;  // most recent first, at most 64

  // Victims answered by Preempt, by preemptor UID (most recent first, at most 16).
  struct Answered {
    std::string uid;
    std::chrono::steady_clock::time_point expires;
    std::vector<std::string> victims;  // UIDs
  };
  std::set<std::string> Departing(const std::string& uid);
  void RememberVictims(const std::string& uid, std::vector<std::string> victims);
  std::mutex answered_mu_;
  std::list<Answered> answered_;

  mutable std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  std::map<std::string, int, std::less<>> binding_;  // nodes with a bind of this process
};

}  // namespace hami::scheduler
