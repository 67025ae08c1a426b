// Open-file-description byte locks (F_OFD_SETLK): a lock belongs to one open() of a file, is
// released when the last descriptor of that open is closed — in particular when its process
// dies, however it dies — and is visible to every process that opens the file, in any PID
// namespace. Shared files use one locked byte per participant as a liveness signal that
// cannot be fooled by PID reuse. Bytes beyond the end of the file may be locked.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cerrno>

namespace hami {

enum class LockWait { kNo, kYes };

// Sets (F_WRLCK/F_RDLCK) or clears (F_UNLCK) a lock on the byte at `offset`. Returns 0 or
// an errno (EAGAIN when another open holds a conflicting lock and `wait` is kNo).
inline int OfdLockByte(int fd, off_t offset, short type, LockWait wait) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  for (;;) {
    if (fcntl(fd, wait == LockWait::kYes ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0) return 0;
    if (errno != EINTR) return errno;
  }
}

// True when another open of the file holds a lock on the byte at `offset` that conflicts
// with `type`. When the query itself fails, answers true (assume the owner is alive).
inline bool OfdByteLockedByOther(int fd, off_t offset, short type = F_WRLCK) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

}  // namespace hami
