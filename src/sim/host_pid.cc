#include "sim/host_pid.h"

#include <dirent.h>
#include <unistd.h>

#include <vector>

#include "common/parse.h"
#include "common/proc.h"

namespace hami::sim {

pid_t PidInNamespace(uint64_t host_ns) {
  if (host_ns == 0) return 0;
  if (PidNamespaceInode() == host_ns) return getpid();
  // This /proc belongs to the host's namespace exactly when its PID 1 lives there; then the
  // first NStgid entry is our PID in it.
  if (PidNamespaceInode(1) != host_ns) return 0;
  std::vector<pid_t> ids = NsTgids();
  return ids.size() >= 2 ? ids.front() : 0;
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
