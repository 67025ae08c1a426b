// Fuzzes the server's per-connection decision (HandleRequestBytes) with arbitrary bytes
// arriving in arbitrary pieces, as the server reads them (never past the request).
//
// Input: byte 0 flags (bit 0: the peer's credentials are known; bit 1: the stream ends after
// the input), bytes 1-4 the peer's PID (big-endian, any int32), byte 5 the piece sizes (three
// bits per read, cycling), then the bytes the client sends.
//
// Invariants (abort on violation): nothing is answered or closed before a whole request
// unless the stream ended (then: closed, truncated, unanswered); the peer's identity is read
// only for a complete valid request, at most once; a success answer carries exactly the
// peer's PID, and only a known PID > 0; an invalid request gets exactly EncodeInvalid() and
// the outcome its error names; bytes past the request change nothing.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "broker/protocol.h"
#include "broker/server.h"

namespace {

using hami::broker::Action;
using hami::broker::Answer;
using hami::broker::Counter;
using hami::broker::PeerCredentials;
using hami::broker::StreamEnd;
namespace broker = hami::broker;

void Check(bool condition) {
  if (!condition) std::abort();
}

bool Same(const Answer& a, const Answer& b) {
  return a.action == b.action && a.frame == b.frame &&
         (a.action == Action::kReadMore || a.outcome == b.outcome);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  PeerCredentials peer;
  peer.known = (data[0] & 1) != 0;
  const bool stream_ends = (data[0] & 2) != 0;
  peer.pid = pid_t(int32_t(broker::wire::Get32(data + 1)));
  const uint8_t pieces = data[5];
  const std::span<const uint8_t> stream(data + 6, size - 6);

  std::array<uint8_t, broker::kRequestSize> buf{};
  size_t got = 0, pos = 0;
  for (int step = 0;; ++step) {
    const size_t piece = 1 + ((pieces >> ((step % 3) * 3)) & 7);
    const size_t n = std::min({piece, broker::kRequestSize - got, stream.size() - pos});
    std::copy_n(stream.data() + pos, n, buf.data() + got);
    got += n;
    pos += n;
    const bool exhausted = pos == stream.size();
    const StreamEnd end = got < broker::kRequestSize && exhausted && stream_ends ? StreamEnd::kEnded
                                                                                 : StreamEnd::kOpen;
    int calls = 0;
    auto read_peer = [&calls, &peer] {
      ++calls;
      return peer;
    };
    const Answer a =
        broker::HandleRequestBytes(std::span<const uint8_t>(buf.data(), got), end, read_peer);
    Check(calls <= 1);
    if (got < broker::kRequestSize) {
      Check(calls == 0);
      if (end == StreamEnd::kOpen) {
        Check(a.action == Action::kReadMore);
      } else {
        Check(a.action == Action::kClose && a.outcome == Counter::kTruncated);
      }
    } else {
      Check(a.action != Action::kReadMore);
      const broker::DecodedRequest d = broker::DecodeRequest(buf);
      if (d.error == broker::FrameError::kNone) {
        Check(calls == 1);
        if (peer.known && peer.pid > 0) {
          Check(a.action == Action::kAnswer && a.outcome == Counter::kOk);
          Check(a.frame == broker::EncodeSuccess(uint32_t(peer.pid)));
          const broker::DecodedResponse r = broker::DecodeResponse(a.frame);
          Check(r.error == broker::FrameError::kNone && pid_t(r.response.pid) == peer.pid);
        } else {
          Check(a.action == Action::kClose && a.outcome == Counter::kPeerCredentialFailures);
        }
      } else {
        Check(calls == 0);
        Check(a.action == Action::kAnswer && a.frame == broker::EncodeInvalid());
        const Counter expected = d.error == broker::FrameError::kBadMagic ? Counter::kBadMagic
                                 : d.error == broker::FrameError::kBadVersion
                                     ? Counter::kBadVersion
                                     : Counter::kBadCommand;
        Check(a.outcome == expected);
      }
      // Bytes past the request (which the server never reads) would change nothing.
      const Answer whole =
          broker::HandleRequestBytes(stream, StreamEnd::kOpen, [&peer] { return peer; });
      Check(Same(a, whole));
    }
    if (a.action != Action::kReadMore || exhausted) break;
  }
  return 0;
}
