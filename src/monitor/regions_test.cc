#include "monitor/regions.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/temp_dir.h"
#include "gtest/gtest.h"

namespace hami::monitor {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class RegionSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(hook_.ok());
    ASSERT_EQ(mkdir((hook_.path() + "/vgpu").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((hook_.path() + "/vgpu/containers").c_str(), 0755), 0);
  }
  std::string Dir(const std::string& name) {
    std::string d = hook_.path() + "/vgpu/containers/" + name;
    mkdir(d.c_str(), 0755);
    return d;
  }
  std::unique_ptr<region::Region> Make(const std::string& path, uint64_t limit) {
    region::PolicySpec spec;
    spec.device_count = 1;
    spec.memory_limit[0] = limit;
    spec.sm_limit[0] = 30;
    spec.uuid[0] = "GPU-test-0";
    auto r = region::Region::Open(path, &spec, region::Create::kIfMissing, nullptr);
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  TempDir hook_{"hami-regions"};
};

TEST_F(RegionSetTest, OpensReadsAndKeepsAnUnchangedRegion) {
  auto mine = Make(Dir("uid-1_main") + "/usage.cache", 3000 * kMiB);
  ASSERT_NE(mine, nullptr);
  ASSERT_TRUE(mine->Register().ok());
  ASSERT_EQ(mine->Reserve(0, 100 * kMiB, region::UsageKind::kData), region::Admission::kOk);

  RegionSet set;
  RegionSet::ScanReport first = set.Scan(hook_.path());
  EXPECT_EQ(first.containers, 1);
  EXPECT_EQ(first.opened, 1);
  EXPECT_TRUE(first.new_problems.empty());
  auto regions = set.regions();
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_TRUE(regions[0]->writable);
  RegionView v = ReadRegion(*regions[0], nullptr, 0);
  ASSERT_EQ(v.devices.size(), 1u);
  EXPECT_EQ(v.devices[0].uuid, "GPU-test-0");
  EXPECT_EQ(v.devices[0].used_bytes, 100 * kMiB);
  EXPECT_EQ(v.devices[0].limit_bytes, 3000 * kMiB);
  EXPECT_EQ(v.devices[0].kind_bytes[size_t(region::UsageKind::kData)], 100 * kMiB);
  EXPECT_EQ(v.devices[0].sm_limit, 30u);
  ASSERT_EQ(v.processes.size(), 1u);
  EXPECT_EQ(v.processes[0].pid, getpid());

  std::vector<AccountedProcess> acc;
  AppendAccounted(*regions[0], acc);
  // This process's host PID is not known to the region (no identity ran): not accounted.
  for (const auto& a : acc) EXPECT_GT(a.host_pid, 0);

  RegionSet::ScanReport second = set.Scan(hook_.path());
  EXPECT_EQ(second.opened, 0);
  EXPECT_EQ(set.regions()[0].get(), regions[0].get());
}

// What the container holds outside its device budget is read from the slots and the policy.
TEST_F(RegionSetTest, ReadsTheMemorySpilledToTheHostAndImported) {
  const std::string path = Dir("uid-1_main") + "/usage.cache";
  region::PolicySpec spec;
  spec.device_count = 1;
  spec.memory_limit[0] = 1000 * kMiB;
  spec.oversubscribe = true;
  spec.host_limit = 500 * kMiB;
  spec.uuid[0] = "GPU-test-0";
  auto r = region::Region::Open(path, &spec, region::Create::kIfMissing, nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE((*r)->Register().ok());
  ASSERT_EQ((*r)->ReserveHost(200 * kMiB), region::Admission::kOk);
  ASSERT_EQ((*r)->ReserveHost(400 * kMiB), region::Admission::kOverLimit);
  (*r)->AddImported(32 * kMiB);

  RegionSet set;
  set.Scan(hook_.path());
  ASSERT_EQ(set.regions().size(), 1u);
  RegionView v = ReadRegion(*set.regions()[0], nullptr, 0);
  EXPECT_EQ(v.spilled_bytes, 200 * kMiB);
  EXPECT_EQ(v.host_limit_bytes, 500 * kMiB);
  EXPECT_EQ(v.spill_rejected, 1u);
  EXPECT_EQ(v.imported_bytes, 32 * kMiB);
  EXPECT_EQ(v.devices[0].used_bytes, 0u) << "none of it is device memory";
}

TEST_F(RegionSetTest, ReopensAReplacedFileAndDropsAGoneOne) {
  const std::string path = Dir("uid-1_main") + "/usage.cache";
  Make(path, 1000 * kMiB);
  RegionSet set;
  set.Scan(hook_.path());
  auto before = set.regions();
  ASSERT_EQ(before.size(), 1u);
  ASSERT_EQ(unlink(path.c_str()), 0);
  Make(path, 2000 * kMiB);
  RegionSet::ScanReport r = set.Scan(hook_.path());
  EXPECT_EQ(r.opened, 1);
  EXPECT_EQ(r.closed, 0);
  auto after = set.regions();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0].get(), before[0].get());
  EXPECT_EQ(ReadRegion(*after[0], nullptr, 0).devices[0].limit_bytes, 2000 * kMiB);
  ASSERT_EQ(unlink(path.c_str()), 0);
  EXPECT_EQ(set.Scan(hook_.path()).closed, 1);
  EXPECT_TRUE(set.regions().empty());
}

TEST_F(RegionSetTest, ACorruptFileIsReportedOnceByPathAndTheOthersStay) {
  Make(Dir("uid-1_main") + "/usage.cache", 1000 * kMiB);
  const std::string bad = Dir("uid-2_side") + "/usage.cache";
  {
    int fd = open(bad.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    std::string junk(16384, 'x');
    ASSERT_EQ(write(fd, junk.data(), junk.size()), ssize_t(junk.size()));
    close(fd);
  }
  RegionSet set;
  RegionSet::ScanReport r = set.Scan(hook_.path());
  EXPECT_EQ(r.containers, 2);
  ASSERT_EQ(r.new_problems.size(), 1u);
  EXPECT_NE(r.new_problems[0].find(bad), std::string::npos) << r.new_problems[0];
  ASSERT_EQ(set.errors().size(), 1u);
  EXPECT_EQ(set.errors()[0].path, bad);
  EXPECT_EQ(set.errors()[0].reason, "corrupt");
  EXPECT_EQ(set.regions().size(), 1u);
  // Logged once: the next scan has nothing new, the error stays exported.
  EXPECT_TRUE(set.Scan(hook_.path()).new_problems.empty());
  EXPECT_EQ(set.errors().size(), 1u);
}

}  // namespace
}  // namespace hami::monitor
