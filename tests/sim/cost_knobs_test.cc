// The simulated GPU's cost knobs: latencies a real driver has, which benchmarks of the
// interposer switch on. Each test checks the modelled cost is paid (a lower bound: the
// model sleeps at least that long), never how fast anything is.
#include <cuda.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "nvml/nvml.h"
#include "sim_test_util.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

class CostKnobTest : public ::testing::Test {
 protected:
  void SetUp() override { SimEnv::Setup("h100-80g:2"); }
};

TEST_F(CostKnobTest, TheFirstCuInitOfAProcessPaysTheInitLatency) {
  EXPECT_IN_CHILD({{"HAMI_SIM_INIT_US", "200000"}}, [] {
    int64_t t0 = MonotonicNs();
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    EXPECT_GE(MonotonicNs() - t0, 200'000'000);
  });
}

TEST_F(CostKnobTest, CreatingAContextPaysTheContextLatency) {
  EXPECT_IN_CHILD({{"HAMI_SIM_CTX_CREATE_US", "150000"}}, [] {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUcontext ctx;
    int64_t t0 = MonotonicNs();
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    EXPECT_GE(MonotonicNs() - t0, 150'000'000);
    // Retaining the existing primary context creates nothing.
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  });
}

TEST_F(CostKnobTest, EveryNvmlCallPaysTheNvmlLatency) {
  EXPECT_IN_CHILD({{"HAMI_SIM_NVML_US", "50000"}}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    unsigned count = 0;
    int64_t t0 = MonotonicNs();
    ASSERT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    EXPECT_GE(MonotonicNs() - t0, 100'000'000);
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

struct Interval {
  int64_t start, end;
};

Interval ParseContextLine(const std::string& line) {
  Interval i{0, 0};
  long long s = 0, e = 0;
  if (std::sscanf(line.c_str(), "context device=%*d start_ns=%lld end_ns=%lld", &s, &e) == 2) {
    i = {s, e};
  }
  return i;
}

TEST_F(CostKnobTest, SerializedContextCreationNeverOverlapsAcrossProcesses) {
  std::map<std::string, std::string> env = {{"HAMI_SIM_CTX_SERIALIZE", "1"},
                                            {"HAMI_SIM_CTX_CREATE_US", "200000"}};
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(
        std::make_unique<Subprocess>(std::vector<std::string>{TestProgram("sim_worker"), "device",
                                                              std::to_string(i % 2), "context"},
                                     env));
  }
  std::vector<Interval> spans;
  for (auto& w : workers) {
    auto line = w->WaitForLine("context", 20000);
    ASSERT_TRUE(line);
    Interval i = ParseContextLine(*line);
    ASSERT_GT(i.end, i.start) << *line;
    spans.push_back(i);
    EXPECT_EQ(w->Wait(), 0);
  }
  // Whatever the order, the three creations (on either device) ran one after another:
  // each took 200 ms, and their spans cover at least 600 ms end to end.
  int64_t first = spans[0].start, last = spans[0].end;
  for (const Interval& i : spans) {
    first = std::min(first, i.start);
    last = std::max(last, i.end);
  }
  EXPECT_GE(last - first, 600'000'000);
}

}  // namespace
}  // namespace hami::testing
