// Fuzzes the shared region's header validation: arbitrary bytes as a region file's header
// must be refused or accepted without crashing, a refused file must be left exactly as it
// was (whether the opener may create regions or not), and a header the validator refuses
// must never be opened.
//
// Input: its first sizeof(Header) bytes become the file's header; the rest of the file is
// zero. When the input is longer than a header, the byte after it chooses the file's size:
// even, exactly the size of the layout (to reach the checks after the size check); odd, the
// input's own length. A shorter input makes a file of its own length.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/file.h"
#include "region/region.h"

namespace {

using hami::region::Access;
using hami::region::Create;
using hami::region::Region;
using hami::region::layout::File;
using hami::region::layout::Header;

std::string Contents(const std::string& path) {
  auto s = hami::ReadFileToString(path, 64 << 20);
  if (!s.ok()) std::abort();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static char dir[] = "/tmp/hami-region-fuzz-XXXXXX";
  static const std::string path = [] {
    if (mkdtemp(dir) == nullptr) std::abort();
    std::atexit([] {
      unlink((std::string(dir) + "/usage.cache").c_str());
      rmdir(dir);
    });
    return std::string(dir) + "/usage.cache";
  }();
  const size_t n = std::min(size, sizeof(Header));
  const uint64_t file_size =
      size > sizeof(Header) && data[sizeof(Header)] % 2 == 0 ? sizeof(File) : size;

  alignas(Header) unsigned char header[sizeof(Header)] = {};
  std::memcpy(header, data, n);
  const bool valid =
      hami::region::ValidateHeader(*reinterpret_cast<const Header*>(header), file_size, path).ok();

  {
    auto fd = hami::OpenRegularFile(path, O_CREAT | O_RDWR | O_TRUNC);
    if (!fd.ok()) std::abort();
    if (ftruncate(fd->get(), off_t(file_size)) != 0) std::abort();
    size_t written = std::min<uint64_t>(n, file_size);
    if (pwrite(fd->get(), data, written, 0) != ssize_t(written)) std::abort();
  }
  const std::string before = Contents(path);

  for (Access access : {Access::kReadOnly, Access::kReadWrite}) {
    auto r = Region::Open(path, nullptr, Create::kNever, nullptr, access);
    if (r.ok() && !valid) std::abort();  // opened a header the validator refuses
    if (!r.ok() && Contents(path) != before) std::abort();
  }
  hami::region::PolicySpec stamp;
  stamp.device_count = 1;
  auto r = Region::Open(path, &stamp, Create::kIfMissing, nullptr);
  if (!r.ok() && Contents(path) != before) std::abort();
  return 0;
}
