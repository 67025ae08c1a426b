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

namespace hami::vgpu {

enum class NsPidsError {
  kNone = 0,
  kNoField,        // no line starts with "NStgid:"
  kRepeated,       // more than one such line
  kEmpty,          // the field lists no PID
  kJunk,           // a character that is not a digit or a separator, or a leading zero
  kNotPositive,    // 0 (a negative number is junk: no sign is accepted)
  kTooLarge,       // above INT_MAX
  kTooManyLevels,  // more numbers than `capacity`
};

const char* NsPidsErrorName(NsPidsError e);

// Fills pids[0..*count) from the NStgid line of `status_text`. On error *count is 0.
NsPidsError ParseNStgid(std::string_view status_text, pid_t* pids, size_t capacity, size_t* count);

// The kernel nests PID namespaces at most this deep.
inline constexpr size_t kMaxPidNamespaceLevels = 32;

}  // namespace hami::vgpu
