// The limits file's one reader and one writer (src/limits/limits_file.h): the format, the
// round trip, and atomic publication under injected and real failures.
#include "limits/limits_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <ostream>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/temp_dir.h"

namespace hami::limits {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::StartsWith;

std::string Slurp(const std::string& path) {
  auto text = ReadFileToString(path);
  return text.ok() ? *text : "<" + text.error().message() + ">";
}

void Put(const std::string& path, const std::string& text) {
  auto fd = OpenRegularFile(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  ASSERT_TRUE(WriteAll(fd->get(), text).ok());
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// --- The text --------------------------------------------------------------------------

TEST(LimitsText, SortsByKeyAndAddsTheFormatLine) {
  std::vector<Entry> entries = {{"CUDA_DEVICE_SM_LIMIT", "50"},
                                {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/usr/local/vgpu/usage.cache"},
                                {"CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"}};
  auto text = LimitsText(entries);
  ASSERT_TRUE(text.ok()) << text.error().message();
  EXPECT_EQ(*text,
            "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n"
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache\n"
            "CUDA_DEVICE_SM_LIMIT=50\n"
            "HAMI_LIMITS_FORMAT=1\n");
}

TEST(LimitsText, SortsKeysNotLines) {
  // As lines, "A0=x" sorts before "A=y" ('0' < '='); the keys sort the other way.
  std::vector<Entry> entries = {{"A0", "x"}, {"A", "y"}};
  auto text = LimitsText(entries);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "A=y\nA0=x\nHAMI_LIMITS_FORMAT=1\n");
}

TEST(LimitsText, NoEntriesIsJustTheFormatLine) {
  auto text = LimitsText({});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "HAMI_LIMITS_FORMAT=1\n");
}

struct RefusedCase {
  const char* name;
  Entry entry;
  const char* why;
};

void PrintTo(const RefusedCase& c, std::ostream* os) { *os << c.name; }

class RefusedEntry : public ::testing::TestWithParam<RefusedCase> {};

TEST_P(RefusedEntry, IsNamedAndNothingIsWritten) {
  const RefusedCase& c = GetParam();
  std::vector<Entry> entries = {{"CUDA_DEVICE_SM_LIMIT", "50"}, c.entry};
  auto text = LimitsText(entries);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(text.error().message(),
              AllOf(StartsWith("limits-file entry '" + c.entry.first + "'"), HasSubstr(c.why)));

  TempDir dir("hami-limits-test");
  ASSERT_TRUE(dir.ok());
  Status s = PublishLimitsFile(dir.File("x.limits"), entries);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), StartsWith("publishing limits file " + dir.File("x.limits")));
  EXPECT_THAT(Names(dir.path()), IsEmpty());
}

using namespace std::string_literals;
INSTANTIATE_TEST_SUITE_P(
    LimitsText, RefusedEntry,
    ::testing::Values(
        RefusedCase{"LowerCaseKey", {"cuda_device_sm_limit", "1"}, "not a variable name"},
        RefusedCase{"EmptyKey", {"", "1"}, "not a variable name"},
        RefusedCase{"KeyWithASpace", {"A B", "1"}, "not a variable name"},
        RefusedCase{"KeyTwice", {"CUDA_DEVICE_SM_LIMIT", "60"}, "given twice"},
        RefusedCase{"FormatKey", {"HAMI_LIMITS_FORMAT", "1"}, "adds the format line itself"},
        RefusedCase{"NewlineInValue", {"X", "a\nY=b"}, "a newline"},
        RefusedCase{"CarriageReturnInValue", {"X", "30\r"}, "a carriage return"},
        RefusedCase{"NulInValue", {"X", "a\0b"s}, "a NUL byte"}),
    [](const ::testing::TestParamInfo<RefusedCase>& p) { return p.param.name; });

TEST(LimitsText, RefusesWhatTheReaderWouldRefuseForSize) {
  std::vector<Entry> entries = {{"X", std::string(kMaxFileBytes, 'v')}};
  auto text = LimitsText(entries);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.error().message(), HasSubstr("larger than 65536"));
}

