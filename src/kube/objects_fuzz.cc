// Fuzzes the typed views: any JSON document goes through every parser without a crash, and a
// Lease that parses survives LeaseToJson and parsing again (times to the microsecond).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>

#include "kube/objects.h"

namespace {

std::optional<hami::kube::WallTime> Micro(const std::optional<hami::kube::WallTime>& t) {
  if (!t) return t;
  return std::chrono::floor<std::chrono::microseconds>(*t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded()) return 0;
  (void)hami::kube::ParsePod(doc);
  (void)hami::kube::ParseNode(doc);
  (void)hami::kube::ParseConfigMap(doc);
  (void)hami::kube::ParseResourceQuota(doc);
  auto lease = hami::kube::ParseLease(doc);
  if (!lease.ok()) return 0;
  auto back = hami::kube::ParseLease(hami::kube::LeaseToJson(*lease));
  if (!back.ok()) std::abort();
  if (back->holder_identity != lease->holder_identity ||
      back->lease_duration_seconds != lease->lease_duration_seconds ||
      back->lease_transitions != lease->lease_transitions ||
      back->acquire_time != Micro(lease->acquire_time) ||
      back->renew_time != Micro(lease->renew_time) || back->metadata.name != lease->metadata.name ||
      back->metadata.resource_version != lease->metadata.resource_version ||
      back->metadata.labels != lease->metadata.labels) {
    std::abort();
  }
  return 0;
}
