#include "sim/cri/host.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace hami::sim::cri {
namespace {

// A hybrid layout like this machine's: cgroup v1 hierarchies and cgroup2 at unified.
constexpr char kMountInfo[] =
    "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    "41 26 0:40 /sub /tmp/a\\040b rw - tmpfs tmpfs rw\n";

TEST(ParseMountInfo, ReadsRootMountPointTypeAndBothOptionsDecodingEscapes) {
  Result<std::vector<MountInfo>> m = ParseMountInfo(kMountInfo, "test");
  ASSERT_TRUE(m.ok()) << m.error().message();
  ASSERT_EQ(m->size(), 7u);
  EXPECT_EQ((*m)[2].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ((*m)[2].fs_type, "cgroup");
  EXPECT_EQ((*m)[2].super_options, "rw,cpu,cpuacct");
  EXPECT_EQ((*m)[2].mount_options, "rw,relatime") << "the mount's own, before the optional fields";
  EXPECT_EQ((*m)[5].fs_type, "cgroup2");
  EXPECT_EQ((*m)[6].root, "/sub");
  EXPECT_EQ((*m)[6].mount_point, "/tmp/a b") << "\\040 is a space";
}

TEST(ParseMountInfo, RefusesALineWithoutTheKernelsShapeNamingItsNumber) {
  for (const char* text : {"26 1 254:0 / / rw - ext4\n",                   // too few fields
                           "26 1 254:0 / / rw x y z w v\n",                // no separator
                           "26 1 254:0 rel / rw - ext4 /dev/vda rw\n"}) {  // relative root
    Result<std::vector<MountInfo>> m =
        ParseMountInfo(std::string("30 22 0:27 / /sys rw - tmpfs tmpfs rw\n") + text, "mi");
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.error().code(), ErrorCode::kCorrupt);
    EXPECT_EQ(m.error().message().rfind("mi: line 2: ", 0), 0u) << m.error().message();
  }
}

TEST(ParseProcCgroup, ReadsV1AndV2Lines) {
  Result<std::vector<CgroupMembership>> c =
      ParseProcCgroup("4:memory:/process_api/x\n2:cpu,cpuacct:/\n1:name=systemd:/\n0::/\n", "c");
  ASSERT_TRUE(c.ok()) << c.error().message();
  ASSERT_EQ(c->size(), 4u);
  EXPECT_EQ((*c)[0].hierarchy_id, 4);
  EXPECT_EQ((*c)[0].controllers, std::vector<std::string>{"memory"});
  EXPECT_EQ((*c)[0].path, "/process_api/x");
  EXPECT_EQ((*c)[1].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ((*c)[2].controllers, std::vector<std::string>{"name=systemd"});
  EXPECT_TRUE((*c)[3].controllers.empty());
}

TEST(ParseProcCgroup, RefusesMalformedLinesNamingThem) {
  for (const char* text : {"memory:/x\n", "x:memory:/x\n", "4:memory:relative\n", "4:memory:\n"}) {
    Result<std::vector<CgroupMembership>> c = ParseProcCgroup(text, "/proc/1/cgroup");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.error().message().rfind("/proc/1/cgroup: line 1: ", 0), 0u) << c.error().message();
  }
}

TEST(CgroupDirsOf, JoinsEachMembershipWithItsHierarchysMount) {
  std::vector<MountInfo> mounts = *ParseMountInfo(kMountInfo, "m");
  mounts.push_back(MountInfo{"/nested", "/sys/fs/cgroup/pids", "cgroup", "rw,pids", "rw"});
  std::vector<CgroupMembership> memberships = *ParseProcCgroup(
      "9:name=systemd:/\n8:pids:/nested/a\n7:blkio:/\n4:memory:/p/x\n"
      "2:cpu,cpuacct:/y\n0::/z\n",
      "c");
  std::vector<CgroupDir> dirs = CgroupDirsOf(memberships, mounts);
  ASSERT_EQ(dirs.size(), 5u) << "blkio has no mount";
  EXPECT_EQ(dirs[0].dir, "/sys/fs/cgroup/systemd");
  EXPECT_EQ(dirs[1].hierarchy, "/sys/fs/cgroup/pids");
  EXPECT_EQ(dirs[1].dir, "/sys/fs/cgroup/pids/a") << "relative to the mount's root";
  EXPECT_EQ(dirs[2].dir, "/sys/fs/cgroup/memory/p/x");
  EXPECT_EQ(dirs[3].dir, "/sys/fs/cgroup/cpu,cpuacct/y");
  EXPECT_EQ(dirs[4].dir, "/sys/fs/cgroup/unified/z");
}

TEST(Host, SeesThisProcesssCgroupsArgumentsAndNothingMountedUnderAFreshPath) {
  Result<std::vector<CgroupDir>> own = CgroupDirsOfProcess(0);
  ASSERT_TRUE(own.ok()) << own.error().message();
  EXPECT_FALSE(own->empty());
  Result<std::vector<std::string>> none = MountPointsUnder("/nonexistent-hami-test");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  Result<std::vector<std::string>> root = MountPointsUnder("/proc");
  ASSERT_TRUE(root.ok());
  ASSERT_FALSE(root->empty());
  EXPECT_EQ(root->back(), "/proc") << "deepest first, the directory itself last";
  EXPECT_TRUE(ProcessesWithArgument("--hami-no-process-has-this-argument").empty());
  EXPECT_EQ(CommandName(getpid()), "sim_cri_host_te") << "comm keeps 15 bytes";
}

}  // namespace
}  // namespace hami::sim::cri
