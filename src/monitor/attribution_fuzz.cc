// mountinfo and cgroup text under arbitrary bytes: the parsers never crash, and what they
// return is a valid container key or pod UID.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "monitor/attribution.h"
#include "node/paths.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto key = hami::monitor::ContainerFromMountinfo(text)) {
    if (!hami::node::ValidatePathComponent("uid", key->pod_uid).ok()) __builtin_trap();
    if (!hami::node::ValidatePathComponent("container", key->container).ok()) __builtin_trap();
  }
  if (auto uid = hami::monitor::PodUidFromCgroup(text)) {
    if (!hami::node::ValidatePathComponent("uid", *uid).ok()) __builtin_trap();
    if (uid->find('_') != std::string::npos) __builtin_trap();
  }
  return 0;
}
