#include "monitor/attribution.h"

#include <sys/stat.h>

#include <fstream>

#include "common/temp_dir.h"
#include "gtest/gtest.h"

namespace hami::monitor {
namespace {

constexpr char kMountinfo[] =
    "22 1 8:1 / / rw,relatime - overlay overlay rw,lowerdir=/l\n"
    "35 22 8:1 /usr/local/vgpu/containers/0f6e-11aa_main /usr/local/vgpu rw,relatime - ext4 "
    "/dev/sda1 rw\n"
    "36 22 8:1 /usr/local/vgpu/containers/0f6e-11aa_main.limits /overrideEnv ro - ext4 "
    "/dev/sda1 rw\n";

TEST(ContainerFromMountinfo, FindsTheBoundContainerDirectory) {
  auto key = ContainerFromMountinfo(kMountinfo);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->pod_uid, "0f6e-11aa");
  EXPECT_EQ(key->container, "main");
}

TEST(ContainerFromMountinfo, AcceptsASubdirectoryAndAHookPathOnItsOwnFilesystem) {
  auto key = ContainerFromMountinfo("40 22 0:50 /vgpu/containers/u1_c/sub /x rw - tmpfs t rw\n");
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->pod_uid, "u1");
  EXPECT_EQ(key->container, "c");
}

TEST(ContainerFromMountinfo, DecodesOctalEscapes) {
  auto key = ContainerFromMountinfo("40 22 0:50 /my\\040hook/vgpu/containers/u2_c2 /x rw - t t\n");
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->pod_uid, "u2");
}

TEST(ContainerFromMountinfo, IgnoresUnrelatedAndMalformedLines) {
  EXPECT_FALSE(ContainerFromMountinfo("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n").has_value());
  EXPECT_FALSE(ContainerFromMountinfo("garbage\n\n 1 2").has_value());
  EXPECT_FALSE(ContainerFromMountinfo("1 2 3 /vgpu/containers/nounderscore /x\n").has_value());
  EXPECT_FALSE(ContainerFromMountinfo("1 2 3 /vgpu/containers/ /x\n").has_value());
}

TEST(PodUidFromCgroup, ReadsTheCgroupfsLayout) {
  auto uid = PodUidFromCgroup(
      "12:memory:/kubepods/burstable/pod6b3f1c2e-8a7d-4c1e-9f00-0123456789ab/abcdef\n"
      "0::/\n");
  ASSERT_TRUE(uid.has_value());
  EXPECT_EQ(*uid, "6b3f1c2e-8a7d-4c1e-9f00-0123456789ab");
}

TEST(PodUidFromCgroup, ReadsTheSystemdLayoutTurningUnderscoresBack) {
  auto uid = PodUidFromCgroup(
      "0::/kubepods.slice/kubepods-besteffort.slice/"
      "kubepods-besteffort-pod6b3f1c2e_8a7d_4c1e_9f00_0123456789ab.slice/"
      "cri-containerd-0123.scope\n");
  ASSERT_TRUE(uid.has_value());
  EXPECT_EQ(*uid, "6b3f1c2e-8a7d-4c1e-9f00-0123456789ab");
}

TEST(PodUidFromCgroup, NoPodOutsideKubepods) {
  EXPECT_FALSE(PodUidFromCgroup("0::/user.slice/user-0.slice/session-1.scope\n").has_value());
  EXPECT_FALSE(PodUidFromCgroup("0::/system.slice/podman.service\n").has_value());
  EXPECT_FALSE(PodUidFromCgroup("no colons here\n").has_value());
  EXPECT_FALSE(PodUidFromCgroup("0::/kubepods/pod\n").has_value());
}

class AttributeTest : public ::testing::Test {
 protected:
  void Write(int pid, const char* name, const std::string& text) {
    const std::string dir = proc_.path() + "/" + std::to_string(pid);
    mkdir(dir.c_str(), 0755);
    std::ofstream(dir + "/" + name) << text;
  }
  TempDir proc_{"hami-fake-proc"};
};

TEST_F(AttributeTest, MountinfoFirstThenCgroupThenNone) {
  Write(100, "mountinfo", kMountinfo);
  Write(100, "cgroup", "0::/kubepods/podother/x\n");
  Write(200, "mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
  Write(200, "cgroup", "0::/kubepods/besteffort/pod1234-5678/c\n");
  Write(300, "mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");

  Attribution a = Attribute(proc_.path(), 100);
  EXPECT_EQ(a.source, AttributionSource::kMountinfo);
  EXPECT_EQ(a.key.pod_uid, "0f6e-11aa");
  EXPECT_EQ(a.key.container, "main");

  Attribution b = Attribute(proc_.path(), 200);
  EXPECT_EQ(b.source, AttributionSource::kCgroup);
  EXPECT_EQ(b.key.pod_uid, "1234-5678");
  EXPECT_EQ(b.key.container, "");

  EXPECT_EQ(Attribute(proc_.path(), 300).source, AttributionSource::kNone);
  EXPECT_EQ(Attribute(proc_.path(), 400).source, AttributionSource::kNone);  // no such process
}

}  // namespace
}  // namespace hami::monitor
