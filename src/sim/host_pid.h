// Naming a process by its PID in the simulated machine's "host" PID namespace.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace hami::sim {

// The process's PID as seen in the PID namespace whose inode is `host_ns`, or 0 when this
// process cannot see it (it lives in a child namespace with its own /proc).
pid_t PidInNamespace(uint64_t host_ns);

// Scans /proc for the process that is `ns_pid` in namespace `pidns` and started at
// `start_ticks`; returns its PID in this procfs's namespace, or 0.
pid_t FindPidByNamespacePid(uint64_t pidns, pid_t ns_pid, uint64_t start_ticks);

}  // namespace hami::sim
