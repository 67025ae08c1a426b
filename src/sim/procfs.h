// What the simulated GPU reads about processes from procfs: PID namespace, PIDs in nested
// namespaces, parent, start time and name. The simulator's own reading, kept apart from the
// product's (common/proc.h), whose identity tiers the simulated driver checks: a misreading
// shared by both would pass every test.
//
// Every reader returns 0 (or an empty list or string) when the file is missing, unreadable or
// malformed; none follows a pid it was not given. The Parse* functions are the whole decision
// on the text, pure, for the tests and the fuzzer. Thread-safe; allocates.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hami::sim::procfs {

// The inode number in the target of a /proc/<pid>/ns/pid link ("pid:[4026531836]"); 0 when
// the text is not exactly that form.
uint64_t ParsePidNsLink(std::string_view link);

// The numbers of the `key` line ("NStgid", "NSpid") of a /proc/<pid>/status text: the PID in
// each namespace from the procfs's own down to the process's. Empty when the line is missing,
// holds no number, or holds anything but positive decimal PIDs separated by tabs or spaces.
std::vector<pid_t> ParseStatusPids(std::string_view status, std::string_view key);

// The PPid line of a /proc/<pid>/status text; 0 when missing or malformed.
pid_t ParseStatusParent(std::string_view status);

// Field 22 (starttime, clock ticks since boot) of a /proc/<pid>/stat text, counted after the
// last ')' (the command name may hold spaces and parentheses); 0 when malformed.
uint64_t ParseStatStartTicks(std::string_view stat);

// The readers, on /proc/self (pid 0) or /proc/<pid>.
uint64_t PidNsInode(pid_t pid = 0);
std::vector<pid_t> NsTgids(pid_t pid = 0);
pid_t ParentPid(pid_t pid = 0);
uint64_t StartTicks(pid_t pid = 0);
std::string Comm();  // /proc/self/comm without its newline

}  // namespace hami::sim::procfs
