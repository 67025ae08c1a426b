// hami-monitor's exposition: plain values in, Prometheus text (0.0.4) out. The daemon reads
// the regions, the cached NVML sample and its own counters into a MetricsInput at each scrape;
// rendering is pure (golden-tested). Every series carries zone="vGPU". docs/monitor.md lists
// every series with its labels, meaning and source.
//
// Thread safety: no shared state.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "inventory/nvml_sampler.h"
#include "monitor/containers.h"
#include "monitor/unaccounted.h"
#include "region/layout.h"

namespace hami::monitor {

// One device of one container's region, as a scrape saw it.
struct DeviceView {
  int vdevice_index = 0;  // the container's CUDA ordinal
  std::string uuid;
  uint64_t used_bytes = 0;   // the region's ledger
  uint64_t limit_bytes = 0;  // 0: unlimited
  uint64_t peak_bytes = 0;
  uint64_t rejected = 0;  // admissions refused, ever
  std::array<uint64_t, region::layout::kUsageKinds> kind_bytes{};
  uint32_t sm_limit = 0;           // percent; 0 or 100: unlimited
  uint32_t sm_limit_in_force = 0;  // percent; 0: none in force now
  region::layout::LimiterMode limiter_mode = region::layout::LimiterMode::kOff;
  double limiter_waited_seconds = 0;
  double limiter_measured_ratio = 0;
  // What NVML showed the container's processes (live slots' host PIDs) holding and using on
  // this GPU at the latest sample; absent without a sample of that GPU.
  std::optional<uint64_t> nvml_bytes;
  std::optional<double> nvml_utilization;
};

struct ProcessView {
  pid_t pid = 0;       // in the container's PID namespace
  pid_t host_pid = 0;  // 0: not known
  region::layout::IdentitySource identity = region::layout::IdentitySource::kUnknown;
};

// The DRA claim a region belongs to (a claim's directory, containers.h), labelled with the
// pod (RegionView::pod) and container of its first user (claims.h).
struct ClaimView {
  std::string name;
  std::string uid;
  std::string container;  // the label's value (the directory's own is "claim")
};

struct RegionView {
  ContainerKey key;
  std::string ns;  // from the pod informer (a claim's: its namespace, which is its pods')
  std::string pod;
  std::optional<ClaimView> claim;  // absent: a device-plugin container's region
  std::string path;
  bool writable = false;
  std::vector<DeviceView> devices;
  std::optional<double> last_kernel_elapsed_seconds;  // absent: no kernel yet
  bool paused = false;
  bool utilization_switch = false;
  int priority = 1;
  region::layout::CorePolicy core_policy = region::layout::CorePolicy::kDefault;
  std::vector<ProcessView> processes;  // live slots
  std::array<uint64_t, region::layout::kIdentitySources> identity_by_source{};
  std::array<uint64_t, region::layout::kIdentityReasons> identity_reasons{};
  // Outside the device budget (region layout 2.5; an earlier minor reads 0): allocations served
  // from host memory and the host budget they draw on, the spills refused with both budgets
  // spent, and other processes' memory the container's processes map.
  uint64_t spilled_bytes = 0;
  uint64_t host_limit_bytes = 0;
  uint64_t spill_rejected = 0;
  uint64_t imported_bytes = 0;
};

struct RegionErrorView {
  std::string path;
  std::string reason;  // "corrupt", "incompatible", "permission", "io", "invalid"
};

struct GpuHealthView {
  bool healthy = true;
  std::string reason;
};

struct PodRef {
  std::string ns;
  std::string pod;
};

// One container using a DRA claim's region (claims.h), for hami_claim_container_info.
struct ClaimUseView {
  std::string ns;
  std::string claim;
  std::string claim_uid;
  std::string pod;
  std::string container;
};

struct CleanupView {
  bool enabled = false;
  uint64_t passes = 0;
  uint64_t list_failures = 0;
  uint64_t removed = 0;
  uint64_t errors = 0;
  int candidates = 0;     // at the latest pass
  int kept_attached = 0;  // at the latest pass
};

struct FeedbackView {
  uint64_t passes = 0;
  int regions = 0;  // at the latest pass
  int active = 0;
  int paused = 0;
  int switched_on = 0;
  uint64_t writes = 0;  // pause and switch values changed, ever
  uint64_t errors = 0;  // changes a region refused, ever
};

struct MetricsInput {
  std::string node;
  std::string version;
  const inventory::NodeSample* sample = nullptr;  // null: no NVML sample yet
  std::map<std::string, GpuHealthView> health;    // by UUID; absent: not watched
  std::vector<RegionView> regions;                // sorted by key, then path
  int containers = 0;                             // directories seen by the latest scan
  int containers_without_pod = 0;                 // of those, no pod known with their UID
  std::vector<UnaccountedProcess> unaccounted;
  std::map<std::string, PodRef> pods_by_uid;  // for the unaccounted processes' labels
  std::vector<ClaimUseView> claim_uses;       // every user of every claim with a region
  std::vector<RegionErrorView> region_errors;
  CleanupView cleanup;
  FeedbackView feedback;
  bool pods_synced = false;
  uint64_t scans = 0;
  uint64_t nvml_samples = 0;
  uint64_t nvml_failures = 0;
  uint64_t events_recorded = 0;
};

// The exposition of everything in `in` (without the scrape-duration histogram, which the
// daemon appends). Containers whose pod is unknown have no series of their own (they are
// counted in hami_monitor_containers{state="no_pod"}); a device reported by two region files
// of one container is exported from the first (usage.cache first). A claim's region carries
// the labels claim and claim_uid after container.
std::string RenderMetrics(const MetricsInput& in);

}  // namespace hami::monitor
