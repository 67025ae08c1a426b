// Which pods and containers use a DRA claim's region: the claim's directory names only the
// claim (node/claim_record.h), so hami-monitor finds its users among the pods of its node (the
// pod informer it already runs; no ResourceClaim is read).
//
// A pod uses the claim `ns/name` when it is in namespace `ns`, has not ended (phase neither
// Succeeded nor Failed), and one of its pod-level claims resolves to `name`:
//   - spec.resourceClaims[] {name: P, resourceClaimName: name}, or
//   - status.resourceClaimStatuses[] {name: P, resourceClaimName: name} (a claim made from a
//     template for the pod), or
//   - status.extendedResourceClaimStatus.resourceClaimName == name (the claim the scheduler made
//     for an extended resource such as nvidia.com/gpu).
// Its containers that use it: those (initContainers, then containers, in spec order) whose
// resources.claims[] names P, and, for the extended-resource claim, those its requestMappings[]
// name. A pod that references the claim with no container using it counts once, with an empty
// container name.
//
// Users come in a stable order: pods by creationTimestamp, then name; containers in spec order.
// The first user is the one a claim's series are labelled with (docs/monitor.md).
//
// Thread safety: a pure function.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "node/claim_record.h"

namespace hami::monitor {

struct ClaimUser {
  std::string pod;
  std::string pod_uid;
  std::string container;  // empty: the pod references the claim, no container lists it
  friend bool operator==(const ClaimUser&, const ClaimUser&) = default;
};

// The users of `claim` among `pods` (pod objects as the API server serves them). Objects that
// are not pods as expected (a field of the wrong type) are skipped.
// (The informer's store hands out its objects as shared pointers to const JSON.)
std::vector<ClaimUser> ClaimUsers(const std::vector<std::shared_ptr<const nlohmann::json>>& pods,
                                  const node::ClaimRecord& claim);

}  // namespace hami::monitor
