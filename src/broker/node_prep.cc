#include "broker/node_prep.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <string>

#include "broker/fs_checks.h"
#include "common/unique_fd.h"

namespace hami::broker {
namespace {

std::string Uid(uid_t uid) { return "UID " + std::to_string(uid); }

}  // namespace

hami::Status PrepareLockDirectory(const NodePrepOptions& o) {
  if (o.parent.empty()) return Error(ErrorCode::kInvalidArgument, "the lock parent path is empty");
  if (o.name.empty() || o.name == "." || o.name == ".." || o.name.find('/') != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument,
                 "lock directory name '" + o.name + "': must be one path component");
  }
  const std::string path = (o.parent == "/" ? "" : o.parent) + "/" + o.name;

  // 1. The parent.
  UniqueFd parent(open(o.parent.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!parent.valid()) {
    const int err = errno;
    struct stat st;
    if (lstat(o.parent.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode)) return Unsafe(o.parent, "is a symlink; refusing to follow it");
      if (!S_ISDIR(st.st_mode)) {
        return Unsafe(o.parent, std::string("is ") + KindName(st.st_mode) + ", not a directory");
      }
    }
    return Error::FromErrno("opening " + o.parent, err);
  }
  struct stat pst;
  if (fstat(parent.get(), &pst) != 0) return Error::FromErrno("fstat " + o.parent);
  if (pst.st_uid != o.expected_owner) {
    return Unsafe(o.parent, "owned by " + Uid(pst.st_uid) + ", not " + Uid(o.expected_owner));
  }
  if ((pst.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (pst.st_mode & S_ISVTX) == 0) {
    return Unsafe(o.parent, "mode " + Octal(pst.st_mode) +
                                " lets group or others write without the sticky bit, so any "
                                "user could replace " +
                                o.name);
  }

  // 2. Create (or find) the directory.
  if (mkdirat(parent.get(), o.name.c_str(), kLockDirMode) != 0 && errno != EEXIST) {
    return Error::FromErrno("creating " + path);
  }

  // 3. Open it, never through a symlink, and check what it is.
  UniqueFd dir(openat(parent.get(), o.name.c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!dir.valid()) {
    const int err = errno;
    struct stat st;
    if (fstatat(parent.get(), o.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode)) return Unsafe(path, "is a symlink; refusing to follow it");
      if (!S_ISDIR(st.st_mode)) {
        return Unsafe(path, std::string("is ") + KindName(st.st_mode) + ", not a directory");
      }
    }
    return Error::FromErrno("opening " + path, err);
  }
  struct stat dst;
  if (fstat(dir.get(), &dst) != 0) return Error::FromErrno("fstat " + path);
  if (!S_ISDIR(dst.st_mode)) {
    return Unsafe(path, std::string("is ") + KindName(dst.st_mode) + ", not a directory");
  }
  if (dst.st_uid != o.expected_owner) {
    return Unsafe(path, "owned by " + Uid(dst.st_uid) + ", not " + Uid(o.expected_owner));
  }

  // 4. The mode, through the descriptor (mkdirat's mode was narrowed by the umask).
  if (fchmod(dir.get(), kLockDirMode) != 0) {
    return Error::FromErrno("chmod " + Octal(kLockDirMode) + " " + path);
  }

  if (o.before_final_check) o.before_final_check(path);

  // 5. The name still leads to the directory prepared, with the mode set.
  struct stat fin;
  if (fstatat(parent.get(), o.name.c_str(), &fin, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Unsafe(path, "removed during preparation");
    return Error::FromErrno("lstat " + path);
  }
  if (fin.st_dev != dst.st_dev || fin.st_ino != dst.st_ino) {
    return Unsafe(path, "replaced during preparation (now " + std::string(KindName(fin.st_mode)) +
                            " with another device/inode)");
  }
  if ((fin.st_mode & 07777) != kLockDirMode) {
    return Unsafe(path, "final mode " + Octal(fin.st_mode) + ", expected " + Octal(kLockDirMode));
  }
  if (fin.st_uid != o.expected_owner) {
    return Unsafe(path, "final owner " + Uid(fin.st_uid) + ", expected " + Uid(o.expected_owner));
  }
  return OkStatus();
}

}  // namespace hami::broker
