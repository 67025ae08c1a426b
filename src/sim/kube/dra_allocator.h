// The kube-scheduler stand-in's DRA allocator: structured parameters as kube-scheduler's
// dynamicresources plugin allocates them (research/dra.md §4), written from that description.
//
//   pools      from every ResourceSlice: per (driver, pool) only the highest generation; a pool
//              with fewer slices of it than resourceSliceCount is incomplete and skipped. A
//              node sees a slice with nodeName == node, allNodes, a nodeSelector that matches
//              it, or (perDeviceNodeSelection) the devices whose own fields do.
//   order      first fit: pools by driver, then pool name; slices by name; devices in slice
//              order. No scoring: the first complete solution wins.
//   search     claims in order, requests in order, then device k of `count` from the position
//              after device k-1's, backtracking on a dead end; firstAvailable tries its
//              subrequests in order; allocationMode All takes every matching device (and fails
//              when a pool is incomplete or a matching device is in use). A candidate is
//              skipped when it is exclusively in use, fails the class's or the request's
//              selectors (CEL, dra_cel.h), has a NoSchedule or NoExecute taint the request does
//              not tolerate, or fails the capacity check.
//   capacity   for each capacity c of the device: ask = the request's, else the policy's
//              default, else the whole value; validRange raises ask to min, then to the next
//              step above min; validValues to the smallest valid value >= ask. The policy is
//              violated when ask != default and (ask > max, off-step, or not a valid value).
//              The device is refused when the request names a capacity it lacks, violates a
//              policy, or aggregated + this call's + ask exceeds the value. Aggregated is the
//              sum over every allocated and in-flight claim (AllocatedState).
//   sharing    a device with allowMultipleAllocations gets a fresh shareID per result and
//              consumedCapacity for every capacity, and stays available; any other device
//              becomes exclusive.
//   result     status.allocation: devices.results[] {request, driver, pool, device, shareID?,
//              consumedCapacity?} in allocation order, devices.config[] (the class's configs
//              FromClass, then the claim's FromClaim, for the requests chosen) and nodeSelector
//              (matchFields metadata.name In [node] when a device came from a node-local slice,
//              else the slice's selector, else none).
// Not modelled: constraints (matchAttribute, distinctAttribute), adminAccess, shared counters
// (consumesCounters), binding conditions: a claim with constraints or adminAccess is refused
// with an error saying so.
//
// Thread safety: pure functions over their arguments.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/quantity.h"
#include "sim/kube/dra_cel.h"

