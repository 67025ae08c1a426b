#include "sim/oci/blob.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace hami::sim::oci {
namespace {

TEST(Sha256Digest, MatchesTheStandardsTestVectors) {
  // FIPS 180-2, appendix B.1, and the empty message.
  EXPECT_EQ(*Sha256Digest("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(*Sha256Digest(""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

// Inflates one gzip member with zlib's own reader.
std::string Gunzip(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out(1 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = uInt(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

TEST(Gzip, IsAGzipMemberWithoutTimeThatInflatesBack) {
  std::string data;
  for (int i = 0; i < 10000; ++i) data += "line " + std::to_string(i) + "\n";
  const std::string gz = *Gzip(data);
  ASSERT_GE(gz.size(), 18u);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
  EXPECT_EQ(gz[2], 8) << "deflate";
  EXPECT_EQ(gz.substr(4, 4), std::string(4, '\0')) << "no modification time";
  EXPECT_LT(gz.size(), data.size());
  EXPECT_EQ(Gunzip(gz), data);
  EXPECT_EQ(*Gzip(data), gz) << "the same input gives the same bytes";
  EXPECT_EQ(Gunzip(*Gzip("")), "");
}

}  // namespace
}  // namespace hami::sim::oci
