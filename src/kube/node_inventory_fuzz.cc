// Round-trips hami.io/node-nvidia-register: whatever Decode accepts (JSON or the legacy
// records) encodes to JSON that decodes to the same devices and encodes to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kube/annotations.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view value(reinterpret_cast<const char*>(data), size);
  auto devices = hami::kube::DecodeNodeInventory(value);
  if (!devices.ok()) return 0;
  std::string encoded = hami::kube::EncodeNodeInventory(*devices);
  auto back = hami::kube::DecodeNodeInventory(encoded);
  if (!back.ok() || *back != *devices) std::abort();
  if (hami::kube::EncodeNodeInventory(*back) != encoded) std::abort();
  return 0;
}
