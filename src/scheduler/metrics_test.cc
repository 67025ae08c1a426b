// The scheduler's exposition of what each GPU and each node has allocated and left, from a
// cluster view fed as the informers feed it; promtool reads the whole text.
#include "scheduler/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "kube/annotations.h"
#include "scheduler/state.h"
#include "scheduler/test_cluster.h"
#include "support/promtool.h"

namespace hami::scheduler {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

kube::ObjectPtr Ptr(json j) { return std::make_shared<const json>(std::move(j)); }

// A node as the device plugin registers it, GPU `unhealthy` (if >= 0) reported unhealthy.
json NodeWithGpus(const std::string& name, int gpus, int unhealthy = -1) {
  json node = testing::GpuNode({.name = name, .gpus = gpus, .mem_mib = 16384});
  std::string& text = node["metadata"]["annotations"][std::string(kube::kNodeRegisterAnnotation)]
                          .get_ref<std::string&>();
  auto devices = kube::DecodeNodeInventory(text);
  EXPECT_TRUE(devices.ok()) << devices.error().message();
  if (devices.ok() && unhealthy >= 0) {
    (*devices)[size_t(unhealthy)].health = false;
    text = kube::EncodeNodeInventory(*devices);
  }
  return node;
}

class SchedulerMetricsTest : public ::testing::Test {
 protected:
  SchedulerMetricsTest() : state_(config::DeviceConfig{}, std::chrono::seconds(300)) {
    state_.UpsertNode(Ptr(NodeWithGpus("n1", 2, /*unhealthy=*/1)));
    state_.UpsertNode(Ptr(NodeWithGpus("n2", 1)));
    state_.UpsertPod(
        Ptr(testing::RunningGpuPod({.name = "p", .mem_mib = 3000, .cores = 30}, "n1",
                                   {{{testing::GpuUuid("n1", 0), "NVIDIA", 3000, 30}}})));
  }

  static std::string Gpu(const std::string& node, int index) {
    return "{node=\"" + node + "\",device_uuid=\"" + testing::GpuUuid(node, index) +
           "\",device_index=\"" + std::to_string(index) +
           "\",device_type=\"NVIDIA-A100-SXM4-40GB\"} ";
  }

  ClusterState state_;
  SchedulerMetrics metrics_;
};

TEST_F(SchedulerMetricsTest, EachGpuShowsWhatIsAllocatedAndWhatIsFree) {
  const std::string text = metrics_.Render(state_, true);
  // n1's GPU 0 holds the pod's 3000 MiB and 30 cores; GPU 1 is unhealthy and offers nothing.
  for (const std::string& line : {
           "hami_gpu_memory_allocated_bytes" + Gpu("n1", 0) + "3145728000",
           "hami_gpu_memory_free_bytes" + Gpu("n1", 0) + "14034141184",
           "hami_gpu_core_allocated_ratio" + Gpu("n1", 0) + "0.3",
           "hami_gpu_core_free_ratio" + Gpu("n1", 0) + "0.7",
           "hami_gpu_memory_free_bytes" + Gpu("n1", 1) + "0",
           "hami_gpu_core_free_ratio" + Gpu("n1", 1) + "0",
           "hami_gpu_memory_free_bytes" + Gpu("n2", 0) + "17179869184",
           "hami_gpu_core_free_ratio" + Gpu("n2", 0) + "1",
       }) {
    EXPECT_THAT(text, HasSubstr("\n" + line + "\n"));
  }
}

TEST_F(SchedulerMetricsTest, EachNodeShowsItsGpusSums) {
  const std::string text = metrics_.Render(state_, true);
  for (const char* line : {
           "hami_node_gpu_memory_limit_bytes{node=\"n1\"} 34359738368",
           "hami_node_gpu_memory_allocated_bytes{node=\"n1\"} 3145728000",
           "hami_node_gpu_memory_free_bytes{node=\"n1\"} 14034141184",
           "hami_node_gpu_core_limit_ratio{node=\"n1\"} 2",
           "hami_node_gpu_core_allocated_ratio{node=\"n1\"} 0.3",
           "hami_node_gpu_core_free_ratio{node=\"n1\"} 0.7",
           "hami_node_gpu_memory_limit_bytes{node=\"n2\"} 17179869184",
           "hami_node_gpu_memory_allocated_bytes{node=\"n2\"} 0",
           "hami_node_gpu_memory_free_bytes{node=\"n2\"} 17179869184",
           "hami_node_gpu_core_free_ratio{node=\"n2\"} 1",
       }) {
    EXPECT_THAT(text, HasSubstr(std::string("\n") + line + "\n"));
  }
}

TEST_F(SchedulerMetricsTest, FreeFollowsThePodsGoingAway) {
  state_.RemovePod(
      Ptr(testing::RunningGpuPod({.name = "p", .mem_mib = 3000, .cores = 30}, "n1",
                                 {{{testing::GpuUuid("n1", 0), "NVIDIA", 3000, 30}}})));
  const std::string text = metrics_.Render(state_, true);
  EXPECT_THAT(text, HasSubstr("\nhami_gpu_memory_free_bytes" + Gpu("n1", 0) + "17179869184\n"));
  EXPECT_THAT(text, HasSubstr("\nhami_node_gpu_core_free_ratio{node=\"n1\"} 1\n"));
}

TEST_F(SchedulerMetricsTest, TheExpositionPassesPromtool) {
  const hami::testing::PromtoolReport report =
      hami::testing::PromtoolCheckMetrics(metrics_.Render(state_, true));
  if (!report.available) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  // Exit 3 is lint findings only. The one accepted finding is HAMi's own name
  // hami_gpu_shared_count, which a gauge ending in _count trips.
  ASSERT_TRUE(report.code == 0 || report.code == 3) << ::testing::PrintToString(report.findings);
  for (const std::string& line : report.findings) {
    EXPECT_EQ(line.rfind("hami_gpu_shared_count non-histogram and non-summary metrics should not "
                         "have \"_count\" suffix",
                         0),
              0u)
        << line;
  }
}

}  // namespace
}  // namespace hami::scheduler
