// Naming a process by its PID in the simulated machine's "host" PID namespace (that of the
// process that created the state file), as a real driver names processes by their PID in the
// initial namespace whatever namespace they run in.
//
// A process that sees the host's /proc finds its host PID there (the simulator's own procfs
// reading, sim/procfs.h). One in a child PID namespace with its own /proc cannot: it asks the
// machine's resolver, served beside the state file by the first process of the host
// namespace that initializes the simulated CUDA or NVML, for as long as that process lives.
// The resolver is the simulator's own and shares nothing with the product's host-PID broker
// (src/broker), whose answers the simulated driver checks:
//
//   - a Unix datagram socket, HostPidSocketPath(), mode 0666 in a 0755 directory; the
//     resolver sets SO_PASSCRED on it, so the kernel hands it each sender's credentials with
//     the PID translated into the resolver's (the host's) PID namespace;
//   - the request is one datagram of exactly the 8 bytes kAsk, carrying two control messages:
//     SCM_CREDENTIALS (the asker's own PID, UID and GID) and SCM_RIGHTS with exactly one
//     descriptor, one end of a SOCK_SEQPACKET pair the asker made, on which the answer comes
//     back (no reply address is needed, so it works across network namespaces);
//   - the answer is one packet of 12 bytes: kAnswer, then the asker's host PID as a native
//     int32 (same machine), 0 when the request was malformed or the PID has no name in the
//     host namespace.
//
// One resolver per socket: `resolver.lock` beside the socket is held with a process-owned
// fcntl lock while serving (a fork child does not inherit it, and the kernel drops it when
// the process dies), so a second process finds it held and does nothing, and a stale socket
// is replaced only by whoever holds the lock. The serving thread runs with every signal
// blocked, answers without ever blocking on an asker, and keeps the library that holds it
// loaded (a tool may dlclose NVML after one query). Every wait of the asker is bounded.
//
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace hami::sim {

inline constexpr char kAsk[8] = {'S', 'I', 'M', 'H', 'P', 'I', 'D', '?'};
inline constexpr char kAnswer[8] = {'S', 'I', 'M', 'H', 'P', 'I', 'D', '='};
inline constexpr size_t kAnswerSize = sizeof(kAnswer) + sizeof(int32_t);
inline constexpr int kAskTimeoutMs = 1000;  // the whole exchange, at most

// The resolver's socket beside the state file at `state_path`: `<state>.hostpid/resolver.sock`.
std::string HostPidSocketPath(const std::string& state_path);

// Serves host PIDs on HostPidSocketPath(state_path) for the life of this process when this
// process lives in the namespace whose inode is `host_ns` and no live process serves there
// yet; otherwise does nothing. At most once per process (later calls do nothing).
void ServeHostPids(const std::string& state_path, uint64_t host_ns);

// What ServeHostPids does once it has decided to serve, without the namespace check or the
// once-per-process guard: true when this process now serves `state_path`'s socket, false when
// another live process holds its lock or the socket cannot be made. Call at most once per
// path in a process (tests).
bool StartHostPidResolver(const std::string& state_path);

// Asks the resolver of `state_path` for this process's host PID: the answer, or 0 when no
// resolver answers within `timeout_ms` or it answers 0.
pid_t AskHostPid(const std::string& state_path, int timeout_ms = kAskTimeoutMs);

// The process's PID as seen in the PID namespace whose inode is `host_ns`: from this
// process's /proc when it shows that namespace, else from the resolver of the state file at
// `state_path`; 0 when neither answers (the process is then named by its own PID until a
// process of the host namespace lists it, see FindPidByNamespacePid).
pid_t PidInNamespace(uint64_t host_ns, const std::string& state_path);

// Scans /proc for the process that is `ns_pid` in namespace `pidns` and started at
// `start_ticks`; returns its PID in this procfs's namespace, or 0.
pid_t FindPidByNamespacePid(uint64_t pidns, pid_t ns_pid, uint64_t start_ticks);

}  // namespace hami::sim
