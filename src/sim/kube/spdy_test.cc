// SPDY/3.1 framing: the header dictionary, frames written and read back, the answer
// containerd 1.6.20's streaming server gave to an exec (captured from the wire), and the
// reader's refusals.
#include "sim/kube/spdy.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <zlib.h>

#include <span>

#include "common/strings.h"

namespace hami::sim::kube::spdy {
namespace {

std::string FromHex(std::string_view hex) {
  auto bytes = HexDecode(hex);
  EXPECT_TRUE(bytes.ok());
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
}

// containerd 1.6.20's answer to SYN_STREAM error (1), stdout (3), stderr (5) for
// `sh -c 'echo hi; exit 7'`: three SYN_REPLYs sharing one zlib stream, stdout's data and FIN,
// stderr's FIN, the v4 status on the error stream, RST_STREAM of the error stream, GOAWAY.
constexpr std::string_view kContainerdAnswer =
    "80030002000000140000000578f9e3c6a7c26260606000000000ffff800300020000000c000000010261000000"
    "00ffff800300020000000c00000003026100000000ffff000000030000000368690a0000000301000000000000"
    "050100000000000001000000ed7b226d65746164617461223a7b7d2c22737461747573223a224661696c757265"
    "222c226d657373616765223a22636f6d6d616e64207465726d696e617465642077697468206e6f6e2d7a65726f"
    "206578697420636f64653a206572726f7220657865637574696e6720636f6d6d616e64205b7368202d63206563"
    "686f2068693b206578697420375d2c206578697420636f64652037222c22726561736f6e223a224e6f6e5a6572"
    "6f45786974436f6465222c2264657461696c73223a7b22636175736573223a5b7b22726561736f6e223a224578"
    "6974436f6465222c226d657373616765223a2237227d5d7d7d800300030000000800000001000000058003000700"
    "0000080000000500000000";

std::vector<Frame> ReadAll(Reader& r, std::string_view bytes, std::string* error = nullptr) {
  std::vector<Frame> out;
  r.Append(bytes);
  for (;;) {
    auto f = r.Next();
    if (!f.ok()) {
      if (error != nullptr) *error = f.error().message();
      return out;
    }
    if (!f->has_value()) return out;
    out.push_back(std::move(**f));
  }
}

TEST(Dictionary, IsTheSpdy3Dictionary) {
  const std::string& d = Dictionary();
  EXPECT_EQ(d.size(), 1423u);
  EXPECT_EQ(adler32(1, reinterpret_cast<const Bytef*>(d.data()), uInt(d.size())), 0xe3c6a7c2u);
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  ASSERT_EQ(EVP_Digest(d.data(), d.size(), md, &n, EVP_sha256(), nullptr), 1);
  EXPECT_EQ(HexEncode(std::span<const uint8_t>(md, n)),
            "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02");
}

TEST(Reader, ReadsContainerdsAnswerToAnExec) {
  Reader r(1 << 20);
  std::string error;
  std::vector<Frame> f = ReadAll(r, FromHex(kContainerdAnswer), &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(f.size(), 9u);
  EXPECT_EQ(f[0].type, FrameType::kSynReply);
  EXPECT_EQ(f[0].stream_id, 5u);
  EXPECT_TRUE(f[0].headers.empty());
  EXPECT_EQ(f[1].type, FrameType::kSynReply);
  EXPECT_EQ(f[1].stream_id, 1u);
  EXPECT_EQ(f[2].stream_id, 3u);
  EXPECT_EQ(f[3].type, FrameType::kData);
  EXPECT_EQ(f[3].stream_id, 3u);
  EXPECT_EQ(f[3].data, "hi\n");
  EXPECT_EQ(f[3].flags, 0);
  EXPECT_EQ(f[4].flags, kFlagFin);
  EXPECT_EQ(f[4].stream_id, 3u);
  EXPECT_EQ(f[5].stream_id, 5u);
  EXPECT_EQ(f[5].flags, kFlagFin);
  EXPECT_EQ(f[6].stream_id, 1u);
  EXPECT_NE(f[6].data.find("\"reason\":\"NonZeroExitCode\""), std::string::npos);
  EXPECT_EQ(f[7].type, FrameType::kRstStream);
  EXPECT_EQ(f[7].stream_id, 1u);
  EXPECT_EQ(f[7].value, 5u);  // CANCEL
  EXPECT_EQ(f[8].type, FrameType::kGoAway);
  EXPECT_EQ(f[8].stream_id, 5u);
}

TEST(Reader, ReadsContainerdsAnswerInAnyPieces) {
  const std::string bytes = FromHex(kContainerdAnswer);
  Reader r(1 << 20);
  size_t frames = 0;
  for (char c : bytes) {
    r.Append(std::string_view(&c, 1));
    for (;;) {
      auto f = r.Next();
      ASSERT_TRUE(f.ok()) << f.error().message();
      if (!f->has_value()) break;
      ++frames;
    }
  }
  EXPECT_EQ(frames, 9u);
}

TEST(Writer, FramesComeBackThroughAReader) {
  Writer w;
  Reader r(1 << 20);
  // One after another: the header blocks share one compression stream, in frame order.
  std::string bytes = w.SynStream(1, {{"streamtype", "error"}});
  bytes += w.SynStream(3, {{"streamtype", "stdin"}}, kFlagUnidirectional);
  bytes += w.SynReply(3, {});
  bytes += w.Data(3, "hi\n");
  bytes += w.Data(3, "", kFlagFin);
  bytes += w.RstStream(1, 5);
  bytes += w.Ping(7);
  bytes += w.GoAway(3, 0);
  std::string error;
  std::vector<Frame> f = ReadAll(r, bytes, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(f.size(), 8u);
  EXPECT_EQ(f[0].type, FrameType::kSynStream);
  EXPECT_EQ(f[0].stream_id, 1u);
  EXPECT_EQ(f[0].headers, (Headers{{"streamtype", "error"}}));
  EXPECT_EQ(f[1].headers, (Headers{{"streamtype", "stdin"}}));
  EXPECT_EQ(f[1].flags, kFlagUnidirectional);
  EXPECT_EQ(f[2].type, FrameType::kSynReply);
  EXPECT_TRUE(f[2].headers.empty());
  EXPECT_EQ(f[3].data, "hi\n");
  EXPECT_EQ(f[4].flags, kFlagFin);
  EXPECT_EQ(f[5].type, FrameType::kRstStream);
  EXPECT_EQ(f[5].value, 5u);
  EXPECT_EQ(f[6].type, FrameType::kPing);
  EXPECT_EQ(f[6].value, 7u);
  EXPECT_EQ(f[7].type, FrameType::kGoAway);
  EXPECT_EQ(f[7].stream_id, 3u);
}

TEST(Writer, CompressesHeadersWithTheDictionary) {
  Writer w;
  const std::string frame = w.SynStream(1, {{"streamtype", "error"}});
  // 8 bytes of frame header, 10 of SYN_STREAM fields, then the zlib header: FDICT set and the
  // dictionary's Adler-32.
  ASSERT_GT(frame.size(), 24u);
  EXPECT_NE(uint8_t(frame[19]) & 0x20, 0);
  EXPECT_EQ(frame.substr(20, 4), FromHex("e3c6a7c2"));
}

TEST(Reader, SkipsUnknownControlFramesAndKeepsSettings) {
  Reader r(1024);
  // Type 5 (NOOP in SPDY/2) of length 0, then SETTINGS with one entry.
  const std::string bytes = FromHex("8003000500000000") + FromHex("800300040000000c00000001") +
                            FromHex("0100000700000100");
  std::vector<Frame> f = ReadAll(r, bytes);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].type, FrameType::kSettings);
  EXPECT_EQ(f[0].value, 1u);
}

TEST(Reader, RefusesMalformedFrames) {
  const std::pair<const char*, std::string> cases[] = {
      {"version 2", FromHex("8002000200000004") + FromHex("00000001")},
      {"too long", FromHex("0000000100000401") + std::string(1025, 'x')},
      {"short RST_STREAM", FromHex("8003000300000004") + FromHex("00000001")},
      {"short PING", FromHex("8003000600000002") + FromHex("0000")},
      {"SETTINGS count", FromHex("8003000400000004") + FromHex("00000002")},
      {"SYN_REPLY without a stream", FromHex("8003000200000002") + FromHex("0000")},
      {"a header block that is not zlib",
       FromHex("8003000200000008") + FromHex("00000001") + "junk"},
  };
  for (const auto& [what, bytes] : cases) {
    Reader r(1024);
    std::string error;
    std::vector<Frame> f = ReadAll(r, bytes, &error);
    EXPECT_TRUE(f.empty()) << what;
    EXPECT_FALSE(error.empty()) << what;
    // Failed for good.
    r.Append(FromHex("8003000600000004") + FromHex("00000001"));
    EXPECT_FALSE(r.Next().ok()) << what;
  }
}

TEST(HeaderBlock, RoundTripsAndRefusesWhatDoesNotParse) {
  const Headers h = {{"streamtype", "stdout"}, {"x", ""}};
  auto back = ParseHeaderBlock(EncodeHeaderBlock(h));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, h);
  EXPECT_FALSE(ParseHeaderBlock("").ok());
  EXPECT_FALSE(ParseHeaderBlock(FromHex("00000001")).ok());
  EXPECT_FALSE(ParseHeaderBlock(FromHex("0000000100000000000000000000")).ok());  // empty name
  EXPECT_FALSE(ParseHeaderBlock(EncodeHeaderBlock(h) + "x").ok());
  EXPECT_FALSE(ParseHeaderBlock(FromHex("00100000")).ok());  // too many headers
}

}  // namespace
}  // namespace hami::sim::kube::spdy