TEST(LimitsText, WhatIsWrittenIsReadBackUnchanged) {
  std::vector<Entry> entries = {{"CUDA_VISIBLE_DEVICES", "GPU-1,0"},
                                {"EMPTY", ""},
                                {"EQUALS", "a=b=c"},
                                {"SPACES", " padded "},
                                {"CUDA_DEVICE_MEMORY_LIMIT", "4g"}};
  auto text = LimitsText(entries);
  ASSERT_TRUE(text.ok());
  LimitsFile f = ParseLimitsFile(*text, "/f");
  EXPECT_THAT(f.problems, IsEmpty());
  EXPECT_THAT(f.entries, ElementsAre(Pair("CUDA_DEVICE_MEMORY_LIMIT", "4g"),
                                     Pair("CUDA_VISIBLE_DEVICES", "GPU-1,0"), Pair("EMPTY", ""),
                                     Pair("EQUALS", "a=b=c"), Pair("HAMI_LIMITS_FORMAT", "1"),
                                     Pair("SPACES", " padded ")));
}

// --- The reader --------------------------------------------------------------------------

TEST(LimitsReader, SkipsBadLinesNamingTheirNumberAndKeepsTheRest) {
  LimitsFile f = ParseLimitsFile("A=1\nnot a line\n\nb=2\r\nC=3\r\n", "/overrideEnv");
  EXPECT_TRUE(f.present);
  EXPECT_THAT(f.entries, ElementsAre(Pair("A", "1"), Pair("C", "3")));
  EXPECT_THAT(f.problems,
              ElementsAre("/overrideEnv line 2 'not a line': not KEY=VALUE; skipped",
                          "/overrideEnv line 4 'b=2': the key is not a variable name; skipped"));
  // No leading name for either: "not" and "b" are not keys.
  EXPECT_THAT(f.skipped, ElementsAre(Pair("", "not a line"), Pair("", "b=2")));
}

// A consumer that must not lose a limit learns what a skipped line was meant to set.
TEST(LimitsReader, NamesTheVariableASkippedLineWasMeantToSet) {
  using namespace std::string_literals;
  LimitsFile f = ParseLimitsFile("LIMIT_0 3g\nLIMIT_1=2\0g\nLIMIT_2 =1\nOK=1\n"s, "/f");
  EXPECT_THAT(f.entries, ElementsAre(Pair("OK", "1")));
  EXPECT_THAT(f.skipped, ElementsAre(Pair("LIMIT_0", "LIMIT_0 3g"), Pair("LIMIT_1", "LIMIT_1=2"),
                                     Pair("LIMIT_2", "LIMIT_2 =1")));
  EXPECT_FALSE(f.unreadable);
}

TEST(LimitsReader, ASymlinkIsRefusedNamingThePath) {
  TempDir dir("hami-limits-test");
  ASSERT_TRUE(dir.ok());
  Put(dir.File("real"), "A=1\n");
  ASSERT_EQ(symlink(dir.File("real").c_str(), dir.File("link").c_str()), 0);
  LimitsFile f = ReadLimitsFile(dir.File("link"));
  EXPECT_FALSE(f.present);
  EXPECT_TRUE(f.unreadable) << "a file is there: what it says is unknown";
  EXPECT_THAT(f.problems, ElementsAre(AllOf(HasSubstr(dir.File("link")), HasSubstr("symbolic"))));
}

TEST(LimitsReader, AFileLargerThanTheLimitIsRefused) {
  TempDir dir("hami-limits-test");
  ASSERT_TRUE(dir.ok());
  Put(dir.File("big"), std::string(kMaxFileBytes + 1, 'x'));
  LimitsFile f = ReadLimitsFile(dir.File("big"));
  EXPECT_FALSE(f.present);
  EXPECT_TRUE(f.unreadable);
  EXPECT_THAT(f.problems, ElementsAre(HasSubstr("larger than 65536 bytes")));
  EXPECT_FALSE(ReadLimitsFile(dir.File("absent")).unreadable) << "no file is not unreadable";
}

// --- Publication -------------------------------------------------------------------------

