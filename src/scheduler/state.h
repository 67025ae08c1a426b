// The scheduler's view of the cluster, built from informers and nothing else (so a restarted
// scheduler reaches the same view from the API server alone):
//   nodes   inventory (hami.io/node-nvidia-register), pair scores, cordons, handshake, node lock,
//           allocatable GPU count;
//   pods    what every live pod holds: hami.io/vgpu-devices-allocated on hami.io/vgpu-node; a pod
//           that succeeded, failed or was deleted holds nothing;
//   quotas  the namespaces' ResourceQuotas, and what each namespace's pods hold: their
//           allocations, and for pods rewritten for DRA their hami.io/dra-request (quota.h);
//   nominees pods kube-scheduler nominated to a node after preempting there (Nominate, fed by
//           the scheduler, which decodes their requests): until a nominee holds a share, fits
//           of pods of lower or equal priority on its node count the room it needs as taken
//           (preempt.h, HoldNominated).
// Usage is kept per GPU incrementally; a GPU's usage is always the sum of the shares of the pods
// the view holds on it. Between a bind's decision and the informer showing the pod's annotations,
// the bind's reservation (Reserve) stands in for the pod's share, so two binds in flight never
// count the same free memory twice.
//
// A malformed annotation is logged and counted (stats()), and the object is taken as if it did
// not carry it: a node without a readable inventory offers no GPU; a pod whose allocation cannot
// be read holds nothing (its GPUs are not known).
//
// Thread safety: every method may be called from any thread. Inputs decode the object first and
// then take an exclusive lock held for the update only; fitting takes a shared lock, so filters
// run concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/device_config.h"
#include "kube/annotations.h"
#include "kube/informer.h"
#include "kube/objects.h"
#include "scheduler/extender_api.h"
#include "scheduler/fit.h"
#include "scheduler/preempt.h"
#include "scheduler/quota.h"

namespace hami::scheduler {

// What one pod holds on one node: its decoded hami.io/vgpu-devices-allocated.
struct PodShare {
  std::string ns;
  std::string name;
  std::string uid;
  std::string node;
  kube::PodDevices devices;    // per container, init containers first
  size_t init_containers = 0;  // how many leading entries of `devices` are init containers
  int32_t priority = 0;        // spec.priority (0 when unset); what preemption compares
  bool terminating = false;    // metadata.deletionTimestamp is set: its room is on its way out
};

// What a pod holds according to its annotations: nullopt when it has ended (Succeeded,
// Failed), carries no hami.io/vgpu-node or hami.io/vgpu-devices-allocated, or the allocation
// does not decode (then `bad` is set to the decoder's error, when given).
std::optional<PodShare> ShareOfPod(const kube::Pod& pod, std::optional<Error>* bad = nullptr);

// The per-GPU usage a share adds: for each device, one slot, the larger of the init peak and
// the containers' sum of memory and cores, and exclusive when any entry takes 100 cores.
std::vector<std::pair<std::string, DeviceUsage>> ShareUsage(const kube::PodDevices& devices,
                                                            size_t init_containers);

// Adds (`sign` +1) or takes away (-1) `usage` on the GPUs of `gpus` it names by UUID.
void AddUsage(NodeGpus& gpus, const std::vector<std::pair<std::string, DeviceUsage>>& usage,
              int sign);

class ClusterState {
 public:
  struct Stats {
    uint64_t bad_node_annotations = 0;  // inventories, scores, handshakes, locks not readable
    uint64_t bad_pod_annotations = 0;   // allocations not readable
    uint64_t bad_objects = 0;           // objects that did not parse at all
    uint64_t inventory_changes = 0;     // a node's inventory changed (or appeared)
    uint64_t device_count_changes = 0;  // a node's number of GPUs changed
  };

  // The fit of one candidate node, as FitNodes answers it.
  struct NodeFit {
    std::string name;
    bool known = false;   // the node is in the view
    bool locked = false;  // its node lock is held by another pod (not expired)
    FitResult fit;
    std::vector<std::string> held_for;  // nominated pods whose room was counted as taken
  };

