#include "monitor/unaccounted.h"

#include "gtest/gtest.h"

namespace hami::monitor {
namespace {

constexpr uint64_t kMiB = 1 << 20;

inventory::NodeSample OneGpu(std::vector<inventory::GpuProcess> procs) {
  inventory::NodeSample s;
  s.ok = true;
  inventory::GpuSample g;
  g.index = 0;
  g.uuid = "GPU-a";
  g.processes = std::move(procs);
  s.gpus.push_back(g);
  return s;
}

TEST(FindUnaccounted, ProcessWithoutSlotIsNoRegionAndAttributed) {
  inventory::NodeSample s = OneGpu({{10, 500 * kMiB}, {11, 300 * kMiB}});
  std::vector<AccountedProcess> acc = {{11, {"u1", "c1"}, "GPU-a", 300 * kMiB}};
  std::vector<pid_t> asked;
  auto out = FindUnaccounted(s, acc, 64 * kMiB, [&](pid_t pid) {
    asked.push_back(pid);
    return Attribution{AttributionSource::kCgroup, {"u9", ""}};
  });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].pid, 10);
  EXPECT_EQ(out[0].reason, UnaccountedReason::kNoRegion);
  EXPECT_EQ(out[0].unaccounted_bytes, 500 * kMiB);
  EXPECT_EQ(out[0].attribution.key.pod_uid, "u9");
  EXPECT_EQ(asked, std::vector<pid_t>{10});
}

TEST(FindUnaccounted, UnderReportingPastTheToleranceOnly) {
  inventory::NodeSample s = OneGpu({{20, 400 * kMiB}, {21, 400 * kMiB}});
  std::vector<AccountedProcess> acc = {{20, {"u1", "c1"}, "GPU-a", 350 * kMiB},
                                       {21, {"u2", "c2"}, "GPU-a", 300 * kMiB}};
  auto out = FindUnaccounted(s, acc, 64 * kMiB, nullptr);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].pid, 21);
  EXPECT_EQ(out[0].reason, UnaccountedReason::kUnderReported);
  EXPECT_EQ(out[0].accounted_bytes, 300 * kMiB);
  EXPECT_EQ(out[0].unaccounted_bytes, 100 * kMiB);
  EXPECT_EQ(out[0].attribution.source, AttributionSource::kRegion);
  EXPECT_EQ(out[0].attribution.key.container, "c2");
}

TEST(FindUnaccounted, SlotsOnAnotherGpuDoNotCountAndZeroBytesNeverReported) {
  inventory::NodeSample s = OneGpu({{30, 200 * kMiB}, {31, 0}});
  std::vector<AccountedProcess> acc = {{30, {"u1", "c1"}, "GPU-b", 200 * kMiB}};
  auto out = FindUnaccounted(s, acc, 0, nullptr);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].pid, 30);
  EXPECT_EQ(out[0].reason, UnaccountedReason::kNoRegion);
}

TEST(FindUnaccounted, SeveralSlotsOfOnePidAreSummed) {
  inventory::NodeSample s = OneGpu({{40, 300 * kMiB}});
  std::vector<AccountedProcess> acc = {{40, {"u1", "c1"}, "GPU-a", 150 * kMiB},
                                       {40, {"u1", "c1"}, "GPU-a", 150 * kMiB}};
  EXPECT_TRUE(FindUnaccounted(s, acc, 0, nullptr).empty());
}

}  // namespace
}  // namespace hami::monitor
