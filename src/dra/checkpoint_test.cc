#include "dra/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "common/file.h"
#include "common/temp_dir.h"

namespace hami::dra {
namespace {

using ::testing::HasSubstr;

Checkpoint Sample() {
  Checkpoint c;
  PreparedClaim p;
  p.ref = {"ml", "u-1", "c"};
  p.state = ClaimState::kPrepared;
  p.cdi_spec_path = "/var/run/cdi/x.json";
  p.container_dir = "/usr/local/vgpu/containers/u-1_claim";
  p.limits_path = "/usr/local/vgpu/containers/u-1_claim.limits";
  p.devices = {{{"gpu"}, "n1", "hami-gpu-0", "s-1", {"k8s.hami-core-gpu.project-hami.io/claim=x"}}};
  c["u-1"] = p;
  PreparedClaim q;
  q.ref = {"ml", "u-2", "d"};
  c["u-2"] = q;  // preparing, nothing recorded yet
  return c;
}

TEST(Checkpoint, RoundTrips) {
  auto back = DecodeCheckpoint(EncodeCheckpoint(Sample()), "test");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, Sample());
}

TEST(Checkpoint, RefusesWhatItDidNotWrite) {
  for (const char* bad : {"", "{}", "{\"version\":2,\"claims\":{}}",
                          "{\"version\":1,\"claims\":{\"u\":{\"namespace\":\"a\"}}}"}) {
    auto r = DecodeCheckpoint(bad, "checkpoint /x");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt) << bad;
    EXPECT_THAT(r.error().message(), HasSubstr("checkpoint /x")) << bad;
  }
}

TEST(Checkpoint, SavesAtomicallyAndLoadsBack) {
  TempDir dir("hami-dra-ckpt");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("checkpoint.json");
  auto empty = LoadCheckpoint(path);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  ASSERT_TRUE(SaveCheckpoint(path, Sample()).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(*loaded, Sample());
  // Renamed into place only: the same file, whole, with its mode.
  Checkpoint fewer = Sample();
  fewer.erase("u-2");
  ASSERT_TRUE(SaveCheckpoint(path, fewer, Durability::kRenamed).ok());
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(*loaded, fewer);
}

TEST(Checkpoint, TheLogReplaysOverTheSnapshotAndATornLastLineIsDropped) {
  TempDir dir("hami-dra-ckpt");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("checkpoint.json");
  Checkpoint want = Sample();
  ASSERT_TRUE(SaveCheckpoint(path, want).ok());
  // u-2 prepared, u-1 removed, then a line the plugin died in the middle of.
  Checkpoint changed = want;
  changed["u-2"].state = ClaimState::kPrepared;
  std::string log = EncodeCheckpointChange(changed, "u-2");
  changed.erase("u-1");
  log += EncodeCheckpointChange(changed, "u-1");
  Checkpoint torn = changed;
  torn["u-3"] = want["u-1"];
  const std::string last = EncodeCheckpointChange(torn, "u-3");
  log += last.substr(0, last.size() / 2);
  ASSERT_TRUE(WriteFileAtomically(CheckpointLogPath(path), log, 0600).ok());
  auto loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(*loaded, changed);
}

TEST(Checkpoint, ABadLogLineIsAnErrorNamingTheFileAndLine) {
  TempDir dir("hami-dra-ckpt");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("checkpoint.json");
  for (const char* bad : {"{\"uid\":\"u-1\"}\n", "{\"uid\":\"\",\"removed\":true}\n", "nope\n",
                          "{\"uid\":\"u-1\",\"claim\":{\"state\":\"odd\"}}\n"}) {
    const std::string log = std::string("{\"uid\":\"u-9\",\"removed\":true}\n") + bad;
    ASSERT_TRUE(WriteFileAtomically(CheckpointLogPath(path), log, 0600).ok());
    auto r = LoadCheckpoint(path);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt) << bad;
    EXPECT_THAT(r.error().message(), HasSubstr(CheckpointLogPath(path) + ": line 2")) << bad;
  }
}