  // What the handshake loop and the lock need of a node.
  struct NodeInfo {
    kube::ObjectPtr object;  // the Node as last received
    std::string resource_version;
    std::optional<kube::Handshake> handshake;  // nullopt: absent or unreadable
    std::optional<kube::NodeLock> lock;        // nullopt: absent or unreadable
    bool lock_present = false;                 // the annotation is there (readable or not)
    int64_t allocatable_gpus = 0;              // status.allocatable[resourceCountName]
    size_t devices = 0;
    uint64_t generation = 0;  // bumped on every change of the node
  };

  // One GPU and what is allocated on it, for metrics.
  struct GpuReport {
    std::string node;
    kube::NodeDevice device;
    DeviceUsage used;
  };

  ClusterState(config::DeviceConfig config, std::chrono::seconds lock_timeout);
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  // ---- Inputs (informer handlers) --------------------------------------------------------
  void UpsertNode(const kube::ObjectPtr& node);
  void RemoveNode(const kube::ObjectPtr& node);
  void UpsertPod(const kube::ObjectPtr& pod);
  void RemovePod(const kube::ObjectPtr& pod);
  void UpsertQuota(const kube::ObjectPtr& quota);
  void RemoveQuota(const kube::ObjectPtr& quota);

  // A handler set feeding this view from informers of nodes, pods and resourcequotas.
  kube::ResourceEventHandler NodeHandler();
  kube::ResourceEventHandler PodHandler();
  kube::ResourceEventHandler QuotaHandler();

  // ---- Reservations ------------------------------------------------------------------------
  // Counts `share` for pod `ns/name` (replacing what the pod held) until the informer shows the
  // pod holding it, the pod goes away, Unreserve, or `ttl` passes (expired reservations are
  // dropped by the next Reserve or Sweep).
  void Reserve(PodShare share, std::chrono::steady_clock::duration ttl);
  void Unreserve(std::string_view ns, std::string_view name);
  void Sweep();

  // ---- Nominations -------------------------------------------------------------------------
  // Pod `nominee.key` is nominated to `node` (replacing an earlier nomination of it); a nominee
  // that holds a share (reserved or allocated) is not counted again. Among the nominees of one
  // node and one priority, the first nominated is placed first, and a nominee's own fit counts
  // only those nominated before it (two preemptors of equal priority never hold room against
  // each other).
  void Nominate(std::string node, NominatedPod nominee);
  // The pod is no longer nominated (bound, nomination cleared, deleted); idempotent.
  void Unnominate(std::string_view ns, std::string_view name);
  // Pod key -> the node it is nominated to.
  std::map<std::string, std::string> Nominations() const;

  // ---- Decisions ---------------------------------------------------------------------------
  // Fits pod `ns/name` of `priority` on each of `names` against the current usage, the pod's own
  // share (a reservation or an earlier allocation) left out and the room of other pods
  // nominated there with at least its priority held (Nominate); `now` decides node-lock expiry.
  // `generation`, when given, gets the view's generation the fits were computed at.
  std::vector<NodeFit> FitNodes(std::string_view ns, std::string_view name, int32_t priority,
                                const PodRequest& request, const PodConstraints& constraints,
                                const PodPolicy& policy, const std::vector<std::string>& names,
                                kube::WallTime now, uint64_t* generation = nullptr) const;
  // Changes whenever anything a fit reads changes (a node's devices, usage, cordons, pair
  // scores, availability or node lock; shares; quotas), and only then: a node update that
  // changes only its handshake, status or other metadata leaves it as it is.
  uint64_t generation() const;

