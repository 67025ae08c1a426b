// Fuzzes ParseQuantity: it never crashes, and an accepted quantity's canonical form parses back
// to an equal quantity with the same canonical form.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kube/quantity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto q = hami::kube::ParseQuantity(text, "fuzz");
  if (!q.ok()) {
    if (q.error().message().empty()) std::abort();
    return 0;
  }
  std::string canonical = q->ToString();
  auto back = hami::kube::ParseQuantity(canonical, "fuzz");
  if (!back.ok() || *back != *q || back->ToString() != canonical) std::abort();
  int64_t value = q->Value();
  if ((value > 0) != (q->Sign() > 0) || (value < 0) != (q->Sign() < 0)) std::abort();
  (void)q->MilliValue();
  return 0;
}
