// The node-wide lock that serializes NVML identity probes (docs/identity.md): held by one
// process of the node at a time, handed straight to a sleeping waiter when released, freed
// by the kernel when its holder dies, and waited for with a bound that a stuck holder hits
// but a long, moving queue does not.
//
// The lock file (HAMI_IDENTITY_PROBE_LOCK, under /tmp/vgpulock, shared by every container
// of the node) carries two things, both readable by any version of this library:
//   - the lock itself: an OFD write lock (common/ofd_lock.h) on byte 0. The kernel drops it
//     when the holder's descriptor is closed, however the holder ends;
//   - bytes 0-3: the holder-change counter, a native-endian uint32 that each holder
//     increments when it takes the lock and again just before it releases it. Waiters sleep
//     on it (a futex on a read-only shared mapping of the file) and the releaser wakes one
//     of them, so the next holder is woken by the release itself, not by polling. The
//     counter is read and written with pread/pwrite only: this process never loads from the
//     mapping, so another process truncating the file cannot raise SIGBUS here (the kernel
//     answers the futex call with EFAULT instead, and the waiter falls back to sleeping).
//
// A holder that dies leaves the counter as it was and wakes nobody; its lock is gone, and a
// sleeping waiter finds it free at its next recheck (`recheck_ns`, 100 ms). So does a
// waiter behind a holder of an older version of this library, which neither counts nor
// wakes.
//
// The bound: a waiter gives up when it has seen no change of holder for `stall_ns` (the
// holder is stuck), or when it has waited `bound_ns` in all however the queue moved (the
// hard bound, kProbeLockBoundFactor times the stall cap). A waiter notices changes when it
// wakes (a release's wake, or its recheck), so "no change for stall_ns" is measured to
// within `recheck_ns`.
//
// Only the calling thread is involved: no signal, no timer, no helper thread; descriptors
// are O_CLOEXEC; the mapping lives only while the lock is wanted or held. Not for use across
// fork: a child must not release a lock its parent took. No exceptions.
#pragma once

#include <cstdint>
#include <string>

#include "common/file.h"
#include "common/unique_fd.h"

namespace hami::vgpu {

inline constexpr int64_t kProbeLockRecheckNs = 100'000'000;
inline constexpr int64_t kProbeLockBoundFactor = 60;  // the hard bound, in stall caps

// Where a waiter reads the time. Null now_ns: CLOCK_MONOTONIC. Tests inject their own; the
// lock reads it exactly once per attempt (each try of the lock), after that try.
struct ProbeLockClock {
  int64_t (*now_ns)(void* arg) = nullptr;
  void* arg = nullptr;
};

struct ProbeLockOptions {
  int64_t stall_ns = 10'000'000'000;                    // no change of holder for this long
  int64_t bound_ns = kProbeLockBoundFactor * stall_ns;  // waited this long in all
  int64_t recheck_ns = kProbeLockRecheckNs;             // longest sleep between tries
  ProbeLockClock clock;

  // HAMI_IDENTITY_PROBE_WAIT_MS: the stall cap, and the hard bound at kProbeLockBoundFactor
  // times it (10 s and 10 minutes at the default).
  static ProbeLockOptions ForWaitMs(uint32_t wait_ms);
};

enum class ProbeLockOutcome : uint8_t {
  kAcquired,      // held: the probe may run
  kStalled,       // no change of holder for stall_ns: the holder is stuck
  kBoundReached,  // holders kept changing, but the wait reached bound_ns
  kUnavailable,   // the file cannot be opened or locked (see error): the probe runs unserialized
};
const char* ProbeLockOutcomeName(ProbeLockOutcome outcome);

// How one acquisition went.
struct ProbeLockReport {
  ProbeLockOutcome outcome = ProbeLockOutcome::kUnavailable;
  int64_t waited_ns = 0;        // by the options' clock, from the first try to the last
  uint32_t holder_changes = 0;  // tries that found the counter changed since the last one
  uint32_t sleeps = 0;          // sleeps between tries
  uint32_t woken = 0;           // sleeps a release ended (a wake, or the counter had moved)
  uint32_t rechecks = 0;        // sleeps that ran their full recheck or deadline
  bool doorbell = false;        // the counter could be mapped for futex waits
  std::string error;            // for kUnavailable: what failed, naming the file
};

// Owns one held lock (or none); releasing it hands it on.
class ProbeLock {
 public:
  ProbeLock() = default;
  ProbeLock(const ProbeLock&) = delete;
  ProbeLock& operator=(const ProbeLock&) = delete;
  ProbeLock(ProbeLock&& other) noexcept = default;
  ProbeLock& operator=(ProbeLock&& other) noexcept;
  ~ProbeLock() { Release(); }

  // Opens `path` (creating the file with mode 0666, and its directory with mode 01777 when
  // that alone is missing; a symlink or a non-regular file is refused) and takes the lock,
  // waiting as `options` bound. The returned lock is held exactly when report->outcome is
  // kAcquired.
  static ProbeLock Acquire(const std::string& path, const ProbeLockOptions& options,
                           ProbeLockReport* report);

  bool held() const { return fd_.valid(); }

  // Counts the change of holder, unlocks, wakes one waiter, closes. Idempotent.
  void Release();

 private:
  UniqueFd fd_;      // valid only while held
  MappedFile word_;  // the counter, read-only, for futex calls only (may be unmapped)
};

}  // namespace hami::vgpu