  // Fits pod `ns/name` on node `node` whose pods were just read from the API (`node_pods`: the
  // shares of the pods bound to it): the node's usage is rebuilt from them and from this view's
  // reservations on the node (a listed pod's allocation wins over its reservation), the pod
  // itself left out. What a bind decides under the node lock, so that a second scheduler's
  // binds, which its informer may not have delivered yet, are counted. Nominees are held as
  // in FitNodes.
  NodeFit FitNodeFresh(std::string_view ns, std::string_view name, int32_t priority,
                       const PodRequest& request, const PodConstraints& constraints,
                       const PodPolicy& policy, const std::string& node,
                       const std::vector<PodShare>& node_pods, kube::WallTime now) const;

  // Node `node`'s GPUs with the usage of `node_pods` (just read from the API, as for
  // FitNodeFresh), of this view's reservations on the node that the list does not show, and of
  // the pods the view holds there that it does not show either; every pod counted, none left
  // out. What a resize decides under the node lock. nullopt when the node is not in the view.
  std::optional<NodeGpus> NodeGpusFresh(const std::string& node,
                                        const std::vector<PodShare>& node_pods) const;

  // Preemption (preempt.h) of pod `ns/name` of `priority` on each node of `victims`. The pods
  // named are looked up by UID (else namespace/name); one the view does not hold a share of on
  // that node is left out of the choice (`ignored` counts them). Usage and quota are the
  // view's, the pod's own share left out and nominees held, as FitNodes has them; so are the
  // shares of `departing` (UIDs of victims already chosen for this pod, on their way out).
  struct NodePreemption {
    std::string name;
    bool known = false;             // the node is in the view
    std::vector<std::string> uids;  // the candidates the choice indexes, by UID
    size_t ignored = 0;             // pods named that are not among them
    VictimChoice choice;
  };
  std::vector<NodePreemption> ChooseVictimsOnNodes(
      std::string_view ns, std::string_view name, int32_t priority, const PodRequest& request,
      const PodConstraints& constraints, const PodPolicy& policy,
      const std::map<std::string, NodeVictims>& victims,
      const std::set<std::string>& departing = {}) const;

  // Waits until the view has applied every pod change up to resourceVersion `rv` (the largest
  // pod resourceVersion applied, read as a number, is at least `rv`); false at `deadline`. Pod
  // changes arrive in resourceVersion order, so once a pod change at or after `rv` is applied,
  // every earlier one is too. A quiet cluster may not get there soon: callers bound the wait.
  bool WaitPodsApplied(int64_t rv, std::chrono::steady_clock::time_point deadline) const;

  // Waits until `condition` holds, re-checking it at every change of the view (nodes, shares,
  // quotas); false at `deadline`. `condition` reads the view through its accessors.
  bool WaitFor(const std::function<bool()>& condition,
               std::chrono::steady_clock::time_point deadline) const;

  // Every node name in the view, sorted.
  std::vector<std::string> NodeNames() const;
  std::optional<NodeInfo> Node(std::string_view name) const;
  // Waits until node `name`'s generation differs from `generation` (or it appears or goes
  // away); false at `deadline`.
  bool WaitNodeChange(std::string_view name, uint64_t generation,
                      std::chrono::steady_clock::time_point deadline) const;

  // What pod `ns/name` holds (its reservation, else its allocation), if anything.
  std::optional<PodShare> Share(std::string_view ns, std::string_view name) const;
  // Every pod share counted, by "ns/name".
  std::map<std::string, PodShare> Shares() const;
  // Every GPU with its usage, by node then index.
  std::vector<GpuReport> Gpus() const;
  // One namespace's quota and what its pods hold.
  std::pair<NamespaceQuota, QuotaAmounts> QuotaFor(std::string_view ns) const;
  // Per namespace: its quota and what its pods hold.
  std::map<std::string, std::pair<NamespaceQuota, QuotaAmounts>> Quotas() const;

  const config::DeviceConfig& config() const { return config_; }
  Stats stats() const;

