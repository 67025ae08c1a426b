// The device inventory (src/inventory/inventory.h) against the simulated GPU's NVML and CUDA
// driver, found by path as any driver would be, and against a fake NVML whose queries fail
// on demand.
#include "inventory/inventory.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>

#include "common/file.h"
#include "common/temp_dir.h"

namespace hami::inventory {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kMiB = 1ull << 20;

class SimulatedInventory : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    setenv("HAMI_SIM_STATE", dir_.File("sim.state").c_str(), 1);
    setenv("HAMI_SIM_PROFILE", "a100-40g,t4-16g", 1);
    unsetenv("HAMI_SIM_NODE");
    unsetenv("CUDA_VISIBLE_DEVICES");
    options_.nvml_library = std::string(HAMI_SIM_LIB_DIR) + "/libnvidia-ml.so.1";
    options_.cuda_library = std::string(HAMI_SIM_LIB_DIR) + "/libcuda.so.1";
  }
  TempDir dir_{"hami-inventory-test"};
  Options options_;
};

TEST_F(SimulatedInventory, ListsEveryDeviceWithItsProperties) {
  auto inv = ReadInventory(options_);
  ASSERT_TRUE(inv.ok()) << inv.error().message();
  EXPECT_THAT(inv->nvml_library, HasSubstr("/libnvidia-ml.so.1"));
  EXPECT_FALSE(inv->driver_version.empty());
  ASSERT_EQ(inv->devices.size(), 2u);

  const Device& a100 = inv->devices[0];
  EXPECT_EQ(a100.index, 0);
  EXPECT_THAT(a100.uuid, StartsWith("GPU-"));
  EXPECT_EQ(a100.uuid.size(), 40u);
  EXPECT_EQ(a100.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_GE(a100.memory_bytes, 40960 * kMiB);
  EXPECT_EQ(a100.sm_count, 108);
  EXPECT_EQ(a100.cc_major, 8);
  EXPECT_EQ(a100.cc_minor, 0);
  EXPECT_THAT(a100.pci_bus_id, StartsWith("00000000:"));
  EXPECT_EQ(a100.numa_node, 0);
  EXPECT_EQ(a100.mig_mode, MigMode::kDisabled) << "an A100 can do MIG; the simulation has it off";
  EXPECT_TRUE(a100.healthy) << a100.health_reason;

  const Device& t4 = inv->devices[1];
  EXPECT_EQ(t4.index, 1);
  EXPECT_EQ(t4.name, "Tesla T4");
  EXPECT_EQ(t4.sm_count, 40);
  EXPECT_EQ(t4.cc_major, 7);
  EXPECT_EQ(t4.cc_minor, 5);
  EXPECT_EQ(t4.numa_node, 1);
  EXPECT_EQ(t4.mig_mode, MigMode::kUnsupported);
  EXPECT_NE(t4.uuid, a100.uuid);
  EXPECT_NE(t4.pci_bus_id, a100.pci_bus_id);
  EXPECT_EQ(Uuids(*inv), (std::vector<std::string>{a100.uuid, t4.uuid}));
}

TEST_F(SimulatedInventory, WithoutTheCudaDriverSmCountsAreUnknown) {
  options_.cuda_library.clear();
  auto inv = ReadInventory(options_);
  ASSERT_TRUE(inv.ok()) << inv.error().message();
  ASSERT_EQ(inv->devices.size(), 2u);
  for (const Device& d : inv->devices) {
    EXPECT_EQ(d.sm_count, 0);
    EXPECT_TRUE(d.healthy);
  }
}

TEST_F(SimulatedInventory, ReadingTwiceGivesTheSameDevices) {
  auto first = ReadInventory(options_);
  auto second = ReadInventory(options_);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(Uuids(*first), Uuids(*second));
}

TEST_F(SimulatedInventory, AnNvmlThatCannotStartIsAnErrorNamingTheLibrary) {
  setenv("HAMI_SIM_PROFILE", "no-such-gpu", 1);
  auto inv = ReadInventory(options_);
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(inv.error().message(),
              AllOf(HasSubstr("libnvidia-ml.so.1"), HasSubstr("nvmlInit_v2: ")));
}

TEST(Inventory, AMissingLibraryIsNotFoundWithTheLoadersReason) {
  Options o;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  auto inv = ReadInventory(o);
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(
      inv.error().message(),
      AllOf(StartsWith("cannot open /nonexistent/libnvidia-ml.so.1: "), HasSubstr("No such file")));
}

TEST(Inventory, ALibraryThatIsNotNvmlIsIncompatible) {
  Options o;
  o.nvml_library = "libm.so.6";
  auto inv = ReadInventory(o);
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.error().code(), ErrorCode::kIncompatible);
  EXPECT_THAT(inv.error().message(), HasSubstr("has no nvmlInit_v2"));
}

