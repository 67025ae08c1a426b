#include "common/versioned_file.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/ofd_lock.h"

namespace hami {

namespace {

std::string Name(const VersionedFileSpec& spec, const std::string& path) {
  return std::string(spec.kind) + " " + path;
}

Result<off_t> FileSize(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Error::FromErrno("fstat " + path);
  return st.st_size;
}

std::atomic<uint32_t>* InitializedWord(void* file, const VersionedFileSpec& spec) {
  return reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(file) +
                                                  spec.initialized_offset);
}

// Full size with the initialized word stored (the header is validated once mapped).
bool Published(int fd, off_t size, const VersionedFileSpec& spec) {
  uint32_t word = 0;
  return size == off_t(spec.size) &&
         pread(fd, &word, sizeof(word), off_t(spec.initialized_offset)) == ssize_t(sizeof(word)) &&
         word == spec.initialized_value;
}

// A file whose maker was killed before it wrote the magic: the full size, the magic all zero.
bool LeftUnfinished(int fd, off_t size, const VersionedFileSpec& spec) {
  char magic[16];
  static constexpr char kZero[sizeof(magic)] = {};
  const size_t n = spec.magic_size < sizeof(magic) ? spec.magic_size : sizeof(magic);
  return size == off_t(spec.size) && pread(fd, magic, n, 0) == ssize_t(n) &&
         std::memcmp(magic, kZero, n) == 0;
}

Error NotPublished(const VersionedFileSpec& spec, const std::string& path) {
  if (spec.locking == InitLocking::kCreatorsOnly) {
    return Error(ErrorCode::kBusy, Name(spec, path) +
                                       " is still being created (or its creator died making it: "
                                       "the next process that may create it makes it again)");
  }
  return Error(ErrorCode::kCorrupt, Name(spec, path) +
                                        " is not initialized (its creator died making it: the "
                                        "next process that may create it makes it again)");
}

// Reads the header of a file of `size` bytes and has the format validate it.
Status CheckHeader(int fd, off_t size, const std::string& path, const VersionedFileSpec& spec,
                   const VersionedFileFormat& format) {
  std::vector<uint64_t> header((spec.header_size + sizeof(uint64_t) - 1) / sizeof(uint64_t));
  ssize_t n = -1;
  if (size >= off_t(spec.header_size)) {
    do {
      n = pread(fd, header.data(), spec.header_size, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return Error::FromErrno("read " + path);
  }
  if (n != ssize_t(spec.header_size)) {
    return Error(ErrorCode::kCorrupt, Name(spec, path) + ": the file is " + std::to_string(size) +
                                          " bytes, smaller than a header; refusing to use it");
  }
  HAMI_TRY(format.Validate(header.data(), uint64_t(size)));
  if (size != off_t(spec.size)) {  // a format that leaves the size to us
    return Error(ErrorCode::kCorrupt, Name(spec, path) + ": the file is " + std::to_string(size) +
                                          " bytes, expected " + std::to_string(spec.size));
  }
  return OkStatus();
}

// Sizes a file of size 0 to spec.size with its blocks reserved: a mapping of a sparse file
// on a full file system faults (SIGBUS) at the first write to a page that has no block, so
// the space must be had now, or the file refused. A failure leaves the file empty again.
Status SizeWithBlocks(int fd, const std::string& path, const VersionedFileSpec& spec) {
  if (ftruncate(fd, off_t(spec.size)) != 0) return Error::FromErrno("ftruncate " + path);
  if (int err = posix_fallocate(fd, 0, off_t(spec.size)); err != 0) {
    (void)ftruncate(fd, 0);
    return Error::FromErrno("reserving " + std::to_string(spec.size) + " bytes for " +
                                Name(spec, path) + " (its file system is full or too small?)",
                            err);
  }
  return OkStatus();
}

// Zero-fills, sizes, fills and publishes the file. The caller holds the init lock exclusively.
Status Initialize(int fd, const std::string& path, const VersionedFileSpec& spec,
                  const VersionedFileFormat& format) {
  // Truncating to zero first zero-fills what an earlier, unfinished attempt wrote.
  const off_t size = HAMI_TRY(FileSize(fd, path));
  if (size != 0 && ftruncate(fd, 0) != 0) return Error::FromErrno("ftruncate " + path);
  HAMI_TRY(SizeWithBlocks(fd, path, spec));
  MappedFile map = HAMI_TRY(MappedFile::Map(fd, spec.size, true, path));
  HAMI_TRY(format.Fill(map.data()));
  InitializedWord(map.data(), spec)->store(spec.initialized_value, std::memory_order_release);
  return OkStatus();
}

// With the init lock held exclusively: makes the file unless it is published, or refuses it.
// Returns whether it made it.
Result<bool> MakeUnlessPublished(int fd, const std::string& path, const VersionedFileSpec& spec,
                                 const VersionedFileFormat& format) {
  const off_t size = HAMI_TRY(FileSize(fd, path));
  if (Published(fd, size, spec)) return false;
  if (size == 0 || LeftUnfinished(fd, size, spec)) {
    // A new file is shared by every user of the machine or container.
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid()) fchmod(fd, 0666);
  } else {
    // Junk or another version is refused; a valid header never published had a maker that
    // died while making it.
    HAMI_TRY(CheckHeader(fd, size, path, spec, format));
  }
  HAMI_TRY(Initialize(fd, path, spec, format));
  return true;
}

Error LockError(const char* doing, const VersionedFileSpec& spec, const std::string& path,
                int err) {
  return Error::FromErrno(std::string(doing) + " " + Name(spec, path), err);
}

}  // namespace

InitLockHold& InitLockHold::operator=(InitLockHold&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = std::exchange(o.fd_, -1);
    byte_ = std::exchange(o.byte_, 0);
  }
  return *this;
}

