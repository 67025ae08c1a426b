// Round-trips the resize annotations: a request Decode accepts encodes to text that decodes to
// the same request; a status Decode accepts encodes to one that decodes the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/resize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view value(reinterpret_cast<const char*>(data), size);
  if (auto r = hami::kube::DecodeResizeRequest(value); r.ok()) {
    auto back = hami::kube::DecodeResizeRequest(hami::kube::EncodeResizeRequest(*r));
    if (!back.ok() || back->container != r->container || back->mem_mib != r->mem_mib ||
        back->cores != r->cores) {
      std::abort();
    }
  }
  if (auto s = hami::kube::DecodeResizeStatus(value); s.ok()) {
    auto back = hami::kube::DecodeResizeStatus(hami::kube::EncodeResizeStatus(*s));
    if (!back.ok() || back->request != s->request || back->phase != s->phase ||
        back->reason != s->reason || back->previous != s->previous) {
      std::abort();
    }
  }
  return 0;
}