TEST(Checkpoint, TheWriterAppendsOneLineAChangeAndFoldsTheLogPastItsLimit) {
  TempDir dir("hami-dra-ckpt");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("checkpoint.json");
  const std::string log_path = CheckpointLogPath(path);
  // What a dead plugin left: its log ends in a torn line; the start folds it away.
  ASSERT_TRUE(WriteFileAtomically(log_path, "{\"uid\":\"u-1\",\"remo", 0600).ok());
  Checkpoint claims = Sample();
  auto writer = CheckpointWriter::Start(path, claims);
  ASSERT_TRUE(writer.ok()) << writer.error().message();
  struct stat st {};
  ASSERT_EQ(stat(log_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(*LoadCheckpoint(path), claims);

  claims["u-2"].state = ClaimState::kPrepared;
  ASSERT_TRUE((*writer)->Record(claims, "u-2", Durability::kRenamed).ok());
  claims.erase("u-1");
  ASSERT_TRUE((*writer)->Record(claims, "u-1", Durability::kSynced).ok());
  auto text = ReadFileToString(log_path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(std::count(text->begin(), text->end(), '\n'), 2) << *text;
  EXPECT_EQ(*LoadCheckpoint(path), claims);

  // Changes until the log passes its limit: then one more change rewrites the snapshot with
  // everything and empties the log.
  PreparedClaim big = Sample()["u-1"];
  big.devices.assign(8, big.devices[0]);
  int n = 0;
  for (size_t bytes = 0; bytes < CheckpointWriter::kCompactBytes; ++n) {
    const std::string uid = "c-" + std::to_string(n);
    claims[uid] = big;
    claims[uid].ref.uid = uid;
    bytes += EncodeCheckpointChange(claims, uid).size();
    ASSERT_TRUE((*writer)->Record(claims, uid, Durability::kRenamed).ok());
  }
  ASSERT_EQ(stat(log_path.c_str(), &st), 0);
  EXPECT_GE(size_t(st.st_size), CheckpointWriter::kCompactBytes);
  claims.erase("c-0");
  ASSERT_TRUE((*writer)->Record(claims, "c-0", Durability::kRenamed).ok());
  ASSERT_EQ(stat(log_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(*LoadCheckpoint(path), claims);
  EXPECT_EQ(LoadCheckpoint(path)->size(), size_t(n));  // u-2 and c-1..c-<n-1>
}

TEST(Checkpoint, AnAppendCutShortIsTakenBackAndTheNextChangeLoads) {
  TempDir dir("hami-dra-ckpt");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("checkpoint.json");
  Checkpoint claims = Sample();
  // In a child: a file size limit makes the kernel write only a part of the next line.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto writer = CheckpointWriter::Start(path, claims);
    if (!writer.ok()) _exit(2);
    struct stat st {};
    if (stat(CheckpointLogPath(path).c_str(), &st) != 0) _exit(3);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small {
      rlim_t(st.st_size + 10), RLIM_INFINITY
    };
    if (setrlimit(RLIMIT_FSIZE, &small) != 0) _exit(4);
    claims["u-2"].state = ClaimState::kPrepared;
    if ((*writer)->Record(claims, "u-2", Durability::kRenamed).ok()) _exit(5);  // refused
    struct rlimit big {
      RLIM_INFINITY, RLIM_INFINITY
    };
    if (setrlimit(RLIMIT_FSIZE, &big) != 0) _exit(6);
    claims.erase("u-1");
    if (!(*writer)->Record(claims, "u-1", Durability::kRenamed).ok()) _exit(7);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The refused change is not there, the next one is, and the log loads.
  auto loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  Checkpoint want = Sample();
  want.erase("u-1");
  EXPECT_EQ(*loaded, want);
}

TEST(Checkpoint, ACorruptFileIsAnError) {
  TempDir dir("hami-dra-ckpt");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("checkpoint.json");
  ASSERT_TRUE(WriteFileAtomically(path, "{\"version\":1,", 0600).ok());
  auto r = LoadCheckpoint(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr(path));
}

}  // namespace
}  // namespace hami::dra
