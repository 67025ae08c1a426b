#include "sim/kube/exec.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/unique_fd.h"
#include "sim/kube/spdy.h"
#include "sim/kube/websocket.h"

namespace hami::sim::kube {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr size_t kMaxErrorBodyBytes = 64 << 10;
constexpr size_t kMaxStatusBytes = 64 << 10;
constexpr size_t kSpdyChunk = 32 << 10;
constexpr int kMaxRedirects = 5;

// Stream types of the remotecommand protocol (k8s.io/api/core/v1: StreamType*).
constexpr char kStreamTypeHeader[] = "streamtype";

// WebSocket channels of the v4 and v5 protocols.
constexpr uint8_t kChannelStdin = 0;
constexpr uint8_t kChannelStdout = 1;
constexpr uint8_t kChannelStderr = 2;
constexpr uint8_t kChannelError = 3;
constexpr uint8_t kChannelResize = 4;
constexpr uint8_t kChannelClose = 255;  // v5: [255, channel] ends that channel's input

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool EqualFold(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

std::string FirstHeader(const HeaderList& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (EqualFold(k, name)) return v;
  }
  return "";
}

// Go's strconv.ParseBool.
std::optional<bool> ParseGoBool(std::string_view v) {
  if (v == "1" || v == "t" || v == "T" || v == "TRUE" || v == "true" || v == "True") return true;
  if (v == "0" || v == "f" || v == "F" || v == "FALSE" || v == "false" || v == "False") {
    return false;
  }
  return std::nullopt;
}

// Escapes all but the unreserved characters (RFC 3986), so that any server reads it back.
std::string QueryEscape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    }
  }
  return out;
}

