#include "broker/fs_checks.h"

#include <sys/stat.h>

#include <cstdio>

namespace hami::broker {

Error Unsafe(const std::string& path, std::string_view problem) {
  return Error(ErrorCode::kPermission, path + ": " + std::string(problem));
}

std::string Octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0%o", unsigned(mode & 07777));
  return buf;
}

const char* KindName(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFLNK:
      return "a symlink";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
  }
  return "an unknown kind of file";
}

}  // namespace hami::broker
