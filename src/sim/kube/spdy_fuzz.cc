// Fuzzes what pods/exec reads from a kubelet and a container runtime: the first byte picks the
// parser (SPDY frames in pieces, an HTTP response head, a chunked body); the rest is the input.
// Nothing crashes; frames respect the reader's limit; a failed reader stays failed; a header
// block written is read back the same.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sim/kube/exec.h"
#include "sim/kube/spdy.h"

namespace {

namespace spdy = hami::sim::kube::spdy;

void Check(bool ok) {
  if (!ok) std::abort();
}

constexpr size_t kLimit = 1 << 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (pick % 3) {
    case 0: {
      spdy::Reader r(kLimit);
      const size_t piece = size_t(pick >> 2) + 1;
      bool failed = false;
      for (size_t at = 0; at < bytes.size() && !failed; at += piece) {
        r.Append(bytes.substr(at, piece));
        for (;;) {
          auto f = r.Next();
          if (!f.ok()) {
            Check(!r.Next().ok());
            failed = true;
            break;
          }
          if (!f->has_value()) break;
          Check((*f)->data.size() <= kLimit);
          Check((*f)->stream_id <= 0x7fffffff);
        }
      }
      break;
    }
    case 1: {
      auto head = hami::sim::kube::ParseResponseHead(bytes);
      if (head.ok()) Check(head->status >= 100 && head->status <= 999);
      break;
    }
    case 2: {
      auto body = hami::sim::kube::DecodeChunked(bytes);
      if (body.ok() && body->has_value()) Check((*body)->size() <= bytes.size());
      break;
    }
  }

  // A header block of the input's halves, written and read back.
  const spdy::Headers h = {{"streamtype", std::string(bytes.substr(0, bytes.size() / 2))},
                           {"x", std::string(bytes.substr(bytes.size() / 2))}};
  spdy::Writer w;
  spdy::Reader r(kLimit + 1024);
  r.Append(w.SynStream(1, h));
  r.Append(w.SynReply(1, h));
  for (int i = 0; i < 2; ++i) {
    auto f = r.Next();
    Check(f.ok() && f->has_value() && (*f)->headers == h);
  }
  return 0;
}
