// What a process can learn about itself and others from procfs: its PID namespace, start
// time, name and PIDs in nested namespaces.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hami {

// Inode of the PID namespace of `pid` (0 = self), or 0 when unreadable.
uint64_t PidNamespaceInode(pid_t pid = 0);

// Start time in clock ticks since boot (/proc/<pid>/stat field 22), or 0 when unreadable.
// With the PID it names one process for the lifetime of the boot.
uint64_t ProcessStartTicks(pid_t pid = 0);

// The NStgid list of /proc/<pid>/status: the PID in each namespace from the procfs mount's
// namespace down to the process's own. Empty when absent or malformed.
std::vector<pid_t> NsTgids(pid_t pid = 0);

// Directory of the running executable ("/work/build/bin"), from /proc/self/exe.
std::string ExecutableDir();

// How many fork()s lie between this process and the one that first called ForkCount(): it
// changes in a fork child (a pthread_atfork handler counts), so comparing it with a value
// saved earlier tells "still the same process" without the system call getpid() costs.
// Fork handlers registered after the first call (child handlers run in registration order)
// already see the child's count.
uint64_t ForkCount();

// The short command name (/proc/<pid>/comm without the newline).
std::string ProcessComm(pid_t pid = 0);

// Raises this process's soft limit of open files to at least `needed` (never past the hard
// limit, never lowering it): false when the hard limit is lower or setrlimit refuses.
bool RaiseOpenFileLimit(uint64_t needed);

}  // namespace hami
