// The integrity check's arithmetic: MD2 against RFC 1319's test suite, HMAC over it, and the
// layout of the record the CUDA runtime recomputes.
#include "sim/cuda/integrity.h"

#include <gtest/gtest.h>

#include <string>

#include "common/strings.h"

namespace hami::sim {
namespace {

std::string Hex(const Md2Digest& d) { return HexEncode(d); }

Md2Digest Md2Of(const std::string& s) {
  return Md2(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

TEST(Md2, MatchesTheRfc1319TestSuite) {
  EXPECT_EQ(Hex(Md2Of("")), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(Hex(Md2Of("a")), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(Hex(Md2Of("abc")), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(Hex(Md2Of("message digest")), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(Hex(Md2Of("abcdefghijklmnopqrstuvwxyz")), "4e8ddff3650292ab5a4108c3aa47940b");
  EXPECT_EQ(Hex(Md2Of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")),
            "da33def2a42df13975352846c30338cd");
  EXPECT_EQ(Hex(Md2Of("1234567890123456789012345678901234567890123456789012345678901234567890"
                      "1234567890")),
            "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(HmacMd2, IsTheRfc2104ConstructionOverMd2) {
  // H((K ^ opad) || H((K ^ ipad) || m)) with a one-block key, spelled out.
  const uint8_t key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const std::string m = "message";
  std::string inner, outer;
  for (uint8_t k : key) inner += char(k ^ 0x36);
  inner += m;
  Md2Digest inner_digest = Md2Of(inner);
  for (uint8_t k : key) outer += char(k ^ 0x5c);
  outer.append(reinterpret_cast<const char*>(inner_digest.data()), inner_digest.size());
  EXPECT_EQ(
      HmacMd2(key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(m.data()), m.size())),
      Md2Of(outer));
}

TEST(IntegrityMessage, IsACallerRecordThenOneRecordPerDevice) {
  IntegrityCaller c;
  c.driver_version = 13000;
  c.pid = 0x01020304;
  c.thread_low32 = 0x0a0b0c0d;
  c.runtime_table = 0x1111;
  c.integrity_table = 0x2222;
  c.check_function = 0x3333;
  IntegrityDevice d;
  d.uuid[0] = 0xaa;
  d.pci_domain = 0;
  d.pci_bus = 0x19;
  d.pci_device = 0;
  IntegrityDevice devices[2] = {d, d};
  std::vector<uint8_t> m = IntegrityMessage(c, 13002, 0x0102030405060708ull, devices);
  ASSERT_EQ(m.size(), 48u + 2 * 28u);
  EXPECT_EQ(m[0], 0xc8);  // 13000 little-endian
  EXPECT_EQ(m[1], 0x32);
  EXPECT_EQ(m[4], 0xca);  // 13002
  EXPECT_EQ(m[8], 0x04);  // the pid
  EXPECT_EQ(m[12], 0x0d);
  EXPECT_EQ(m[16], 0x11);
  EXPECT_EQ(m[24], 0x22);
  EXPECT_EQ(m[32], 0x33);
  EXPECT_EQ(m[40], 0x08);       // the time stamp
  EXPECT_EQ(m[48], 0xaa);       // the first device's UUID
  EXPECT_EQ(m[48 + 20], 0x19);  // its PCI bus
}

TEST(IntegrityAnswer, TheFirstTwoRequestsAreConstantsAndTheThirdADigest) {
  IntegrityCaller c;
  uint64_t a[2], b[2];
  ASSERT_TRUE(IntegrityAnswer(c, 13000, 1, {}, a));
  ASSERT_TRUE(IntegrityAnswer(c, 12080, 99, {}, b));
  EXPECT_EQ(a[0], b[0]) << "independent of version and time";
  EXPECT_EQ(a[1], b[1]);
  ASSERT_TRUE(IntegrityAnswer(c, 13001, 1, {}, b));
  EXPECT_NE(a[0], b[0]);
  EXPECT_EQ(a[1], b[1]);
  uint64_t x[2], y[2];
  ASSERT_TRUE(IntegrityAnswer(c, 13002, 1, {}, x));
  ASSERT_TRUE(IntegrityAnswer(c, 13002, 2, {}, y));
  EXPECT_TRUE(x[0] != y[0] || x[1] != y[1]) << "the digest covers the time stamp";
  EXPECT_FALSE(IntegrityAnswer(c, 13003, 1, {}, x)) << "an unknown request";
}

}  // namespace
}  // namespace hami::sim