class Publish : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }
  std::string Path() const { return dir_.File("pod_ctr.limits"); }
  const std::vector<Entry> entries_ = {{"CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"},
                                       {"CUDA_DEVICE_SM_LIMIT", "50"}};
  const std::string text_ =
      "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_SM_LIMIT=50\nHAMI_LIMITS_FORMAT=1\n";
  TempDir dir_{"hami-limits-test"};
};

TEST_F(Publish, WritesTheSortedFileWithMode0644WhateverTheUmask) {
  mode_t old = umask(077);
  Status s = PublishLimitsFile(Path(), entries_);
  umask(old);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(Slurp(Path()), text_);
  struct stat st;
  ASSERT_EQ(stat(Path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_THAT(Names(dir_.path()), ElementsAre("pod_ctr.limits"));
  LimitsFile f = ReadLimitsFile(Path());
  EXPECT_THAT(f.problems, IsEmpty());
  EXPECT_EQ(f.entries.size(), 3u);
}

TEST_F(Publish, ReplacesAnExistingFileWhole) {
  Put(Path(), "CUDA_DEVICE_MEMORY_LIMIT_0=1g\nOLD=1\nHAMI_LIMITS_FORMAT=1\n");
  ASSERT_TRUE(PublishLimitsFile(Path(), entries_).ok());
  EXPECT_EQ(Slurp(Path()), text_);
  EXPECT_THAT(Names(dir_.path()), ElementsAre("pod_ctr.limits"));
}

TEST_F(Publish, ReplacesASymlinkInsteadOfWritingThroughIt) {
  Put(dir_.File("victim"), "untouched\n");
  ASSERT_EQ(symlink(dir_.File("victim").c_str(), Path().c_str()), 0);
  ASSERT_TRUE(PublishLimitsFile(Path(), entries_).ok());
  EXPECT_EQ(Slurp(dir_.File("victim")), "untouched\n");
  struct stat st;
  ASSERT_EQ(lstat(Path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(Slurp(Path()), text_);
}

TEST_F(Publish, AMissingDirectoryIsNamed) {
  Status s = PublishLimitsFile(dir_.File("no/such/x.limits"), entries_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().sys_errno(), ENOENT);
  EXPECT_THAT(s.error().message(),
              AllOf(HasSubstr("publishing limits file " + dir_.File("no/such/x.limits")),
                    HasSubstr("open directory " + dir_.File("no/such")),
                    HasSubstr("No such file or directory")));
}

TEST_F(Publish, ADirectoryInTheWayIsNamedAndNoTemporaryFileStays) {
  ASSERT_EQ(mkdir(Path().c_str(), 0755), 0);
  ASSERT_EQ(mkdir((Path() + "/inside").c_str(), 0755), 0);
  Status s = PublishLimitsFile(Path(), entries_);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), AllOf(HasSubstr("rename "), HasSubstr(" to " + Path())));
  EXPECT_THAT(Names(dir_.path()), ElementsAre("pod_ctr.limits"));
}

TEST_F(Publish, APathNamingNoFileIsRefused) {
  for (const std::string& p : {dir_.path() + "/", dir_.File(".."), std::string()}) {
    Status s = PublishLimitsFile(p, entries_);
    ASSERT_FALSE(s.ok()) << p;
    EXPECT_THAT(s.error().message(), HasSubstr("the path names no file")) << p;
  }
}

struct InjectedCase {
  PublishStep step;
  int err;
  const char* reason;
};

void PrintTo(const InjectedCase& c, std::ostream* os) { *os << PublishStepName(c.step); }

class PublishFailure : public Publish, public ::testing::WithParamInterface<InjectedCase> {};

TEST_P(PublishFailure, NamesThePathTheStepAndTheReasonAndKeepsTheOldFile) {
  const InjectedCase& c = GetParam();
  const std::string old = "CUDA_DEVICE_MEMORY_LIMIT_0=1g\nHAMI_LIMITS_FORMAT=1\n";
  Put(Path(), old);
  PublishOptions options;
  options.inject = [&](PublishStep step) { return step == c.step ? c.err : 0; };
  Status s = PublishLimitsFile(Path(), entries_, options);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().sys_errno(), c.err);
  EXPECT_THAT(s.error().message(), AllOf(StartsWith("publishing limits file " + Path() + ": " +
                                                    PublishStepName(c.step) + " "),
                                         HasSubstr(c.reason)));
  if (c.step == PublishStep::kSyncDirectory) {
    EXPECT_EQ(Slurp(Path()), text_) << "renamed before the directory sync";
  } else {
    EXPECT_EQ(Slurp(Path()), old) << "a failed publication leaves the old file";
  }
  EXPECT_THAT(Names(dir_.path()), ElementsAre("pod_ctr.limits")) << "no temporary file stays";
}

INSTANTIATE_TEST_SUITE_P(
    Publish, PublishFailure,
    ::testing::Values(InjectedCase{PublishStep::kOpenDirectory, EACCES, "Permission denied"},
                      InjectedCase{PublishStep::kCreateTemp, EDQUOT, "quota exceeded"},
                      InjectedCase{PublishStep::kWrite, ENOSPC, "No space left on device"},
                      InjectedCase{PublishStep::kSync, EIO, "Input/output error"},
                      InjectedCase{PublishStep::kChmod, EPERM, "Operation not permitted"},
                      InjectedCase{PublishStep::kRename, EROFS, "Read-only file system"},
                      InjectedCase{PublishStep::kSyncDirectory, EIO, "Input/output error"}),
    [](const ::testing::TestParamInfo<InjectedCase>& p) {
      std::string name;
      for (char c : std::string(PublishStepName(p.param.step))) {
        if (std::isalnum(static_cast<unsigned char>(c))) name += c;
      }
      return name;
    });

TEST_F(Publish, ARetriedCollisionOfTemporaryNamesStillPublishes) {
  // EEXIST from creating the temporary file is a name collision: another name is tried.
  int collisions = 0;
  PublishOptions options;
  options.inject = [&](PublishStep step) {
    return step == PublishStep::kCreateTemp && collisions++ < 3 ? EEXIST : 0;
  };
  ASSERT_TRUE(PublishLimitsFile(Path(), entries_, options).ok());
  EXPECT_EQ(collisions, 4);
  EXPECT_EQ(Slurp(Path()), text_);
}

TEST_F(Publish, WithoutSyncTheFsyncStepsAreSkippedAndTheFileIsTheSame) {
  std::vector<PublishStep> steps;
  PublishOptions options;
  options.sync = false;
  options.inject = [&](PublishStep step) {
    steps.push_back(step);
    return 0;
  };
  ASSERT_TRUE(PublishLimitsFile(Path(), entries_, options).ok());
  EXPECT_THAT(steps, ElementsAre(PublishStep::kOpenDirectory, PublishStep::kCreateTemp,
                                 PublishStep::kWrite, PublishStep::kChmod, PublishStep::kRename));
  EXPECT_EQ(Slurp(Path()), text_);
  EXPECT_THAT(Names(dir_.path()), ElementsAre("pod_ctr.limits"));
}

TEST_F(Publish, AReadOnlyDirectoryRefusesAnUnprivilegedWriter) {
  // Root ignores directory permissions, so the writer drops to an unprivileged user in a
  // child process; without root the test process itself is the unprivileged writer.
  const std::string ro = dir_.File("ro");
  ASSERT_EQ(mkdir(ro.c_str(), 0555), 0);
  ASSERT_EQ(chmod(ro.c_str(), 0555), 0);
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  const std::string path = ro + "/pod_ctr.limits";
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pipe_fds[0]);
    if (geteuid() == 0 && (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                           setresuid(65534, 65534, 65534) != 0)) {
      _exit(3);
    }
    Status s = PublishLimitsFile(path, entries_);
    std::string message = s.ok() ? "" : s.error().message();
    ssize_t ignored = write(pipe_fds[1], message.data(), message.size());
    (void)ignored;
    _exit(s.ok() ? 1 : 0);
  }
  close(pipe_fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) message.append(buf, size_t(n));
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_NE(WEXITSTATUS(status), 3) << "could not drop to UID 65534";
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the unprivileged writer published into a 0555 directory";
  EXPECT_THAT(message, AllOf(HasSubstr("publishing limits file " + path), HasSubstr("create "),
                             HasSubstr("Permission denied")));
  EXPECT_THAT(Names(ro), IsEmpty());
}

