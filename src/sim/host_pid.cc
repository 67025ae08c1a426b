#include "sim/host_pid.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "broker/client.h"
#include "broker/server.h"
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

// Asks the resolver beside the state file: whoever serves it is trusted (the simulated
// machine is test infrastructure), so the client's ownership checks are made against the
// directory's own owner.
pid_t AskResolver(const std::string& state_path) {
  const std::string socket = HostPidSocketPath(state_path);
  const std::string dir = socket.substr(0, socket.rfind('/'));
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return 0;
  broker::ClientOptions options;
  options.socket_path = socket.c_str();
  options.trusted_uid = st.st_uid;
  options.require_read_only_mount = false;
  broker::ClientResult r = broker::QueryHostPid(options);
  return r.failure == broker::ClientFailure::kNone ? r.pid : 0;
}

}  // namespace

std::string HostPidSocketPath(const std::string& state_path) {
  return state_path + ".hostpid/broker.sock";
}

void ServeHostPids(const std::string& state_path, uint64_t host_ns) {
  static std::once_flag once;
  std::call_once(once, [&] {
    if (host_ns == 0 || PidNamespaceInode() != host_ns) return;
    // The serving thread runs this library's code: it must stay loaded when its user
    // dlcloses it (a tool that opens NVML for a query and closes it again).
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&ServeHostPids), &self) == 0 || self.dli_fname == nullptr ||
        dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) == nullptr) {
      return;
    }
    broker::ServerOptions options;
    options.socket_path = HostPidSocketPath(state_path);
    options.max_active = 64;
    // Refused when another live process serves already (its lock is held), or when the path
    // is unusable: then processes that cannot see the host's /proc stay unresolved.
    auto server = broker::Server::Start(options);
    if (server.ok()) server->release();  // serves until the process ends
  });
}

pid_t PidInNamespace(uint64_t host_ns, const std::string& state_path) {
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
  // This /proc does not show the host's namespace.
  return AskResolver(state_path);
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
