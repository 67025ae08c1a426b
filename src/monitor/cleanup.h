// Cleanup of ended pods' container directories: the device plugin makes
// <hook>/vgpu/containers/<podUID>_<container>/ and its <podUID>_<container>.limits for every
// container it allocates (node/paths.h) and nothing removes them when the pod goes; the
// monitor does, here, once the API server has no such pod.
//
// The rule (Cleaner::Pass):
// - A pass scans <hook>/vgpu/containers first, then lists the node's pods; only entries seen
//   by that scan are judged in that pass (a directory made during the list waits for the next).
// - An entry is a directory named <podUID>_<container> (ParseContainerDirName), or a limits
//   file <podUID>_<container>.limits whose directory is gone, or a symlink or other file under
//   either name; names starting with '.', and names that do not parse, are never touched.
// - A DRA claim's entry, <claimUID>_claim with its claim record <claimUID>_claim.claim beside
//   it (node/claim_record.h), is never touched either, nor counted: the DRA driver removes
//   the directory, its limits file and the record at NodeUnprepareResources, and a claim's
//   UID is no pod's, so the pod list cannot judge it.
// - A successful list that lacks the entry's pod marks it (with the pass's `now`) if unmarked;
//   one that has the pod clears the mark. A failed list clears every mark: nothing is deleted
//   until the pod list has been resynced. So an entry is *due* when its pod was absent from two
//   successful lists at least resync_interval apart with no failed list between them.
// - A due directory is kept (counted in kept_attached, still due next pass) while a live
//   process is attached to one of its regions (a regular *.cache file in it on which some
//   process holds one of the region's OFD locks: region::AnyProcessAttached). HAMi-core's own
//   regions take no such locks, so their users are not seen.
// - Otherwise it is removed recursively with its .limits file. Removal works from directory
//   descriptors (openat/unlinkat, O_NOFOLLOW) held from <hook>/vgpu/containers down: a symlink
//   is removed as a link and never followed, nothing outside <hook>/vgpu/containers is touched,
//   and a mount point inside (another device) is left in place and reported.
//
// Single cleaner: Start takes the OFD lock of <hook>/vgpu/monitor.lock (F_OFD_SETLK, never
// waiting) and writes its PID there; a second monitor on the node gets kBusy and runs without
// cleanup. The lock goes with the Cleaner (or its process).
//
// Nothing here logs: a pass returns what it saw and did, and the daemon logs and counts it.
// Thread safety: Pass must not run concurrently with itself on one Cleaner.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "monitor/containers.h"

namespace hami::monitor {

struct CleanupOptions {
  std::string hook_path;  // absolute: the plugin's --hook-path
  std::chrono::nanoseconds resync_interval{std::chrono::minutes(5)};
};

// What one pass saw and did (logged by the daemon, exported as metrics).
struct CleanupReport {
  bool listed = false;     // the pod list succeeded
  std::string list_error;  // why not, when it failed
  int candidates = 0;      // entries due this pass (removed + kept_attached + failed)
  int removed = 0;
  int kept_attached = 0;
  std::vector<std::string> removed_dirs;  // absolute paths of the entries removed
  std::vector<Error> errors;              // scan and removal failures, each naming its path
  int waiting = 0;                        // entries whose pod is absent but which are not due yet
};

class Cleaner {
 public:
  // Takes <hook>/vgpu/monitor.lock (making <hook>/vgpu when missing); kBusy (message naming
  // the lock file and, when known, the holder's PID, and saying cleanup stays off) when
  // another monitor holds it; kInvalidArgument for a hook path that is not absolute or holds
  // "..".
  static Result<std::unique_ptr<Cleaner>> Start(CleanupOptions options);

  Cleaner(const Cleaner&) = delete;
  Cleaner& operator=(const Cleaner&) = delete;

  // One pass (the rule above). `list_pods` returns the UIDs of every pod the API server has
  // on this node now (any phase), or an error. `now` is the caller's clock.
  CleanupReport Pass(const std::function<Result<std::vector<std::string>>()>& list_pods,
                     std::chrono::steady_clock::time_point now);

  const std::string& lock_path() const { return lock_path_; }
  const std::string& containers_dir() const { return containers_dir_; }

 private:
  Cleaner(CleanupOptions options, std::string lock_path, UniqueFd lock);

  CleanupOptions options_;
  std::string lock_path_;
  std::string containers_dir_;
  UniqueFd lock_;
  // When each entry's pod was first seen absent, since the last failed list.
  std::map<ContainerKey, std::chrono::steady_clock::time_point> absent_since_;
};

}  // namespace hami::monitor
