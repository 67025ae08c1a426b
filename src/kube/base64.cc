#include "kube/base64.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "common/strings.h"

namespace hami::kube {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (size_t i = 0; i < kAlphabet.size(); ++i) t[uint8_t(kAlphabet[i])] = int8_t(i);
  return t;
}
constexpr std::array<int8_t, 256> kDecode = MakeDecodeTable();

Error NotBase64(std::string_view why) {
  return Error(ErrorCode::kInvalidArgument, "not base64: " + std::string(why));
}

std::string DescribeChar(char c) {
  const auto u = uint8_t(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  return "byte 0x" + HexEncode(std::span<const uint8_t>(&u, 1));
}

}  // namespace

Result<std::string> DecodeBase64(std::string_view text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t quad[4];
  int n = 0;        // symbols in the current quantum
  int padding = 0;  // '=' seen in the current quantum
  bool ended = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\r' || c == '\n') continue;
    if (ended) {
      return NotBase64("data after the final '=' padding at offset " + std::to_string(i));
    }
    if (c == '=') {
      if (n < 2) return NotBase64("misplaced '=' at offset " + std::to_string(i));
      ++padding;
      quad[n++] = 0;
    } else {
      int8_t v = kDecode[uint8_t(c)];
      if (v < 0) return NotBase64(DescribeChar(c) + " at offset " + std::to_string(i));
      if (padding > 0) return NotBase64("data after '=' at offset " + std::to_string(i));
      quad[n++] = uint32_t(v);
    }
    if (n == 4) {
      uint32_t bits = quad[0] << 18 | quad[1] << 12 | quad[2] << 6 | quad[3];
      out.push_back(char(bits >> 16));
      if (padding < 2) out.push_back(char(bits >> 8 & 0xff));
      if (padding < 1) out.push_back(char(bits & 0xff));
      ended = padding > 0;
      n = 0;
    }
  }
  if (n != 0) return NotBase64("length is not a multiple of 4 (missing '=' padding?)");
  return out;
}

std::string EncodeBase64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t bits = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 |
                    uint8_t(bytes[i + 2]);
    out.push_back(kAlphabet[bits >> 18]);
    out.push_back(kAlphabet[bits >> 12 & 63]);
    out.push_back(kAlphabet[bits >> 6 & 63]);
    out.push_back(kAlphabet[bits & 63]);
  }
  size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t bits = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) bits |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[bits >> 18]);
    out.push_back(kAlphabet[bits >> 12 & 63]);
    out.push_back(rest == 2 ? kAlphabet[bits >> 6 & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace hami::kube
