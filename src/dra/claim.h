// A ResourceClaim as the DRA driver reads it (resource.k8s.io/v1): the kubelet names a claim by
// namespace, name and UID only; the driver reads the claim and acts on the results of its
// allocation that name its own driver (research/dra.md §5.2).
//
// ClaimSource is where claims come from: the API server (ApiClaimSource, through the project's
// kube::Client), or a fixed set (StaticClaimSource) for tests without an API server.
//
// Thread safety: ParseClaimAllocation is pure; the sources may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/client.h"
#include "kube/resource.h"

namespace hami::dra {

// The driver's name, HAMi's (so that HAMi's DeviceClasses and claims carry over).
inline constexpr char kDriverName[] = "hami-core-gpu.project-hami.io";

inline constexpr const kube::Resource& kResourceClaims = kube::kResourceClaims;

// The kubelet's Claim message.
struct ClaimRef {
  std::string ns;
  std::string uid;
  std::string name;

  friend bool operator==(const ClaimRef&, const ClaimRef&) = default;
};

// "ns/name (uid)", for messages.
std::string Describe(const ClaimRef& ref);

// One result of status.allocation.devices.results[] for this driver.
struct AllocatedDevice {
  std::string request;   // the base request name ("gpu" of "gpu/small")
  std::string pool;      // the node's name
  std::string device;    // "hami-gpu-0"
  std::string share_id;  // empty when the allocation has none
  // consumedCapacity; absent when the claim was allocated without consumable capacity.
  std::optional<uint64_t> memory_bytes;
  std::optional<int64_t> cores;

  friend bool operator==(const AllocatedDevice&, const AllocatedDevice&) = default;
};

// Checks the claim object against the kubelet's reference (metadata.uid must match: a claim
// deleted and recreated under the same name is another claim) and that it is allocated, and
// returns the results whose `driver` is `driver`, in order. Errors name the claim and the field:
//   claim default/c (uid u): status.allocation: missing (the claim is not allocated)
Result<std::vector<AllocatedDevice>> ParseClaimAllocation(const nlohmann::json& claim,
                                                          const ClaimRef& ref,
                                                          std::string_view driver);

class ClaimSource {
 public:
  virtual ~ClaimSource() = default;
  // The ResourceClaim object; kNotFound when it does not exist.
  virtual Result<nlohmann::json> Get(const ClaimRef& ref) = 0;
};

// GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>. The client must outlive
// the source.
class ApiClaimSource final : public ClaimSource {
 public:
  explicit ApiClaimSource(kube::Client& client) : client_(client) {}
  Result<nlohmann::json> Get(const ClaimRef& ref) override;

 private:
  kube::Client& client_;
};

// Claims held in memory, by namespace and name.
class StaticClaimSource final : public ClaimSource {
 public:
  void Put(nlohmann::json claim);
  void Remove(std::string_view ns, std::string_view name);
  Result<nlohmann::json> Get(const ClaimRef& ref) override;

 private:
  std::mutex mu_;
  std::map<std::string, nlohmann::json> claims_;  // "ns/name"
};

}  // namespace hami::dra
