// The registry's rules for resource.k8s.io/v1 (DeviceClass, ResourceSlice, ResourceClaim,
// ResourceClaimTemplate), the part of them that is cheap to check (research/dra.md section 2):
// defaults of device requests, the validation of specs and of a claim's status, and the fields
// an update may not change. strategy.cc calls these for the four resources; each refusal is the
// 422 Invalid the API server gives, naming the field ("spec.driver: Required value").
//
// Objects are in stored form (no kind and apiVersion). Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "kube/resource.h"
#include "sim/kube/api_status.h"

namespace hami::sim::kube {

// One of the four resource.k8s.io/v1 resources.
bool IsDraResource(const hami::kube::Resource& r);

// Defaults: a request's `exactly` (and each `firstAvailable` subrequest) gets allocationMode
// ExactCount and, in that mode, count 1; in a claim's spec and a template's spec.spec.
void DefaultDraObject(const hami::kube::Resource& r, nlohmann::json& object);

// The validation of a create or update of the main resource:
//   DeviceClass: spec.selectors[] (<= 32) each {cel: {expression}} with an expression;
//     spec.config[] (<= 32) each {opaque: {driver, parameters}} with a driver name;
//     spec.extendedResourceName a string.
//   ResourceSlice: spec.driver (a lower-case DNS subdomain of <= 63 characters), spec.pool
//     {name, generation >= 0, resourceSliceCount > 0}, exactly one of nodeName, nodeSelector,
//     allNodes (true), perDeviceNodeSelection (true); devices or sharedCounters, not both;
//     <= 128 devices (64 when any has taints), each named by a unique DNS label, at most 32
//     attributes and capacities together, an attribute exactly one of int, bool, string,
//     version, a capacity a quantity `value` and, only on a device with
//     allowMultipleAllocations, a requestPolicy with a default when it has validValues (<= 10)
//     or validRange (with min), not both; <= 16 taints, each with a key and an effect
//     NoSchedule, NoExecute or None.
//   ResourceClaim: spec.devices.requests[] (<= 32) with unique DNS-label names, each exactly
//     one of `exactly` ({deviceClassName, allocationMode ExactCount|All, count > 0 in
//     ExactCount, capacity.requests of quantities}) and `firstAvailable` (1 to 8 subrequests
//     of the same shape, with names); the same for a template's spec.spec.
std::optional<ApiStatus> ValidateDraObject(const hami::kube::Resource& r,
                                           const nlohmann::json& object);

// What an update may not change: a slice's spec.driver and spec.nodeName; a claim's and a
// template's spec ("field is immutable").
std::optional<ApiStatus> ValidateDraUpdate(const hami::kube::Resource& r, const nlohmann::json& old,
                                           const nlohmann::json& next);

// A ResourceClaim status written through `/status`: status.allocation.devices.results[]
// (<= 32) each with request, driver, pool and device; the allocation cannot change once set
// (only be removed); status.reservedFor[] (<= 256) of {resource, name, uid} with unique uids,
// only while allocated; status.devices[] each with driver, pool and device.
std::optional<ApiStatus> ValidateClaimStatusUpdate(const nlohmann::json& old,
                                                   const nlohmann::json& next);

}  // namespace hami::sim::kube
