// The broker tier: the node's host-PID broker, over the compiled socket path only.
#include "broker/client.h"
#include "vgpu/identity.h"

namespace hami::vgpu {

TierOutcome BrokerTier(Runtime& rt) NO_THREAD_SAFETY_ANALYSIS {  // rt.identity_mu is held
  broker::ClientOptions options;  // the compiled path, root-owned, read-only mount, 500 ms
  broker::ClientResult r;
  if (rt.broker_query_started) {  // asked before cuInit: read the answer
    rt.broker_query_started = false;
    r = broker::FinishQuery(&rt.broker_query);
  } else {
    r = broker::QueryHostPid(options);
  }
  TierOutcome o;
  switch (r.failure) {
    case broker::ClientFailure::kNone:
      o.host_pid = r.pid;
      o.reason = IdentityReason::kNone;
      return o;
    case broker::ClientFailure::kMissing:
      o.reason = IdentityReason::kMissing;
      break;
    case broker::ClientFailure::kUnsafeDirectory:
    case broker::ClientFailure::kUnsafeEndpoint:
    case broker::ClientFailure::kWritableMount:
    case broker::ClientFailure::kUntrustedPeer:
      o.reason = IdentityReason::kUntrusted;
      break;
    case broker::ClientFailure::kBadReply:
    case broker::ClientFailure::kRefused:
      o.reason = IdentityReason::kBadReply;
      break;
    case broker::ClientFailure::kConnect:
    case broker::ClientFailure::kTimeout:
    case broker::ClientFailure::kClosed:
    case broker::ClientFailure::kIo:
      o.reason = IdentityReason::kUnavailable;
      break;
  }
  g_log.Log(
      LogLevel::kDebug, "host-PID broker at %s: no PID trusted (%s%s%s)", options.socket_path,
      broker::ClientFailureName(r.failure), r.frame_error != broker::FrameError::kNone ? ": " : "",
      r.frame_error != broker::FrameError::kNone ? broker::FrameErrorName(r.frame_error) : "");
  return o;
}

}  // namespace hami::vgpu
