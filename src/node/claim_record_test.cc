#include "node/claim_record.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "common/temp_dir.h"

namespace hami::node {
namespace {

TEST(ClaimRecord, SitsBesideTheDirectory) {
  EXPECT_EQ(ClaimRecordPath("/usr/local/vgpu/containers/u-1_claim"),
            "/usr/local/vgpu/containers/u-1_claim.claim");
}

TEST(ClaimRecord, TextParsesBackToTheSameRecord) {
  const ClaimRecord r{"ml", "trainer-gpu", "0b6f8c2e-6d1a-4f0e-9a55-3c2d1e7f9a10"};
  EXPECT_EQ(ClaimRecordText(r),
            "{\"name\":\"trainer-gpu\",\"namespace\":\"ml\","
            "\"uid\":\"0b6f8c2e-6d1a-4f0e-9a55-3c2d1e7f9a10\"}\n");
  auto back = ParseClaimRecord(ClaimRecordText(r));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, r);
}

TEST(ClaimRecord, ParseRefusesWhatIsNotARecordNamingWhy) {
  auto message = [](std::string_view text) {
    auto r = ParseClaimRecord(text);
    return r.ok() ? std::string("accepted") : r.error().message();
  };
  EXPECT_EQ(message("{"), "claim record: not JSON");
  EXPECT_EQ(message("[]"), "claim record: not a JSON object");
  EXPECT_EQ(message(R"({"name":"c","uid":"u"})"), "claim record: no namespace");
  EXPECT_EQ(message(R"({"namespace":"ml","uid":"u"})"), "claim record: no name");
  EXPECT_EQ(message(R"({"namespace":"ml","name":"c"})"), "claim record: no uid");
  EXPECT_EQ(message(R"({"namespace":"ml","name":7,"uid":"u"})"),
            "claim record: name is not a string");
  EXPECT_EQ(message(R"({"namespace":"","name":"c","uid":"u"})"),
            "claim record: namespace is empty");
  EXPECT_EQ(message(R"({"namespace":"ml","name":"c","uid":"a/b"})"),
            "claim record: uid 'a/b': contains '/'");
  EXPECT_EQ(message(R"({"namespace":"ml","name":"c","uid":"u","extra":1})"), "accepted");
}

TEST(ClaimRecord, ReadSaysAbsentRefusesASymlinkAndNamesABadFile) {
  TempDir dir("hami-claim-record-test");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("u_claim.claim");
  EXPECT_EQ(ReadClaimRecord(path).error().code(), ErrorCode::kNotFound);
  ASSERT_EQ(symlink("/etc/passwd", path.c_str()), 0);
  auto linked = ReadClaimRecord(path);
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.error().code(), ErrorCode::kNotFound);
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_TRUE(std::ofstream(path) << "{}");
  auto bad = ReadClaimRecord(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), path + ": claim record: no namespace");
  ASSERT_TRUE(std::ofstream(path) << ClaimRecordText({"ml", "c", "u"}));
  auto read = ReadClaimRecord(path);
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(*read, (ClaimRecord{"ml", "c", "u"}));
}

}  // namespace
}  // namespace hami::node
