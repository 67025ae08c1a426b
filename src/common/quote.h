// Outside input as an error message shows it: in single quotes, each byte below 0x20, from
// 0x7f up, and '\' written as \xNN, cut after `max_bytes` bytes with "..." after it. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/strings.h"

namespace hami {

inline std::string QuoteInput(std::string_view text, size_t max_bytes = 80) {
  std::string out = "'";
  const size_t shown = text.size() > max_bytes ? max_bytes : text.size();
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      out += "\\x";
      out += HexEncode(std::span<const uint8_t>(&c, 1));
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < text.size()) out += "...";
  out += '\'';
  return out;
}

}  // namespace hami
