#include "sim/kube/websocket.h"

#include <openssl/evp.h>

#include <algorithm>

#include "kube/base64.h"

namespace hami::sim::kube::websocket {

namespace {

constexpr std::string_view kGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

bool IsControl(uint8_t opcode) { return (opcode & 0x8) != 0; }

bool Known(uint8_t opcode) {
  switch (opcode) {
    case 0x0:
    case 0x1:
    case 0x2:
    case 0x8:
    case 0x9:
    case 0xA:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string AcceptKey(std::string_view key) {
  const std::string text = std::string(key) + std::string(kGuid);
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned int md_size = 0;
  if (EVP_Digest(text.data(), text.size(), md, &md_size, EVP_sha1(), nullptr) != 1) return "";
  return hami::kube::EncodeBase64(std::string_view(reinterpret_cast<const char*>(md), md_size));
}

bool ValidKey(std::string_view key) {
  if (key.size() != 24) return false;
  auto decoded = hami::kube::DecodeBase64(key);
  return decoded.ok() && decoded->size() == 16;
}

std::vector<std::string> HeaderTokens(std::string_view value) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view token = value.substr(pos, comma - pos);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
      token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty()) out.emplace_back(token);
    pos = comma + 1;
  }
  return out;
}

std::string EncodeFrame(Opcode opcode, std::string_view payload, bool fin,
                        std::optional<std::array<uint8_t, 4>> mask) {
  std::string out;
  out.reserve(payload.size() + 14);
  out += char((fin ? 0x80 : 0) | uint8_t(opcode));
  const uint8_t mask_bit = mask ? 0x80 : 0;
  const uint64_t n = payload.size();
  if (n <= 125) {
    out += char(mask_bit | n);
  } else if (n <= 0xffff) {
    out += char(mask_bit | 126);
    out += char(n >> 8);
    out += char(n & 0xff);
  } else {
    out += char(mask_bit | 127);
    for (int shift = 56; shift >= 0; shift -= 8) out += char((n >> shift) & 0xff);
  }
  if (!mask) {
    out.append(payload);
    return out;
  }
  out.append(reinterpret_cast<const char*>(mask->data()), 4);
  const size_t start = out.size();
  out.append(payload);
  for (size_t i = 0; i < payload.size(); ++i) out[start + i] ^= char((*mask)[i & 3]);
  return out;
}

std::string ClosePayload(uint16_t code, std::string_view reason) {
  std::string out;
  out += char(code >> 8);
  out += char(code & 0xff);
  out.append(reason);
  return out;
}

Reader::Reader(Peer from, size_t max_message_bytes)
    : from_(from), max_message_bytes_(max_message_bytes) {}

void Reader::Append(std::string_view bytes) {
  if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(bytes);
}

Result<std::optional<Message>> Reader::Fail(uint16_t code, std::string why) {
  close_code_ = code;
  failed_ = Error(ErrorCode::kInvalidArgument, "websocket: " + why);
  return *failed_;
}

Result<std::optional<Message>> Reader::Next() {
  if (failed_) return *failed_;
  for (;;) {
    const std::string_view in = std::string_view(buffer_).substr(offset_);
    if (in.size() < 2) return std::optional<Message>();
    const uint8_t b0 = uint8_t(in[0]);
    const uint8_t b1 = uint8_t(in[1]);
    const bool fin = (b0 & 0x80) != 0;
    const uint8_t opcode = b0 & 0x0f;
    const bool masked = (b1 & 0x80) != 0;
    if ((b0 & 0x70) != 0)
      return Fail(kCloseProtocolError, "reserved bits set without an extension");
    if (!Known(opcode)) {
      return Fail(kCloseProtocolError, "unknown opcode " + std::to_string(opcode));
    }
    if (from_ == Peer::kClient && !masked) {
      return Fail(kCloseProtocolError, "a client frame is not masked");
    }
    if (from_ == Peer::kServer && masked)
      return Fail(kCloseProtocolError, "a server frame is masked");
    size_t header = 2;
    uint64_t length = b1 & 0x7f;
    if (length == 126) {
      if (in.size() < 4) return std::optional<Message>();
      length = uint64_t(uint8_t(in[2])) << 8 | uint8_t(in[3]);
      header = 4;
      if (length < 126) return Fail(kCloseProtocolError, "a 16-bit length below 126");
    } else if (length == 127) {
      if (in.size() < 10) return std::optional<Message>();
      length = 0;
      for (int i = 2; i < 10; ++i) length = length << 8 | uint8_t(in[size_t(i)]);
      header = 10;
      if (length >> 63) return Fail(kCloseProtocolError, "a 64-bit length with its top bit set");
      if (length <= 0xffff) return Fail(kCloseProtocolError, "a 64-bit length below 65536");
    }
    if (IsControl(opcode)) {
      if (!fin) return Fail(kCloseProtocolError, "a fragmented control frame");
      if (length > kMaxControlPayload) {
        return Fail(kCloseProtocolError,
                    "a control frame of " + std::to_string(length) + " bytes (at most 125)");
      }
    } else {
      if (opcode == 0x0 && !in_message_) {
        return Fail(kCloseProtocolError, "a continuation frame outside a message");
      }
      if (opcode != 0x0 && in_message_) {
        return Fail(kCloseProtocolError, "a new data frame inside a fragmented message");
      }
      if (length > max_message_bytes_ || partial_.size() + length > max_message_bytes_) {
        return Fail(kCloseTooBig,
                    "a message longer than " + std::to_string(max_message_bytes_) + " bytes");
      }
    }
    const size_t key_at = header;
    if (masked) header += 4;
    if (in.size() < header || in.size() - header < length) return std::optional<Message>();
    std::string payload(in.substr(header, size_t(length)));
    if (masked) {
      const std::string_view key = in.substr(key_at, 4);
      for (size_t i = 0; i < payload.size(); ++i) payload[i] ^= key[i & 3];
    }
    offset_ += header + size_t(length);
    if (IsControl(opcode)) {
      if (opcode == 0x8 && payload.size() == 1) {
        return Fail(kCloseProtocolError, "a close frame with a one-byte payload");
      }
      return std::optional<Message>(Message{Opcode(opcode), std::move(payload)});
    }
    if (opcode != 0x0) {
      message_opcode_ = Opcode(opcode);
      in_message_ = true;
    }
    partial_.append(payload);
    if (!fin) continue;
    in_message_ = false;
    Message m{message_opcode_, std::move(partial_)};
    partial_.clear();
    return std::optional<Message>(std::move(m));
  }
}

}  // namespace hami::sim::kube::websocket
