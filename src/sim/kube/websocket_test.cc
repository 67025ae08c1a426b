// WebSocket framing: the handshake key, frames in each length form, masking, and the reader's
// joining of fragments and refusal of every protocol error the RFC names.
#include "sim/kube/websocket.h"

#include <gtest/gtest.h>

namespace hami::sim::kube::websocket {
namespace {

constexpr std::array<uint8_t, 4> kMask = {0x37, 0xfa, 0x21, 0x3d};

std::string Bytes(std::initializer_list<uint8_t> b) { return std::string(b.begin(), b.end()); }

// Every message `bytes` holds, read one byte at a time (the reader must not care how bytes
// arrive); the error, if one, in `error`.
std::vector<Message> ReadAll(Peer from, std::string_view bytes, size_t max = 1 << 20,
                             std::string* error = nullptr, uint16_t* code = nullptr) {
  Reader r(from, max);
  std::vector<Message> out;
  for (char c : bytes) {
    r.Append(std::string_view(&c, 1));
    for (;;) {
      auto m = r.Next();
      if (!m.ok()) {
        if (error != nullptr) *error = m.error().message();
        if (code != nullptr) *code = r.close_code();
        return out;
      }
      if (!m->has_value()) break;
      out.push_back(std::move(**m));
    }
  }
  return out;
}

TEST(AcceptKey, IsTheRfcsExample) {
  EXPECT_EQ(AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  EXPECT_TRUE(ValidKey("dGhlIHNhbXBsZSBub25jZQ=="));
  EXPECT_FALSE(ValidKey("dGhlIHNhbXBsZQ=="));  // 11 bytes
  EXPECT_FALSE(ValidKey("not base64 at all!!!!!!!"));
  EXPECT_FALSE(ValidKey(""));
}

TEST(HeaderTokens, SplitsAtCommasAndTrims) {
  EXPECT_EQ(HeaderTokens("v5.channel.k8s.io, v4.channel.k8s.io,,\tchannel.k8s.io "),
            (std::vector<std::string>{"v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"}));
  EXPECT_TRUE(HeaderTokens("").empty());
  EXPECT_TRUE(HeaderTokens(" , ").empty());
}

TEST(EncodeFrame, UsesTheShortestLengthForm) {
  EXPECT_EQ(EncodeFrame(Opcode::kBinary, std::string(125, 'x')).substr(0, 2), Bytes({0x82, 125}));
  EXPECT_EQ(EncodeFrame(Opcode::kBinary, std::string(126, 'x')).substr(0, 4),
            Bytes({0x82, 126, 0x00, 126}));
  EXPECT_EQ(EncodeFrame(Opcode::kBinary, std::string(65535, 'x')).substr(0, 4),
            Bytes({0x82, 126, 0xff, 0xff}));
  EXPECT_EQ(EncodeFrame(Opcode::kBinary, std::string(65536, 'x')).substr(0, 10),
            Bytes({0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(EncodeFrame(Opcode::kText, "a", /*fin=*/false), Bytes({0x01, 0x01, 'a'}));
}

TEST(EncodeFrame, MasksAsTheRfcsExample) {
  // RFC 6455 5.7: a masked text "Hello".
  EXPECT_EQ(EncodeFrame(Opcode::kText, "Hello", true, kMask),
            Bytes({0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}));
}

TEST(Reader, ReadsEachLengthFormFromAClientAndUnmasks) {
  for (size_t n : {size_t(0), size_t(1), size_t(125), size_t(126), size_t(65535), size_t(65536),
                   size_t(70000)}) {
    std::string payload(n, '\0');
    for (size_t i = 0; i < n; ++i) payload[i] = char(i * 7);
    std::vector<Message> got =
        ReadAll(Peer::kClient, EncodeFrame(Opcode::kBinary, payload, true, kMask));
    ASSERT_EQ(got.size(), 1u) << n;
    EXPECT_EQ(got[0].opcode, Opcode::kBinary);
    EXPECT_EQ(got[0].payload, payload) << n;
  }
}

TEST(Reader, JoinsFragmentsAndPassesControlFramesBetweenThem) {
  const std::string bytes = EncodeFrame(Opcode::kBinary, "\x01he", false) +
                            EncodeFrame(Opcode::kPing, "p") +
                            EncodeFrame(Opcode::kContinuation, "ll", false) +
                            EncodeFrame(Opcode::kContinuation, "o", true) +
                            EncodeFrame(Opcode::kClose, ClosePayload(kCloseNormal, "bye"));
  std::vector<Message> got = ReadAll(Peer::kServer, bytes);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].opcode, Opcode::kPing);
  EXPECT_EQ(got[0].payload, "p");
  EXPECT_EQ(got[1].opcode, Opcode::kBinary);
  EXPECT_EQ(got[1].payload, "\x01hello");
  EXPECT_EQ(got[2].opcode, Opcode::kClose);
  EXPECT_EQ(got[2].payload, Bytes({0x03, 0xe8}) + "bye");
}

TEST(Reader, RefusesEachProtocolError) {
  struct Case {
    const char* what;
    Peer from;
    std::string bytes;
    uint16_t code;
  };
  const Case cases[] = {
      {"unmasked client frame", Peer::kClient, EncodeFrame(Opcode::kBinary, "x"),
       kCloseProtocolError},
      {"masked server frame", Peer::kServer, EncodeFrame(Opcode::kBinary, "x", true, kMask),
       kCloseProtocolError},
      {"reserved bit", Peer::kServer, Bytes({0xc2, 0x00}), kCloseProtocolError},
      {"unknown opcode", Peer::kServer, Bytes({0x83, 0x00}), kCloseProtocolError},
      {"fragmented control", Peer::kServer, Bytes({0x09, 0x00}), kCloseProtocolError},
      {"long control", Peer::kServer, EncodeFrame(Opcode::kPing, std::string(126, 'p')),
       kCloseProtocolError},
      {"continuation outside a message", Peer::kServer, EncodeFrame(Opcode::kContinuation, "x"),
       kCloseProtocolError},
      {"data inside a message", Peer::kServer,
       EncodeFrame(Opcode::kBinary, "a", false) + EncodeFrame(Opcode::kBinary, "b"),
       kCloseProtocolError},
      {"64-bit length with the top bit", Peer::kServer,
       Bytes({0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}), kCloseProtocolError},
      {"16-bit length below 126", Peer::kServer, Bytes({0x82, 126, 0, 5}) + "hello",
       kCloseProtocolError},
      {"64-bit length below 65536", Peer::kServer, Bytes({0x82, 127, 0, 0, 0, 0, 0, 0, 0, 200}),
       kCloseProtocolError},
      {"one-byte close", Peer::kServer, Bytes({0x88, 0x01, 0x03}), kCloseProtocolError},
      {"too big", Peer::kServer, EncodeFrame(Opcode::kBinary, std::string(33, 'x')), kCloseTooBig},
      {"too big in fragments", Peer::kServer,
       EncodeFrame(Opcode::kBinary, std::string(20, 'x'), false) +
           EncodeFrame(Opcode::kContinuation, std::string(20, 'x')),
       kCloseTooBig},
  };
  for (const Case& c : cases) {
    std::string error;
    uint16_t code = 0;
    std::vector<Message> got = ReadAll(c.from, c.bytes, 32, &error, &code);
    EXPECT_TRUE(got.empty()) << c.what;
    EXPECT_FALSE(error.empty()) << c.what;
    EXPECT_EQ(code, c.code) << c.what << ": " << error;
  }
}

TEST(Reader, StaysFailedAfterAnError) {
  Reader r(Peer::kClient, 1024);
  r.Append(EncodeFrame(Opcode::kBinary, "x"));  // not masked
  EXPECT_FALSE(r.Next().ok());
  r.Append(EncodeFrame(Opcode::kBinary, "x", true, kMask));
  EXPECT_FALSE(r.Next().ok());
}

TEST(Reader, WaitsForTheWholeFrame) {
  Reader r(Peer::kServer, 1 << 20);
  const std::string frame = EncodeFrame(Opcode::kBinary, std::string(300, 'z'));
  r.Append(frame.substr(0, 3));
  auto m = r.Next();
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->has_value());
  r.Append(frame.substr(3));
  m = r.Next();
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->payload.size(), 300u);
  EXPECT_EQ(r.buffered(), 0u);
}

}  // namespace
}  // namespace hami::sim::kube::websocket