class FakeInventory : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("HAMI_FAKE_NVML_FAIL");
    unsetenv("HAMI_FAKE_NVML_INIT");
    unsetenv("HAMI_FAKE_NVML_NO_NUMA");
    options_.nvml_library = HAMI_FAKE_NVML;
    options_.cuda_library.clear();
  }
  Options options_;
};

TEST_F(FakeInventory, MigModeIsTheCurrentOne) {
  auto inv = ReadInventory(options_);
  ASSERT_TRUE(inv.ok()) << inv.error().message();
  ASSERT_EQ(inv->devices.size(), 2u);
  EXPECT_EQ(inv->driver_version, "999.1");
  EXPECT_EQ(inv->devices[0].mig_mode, MigMode::kDisabled);
  EXPECT_EQ(inv->devices[1].mig_mode, MigMode::kEnabled);
  EXPECT_STREQ(MigModeName(MigMode::kEnabled), "enabled");
  EXPECT_EQ(inv->devices[1].memory_bytes, 32ull << 30);
  EXPECT_EQ(inv->devices[1].pci_bus_id, "00000000:3C:00.0");
}

class FailingQuery : public FakeInventory, public ::testing::WithParamInterface<const char*> {};

TEST_P(FailingQuery, MakesThatDeviceUnhealthyNamingTheCallAndLeavesTheOther) {
  setenv("HAMI_FAKE_NVML_FAIL", (std::string(GetParam()) + ":1").c_str(), 1);
  auto inv = ReadInventory(options_);
  ASSERT_TRUE(inv.ok()) << inv.error().message();
  ASSERT_EQ(inv->devices.size(), 2u);
  EXPECT_TRUE(inv->devices[0].healthy) << inv->devices[0].health_reason;
  EXPECT_EQ(inv->devices[0].uuid, "GPU-00000000-0000-0000-0000-000000000000");
  const Device& lost = inv->devices[1];
  EXPECT_EQ(lost.index, 1);
  EXPECT_FALSE(lost.healthy);
  EXPECT_EQ(lost.health_reason, std::string(GetParam()) + ": GPU is lost");
}

INSTANTIATE_TEST_SUITE_P(Inventory, FailingQuery,
                         ::testing::Values("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID",
                                           "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo",
                                           "nvmlDeviceGetPciInfo_v3",
                                           "nvmlDeviceGetCudaComputeCapability",
                                           "nvmlDeviceGetMigMode"));

TEST_F(FakeInventory, AFailedInitIsUnavailableWithNvmlsReason) {
  setenv("HAMI_FAKE_NVML_INIT", "fail", 1);
  auto inv = ReadInventory(options_);
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(inv.error().message(), HasSubstr("nvmlInit_v2: Driver Not Loaded"));
}

TEST_F(FakeInventory, NumaNodeFallsBackToSysfsWhenNvmlHasNone) {
  setenv("HAMI_FAKE_NVML_NO_NUMA", "1", 1);
  TempDir sys("hami-inventory-sysfs");
  ASSERT_TRUE(sys.ok());
  // Device 0 is 00000000:3B:00.0 (sysfs: 0000:3b:00.0) on node 1; device 1 has no file.
  const std::string dev = sys.File("bus/pci/devices/0000:3b:00.0");
  for (std::string p : {sys.File("bus"), sys.File("bus/pci"), sys.File("bus/pci/devices"), dev}) {
    ASSERT_EQ(mkdir(p.c_str(), 0755), 0) << p;
  }
  {
    auto fd = OpenRegularFile(dev + "/numa_node", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(WriteAll(fd->get(), "1\n").ok());
  }
  options_.sysfs_root = sys.path();
  auto inv = ReadInventory(options_);
  ASSERT_TRUE(inv.ok()) << inv.error().message();
  ASSERT_EQ(inv->devices.size(), 2u);
  EXPECT_EQ(inv->devices[0].numa_node, 1);
  EXPECT_EQ(inv->devices[1].numa_node, -1);
  EXPECT_TRUE(inv->devices[0].healthy && inv->devices[1].healthy);
}

}  // namespace
}  // namespace hami::inventory
