// What a node's containerd leaves on the host, and how to find it: mounts under a directory,
// the cgroup directories of a process, processes by an argument of their command line, the
// Unix sockets a process listens on. Containerd::Stop uses them to clean up; tests use them to
// check that nothing is left.
//
// The parsers read the kernel's text (/proc/<pid>/mountinfo, /proc/<pid>/cgroup): a line
// that does not have the kernel's shape is an error naming the input and the line number,
// never skipped silently. The scanners (MountPointsUnder, ProcessesWithArgument,
// UnixSocketPathsOf) read /proc as it is at the call; processes that end meanwhile are
// passed over.
//
// Thread safety: pure functions and reads of /proc; any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami::sim::cri {

// The fields of one mountinfo line used here (proc(5)), with octal escapes (\040) decoded.
struct MountInfo {
  std::string root;           // the mounted directory inside its filesystem ("/" for most)
  std::string mount_point;    // in the reader's mount namespace
  std::string fs_type;        // "cgroup", "cgroup2", "overlay", ...
  std::string super_options;  // "rw,memory"
  std::string mount_options;  // this mount's own, read-only or not first: "ro,nosuid,relatime"
};
// `what` names the input in errors ("/proc/self/mountinfo").
Result<std::vector<MountInfo>> ParseMountInfo(std::string_view text, std::string_view what);

// One line of /proc/<pid>/cgroup: "4:memory:/a/b"; controllers is empty for cgroup2 ("0::/").
struct CgroupMembership {
  int hierarchy_id = 0;
  std::vector<std::string> controllers;  // "cpu", "cpuacct", "name=systemd"
  std::string path;                      // absolute within the hierarchy
};
Result<std::vector<CgroupMembership>> ParseProcCgroup(std::string_view text, std::string_view what);

// A process's cgroup in one mounted hierarchy.
struct CgroupDir {
  std::string hierarchy;  // the hierarchy's mount point: "/sys/fs/cgroup/memory"
  std::string dir;        // the cgroup's directory: "/sys/fs/cgroup/memory/process_api/x"
};
// Joins memberships with the cgroup mounts: a v1 membership goes to the "cgroup" mount whose
// super options hold all its controllers, the v2 one to the "cgroup2" mount. A membership
// with no such mount (or outside the mount's root) has no directory and is left out.
std::vector<CgroupDir> CgroupDirsOf(const std::vector<CgroupMembership>& memberships,
                                    const std::vector<MountInfo>& mounts);

// The cgroup directories of `pid` (0: this process), from /proc/<pid>/cgroup and this
// process's mountinfo.
Result<std::vector<CgroupDir>> CgroupDirsOfProcess(pid_t pid);

// Mount points at or below `dir` (an absolute path without a trailing '/') in this process's
// mount namespace, deepest first, each once.
Result<std::vector<std::string>> MountPointsUnder(const std::string& dir);

// Processes with an argument (argv[1] and later) equal to `arg`, e.g. the shims started with
// "-address <socket>". This process is never listed.
std::vector<pid_t> ProcessesWithArgument(std::string_view arg);

// The command name of `pid` (/proc/<pid>/comm, at most 15 bytes, without the newline); empty
// when it is gone.
std::string CommandName(pid_t pid);

// Paths of the named Unix sockets whose descriptors `pid` holds (its listening sockets among
// them), from /proc/<pid>/fd and the process's /proc/<pid>/net/unix. Empty when it is gone.
std::vector<std::string> UnixSocketPathsOf(pid_t pid);

}  // namespace hami::sim::cri
