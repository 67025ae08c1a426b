// SPDY/3.1 framing, as Kubernetes' remotecommand protocol uses it over an upgraded HTTP/1.1
// connection (`Upgrade: SPDY/3.1`; moby/spdystream on the other end): the client side the API
// server's pods/exec speaks to the container runtime's streaming server. Pure code over bytes;
// no I/O.
//
// Frames: DATA (stream, flags, payload) and the control frames SYN_STREAM, SYN_REPLY,
// RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE, version 3. Header blocks are
// zlib streams, one per direction for the connection's life, with the SPDY/3 dictionary
// (Dictionary()); each block is a count and length-prefixed lower-case names and values.
// Reader refuses (kInvalidArgument, naming the frame) a control frame of another version, a
// frame longer than its limit, a known control frame of the wrong length, and a header block
// that does not inflate, inflates past its limit, or does not parse; a control frame of an
// unknown type is skipped, as the protocol requires. After an error the reader stays failed.
// Flow control (WINDOW_UPDATE) is read and not acted on, as spdystream does not.
//
// Thread safety: a Reader or Writer is used by one thread at a time.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace hami::sim::kube::spdy {

inline constexpr uint16_t kVersion = 3;

enum class FrameType : uint16_t {
  kData = 0,  // not a control type: a data frame
  kSynStream = 1,
  kSynReply = 2,
  kRstStream = 3,
  kSettings = 4,
  kPing = 6,
  kGoAway = 7,
  kHeaders = 8,
  kWindowUpdate = 9,
};

inline constexpr uint8_t kFlagFin = 0x01;
inline constexpr uint8_t kFlagUnidirectional = 0x02;

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Frame {
  FrameType type = FrameType::kData;
  uint8_t flags = 0;
  // DATA, SYN_STREAM, SYN_REPLY, RST_STREAM, HEADERS, WINDOW_UPDATE: the stream; GOAWAY: the
  // last stream the sender accepted.
  uint32_t stream_id = 0;
  // RST_STREAM, GOAWAY: the status code; PING: its id; WINDOW_UPDATE: the delta; SYN_STREAM:
  // the associated stream.
  uint32_t value = 0;
  std::string data;  // DATA
  Headers headers;   // SYN_STREAM, SYN_REPLY, HEADERS
};

// The SPDY/3 header compression dictionary (1423 bytes).
const std::string& Dictionary();

// Encodes frames; holds the connection's header compressor.
class Writer {
 public:
  Writer();
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  std::string SynStream(uint32_t stream_id, const Headers& headers, uint8_t flags = 0);
  std::string SynReply(uint32_t stream_id, const Headers& headers, uint8_t flags = 0);
  std::string Data(uint32_t stream_id, std::string_view data, uint8_t flags = 0);
  std::string RstStream(uint32_t stream_id, uint32_t status);
  std::string Ping(uint32_t id);
  std::string GoAway(uint32_t last_stream_id, uint32_t status = 0);

 private:
  std::string HeaderBlock(const Headers& headers);

  z_stream z_{};
  bool ok_ = false;
};

class Reader {
 public:
  // `max_frame_bytes`: the longest frame payload accepted (and the most a header block may
  // inflate to).
  explicit Reader(size_t max_frame_bytes);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  void Append(std::string_view bytes);
  // The next complete frame, nullopt when more bytes are needed, or an error.
  Result<std::optional<Frame>> Next();

 private:
  Result<std::optional<Frame>> Fail(std::string why);
  Result<Headers> Inflate(std::string_view block);

  size_t max_frame_bytes_;
  std::string buffer_;
  size_t offset_ = 0;
  z_stream z_{};
  bool z_ok_ = false;
  std::optional<Error> failed_;
};

// The header block's text (after inflating): a 32-bit count, then for each header a 32-bit
// length and the name, a 32-bit length and the value; and back. ParseHeaderBlock refuses a
// block that is cut short, has bytes after its last header, or more than 1024 headers.
std::string EncodeHeaderBlock(const Headers& headers);
Result<Headers> ParseHeaderBlock(std::string_view text);

}  // namespace hami::sim::kube::spdy
