// Fuzzes the strict parsers: they must never crash, a value they accept must format back to
// an equivalent number, and hex text they accept must encode back to itself (lower-cased).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/parse.h"
#include "common/strings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto u = hami::ParseUint64(text, "fuzz");
  if (u.ok() && std::to_string(*u).size() > text.size()) std::abort();
  (void)hami::ParseInt64(text, "fuzz");
  auto s = hami::ParseSize(text, "fuzz");
  if (s.ok() && u.ok() && *s != *u) std::abort();  // no suffix: bytes
  (void)hami::ParseBool(text, "fuzz");
  auto bytes = hami::HexDecode(text);
  if (bytes.ok()) {
    std::string again = hami::HexEncode(*bytes);
    if (again.size() != text.size()) std::abort();
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i] >= 'A' && text[i] <= 'F' ? char(text[i] - 'A' + 'a') : text[i];
      if (again[i] != c) std::abort();
    }
  }
  return 0;
}
