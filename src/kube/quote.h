// Outside input as an error message shows it: in single quotes, each byte below 0x20, from
// 0x7f up, and '\' written as \xNN, cut after `max_bytes` bytes with "..." after it. Pure.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hami::kube {

inline std::string QuoteInput(std::string_view text, size_t max_bytes = 80) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  const size_t shown = text.size() > max_bytes ? max_bytes : text.size();
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < text.size()) out += "...";
  out += '\'';
  return out;
}

}  // namespace hami::kube
