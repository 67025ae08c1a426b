// What the API server's registry does to an object of each resource before storing it:
// decoding checks (400), name syntax and object validation (422), defaults, and which parts of
// an object a write may change (the main resource keeps the status, `/status` keeps the spec).
// Pure functions over nlohmann::json; the store calls them. Objects here are stored form:
// without `kind` and `apiVersion` (DecodeObject strips them), as the items of a list are.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "kube/resource.h"
#include "sim/kube/api_status.h"

namespace hami::sim::kube {

// The part of an object a request addresses: the object itself, `/status`, `pods/binding`, or
// `pods/log` (read only: never written).
enum class Subresource { kNone, kStatus, kBinding, kLog, kExec };

// pods, nodes, namespaces, resourcequotas, services, deployments, daemonsets and
// resourceclaims have `/status`; their main resource keeps it.
bool HasStatusSubresource(const hami::kube::Resource& r);
// events and leases: a PUT of a missing object creates it (201).
bool AllowsCreateOnUpdate(const hami::kube::Resource& r);
// The fields a field selector may name: metadata.name and metadata.namespace everywhere, and
// the API server's own extra fields per resource (pods: spec.nodeName, status.phase, ...).
const std::vector<std::string_view>& SupportedFields(const hami::kube::Resource& r);

// The decoding checks of a request body: an object whose metadata (when present) is an
// object, whose name, generateName, namespace, uid and resourceVersion are strings, labels and
// annotations maps of strings, finalizers a list of strings, spec and status objects; `kind`
// and `apiVersion`, when present, must be the resource's (400 BadRequest naming the field
// otherwise). The API's timestamps (metadata's; pod, node and namespace conditions; lease
// acquire and renew times; event times) must parse (any offset or fraction, as Python sends
// them) and are rewritten in the API server's form: "Z", seconds for Time, 6 digits for
// MicroTime. Returns the object without kind and apiVersion, metadata made present.
ApiResult<nlohmann::json> DecodeObject(const hami::kube::Resource& r, nlohmann::json object);

// The name rules: a DNS-1123 label (namespaces) or subdomain (everything else); 422.
std::optional<ApiStatus> ValidateName(const hami::kube::Resource& r, std::string_view name);

// The registry's defaulting of `object` (decoded) as a create would apply it, without the
// resets and validation: what admission webhooks see (pods: the pod spec's defaults).
void ApplyDefaults(const hami::kube::Resource& r, nlohmann::json& object);

// Create: defaults (pods: schedulerName, restartPolicy, dnsPolicy, priority, container
// defaults, ...), resets (pod status {"phase":"Pending"}, namespace phase Active, quota and
// claim status {}), then validation (pods need named containers; events an involvedObject;
// resource.k8s.io/v1 as dra_strategy.h says).
ApiResult<nlohmann::json> PrepareForCreate(const hami::kube::Resource& r, nlohmann::json object);

// Update of `old` to `next` through `sub` (metadata already reconciled by the store): the main
// resource keeps the old status (and a namespace its finalizers); `/status` keeps the old spec
// and metadata (a ResourceClaim's status is validated); pods are defaulted and validated, and
// their spec may change only where the API server allows (container images,
// activeDeadlineSeconds, added tolerations, terminationGracePeriodSeconds, removed
// schedulingGates); resource.k8s.io/v1 as dra_strategy.h says. kBinding is taken as is.
ApiResult<nlohmann::json> PrepareForUpdate(const hami::kube::Resource& r, Subresource sub,
                                           const nlohmann::json& old, nlohmann::json next);

}  // namespace hami::sim::kube
