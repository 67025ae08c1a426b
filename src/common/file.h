// Files: safe opening, whole-file reads and RAII memory maps.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hami {

// Whether a path may end in a symbolic link. kFollow is for files a trusted party publishes
// as links (Kubernetes projects service-account files that way); the default refuses them.
enum class Symlinks { kRefuse, kFollow };

// Opens `path` with O_NOFOLLOW (unless `symlinks` is kFollow) | O_CLOEXEC plus `flags` (and
// `mode` when creating), then checks that it is a regular file. A symlink or any other kind
// of file is refused with an error naming the path (kPermission), never followed.
Result<UniqueFd> OpenRegularFile(const std::string& path, int flags, mode_t mode = 0600,
                                 Symlinks symlinks = Symlinks::kRefuse);

// Reads a whole file of at most `max_bytes` (larger is an error naming the file).
Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes = 1 << 20,
                                     Symlinks symlinks = Symlinks::kRefuse);

// Writes all of `data`, retrying on EINTR and short writes.
Status WriteAll(int fd, std::string_view data);

// One shared mapping of a file, unmapped on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  MappedFile& operator=(MappedFile&& o) noexcept;
  ~MappedFile() { Reset(); }

  // Maps `size` bytes of `fd` from offset 0, MAP_SHARED, read-write or read-only.
  static Result<MappedFile> Map(int fd, size_t size, bool writable, std::string_view what);

  void* data() const { return addr_; }
  size_t size() const { return size_; }
  void Reset();

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hami
