// Round-trips hami.io/bind-phase and the Unix-seconds annotations (hami.io/bind-time,
// hami.io/vgpu-time): an accepted phase encodes to its own text; accepted seconds encode to
// the same digits without leading zeros.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kube/annotations.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view value(reinterpret_cast<const char*>(data), size);
  auto phase = hami::kube::DecodeBindPhase(value);
  if (phase.ok() && hami::kube::EncodeBindPhase(*phase) != value) std::abort();
  auto t = hami::kube::DecodeUnixSeconds(value, hami::kube::kBindTimeAnnotation);
  if (!t.ok()) return 0;
  std::string encoded = hami::kube::EncodeUnixSeconds(*t);
  size_t first = value.find_first_not_of('0');
  std::string_view digits = first == std::string_view::npos ? "0" : value.substr(first);
  if (encoded != digits) std::abort();
  auto back = hami::kube::DecodeUnixSeconds(encoded, hami::kube::kBindTimeAnnotation);
  if (!back.ok() || *back != *t) std::abort();
  return 0;
}
