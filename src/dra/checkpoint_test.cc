#include "dra/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

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
