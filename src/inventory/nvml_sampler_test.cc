// The monitor's NVML sampler (src/inventory/nvml_sampler.h) against the simulated GPU's NVML,
// opened by path.
#include "inventory/nvml_sampler.h"

#include <gtest/gtest.h>

#include <string>

#include "support/sim_env.h"

namespace hami::inventory {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(NvmlSampler, SamplesTheSimulatedGpus) {
  testing::SimEnv::Setup("h100-80g:2");
  auto s = NvmlSampler::Open(std::string(HAMI_SIM_LIB_DIR) + "/libnvidia-ml.so.1");
  ASSERT_TRUE(s.ok()) << s.error().message();
  NodeSample sample = (*s)->Sample();
  ASSERT_TRUE(sample.ok) << sample.error;
  ASSERT_EQ(sample.gpus.size(), 2u);
  EXPECT_TRUE(sample.gpus[0].ok) << sample.gpus[0].error;
  EXPECT_EQ(sample.gpus[0].uuid.rfind("GPU-", 0), 0u);
  EXPECT_EQ(sample.gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_GT(sample.gpus[0].memory_total_bytes, 80000 * kMiB);
}

TEST(NvmlSampler, AMissingLibraryIsNotFoundNamingIt) {
  auto s = NvmlSampler::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(s.error().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

}  // namespace
}  // namespace hami::inventory
