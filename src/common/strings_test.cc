#include "common/strings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(SplitString, KeepsEveryPartIncludingEmptyOnes) {
  EXPECT_THAT(SplitString("a,,b,", ',', false), ElementsAre("a", "", "b", ""));
  EXPECT_THAT(SplitString("", ',', false), ElementsAre(""));
  EXPECT_THAT(SplitString("abc", ',', false), ElementsAre("abc"));
  EXPECT_THAT(SplitString(",", ',', false), ElementsAre("", ""));
}

TEST(SplitString, SkipsEmptyPartsWhenAsked) {
  EXPECT_THAT(SplitString("a,,b,", ',', true), ElementsAre("a", "b"));
  EXPECT_THAT(SplitString("", ',', true), IsEmpty());
  EXPECT_THAT(SplitString(":::", ':', true), IsEmpty());
  EXPECT_THAT(SplitString(":x:", ':', true), ElementsAre("x"));
}

TEST(SplitString, PartsViewTheInput) {
  std::string_view text = "ab:cd";
  auto parts = SplitString(text, ':', false);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].data(), text.data() + 3);
}

TEST(HexEncode, WritesTwoLowerCaseDigitsPerByte) {
  const uint8_t bytes[] = {0x00, 0x0a, 0xff, 0x7c};
  EXPECT_EQ(HexEncode(bytes), "000aff7c");
  EXPECT_EQ(HexEncode({}), "");
}

TEST(HexDecode, ReadsEitherCaseAndRoundTrips) {
  auto r = HexDecode("000aFF7c");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_THAT(*r, ElementsAre(0x00, 0x0a, 0xff, 0x7c));
  EXPECT_EQ(HexEncode(*r), "000aff7c");
  EXPECT_THAT(*HexDecode(""), IsEmpty());
}

TEST(HexDecode, NamesTheBadCharacterAndItsOffset) {
  auto r = HexDecode("00g1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr("'g' at offset 2"));
  EXPECT_THAT(HexDecode("0\n").error().message(), HasSubstr("\\x0a at offset 1"));
}

TEST(HexDecode, RejectsAnOddNumberOfDigits) {
  auto r = HexDecode("abc");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr("odd number of digits (3)"));
}

TEST(FormatHex64, WritesSixteenDigitsAfterThePrefix) {
  EXPECT_EQ(FormatHex64(0), "0x0000000000000000");
  EXPECT_EQ(FormatHex64(0xabcd), "0x000000000000abcd");
  EXPECT_EQ(FormatHex64(UINT64_MAX), "0xffffffffffffffff");
}

TEST(RoundUp, RoundsToTheNextMultiple) {
  static_assert(RoundUp(0, 512) == 0);
  static_assert(RoundUp(1, 512) == 512);
  static_assert(RoundUp(512, 512) == 512);
  static_assert(RoundUp(513, 512) == 1024);
  static_assert(RoundUp(10, 3) == 12);
  EXPECT_EQ(RoundUp(7, 1), 7u);
}

TEST(RoundUp, SaturatesInsteadOfWrapping) {
  constexpr uint64_t kTwoMiB = 2ull << 20;
  static_assert(RoundUp(UINT64_MAX, kTwoMiB) == UINT64_MAX);
  static_assert(RoundUp(UINT64_MAX - kTwoMiB, kTwoMiB) == UINT64_MAX - kTwoMiB + 1);
  EXPECT_EQ(RoundUp(UINT64_MAX - 1, 1ull << 63), UINT64_MAX);
  EXPECT_EQ(RoundUp(1ull << 63, 1ull << 63), 1ull << 63);
}

TEST(CeilDiv, RoundsTheQuotientUpWithoutOverflow) {
  static_assert(CeilDiv(0, 4) == 0);
  static_assert(CeilDiv(1, 4) == 1);
  static_assert(CeilDiv(8, 4) == 2);
  static_assert(CeilDiv(9, 4) == 3);
  static_assert(CeilDiv(UINT64_MAX, 2) == (1ull << 63));
  EXPECT_EQ(CeilDiv(UINT64_MAX, 1), UINT64_MAX);
}

}  // namespace
}  // namespace hami
