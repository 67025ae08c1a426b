// A held mount point for the limits file (node::kLimitsFilePath) on a host without a device
// plugin: what `hami run --limits-file-mount` and the SM benchmark's limits-file containers
// bind a container's limits file onto, each in a private mount namespace of its own.
//
// Holding it: the file is opened (created empty when absent) and kept under a shared flock for
// the holder's life. The holder that created it removes it at the end, and only when it can
// take the lock exclusively and the file is still the empty one it made: a concurrent holder's
// bind mount on it is never detached by the removal, and a file someone else put there stays.
#pragma once

#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hami::node {

class HeldMountPoint {
 public:
  // Holds `path` (a regular file, not a symbolic link), creating it empty when absent.
  // kPermission when it cannot be created or is not a regular file, kBusy when it keeps being
  // replaced while waited for.
  static Result<HeldMountPoint> Hold(const std::string& path);

  HeldMountPoint(HeldMountPoint&&) = default;
  HeldMountPoint& operator=(HeldMountPoint&&) = delete;
  ~HeldMountPoint();

  const std::string& path() const { return path_; }
  bool created() const { return created_; }

 private:
  HeldMountPoint(std::string path, UniqueFd fd, bool created)
      : path_(std::move(path)), fd_(std::move(fd)), created_(created) {}
  std::string path_;
  UniqueFd fd_;
  bool created_;
};

}  // namespace hami::node
