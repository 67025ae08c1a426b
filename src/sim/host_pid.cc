#include "sim/host_pid.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/file.h"
#include "common/parse.h"
#include "common/proc.h"

namespace hami::sim {

namespace {

// The parent of `pid` as this procfs numbers it (the PPid field), 0 when unknown.
pid_t ParentOf(pid_t pid) {
  char path[48];
  std::snprintf(path, sizeof(path), "/proc/%d/status", int(pid));
  auto text = ReadFileToString(pid == 0 ? "/proc/self/status" : path, 1 << 16);
  if (!text.ok()) return 0;
  size_t pos = text->find("\nPPid:");
  if (pos == std::string::npos) return 0;
  return pid_t(std::strtol(text->c_str() + pos + 6, nullptr, 10));
}

}  // namespace

pid_t PidInNamespace(uint64_t host_ns) {
  if (host_ns == 0) return 0;
  if (PidNamespaceInode() == host_ns) return getpid();
  // Look in this /proc for a process that lives in the host's namespace: PID 1, else one of
  // our ancestors (PID 1 of another container may not be readable). Its NStgid has one entry
  // per level from the procfs's namespace down to the host's, so our NStgid entry at the same
  // depth is our PID there.
  std::vector<pid_t> mine = NsTgids();
  std::vector<pid_t> candidates = {1};
  pid_t p = ParentOf(0);
  for (int depth = 0; p > 1 && depth < 64; ++depth) {
    candidates.push_back(p);
    p = ParentOf(p);
  }
  for (pid_t c : candidates) {
    if (PidNamespaceInode(c) != host_ns) continue;
    const size_t depth = NsTgids(c).size();
    if (depth == 0 || mine.size() <= depth - 1) return 0;
    return mine[depth - 1];
  }
  return 0;
}

pid_t FindPidByNamespacePid(uint64_t pidns, pid_t ns_pid, uint64_t start_ticks) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return 0;
  pid_t found = 0;
  while (dirent* e = readdir(dir)) {
    auto pid = ParseUint64(e->d_name, "pid");
    if (!pid.ok() || *pid == 0 || *pid > 0x7fffffff) continue;
    pid_t p = pid_t(*pid);
    if (PidNamespaceInode(p) != pidns) continue;
    std::vector<pid_t> ids = NsTgids(p);
    if (ids.empty() || ids.back() != ns_pid) continue;
    if (start_ticks != 0 && ProcessStartTicks(p) != start_ticks) continue;
    found = p;
    break;
  }
  closedir(dir);
  return found;
}

}  // namespace hami::sim
