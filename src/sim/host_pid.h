// Naming a process by its PID in the simulated machine's "host" PID namespace (that of the
// process that created the state file), as a real driver names processes by their PID in the
// initial namespace whatever namespace they run in.
//
// A process that sees the host's /proc finds its host PID there. One in a child PID namespace
// with its own /proc cannot: it asks a process of the host namespace instead, through the
// project's host-PID broker (src/broker), served on a socket beside the state file by the
// first process of the host namespace that initializes the simulated CUDA or NVML and lives
// on; the kernel reports the asker's PID in the server's namespace (SO_PEERCRED).
//
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace hami::sim {

// The socket beside the state file at `state_path` that the host namespace's resolver serves.
std::string HostPidSocketPath(const std::string& state_path);

// Serves host PIDs on HostPidSocketPath(state_path) for the life of this process when this
// process lives in the namespace whose inode is `host_ns` and no live process serves there
// yet; otherwise does nothing. At most once per process (later calls do nothing).
void ServeHostPids(const std::string& state_path, uint64_t host_ns);

// The process's PID as seen in the PID namespace whose inode is `host_ns`: from this
// process's /proc when it shows that namespace, else from the resolver of the state file at
// `state_path`; 0 when neither answers (the process is then named by its own PID until a
// process of the host namespace lists it, see FindPidByNamespacePid).
pid_t PidInNamespace(uint64_t host_ns, const std::string& state_path);

// Scans /proc for the process that is `ns_pid` in namespace `pidns` and started at
// `start_ticks`; returns its PID in this procfs's namespace, or 0.
pid_t FindPidByNamespacePid(uint64_t pidns, pid_t ns_pid, uint64_t start_ticks);

}  // namespace hami::sim
