// The NStgid field of /proc/<pid>/status: the process's ID in each PID namespace the procfs
// mount can see, from that mount's namespace (first) down to the process's own (last).
//
//   NStgid:\t8011\t37\t1
//
// Parsed strictly, because the trusted-procfs identity tier believes the first number: the
// field must be a whole line starting exactly with "NStgid:", appear once, and hold 1 to
// `capacity` positive decimal numbers (1..INT_MAX, no sign, no leading zero) separated by tabs
// or spaces, with nothing else on the line. Pure; allocates nothing.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string_view>

#include "common/result.h"

namespace hami::vgpu {

// Fills pids[0..*count) from the NStgid line of `status_text`. On error *count is 0 and the
// Error (bounded, never allocating) is kInvalidArgument naming what was wrong ("no NStgid
// field", "NStgid field repeated", "NStgid field empty", "NStgid field holds something other
// than PIDs", "NStgid field holds PID 0", "NStgid field holds a PID above INT_MAX"), or
// kUnsupported for "NStgid field lists more PID namespace levels than fit".
Status ParseNStgid(std::string_view status_text, pid_t* pids, size_t capacity, size_t* count);

// The kernel nests PID namespaces at most this deep.
inline constexpr size_t kMaxPidNamespaceLevels = 32;

}  // namespace hami::vgpu
