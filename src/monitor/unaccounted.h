// Unaccounted GPU memory: device memory that NVML shows a process holding but that no region
// accounts for — a process with no live region slot (a static binary, a driver loaded with
// dlmopen, raw ioctls, a container started without libvgpu.so), or one whose slot accounts for
// less than NVML shows on that device by more than the tolerance.
//
// Decision only (pure, tested without NVML or procfs): the caller passes the NVML sample, the
// live slots of every region, and a function that attributes a PID to its pod and container.
//
// Thread safety: no shared state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "inventory/nvml_sampler.h"
#include "monitor/attribution.h"
#include "region/crosscheck.h"

namespace hami::monitor {

// How much more NVML may show for a process than its slot accounts for before the difference
// counts: the same tolerance libvgpu's cross-check uses.
using region::kDefaultUnaccountedToleranceBytes;

enum class UnaccountedReason { kNoRegion, kUnderReported };
const char* UnaccountedReasonName(UnaccountedReason reason);  // "no_region", "under_reported"

// One live region slot: which process it is and what it accounts for on which GPU.
struct AccountedProcess {
  pid_t host_pid = 0;
  ContainerKey key;
  std::string device_uuid;
  uint64_t accounted_bytes = 0;  // every usage kind of the slot on that device
};

struct UnaccountedProcess {
  pid_t pid = 0;
  std::string device_uuid;
  UnaccountedReason reason = UnaccountedReason::kNoRegion;
  uint64_t nvml_bytes = 0;       // what NVML shows it holding on the device
  uint64_t accounted_bytes = 0;  // what its slots account for there (0 for kNoRegion)
  uint64_t unaccounted_bytes = 0;
  Attribution attribution;  // for kUnderReported, the slot's container (kRegion)
};

// Every process of `sample` holding memory that `accounted` does not cover, in GPU then PID
// order. A PID several slots name on a device is summed. A process holding 0 bytes (or an
// unknown amount) is never reported. `attribute` is called only for kNoRegion processes.
std::vector<UnaccountedProcess> FindUnaccounted(const inventory::NodeSample& sample,
                                                const std::vector<AccountedProcess>& accounted,
                                                uint64_t tolerance_bytes,
                                                const std::function<Attribution(pid_t)>& attribute);

}  // namespace hami::monitor
