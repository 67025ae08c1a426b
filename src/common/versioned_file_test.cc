#include "common/versioned_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/ofd_lock.h"
#include "common/temp_dir.h"

namespace hami {
namespace {

using ::testing::HasSubstr;

constexpr char kMagic[8] = {'T', 'E', 'S', 'T', 'F', 'I', 'L', 'E'};
constexpr uint32_t kReady = 0x59444552;
constexpr uint32_t kVersion = 3;

struct TestFile {
  char magic[8];
  uint32_t version;
  std::atomic<uint32_t> initialized;
  uint64_t total_size;
  uint64_t config;
  uint8_t rest[4064];
};
static_assert(sizeof(TestFile) == 4096);

constexpr VersionedFileSpec Spec(InitLocking locking) {
  return {.kind = "test file",
          .size = sizeof(TestFile),
          .header_size = offsetof(TestFile, rest),
          .magic_size = sizeof(kMagic),
          .initialized_offset = offsetof(TestFile, initialized),
          .initialized_value = kReady,
          .init_lock = off_t(1) << 40,
          .locking = locking};
}

class TestFormat final : public VersionedFileFormat {
 public:
  explicit TestFormat(uint64_t config = 7) : config_(config) {}
  Status Validate(const void* header, uint64_t file_size) const override {
    const auto& h = *static_cast<const TestFile*>(header);
    if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
      return Error(ErrorCode::kCorrupt, "bad magic");
    }
    if (h.version != kVersion) {
      return Error(ErrorCode::kIncompatible, "version " + std::to_string(h.version));
    }
    if (h.total_size != file_size) return Error(ErrorCode::kCorrupt, "size mismatch");
    return OkStatus();
  }
  Status Fill(void* file) const override {
    fills_.fetch_add(1);
    auto& f = *static_cast<TestFile*>(file);
    for (uint8_t b : f.rest) {
      if (b != 0) return Error(ErrorCode::kInternal, "Fill got a file that is not zeroed");
    }
    std::memcpy(f.magic, kMagic, sizeof(kMagic));
    f.version = kVersion;
    f.total_size = sizeof(TestFile);
    f.config = config_;
    f.rest[0] = 0xaa;
    return OkStatus();
  }
  int fills() const { return fills_.load(); }

 private:
  uint64_t config_;
  mutable std::atomic<int> fills_{0};
};

class VersionedFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(tmp_.ok()); }

  Result<VersionedFile> Open(FileCreate create, InitLocking locking = InitLocking::kCreatorsOnly,
                             MapAccess access = MapAccess::kReadWrite) {
    return OpenVersionedFile(path_, Spec(locking), format_, create, access);
  }
  // Writes `bytes` as the whole file.
  void WriteFile(const void* bytes, size_t n) {
    UniqueFd fd(::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
    ASSERT_TRUE(fd.valid());
    ASSERT_TRUE(WriteAll(fd.get(), std::string_view(static_cast<const char*>(bytes), n)).ok());
  }
  // A valid, published file's contents.
  static void MakePublished(TestFile* f) {
    std::memcpy(f->magic, kMagic, sizeof(kMagic));
    f->version = kVersion;
    f->total_size = sizeof(TestFile);
    f->initialized.store(kReady);
  }

  TempDir tmp_{"hami-versioned-file-test"};
  std::string path_ = tmp_.File("f");
  TestFormat format_;
};