std::string StatusText(const json& status) {
  return status.dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---- sockets ------------------------------------------------------------------------------

int MsLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Go's wording of a socket error: "connection refused", not "Connection refused".
std::string GoErrno(int err) {
  std::string text = strerrordesc_np(err) != nullptr ? strerrordesc_np(err) : "unknown error";
  if (!text.empty()) text[0] = char(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

// Writes all of `data`, waiting at most `timeout` for the socket to take each part.
bool WriteAll(int fd, std::string_view data, std::chrono::seconds timeout) {
  while (!data.empty()) {
    pollfd p{fd, POLLOUT, 0};
    const int r = poll(&p, 1, int(timeout.count() * 1000));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    data.remove_prefix(size_t(n));
  }
  return true;
}

// Reads what is there (blocking until something is): the count, 0 at the end, -1 on error.
ssize_t ReadSome(int fd, char* buf, size_t size) {
  for (;;) {
    const ssize_t n = recv(fd, buf, size, 0);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

// Reads with a deadline: the count, 0 at the end, -1 on error or at the deadline.
ssize_t ReadUntil(int fd, char* buf, size_t size, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, MsLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    return ReadSome(fd, buf, size);
  }
}

// Connects to host:port within the deadline; the error reads as Go's net.Dial's.
Result<UniqueFd> Dial(const std::string& host, int port, Clock::time_point deadline) {
  const std::string address =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  const std::string what = "dial tcp " + address;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (gai != 0) {
    return Error(ErrorCode::kUnavailable, what + ": lookup " + host + ": " + gai_strerror(gai));
  }
  std::string last = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) {
      last = "socket: " + GoErrno(errno);
      continue;
    }
    int rc = connect(fd.get(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      rc = poll(&p, 1, MsLeft(deadline));
      if (rc == 0) {
        last = "i/o timeout";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = "connect: " + GoErrno(err);
        continue;
      }
    } else if (rc != 0) {
      last = "connect: " + GoErrno(errno);
      continue;
    }
    const int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    freeaddrinfo(found);
    return fd;
  }
  freeaddrinfo(found);
  return Error(ErrorCode::kUnavailable, what + ": " + last);
}

struct Location {
  std::string host;
  int port = 80;
  std::string target;  // path and query
};

// An absolute http URL, or a path on `base`'s server.
Result<Location> ResolveLocation(std::string_view url, const Location& base) {
  if (url.starts_with("/")) return Location{base.host, base.port, std::string(url)};
  if (!url.starts_with("http://")) {
    return Error(ErrorCode::kUnsupported,
                 "a redirect to " + std::string(url) + " (only http:// is followed)");
  }
  url.remove_prefix(7);
  const size_t slash = url.find('/');
  const std::string_view authority = url.substr(0, slash);
  Location out;
  out.target = slash == std::string_view::npos ? "/" : std::string(url.substr(slash));
  std::string_view host = authority;
  std::string_view port;
  if (host.starts_with("[")) {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) {
      return Error(ErrorCode::kInvalidArgument, "a redirect to a bad host: " + std::string(url));
    }
    port = host.substr(close + 1);
    host = host.substr(1, close - 1);
    if (port.starts_with(":")) port.remove_prefix(1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  out.host = std::string(host);
  if (!port.empty()) {
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port);
    if (ec != std::errc() || p != port.data() + port.size() || out.port <= 0 || out.port > 65535) {
      return Error(ErrorCode::kInvalidArgument, "a redirect to a bad port: " + std::string(url));
    }
  }
  if (out.host.empty()) {
    return Error(ErrorCode::kInvalidArgument, "a redirect without a host: " + std::string(url));
  }
  return out;
}

// The answer to an upgrade request, after the kubelet's redirects.
struct Dialed {
  bool upgraded = false;
  UniqueFd fd;           // upgraded: the connection
  std::string raw_head;  // the answer's status line and headers with the blank line
  ResponseHead head;
  std::string leftover;  // upgraded: bytes read past the head
  std::string body;      // not upgraded: the answer's body (at most kMaxErrorBodyBytes)
  std::string where;     // host:port of the last server asked
};

// Sends `method target` with `headers` (Host and Content-Length added) and follows redirects.
// An error is a failure to connect or a malformed answer; a refusal is an answer.
Result<Dialed> DialUpgrade(Location at, const std::string& method, const HeaderList& headers,
                           Clock::time_point deadline) {
  for (int redirects = 0;; ++redirects) {
    Dialed d;
    d.where = at.host + ":" + std::to_string(at.port);
    d.fd = HAMI_TRY(Dial(at.host, at.port, deadline));
    std::string request = method + " " + at.target + " HTTP/1.1\r\nHost: " + d.where + "\r\n";
    for (const auto& [k, v] : headers) request += k + ": " + v + "\r\n";
    request += "Content-Length: 0\r\n\r\n";
    if (!WriteAll(d.fd.get(), request,
                  std::chrono::seconds(std::max(1, MsLeft(deadline) / 1000)))) {
      return Error(ErrorCode::kUnavailable,
                   "writing the upgrade request to " + d.where + ": " + GoErrno(errno));
    }
    std::string got;
    size_t end = std::string::npos;
    char buf[8192];
    while ((end = got.find("\r\n\r\n")) == std::string::npos) {
      if (got.size() > kMaxHeadBytes) {
        return Error(ErrorCode::kInvalidArgument,
                     d.where + " answered a head longer than " + std::to_string(kMaxHeadBytes));
      }
      const ssize_t n = ReadUntil(d.fd.get(), buf, sizeof(buf), deadline);
      if (n <= 0) {
        return Error(ErrorCode::kUnavailable,
                     d.where + (n == 0 ? " closed the connection before answering the upgrade"
                                       : " did not answer the upgrade in time"));
      }
      got.append(buf, size_t(n));
    }
    d.raw_head = got.substr(0, end + 4);
    d.head = HAMI_TRY(ParseResponseHead(std::string_view(got).substr(0, end)));
    d.leftover = got.substr(end + 4);
    if (d.head.status == 101) {
      d.upgraded = true;
      return d;
    }
    const std::string location = d.head.Header("Location");
    if (d.head.status >= 300 && d.head.status < 400 && !location.empty()) {
      if (redirects >= kMaxRedirects) {
        return Error(ErrorCode::kUnavailable, "too many redirects from " + d.where);
      }
      at = HAMI_TRY(ResolveLocation(location, at));
      continue;
    }
    // A refusal: its body, as far as it comes.
    std::string body = std::move(d.leftover);
    const std::string length_text = d.head.Header("Content-Length");
    const bool chunked =
        Lower(d.head.Header("Transfer-Encoding")).find("chunked") != std::string::npos;
    size_t length = std::string::npos;
    if (!length_text.empty() && !chunked) {
      size_t n = 0;
      auto [p, ec] =
          std::from_chars(length_text.data(), length_text.data() + length_text.size(), n);
      if (ec == std::errc() && p == length_text.data() + length_text.size()) length = n;
    }
    for (;;) {
      if (length != std::string::npos && body.size() >= length) {
        body.resize(length);
        break;
      }
      if (chunked) {
        auto decoded = DecodeChunked(body);
        if (!decoded.ok()) break;
        if (decoded->has_value()) {
          body = std::move(**decoded);
          break;
        }
      }
      if (body.size() > kMaxErrorBodyBytes) break;
      const ssize_t n = ReadUntil(d.fd.get(), buf, sizeof(buf), deadline);
      if (n <= 0) break;
      body.append(buf, size_t(n));
    }
    if (body.size() > kMaxErrorBodyBytes) body.resize(kMaxErrorBodyBytes);
    d.body = std::move(body);
    d.fd.Reset();
    return d;
  }
}

// The failure of reaching the kubelet, naming the node.
std::string DialFailure(const ExecPlan& plan, const std::string& why) {
  return why + " (the kubelet of node \"" + plan.node + "\")";
}

// ---- the stream translator (WebSocket v5 ⇄ SPDY v4) -----------------------------------------

class Translator {
 public:
  Translator(int client_fd, const ExecPlan& plan, const ExecSessionOptions& o)
      : client_fd_(client_fd), plan_(plan), o_(o) {}

  // The session, after the 101: returns what it ended with (for the log).
  std::string Run();

 private:
  enum class Kind { kError, kStdin, kStdout, kStderr, kResize };

  bool WriteClient(std::string_view bytes) {
    std::lock_guard l(client_mu_);
    if (client_broken_) return false;
    if (!WriteAll(client_fd_, bytes, o_.write_timeout)) client_broken_ = true;
    return !client_broken_;
  }
  bool SendChannel(uint8_t channel, std::string_view data) {
    std::string payload(1, char(channel));
    payload.append(data);
    return WriteClient(websocket::EncodeFrame(websocket::Opcode::kBinary, payload));
  }
  void SendClose(uint16_t code) {
    {
      std::lock_guard l(client_mu_);
      if (close_sent_) return;
      close_sent_ = true;
    }
    WriteClient(websocket::EncodeFrame(websocket::Opcode::kClose, websocket::ClosePayload(code)));
  }
  // Writes SPDY data on `stream` (chunked); false once the runtime's side is gone.
  bool SendUpstream(uint32_t stream, std::string_view data, uint8_t flags) {
    std::lock_guard l(upstream_mu_);
    if (!upstream_.valid() || upstream_broken_) return false;
    do {
      const std::string_view part = data.substr(0, kSpdyChunk);
      data.remove_prefix(part.size());
      const std::string frame = writer_.Data(stream, part, data.empty() ? flags : 0);
      if (!WriteAll(upstream_.get(), frame, o_.write_timeout)) {
        upstream_broken_ = true;
        return false;
      }
    } while (!data.empty());
    return true;
  }
  Status Connect();
  void ClientLoop();
  // Reads the runtime's frames until the session ends; returns why it ended.
  std::string UpstreamLoop();
  void Finish(const std::string& status);

  const int client_fd_;
  const ExecPlan& plan_;
  const ExecSessionOptions& o_;

  std::mutex client_mu_;
  bool client_broken_ = false;
  bool close_sent_ = false;

  std::mutex upstream_mu_;
  UniqueFd upstream_;
  std::string upstream_leftover_;
  spdy::Writer writer_;
  bool upstream_broken_ = false;
  std::map<uint32_t, Kind> streams_;
  uint32_t stdin_id_ = 0, resize_id_ = 0;
  std::atomic<bool> stdin_open_{false};
  std::string status_;          // what the runtime wrote on the error stream
  std::string refused_status_;  // a Status the kubelet or the runtime refused the upgrade with

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool client_done_ = false;  // the client closed or went away
  std::atomic<bool> finishing_{false};
};

Status Translator::Connect() {
  if (!plan_.kubelet)
    return Error(ErrorCode::kUnavailable, DialFailure(plan_, plan_.kubelet_error));
  const HeaderList headers = {{"Connection", "Upgrade"},
                              {"Upgrade", "SPDY/3.1"},
                              {"X-Stream-Protocol-Version", kStreamProtocolV4},
                              {"User-Agent", "hami-sim-apiserver"}};
  auto dialed = DialUpgrade({plan_.kubelet->host, plan_.kubelet->port, KubeletExecTarget(plan_)},
                            "POST", headers, Clock::now() + o_.dial_timeout);
  if (!dialed.ok()) {
    return Error(ErrorCode::kUnavailable, DialFailure(plan_, dialed.error().message()));
  }
  if (!dialed->upgraded) {
    // As the SPDY client reports a refused upgrade: a Status body as it is, else its text.
    const json body = json::parse(dialed->body, nullptr, false);
    if (body.is_object() && body.value("kind", "") == "Status") refused_status_ = dialed->body;
    std::string text = Trim(dialed->body);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return Error(ErrorCode::kUnavailable, "unable to upgrade connection: " + text);
  }
  const std::string version = dialed->head.Header("X-Stream-Protocol-Version");
  if (version != kStreamProtocolV4 || !EqualFold(dialed->head.Header("Upgrade"), "SPDY/3.1")) {
    return Error(ErrorCode::kIncompatible, "unable to upgrade connection: the runtime at " +
                                               dialed->where + " answered protocol '" + version +
                                               "' over '" + dialed->head.Header("Upgrade") +
                                               "' (asked for " + kStreamProtocolV4 +
                                               " over SPDY/3.1)");
  }
  std::lock_guard l(upstream_mu_);
  upstream_ = std::move(dialed->fd);
  upstream_leftover_ = std::move(dialed->leftover);
  // The streams, as client-go's remotecommand v4 creates them: error first, then the
  // requested ones, resize last (tty).
  std::vector<std::pair<Kind, const char*>> wanted = {{Kind::kError, "error"}};
  if (plan_.options.stdin) wanted.push_back({Kind::kStdin, "stdin"});
  if (plan_.options.stdout) wanted.push_back({Kind::kStdout, "stdout"});
  if (plan_.options.stderr && !plan_.options.tty) wanted.push_back({Kind::kStderr, "stderr"});
  if (plan_.options.tty) wanted.push_back({Kind::kResize, "resize"});
  std::string frames;
  uint32_t id = 1;
  for (const auto& [kind, name] : wanted) {
    streams_[id] = kind;
    if (kind == Kind::kStdin) {
      stdin_id_ = id;
      stdin_open_ = true;
    }
    if (kind == Kind::kResize) resize_id_ = id;
    frames += writer_.SynStream(id, {{kStreamTypeHeader, name}});
    id += 2;
  }
  if (!WriteAll(upstream_.get(), frames, o_.write_timeout)) {
    return Error(ErrorCode::kUnavailable, "creating the streams at the runtime: " + GoErrno(errno));
  }
  return OkStatus();
}

void Translator::ClientLoop() {
  websocket::Reader reader(websocket::Peer::kClient, o_.max_message_bytes);
  char buf[16384];
  bool closed = false;
  while (!closed) {
    const ssize_t n = ReadSome(client_fd_, buf, sizeof(buf));
    if (n <= 0) break;
    reader.Append(std::string_view(buf, size_t(n)));
    for (;;) {
      auto next = reader.Next();
      if (!next.ok()) {
        SendClose(reader.close_code());
        closed = true;
        break;
      }
      if (!next->has_value()) break;
      websocket::Message& m = **next;
      if (m.opcode == websocket::Opcode::kPing) {
        WriteClient(websocket::EncodeFrame(websocket::Opcode::kPong, m.payload));
        continue;
      }
      if (m.opcode == websocket::Opcode::kClose) {
        // The client's reply to ours, or its own end of the session: answer with the same code.
        uint16_t code = websocket::kCloseNormal;
        if (m.payload.size() >= 2)
          code = uint16_t(uint8_t(m.payload[0]) << 8 | uint8_t(m.payload[1]));
        SendClose(code);
        closed = true;
        break;
      }
      if (m.opcode != websocket::Opcode::kBinary || m.payload.empty() || finishing_) continue;
      const uint8_t channel = uint8_t(m.payload[0]);
      const std::string_view data = std::string_view(m.payload).substr(1);
      if (channel == kChannelStdin && plan_.options.stdin) {
        if (stdin_open_ && !data.empty()) SendUpstream(stdin_id_, data, 0);
      } else if (channel == kChannelResize && plan_.options.tty && resize_id_ != 0) {
        SendUpstream(resize_id_, data, 0);
      } else if (channel == kChannelClose && !data.empty() && uint8_t(data[0]) == kChannelStdin) {
        if (stdin_open_.exchange(false)) SendUpstream(stdin_id_, "", spdy::kFlagFin);
      }
    }
  }
  {
    std::lock_guard l(done_mu_);
    client_done_ = true;
  }
  done_cv_.notify_all();
  if (!finishing_) {
    // The client ended the session: end the runtime's side, which ends the upstream loop.
    std::lock_guard l(upstream_mu_);
    if (upstream_.valid()) shutdown(upstream_.get(), SHUT_RDWR);
  }
}

std::string Translator::UpstreamLoop() {
  spdy::Reader reader(o_.max_message_bytes);
  bool error_done = false;
  bool stdout_done = !plan_.options.stdout;
  bool stderr_done = !plan_.options.stderr || plan_.options.tty;
  auto mark_done = [&](uint32_t id) {
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    switch (it->second) {
      case Kind::kError:
        error_done = true;
        break;
      case Kind::kStdout:
        stdout_done = true;
        break;
      case Kind::kStderr:
        stderr_done = true;
        break;
      case Kind::kStdin:
        stdin_open_ = false;
        break;
      case Kind::kResize:
        break;
    }
  };
  std::string pending = std::move(upstream_leftover_);
  char buf[32768];
  for (;;) {
    if (!pending.empty()) {
      reader.Append(pending);
      pending.clear();
    } else {
      const ssize_t n = ReadSome(upstream_.get(), buf, sizeof(buf));
      if (n <= 0) return n == 0 ? "runtime closed" : "runtime read error: " + GoErrno(errno);
      reader.Append(std::string_view(buf, size_t(n)));
    }
    for (;;) {
      auto next = reader.Next();
      if (!next.ok()) return "runtime protocol error: " + next.error().message();
      if (!next->has_value()) break;
      spdy::Frame& f = **next;
      switch (f.type) {
        case spdy::FrameType::kData: {
          auto it = streams_.find(f.stream_id);
          if (it != streams_.end()) {
            if (it->second == Kind::kStdout && !f.data.empty()) {
              if (!SendChannel(kChannelStdout, f.data)) return "client gone";
            } else if (it->second == Kind::kStderr && !f.data.empty()) {
              if (!SendChannel(kChannelStderr, f.data)) return "client gone";
            } else if (it->second == Kind::kError) {
              if (status_.size() + f.data.size() <= kMaxStatusBytes) status_ += f.data;
            }
          }
          if (f.flags & spdy::kFlagFin) mark_done(f.stream_id);
          break;
        }
        case spdy::FrameType::kSynReply:
          if (f.flags & spdy::kFlagFin) mark_done(f.stream_id);
          break;
        case spdy::FrameType::kRstStream:
          mark_done(f.stream_id);
          break;
        case spdy::FrameType::kPing: {
          std::lock_guard l(upstream_mu_);
          if (!upstream_broken_ &&
              !WriteAll(upstream_.get(), writer_.Ping(f.value), o_.write_timeout)) {
            upstream_broken_ = true;
          }
          break;
        }
        case spdy::FrameType::kGoAway:
          return "runtime done";
        default:
          break;
      }
      if (error_done && stdout_done && stderr_done) return "runtime done";
    }
  }
}

void Translator::Finish(const std::string& status) {
  finishing_ = true;
  SendChannel(kChannelError, status);
  SendClose(websocket::kCloseNormal);
  {
    // The client closes once it has read everything; closing first could reset the connection
    // and lose output still on its way.
    std::unique_lock l(done_mu_);
    done_cv_.wait_for(l, o_.finish_timeout, [this] { return client_done_; });
  }
  shutdown(client_fd_, SHUT_RDWR);
  std::lock_guard l(upstream_mu_);
  if (upstream_.valid()) shutdown(upstream_.get(), SHUT_RDWR);
}

std::string Translator::Run() {
  // The empty message on the lowest output channel tells the client the session is open.
  const uint8_t first = plan_.options.stdout   ? kChannelStdout
                        : plan_.options.stderr ? kChannelStderr
                                               : kChannelError;
  SendChannel(first, "");
  auto connected = Connect();
  std::thread client([this] { ClientLoop(); });
  std::string detail;
  std::string status;
  if (!connected.ok()) {
    detail = "upstream failed: " + connected.error().message();
    status = !refused_status_.empty()
                 ? refused_status_
                 : StatusText(ToStatusJson(InternalError(connected.error().message())));
  } else {
    detail = UpstreamLoop();
    json parsed = json::parse(status_, nullptr, false);
    if (status_.empty()) {
      status = StatusText(json{{"metadata", json::object()}, {"status", "Success"}});
    } else if (parsed.is_object()) {
      status = status_;
      if (parsed.value("status", "") == "Failure") {
        detail += " status=" + parsed.value("reason", std::string("Failure"));
      }
    } else {
      status = StatusText(ToStatusJson(InternalError("error stream protocol error: " + status_)));
    }
    if (detail != "runtime done") {
      bool client_gone;
      {
        std::lock_guard l(done_mu_);
        client_gone = client_done_;
      }
      if (!client_gone && status_.empty()) {
        status = StatusText(
            ToStatusJson(InternalError("the container runtime's stream ended early: " + detail)));
      }
    }
  }
  Finish(status);
  client.join();
  return detail;
}

// ---- the upgrade-aware proxy ------------------------------------------------------------------

// Copies `from` to `to` until `from` ends; then half-closes `to`. False on an error.
bool Pump(int from, int to, std::chrono::seconds write_timeout) {
  char buf[32768];
  for (;;) {
    const ssize_t n = ReadSome(from, buf, sizeof(buf));
    if (n < 0) return false;
    if (n == 0) {
      shutdown(to, SHUT_WR);
      return true;
    }
    if (!WriteAll(to, std::string_view(buf, size_t(n)), write_timeout)) return false;
  }
}

std::string ProxySession(int client_fd, Dialed& d, const ExecSessionOptions& o) {
  const int upstream = d.fd.get();
  if (!WriteAll(client_fd, d.raw_head + d.leftover, o.write_timeout)) {
    shutdown(client_fd, SHUT_RDWR);
    return "client gone before the upgrade";
  }
  std::mutex mu;
  std::condition_variable cv;
  bool client_side_done = false;
  std::thread up([&] {
    const bool ok = Pump(client_fd, upstream, o.write_timeout);
    if (!ok) {
      shutdown(client_fd, SHUT_RDWR);
      shutdown(upstream, SHUT_RDWR);
    }
    std::lock_guard l(mu);
    client_side_done = true;
    cv.notify_all();
  });
  const bool ok = Pump(upstream, client_fd, o.write_timeout);
  if (!ok) {
    shutdown(client_fd, SHUT_RDWR);
    shutdown(upstream, SHUT_RDWR);
  }
  {
    // The runtime has finished; the client closes its side once it has read everything.
    std::unique_lock l(mu);
    cv.wait_for(l, o.finish_timeout, [&] { return client_side_done; });
  }
  shutdown(client_fd, SHUT_RDWR);
  shutdown(upstream, SHUT_RDWR);
  up.join();
  return ok ? "runtime done" : "connection error";
}

}  // namespace

// ---- pure parts ---------------------------------------------------------------------------

ApiResult<ExecOptions> ParseExecOptions(const std::multimap<std::string, std::string>& params) {
  ExecOptions o;
  for (const auto& [key, value] : params) {
    if (key == "command") {
      o.command.push_back(value);
    } else if (key == "container") {
      o.container = value;
    } else if (key == "stdin" || key == "stdout" || key == "stderr" || key == "tty") {
      auto b = ParseGoBool(value);
      if (!b) return BadRequest(key + ": invalid boolean \"" + value + "\"");
      (key == "stdin"    ? o.stdin
       : key == "stdout" ? o.stdout
       : key == "stderr" ? o.stderr
                         : o.tty) = *b;
    }
  }
  if (o.command.empty())
    return BadRequest("you must specify at least one command for the container");
  if (!o.stdin && !o.stdout && !o.stderr) {
    return BadRequest("you must specify at least 1 of stdin, stdout, stderr");
  }
  return o;
}

ApiResult<std::string> ExecContainer(const json& pod, std::string_view pod_name,
                                     const std::string& requested) {
  auto names = [&](const char* list) {
    std::vector<std::string> out;
    const json* spec = pod.contains("spec") && pod["spec"].is_object() ? &pod["spec"] : nullptr;
    if (spec == nullptr) return out;
    auto it = spec->find(list);
    if (it == spec->end() || !it->is_array()) return out;
    for (const json& c : *it) {
      if (c.is_object() && c.contains("name") && c["name"].is_string()) {
        out.push_back(c["name"].get<std::string>());
      }
    }
    return out;
  };
  const std::vector<std::string> containers = names("containers");
  const std::vector<std::string> init = names("initContainers");
  const std::vector<std::string> ephemeral = names("ephemeralContainers");
  const std::string pod_text(pod_name);
  if (requested.empty()) {
    if (containers.size() == 1) return containers.front();
    if (containers.empty()) {
      return BadRequest("a container name must be specified for pod " + pod_text);
    }
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& s : v) out += (out.empty() ? "" : " ") + s;
      return out;
    };
    std::string message = "a container name must be specified for pod " + pod_text +
                          ", choose one of: [" + join(containers) + "]";
    if (!init.empty()) message += " or one of the init containers: [" + join(init) + "]";
    return BadRequest(message);
  }
  for (const auto* list : {&containers, &init, &ephemeral}) {
    if (std::find(list->begin(), list->end(), requested) != list->end()) return requested;
  }
  return BadRequest("container " + requested + " is not valid for pod " + pod_text);
}

