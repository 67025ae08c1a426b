// Fuzzes the strict parsers: they must never crash, and a value they accept must format
// back to an equivalent number.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto u = hami::ParseUint64(text, "fuzz");
  if (u.ok() && std::to_string(*u).size() > text.size()) std::abort();
  (void)hami::ParseInt64(text, "fuzz");
  auto s = hami::ParseSize(text, "fuzz");
  if (s.ok() && u.ok() && *s != *u) std::abort();  // no suffix: bytes
  (void)hami::ParseBool(text, "fuzz");
  return 0;
}