void InitLockHold::Reset() {
  if (fd_ >= 0) OfdLockByte(fd_, byte_, F_UNLCK, LockWait::kNo);
  fd_ = -1;
}

Result<VersionedFile> OpenVersionedFile(const std::string& path, const VersionedFileSpec& spec,
                                        const VersionedFileFormat& format, FileCreate create,
                                        MapAccess access) {
  if (create == FileCreate::kIfMissing && access == MapAccess::kReadOnly) {
    return Error(ErrorCode::kInvalidArgument,
                 "creating " + Name(spec, path) + " needs read-write access");
  }
  int flags = access == MapAccess::kReadOnly ? O_RDONLY : O_RDWR;
  if (create == FileCreate::kIfMissing) flags |= O_CREAT;
  VersionedFile out;
  out.fd = HAMI_TRY(OpenRegularFile(path, flags, 0666));
  const int fd = out.fd.get();
  if (spec.locking == InitLocking::kEveryOpener) {
    if (int err = OfdLockByte(fd, spec.init_lock, F_WRLCK, LockWait::kYes); err != 0) {
      return LockError("locking", spec, path, err);
    }
    out.init_lock = InitLockHold(fd, spec.init_lock);
  }
  off_t size = HAMI_TRY(FileSize(fd, path));

  if (!Published(fd, size, spec)) {
    if (create == FileCreate::kNever) {
      if (size == 0) return Error(ErrorCode::kNotFound, Name(spec, path) + " is empty");
      if (LeftUnfinished(fd, size, spec)) return NotPublished(spec, path);
      // Anything else is refused below, by its header.
    } else if (spec.locking == InitLocking::kEveryOpener) {
      out.initialized_here = HAMI_TRY(MakeUnlessPublished(fd, path, spec, format));
    } else {
      // Make it, or wait for whoever is making it.
      for (int round = 0;; ++round) {
        int err = OfdLockByte(fd, spec.init_lock, F_WRLCK, LockWait::kNo);
        if (err == 0) {
          InitLockHold held(fd, spec.init_lock);
          out.initialized_here = HAMI_TRY(MakeUnlessPublished(fd, path, spec, format));
          break;
        }
        if (err != EAGAIN && err != EACCES) return LockError("locking", spec, path, err);
        if (round > 0) sched_yield();  // the maker died: let the other waiters go first
        err = OfdLockByte(fd, spec.init_lock, F_RDLCK, LockWait::kYes);
        if (err != 0) return LockError("waiting for", spec, path, err);
        OfdLockByte(fd, spec.init_lock, F_UNLCK, LockWait::kNo);
        if (Published(fd, HAMI_TRY(FileSize(fd, path)), spec)) break;
      }
    }
    size = HAMI_TRY(FileSize(fd, path));
  }
  // Not the size of a usable file: say why from its header, if it has one.
  if (size != off_t(spec.size)) HAMI_TRY(CheckHeader(fd, size, path, spec, format));

  // Map it and validate the header in place (every opener of a burst pays for this).
  out.map = HAMI_TRY(MappedFile::Map(fd, spec.size, access == MapAccess::kReadWrite, path));
  HAMI_TRY(format.Validate(out.map.data(), uint64_t(size)));
  if (InitializedWord(out.map.data(), spec)->load(std::memory_order_acquire) !=
      spec.initialized_value) {
    return NotPublished(spec, path);
  }
  return out;
}

Result<VersionedFile> CreateAnonymousVersionedFile(const char* name, const VersionedFileSpec& spec,
                                                   const VersionedFileFormat& format) {
  const std::string path = std::string("memfd:") + name;
  VersionedFile out;
  out.fd.Reset(memfd_create(name, MFD_CLOEXEC));
  if (!out.fd.valid()) return Error::FromErrno("memfd_create for " + Name(spec, path));
  HAMI_TRY(SizeWithBlocks(out.fd.get(), path, spec));
  out.map = HAMI_TRY(MappedFile::Map(out.fd.get(), spec.size, true, path));
  HAMI_TRY(format.Fill(out.map.data()));
  InitializedWord(out.map.data(), spec)->store(spec.initialized_value, std::memory_order_release);
  out.initialized_here = true;
  return out;
}

Status ReinitializeVersionedFile(VersionedFile& file, const std::string& path,
                                 const VersionedFileSpec& spec, const VersionedFileFormat& format) {
  file.map.Reset();
  HAMI_TRY(Initialize(file.fd.get(), path, spec, format));
  file.map = HAMI_TRY(MappedFile::Map(file.fd.get(), spec.size, true, path));
  file.initialized_here = true;
  return OkStatus();
}

}  // namespace hami
