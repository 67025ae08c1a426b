// Round-trips hami.io/mutex.lock: whatever Decode accepts (with or without a holder) encodes
// without error to text that decodes to the same holder and second.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/annotations.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view value(reinterpret_cast<const char*>(data), size);
  auto lock = hami::kube::DecodeNodeLock(value);
  if (!lock.ok()) return 0;
  auto encoded = hami::kube::EncodeNodeLock(*lock);
  if (!encoded.ok()) std::abort();
  auto back = hami::kube::DecodeNodeLock(*encoded);
  if (!back.ok() || back->ns != lock->ns || back->pod != lock->pod ||
      back->time != std::chrono::floor<std::chrono::seconds>(lock->time)) {
    std::abort();
  }
  return 0;
}
