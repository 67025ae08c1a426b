// What a process can learn about itself and others from procfs: its PID namespace, start
// time and PIDs in nested namespaces. Used to name processes as the host sees them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hami::sim {

// Inode of the PID namespace of `pid` (0 = self), or 0 when unreadable.
uint64_t PidNamespaceInode(pid_t pid = 0);

// Start time in clock ticks since boot (/proc/<pid>/stat field 22), or 0 when unreadable.
// With the PID it names one process for the lifetime of the boot.
uint64_t ProcessStartTicks(pid_t pid = 0);

// The NStgid list of /proc/<pid>/status: the PID in each namespace from the procfs mount's
// namespace down to the process's own. Empty when absent or malformed.
std::vector<pid_t> NsTgids(pid_t pid = 0);

// The short command name (/proc/<pid>/comm without the newline).
std::string ProcessComm(pid_t pid = 0);

// The process's PID as seen in the PID namespace whose inode is `host_ns`, or 0 when this
// process cannot see it (it lives in a child namespace with its own /proc).
pid_t PidInNamespace(uint64_t host_ns);

// Scans /proc for the process that is `ns_pid` in namespace `pidns` and started at
// `start_ticks`; returns its PID in this procfs's namespace, or 0.
pid_t FindPidByNamespacePid(uint64_t pidns, pid_t ns_pid, uint64_t start_ticks);

}  // namespace hami::sim
