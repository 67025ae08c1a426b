// The NVML cross-check: what a device's driver says each process holds against what the
// container's region accounts for it. Interposition sees only the calls that pass through
// libvgpu.so; memory allocated past it (counters zeroed in the region, a driver loaded with
// dlmopen, a static binary, raw ioctls) cannot be refused, but the driver still counts it, and
// NVML lists it by host PID. A process whose NVML figure exceeds its books by more than a
// tolerance has a gap: libvgpu's cross-check (vgpu/watch.h) records it in the region
// (Region::RecordCrossCheck), `hami inspect` reports it (exit 3), and the node monitor
// exports it.
//
// Pure (no NVML, no file): the callers gather the NVML list and the slots.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <vector>

namespace hami::region {

struct SlotView;

// How much more NVML may show for a process than its books before the difference counts.
// libvgpu.so measures a context's own memory (before and after creating it) and charges it,
// so on the simulated GPU the two agree exactly; a real driver grows a context lazily (the
// first module load, a first kernel's local memory) by a few MiB that no API call reports.
inline constexpr uint64_t kDefaultUnaccountedToleranceBytes = 64ull << 20;

// How often libvgpu's watcher checks, and how old a finding may be and still count: one that
// nobody renewed for three periods (its checker gone) no longer holds allocations back.
inline constexpr int64_t kCrossCheckPeriodNs = 2'000'000'000;
inline constexpr int64_t kCrossCheckStaleNs = 3 * kCrossCheckPeriodNs;

// Bytes NVML shows past `accounted`, when more than `tolerance`; else 0.
constexpr uint64_t UnaccountedGap(uint64_t nvml_bytes, uint64_t accounted_bytes,
                                  uint64_t tolerance_bytes) {
  if (nvml_bytes <= accounted_bytes) return 0;
  const uint64_t gap = nvml_bytes - accounted_bytes;
  return gap > tolerance_bytes ? gap : 0;
}

// One entry of NVML's process list for a device (a PID listed twice is added up).
struct NvmlProcessUse {
  pid_t host_pid = 0;
  uint64_t bytes = 0;  // 0: NVML does not know
};

// A process of the region whose NVML figure exceeds its books.
struct AccountingGap {
  int slot = -1;
  pid_t pid = 0;       // in the container's PID namespace
  pid_t host_pid = 0;  // as NVML lists it
  uint64_t nvml_bytes = 0;
  uint64_t accounted_bytes = 0;
  uint64_t gap_bytes = 0;
};

// One device's check.
struct DeviceCrossCheck {
  int device = -1;                  // the region's device index
  std::vector<AccountingGap> gaps;  // in slot order
  uint32_t unchecked = 0;           // live processes with no host PID (yet): NVML cannot be asked
  uint64_t TotalGap() const;
};

// Checks region device `device`: each live slot with a host PID against what `nvml` shows for
// that PID (the slot's usage of every kind on the device). Slots that are not alive are
// skipped (their owner is gone; NVML does not list it).
DeviceCrossCheck CrossCheckDevice(int device, std::span<const SlotView> slots,
                                  std::span<const NvmlProcessUse> nvml, uint64_t tolerance_bytes);

}  // namespace hami::region