TEST_F(VersionedFileTest, CreatesFillsAndPublishesAMissingFile) {
  auto f = Open(FileCreate::kIfMissing);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_TRUE(f->initialized_here);
  EXPECT_FALSE(f->init_lock.held());
  ASSERT_EQ(f->map.size(), sizeof(TestFile));
  const auto* t = static_cast<const TestFile*>(f->map.data());
  EXPECT_EQ(t->initialized.load(), kReady);
  EXPECT_EQ(t->config, 7u);
  struct stat st;
  ASSERT_EQ(fstat(f->fd.get(), &st), 0);
  EXPECT_EQ(st.st_size, off_t(sizeof(TestFile)));
  EXPECT_EQ(st.st_mode & 0777, 0666u) << "a new file is for every user";
  EXPECT_EQ(fcntl(f->fd.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

TEST_F(VersionedFileTest, ANewFileHasItsBlocksReserved) {
  auto f = Open(FileCreate::kIfMissing);
  ASSERT_TRUE(f.ok()) << f.error().message();
  struct stat st;
  ASSERT_EQ(fstat(f->fd.get(), &st), 0);
  // Not sparse: a write to any page of the mapping has its block already.
  EXPECT_GE(uint64_t(st.st_blocks) * 512, sizeof(TestFile));
}

// On a full file system the file cannot be made: an error naming it, never a mapping that
// faults at its first write (SIGBUS), and nothing half-made left behind.
TEST_F(VersionedFileTest, AFullFileSystemIsAnErrorNamingTheFileNotAFault) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts a one-page tmpfs";
  // A mount namespace of this test process's own (CTest runs each case as a process).
  ASSERT_EQ(unshare(CLONE_NEWNS), 0) << std::strerror(errno);
  ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
  const std::string dir = tmp_.File("tiny");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=4k"), 0) << std::strerror(errno);
  {
    // Fill it: its one page goes to another file.
    UniqueFd fill(::open((dir + "/fill").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
    ASSERT_TRUE(fill.valid());
    ASSERT_EQ(posix_fallocate(fill.get(), 0, 4096), 0);
  }
  const std::string path = dir + "/f";
  auto f = OpenVersionedFile(path, Spec(InitLocking::kCreatorsOnly), format_,
                             FileCreate::kIfMissing, MapAccess::kReadWrite);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.error().message(), HasSubstr("reserving 4096 bytes for test file " + path));
  EXPECT_EQ(f.error().sys_errno(), ENOSPC);
  EXPECT_EQ(format_.fills(), 0);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0) << "an empty file: the next opener tries again from scratch";
  umount2(dir.c_str(), MNT_DETACH);
}

TEST_F(VersionedFileTest, AnAnonymousFileIsMadeInMemoryWithNoPath) {
  auto f = CreateAnonymousVersionedFile("hami-test", Spec(InitLocking::kCreatorsOnly), format_);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_TRUE(f->initialized_here);
  const auto* t = static_cast<const TestFile*>(f->map.data());
  EXPECT_EQ(t->initialized.load(), kReady);
  EXPECT_EQ(t->config, 7u);
  char target[256] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(f->fd.get());
  ASSERT_GT(readlink(link.c_str(), target, sizeof(target) - 1), 0);
  EXPECT_THAT(std::string(target), ::testing::StartsWith("/memfd:hami-test"));
  EXPECT_EQ(fcntl(f->fd.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

TEST_F(VersionedFileTest, UsesAPublishedFileWithoutFillingItAgain) {
  ASSERT_TRUE(Open(FileCreate::kIfMissing).ok());
  auto again = Open(FileCreate::kIfMissing);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_FALSE(again->initialized_here);
  EXPECT_EQ(format_.fills(), 1);
  auto read_only = Open(FileCreate::kNever, InitLocking::kCreatorsOnly, MapAccess::kReadOnly);
  ASSERT_TRUE(read_only.ok()) << read_only.error().message();
  EXPECT_EQ(static_cast<const TestFile*>(read_only->map.data())->rest[0], 0xaa);
}

TEST_F(VersionedFileTest, ConcurrentOpenersFillItOnceAndAllSeeItPublished) {
  for (InitLocking locking : {InitLocking::kCreatorsOnly, InitLocking::kEveryOpener}) {
    ::unlink(path_.c_str());
    TestFormat format;
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&] {
        auto f = OpenVersionedFile(path_, Spec(locking), format, FileCreate::kIfMissing,
                                   MapAccess::kReadWrite);
        if (f.ok() && static_cast<const TestFile*>(f->map.data())->rest[0] == 0xaa) ++ok;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(ok.load(), 8);
    EXPECT_EQ(format.fills(), 1);
  }
}

TEST_F(VersionedFileTest, RemakesAFileItsMakerLeftUnfinished) {
  TestFile zero{};  // full size, magic never written
  WriteFile(&zero, sizeof(zero));
  auto f = Open(FileCreate::kIfMissing);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_TRUE(f->initialized_here);

  TestFile unpublished{};
  MakePublished(&unpublished);  // valid header, never marked initialized
  unpublished.initialized.store(0);
  unpublished.rest[100] = 0x55;  // stale bytes must not survive
  WriteFile(&unpublished, sizeof(unpublished));
  f = Open(FileCreate::kIfMissing);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_TRUE(f->initialized_here);
  EXPECT_EQ(static_cast<const TestFile*>(f->map.data())->rest[100], 0);
  EXPECT_EQ(format_.fills(), 2);
}

TEST_F(VersionedFileTest, WithoutCreateAnEmptyOrUnpublishedFileIsAnErrorNamingIt) {
  WriteFile("", 0);
  auto empty = Open(FileCreate::kNever);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(empty.error().message(), HasSubstr("test file " + path_ + " is empty"));

  TestFile zero{};
  WriteFile(&zero, sizeof(zero));
  auto busy = Open(FileCreate::kNever);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code(), ErrorCode::kBusy);
  EXPECT_THAT(busy.error().message(), HasSubstr("still being created"));

  TestFile unpublished{};
  MakePublished(&unpublished);
  unpublished.initialized.store(0);
  WriteFile(&unpublished, sizeof(unpublished));
  EXPECT_EQ(Open(FileCreate::kNever).error().code(), ErrorCode::kBusy);
  auto dead = Open(FileCreate::kNever, InitLocking::kEveryOpener);
  ASSERT_FALSE(dead.ok());
  EXPECT_EQ(dead.error().code(), ErrorCode::kCorrupt) << "under the lock nobody is making it";
  EXPECT_THAT(dead.error().message(), HasSubstr("is not initialized"));
  EXPECT_EQ(format_.fills(), 0);
}

TEST_F(VersionedFileTest, RefusesJunkAndOtherVersionsWithTheFormatsError) {
  WriteFile("short", 5);
  auto small = Open(FileCreate::kIfMissing);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(small.error().message(),
              HasSubstr(path_ + ": the file is 5 bytes, smaller than a header"));

  TestFile other{};
  MakePublished(&other);
  other.version = kVersion + 1;
  WriteFile(&other, sizeof(other));
  EXPECT_EQ(Open(FileCreate::kIfMissing).error().code(), ErrorCode::kIncompatible);
  other.initialized.store(0);  // unpublished but of another version: not remade either
  WriteFile(&other, sizeof(other));
  EXPECT_EQ(Open(FileCreate::kIfMissing).error().code(), ErrorCode::kIncompatible);

  TestFile junk{};
  MakePublished(&junk);
  std::memcpy(junk.magic, "SOMEELSE", 8);
  WriteFile(&junk, sizeof(junk));
  auto bad = Open(FileCreate::kIfMissing, InitLocking::kEveryOpener);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(bad.error().message(), HasSubstr("bad magic"));

  TestFile longer[2]{};  // a valid header on a file of the wrong size
  MakePublished(&longer[0]);
  WriteFile(longer, sizeof(longer));
  EXPECT_EQ(Open(FileCreate::kIfMissing).error().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(format_.fills(), 0);
}

TEST_F(VersionedFileTest, CreatingNeedsReadWriteAccess) {
  auto r = Open(FileCreate::kIfMissing, InitLocking::kCreatorsOnly, MapAccess::kReadOnly);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(VersionedFileTest, EveryOpenerHoldsTheInitLockUntilItLetsGo) {
  auto f = Open(FileCreate::kIfMissing, InitLocking::kEveryOpener);
  ASSERT_TRUE(f.ok()) << f.error().message();
  ASSERT_TRUE(f->init_lock.held());
  UniqueFd other(::open(path_.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(other.valid());
  const off_t lock = Spec(InitLocking::kEveryOpener).init_lock;
  EXPECT_TRUE(OfdByteLockedByOther(other.get(), lock));
  f->init_lock.Reset();
  EXPECT_FALSE(OfdByteLockedByOther(other.get(), lock));

  auto creators_only = Open(FileCreate::kNever);
  ASSERT_TRUE(creators_only.ok());
  EXPECT_FALSE(OfdByteLockedByOther(other.get(), lock)) << "a published file takes no lock";
}

TEST_F(VersionedFileTest, ReinitializeMakesTheFileAgainForAnotherFormat) {
  auto f = Open(FileCreate::kIfMissing, InitLocking::kEveryOpener);
  ASSERT_TRUE(f.ok()) << f.error().message();
  TestFormat other(9);
  ASSERT_TRUE(ReinitializeVersionedFile(*f, path_, Spec(InitLocking::kEveryOpener), other).ok());
  EXPECT_EQ(static_cast<const TestFile*>(f->map.data())->config, 9u);
  EXPECT_EQ(other.fills(), 1);
  f->init_lock.Reset();
  auto again = Open(FileCreate::kNever);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(static_cast<const TestFile*>(again->map.data())->config, 9u);
}

}  // namespace
}  // namespace hami
