// The regions of every container on the node, as the monitor holds them: each region file the
// container directories list (containers.h) opened through region::Region (header validated;
// never created), read-write when the file allows it (the feedback loop writes the policy's
// pause and utilization-switch words), else read-only. A file is kept open across scans while
// its device, inode and size are unchanged, reopened when it was replaced, closed when it is
// gone. A file that fails to open is reported by path with a reason class and skipped (never
// reinterpreted); the other containers are unaffected.
//
// Thread safety: Scan() from one thread at a time; every other member from any thread (the
// regions are shared with the readers: a scan never unmaps a region a reader still holds).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "inventory/nvml_sampler.h"
#include "monitor/containers.h"
#include "monitor/metrics.h"
#include "monitor/unaccounted.h"
#include "region/region.h"

namespace hami::monitor {

struct OpenedRegion {
  ContainerKey key;
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  bool writable = false;
  std::unique_ptr<region::Region> region;
};
using RegionPtr = std::shared_ptr<OpenedRegion>;

// The reason class of an open failure, for hami_monitor_region_errors{reason}: "corrupt",
// "incompatible", "permission", "io", "invalid".
const char* RegionErrorReason(const Error& error);

// Opens an existing region file read-write, else (no write access) read-only. Refuses what
// Region::Open refuses, and a policy that counts more devices than the layout holds (kCorrupt).
Result<RegionPtr> OpenRegionFile(const ContainerKey& key, const std::string& path);

class RegionSet {
 public:
  struct ScanReport {
    int containers = 0;
    // Lines to log, each once per path and reason: files newly refused, entries skipped.
    std::vector<std::string> new_problems;
    int opened = 0;  // files opened by this scan (new or replaced)
    int closed = 0;  // files gone since the last scan
    bool listed = true;
    std::string list_error;  // the containers directory could not be read
  };

  ScanReport Scan(const std::string& hook_path);

  std::vector<RegionPtr> regions() const;  // by key, then path
  std::vector<ContainerKey> containers() const;
  // The DRA claims' directories of the latest scan: their claim records (nullopt: the record
  // could not be read or names another UID; the scan reported it).
  std::map<ContainerKey, std::optional<node::ClaimRecord>> claims() const;
  std::vector<RegionErrorView> errors() const;  // by path
  uint64_t scans() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, RegionPtr> by_path_;
  std::vector<ContainerKey> containers_;
  std::map<ContainerKey, std::optional<node::ClaimRecord>> claims_;
  std::map<std::string, RegionErrorView> errors_;  // by path
  std::map<std::string, std::string> skipped_;     // entry message -> (logged once)
  uint64_t scans_ = 0;
};

// What a scrape shows of one region now: the ledger, limits, limiter, policy words, live
// processes and identity counters, and, with `sample`, what NVML showed those processes
// holding and using. `now_mono_ns` is CLOCK_MONOTONIC (the region's kernel times are).
RegionView ReadRegion(const OpenedRegion& r, const inventory::NodeSample* sample,
                      int64_t now_mono_ns);

// The live slots of `r` with a host PID, per device they hold memory on (for unaccounted
// memory).
void AppendAccounted(const OpenedRegion& r, std::vector<AccountedProcess>& out);

}  // namespace hami::monitor
