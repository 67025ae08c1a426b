// Fuzzes the WebSocket frame reader: the first byte picks whose frames are read (client or
// server) and how the rest is cut into pieces; the rest is the connection's bytes. Nothing
// crashes; a message is never longer than the limit; a control message is at most 125 bytes;
// a reader that failed stays failed with a close code of 1002 or 1009. A frame encoded from
// the input and read back is the same.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sim/kube/websocket.h"

namespace {

namespace ws = hami::sim::kube::websocket;

void Check(bool ok) {
  if (!ok) std::abort();
}

constexpr size_t kLimit = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  ws::Reader r((pick & 1) ? ws::Peer::kClient : ws::Peer::kServer, kLimit);
  const size_t piece = size_t(pick >> 1) + 1;
  bool failed = false;
  for (size_t at = 0; at < bytes.size() && !failed; at += piece) {
    r.Append(bytes.substr(at, piece));
    for (;;) {
      auto m = r.Next();
      if (!m.ok()) {
        Check(r.close_code() == ws::kCloseProtocolError || r.close_code() == ws::kCloseTooBig);
        Check(!r.Next().ok());
        failed = true;
        break;
      }
      if (!m->has_value()) break;
      const ws::Message& msg = **m;
      Check(msg.payload.size() <= kLimit);
      if (msg.opcode == ws::Opcode::kClose || msg.opcode == ws::Opcode::kPing ||
          msg.opcode == ws::Opcode::kPong) {
        Check(msg.payload.size() <= ws::kMaxControlPayload);
      } else {
        Check(msg.opcode == ws::Opcode::kText || msg.opcode == ws::Opcode::kBinary);
      }
    }
  }

  // Round trip: the input as one masked binary frame from a client.
  const std::array<uint8_t, 4> mask = {pick, uint8_t(pick + 1), uint8_t(pick + 2), 3};
  ws::Reader back(ws::Peer::kClient, bytes.size() + 1);
  back.Append(ws::EncodeFrame(ws::Opcode::kBinary, bytes, true, mask));
  auto m = back.Next();
  Check(m.ok() && m->has_value() && (*m)->payload == bytes);
  return 0;
}
