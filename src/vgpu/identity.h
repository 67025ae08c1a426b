// This process's host PID: the PID NVML names it by, learned once per process (again in a
// fork child) through tiers tried in order, each behind its own gate:
//
//   broker     LIBVGPU_HOSTPID_BROKER=1: the node's broker answers from SO_PEERCRED over the
//              compiled, read-only-mounted socket (broker/client.h checks it first)
//   procfs     LIBVGPU_HOST_PROCFS=<root>: NStgid of <root>/self/status, the root being a
//              procfs an administrator mounted from the host's PID namespace
//   namespace  the process runs in the initial PID namespace: its PID is the host PID
//   probe      the NVML context probe, serialized node-wide by an OFD lock that the kernel
//              releases when its holder dies, with a bounded wait
//
// HAMI_IDENTITY_TIERS chooses among them. A tier that fails records why and hands over to
// the next; when all fail the identity is recorded as failed, memory limits stay enforced,
// and the attempt is retried later with backoff (1 s doubling to 60 s). The outcome, each
// tier's reason and the duration go to the process's region slot and the region's counts,
// and to the log once.
//
// Thread safety: any thread; one attempt at a time per process (others do not wait).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "common/clock.h"
#include "region/layout.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {

using region::layout::IdentityReason;

// What one tier found: a host PID (reason kNone) or why not.
struct TierOutcome {
  pid_t host_pid = 0;
  IdentityReason reason = IdentityReason::kDisabled;
};

// The tiers (identity_*.cc). Each is called only when enabled.
TierOutcome BrokerTier(Runtime& rt);  // with rt.identity_mu held
TierOutcome ProcfsTier(const char* procfs_root);
TierOutcome NamespaceTier();
TierOutcome ProbeTier(Runtime& rt, const Config& config);

// The process's identity state (Runtime::identity_state).
enum class IdentityState : int {
  kNotStarted = 0,
  kResolved = 1,
  kAwaitingCuda = 2,  // the fast tiers failed; the probe runs once CUDA is initialized
  kRetryLater = 3,    // every tier failed; retried at Runtime::identity_retry_ns
  kOff = 4,           // HAMI_IDENTITY_TIERS=none: recorded as failed, never retried
};

// Sends the broker its request ahead of the attempt (from the cuInit hook, before the real
// cuInit), when the broker tier will run: the answer then arrives while the driver
// initializes, and the attempt reads it without waiting.
void BeginIdentity(Runtime& rt);

// Where the retry schedule reads the time: CLOCK_MONOTONIC in the library; an in-process test
// passes its own, so that it moves past a backoff without waiting it out.
using IdentityClock = int64_t (*)();

// The backoff after a failed attempt, given the one before it (0: this is the first failure):
// kFirstIdentityBackoffNs doubling to kMaxIdentityBackoffNs.
inline constexpr int64_t kFirstIdentityBackoffNs = 1'000'000'000;
inline constexpr int64_t kMaxIdentityBackoffNs = 60'000'000'000;
constexpr int64_t NextIdentityBackoffNs(int64_t previous_ns) {
  return previous_ns <= 0                           ? kFirstIdentityBackoffNs
         : previous_ns >= kMaxIdentityBackoffNs / 2 ? kMaxIdentityBackoffNs
                                                    : previous_ns * 2;
}

// An attempt, when one is due: at registration, after the real cuInit, and on retries (due
// once `now_ns()` reaches the end of the backoff that followed the latest failure, measured
// on the same clock from the end of that attempt). Requires a registered region (does nothing
// otherwise). `cuda_ready`: the real cuInit has succeeded in this process, so the probe may
// run.
void ResolveIdentity(Runtime& rt, bool cuda_ready, IdentityClock now_ns = MonotonicNs);

// Cheap unless a retry is due; call from paths that run often but are not hot (admission,
// context creation).
void RetryIdentitySlow(Runtime& rt, IdentityClock now_ns = MonotonicNs);
inline void MaybeRetryIdentity(Runtime& rt) {
  if (rt.identity_state.load(std::memory_order_relaxed) == int(IdentityState::kRetryLater)) {
    RetryIdentitySlow(rt);
  }
}

}  // namespace hami::vgpu
