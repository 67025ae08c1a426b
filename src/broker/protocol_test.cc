// The codec against the golden frames (written out byte by byte in golden_frames.h).
#include "broker/protocol.h"

#include <gtest/gtest.h>

#include <vector>

#include "broker/golden_frames.h"

namespace hami::broker {
namespace {

std::vector<uint8_t> Bytes(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

TEST(Protocol, EncodesTheGoldenFrames) {
  EXPECT_EQ(Bytes(EncodeRequest()), golden::kRequestV1);
  EXPECT_EQ(Bytes(EncodeSuccess(8011)), golden::kResponsePid8011);
  EXPECT_EQ(Bytes(EncodeInvalid()), golden::kResponseInvalid);
  EXPECT_EQ(Bytes(EncodeRequest({2, 1})), golden::kRequestBadVersion);
  EXPECT_EQ(Bytes(EncodeRequest({1, 2})), golden::kRequestBadCommand);
  static_assert(EncodeSuccess(0x01020304)[8] == 1 && EncodeSuccess(0x01020304)[11] == 4,
                "big-endian");
}

TEST(Protocol, DecodesEveryGoldenRequest) {
  EXPECT_EQ(DecodeRequest(golden::kRequestV1).error, FrameError::kNone);
  EXPECT_EQ(DecodeRequest(golden::kRequestBadMagic).error, FrameError::kBadMagic);
  EXPECT_EQ(DecodeRequest(golden::kRequestBadVersion).error, FrameError::kBadVersion);
  EXPECT_EQ(DecodeRequest(golden::kRequestBadCommand).error, FrameError::kBadCommand);
  EXPECT_EQ(DecodeRequest(golden::kRequestTruncated).error, FrameError::kTruncated);
  DecodedRequest extra = DecodeRequest(golden::kRequestExtraBytes);
  EXPECT_EQ(extra.error, FrameError::kNone) << "bytes after the frame are not looked at";
  EXPECT_EQ(extra.request.version, 1);
  EXPECT_EQ(extra.request.command, uint16_t(Command::kGetPid));
}

TEST(Protocol, DecodesEveryGoldenResponse) {
  DecodedResponse ok = DecodeResponse(golden::kResponsePid8011);
  EXPECT_EQ(ok.error, FrameError::kNone);
  EXPECT_EQ(ok.response.pid, 8011u);
  EXPECT_EQ(DecodeResponse(golden::kResponseExtraBytes).response.pid, 8011u);
  EXPECT_EQ(DecodeResponse(golden::kResponseInvalid).error, FrameError::kRefused);
  EXPECT_EQ(DecodeResponse(golden::kResponseBadMagic).error, FrameError::kBadMagic);
  EXPECT_EQ(DecodeResponse(golden::kResponseBadVersion).error, FrameError::kBadVersion);
  EXPECT_EQ(DecodeResponse(golden::kResponsePidZero).error, FrameError::kBadPid);
  EXPECT_EQ(DecodeResponse(golden::kResponsePidAboveIntMax).error, FrameError::kBadPid);
  EXPECT_EQ(DecodeResponse(golden::kResponseTruncated).error, FrameError::kTruncated);
}

TEST(Protocol, EveryPrefixShorterThanAFrameIsTruncated) {
  for (size_t n = 0; n < kRequestSize; ++n) {
    EXPECT_EQ(DecodeRequest(std::span(golden::kRequestV1).first(n)).error, FrameError::kTruncated);
  }
  for (size_t n = 0; n < kResponseSize; ++n) {
    EXPECT_EQ(DecodeResponse(std::span(golden::kResponsePid8011).first(n)).error,
              FrameError::kTruncated);
  }
}

TEST(Protocol, RoundTripsEveryPidItMayCarry) {
  for (uint32_t pid : {1u, 255u, 256u, 65535u, 65536u, 8011u, 0x7fffffffu}) {
    DecodedResponse d = DecodeResponse(EncodeSuccess(pid));
    EXPECT_EQ(d.error, FrameError::kNone) << pid;
    EXPECT_EQ(d.response.pid, pid);
  }
}

}  // namespace
}  // namespace hami::broker
