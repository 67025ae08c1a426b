#include "sim/kube/spdy.h"

#include <algorithm>

namespace hami::sim::kube::spdy {

namespace {

constexpr size_t kMaxHeaders = 1024;

void Put32(std::string& out, uint32_t v) {
  out += char(v >> 24);
  out += char((v >> 16) & 0xff);
  out += char((v >> 8) & 0xff);
  out += char(v & 0xff);
}

uint32_t Get32(std::string_view in, size_t at) {
  return uint32_t(uint8_t(in[at])) << 24 | uint32_t(uint8_t(in[at + 1])) << 16 |
         uint32_t(uint8_t(in[at + 2])) << 8 | uint32_t(uint8_t(in[at + 3]));
}

// The 8-byte header of a control frame, then its payload.
std::string Control(FrameType type, uint8_t flags, std::string_view payload) {
  std::string out;
  out.reserve(8 + payload.size());
  out += char(0x80 | (kVersion >> 8));
  out += char(kVersion & 0xff);
  out += char(uint16_t(type) >> 8);
  out += char(uint16_t(type) & 0xff);
  out += char(flags);
  out += char((payload.size() >> 16) & 0xff);
  out += char((payload.size() >> 8) & 0xff);
  out += char(payload.size() & 0xff);
  out.append(payload);
  return out;
}

std::string BuildDictionary() {
  // The names, each with a 32-bit length before it, then one run of common values (SPDY
  // draft 3, section 2.6.10.1).
  static constexpr std::string_view kWords[] = {"options",
                                                "head",
                                                "post",
                                                "put",
                                                "delete",
                                                "trace",
                                                "accept",
                                                "accept-charset",
                                                "accept-encoding",
                                                "accept-language",
                                                "accept-ranges",
                                                "age",
                                                "allow",
                                                "authorization",
                                                "cache-control",
                                                "connection",
                                                "content-base",
                                                "content-encoding",
                                                "content-language",
                                                "content-length",
                                                "content-location",
                                                "content-md5",
                                                "content-range",
                                                "content-type",
                                                "date",
                                                "etag",
                                                "expect",
                                                "expires",
                                                "from",
                                                "host",
                                                "if-match",
                                                "if-modified-since",
                                                "if-none-match",
                                                "if-range",
                                                "if-unmodified-since",
                                                "last-modified",
                                                "location",
                                                "max-forwards",
                                                "pragma",
                                                "proxy-authenticate",
                                                "proxy-authorization",
                                                "range",
                                                "referer",
                                                "retry-after",
                                                "server",
                                                "te",
                                                "trailer",
                                                "transfer-encoding",
                                                "upgrade",
                                                "user-agent",
                                                "vary",
                                                "via",
                                                "warning",
                                                "www-authenticate",
                                                "method",
                                                "get",
                                                "status",
                                                "200 OK",
                                                "version",
                                                "HTTP/1.1",
                                                "url",
                                                "public",
                                                "set-cookie",
                                                "keep-alive",
                                                "origin"};
  static constexpr std::string_view kTail =
      "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
      "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 "
      "Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 "
      "Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, "
      "Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/"
      "xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,"
      "sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";
  std::string d;
  for (std::string_view w : kWords) {
    Put32(d, uint32_t(w.size()));
    d.append(w);
  }
  d.append(kTail);
  return d;
}

}  // namespace

const std::string& Dictionary() {
  static const std::string* const d = new std::string(BuildDictionary());
  return *d;
}

std::string EncodeHeaderBlock(const Headers& headers) {
  std::string out;
  Put32(out, uint32_t(headers.size()));
  for (const auto& [name, value] : headers) {
    Put32(out, uint32_t(name.size()));
    out.append(name);
    Put32(out, uint32_t(value.size()));
    out.append(value);
  }
  return out;
}

Result<Headers> ParseHeaderBlock(std::string_view text) {
  auto cut = [] { return Error(ErrorCode::kInvalidArgument, "spdy: a header block cut short"); };
  if (text.size() < 4) return cut();
  const uint32_t count = Get32(text, 0);
  if (count > kMaxHeaders) {
    return Error(ErrorCode::kInvalidArgument, "spdy: a header block of " + std::to_string(count) +
                                                  " headers (at most " +
                                                  std::to_string(kMaxHeaders) + ")");
  }
  size_t at = 4;
  Headers out;
  auto string = [&](std::string* s) {
    if (text.size() - at < 4) return false;
    const uint32_t n = Get32(text, at);
    at += 4;
    if (text.size() - at < n) return false;
    s->assign(text.substr(at, n));
    at += n;
    return true;
  };
  for (uint32_t i = 0; i < count; ++i) {
    std::string name, value;
    if (!string(&name) || !string(&value)) return cut();
    if (name.empty()) return Error(ErrorCode::kInvalidArgument, "spdy: a header with no name");
    out.emplace_back(std::move(name), std::move(value));
  }
  if (at != text.size()) {
    return Error(ErrorCode::kInvalidArgument, "spdy: " + std::to_string(text.size() - at) +
                                                  " bytes after a header block's last header");
  }
  return out;
}

Writer::Writer() {
  const std::string& dict = Dictionary();
  ok_ = deflateInit(&z_, Z_DEFAULT_COMPRESSION) == Z_OK &&
        deflateSetDictionary(&z_, reinterpret_cast<const Bytef*>(dict.data()), uInt(dict.size())) ==
            Z_OK;
}

Writer::~Writer() { deflateEnd(&z_); }

std::string Writer::HeaderBlock(const Headers& headers) {
  std::string in = EncodeHeaderBlock(headers);
  std::string out;
  if (!ok_) return out;
  z_.next_in = reinterpret_cast<Bytef*>(in.data());
  z_.avail_in = uInt(in.size());
  char chunk[4096];
  do {
    z_.next_out = reinterpret_cast<Bytef*>(chunk);
    z_.avail_out = sizeof(chunk);
    if (deflate(&z_, Z_SYNC_FLUSH) == Z_STREAM_ERROR) {
      ok_ = false;
      return {};
    }
    out.append(chunk, sizeof(chunk) - z_.avail_out);
  } while (z_.avail_out == 0);
  return out;
}

std::string Writer::SynStream(uint32_t stream_id, const Headers& headers, uint8_t flags) {
  std::string payload;
  Put32(payload, stream_id & 0x7fffffff);
  Put32(payload, 0);   // associated-to stream
  payload += char(0);  // priority 0 (highest), unused bits
  payload += char(0);  // slot
  payload += HeaderBlock(headers);
  return Control(FrameType::kSynStream, flags, payload);
}

std::string Writer::SynReply(uint32_t stream_id, const Headers& headers, uint8_t flags) {
  std::string payload;
  Put32(payload, stream_id & 0x7fffffff);
  payload += HeaderBlock(headers);
  return Control(FrameType::kSynReply, flags, payload);
}

std::string Writer::Data(uint32_t stream_id, std::string_view data, uint8_t flags) {
  std::string out;
  out.reserve(8 + data.size());
  Put32(out, stream_id & 0x7fffffff);
  out += char(flags);
  out += char((data.size() >> 16) & 0xff);
  out += char((data.size() >> 8) & 0xff);
  out += char(data.size() & 0xff);
  out.append(data);
  return out;
}

std::string Writer::RstStream(uint32_t stream_id, uint32_t status) {
  std::string payload;
  Put32(payload, stream_id & 0x7fffffff);
  Put32(payload, status);
  return Control(FrameType::kRstStream, 0, payload);
}

std::string Writer::Ping(uint32_t id) {
  std::string payload;
  Put32(payload, id);
  return Control(FrameType::kPing, 0, payload);
}

std::string Writer::GoAway(uint32_t last_stream_id, uint32_t status) {
  std::string payload;
  Put32(payload, last_stream_id & 0x7fffffff);
  Put32(payload, status);
  return Control(FrameType::kGoAway, 0, payload);
}

Reader::Reader(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {
  z_ok_ = inflateInit(&z_) == Z_OK;
}

Reader::~Reader() { inflateEnd(&z_); }

void Reader::Append(std::string_view bytes) {
  if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(bytes);
}

Result<std::optional<Frame>> Reader::Fail(std::string why) {
  failed_ = Error(ErrorCode::kInvalidArgument, "spdy: " + why);
  return *failed_;
}

Result<Headers> Reader::Inflate(std::string_view block) {
  if (!z_ok_) return Error(ErrorCode::kInternal, "spdy: the header decompressor is not usable");
  std::string out;
  z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(block.data()));
  z_.avail_in = uInt(block.size());
  char chunk[4096];
  while (z_.avail_in > 0) {
    z_.next_out = reinterpret_cast<Bytef*>(chunk);
    z_.avail_out = sizeof(chunk);
    int rc = inflate(&z_, Z_SYNC_FLUSH);
    if (rc == Z_NEED_DICT) {
      const std::string& dict = Dictionary();
      if (inflateSetDictionary(&z_, reinterpret_cast<const Bytef*>(dict.data()),
                               uInt(dict.size())) != Z_OK) {
        z_ok_ = false;
        return Error(ErrorCode::kInvalidArgument,
                     "spdy: a header block compressed with another dictionary");
      }
      rc = inflate(&z_, Z_SYNC_FLUSH);
    }
    out.append(chunk, sizeof(chunk) - z_.avail_out);
    if (rc == Z_BUF_ERROR && z_.avail_out != 0) break;  // no progress possible: input used up
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      z_ok_ = false;
      return Error(ErrorCode::kInvalidArgument,
                   std::string("spdy: a header block does not inflate (zlib: ") +
                       (z_.msg != nullptr ? z_.msg : std::to_string(rc)) + ")");
    }
    if (out.size() > max_frame_bytes_) {
      z_ok_ = false;
      return Error(ErrorCode::kInvalidArgument, "spdy: a header block inflates past " +
                                                    std::to_string(max_frame_bytes_) + " bytes");
    }
  }
  // What the flush left in zlib's window.
  for (;;) {
    z_.next_out = reinterpret_cast<Bytef*>(chunk);
    z_.avail_out = sizeof(chunk);
    const int rc = inflate(&z_, Z_SYNC_FLUSH);
    out.append(chunk, sizeof(chunk) - z_.avail_out);
    if (out.size() > max_frame_bytes_) {
      z_ok_ = false;
      return Error(ErrorCode::kInvalidArgument, "spdy: a header block inflates past " +
                                                    std::to_string(max_frame_bytes_) + " bytes");
    }
    if (rc != Z_OK || z_.avail_out != 0) break;
  }
  return ParseHeaderBlock(out);
}