Result<KubeletEndpoint> KubeletEndpointOf(const json& node) {
  const std::string name = node.contains("metadata") && node["metadata"].is_object()
                               ? node["metadata"].value("name", std::string())
                               : std::string();
  const json status =
      node.contains("status") && node["status"].is_object() ? node["status"] : json::object();
  KubeletEndpoint out;
  if (auto it = status.find("addresses"); it != status.end() && it->is_array()) {
    for (const char* type : {"InternalIP", "Hostname", "ExternalIP"}) {
      for (const json& a : *it) {
        if (a.is_object() && a.value("type", "") == type && a.contains("address") &&
            a["address"].is_string() && !a["address"].get<std::string>().empty()) {
          out.host = a["address"].get<std::string>();
          break;
        }
      }
      if (!out.host.empty()) break;
    }
  }
  if (out.host.empty()) {
    return Error(ErrorCode::kNotFound, "node \"" + name +
                                           "\" has no address (status.addresses has no "
                                           "InternalIP, Hostname or ExternalIP)");
  }
  const json* port = nullptr;
  if (auto d = status.find("daemonEndpoints"); d != status.end() && d->is_object()) {
    if (auto k = d->find("kubeletEndpoint"); k != d->end() && k->is_object()) {
      if (auto p = k->find("Port"); p != k->end()) port = &*p;
    }
  }
  if (port == nullptr || !port->is_number_integer() || port->get<int64_t>() <= 0 ||
      port->get<int64_t>() > 65535) {
    return Error(ErrorCode::kNotFound,
                 "node \"" + name +
                     "\" publishes no kubelet port (status.daemonEndpoints.kubeletEndpoint.Port " +
                     (port == nullptr ? std::string("is not set") : "is " + port->dump()) + ")");
  }
  out.port = int(port->get<int64_t>());
  return out;
}

