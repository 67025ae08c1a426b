// The host-PID broker's wire protocol, version 1: the whole specification, as pure functions.
//
// One connection carries one transaction over a Unix stream socket: the client sends one
// request frame, the server answers with one response frame and closes. Every integer is
// unsigned and big-endian.
//
//   request  (8 bytes):  "HPID" | u16 version | u16 command
//   response (12 bytes): "HPID" | u16 version | u16 status | u32 pid
//
// Command 1 (kGetPid) asks for the caller's own PID as the server's PID namespace sees it; the
// server reads it from the connected socket's peer credentials (SO_PEERCRED). The request
// names no PID, so no request can learn another process's PID. Status 0 is success (pid > 0);
// status 1 answers an invalid request (pid 0).
//
// Framing rule: frames have fixed sizes and a reader reads exactly one frame. Bytes after it
// on the same connection are never read, have no effect, and are discarded when the
// connection closes. A connection that ends before a whole frame has arrived carries no
// request (or no response): the server closes it without an answer, the client trusts
// nothing from it.
//
// Thread safety: everything here is constexpr or pure.
#pragma once

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>

namespace hami::broker {

inline constexpr uint8_t kMagic[4] = {'H', 'P', 'I', 'D'};
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kRequestSize = 8;
inline constexpr size_t kResponseSize = 12;

enum class Command : uint16_t { kGetPid = 1 };
enum class Status : uint16_t { kOk = 0, kInvalidRequest = 1 };

struct Request {
  uint16_t version = kVersion;
  uint16_t command = uint16_t(Command::kGetPid);
};

struct Response {
  uint16_t version = kVersion;
  uint16_t status = uint16_t(Status::kOk);
  uint32_t pid = 0;
};

using RequestFrame = std::array<uint8_t, kRequestSize>;
using ResponseFrame = std::array<uint8_t, kResponseSize>;

// Why a frame was not accepted. This stays a codec-level enum instead of the project's Error:
// the codec is constexpr (frames are encoded and checked at compile time) and an Error is not a
// literal type; each value names one rule of the wire format, which the client reports as is
// (ClientResult::frame_error) and the fuzz targets check exactly. Callers that need an Error
// make one from FrameErrorName.
enum class FrameError : uint8_t {
  kNone = 0,
  kTruncated,   // fewer bytes than a frame
  kBadMagic,    // not "HPID"
  kBadVersion,  // a version this side does not speak
  kBadCommand,  // request: a command version 1 does not define
  kRefused,     // response: a status other than success
  kBadPid,      // response: success with PID 0 or above INT_MAX
};

constexpr const char* FrameErrorName(FrameError e) {
  switch (e) {
    case FrameError::kNone:
      return "none";
    case FrameError::kTruncated:
      return "truncated";
    case FrameError::kBadMagic:
      return "bad_magic";
    case FrameError::kBadVersion:
      return "bad_version";
    case FrameError::kBadCommand:
      return "bad_command";
    case FrameError::kRefused:
      return "refused";
    case FrameError::kBadPid:
      return "bad_pid";
  }
  return "unknown";
}

namespace wire {
constexpr void Put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
constexpr void Put32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}
constexpr uint16_t Get16(const uint8_t* p) { return uint16_t((unsigned(p[0]) << 8) | p[1]); }
constexpr uint32_t Get32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}
constexpr bool HasMagic(const uint8_t* p) {
  return p[0] == kMagic[0] && p[1] == kMagic[1] && p[2] == kMagic[2] && p[3] == kMagic[3];
}
}  // namespace wire

constexpr RequestFrame EncodeRequest(Request r = {}) {
  RequestFrame f{};
  for (size_t i = 0; i < 4; ++i) f[i] = kMagic[i];
  wire::Put16(&f[4], r.version);
  wire::Put16(&f[6], r.command);
  return f;
}

constexpr ResponseFrame EncodeResponse(Response r) {
  ResponseFrame f{};
  for (size_t i = 0; i < 4; ++i) f[i] = kMagic[i];
  wire::Put16(&f[4], r.version);
  wire::Put16(&f[6], r.status);
  wire::Put32(&f[8], r.pid);
  return f;
}

// The server's answers.
constexpr ResponseFrame EncodeSuccess(uint32_t pid) {
  return EncodeResponse({kVersion, uint16_t(Status::kOk), pid});
}
constexpr ResponseFrame EncodeInvalid() {
  return EncodeResponse({kVersion, uint16_t(Status::kInvalidRequest), 0});
}

struct DecodedRequest {
  FrameError error = FrameError::kTruncated;
  Request request;
};

// Decodes the request at the start of `bytes` (bytes past the frame are ignored, per the
// framing rule). Checks magic, then version, then command.
constexpr DecodedRequest DecodeRequest(std::span<const uint8_t> bytes) {
  DecodedRequest d;
  if (bytes.size() < kRequestSize) return d;
  const uint8_t* p = bytes.data();
  d.request.version = wire::Get16(p + 4);
  d.request.command = wire::Get16(p + 6);
  if (!wire::HasMagic(p)) {
    d.error = FrameError::kBadMagic;
  } else if (d.request.version != kVersion) {
    d.error = FrameError::kBadVersion;
  } else if (d.request.command != uint16_t(Command::kGetPid)) {
    d.error = FrameError::kBadCommand;
  } else {
    d.error = FrameError::kNone;
  }
  return d;
}

struct DecodedResponse {
  FrameError error = FrameError::kTruncated;
  Response response;
};

// Decodes and validates the response at the start of `bytes`: magic, version, status, and
// for a success a PID in 1..INT_MAX. Only error == kNone carries a PID to trust.
constexpr DecodedResponse DecodeResponse(std::span<const uint8_t> bytes) {
  DecodedResponse d;
  if (bytes.size() < kResponseSize) return d;
  const uint8_t* p = bytes.data();
  d.response.version = wire::Get16(p + 4);
  d.response.status = wire::Get16(p + 6);
  d.response.pid = wire::Get32(p + 8);
  if (!wire::HasMagic(p)) {
    d.error = FrameError::kBadMagic;
  } else if (d.response.version != kVersion) {
    d.error = FrameError::kBadVersion;
  } else if (d.response.status != uint16_t(Status::kOk)) {
    d.error = FrameError::kRefused;
  } else if (d.response.pid == 0 || d.response.pid > uint32_t(INT_MAX)) {
    d.error = FrameError::kBadPid;
  } else {
    d.error = FrameError::kNone;
  }
  return d;
}

}  // namespace hami::broker