// --- Rewriting in place ----------------------------------------------------------------------

// A second name for the file's inode stands in for a container's bind mount of it: what the
// container reads is the inode it was given, whatever is renamed over the host's path later.
TEST_F(Publish, InPlaceRewriteReachesAReaderOfTheSameInodeWhereARenameDoesNot) {
  ASSERT_TRUE(PublishLimitsFile(Path(), entries_).ok());
  const std::string mounted = dir_.File("mounted");
  ASSERT_EQ(link(Path().c_str(), mounted.c_str()), 0);
  const std::vector<Entry> raised = {{"CUDA_DEVICE_MEMORY_LIMIT_0", "6000m"},
                                     {"CUDA_DEVICE_SM_LIMIT", "60"}};
  ASSERT_TRUE(UpdateLimitsFileInPlace(Path(), raised).ok());
  const std::string want =
      "CUDA_DEVICE_MEMORY_LIMIT_0=6000m\nCUDA_DEVICE_SM_LIMIT=60\nHAMI_LIMITS_FORMAT=1\n";
  EXPECT_EQ(Slurp(mounted), want);
  EXPECT_EQ(Slurp(Path()), want);
  // Shorter text: the file is cut to it.
  ASSERT_TRUE(UpdateLimitsFileInPlace(Path(), std::vector<Entry>{{"A", "1"}}).ok());
  EXPECT_EQ(Slurp(mounted), "A=1\nHAMI_LIMITS_FORMAT=1\n");
  // The contrast: a publication renames a new inode over the path, which the mount never sees.
  ASSERT_TRUE(PublishLimitsFile(Path(), entries_).ok());
  EXPECT_EQ(Slurp(mounted), "A=1\nHAMI_LIMITS_FORMAT=1\n");
}

