#include "common/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hami {

Result<UniqueFd> OpenRegularFile(const std::string& path, int flags, mode_t mode,
                                 Symlinks symlinks) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer before we can refuse it.
  const int nofollow = symlinks == Symlinks::kRefuse ? O_NOFOLLOW : 0;
  UniqueFd fd(::open(path.c_str(), flags | nofollow | O_CLOEXEC | O_NONBLOCK, mode));
  if (!fd.valid()) {
    int err = errno;
    if (err == ELOOP) {
      return Error(ErrorCode::kPermission, path + ": is a symbolic link; refusing to follow it",
                   err);
    }
    return Error::FromErrno("open " + path, err);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Error::FromErrno("fstat " + path);
  if (!S_ISREG(st.st_mode)) {
    return Error(ErrorCode::kPermission, path + ": not a regular file; refusing to use it");
  }
  if ((flags & O_NONBLOCK) == 0) {
    int fl = fcntl(fd.get(), F_GETFL);
    if (fl < 0 || fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) {
      return Error::FromErrno("fcntl " + path);
    }
  }
  return fd;
}

Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes, Symlinks symlinks) {
  UniqueFd fd = HAMI_TRY(OpenRegularFile(path, O_RDONLY, 0, symlinks));
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::FromErrno("read " + path);
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > max_bytes) {
      return Error(ErrorCode::kInvalidArgument,
                   path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, size_t(n));
  }
  return out;
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::FromErrno("write");
    }
    data.remove_prefix(size_t(n));
  }
  return OkStatus();
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    Reset();
    addr_ = std::exchange(o.addr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Result<MappedFile> MappedFile::Map(int fd, size_t size, bool writable, std::string_view what) {
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Error::FromErrno(std::string("mmap ") + std::string(what));
  MappedFile m;
  m.addr_ = p;
  m.size_ = size;
  return m;
}

void MappedFile::Reset() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace hami
