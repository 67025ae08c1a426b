// A versioned shared file: one file of a fixed size that many processes map, made by whichever
// opener finds it missing. Its header starts with a magic and carries a version, sizes and a
// 32-bit "initialized" word; the layout's own code validates and fills it (VersionedFileFormat),
// this helper does the rest, the same way for every such file:
//
//   - opens it as a regular file (common/file.h: no symlinks, O_CLOEXEC), creating it if asked;
//   - makes it while holding the init lock (an OFD lock on one byte, common/ofd_lock.h)
//     exclusively: truncates it to zero (so nothing stale survives), sizes it, lets the format
//     fill it, and stores the initialized word last with release order;
//   - makes it again when its maker died before publishing it: a file of the full size whose
//     magic is still all zero, or a valid header whose initialized word was never stored;
//   - refuses anything else that is not published, or is of another size, by the format's
//     Validate: kIncompatible for a valid file of another version, kCorrupt for junk. Every
//     error names the kind of file and its path;
//   - waits for a concurrent maker instead of racing it;
//   - maps it (MappedFile) and validates the mapped header once more.
//
// Two lock disciplines (VersionedFileSpec::locking):
//   kCreatorsOnly: an opener that finds the file published takes no lock at all (a burst of
//     openers costs one pread and one mmap each). A maker holds the init lock exclusively;
//     openers that find it unpublished wait for a shared lock, so all of them wake when it is
//     published, and one makes it itself only if the maker died first.
//   kEveryOpener: every opener holds the init lock exclusively from before it reads the header
//     until it releases VersionedFile::init_lock, so it can decide, alone, what to do with a
//     published file (make it again for another configuration, take further locks).
//
// Thread safety: the functions are reentrant; the OFD lock excludes other opens of the file,
// including other threads' opens in this process. Not async-signal-safe (they allocate).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "common/file.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace hami {

enum class InitLocking { kCreatorsOnly, kEveryOpener };
enum class FileCreate { kNever, kIfMissing };
enum class MapAccess { kReadOnly, kReadWrite };

// What the helper needs to know about one kind of file's layout.
struct VersionedFileSpec {
  const char* kind;           // "shared region": starts every error message, then the path
  size_t size;                // the one size of a usable file
  size_t header_size;         // Validate reads this many bytes from offset 0 (<= size)
  size_t magic_size;          // the magic's bytes at offset 0 (at most 16); all zero: unfinished
  size_t initialized_offset;  // of a std::atomic<uint32_t> in the header, 4-byte aligned
  uint32_t initialized_value;
  off_t init_lock;  // the byte of the OFD init lock
  InitLocking locking;
};

// The layout's own code. Both functions are called with the file's size checked only as far
// as stated; they must not keep the pointers.
class VersionedFileFormat {
 public:
  // Checks `header` (spec.header_size bytes from offset 0, suitably aligned) of a file of
  // `file_size` bytes against this build: magic, version, sizes, fingerprints. kIncompatible
  // for a valid file of another version or size, kCorrupt for anything else; the message
  // names the file, what was found and what was expected.
  virtual Status Validate(const void* header, uint64_t file_size) const = 0;
  // Writes a new file's contents into `file`: spec.size zero bytes, mapped read-write.
  // Everything but the initialized word, which the helper stores after Fill returns.
  virtual Status Fill(void* file) const = 0;

 protected:
  ~VersionedFileFormat() = default;
};

// Holds one OFD byte lock on a descriptor it does not own, and clears it on destruction or
// Reset. The descriptor must stay open while it is held.
class InitLockHold {
 public:
  InitLockHold() = default;
  InitLockHold(int fd, off_t byte) : fd_(fd), byte_(byte) {}
  InitLockHold(const InitLockHold&) = delete;
  InitLockHold& operator=(const InitLockHold&) = delete;
  InitLockHold(InitLockHold&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), byte_(std::exchange(o.byte_, 0)) {}
  InitLockHold& operator=(InitLockHold&& o) noexcept;
  ~InitLockHold() { Reset(); }

  bool held() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
  off_t byte_ = 0;
};

// An open, validated, published versioned file.
struct VersionedFile {
  UniqueFd fd;
  MappedFile map;                 // spec.size bytes, read-only or read-write as asked
  bool initialized_here = false;  // this open made (or made again) the file
  // kEveryOpener: the init lock, held exclusively until Reset (or destruction: it is declared
  // last, so it is released before `fd` closes). kCreatorsOnly: never held.
  InitLockHold init_lock;
};

// Opens the versioned file at `path` as described above. kIfMissing needs kReadWrite
// (kInvalidArgument otherwise). With kNever, an empty file is kNotFound and one not yet
// published is kBusy (kCreatorsOnly: its maker may still be at work) or kCorrupt
// (kEveryOpener: its maker died, since nobody else holds the lock).
Result<VersionedFile> OpenVersionedFile(const std::string& path, const VersionedFileSpec& spec,
                                        const VersionedFileFormat& format, FileCreate create,
                                        MapAccess access);

// Makes a new file of the format in memory (memfd_create, named `name` in /proc/PID/fd and
// "memfd:<name>" in messages): sized with its memory reserved, filled and published, mapped
// read-write. It is on no file system (nobody else can open it by a path), so it needs no
// writable directory and no lock.
Result<VersionedFile> CreateAnonymousVersionedFile(const char* name, const VersionedFileSpec& spec,
                                                   const VersionedFileFormat& format);

// Makes an open file again from scratch for `format` and maps it again. The caller holds the
// init lock exclusively (a kEveryOpener file's `init_lock`) and has made sure no other
// process uses the file (it is zeroed under their mappings otherwise).
Status ReinitializeVersionedFile(VersionedFile& file, const std::string& path,
                                 const VersionedFileSpec& spec, const VersionedFileFormat& format);

}  // namespace hami
