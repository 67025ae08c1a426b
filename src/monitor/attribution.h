// Which pod and container a host process belongs to, from what procfs shows of it: its mount
// table first (the container's directory <hook>/vgpu/containers/<podUID>_<container> is
// bind-mounted into every container the device plugin prepared, so even a static binary that
// never loads libvgpu.so is attributed to its container), then its cgroup (the kubelet's
// kubepods hierarchy names the pod: "pod<uid>" with the cgroupfs driver,
// "kubepods-<qos>-pod<uid with '_' for '-'>.slice" with the systemd driver; the pod only).
//
// The parsers are pure (and fuzzed): they take the files' text. Attribute() reads
// <proc_root>/<pid>/mountinfo and <proc_root>/<pid>/cgroup; the root is injectable for tests.
//
// Thread safety: no shared state.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "monitor/containers.h"

namespace hami::monitor {

// kRegion: the process has a live slot in the container's region (the region says whose it is).
enum class AttributionSource { kNone, kMountinfo, kCgroup, kRegion };
// "none", "mountinfo", "cgroup", "region"
const char* AttributionSourceName(AttributionSource source);

struct Attribution {
  AttributionSource source = AttributionSource::kNone;
  ContainerKey key;  // container empty for kCgroup; both empty for kNone
};

// The container whose directory is mounted in this mount table (/proc/<pid>/mountinfo text):
// the first line whose root field (the 4th) has a path component sequence
// "vgpu/containers/<name>" where <name> parses as a container directory name. Octal escapes
// (\040) in the field are decoded. Malformed lines are skipped.
std::optional<ContainerKey> ContainerFromMountinfo(std::string_view mountinfo);

// The pod UID in a cgroup file (/proc/<pid>/cgroup text: "id:controllers:path" lines, v1 or
// v2): the first path with a kubepods component followed by a pod component. The UID must
// pass node::ValidatePathComponent and hold no '_' (systemd's '_' are turned back into '-').
std::optional<std::string> PodUidFromCgroup(std::string_view cgroup);

// Reads both files of `pid` under `proc_root` ("/proc"): mountinfo first, then cgroup. An
// unreadable file (the process ended, no permission) counts as no answer.
Attribution Attribute(const std::string& proc_root, pid_t pid);

}  // namespace hami::monitor
