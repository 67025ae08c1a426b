// Fuzzes state-file validation: arbitrary bytes at the start of a state-sized file must be
// refused or accepted without crashing, and a refused file must be left exactly as it was.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/file.h"
#include "sim/state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    char dir[] = "/tmp/hami-state-fuzz-XXXXXX";
    if (mkdtemp(dir) == nullptr) std::abort();
    return std::string(dir) + "/state";
  }();
  size_t n = std::min(size, sizeof(hami::sim::state::Header));
  {
    auto fd = hami::OpenRegularFile(path, O_CREAT | O_RDWR | O_TRUNC);
    if (!fd.ok()) std::abort();
    // Bytes beyond the input stay zero; the size is the real layout's when the input says
    // so (its first byte odd), to reach the checks after the size check.
    off_t file_size = size > 0 && (data[0] & 1) ? off_t(sizeof(hami::sim::state::File)) : off_t(n);
    if (ftruncate(fd->get(), file_size) != 0 || pwrite(fd->get(), data, n, 0) != ssize_t(n)) {
      std::abort();
    }
  }
  std::string before = *hami::ReadFileToString(path, 64 << 20);
  auto state = hami::sim::SharedState::OpenExisting(path);
  if (!state.ok() && *hami::ReadFileToString(path, 64 << 20) != before) std::abort();
  return 0;
}
