// What hami_bench_init and its burst worker (init_bench_worker) share: the record each worker
// fills in the results area (burst_results.h). A worker that learns a wrong host PID never
// reads as a success either. In the handoff mode (the probe's baseline) the worker also runs
// the serialized part of the probe's work itself after cuInit (a primary-context retain and
// release), under a process-shared semaphore passed from worker to worker.
//
// Times are CLOCK_MONOTONIC nanoseconds (comparable across processes); 0 = not reached.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "burst_results.h"

namespace hami::bench {

inline constexpr uint64_t kInitResultsMagic = 0x48494e4954524531ull;  // "HINITRE1"
inline constexpr uint32_t kInitResultsVersion = 3;

// Which step a failed worker stopped at (InitWorkerRecord::failed_step).
enum class InitStep : uint32_t {
  kNone = 0,  // it never said (it died, or never reached its record)
  kBarrier = 1,
  kCuInit = 2,      // cuInit returned an error
  kRegionOpen = 3,  // the shared region could not be opened read-only
  kSlot = 4,        // no slot of the region carries this process's PID
  kIdentity = 5,    // the slot's host PID is not the expected one
  kHandoff = 6,     // the handoff mode's serialized work failed
};

// What the worker must find in its slot (--expect).
enum class InitExpect : uint32_t {
  kOwnPid = 0,  // host_pid == getpid(): the workers run in the host PID namespace
  kNoPid = 1,   // host_pid == 0: no identity tier was enabled
  kBare = 2,    // libvgpu.so is not loaded: no region may exist, nothing to read
};

struct alignas(64) InitWorkerRecord {
  std::atomic<uint32_t> outcome;  // WorkerOutcome; kOk is stored last
  uint32_t failed_step;           // InitStep
  int32_t pid;                    // getpid() of the worker
  int32_t cu_result;              // what cuInit(0) returned (-1: not called)
  int64_t main_ns;                // entered main()
  int64_t ready_ns;               // about to block on the barrier
  int64_t released_ns;            // its read() of the barrier returned
  int64_t cuinit_ns;              // cuInit(0) returned
  // Copied from the worker's own region slot after cuInit.
  int32_t host_pid;
  uint32_t identity_source;    // region::IdentitySource
  uint32_t identity_attempts;  // attempts recorded in the slot
  uint8_t identity_reason[4];  // region::IdentityReason, by region::IdentityTier
  int64_t identity_ns;         // the latest attempt's duration
  char error[96];              // why it failed, NUL-terminated
  // What cuInit(0) cost the worker itself (getrusage before and after; in the handoff mode
  // until its serialized work ended): CPU time (user + system) and context switches.
  int64_t cpu_ns;
  uint32_t voluntary_switches;
  uint32_t involuntary_switches;
  int64_t handoff_ns;  // the handoff mode: its serialized work ended (the semaphore posted)
};

static_assert(sizeof(InitWorkerRecord) == 192);
static_assert(offsetof(InitWorkerRecord, main_ns) == 16);
static_assert(offsetof(InitWorkerRecord, host_pid) == 48);
static_assert(offsetof(InitWorkerRecord, identity_ns) == 64);
static_assert(offsetof(InitWorkerRecord, error) == 72);
static_assert(offsetof(InitWorkerRecord, cpu_ns) == 168);
static_assert(offsetof(InitWorkerRecord, handoff_ns) == 184);

}  // namespace hami::bench
