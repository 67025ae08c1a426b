// Round-trips the pod device lists (hami.io/vgpu-devices-to-allocate / -allocated): whatever
// Decode accepts encodes without error to text that decodes to the same containers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/annotations.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using hami::kube::kDevicesAllocatedAnnotation;
  std::string_view value(reinterpret_cast<const char*>(data), size);
  auto pod = hami::kube::DecodePodDevices(value, kDevicesAllocatedAnnotation);
  if (!pod.ok()) return 0;
  auto encoded = hami::kube::EncodePodDevices(*pod, kDevicesAllocatedAnnotation);
  if (!encoded.ok()) std::abort();
  auto back = hami::kube::DecodePodDevices(*encoded, kDevicesAllocatedAnnotation);
  if (!back.ok() || *back != *pod) std::abort();
  return 0;
}
