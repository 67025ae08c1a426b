#include "sim/oci/tar.h"

#include <gtest/gtest.h>

#include <string>

namespace hami::sim::oci {
namespace {

TEST(TarWriter, EndsWithTwoZeroBlocksAndPadsEveryEntryToBlocks) {
  TarWriter tar;
  ASSERT_TRUE(tar.AddFile("a", 0644, "hello").ok());
  const std::string out = tar.Finish();
  // header + one data block + two end blocks
  ASSERT_EQ(out.size(), 4u * 512);
  EXPECT_EQ(out.substr(0, 2), std::string("a\0", 2));
  EXPECT_EQ(out.substr(512, 5), "hello");
  EXPECT_EQ(out.substr(2 * 512), std::string(1024, '\0'));
  EXPECT_EQ(tar.Finish(), std::string(1024, '\0')) << "Finish leaves the writer empty";
}

TEST(TarWriter, RefusesPathsThatAreNotPlainRelativePaths) {
  TarWriter tar;
  for (const char* path : {"", "/etc/passwd", "etc/", "a//b", "a/../b", "./a", "a/."}) {
    Status s = tar.AddFile(path, 0644, "x");
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().message().find("tar entry '" + std::string(path) + "'"), std::string::npos)
        << s.error().message();
  }
}

TEST(TarWriter, RefusesWhatUstarCannotHold) {
  TarWriter tar;
  // One component of 101 bytes: no '/' to split at.
  Status s = tar.AddFile("d/" + std::string(101, 'n'), 0644, "");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("155-byte prefix"), std::string::npos);
  // A prefix of 156 bytes before a short name.
  s = tar.AddFile(std::string(156, 'p') + "/name", 0644, "");
  ASSERT_FALSE(s.ok());
  s = tar.AddSymlink("l", std::string(101, 't'));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("symbolic link target"), std::string::npos);
  s = tar.AddSymlink("l", "");
  ASSERT_FALSE(s.ok());
  s = tar.AddDirectory("d", 010000);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("mode"), std::string::npos);
  EXPECT_EQ(tar.Finish().size(), 1024u) << "a refused entry writes nothing";
}

TEST(TarWriter, SplitsALongPathIntoPrefixAndName) {
  TarWriter tar;
  const std::string dir(120, 'd');
  ASSERT_TRUE(tar.AddFile(dir + "/file", 0600, "").ok());
  const std::string out = tar.Finish();
  EXPECT_EQ(out.substr(0, 4), "file");  // name, NUL-padded
  EXPECT_EQ(out[4], '\0');
  EXPECT_EQ(out.substr(345, 120), dir);  // prefix
  EXPECT_EQ(out.substr(257, 6), std::string("ustar\0", 6));
}

}  // namespace
}  // namespace hami::sim::oci
