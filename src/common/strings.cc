#include "common/strings.h"

#include <cstdio>

namespace hami {

namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The character as an error message shows it: 'x', or \xNN when not printable.
std::string ShowChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f && u != '\\') return std::string("'") + c + "'";
  return std::string("\\x") + kHexDigits[u >> 4] + kHexDigits[u & 15];
}

}  // namespace

std::vector<std::string_view> SplitString(std::string_view s, char sep, bool skip_empty) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (;;) {
    const size_t end = s.find(sep, begin);
    const std::string_view part =
        s.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
    if (!skip_empty || !part.empty()) parts.push_back(part);
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

std::string HexEncode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += kHexDigits[b >> 4];
    out += kHexDigits[b & 15];
  }
  return out;
}

Result<std::vector<uint8_t>> HexDecode(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (HexValue(text[i]) < 0) {
      return Error(ErrorCode::kInvalidArgument, "hex text: character " + ShowChar(text[i]) +
                                                    " at offset " + std::to_string(i) +
                                                    " is not a hex digit");
    }
  }
  if (text.size() % 2 != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "hex text: odd number of digits (" + std::to_string(text.size()) + ")");
  }
  std::vector<uint8_t> out(text.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>(HexValue(text[2 * i]) << 4 | HexValue(text[2 * i + 1]));
  }
  return out;
}

std::string FormatHex64(uint64_t v) {
  std::string out = "0x0000000000000000";
  for (size_t i = out.size(); v != 0; v >>= 4) out[--i] = kHexDigits[v & 15];
  return out;
}

}  // namespace hami