Result<std::optional<Frame>> Reader::Next() {
  if (failed_) return *failed_;
  for (;;) {
    const std::string_view in = std::string_view(buffer_).substr(offset_);
    if (in.size() < 8) return std::optional<Frame>();
    const size_t length =
        size_t(uint8_t(in[5])) << 16 | size_t(uint8_t(in[6])) << 8 | size_t(uint8_t(in[7]));
    const bool control = (uint8_t(in[0]) & 0x80) != 0;
    if (length > max_frame_bytes_) {
      return Fail("a frame of " + std::to_string(length) + " bytes (at most " +
                  std::to_string(max_frame_bytes_) + ")");
    }
    if (control) {
      const uint16_t version = uint16_t((uint8_t(in[0]) & 0x7f) << 8 | uint8_t(in[1]));
      if (version != kVersion) {
        return Fail("a control frame of version " + std::to_string(version) + " (not 3)");
      }
    }
    if (in.size() - 8 < length) return std::optional<Frame>();
    const std::string_view payload = in.substr(8, length);
    offset_ += 8 + length;
    Frame f;
    f.flags = uint8_t(in[4]);
    if (!control) {
      f.type = FrameType::kData;
      f.stream_id = Get32(in, 0) & 0x7fffffff;
      f.data.assign(payload);
      return std::optional<Frame>(std::move(f));
    }
    const uint16_t type = uint16_t(uint8_t(in[2]) << 8 | uint8_t(in[3]));
    auto need = [&](size_t n, bool exact, const char* name) -> std::optional<Error> {
      if (exact ? payload.size() == n : payload.size() >= n) return std::nullopt;
      return Error(ErrorCode::kInvalidArgument, std::string("spdy: a ") + name + " frame of " +
                                                    std::to_string(payload.size()) + " bytes");
    };
    auto fail_with = [&](Error e) -> Result<std::optional<Frame>> {
      failed_ = std::move(e);
      return *failed_;
    };
    switch (type) {
      case uint16_t(FrameType::kSynStream): {
        if (auto e = need(10, false, "SYN_STREAM")) return fail_with(std::move(*e));
        f.type = FrameType::kSynStream;
        f.stream_id = Get32(payload, 0) & 0x7fffffff;
        f.value = Get32(payload, 4) & 0x7fffffff;
        auto h = Inflate(payload.substr(10));
        if (!h.ok()) return fail_with(std::move(h).error());
        f.headers = std::move(*h);
        return std::optional<Frame>(std::move(f));
      }
      case uint16_t(FrameType::kSynReply):
      case uint16_t(FrameType::kHeaders): {
        const bool reply = type == uint16_t(FrameType::kSynReply);
        if (auto e = need(4, false, reply ? "SYN_REPLY" : "HEADERS")) {
          return fail_with(std::move(*e));
        }
        f.type = reply ? FrameType::kSynReply : FrameType::kHeaders;
        f.stream_id = Get32(payload, 0) & 0x7fffffff;
        auto h = Inflate(payload.substr(4));
        if (!h.ok()) return fail_with(std::move(h).error());
        f.headers = std::move(*h);
        return std::optional<Frame>(std::move(f));
      }
      case uint16_t(FrameType::kRstStream):
      case uint16_t(FrameType::kGoAway):
      case uint16_t(FrameType::kWindowUpdate): {
        const char* name = type == uint16_t(FrameType::kRstStream) ? "RST_STREAM"
                           : type == uint16_t(FrameType::kGoAway)  ? "GOAWAY"
                                                                   : "WINDOW_UPDATE";
        if (auto e = need(8, true, name)) return fail_with(std::move(*e));
        f.type = FrameType(type);
        f.stream_id = Get32(payload, 0) & 0x7fffffff;
        f.value = Get32(payload, 4);
        if (f.type == FrameType::kWindowUpdate) f.value &= 0x7fffffff;
        return std::optional<Frame>(std::move(f));
      }
      case uint16_t(FrameType::kPing): {
        if (auto e = need(4, true, "PING")) return fail_with(std::move(*e));
        f.type = FrameType::kPing;
        f.value = Get32(payload, 0);
        return std::optional<Frame>(std::move(f));
      }
      case uint16_t(FrameType::kSettings): {
        if (auto e = need(4, false, "SETTINGS")) return fail_with(std::move(*e));
        const uint32_t entries = Get32(payload, 0);
        if (uint64_t(entries) * 8 + 4 != payload.size()) {
          return Fail("a SETTINGS frame of " + std::to_string(payload.size()) + " bytes for " +
                      std::to_string(entries) + " entries");
        }
        f.type = FrameType::kSettings;
        f.value = entries;
        return std::optional<Frame>(std::move(f));
      }
      default:
        continue;  // an unknown control frame is ignored
    }
  }
}

}  // namespace hami::sim::kube::spdy