std::string KubeletExecTarget(const ExecPlan& plan) {
  std::string target = "/exec/" + QueryEscape(plan.ns) + "/" + QueryEscape(plan.pod) + "/" +
                       QueryEscape(plan.container) + "?";
  bool first = true;
  auto add = [&](const char* key, const std::string& value) {
    if (!first) target += '&';
    first = false;
    target += key;
    target += '=';
    target += QueryEscape(value);
  };
  for (const std::string& c : plan.options.command) add("command", c);
  if (plan.options.stdin) add("input", "1");
  if (plan.options.stdout) add("output", "1");
  if (plan.options.stderr) add("error", "1");
  if (plan.options.tty) add("tty", "1");
  return target;
}

std::string UpgradeRequest::Header(std::string_view name) const {
  return FirstHeader(headers, name);
}

std::vector<std::string> UpgradeRequest::Tokens(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : headers) {
    if (!EqualFold(k, name)) continue;
    for (std::string& t : websocket::HeaderTokens(v)) out.push_back(std::move(t));
  }
  return out;
}

ExecRoute ChooseExecRoute(const UpgradeRequest& req) {
  const std::vector<std::string> connection = req.Tokens("Connection");
  const bool upgrade = std::any_of(connection.begin(), connection.end(),
                                   [](const std::string& t) { return EqualFold(t, "upgrade"); });
  const std::string what = req.Header("Upgrade");
  if (!upgrade || what.empty()) return ExecRoute::kNoUpgrade;
  if (!EqualFold(what, "websocket")) return ExecRoute::kProxy;
  for (const std::string& p : req.Tokens("Sec-WebSocket-Protocol")) {
    if (p == kStreamProtocolV5) return ExecRoute::kTranslate;
    // The protocols the runtime speaks over WebSocket (containerd 1.6), which the proxy
    // leaves to it.
    if (p == kStreamProtocolV4 || p == "channel.k8s.io" || p == "base64.channel.k8s.io" ||
        p == "v4.base64.channel.k8s.io") {
      return ExecRoute::kProxy;
    }
  }
  return ExecRoute::kProxy;
}

