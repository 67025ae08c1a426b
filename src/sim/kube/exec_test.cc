// pods/exec over real sockets, without a cluster: a WebSocket v5 client of the test's own
// against the API server, a kubelet that redirects (cpp-httplib), and a container runtime's
// streaming server of the test's own that speaks SPDY/3.1 and the v4 protocol as containerd
// does (stdin and its end, output, the status on the error stream, RST_STREAM and GOAWAY at
// the end). Also the checks before the upgrade, failures after it, and the upgrade-aware proxy
// for the other protocols.
#include "sim/kube/exec.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>

#include "common/unique_fd.h"
#include "kube/base64.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "sim/kube/spdy.h"
#include "sim/kube/websocket.h"

namespace hami::sim::kube {
namespace {

using nlohmann::json;
namespace ws = websocket;

constexpr std::array<uint8_t, 4> kMask = {1, 2, 3, 4};
constexpr char kForbidden[] =
    R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"exec is )"
    R"(forbidden here","reason":"Forbidden","code":403})";

UniqueFd Listen(int* port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  EXPECT_EQ(listen(fd.get(), 16), 0);
  return fd;
}

UniqueFd Connect(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Reads at most `timeout_ms`: the bytes, "" at the end or the deadline.
std::string ReadSome(int fd, int timeout_ms = 10000) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return "";
  char buf[65536];
  const ssize_t n = recv(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, size_t(n)) : "";
}

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(size_t(n));
  }
}

// Reads an HTTP head; the rest read past it stays in `rest`.
std::string ReadHead(int fd, std::string* rest) {
  std::string got;
  size_t end;
  while ((end = got.find("\r\n\r\n")) == std::string::npos) {
    std::string more = ReadSome(fd);
    if (more.empty()) return got;
    got += more;
  }
  *rest = got.substr(end + 4);
  return got.substr(0, end);
}

std::string QueryValue(const std::string& target, const std::string& key) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  for (std::string_view rest = std::string_view(target).substr(q + 1); !rest.empty();) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.starts_with(key + "=")) return std::string(pair.substr(key.size() + 1));
  }
  return "";
}