namespace hami::sim::kube {

inline constexpr char kDraFinalizer[] = "resource.kubernetes.io/delete-protection";
inline constexpr char kPodClaimNameAnnotation[] = "resource.kubernetes.io/pod-claim-name";
inline constexpr char kExtendedResourceClaimAnnotation[] =
    "resource.kubernetes.io/extended-resource-claim";
inline constexpr char kImplicitExtendedResourcePrefix[] = "deviceclass.resource.kubernetes.io/";

// The value at `path` below `object` (null and absent alike: nullptr), and the same as a string
// ("" unless it is one); the object's metadata.<field>.
const nlohmann::json* JsonAt(const nlohmann::json& object,
                             std::initializer_list<std::string_view> path);
std::string JsonStringAt(const nlohmann::json& object,
                         std::initializer_list<std::string_view> path);
std::string MetaOf(const nlohmann::json& object, std::string_view field);

// A quantity as JSON carries it: a string ("3000Mi"), or a number as a client may send one
// (kubectl sends `cores: 30` from YAML as 30; the API server's answer would be "30"). Empty
// for anything else.
std::string QuantityText(const nlohmann::json& v);

// What a node selector is matched against.
struct NodeView {
  std::string name;
  std::map<std::string, std::string> labels;
};

// A core/v1 NodeSelector ({nodeSelectorTerms: [{matchExpressions, matchFields}]}): terms are
// ORed, requirements within a term ANDed, a term without requirements matches nothing.
// Operators In, NotIn, Exists, DoesNotExist, Gt, Lt; matchFields knows metadata.name.
bool NodeSelectorMatches(const nlohmann::json& selector, const NodeView& node);

struct DeviceId {
  std::string driver;
  std::string pool;
  std::string device;
  auto operator<=>(const DeviceId&) const = default;
  std::string ToString() const { return driver + "/" + pool + "/" + device; }
};

// A capacity's requestPolicy.
struct CapacityPolicy {
  std::optional<hami::kube::Quantity> default_value;
  std::vector<hami::kube::Quantity> valid_values;      // ascending
  std::optional<hami::kube::Quantity> min, max, step;  // validRange when min is set
  std::string Describe() const;                        // "validRange min 0, max 100, step 1"
};

struct DeviceCapacity {
  hami::kube::Quantity value;
  std::optional<CapacityPolicy> policy;
};

struct DeviceTaint {
  std::string key, value, effect;
};

// One device a node can use.
struct CandidateDevice {
  DeviceId id;
  CelDevice cel;
  std::map<std::string, DeviceCapacity> capacity;  // by the slice's capacity names
  std::vector<DeviceTaint> taints;
  bool node_local = false;       // its slice names the node (spec.nodeName)
  nlohmann::json node_selector;  // its slice's or its own selector, else null
};

struct NodeDevices {
  std::vector<CandidateDevice> devices;  // in first-fit order
  std::vector<std::string> incomplete;   // "driver/pool" of incomplete pools the node sees
  std::vector<std::string> problems;     // slices that could not be read, naming them
};

// The devices `node` can use, from every ResourceSlice (objects as the API serves them).
NodeDevices DevicesForNode(std::span<const std::shared_ptr<const nlohmann::json>> slices,
                           const NodeView& node);

struct DeviceClassInfo {
  std::string name;
  std::vector<CelProgram> selectors;
  nlohmann::json config = nlohmann::json::array();  // spec.config
  std::string extended_resource_name;
};
// Compiles every selector; an error names the class and the expression:
// "DeviceClass gpu: spec.selectors[0]: CEL expression '...': column 9: ...".
Result<DeviceClassInfo> ParseDeviceClass(const nlohmann::json& object);

struct Toleration {
  std::string key, op, value, effect;  // op Equal (default) or Exists
};

// One way to satisfy a request: `exactly`, or one firstAvailable subrequest.
struct RequestBody {
  std::string name;  // "gpu", or "gpu/small" for a subrequest
  std::string device_class;
  std::vector<CelProgram> selectors;
  bool all = false;  // allocationMode All
  int64_t count = 1;
  std::vector<Toleration> tolerations;
  std::map<std::string, hami::kube::Quantity> capacity;  // capacity.requests
};
struct ClaimRequest {
  std::string name;
  std::vector<RequestBody> alternatives;  // one for `exactly`, in order for firstAvailable
};
struct ClaimToAllocate {
  std::string key;  // "namespace/name", for messages
  std::vector<ClaimRequest> requests;
  nlohmann::json config = nlohmann::json::array();  // spec.devices.config
};
// A claim's spec.devices; refuses what the allocator does not model, naming the claim.
Result<ClaimToAllocate> ParseClaimSpec(const nlohmann::json& claim);

// The devices in use, from every allocated and in-flight claim: a result with a shareID adds its
// consumedCapacity to the device's aggregate; any other marks the device exclusive.
struct AllocatedState {
  std::set<DeviceId> exclusive;
  std::map<DeviceId, std::map<std::string, int64_t>> consumed_milli;
  void Add(const nlohmann::json& allocation);  // a claim's status.allocation
};

struct AllocationOutcome {
  bool ok = false;
  std::vector<nlohmann::json> allocations;  // one status.allocation per claim, when ok
  // When not ok: why, naming the claim, the request and what refused the devices; an
  // evaluation error of a selector is reported as it is (error = true).
  std::string reason;
  bool error = false;
};

// Allocates `claims` together on `node`. new_share_id() gives each shared result its shareID.
AllocationOutcome AllocateClaims(std::span<const ClaimToAllocate> claims,
                                 const std::map<std::string, DeviceClassInfo, std::less<>>& classes,
                                 const NodeDevices& devices, const AllocatedState& state,
                                 const NodeView& node,
                                 const std::function<std::string()>& new_share_id);

// A random (version 4) UUID.
std::string NewUuid();

}  // namespace hami::sim::kube