TEST_F(Publish, InPlaceRewriteRefusesASymlinkAMissingFileAndAnotherUsersFile) {
  Put(dir_.File("real"), "A=1\n");
  ASSERT_EQ(symlink(dir_.File("real").c_str(), Path().c_str()), 0);
  Status s = UpdateLimitsFileInPlace(Path(), entries_);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(),
              AllOf(HasSubstr("rewriting limits file " + Path()), HasSubstr("symbolic")));
  EXPECT_EQ(Slurp(dir_.File("real")), "A=1\n");
  EXPECT_FALSE(UpdateLimitsFileInPlace(dir_.File("absent"), entries_).ok());
  if (geteuid() == 0) {
    Put(dir_.File("tenant"), "A=1\n");
    ASSERT_EQ(chown(dir_.File("tenant").c_str(), 4321, 4321), 0);
    Status t = UpdateLimitsFileInPlace(dir_.File("tenant"), entries_);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.error().message(), HasSubstr("owned by uid 4321"));
    EXPECT_EQ(Slurp(dir_.File("tenant")), "A=1\n");
  }
}

// A reader never reads past a rewrite that holds the file: it waits, then gives up and says
// the file is unreadable (its limits are then held closed by libvgpu), never a part of it.
TEST_F(Publish, AReaderWaitsForARewriteAndGivesUpUnreadable) {
  ASSERT_TRUE(PublishLimitsFile(Path(), entries_).ok());
  int fd = open(Path().c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  ASSERT_EQ(fcntl(fd, F_OFD_SETLK, &l), 0);
  LimitsFile held = ReadLimitsFile(Path());
  EXPECT_FALSE(held.present);
  EXPECT_TRUE(held.unreadable);
  EXPECT_THAT(held.problems, ElementsAre(AllOf(HasSubstr(Path()), HasSubstr("rewrite held"))));
  Status w = UpdateLimitsFileInPlace(Path(), std::vector<Entry>{{"A", "1"}});
  ASSERT_FALSE(w.ok()) << "two rewrites at once";
  EXPECT_THAT(w.error().message(), HasSubstr("held the file for 2 s; left as it is"));
  close(fd);
  EXPECT_EQ(Slurp(Path()), text_);
  EXPECT_TRUE(ReadLimitsFile(Path()).present);
}

}  // namespace
}  // namespace hami::limits
