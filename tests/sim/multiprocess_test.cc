// Several processes on one simulated machine: what NVML reports covers all of them.
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <string>

#include "nvml/nvml.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

class MultiProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = SimEnv::Setup("h100-80g:2");
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev0_), NVML_SUCCESS);
  }
  void TearDown() override { nvmlShutdown(); }

  std::unique_ptr<Subprocess> Worker(std::vector<std::string> steps) {
    steps.insert(steps.begin(), TestProgram("sim_worker"));
    return std::make_unique<Subprocess>(steps, std::map<std::string, std::string>{});
  }

  std::vector<nvmlProcessInfo_t> Processes(nvmlDevice_t dev) {
    unsigned count = 64;
    std::vector<nvmlProcessInfo_t> infos(count);
    EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos.data()), NVML_SUCCESS);
    infos.resize(count);
    return infos;
  }

  std::string state_;
  nvmlDevice_t dev0_ = nullptr;
};

TEST_F(MultiProcessTest, TwoAllocatingProcessesBothAppearWithTheirMemory) {
  nvmlMemory_t before;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, &before), NVML_SUCCESS);

  auto a = Worker({"alloc", "1g", "hold"});
  auto b = Worker({"alloc", "3g", "hold"});
  ASSERT_TRUE(a->WaitForLine("holding"));
  ASSERT_TRUE(b->WaitForLine("holding"));

  auto procs = Processes(dev0_);
  ASSERT_EQ(procs.size(), 2u);
  const uint64_t context = 500ull << 20;  // h100-80g's context cost
  for (const nvmlProcessInfo_t& p : procs) {
    if (p.pid == unsigned(a->pid())) {
      EXPECT_EQ(p.usedGpuMemory, context + (1ull << 30));
    } else {
      EXPECT_EQ(p.pid, unsigned(b->pid()));
      EXPECT_EQ(p.usedGpuMemory, context + (3ull << 30));
    }
  }
  nvmlMemory_t during;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, &during), NVML_SUCCESS);
  EXPECT_EQ(during.used - before.used, 2 * context + (4ull << 30));
  EXPECT_EQ(during.total, before.total);
  EXPECT_EQ(during.free + during.used, during.total);

  a->CloseStdin();
  b->CloseStdin();
  EXPECT_EQ(a->Wait(), 0);
  EXPECT_EQ(b->Wait(), 0);
}

TEST_F(MultiProcessTest, AKilledProcessDisappearsAndItsMemoryReturns) {
  nvmlMemory_t before;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, &before), NVML_SUCCESS);
  auto a = Worker({"alloc", "2g", "hold"});
  ASSERT_TRUE(a->WaitForLine("holding"));
  ASSERT_EQ(Processes(dev0_).size(), 1u);
  a->Kill(SIGKILL);
  EXPECT_EQ(a->Wait(), 128 + SIGKILL);
  EXPECT_TRUE(Processes(dev0_).empty());
  nvmlMemory_t after;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, &after), NVML_SUCCESS);
  EXPECT_EQ(after.used, before.used);
}

}  // namespace
}  // namespace hami::testing
