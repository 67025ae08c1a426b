// WebSocket (RFC 6455) framing and the opening handshake's keys, for the API server's
// pods/exec: the server side toward kubectl and a client side for tests. Pure code over bytes;
// no I/O.
//
// Reader takes the bytes of one direction of a connection in any pieces and yields messages:
// data messages (text or binary) with their fragments joined, and control frames (ping, pong,
// close) as they come, also between the fragments of a data message. It enforces what the RFC
// makes a protocol error (close code 1002): reserved bits set (no extension is negotiated), an
// unknown opcode, a control frame that is fragmented or longer than 125 bytes, a continuation
// without a message or a new data frame inside one, a 64-bit length with its top bit set, a
// length not in its shortest form, a client frame that is not masked or a server frame that
// is, a close payload of one byte; and a message longer than the reader's limit is 1009. Text
// is not checked for UTF-8 (the exec protocols use binary messages). After an error the reader
// stays failed: the connection must be closed.
//
// Thread safety: a Reader is used by one thread; the functions are pure.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami::sim::kube::websocket {

enum class Opcode : uint8_t {
  kContinuation = 0x0,
  kText = 0x1,
  kBinary = 0x2,
  kClose = 0x8,
  kPing = 0x9,
  kPong = 0xA,
};

inline constexpr uint16_t kCloseNormal = 1000;
inline constexpr uint16_t kCloseGoingAway = 1001;
inline constexpr uint16_t kCloseProtocolError = 1002;
inline constexpr uint16_t kCloseTooBig = 1009;
inline constexpr uint16_t kCloseInternalError = 1011;
inline constexpr size_t kMaxControlPayload = 125;

// The Sec-WebSocket-Accept value for a Sec-WebSocket-Key: base64(SHA-1(key + the RFC's GUID)).
std::string AcceptKey(std::string_view key);

// Whether `key` is a Sec-WebSocket-Key as the RFC requires: base64 of 16 bytes.
bool ValidKey(std::string_view key);

// The comma-separated tokens of a header value (Connection, Upgrade, Sec-WebSocket-Protocol),
// trimmed of spaces and tabs, empty ones dropped, in order.
std::vector<std::string> HeaderTokens(std::string_view value);

// One frame. A client masks its frames with a key (`mask`); a server's frames carry none.
// The length takes its shortest form (7, 16 or 64 bits).
std::string EncodeFrame(Opcode opcode, std::string_view payload, bool fin = true,
                        std::optional<std::array<uint8_t, 4>> mask = std::nullopt);

// A close frame's payload: the code, big-endian, then the reason.
std::string ClosePayload(uint16_t code, std::string_view reason = {});

// Whose frames a Reader reads: a client's must be masked, a server's must not.
enum class Peer { kClient, kServer };

// A data message (kText, kBinary: fragments joined) or a control frame (kClose, kPing, kPong).
struct Message {
  Opcode opcode = Opcode::kBinary;
  std::string payload;  // unmasked
};

class Reader {
 public:
  // `max_message_bytes`: the longest data message (all fragments) accepted.
  Reader(Peer from, size_t max_message_bytes);

  void Append(std::string_view bytes);

  // The next complete message, nullopt when more bytes are needed, or a protocol error
  // (kInvalidArgument saying what is wrong; close_code() says which close code answers it).
  Result<std::optional<Message>> Next();

  uint16_t close_code() const { return close_code_; }
  // Bytes received and not yet part of a message returned (a frame in progress, fragments).
  size_t buffered() const { return buffer_.size() - offset_ + partial_.size(); }

 private:
  Result<std::optional<Message>> Fail(uint16_t code, std::string why);

  Peer from_;
  size_t max_message_bytes_;
  std::string buffer_;
  size_t offset_ = 0;
  bool in_message_ = false;  // fragments of a data message are being joined
  Opcode message_opcode_ = Opcode::kBinary;
  std::string partial_;
  std::optional<Error> failed_;
  uint16_t close_code_ = 0;
};

}  // namespace hami::sim::kube::websocket
