// TarWriter: a POSIX ustar archive built in memory, for image layers and OCI image-layout
// tarballs. Every entry is owned by root (uid/gid 0, "root"), dated kTarMtime, so the same
// entries always make the same bytes (and the same digest).
//
// Paths are relative ("usr/bin", never "/usr/bin"), made of non-empty components, none of
// them "." or ".."; a directory is written with a trailing '/'. A path longer than 100 bytes
// is split at a '/' into ustar's prefix (155 bytes) and name (100 bytes); one that cannot be
// split that way, a symbolic link's target over 100 bytes, a mode beyond 07777 and a file of
// 8 GiB or more are refused (kInvalidArgument, naming the entry). Entries are written in the
// order they are added; parents are not added implicitly.
//
// Thread safety: one thread at a time per writer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::sim::oci {

// The modification time of every entry (seconds since the epoch): fixed, so that archives
// are reproducible.
inline constexpr int64_t kTarMtime = 0;

class TarWriter {
 public:
  Status AddDirectory(std::string_view path, mode_t mode);
  Status AddFile(std::string_view path, mode_t mode, std::string_view content);
  Status AddSymlink(std::string_view path, std::string_view target);

  // Ends the archive (two zero blocks) and returns it; the writer starts empty again.
  std::string Finish();

 private:
  Status AddEntry(std::string_view path, char type, mode_t mode, std::string_view link,
                  std::string_view content);
  std::string out_;
};

}  // namespace hami::sim::oci
