// Typed views of the API objects the control plane reads, parsed from the JSON the API sends
// (nlohmann::json, as kube/client.h returns it). Only the fields hami-cpp uses are kept; the
// rest of the object is ignored.
//
// Parsing rules, the same for every object:
//   - a missing field, or one that is JSON null, is not an error: it takes its zero value
//     (empty string, empty map, 0, std::nullopt);
//   - a field of the wrong JSON type is an error (kInvalidArgument), and so is a quantity or
//     timestamp that does not parse, or a `kind` other than the one expected (an absent kind
//     is fine: list items have none);
//   - the message names the object and the field path:
//       Pod default/x: spec.containers[1].resources.limits.nvidia.com/gpumem: quantity
//       '1.5.3': more than one decimal point
//     (a cluster-scoped object is "Node node-1"; one without a name is "Pod (no name)").
//   - resource quantities may be JSON strings (what the API sends) or JSON numbers (what a
//     client may send before the server normalizes them); a number is read by its text.
//
// Thread safety: the parse and to-JSON functions are pure and re-entrant.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/quantity.h"
#include "kube/resource.h"
#include "kube/time.h"

namespace hami::kube {

using StringMap = std::map<std::string, std::string, std::less<>>;
// Resource name ("nvidia.com/gpumem", "cpu") to quantity.
using QuantityMap = std::map<std::string, Quantity, std::less<>>;

struct OwnerReference {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string uid;
  bool controller = false;
};

struct ObjectMeta {
  std::string name;
  std::string ns;  // metadata.namespace; empty for cluster-scoped objects
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  StringMap labels;
  StringMap annotations;
  std::vector<OwnerReference> owner_references;
  std::optional<WallTime> creation_timestamp;
  std::optional<WallTime> deletion_timestamp;

  // The annotation's value, or nullptr when absent.
  const std::string* Annotation(std::string_view key) const;
  // The label's value, or nullptr when absent.
  const std::string* Label(std::string_view key) const;
};

struct EnvVar {
  std::string name;
  std::string value;  // empty when the variable comes from valueFrom
};

struct Container {
  std::string name;
  std::string image;
  QuantityMap limits;    // resources.limits
  QuantityMap requests;  // resources.requests
  std::vector<EnvVar> env;
};

enum class PodPhase { kUnset, kPending, kRunning, kSucceeded, kFailed, kUnknown };

struct Pod {
  ObjectMeta metadata;
  std::vector<Container> init_containers;  // spec.initContainers
  std::vector<Container> containers;       // spec.containers
  std::string node_name;                   // spec.nodeName; empty while unbound
  std::string scheduler_name;              // spec.schedulerName
  std::optional<int32_t> priority;         // spec.priority
  PodPhase phase = PodPhase::kUnset;       // status.phase

  // Succeeded or Failed: the pod's containers will not run again and its devices are free.
  bool IsTerminated() const { return phase == PodPhase::kSucceeded || phase == PodPhase::kFailed; }
};

// The status of a node condition ("True", "False", "Unknown"), or kAbsent without one.
enum class ConditionStatus { kAbsent, kTrue, kFalse, kUnknown };

struct Node {
  ObjectMeta metadata;
  bool unschedulable = false;                        // spec.unschedulable
  QuantityMap capacity;                              // status.capacity
  QuantityMap allocatable;                           // status.allocatable
  ConditionStatus ready = ConditionStatus::kAbsent;  // status.conditions[type=Ready].status
};

// coordination.k8s.io/v1 Lease, as leader election reads and writes it.
struct Lease {
  ObjectMeta metadata;
  std::string holder_identity;                    // spec.holderIdentity
  std::optional<int32_t> lease_duration_seconds;  // spec.leaseDurationSeconds
  std::optional<WallTime> acquire_time;           // spec.acquireTime (MicroTime)
  std::optional<WallTime> renew_time;             // spec.renewTime (MicroTime)
  std::optional<int32_t> lease_transitions;       // spec.leaseTransitions
};

struct ConfigMap {
  ObjectMeta metadata;
  StringMap data;  // binaryData is not read
};

struct ResourceQuota {
  ObjectMeta metadata;
  QuantityMap spec_hard;    // spec.hard
  QuantityMap status_hard;  // status.hard
  QuantityMap status_used;  // status.used
};

// What an Event's involvedObject (and other references) names.
struct ObjectReference {
  std::string api_version;
  std::string kind;
  std::string ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string field_path;  // e.g. "spec.containers{main}"; usually empty
};

std::string_view PodPhaseName(PodPhase phase);  // "Running"; "" for kUnset

// metadata.<field> of an API object when it is a string, else "" (also when the object or its
// metadata is not a JSON object): for naming and keying objects without parsing them. The view
// points into `object`.
std::string_view MetadataString(const nlohmann::json& object, std::string_view field);

// `object` is the metadata's owner ("metadata" is read from it); `kind` names it in errors.
Result<ObjectMeta> ParseObjectMeta(const nlohmann::json& object, std::string_view kind);
Result<Pod> ParsePod(const nlohmann::json& object);
Result<Node> ParseNode(const nlohmann::json& object);
Result<Lease> ParseLease(const nlohmann::json& object);
Result<ConfigMap> ParseConfigMap(const nlohmann::json& object);
Result<ResourceQuota> ParseResourceQuota(const nlohmann::json& object);

// A whole Lease object (apiVersion, kind, metadata, spec) for create or update: metadata
// carries name, namespace, and resourceVersion, uid, labels and annotations when not empty;
// spec carries the fields that are set, times as MicroTime ("2024-05-20T10:02:07.250001Z").
//
// Built on `base`, the object as the API last returned it, so that an update keeps what this
// view does not model (ownerReferences, finalizers, managedFields, spec fields of later API
// versions, ...): the fields above replace base's, and those the view leaves empty or unset
// are removed from it. A `base` that is not an object counts as empty, and so does its metadata
// or spec when not an object. With an empty base (a create) the result holds the view alone;
// LeaseToJson(*ParseLease(o), o) == o for an object `o` whose times are MicroTime.
nlohmann::json LeaseToJson(const Lease& lease, nlohmann::json base);
// The same on an empty base (a create).
nlohmann::json LeaseToJson(const Lease& lease);

// A reference to the object with this metadata.
ObjectReference ReferenceTo(std::string_view api_version, std::string_view kind,
                            const ObjectMeta& meta);
// A reference to an object as the API returns it: apiVersion and kind from the object, or from
// `resource` when the object lacks them (list items do); namespace, name, uid and
// resourceVersion from its metadata. Never fails: a field that is absent or not a string is left
// empty (a reference names what it can), and field_path is empty.
ObjectReference ReferenceToObject(const Resource& resource, const nlohmann::json& object);
// {"apiVersion", "kind", "namespace", "name", "uid", "resourceVersion", "fieldPath"}, each
// only when not empty.
nlohmann::json ObjectReferenceToJson(const ObjectReference& ref);

}  // namespace hami::kube
