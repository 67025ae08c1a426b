#include "sim/oci/tar.h"

#include <array>
#include <cstdio>
#include <cstring>

#include "common/strings.h"

namespace hami::sim::oci {

namespace {

constexpr size_t kBlock = 512;
constexpr size_t kNameSize = 100;
constexpr size_t kPrefixSize = 155;
constexpr size_t kLinkSize = 100;
constexpr uint64_t kMaxSize = (uint64_t{1} << 33) - 1;  // 11 octal digits

// Field offsets of the ustar header (POSIX.1-1988, pax's "ustar Interchange Format").
constexpr size_t kNameAt = 0, kModeAt = 100, kUidAt = 108, kGidAt = 116, kSizeAt = 124,
                 kMtimeAt = 136, kChecksumAt = 148, kTypeAt = 156, kLinkAt = 157, kMagicAt = 257,
                 kVersionAt = 263, kUnameAt = 265, kGnameAt = 297, kDevMajorAt = 329,
                 kDevMinorAt = 337, kPrefixAt = 345;

using Header = std::array<char, kBlock>;

void Put(Header& h, size_t at, std::string_view text) {
  if (text.empty()) return;  // an empty view's data() may be null, which memcpy must not get
  std::memcpy(h.data() + at, text.data(), text.size());
}

// `width - 1` octal digits, zero-padded, then a NUL.
void PutOctal(Header& h, size_t at, size_t width, uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%0*llo", int(width - 1), static_cast<unsigned long long>(value));
  std::memcpy(h.data() + at, buf, width - 1);
  h[at + width - 1] = '\0';
}

Status CheckPath(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') {
    return Error(
        ErrorCode::kInvalidArgument,
        "tar entry '" + std::string(path) + "': a path must be relative and must not end in '/'");
  }
  for (std::string_view part : SplitString(path, '/', false)) {
    if (part.empty() || part == "." || part == "..") {
      return Error(ErrorCode::kInvalidArgument, "tar entry '" + std::string(path) +
                                                    "': empty, '.' or '..' component in the path");
    }
  }
  return OkStatus();
}

}  // namespace

Status TarWriter::AddDirectory(std::string_view path, mode_t mode) {
  HAMI_TRY(CheckPath(path));
  return AddEntry(std::string(path) + "/", '5', mode, {}, {});
}

Status TarWriter::AddFile(std::string_view path, mode_t mode, std::string_view content) {
  HAMI_TRY(CheckPath(path));
  return AddEntry(path, '0', mode, {}, content);
}

Status TarWriter::AddSymlink(std::string_view path, std::string_view target) {
  HAMI_TRY(CheckPath(path));
  if (target.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "tar entry '" + std::string(path) + "': empty symbolic link target");
  }
  return AddEntry(path, '2', 0777, target, {});
}

Status TarWriter::AddEntry(std::string_view path, char type, mode_t mode, std::string_view link,
                           std::string_view content) {
  const std::string what = "tar entry '" + std::string(path) + "'";
  if ((mode & ~mode_t{07777}) != 0) {
    return Error(ErrorCode::kInvalidArgument, what + ": mode beyond 07777");
  }
  if (link.size() > kLinkSize) {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": symbolic link target longer than ustar's 100 bytes");
  }
  if (content.size() > kMaxSize) {
    return Error(ErrorCode::kInvalidArgument, what + ": 8 GiB or more, beyond ustar's size field");
  }
  // Name and prefix: the whole path in name when it fits, else split at the last '/' that
  // leaves at most 100 bytes after it and 155 before it.
  std::string_view name = path, prefix;
  if (path.size() > kNameSize) {
    size_t cut = std::string_view::npos;
    for (size_t i = path.rfind('/', path.size() - 2); i != std::string_view::npos && i > 0;
         i = path.rfind('/', i - 1)) {
      if (path.size() - i - 1 > kNameSize) break;
      if (i <= kPrefixSize) {
        cut = i;
        break;
      }
    }
    if (cut == std::string_view::npos) {
      return Error(ErrorCode::kInvalidArgument,
                   what +
                       ": the path cannot be split into ustar's 155-byte prefix and "
                       "100-byte name");
    }
    prefix = path.substr(0, cut);
    name = path.substr(cut + 1);
  }

  Header h{};
  Put(h, kNameAt, name);
  PutOctal(h, kModeAt, 8, mode);
  PutOctal(h, kUidAt, 8, 0);
  PutOctal(h, kGidAt, 8, 0);
  PutOctal(h, kSizeAt, 12, content.size());
  PutOctal(h, kMtimeAt, 12, uint64_t(kTarMtime));
  h[kTypeAt] = type;
  Put(h, kLinkAt, link);
  Put(h, kMagicAt, std::string_view("ustar\0", 6));
  Put(h, kVersionAt, "00");
  Put(h, kUnameAt, "root");
  Put(h, kGnameAt, "root");
  PutOctal(h, kDevMajorAt, 8, 0);
  PutOctal(h, kDevMinorAt, 8, 0);
  Put(h, kPrefixAt, prefix);
  // The checksum: the sum of the header's bytes (unsigned) with its own field read as
  // spaces; six octal digits, a NUL and a space.
  std::memset(h.data() + kChecksumAt, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  PutOctal(h, kChecksumAt, 7, sum);
  h[kChecksumAt + 7] = ' ';

  out_.append(h.data(), h.size());
  out_.append(content);
  out_.append((kBlock - content.size() % kBlock) % kBlock, '\0');
  return OkStatus();
}

std::string TarWriter::Finish() {
  out_.append(2 * kBlock, '\0');
  return std::exchange(out_, std::string());
}

}  // namespace hami::sim::oci