 private:
  struct Applied;
  struct NodeEntry {
    NodeGpus gpus;
    NodeInfo info;
    std::set<std::string> pods;  // keys of the shares on this node
    // The same shares, each with its UID's hash: preemption finds a victim named by UID among
    // the few shares of its node, which sit together, instead of in the index of every share.
    std::vector<std::pair<size_t, const Applied*>> shares;
  };
  struct Applied {
    PodShare share;
    std::vector<std::pair<std::string, DeviceUsage>> usage;
    QuotaAmounts amounts;
  };
  struct Reservation {
    PodShare share;
    std::chrono::steady_clock::time_point expires;
  };

  // The share a key should count (reservation, else allocation), applied if it differs.
  void Refresh(const std::string& key);
  void Apply(const std::string& key, const PodShare& share);
  void Unapply(const std::string& key);
  // Counts (or, with nullopt, stops counting) the DRA record of pod `key` in `ns`. mu_ held.
  void SetDraUsedLocked(const std::string& key, const std::string& ns,
                        const std::optional<QuotaAmounts>& amounts);
  void RecomputeNode(NodeEntry& entry);
  // The GPUs of `entry` (node `node`) with the usage FitNodeFresh and NodeGpusFresh count, pod
  // `skip_key` left out ("" for none). Needs mu_, shared.
  NodeGpus FreshGpusLocked(const NodeEntry& entry, const std::string& node,
                           const std::string& skip_key,
                           const std::vector<PodShare>& node_pods) const;
  void Touch(NodeEntry& entry);
  void SweepLocked(std::chrono::steady_clock::time_point now);
  NamespaceQuota QuotaOf(std::string_view ns) const;
  // The quota check of pod `key` in `ns` against `quota`, the pod's own share left out; `own`,
  // when given, gets that share (nullptr without one). mu_ held.
  QuotaCheck QuotaCheckLocked(std::string_view ns, const std::string& key,
                              const NamespaceQuota& quota, const Applied** own) const;
  void Notify();
  void NotePodVersion(const nlohmann::json& pod);
  // Adds to `gpus` (node `node`'s usage, as the caller computed it) the room of the nominees
  // there of at least `priority`, pod `key` and nominees holding a share left out. `entry` is
  // the node's; mu_ held. Answers the nominees held for.
  std::vector<std::string> HoldNominatedLocked(const std::string& node, const NodeEntry& entry,
                                               const std::string& key, int32_t priority,
                                               NodeGpus& gpus) const;

  const config::DeviceConfig config_;
  const std::chrono::seconds lock_timeout_;

  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, NodeEntry> nodes_;
  std::unordered_map<std::string, PodShare> allocations_;  // from the pods' annotations
  std::unordered_map<std::string, Reservation> reservations_;
  std::unordered_map<std::string, Applied> applied_;  // what usage counts now, by pod key
  std::unordered_map<std::string, const Applied*> applied_by_uid_;  // uid -> applied_ entry
  std::map<std::string, std::map<std::string, kube::ResourceQuota>> quotas_;  // ns -> name ->
  std::unordered_map<std::string, QuotaAmounts> ns_used_;
  // Pods rewritten for DRA, by key: their namespace and what their record takes (in ns_used_).
  std::unordered_map<std::string, std::pair<std::string, QuotaAmounts>> dra_used_;
  struct Nomination {
    std::string node;
    uint64_t order = 0;  // first come: ties of priority among one node's nominees
    NominatedPod pod;
  };
  std::unordered_map<std::string, Nomination> nominees_;                 // pod key ->
  std::unordered_map<std::string, std::set<std::string>> nominated_on_;  // node -> pod keys
  uint64_t nominations_ = 0;
  Stats stats_;
  uint64_t generation_ = 0;      // bumped when anything a fit reads changes
  uint64_t node_changes_ = 0;    // the source of NodeInfo::generation
  int64_t pods_applied_rv_ = 0;  // the largest pod resourceVersion applied

  mutable std::mutex change_mu_;
  mutable std::condition_variable change_cv_;
};

}  // namespace hami::scheduler
