// The trusted-procfs tier: NStgid of <root>/self/status, where <root> is a procfs that an
// administrator mounted from the host's PID namespace (LIBVGPU_HOST_PROCFS). The container's
// own /proc is never read by default: it would answer with the container's PID.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/unique_fd.h"
#include "limits/vocabulary.h"
#include "vgpu/identity.h"
#include "vgpu/nstgid.h"

namespace hami::vgpu {

TierOutcome ProcfsTier(const char* root) {
  TierOutcome o;
  o.reason = IdentityReason::kUnreadable;
  struct statfs fs;
  if (statfs(root, &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC) {
    g_log.Log(LogLevel::kDebug, "%s=%s is not a procfs mount",
              limits::KeyName(limits::Key::kHostProcfs), root);
    return o;
  }
  char path[4096];
  if (std::snprintf(path, sizeof(path), "%s/self/status", root) >= int(sizeof(path))) return o;
  UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return o;
  char text[8192];
  size_t size = 0;
  for (;;) {
    ssize_t n = read(fd.get(), text + size, sizeof(text) - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return o;
    if (n == 0 || size + size_t(n) == sizeof(text)) {
      size += size_t(n);
      break;
    }
    size += size_t(n);
  }
  pid_t pids[kMaxPidNamespaceLevels];
  size_t count = 0;
  Status parsed = ParseNStgid(std::string_view(text, size), pids, kMaxPidNamespaceLevels, &count);
  if (!parsed.ok()) {
    g_log.Log(LogLevel::kDebug, "%s: %s", path, parsed.error().c_str());
    o.reason = IdentityReason::kMalformed;
    return o;
  }
  // The innermost level is the PID this process knows itself by: anything else means the
  // file does not describe this process.
  if (pids[count - 1] != getpid()) {
    o.reason = IdentityReason::kInconsistent;
    return o;
  }
  o.host_pid = pids[0];
  o.reason = IdentityReason::kNone;
  return o;
}

}  // namespace hami::vgpu
