// What hami_bench_init and its burst worker (init_bench_worker) share: the layout of the
// anonymous results area (a memfd the parent creates and every worker maps).
//
// The results area is an InitResultsHeader followed by one InitWorkerRecord per worker. The
// parent fills every record with kFailed before it starts a worker; a worker stores kOk last
// (release), after every other field of its record, so a worker that dies, fails or learns a
// wrong host PID never reads as a success. The parent also requires exit status 0.
//
// Times are CLOCK_MONOTONIC nanoseconds (comparable across processes); 0 = not reached.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hami::bench {

inline constexpr uint64_t kInitResultsMagic = 0x48494e4954524531ull;  // "HINITRE1"
inline constexpr uint32_t kInitResultsVersion = 2;

enum class InitOutcome : uint32_t { kFailed = 0, kOk = 1 };

// Which step a failed worker stopped at (InitWorkerRecord::failed_step).
enum class InitStep : uint32_t {
  kNone = 0,  // it never said (it died, or never reached its record)
  kBarrier = 1,
  kCuInit = 2,      // cuInit returned an error
  kRegionOpen = 3,  // the shared region could not be opened read-only
  kSlot = 4,        // no slot of the region carries this process's PID
  kIdentity = 5,    // the slot's host PID is not the expected one
};

// What the worker must find in its slot (--expect).
enum class InitExpect : uint32_t {
  kOwnPid = 0,  // host_pid == getpid(): the workers run in the host PID namespace
  kNoPid = 1,   // host_pid == 0: no identity tier was enabled
};

struct alignas(64) InitResultsHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t worker_count;
  uint32_t record_size;
  uint32_t pad0;
  std::atomic<uint32_t> ready;  // workers about to block on the barrier
  uint8_t reserved[36];
};

struct alignas(64) InitWorkerRecord {
  std::atomic<uint32_t> outcome;  // InitOutcome; kOk is stored last
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
  // What cuInit(0) cost the worker itself (getrusage before and after): CPU time (user +
  // system) and context switches.
  int64_t cpu_ns;
  uint32_t voluntary_switches;
  uint32_t involuntary_switches;
};

static_assert(sizeof(InitResultsHeader) == 64);
static_assert(sizeof(InitWorkerRecord) == 192);
static_assert(offsetof(InitWorkerRecord, main_ns) == 16);
static_assert(offsetof(InitWorkerRecord, host_pid) == 48);
static_assert(offsetof(InitWorkerRecord, identity_ns) == 64);
static_assert(offsetof(InitWorkerRecord, error) == 72);
static_assert(offsetof(InitWorkerRecord, cpu_ns) == 168);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

inline constexpr size_t InitResultsBytes(uint32_t workers) {
  return sizeof(InitResultsHeader) + size_t(workers) * sizeof(InitWorkerRecord);
}

inline InitWorkerRecord* InitRecords(InitResultsHeader* h) {
  return reinterpret_cast<InitWorkerRecord*>(h + 1);
}

}  // namespace hami::bench
