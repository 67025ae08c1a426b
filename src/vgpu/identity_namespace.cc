// The namespace tier: a process in the initial PID namespace is known by its own PID.
#include <sys/stat.h>
#include <unistd.h>

#include "vgpu/identity.h"

namespace hami::vgpu {
namespace {

// The inode number the kernel gives the initial PID namespace (PROC_PID_INIT_INO).
constexpr ino_t kInitialPidNamespaceInode = 0xEFFFFFFCu;

}  // namespace

TierOutcome NamespaceTier() {
  TierOutcome o;
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) {
    o.reason = IdentityReason::kUnreadable;
    return o;
  }
  if (st.st_ino != kInitialPidNamespaceInode) {
    o.reason = IdentityReason::kOtherNamespace;
    return o;
  }
  o.host_pid = getpid();
  o.reason = IdentityReason::kNone;
  return o;
}

}  // namespace hami::vgpu
