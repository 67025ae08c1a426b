// Fuzzes the reading of a ResourceClaim's allocation (dra/claim.h), which hami-dra-plugin takes
// from the API server for the kubelet's prepare: any bytes that parse as JSON are read against
// the claim reference default/c (uid u). Nothing crashes; a rejection has a message naming the
// claim; an accepted result has a request, a pool and a device, and no negative amount.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "dra/claim.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json claim = nlohmann::json::parse(
      std::string_view(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (claim.is_discarded()) return 0;
  const hami::dra::ClaimRef ref{"default", "u", "c"};
  auto devices = hami::dra::ParseClaimAllocation(claim, ref, hami::dra::kDriverName);
  if (!devices.ok()) {
    if (devices.error().message().find("default/c") == std::string::npos) std::abort();
    return 0;
  }
  for (const hami::dra::AllocatedDevice& d : *devices) {
    if (d.request.empty() || d.pool.empty() || d.device.empty()) std::abort();
    if (d.cores && *d.cores < 0) std::abort();
  }
  return 0;
}
