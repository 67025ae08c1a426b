// What hami_bench_region and its burst worker (region_bench_worker) share: the record each
// worker fills in the results area (burst_results.h) and the policy the workers stamp on the
// region.
//
// Times are CLOCK_MONOTONIC nanoseconds (comparable across processes); 0 = not reached.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "burst_results.h"
#include "region/region.h"

namespace hami::bench {

inline constexpr uint64_t kResultsMagic = 0x4852424e43485231ull;  // "HRBNCHR1"
inline constexpr uint32_t kResultsVersion = 1;

// Which step a failed worker stopped at (WorkerRecord::failed_step).
enum class WorkerStep : uint32_t {
  kNone = 0,  // it never said (it died, or never reached its record)
  kBarrier = 1,
  kOpen = 2,
  kRegister = 3,
  kReserve = 4,
};

struct alignas(64) WorkerRecord {
  std::atomic<uint32_t> outcome;  // WorkerOutcome; kOk is stored last
  uint32_t failed_step;           // WorkerStep
  int32_t pid;
  uint32_t pad0;
  int64_t main_ns;        // entered main()
  int64_t start_ns;       // woke from the barrier: the region work starts
  int64_t opened_ns;      // Region::Open returned
  int64_t registered_ns;  // Register() returned
  int64_t reserved_ns;    // Reserve + Release returned
  int64_t end_ns;         // Unregister() returned: the region work is done
  // Context switches of the worker between start_ns and registered_ns.
  uint32_t involuntary_switches;
  uint32_t voluntary_switches;
  char error[112];  // why it failed, NUL-terminated
};

static_assert(sizeof(WorkerRecord) == 192);
static_assert(offsetof(WorkerRecord, main_ns) == 16);
static_assert(offsetof(WorkerRecord, involuntary_switches) == 64);
static_assert(offsetof(WorkerRecord, error) == 72);

// Two devices with a few GiB each: every worker stamps (or compares) the same policy.
inline region::PolicySpec BenchPolicy() {
  region::PolicySpec p;
  p.device_count = 2;
  p.memory_limit[0] = 4ull << 30;
  p.memory_limit[1] = 4ull << 30;
  p.uuid[0] = "GPU-bench000-0000-4000-8000-000000000000";
  p.uuid[1] = "GPU-bench001-0000-4000-8000-000000000000";
  return p;
}

inline constexpr uint64_t kBurstReserveBytes = 1ull << 20;

}  // namespace hami::bench
