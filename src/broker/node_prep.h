// Node preparation for the device plugin: makes the shared lock directory (/tmp/vgpulock by
// default) root-owned with mode 01777, without following a symlink or trusting a path twice.
//
//   1. open the parent (O_DIRECTORY | O_NOFOLLOW) and fstat it: it must be owned by
//      `expected_owner`, and if group or others may write it, it must have the sticky bit
//      (else another user could replace the entry);
//   2. mkdirat(parent, name, 01777) (an existing entry is fine);
//   3. openat(parent, name, O_DIRECTORY | O_NOFOLLOW) and fstat: a directory owned by
//      `expected_owner` (a symlink, another kind of file or another owner is refused);
//   4. fchmod(fd, 01777) restores the bits the umask removed;
//   5. final check: fstatat(parent, name, AT_SYMLINK_NOFOLLOW) must still be the opened
//      directory (same device and inode) with mode exactly 01777.
// Every refusal names the path and what was unsafe (ErrorCode::kPermission); a failed system
// call is ErrorCode::kIo. Nothing is ever removed or replaced.
//
// Thread-safe (no shared state); no exceptions; the umask is never changed.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "common/result.h"
#include "node/paths.h"

namespace hami::broker {

inline constexpr const char* kLockParent = node::kLockDirParent;
inline constexpr const char* kLockDirName = node::kLockDirName;
inline constexpr mode_t kLockDirMode = node::kLockDirMode;

struct NodePrepOptions {
  std::string parent = kLockParent;  // opened without following a symlink
  std::string name = kLockDirName;   // one path component
  uid_t expected_owner = 0;          // owner of the parent and of the directory
  // Tests only: called after step 4, before the final check, with the directory's path.
  std::function<void(const std::string& path)> before_final_check;
};

// Makes <parent>/<name> a directory owned by expected_owner with mode 01777, or refuses.
hami::Status PrepareLockDirectory(const NodePrepOptions& options = {});

}  // namespace hami::broker
