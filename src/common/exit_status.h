// Exit statuses of `hami`, `hami-sim` and the daemons, and the one conversion from an Error to
// an exit status (docs/design.md, "Failure policy").
#pragma once

#include "common/result.h"

namespace hami {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;          // the command could not do its work
inline constexpr int kExitUsage = 2;            // its arguments or input were wrong
inline constexpr int kExitCannotExecute = 126;  // `hami run`: the program exists, exec failed
inline constexpr int kExitNotFound = 127;       // `hami run`: no such program

// kInvalidArgument (the caller's input is wrong) is a usage error; every other failure is
// kExitFailure. Commands with a finer rule of their own say so where they return.
inline int ExitStatusOf(const Error& error) {
  return error.code() == ErrorCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

}  // namespace hami
