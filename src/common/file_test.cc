#include "common/file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "common/temp_dir.h"

namespace hami {
namespace {

using ::testing::HasSubstr;

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
  }
  TempDir tmp_{"hami-file-test"};
  std::string dir_;
};

TEST_F(FileTest, RefusesASymlinkNamingIt) {
  std::string target = dir_ + "/target", link = dir_ + "/link";
  ASSERT_TRUE(WriteAll(OpenRegularFile(target, O_CREAT | O_WRONLY)->get(), "x").ok());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  auto r = OpenRegularFile(link, O_RDONLY);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kPermission);
  EXPECT_THAT(r.error().message(), HasSubstr(link));
  EXPECT_THAT(r.error().message(), HasSubstr("symbolic link"));
}

TEST_F(FileTest, RefusesADirectoryOrFifo) {
  EXPECT_EQ(OpenRegularFile(dir_, O_RDONLY).error().code(), ErrorCode::kPermission);
  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto r = OpenRegularFile(fifo, O_RDONLY);  // must not wait for a writer
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("not a regular file"));
}

TEST_F(FileTest, ReadsWhatWasWrittenAndEnforcesTheSizeCap) {
  std::string path = dir_ + "/f";
  {
    auto fd = OpenRegularFile(path, O_CREAT | O_WRONLY);
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(WriteAll(fd->get(), "hello\n").ok());
  }
  EXPECT_EQ(*ReadFileToString(path), "hello\n");
  EXPECT_FALSE(ReadFileToString(path, 3).ok());
  EXPECT_EQ(ReadFileToString(dir_ + "/missing").error().sys_errno(), ENOENT);
}

TEST_F(FileTest, MappedFileSharesWritesWithTheFile) {
  std::string path = dir_ + "/m";
  auto fd = OpenRegularFile(path, O_CREAT | O_RDWR);
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(ftruncate(fd->get(), 4096), 0);
  auto map = MappedFile::Map(fd->get(), 4096, true, path);
  ASSERT_TRUE(map.ok());
  std::memcpy(map->data(), "abc", 3);
  char buf[3];
  ASSERT_EQ(pread(fd->get(), buf, 3, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "abc");
}

}  // namespace
}  // namespace hami