std::string ResponseHead::Header(std::string_view name) const { return FirstHeader(headers, name); }

Result<ResponseHead> ParseResponseHead(std::string_view text) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "a malformed HTTP answer: " + why);
  };
  const size_t eol = text.find("\r\n");
  const std::string_view status_line = text.substr(0, eol);
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return bad("status line '" + std::string(status_line.substr(0, 80)) + "'");
  }
  ResponseHead head;
  const std::string_view code = status_line.substr(9, 3);
  auto [p, ec] = std::from_chars(code.data(), code.data() + code.size(), head.status);
  if (ec != std::errc() || p != code.data() + 3 || head.status < 100 || head.status > 999 ||
      (status_line.size() > 12 && status_line[12] != ' ')) {
    return bad("status line '" + std::string(status_line.substr(0, 80)) + "'");
  }
  std::string_view rest = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 2);
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return bad("header line '" + std::string(line.substr(0, 80)) + "'");
    }
    if (head.headers.size() >= 100) return bad("more than 100 headers");
    head.headers.emplace_back(Trim(line.substr(0, colon)), Trim(line.substr(colon + 1)));
  }
  return head;
}

Result<std::optional<std::string>> DecodeChunked(std::string_view text) {
  std::string out;
  for (;;) {
    const size_t eol = text.find("\r\n");
    if (eol == std::string_view::npos) return std::optional<std::string>();
    std::string_view size_text = text.substr(0, eol);
    if (const size_t semi = size_text.find(';'); semi != std::string_view::npos) {
      size_text = size_text.substr(0, semi);
    }
    size_t size = 0;
    auto [p, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (size_text.empty() || ec != std::errc() || p != size_text.data() + size_text.size() ||
        size > (size_t(1) << 30)) {
      return Error(ErrorCode::kInvalidArgument,
                   "a malformed chunk size '" + std::string(size_text.substr(0, 20)) + "'");
    }
    text.remove_prefix(eol + 2);
    if (size == 0) return std::optional<std::string>(std::move(out));
    if (text.size() < size + 2) return std::optional<std::string>();
    if (text.substr(size, 2) != "\r\n") {
      return Error(ErrorCode::kInvalidArgument, "a chunk not followed by CRLF");
    }
    out.append(text.substr(0, size));
    text.remove_prefix(size + 2);
  }
}

// ---- the session --------------------------------------------------------------------------

ExecOutcome ServeExecSession(const UpgradeRequest& req, int client_fd, const ExecPlan& plan,
                             const ExecSessionOptions& options) {
  ExecOutcome out;
  auto answer = [&](const ApiStatus& s) {
    out.status = s.code;
    out.body = StatusText(ToStatusJson(s));
    out.content_type = "application/json";
    return out;
  };
  switch (ChooseExecRoute(req)) {
    case ExecRoute::kNoUpgrade:
      out.route = "none";
      return answer(BadRequest("Upgrade request required"));
    case ExecRoute::kTranslate: {
      out.route = "websocket-v5";
      const std::string key = req.Header("Sec-WebSocket-Key");
      if (req.method != "GET" || req.Header("Sec-WebSocket-Version") != "13" ||
          !websocket::ValidKey(key)) {
        return answer(BadRequest(
            "unable to upgrade: a WebSocket handshake needs GET, Sec-WebSocket-Version 13 and a "
            "Sec-WebSocket-Key of 16 base64 bytes"));
      }
      if (client_fd < 0) return answer(InternalError("the request's connection was not found"));
      const std::string head =
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
          "Connection: Upgrade\r\nSec-WebSocket-Accept: " +
          websocket::AcceptKey(key) + "\r\nSec-WebSocket-Protocol: " + kStreamProtocolV5 +
          "\r\n\r\n";
      out.upgraded = true;
      if (!WriteAll(client_fd, head, options.write_timeout)) {
        shutdown(client_fd, SHUT_RDWR);
        out.detail = "client gone before the upgrade";
        return out;
      }
      Translator t(client_fd, plan, options);
      out.detail = t.Run();
      return out;
    }
    case ExecRoute::kProxy: {
      out.route = EqualFold(req.Header("Upgrade"), "websocket") ? "websocket-proxy" : "spdy-proxy";
      if (!plan.kubelet) {
        ApiStatus s = InternalError("");
        s.reason.clear();
        s.message = "error dialing backend: " + DialFailure(plan, plan.kubelet_error);
        return answer(s);
      }
      HeaderList forward;
      for (const auto& [k, v] : req.headers) {
        for (const char* name :
             {"Connection", "Upgrade", "Sec-WebSocket-Key", "Sec-WebSocket-Version",
              "Sec-WebSocket-Protocol", "X-Stream-Protocol-Version", "User-Agent", "Origin"}) {
          if (EqualFold(k, name)) forward.emplace_back(k, v);
        }
      }
      auto dialed = DialUpgrade({plan.kubelet->host, plan.kubelet->port, KubeletExecTarget(plan)},
                                req.method, forward, Clock::now() + options.dial_timeout);
      if (!dialed.ok()) {
        ApiStatus s = InternalError("");
        s.reason.clear();
        s.message = "error dialing backend: " + DialFailure(plan, dialed.error().message());
        out.detail = s.message;
        return answer(s);
      }
      if (!dialed->upgraded) {
        out.status = dialed->head.status;
        out.body = dialed->body;
        out.content_type = dialed->head.Header("Content-Type");
        if (out.content_type.empty()) out.content_type = "text/plain; charset=utf-8";
        out.detail = "refused: " + std::to_string(out.status);
        return out;
      }
      if (client_fd < 0) return answer(InternalError("the request's connection was not found"));
      out.upgraded = true;
      out.detail = ProxySession(client_fd, *dialed, options);
      return out;
    }
  }
  return out;
}

}  // namespace hami::sim::kube
