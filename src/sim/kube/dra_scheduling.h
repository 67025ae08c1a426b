// The kube-scheduler stand-in's DRA steps (kube-scheduler's dynamicresources plugin, research/
// dra.md §3 and §4), for pods with spec.resourceClaims or with an extended resource that a
// DeviceClass maps (KEP-5004). The allocation itself is dra_allocator.h's.
//
//   PreFilter  every claim of the pod exists: a resourceClaimName as named, a template claim by
//              the name pod.status.resourceClaimStatuses gives it, owned by the pod; none is being
//              deleted or has 256 reservations without the pod; every DeviceClass a request
//              names exists and its selectors compile. The pod's extended resources (each
//              container's resources.requests, init containers first, names sorted) that a
//              DeviceClass maps by spec.extendedResourceName (the class created last wins) or
//              by deviceclass.resource.kubernetes.io/<class> become requests
//              container-<i>-request-<j> {deviceClassName, count} of a special claim.
//   Filter     per node: an allocated claim passes when its nodeSelector is empty or matches
//              the node; the unallocated ones, with the special claim when the node's
//              status.allocatable does not list a mapped resource (or lists 0), are allocated
//              together against the devices in use: every allocated claim plus the allocations
//              reserved in flight.
//   Reserve    the allocation is computed again under one lock, so two pods in a row cannot
//              book the same capacity, and kept in flight until the claim informer shows it.
//   PreBind    per claim: the finalizer resource.kubernetes.io/delete-protection (update),
//              then status.allocation and reservedFor {resource: pods, name, uid} (update of
//              /status), each re-read and retried on a conflict; the special claim is created
//              (generateName <pod>-extended-resources-, annotation
//              resource.kubernetes.io/extended-resource-claim: "true", the pod as controller
//              owner) and allocated the same way, then pod.status.extendedResourceClaimStatus
//              {resourceClaimName, requestMappings[] {containerName, resourceName,
//              requestName}} is merge-patched.
//   Unreserve  drops the in-flight allocations and deletes a special claim it created.
//
// Thread safety: a DraScheduler is shared by the stand-in's workers; every member may be called
// from any thread. An Attempt belongs to one scheduling attempt (one thread).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "sim/kube/dra_allocator.h"

namespace hami::sim::kube {

class DraScheduler {
 public:
  // One extended resource a container asks for that a DeviceClass maps.
  struct ExtendedRequest {
    std::string container;
    std::string resource;
    std::string request;  // container-<i>-request-<j>
    std::string device_class;
    int64_t count = 0;
  };

  // What one scheduling attempt of one pod keeps between the steps.
  struct Attempt {
    bool active = false;  // the pod has claims or mapped extended resources
    std::string pod_key, pod_name, pod_namespace, pod_uid;
    std::vector<std::shared_ptr<const nlohmann::json>> allocated;  // claims already allocated
    std::vector<std::shared_ptr<const nlohmann::json>> pending;    // claims to allocate
    std::vector<ClaimToAllocate> parsed;                           // pending, parsed
    std::vector<ExtendedRequest> extended;
    std::map<std::string, DeviceClassInfo, std::less<>> classes;
    AllocatedState state;  // the devices in use when PreFilter ran, for Filter
    // Reserve's: the allocations for `pending` (then the special claim's, when needed).
    std::vector<nlohmann::json> reserved;
    bool special_needed = false;
    std::vector<ExtendedRequest> special_requests;  // those the special claim carries
    std::vector<std::string> in_flight_keys;
    std::string special_claim_name;  // created by PreBind
  };

  // `factory` gives the informers (resourceslices, deviceclasses, resourceclaims); both must
  // outlive the DraScheduler.
  DraScheduler(hami::kube::Client& client, hami::kube::InformerFactory& factory);

  // PreFilter. An error is the reason the pod is unschedulable (its message says why).
  Result<Attempt> PreFilter(const nlohmann::json& pod);
  // Filter for one node: "" when the pod's claims can be allocated there, else why not.
  std::string Filter(const Attempt& attempt, const nlohmann::json& node);
  // Reserve on `node`: "" or why the allocation no longer fits.
  std::string Reserve(Attempt& attempt, const nlohmann::json& node);
  Status PreBind(Attempt& attempt, const nlohmann::json& pod, const std::string& node);
  void Unreserve(Attempt& attempt);

  // The extended resources of `pod` that `classes` map (pure; KEP-5004's request naming).
  static std::vector<ExtendedRequest> ExtendedRequests(
      const nlohmann::json& pod,
      const std::vector<std::shared_ptr<const nlohmann::json>>& device_classes);

 private:
  AllocatedState InUse();
  // The claims to allocate on `node` (pending, plus the special claim when needed).
  std::vector<ClaimToAllocate> ClaimsFor(const Attempt& attempt, const nlohmann::json& node,
                                         bool* special) const;
  std::string Allocate(const Attempt& attempt, const nlohmann::json& node,
                       const AllocatedState& state, std::vector<nlohmann::json>* allocations,
                       bool* special);
  Result<nlohmann::json> WriteClaim(std::shared_ptr<const nlohmann::json> claim,
                                    const nlohmann::json* allocation, const Attempt& attempt);
  void ObserveClaim(const std::shared_ptr<const nlohmann::json>& claim, bool deleted);

  hami::kube::Client& client_;
  std::shared_ptr<hami::kube::Informer> slices_;
  std::shared_ptr<hami::kube::Informer> classes_;
  std::shared_ptr<hami::kube::Informer> claims_;

  std::mutex reserve_mu_;  // serializes Reserve
  std::mutex mu_;          // guards in_flight_
  // Allocations reserved and not yet seen in the informer, by claim UID (or "extended/<pod
  // UID>" before the special claim exists).
  std::map<std::string, nlohmann::json> in_flight_;
};

}  // namespace hami::sim::kube
