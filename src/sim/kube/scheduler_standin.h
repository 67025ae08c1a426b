// A kube-scheduler stand-in for tests, benchmarks and the demo: it schedules pending pods
// through scheduler extenders over HTTP the way kube-scheduler does (pkg/scheduler's
// HTTPExtender and its scheduling cycle), so that hami-scheduler's extender is exercised by the
// caller it is written for, against any API server (the simulated one in tests).
//
// What it does, for each pod without spec.nodeName whose spec.schedulerName is one of the
// configuration's profiles (or StandinOptions::scheduler_name without profiles), that is not
// being deleted, not Succeeded or Failed and has no schedulingGates:
//   1. its own filter over the nodes of its informer, in name order from a rotating start
//      (kube-scheduler's round robin), stopping after numFeasibleNodesToFind feasible nodes
//      (percentageOfNodesToScore; 0 is kube-scheduler's adaptive 50 - nodes/125 percent, at
//      least 5 percent and 100 nodes): a node fits when it is Ready, not spec.unschedulable,
//      and carries every label of the pod's spec.nodeSelector;
//   2. each extender that is interested in the pod (managedResources empty, or a container or
//      init container requests or limits one of them) and has a filterVerb: POST
//      <urlPrefix>/<filterVerb> with ExtenderArgs {"Pod", "Nodes", "NodeNames"} — NodeNames
//      when nodeCacheCapable, else a NodeList in Nodes (the other one null, as Go marshals a
//      nil pointer). The answer (ExtenderFilterResult) narrows the feasible nodes to its
//      NodeNames (nodeCacheCapable and not null) or Nodes; a name that was not offered is an
//      error; FailedAndUnresolvableNodes and FailedNodes give the reasons. A transport error,
//      a status other than 200, an undecodable body or a non-empty Error fails the attempt,
//      except for an `ignorable` extender, which is then skipped;
//   3. no feasible node: the attempt is unschedulable with kube-scheduler's message,
//      "0/N nodes are available: 1 node(s) were unschedulable, 2 <extender reason>."; one
//      feasible node: it is chosen without scoring (as kube-scheduler does);
//   4. scores: its own, least-allocated by pod count: 100 * (allocatable pods - pods on the
//      node) / allocatable pods (status.allocatable.pods, 110 when absent; pods it bound that
//      its informer has not shown yet count), plus for each interested extender with a
//      prioritizeVerb, POST <urlPrefix>/<prioritizeVerb> with the same ExtenderArgs, answered
//      by a HostPriorityList [{"Host","Score"}]: total = own + sum(Score * weight) *
//      (MaxNodeScore 100 / MaxExtenderPriority 10). A prioritize error is ignored, as
//      kube-scheduler ignores it. The highest total wins; ties are broken at random;
//   5. bind: the first interested extender with a bindVerb gets POST <urlPrefix>/<bindVerb>
//      with ExtenderBindingArgs {"PodName", "PodNamespace", "PodUID", "Node"} and answers
//      ExtenderBindingResult {"Error"}; without one the stand-in posts pods/binding itself.
//      Success records a Normal "Scheduled" event ("Successfully assigned ns/pod to node").
//   6. preemption (kube-scheduler's DefaultPreemption PostFilter), when no node is feasible and
//      the pod may preempt (spec.preemptionPolicy is not Never; it has no nominated node on
//      which a lower-priority pod is still terminating). Priorities are spec.priority (0 when
//      absent), as the API server's Priority admission writes them from the PriorityClass.
//      Candidate nodes are those an extender failed with FailedNodes (FailedAndUnresolvable
//      and the stand-in's own refusals cannot be helped by removing pods), at most
//      max(100, 10% of the nodes), in name order; a node's candidate victims are its pods of
//      lower priority. The stand-in has no resource fit of its own, so it cannot reprieve
//      victims as kube-scheduler does: every lower-priority pod is a candidate, and the
//      extenders narrow them. Each interested extender with a preemptVerb gets POST
//      <urlPrefix>/<preemptVerb> with ExtenderPreemptionArgs {"Pod", "NodeNameToVictims"
//      (full Pods), "NodeNameToMetaVictims" ({"UID"}s, with nodeCacheCapable)}, answered by
//      ExtenderPreemptionResult {"NodeNameToMetaVictims"}: nodes left out are dropped; a node
//      it names must be a candidate, each UID a pod on that node, and its victims not empty
//      (else the call fails; an ignorable extender is then skipped, any other ends the
//      preemption). Of the remaining candidates, kube-scheduler's pickOneNodeForPreemption:
//      fewest PDB violations, lowest highest victim priority, lowest sum of (priority +
//      2^31), fewest victims, then the first. On it: each victim gets the condition
//      DisruptionTarget (reason PreemptionByScheduler) and a Normal "Preempted" event
//      ("Preempted by pod <uid> on node <node>") and is deleted; pods of lower priority
//      nominated to the node lose their nomination; the pod's status.nominatedNodeName is set.
//      The attempt stays unschedulable (the pod is retried after its backoff); when nothing
//      was preempted its message ends with " preemption: " and why.
// Dynamic Resource Allocation (dra_scheduling.h, dra_allocator.h, dra_cel.h), for a pod with
// spec.resourceClaims or an extended resource that a DeviceClass maps (KEP-5004):
//   - PreFilter, before step 1: every claim exists (a template claim by the name
//     status.resourceClaimStatuses gives it, owned by the pod), none is being deleted, every
//     DeviceClass named exists and its CEL selectors are in the subset dra_cel.h evaluates;
//     otherwise the attempt is unschedulable with "0/N nodes are available: <why>." (a selector
//     outside the subset is named with its class and column); a pod waiting in its backoff is
//     tried again at once when its status.resourceClaimStatuses changes;
//   - Filter, part of step 1 for each node: allocated claims must fit the node's nodeSelector;
//     the others, and the special claim of mapped extended resources on a node whose
//     status.allocatable does not list them, are allocated together from the ResourceSlices
//     (structured parameters, consumable capacity shared across every allocated and
//     in-flight claim); a node where they do not fit fails with the allocator's reason
//     ("cannot allocate all claims: claim ns/c, request gpu: hami-gpu-0: capacity cores: 200
//     is outside its request policy (validRange min 0, max 100, step 1)");
//   - before step 5: the allocation is computed again under a lock and kept in flight
//     (Reserve), then written to each claim (finalizer, then status.allocation and
//     reservedFor through /status) and the special claim is created and recorded in the pod's
//     status.extendedResourceClaimStatus (PreBind); a failure there or in bind drops the
//     in-flight allocation and the special claim it created.
// Extenders run as above for the pods they are interested in. Beside the workers, a
// ResourceClaimController (dra_claim_controller.h) does kube-controller-manager's part: claims
// from templates for this stand-in's pods, and released, deallocated and deleted claims when
// pods go.
//
// A failed attempt records a Warning "FailedScheduling" event with the message, sets the pod's
// PodScheduled condition (status False, reason "Unschedulable" or "SchedulerError", the
// message; a strategic merge patch of pods/status, only when it changes), and retries the pod
// after podInitialBackoffSeconds doubling to podMaxBackoffSeconds per failed attempt.
//
// JSON field names are those of k8s.io/kube-scheduler/extender/v1, which has no json tags: Go
// writes the field names as they are ("NodeNames") and reads them case-insensitively, and so
// does this stand-in when it reads an answer. Every call carries Content-Type
// application/json and has httpTimeout (default 5 s) for the whole exchange; Stop() aborts the
// calls in flight.
//
// Not modelled: kube-scheduler's own resource fit (and so the reprieve of victims), affinity,
// taints and spreading, PodDisruptionBudgets (NumPDBViolations is 0), the graceful termination
// period (the API server deletes at once), trying a nominated node first, and DRA's PostFilter
// (deallocating a claim to retry elsewhere).
//
// Thread safety: the parsers and decision functions are pure. A SchedulerStandin is started
// and stopped from one thread; stats() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/client.h"

