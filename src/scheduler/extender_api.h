// The kube-scheduler extender protocol, version v1 (k8s.io/kube-scheduler/extender/v1), as
// JSON: what kube-scheduler POSTs to the filter, prioritize and bind verbs and what they
// answer. Pure codecs; the HTTP server (server.h) and the scheduler (scheduler.h) use them.
//
//   ExtenderArgs           {"Pod": Pod, "Nodes": NodeList, "NodeNames": [string]}
//                          (NodeNames with nodeCacheCapable: true, else Nodes)
//   ExtenderFilterResult   {"Nodes": NodeList, "NodeNames": [string],
//                           "FailedNodes": {name: reason}, "FailedAndUnresolvableNodes": {...},
//                           "Error": string}
//   HostPriorityList       [{"Host": string, "Score": int64}]
//   ExtenderBindingArgs    {"PodName", "PodNamespace", "PodUID", "Node"}
//   ExtenderBindingResult  {"Error": string}
//   ExtenderPreemptionArgs {"Pod": Pod,
//                           "NodeNameToVictims": {node: {"Pods": [Pod], "NumPDBViolations": int}},
//                           "NodeNameToMetaVictims": {node: {"Pods": [{"UID": string}],
//                                                            "NumPDBViolations": int}}}
//                          (NodeNameToMetaVictims with nodeCacheCapable: true, else
//                          NodeNameToVictims; the other one null or absent)
//   ExtenderPreemptionResult {"NodeNameToMetaVictims": {node: MetaVictims}}
//
// The Go types have no json tags, so kube-scheduler writes the field names as they are and
// reads them ignoring case. Members are matched the same way here (the exact name first, else
// ignoring case); answers use the exact names. The requests' encoders and the answers' decoders
// (what a caller of an extender needs) are the kube-scheduler stand-in's
// (sim/kube/scheduler_standin.h).
// Every rejection (kInvalidArgument) names the message and the field:
//   ExtenderArgs: NodeNames[2]: expected a string
//   ExtenderArgs: pod: Pod default/x: spec.containers[0].resources.limits.nvidia.com/gpu:
//   quantity '1.5.3': more than one decimal point
// Bodies are JSON nested at most 64 levels (a Pod needs far fewer).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/objects.h"

namespace hami::scheduler {

struct ExtenderArgs {
  kube::Pod pod;
  nlohmann::json pod_object;                           // the Pod as sent
  std::optional<std::vector<std::string>> node_names;  // "NodeNames"
  std::optional<nlohmann::json> nodes;                 // "Nodes": the NodeList as sent
  // The names of `nodes`' items, in order, when nodes is set.
  std::vector<std::string> node_list_names;

  // The candidate names: node_names, else node_list_names.
  const std::vector<std::string>& Candidates() const {
    return node_names ? *node_names : node_list_names;
  }
};

struct ExtenderFilterResult {
  std::optional<std::vector<std::string>> node_names;
  std::optional<nlohmann::json> nodes;  // a NodeList
  std::map<std::string, std::string> failed_nodes;
  std::map<std::string, std::string> failed_and_unresolvable_nodes;
  std::string error;
};

struct HostPriority {
  std::string host;
  int64_t score = 0;

  friend bool operator==(const HostPriority&, const HostPriority&) = default;
};

struct ExtenderBindingArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};

// A pod kube-scheduler names as a victim: its UID, and from the full form (a Pod) also its
// namespace, name and spec.priority.
struct VictimRef {
  std::string uid;
  std::string ns;
  std::string name;
  std::optional<int32_t> priority;
};

// One node's victims, either form.
struct NodeVictims {
  std::vector<VictimRef> pods;
  int64_t num_pdb_violations = 0;
};

struct ExtenderPreemptionArgs {
  kube::Pod pod;
  // By node name, from NodeNameToMetaVictims when it is set, else from NodeNameToVictims.
  std::map<std::string, NodeVictims> victims;
};

// kube-scheduler's MaxExtenderPriority: extender scores are in 0..10.
inline constexpr int64_t kMaxExtenderPriority = 10;

Result<ExtenderArgs> ParseExtenderArgs(std::string_view body);
Result<ExtenderBindingArgs> ParseExtenderBindingArgs(std::string_view body);
// How ParseExtenderPreemptionArgs reads a body: kScanFirst tries ScanExtenderPreemptionArgs
// and reads the body as a JSON document where that does not take it; kDocumentOnly always
// reads a document. Both give the same answer (kDocumentOnly is the tests' reference).
enum class PreemptionArgsReading { kScanFirst, kDocumentOnly };

// Both maps absent or null is an empty request (no candidate node). Errors name the node and
// the position: "ExtenderPreemptionArgs: NodeNameToMetaVictims[\"n1\"].Pods[0].UID: expected a
// string".
Result<ExtenderPreemptionArgs> ParseExtenderPreemptionArgs(
    std::string_view body, PreemptionArgsReading reading = PreemptionArgsReading::kScanFirst);

// The node-cache form as kube-scheduler writes it, read without a document of the body (the
// Pod alone is parsed as one): the members Pod, NodeNameToMetaVictims and NodeNameToVictims
// (null), each once and spelt so, the victims' members (Pods, NumPDBViolations, UID) likewise,
// names and UIDs of printable ASCII without escapes, integers without fraction or exponent.
// nullopt for any other body, valid or not; where it answers, the answer is the document
// path's.
std::optional<ExtenderPreemptionArgs> ScanExtenderPreemptionArgs(std::string_view body);

std::string EncodeExtenderFilterResult(const ExtenderFilterResult& result);
std::string EncodeHostPriorityList(const std::vector<HostPriority>& list);
std::string EncodeExtenderBindingResult(std::string_view error);
// ExtenderPreemptionResult: every node with its victims' UIDs, in the given order.
std::string EncodeExtenderPreemptionResult(const std::map<std::string, NodeVictims>& victims);

}  // namespace hami::scheduler
