// Round-trips hami.io/node-handshake: whatever Decode accepts (the canonical form or HAMi's
// older ones) encodes to the canonical form, which decodes to the same state and second.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kube/annotations.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view value(reinterpret_cast<const char*>(data), size);
  auto h = hami::kube::DecodeHandshake(value);
  if (!h.ok()) return 0;
  std::string encoded = hami::kube::EncodeHandshake(h->state, h->time);
  auto back = hami::kube::DecodeHandshake(encoded);
  if (!back.ok() || back->state != h->state ||
      back->time != std::chrono::floor<std::chrono::seconds>(h->time)) {
    std::abort();
  }
  if (hami::kube::EncodeHandshake(back->state, back->time) != encoded) std::abort();
  return 0;
}