namespace hami::sim::kube {

// ---- KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) ------------------------------

struct ExtenderManagedResource {
  std::string name;
  bool ignored_by_scheduler = false;  // read; the stand-in has no resource fit to skip it in
};

// tlsConfig; the *Data fields are base64 in the file and decoded here.
struct ExtenderTlsConfig {
  bool insecure = false;
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  std::string cert_data;  // PEM
  std::string key_data;   // PEM
  std::string ca_data;    // PEM
};

// One entry of `extenders`.
struct ExtenderConfig {
  std::string url_prefix;  // required
  std::string filter_verb;
  std::string preempt_verb;
  std::string prioritize_verb;
  std::string bind_verb;
  int64_t weight = 0;  // must be positive when prioritize_verb is set
  bool enable_https = false;
  ExtenderTlsConfig tls;
  std::chrono::milliseconds http_timeout{5000};  // 0 or absent in the file: 5 s
  bool node_cache_capable = false;
  std::vector<ExtenderManagedResource> managed_resources;
  bool ignorable = false;

  // kube-scheduler's IsInterested: no managed resources, or a container or init container of
  // `pod` (the API's JSON) names one in resources.requests or resources.limits.
  bool IsInterested(const nlohmann::json& pod) const;
};

struct SchedulerConfig {
  std::string source;                        // "KubeSchedulerConfiguration /etc/x.yaml"
  std::vector<std::string> scheduler_names;  // profiles[].schedulerName, in order
  int32_t percentage_of_nodes_to_score = 0;  // 0: adaptive
  std::chrono::seconds pod_initial_backoff{1};
  std::chrono::seconds pod_max_backoff{10};
  std::vector<ExtenderConfig> extenders;
};

// Parses the configuration (YAML or JSON). apiVersion must be kubescheduler.config.k8s.io/v1 and
// kind KubeSchedulerConfiguration. Sections the stand-in does not use (leaderElection,
// clientConnection, parallelism, plugin configuration of profiles, ...) are accepted and
// ignored; an unknown top-level key, and any unknown key in an extender, its tlsConfig or a
// managed resource, is an error, as kube-scheduler decodes strictly. Validated as kube-scheduler
// validates: urlPrefix present and an http:// or https:// URL, a positive weight when
// prioritizeVerb is set, at most one extender with a bindVerb, no managed resource named twice,
// percentageOfNodesToScore 0..100, backoffs positive with initial <= max. tlsConfig.serverName
// is refused (kUnsupported: the transport cannot override the name it verifies); the *File
// fields are read when the configuration is parsed. Every error (kInvalidArgument unless said)
// names `file` and the field: "KubeSchedulerConfiguration /etc/s.yaml: extenders[0].weight:
// must be positive when prioritizeVerb is set (got 0)".
Result<SchedulerConfig> ParseSchedulerConfig(std::string_view yaml, std::string_view file);
// Reads `path` (at most 1 MiB) and parses it.
Result<SchedulerConfig> LoadSchedulerConfig(const std::string& path);

// A Go time.Duration string as metav1.Duration holds it: "5s", "1m30s", "1.5h", "300ms",
// "10us", "0"; units ns, us (µs, μs), ms, s, m, h; an optional sign. Errors name `what`.
Result<std::chrono::nanoseconds> ParseGoDuration(std::string_view text, std::string_view what);

// ---- The extender protocol (k8s.io/kube-scheduler/extender/v1) ----------------------------------

inline constexpr int64_t kMaxNodeScore = 100;        // framework.MaxNodeScore
inline constexpr int64_t kMaxExtenderPriority = 10;  // extenderv1.MaxExtenderPriority

// ExtenderArgs: {"Pod": pod, "Nodes": {"metadata":{}, "items":[...]} or null, "NodeNames":
// [...] or null}.
nlohmann::json ExtenderArgsJson(const nlohmann::json& pod,
                                std::span<const std::shared_ptr<const nlohmann::json>> nodes,
                                std::span<const std::string> node_names, bool node_cache_capable);

// ExtenderBindingArgs.
nlohmann::json ExtenderBindingArgsJson(std::string_view pod_name, std::string_view pod_namespace,
                                       std::string_view pod_uid, std::string_view node);

// ExtenderPreemptionArgs: {"Pod": pod, "NodeNameToVictims": {node: {"Pods": [pod],
// "NumPDBViolations": 0}} or null, "NodeNameToMetaVictims": {node: {"Pods": [{"UID"}],
// "NumPDBViolations": 0}} or null} (the meta form when node_cache_capable).
nlohmann::json ExtenderPreemptionArgsJson(
    const nlohmann::json& pod,
    const std::map<std::string, std::vector<std::shared_ptr<const nlohmann::json>>>& victims,
    bool node_cache_capable);

// One node of ExtenderPreemptionResult.NodeNameToMetaVictims.
struct MetaVictims {
  std::vector<std::string> uids;
  int64_t num_pdb_violations = 0;
};
// ExtenderPreemptionResult: its NodeNameToMetaVictims (absent or null: no node). A node whose
// value is null has no victims.
Result<std::map<std::string, MetaVictims>> ParseExtenderPreemptionResult(
    const nlohmann::json& body);

// ExtenderFilterResult as read: each member may be absent or null.
struct ExtenderFilterResult {
  bool has_node_names = false;  // NodeNames was a list (not absent or null)
  std::vector<std::string> node_names;
  bool has_nodes = false;                                            // Nodes was a NodeList
  std::vector<std::string> nodes;                                    // the names of Nodes.items
  std::map<std::string, std::string> failed_nodes;                   // FailedNodes
  std::map<std::string, std::string> failed_and_unresolvable_nodes;  // FailedAndUnresolvableNodes
  std::string error;                                                 // Error
};

struct HostPriority {
  std::string host;
  int64_t score = 0;
  friend bool operator==(const HostPriority&, const HostPriority&) = default;
};

// Decoders of an extender's answers. Member names match case-insensitively (an exact match
// first), as Go's encoding/json does; other members are ignored. A member of the wrong type is
// an error naming it ("FailedNodes[\"n1\"]: not a string").
Result<ExtenderFilterResult> ParseExtenderFilterResult(const nlohmann::json& body);
Result<std::vector<HostPriority>> ParseHostPriorityList(const nlohmann::json& body);  // null: []
Result<std::string> ParseExtenderBindingResultError(const nlohmann::json& body);      // "Error"

// ---- Decisions (pure) ---------------------------------------------------------------------------

// kube-scheduler's numFeasibleNodesToFind: all nodes below 100; else `percentage` (0: 50 -
// nodes/125, at least 5) percent of them, at least 100.
int32_t NumFeasibleNodesToFind(int32_t percentage, int32_t num_all_nodes);

// The stand-in's own score, 0..100: 100 * (allocatable - pods) / allocatable, clamped; an
// allocatable count <= 0 scores 0.
int64_t LeastAllocatedScore(int64_t pods_on_node, int64_t allocatable_pods);

// One extender's answer to prioritize, and its weight.
struct WeightedPriorities {
  std::vector<HostPriority> priorities;
  int64_t weight = 0;
};

// Totals for `nodes` (own_scores[i] belongs to nodes[i]): own + sum over extenders of
// score * weight, that sum scaled by kMaxNodeScore / kMaxExtenderPriority. Hosts an extender
// names that are not in `nodes` are ignored.
std::vector<int64_t> CombineScores(std::span<const std::string> nodes,
                                   std::span<const int64_t> own_scores,
                                   std::span<const WeightedPriorities> extenders);

// The index of the highest total, ties broken uniformly at random (reservoir sampling, as
// kube-scheduler's selectHost). `totals` must not be empty.
size_t SelectHost(std::span<const int64_t> totals, std::mt19937_64& rng);

// A pod's priority as kube-scheduler reads it: spec.priority, 0 when absent or not an int32.
int32_t PodPriority(const nlohmann::json& pod);

// kube-scheduler's calculateNumCandidates: 10% of the nodes, at least 100, at most all.
int32_t NumPreemptionCandidates(int32_t num_all_nodes);

// One node where preemption would make room, and what it would cost.
struct PreemptionCandidate {
  std::string node;
  std::vector<int32_t> victim_priorities;
  int64_t num_pdb_violations = 0;
};
// kube-scheduler's pickOneNodeForPreemption (the criteria above); `candidates` must not be
// empty.
size_t PickPreemptionCandidate(std::span<const PreemptionCandidate> candidates);

// kube-scheduler's FitError message: "0/<num_all_nodes> nodes are available: " followed by
// "<count> <reason>" for each distinct reason, sorted as strings, joined by ", ", and ".".
// With no node at all: "no nodes available to schedule pods".
std::string FitErrorMessage(int num_all_nodes, const std::map<std::string, std::string>& reasons);

// ---- The stand-in -------------------------------------------------------------------------------

struct StandinOptions {
  // The scheduler name served when the configuration lists no profiles.
  std::string scheduler_name = "hami-scheduler";
  int parallelism = 1;  // pods scheduled at once, each through the whole cycle, bind included
  // Overrides of the configuration's podInitialBackoffSeconds / podMaxBackoffSeconds (0: the
  // configuration's), for tests that should not wait seconds for a retry.
  std::chrono::milliseconds initial_backoff{0};
  std::chrono::milliseconds max_backoff{0};
  // A pod bound by an extender that answered success is "assumed" (not scheduled again, counted
  // on its node) until the informer shows it bound, or this long.
  std::chrono::milliseconds assume_ttl{30000};
  uint64_t seed = 0;      // tie-breaking; 0: from std::random_device
  std::string component;  // events' source; empty: the first scheduler name
};

// The outcome of one scheduling attempt, for observers (tests, benchmarks).
struct ScheduleAttempt {
  enum class Outcome { kScheduled, kUnschedulable, kError };
  std::string pod;  // "namespace/name"
  Outcome outcome = Outcome::kError;
  std::string node;     // the chosen node (kScheduled)
  std::string message;  // the event's message
  // The feasible nodes after every filter and, when scored, their totals.
  std::vector<std::string> feasible;
  std::vector<int64_t> totals;
  // Preemption (kUnschedulable): the node the pod was nominated to and the victims deleted
  // there ("namespace/name"), empty when it preempted nothing.
  std::string nominated_node;
  std::vector<std::string> victims;
};

class SchedulerStandin {
 public:
  struct Stats {
    uint64_t attempts = 0;
    uint64_t scheduled = 0;
    uint64_t unschedulable = 0;
    uint64_t errors = 0;  // SchedulerError attempts (extender failures, binding rejected)
    uint64_t filter_calls = 0;
    uint64_t prioritize_calls = 0;
    uint64_t bind_calls = 0;
    uint64_t preempt_calls = 0;
    uint64_t preemptions = 0;  // pods nominated after deleting victims
    uint64_t victims_deleted = 0;
    uint64_t extender_failures = 0;  // calls that failed, ignored ones included
  };

  // Builds the extenders' HTTP clients (reading TLS files) and the informers; nothing runs
  // before Start(). `client` must outlive the stand-in.
  static Result<std::unique_ptr<SchedulerStandin>> Create(hami::kube::Client& client,
                                                          SchedulerConfig config,
                                                          StandinOptions options = {});
  ~SchedulerStandin();  // Stop()
  SchedulerStandin(const SchedulerStandin&) = delete;
  SchedulerStandin& operator=(const SchedulerStandin&) = delete;

  // Starts the informers (nodes; pods of every namespace; resourceslices, deviceclasses and
  // resourceclaims), the resource-claim controller and the workers, which schedule once the
  // informers have synced. Called once.
  void Start();
  // Ends the workers (extender calls in flight are aborted), then the informers; idempotent.
  // Events still queued are dropped.
  void Stop();
  // Waits for the informers' first lists; false on deadline.
  bool WaitForSync(std::chrono::steady_clock::time_point deadline);

  // Called after every attempt, from the worker that made it; set before Start().
  void set_observer(std::function<void(const ScheduleAttempt&)> observer);

  Stats stats() const;
  const std::vector<std::string>& scheduler_names() const;

 private:
  struct Impl;
  explicit SchedulerStandin(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hami::sim::kube
