// Arbitrary bytes as what a broker sends back: the client's read and validation
// (FinishQuery over a socket pair, then the stream's end). A PID is trusted only from a
// whole, valid frame: success means at least 12 bytes, a PID in 1..INT_MAX equal to the
// frame's, and fewer than 12 bytes always means no PID.
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "broker/client.h"
#include "broker/io.h"
#include "common/clock.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hami::broker;
  if (size > 4096) return 0;  // beyond a socket buffer's worth: nothing new to learn
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  if (size > 0) (void)WriteFull(sv[1], data, size, hami::MonotonicNs() + 1'000'000'000);
  close(sv[1]);  // the end of the stream: a short frame cannot wait for more
  PendingQuery q;
  q.fd = sv[0];
  q.deadline_ns = hami::MonotonicNs() + 1'000'000'000;
  q.result.failure = ClientFailure::kNone;
  ClientResult r = FinishQuery(&q, 0);
  if (q.fd != -1) std::abort();  // FinishQuery closed it
  if (size < kResponseSize) {
    if (r.failure != ClientFailure::kClosed || r.pid != 0) std::abort();
    return 0;
  }
  DecodedResponse d = DecodeResponse(std::span(data, kResponseSize));
  if (r.failure == ClientFailure::kNone) {
    if (d.error != FrameError::kNone || r.pid <= 0 || uint32_t(r.pid) != d.response.pid) {
      std::abort();
    }
  } else if (r.pid != 0 || d.error == FrameError::kNone) {
    std::abort();
  }
  return 0;
}
