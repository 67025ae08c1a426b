// Starting the simulator's background programs (the cluster's components, a node's containerd):
// one posix_spawn with the file actions and signal state they all need.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"

namespace hami::sim {

// Starts argv (argv[0] a path) in a session of its own, with stdin /dev/null, stdout and
// stderr on `out_fd`, no signal blocked and every signal at its default, and the environment
// `env` ("NAME=value" entries). Its PID, or the error of starting it.
Result<pid_t> SpawnInSession(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, int out_fd);

}  // namespace hami::sim
