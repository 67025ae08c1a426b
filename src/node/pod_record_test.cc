#include "node/pod_record.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/temp_dir.h"

namespace hami::node {
namespace {

TEST(PodRecord, TextParsesBackToTheSameRecord) {
  const PodRecord r{"team-a", "train", "5f1c0a4e-0000-4000-8000-000000000001", "main"};
  EXPECT_EQ(PodRecordText(r),
            "{\"container\":\"main\",\"name\":\"train\",\"namespace\":\"team-a\","
            "\"uid\":\"5f1c0a4e-0000-4000-8000-000000000001\"}\n");
  auto back = ParsePodRecord(PodRecordText(r));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, r);
}

TEST(PodRecord, ParseRefusesWhatIsNotARecordNamingWhy) {
  EXPECT_EQ(ParsePodRecord("{").error().message(), "pod record: not JSON");
  EXPECT_EQ(ParsePodRecord("[]").error().message(), "pod record: not a JSON object");
  EXPECT_EQ(ParsePodRecord(R"({"name":7})").error().message(), "pod record: name is not a string");
  auto partial = ParsePodRecord(R"({"name":"p","extra":1})");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->name, "p");
  EXPECT_EQ(partial->ns, "");
}

TEST(PodRecord, ReadSaysAbsentAndRefusesASymlink) {
  TempDir dir("hami-pod-record-test");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(ReadPodRecord(dir.path()).error().code(), ErrorCode::kNotFound);
  ASSERT_EQ(symlink("/etc/passwd", dir.File(kPodRecordFileName).c_str()), 0);
  auto linked = ReadPodRecord(dir.path());
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.error().code(), ErrorCode::kNotFound);
  ASSERT_EQ(unlink(dir.File(kPodRecordFileName).c_str()), 0);
  FILE* f = std::fopen(dir.File(kPodRecordFileName).c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(PodRecordText({"ns", "p", "u", "c"}).c_str(), f);
  std::fclose(f);
  auto read = ReadPodRecord(dir.path());
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(read->name, "p");
}

}  // namespace
}  // namespace hami::node