// A container runtime's streaming server: each connection is one exec whose first `command`
// says what it does ("cat" echoes stdin until its end, "fail" writes to stdout and stderr and
// exits 7). SPDY as containerd speaks it; a WebSocket request gets a v4 session that sends
// "via-proxy" and echoes one message; an unknown WebSocket protocol gets 403.
class FakeRuntime {
 public:
  FakeRuntime() : listener_(Listen(&port_)) {
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeRuntime() {
    stop_ = true;
    shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  int port() const { return port_; }
  std::atomic<int> pings_answered{0};

 private:
  void Serve() {
    while (!stop_) {
      UniqueFd c(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c.valid()) return;
      std::string rest;
      const std::string head = ReadHead(c.get(), &rest);
      const std::string target =
          head.substr(head.find(' ') + 1, head.find(" HTTP/") - head.find(' ') - 1);
      auto parsed = ParseResponseHead("HTTP/1.1 200 x\r\n" + head.substr(head.find("\r\n") + 2));
      ASSERT_TRUE(parsed.ok());
      if (parsed->Header("Upgrade") == "SPDY/3.1") {
        Spdy(c.get(), target, rest);
      } else {
        WebSocket(c.get(), *parsed, rest);
      }
    }
  }

  void WebSocket(int fd, const ResponseHead& req, std::string rest) {
    const std::string protocol = req.Header("Sec-WebSocket-Protocol");
    if (protocol.find("v4.channel.k8s.io") == std::string::npos) {
      SendAll(fd, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    SendAll(fd,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Accept: " +
                ws::AcceptKey(req.Header("Sec-WebSocket-Key")) +
                "\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n");
    SendAll(fd, ws::EncodeFrame(ws::Opcode::kBinary, "\x01via-proxy"));
    ws::Reader r(ws::Peer::kClient, 1 << 20);
    r.Append(rest);
    for (;;) {
      auto m = r.Next();
      if (!m.ok()) return;
      if (m->has_value()) {
        SendAll(fd, ws::EncodeFrame(ws::Opcode::kBinary, "\x01" + (*m)->payload.substr(1)));
        break;
      }
      const std::string more = ReadSome(fd);
      if (more.empty()) return;
      r.Append(more);
    }
    SendAll(fd, ws::EncodeFrame(ws::Opcode::kClose, ws::ClosePayload(ws::kCloseNormal)));
  }

  void Spdy(int fd, const std::string& target, std::string rest) {
    const std::string command = QueryValue(target, "command");
    // The streams the exec asks for: error, and one per flag (the kubelet's names).
    size_t expected = 1;
    for (const char* flag : {"input", "output", "error"})
      expected += QueryValue(target, flag) == "1";
    SendAll(fd,
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n");
    spdy::Writer w;
    spdy::Reader r(1 << 20);
    std::map<std::string, uint32_t> ids;
    bool started = false;
    bool ping_sent = false;
    auto id = [&](const char* type) { return ids.count(type) ? ids[type] : 0u; };
    auto finish = [&](const std::string& status) {
      std::string out;
      if (id("stdout")) out += w.Data(id("stdout"), "", spdy::kFlagFin);
      if (id("stderr")) out += w.Data(id("stderr"), "", spdy::kFlagFin);
      out += w.Data(id("error"), status);
      out += w.RstStream(id("error"), 5);
      out += w.GoAway(5);
      SendAll(fd, out);
    };
    r.Append(rest);
    for (;;) {
      auto f = r.Next();
      ASSERT_TRUE(f.ok()) << f.error().message();
      if (!f->has_value()) {
        const std::string more = ReadSome(fd);
        if (more.empty()) return;
        r.Append(more);
        continue;
      }
      const spdy::Frame& frame = **f;
      if (frame.type == spdy::FrameType::kSynStream) {
        for (const auto& [k, v] : frame.headers) {
          if (k == "streamtype") ids[v] = frame.stream_id;
        }
        SendAll(fd, w.SynReply(frame.stream_id, {}));
      } else if (frame.type == spdy::FrameType::kPing) {
        ++pings_answered;
        SendAll(fd, w.Data(id("stdout"), "pong " + std::to_string(frame.value) + "\n"));
      } else if (frame.type == spdy::FrameType::kData && frame.stream_id == id("stdin")) {
        if (!frame.data.empty()) SendAll(fd, w.Data(id("stdout"), frame.data));
        if (frame.flags & spdy::kFlagFin) {
          finish(R"({"metadata":{},"status":"Success"})");
          return;
        }
      }
      if (!started && ids.size() == expected) {
        started = true;
        if (command == "fail") {
          SendAll(fd, w.Data(id("stdout"), "out\n") + w.Data(id("stderr"), "err\n"));
          finish(R"({"metadata":{},"status":"Failure","message":"command terminated with )"
                 R"(non-zero exit code: exit code 7","reason":"NonZeroExitCode","details":)"
                 R"({"causes":[{"reason":"ExitCode","message":"7"}]}})");
          return;
        }
        if (command == "ping" && !ping_sent) {
          ping_sent = true;
          SendAll(fd, w.Ping(2));  // the API server must answer it
        }
      }
    }
  }

  int port_ = 0;
  UniqueFd listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A WebSocket client: connects, offers `protocols`, sends masked frames, reads messages.
class WsClient {
 public:
  WsClient(int port, const std::string& target, const std::string& protocols) : fd_(Connect(port)) {
    SendAll(fd_.get(),
            "GET " + target +
                " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
                "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " +
                key_ + "\r\nSec-WebSocket-Protocol: " + protocols + "\r\n\r\n");
    std::string rest;
    auto head = ParseResponseHead(ReadHead(fd_.get(), &rest));
    if (head.ok()) head_ = *head;
    reader_.Append(rest);
  }
  const ResponseHead& head() const { return head_; }
  const std::string& key() const { return key_; }
  void Send(ws::Opcode op, std::string_view payload) {
    SendAll(fd_.get(), ws::EncodeFrame(op, payload, true, kMask));
  }
  void SendChannel(uint8_t channel, std::string_view data) {
    Send(ws::Opcode::kBinary, std::string(1, char(channel)) + std::string(data));
  }
  // The next message, nullopt at the end or after 10 s.
  std::optional<ws::Message> Next() {
    for (;;) {
      auto m = reader_.Next();
      if (!m.ok()) return std::nullopt;
      if (m->has_value()) return std::move(**m);
      const std::string more = ReadSome(fd_.get());
      if (more.empty()) return std::nullopt;
      reader_.Append(more);
    }
  }
  // Reads to the close frame (answering it): each channel's data joined, and the close code.
  std::map<int, std::string> ReadSession(uint16_t* close_code, int* empty_messages = nullptr) {
    std::map<int, std::string> out;
    while (auto m = Next()) {
      if (m->opcode == ws::Opcode::kClose) {
        *close_code = m->payload.size() >= 2
                          ? uint16_t(uint8_t(m->payload[0]) << 8 | uint8_t(m->payload[1]))
                          : 0;
        Send(ws::Opcode::kClose, m->payload);
        return out;
      }
      if (m->opcode != ws::Opcode::kBinary || m->payload.empty()) continue;
      if (m->payload.size() == 1 && empty_messages != nullptr) ++*empty_messages;
      out[uint8_t(m->payload[0])] += m->payload.substr(1);
    }
    *close_code = 0;
    return out;
  }
  // Whether the server closes the connection within 10 s.
  bool Closed() {
    for (;;) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (poll(&p, 1, 10000) <= 0) return false;
      char buf[4096];
      const ssize_t n = recv(fd_.get(), buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
  }

 private:
  UniqueFd fd_;
  std::string key_ = hami::kube::EncodeBase64("0123456789abcdef");
  ResponseHead head_;
  ws::Reader reader_{ws::Peer::kServer, 1 << 20};
};

class ExecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = ApiServer::Start({});
    ASSERT_TRUE(s.ok()) << s.error().message();
    server_ = std::move(*s);
    kubelet_.Get("/exec/.*", [this](const httplib::Request& req, httplib::Response& res) {
      Redirect(req, res);
    });
    kubelet_.Post("/exec/.*", [this](const httplib::Request& req, httplib::Response& res) {
      Redirect(req, res);
    });
    kubelet_port_ = kubelet_.bind_to_any_port("127.0.0.1");
    kubelet_.Get("/ready", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
    kubelet_thread_ = std::thread([this] { kubelet_.listen_after_bind(); });
    // Served once the accept loop runs (the bound socket queues the request until then), so
    // stop() in TearDown always finds a running server.
    httplib::Client ready("127.0.0.1", kubelet_port_);
    ready.set_read_timeout(10, 0);
    auto answer = ready.Get("/ready");
    ASSERT_TRUE(answer && answer->status == 200) << "the fake kubelet did not answer";
    AddNode("node-1", kubelet_port_);
    AddPod("web", "node-1", {"main"});
  }
  void TearDown() override {
    server_->Stop();
    kubelet_.stop();
    kubelet_thread_.join();
  }

  void Redirect(const httplib::Request& req, httplib::Response& res) {
    kubelet_requests_++;
    if (req.path.ends_with("/forbidden")) {
      res.status = 403;
      res.set_content(kForbidden, "application/json");
      return;
    }
    if (req.path.ends_with("/missing")) {
      res.status = 500;
      res.set_content("container not found (\"missing\")", "text/plain");
      return;
    }
    std::string query;
    for (const auto& [k, v] : req.params) query += (query.empty() ? "" : "&") + k + "=" + v;
    res.status = 302;
    res.set_header("Location",
                   "http://127.0.0.1:" + std::to_string(runtime_.port()) + "/exec/tok?" + query);
  }

  void AddNode(const std::string& name, int port) {
    json status = {
        {"addresses", json::array({{{"type", "InternalIP"}, {"address", "127.0.0.1"}}})}};
    if (port >= 0) status["daemonEndpoints"] = {{"kubeletEndpoint", {{"Port", port}}}};
    auto n = server_->CreateObject(hami::kube::kNodes,
                                   {{"metadata", {{"name", name}}}, {"status", status}});
    ASSERT_TRUE(n.ok()) << n.error().message();
  }
  void AddPod(const std::string& name, const std::string& node,
              const std::vector<std::string>& containers) {
    json pod = {{"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec", {{"containers", json::array()}}}};
    for (const std::string& c : containers) {
      pod["spec"]["containers"].push_back({{"name", c}, {"image", "hami.local/sim/base:1"}});
    }
    if (!node.empty()) pod["spec"]["nodeName"] = node;
    auto p = server_->CreateObject(hami::kube::kPods, pod);
    ASSERT_TRUE(p.ok()) << p.error().message();
  }
  std::string ExecPath(const std::string& pod, const std::string& query) {
    return "/api/v1/namespaces/default/pods/" + pod + "/exec?" + query;
  }

  std::unique_ptr<ApiServer> server_;
  FakeRuntime runtime_;
  httplib::Server kubelet_;
  int kubelet_port_ = 0;
  std::thread kubelet_thread_;
  std::atomic<int> kubelet_requests_{0};
};

TEST_F(ExecTest, StdinReachesTheCommandAndItsEndEndsTheSession) {
  WsClient c(server_->port(),
             ExecPath("web", "command=cat&container=main&stdin=true&stdout=true&stderr=true"),
             kStreamProtocolV5);
  ASSERT_EQ(c.head().status, 101);
  EXPECT_EQ(c.head().Header("Sec-WebSocket-Protocol"), kStreamProtocolV5);
  EXPECT_EQ(c.head().Header("Sec-WebSocket-Accept"), ws::AcceptKey(c.key()));
  c.SendChannel(0, "hi\n");
  c.Send(ws::Opcode::kBinary, std::string("\xff\x00", 2));  // v5: stdin ends
  uint16_t code = 0;
  int empty = 0;
  std::map<int, std::string> got = c.ReadSession(&code, &empty);
  EXPECT_EQ(got[1], "hi\n");
  EXPECT_EQ(empty, 1) << "the empty message that opens the session";
  EXPECT_EQ(json::parse(got[3], nullptr, false),
            json::parse(R"({"metadata":{},"status":"Success"})"));
  EXPECT_EQ(code, ws::kCloseNormal);
  EXPECT_TRUE(c.Closed());
  EXPECT_EQ(kubelet_requests_, 1);
}

TEST_F(ExecTest, OutputAndTheExitCodeComeBackOnTheirChannels) {
  WsClient c(server_->port(), ExecPath("web", "command=fail&stdout=true&stderr=true"),
             kStreamProtocolV5);
  ASSERT_EQ(c.head().status, 101);
  uint16_t code = 0;
  std::map<int, std::string> got = c.ReadSession(&code);
  EXPECT_EQ(got[1], "out\n");
  EXPECT_EQ(got[2], "err\n");
  const json status = json::parse(got[3], nullptr, false);
  EXPECT_EQ(status.value("reason", ""), "NonZeroExitCode") << got[3];
  EXPECT_EQ(status["details"]["causes"][0]["message"], "7") << got[3];
  EXPECT_EQ(code, ws::kCloseNormal);
}

TEST_F(ExecTest, PingsAreAnsweredOnBothSides) {
  WsClient c(server_->port(), ExecPath("web", "command=ping&stdin=true&stdout=true"),
             kStreamProtocolV5);
  ASSERT_EQ(c.head().status, 101);
  c.Send(ws::Opcode::kPing, "k8s-ping");
  bool pong = false, runtime_pong = false;
  while (!(pong && runtime_pong)) {
    auto m = c.Next();
    ASSERT_TRUE(m.has_value());
    if (m->opcode == ws::Opcode::kPong) {
      EXPECT_EQ(m->payload, "k8s-ping");
      pong = true;
    }
    if (m->opcode == ws::Opcode::kBinary && m->payload == "\x01pong 2\n") runtime_pong = true;
  }
  c.Send(ws::Opcode::kBinary, std::string("\xff\x00", 2));
  uint16_t code = 0;
  c.ReadSession(&code);
  EXPECT_EQ(code, ws::kCloseNormal);
  EXPECT_EQ(runtime_.pings_answered, 1);
}

TEST_F(ExecTest, TheKubeletsRefusalGoesToTheErrorChannel) {
  AddPod("two", "node-1", {"main", "missing"});
  WsClient c(server_->port(), ExecPath("two", "command=true&container=missing&stdout=true"),
             kStreamProtocolV5);
  ASSERT_EQ(c.head().status, 101);
  uint16_t code = 0;
  std::map<int, std::string> got = c.ReadSession(&code);
  const json status = json::parse(got[3], nullptr, false);
  EXPECT_EQ(status.value("reason", ""), "InternalError") << got[3];
  EXPECT_EQ(status.value("message", ""),
            "Internal error occurred: unable to upgrade connection: container not found "
            "(\"missing\")");
  EXPECT_EQ(code, ws::kCloseNormal);
}

TEST_F(ExecTest, AStatusTheKubeletRefusesWithGoesToTheErrorChannelAsItIs) {
  AddPod("guarded", "node-1", {"forbidden"});
  WsClient c(server_->port(), ExecPath("guarded", "command=true&stdout=true"), kStreamProtocolV5);
  ASSERT_EQ(c.head().status, 101);
  uint16_t code = 0;
  std::map<int, std::string> got = c.ReadSession(&code);
  EXPECT_EQ(json::parse(got[3], nullptr, false), json::parse(kForbidden));
  EXPECT_EQ(code, ws::kCloseNormal);
}

TEST_F(ExecTest, AKubeletThatCannotBeReachedIsReportedNamingTheNode) {
  int closed_port = 0;
  { UniqueFd gone = Listen(&closed_port); }
  AddNode("ghost", closed_port);
  AddPod("haunted", "ghost", {"main"});
  WsClient c(server_->port(), ExecPath("haunted", "command=true&stdout=true"), kStreamProtocolV5);
  ASSERT_EQ(c.head().status, 101);
  uint16_t code = 0;
  std::map<int, std::string> got = c.ReadSession(&code);
  const std::string message = json::parse(got[3], nullptr, false).value("message", "");
  EXPECT_EQ(message, "Internal error occurred: dial tcp 127.0.0.1:" + std::to_string(closed_port) +
                         ": connect: connection refused (the kubelet of node \"ghost\")");

  AddNode("portless", -1);
  AddPod("nowhere", "portless", {"main"});
  WsClient d(server_->port(), ExecPath("nowhere", "command=true&stdout=true"), kStreamProtocolV5);
  ASSERT_EQ(d.head().status, 101);
  got = d.ReadSession(&code);
  EXPECT_NE(json::parse(got[3], nullptr, false)
                .value("message", "")
                .find("node \"portless\" publishes no kubelet port"),
            std::string::npos)
      << got[3];
}

TEST_F(ExecTest, BadRequestsAreRefusedBeforeTheUpgrade) {
  AddPod("pair", "node-1", {"a", "b"});
  AddPod("pending", "", {"main"});
  AddPod("lost", "node-gone", {"main"});
  struct Case {
    std::string pod, query;
    int status;
    std::string message;
  };
  const Case cases[] = {
      {"nosuch", "command=true&stdout=true", 404, "pods \"nosuch\" not found"},
      {"web", "command=true&stdout=true&container=nosuch", 400,
       "container nosuch is not valid for pod web"},
      {"pair", "command=true&stdout=true", 400,
       "a container name must be specified for pod pair, choose one of: [a b]"},
      {"pending", "command=true&stdout=true", 400, "pod pending does not have a host assigned"},
      {"lost", "command=true&stdout=true", 404, "nodes \"node-gone\" not found"},
      {"web", "stdout=true", 400, "you must specify at least one command for the container"},
  };
  for (const Case& k : cases) {
    WsClient c(server_->port(), ExecPath(k.pod, k.query), kStreamProtocolV5);
    EXPECT_EQ(c.head().status, k.status) << k.pod << " " << k.query;
  }
  httplib::Client http("127.0.0.1", server_->port());
  for (const Case& k : cases) {
    auto r = http.Post(ExecPath(k.pod, k.query), "", "application/json");
    ASSERT_TRUE(r);
    const json body = json::parse(r->body, nullptr, false);
    EXPECT_EQ(r->status, k.status) << r->body;
    EXPECT_EQ(body.value("message", ""), k.message) << r->body;
  }
  auto plain = http.Post(ExecPath("web", "command=true&stdout=true"), "", "application/json");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 400);
  EXPECT_EQ(json::parse(plain->body, nullptr, false).value("message", ""),
            "Upgrade request required");
  EXPECT_EQ(kubelet_requests_, 0);
}

TEST_F(ExecTest, OtherProtocolsArePassedToTheRuntimeAsTheyAre) {
  WsClient c(server_->port(), ExecPath("web", "command=sh&stdin=true&stdout=true"),
             "v4.channel.k8s.io");
  ASSERT_EQ(c.head().status, 101);
  EXPECT_EQ(c.head().Header("Sec-WebSocket-Protocol"), "v4.channel.k8s.io");
  EXPECT_EQ(c.head().Header("Sec-WebSocket-Accept"), ws::AcceptKey(c.key()));
  auto first = c.Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->payload, "\x01via-proxy");
  c.SendChannel(0, "echo me");
  auto echoed = c.Next();
  ASSERT_TRUE(echoed.has_value());
  EXPECT_EQ(echoed->payload,
            "\x01"
            "echo me");
  auto close = c.Next();
  ASSERT_TRUE(close.has_value());
  EXPECT_EQ(close->opcode, ws::Opcode::kClose);

  WsClient refused(server_->port(), ExecPath("web", "command=sh&stdout=true"), "v3.channel.k8s.io");
  EXPECT_EQ(refused.head().status, 403);
}

TEST_F(ExecTest, AnUnreachableKubeletIsAnErrorDialingBackendForTheProxy) {
  int closed_port = 0;
  { UniqueFd gone = Listen(&closed_port); }
  AddNode("ghost", closed_port);
  AddPod("haunted", "ghost", {"main"});
  httplib::Client http("127.0.0.1", server_->port());
  auto r = http.Post(ExecPath("haunted", "command=true&stdout=true"),
                     {{"Connection", "Upgrade"},
                      {"Upgrade", "SPDY/3.1"},
                      {"X-Stream-Protocol-Version", "v4.channel.k8s.io"}},
                     "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  const json body = json::parse(r->body, nullptr, false);
  EXPECT_EQ(body.value("reason", "x"), "") << r->body;
  EXPECT_EQ(body.value("message", ""),
            "error dialing backend: dial tcp 127.0.0.1:" + std::to_string(closed_port) +
                ": connect: connection refused (the kubelet of node \"ghost\")");
}

}  // namespace
}  // namespace hami::sim::kube
