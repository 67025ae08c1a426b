#include "node/mount_point.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hami::node {

Result<HeldMountPoint> HeldMountPoint::Hold(const std::string& path) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    bool created = false;
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid() && errno == ENOENT) {
      fd.Reset(open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
      if (!fd.valid() && errno == EEXIST) continue;
      if (!fd.valid()) {
        const int err = errno;
        std::string text = path + " does not exist and cannot be created: " + std::strerror(err);
        if (err == EACCES || err == EPERM || err == EROFS) {
          text += " (as root, create an empty one once: touch " + path + ")";
        }
        return Error(ErrorCode::kPermission, text, err);
      }
      created = true;
    }
    if (!fd.valid()) {
      return Error::FromErrno(errno == ELOOP ? path + " is a symbolic link; refusing to mount on it"
                                             : "cannot open " + path);
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return Error::FromErrno("fstat " + path);
    if (!S_ISREG(st.st_mode)) {
      return Error(ErrorCode::kPermission,
                   path + " is not a regular file; refusing to mount on it");
    }
    while (flock(fd.get(), LOCK_SH) != 0) {
      if (errno != EINTR) return Error::FromErrno("flock " + path);
    }
    struct stat now;
    if (lstat(path.c_str(), &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) {
      return HeldMountPoint(path, std::move(fd), created);
    }
    // Removed (or replaced) while we waited for the lock: start again.
  }
  return Error(ErrorCode::kBusy, path + " keeps changing; cannot hold it");
}

HeldMountPoint::~HeldMountPoint() {
  if (!created_ || !fd_.valid()) return;
  struct stat st, now;
  if (flock(fd_.get(), LOCK_EX | LOCK_NB) == 0 && fstat(fd_.get(), &st) == 0 &&
      lstat(path_.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev &&
      now.st_size == 0) {
    unlink(path_.c_str());
  }
}

}  // namespace hami::node
