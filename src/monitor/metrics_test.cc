#include "monitor/metrics.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace hami::monitor {
namespace {

constexpr uint64_t kMiB = 1 << 20;

MetricsInput Example(inventory::NodeSample& sample) {
  sample.ok = true;
  inventory::GpuSample g;
  g.index = 0;
  g.uuid = "GPU-0000";
  g.name = "NVIDIA H100 80GB HBM3";
  g.memory_used_bytes = 1540 * kMiB;
  g.memory_total_bytes = 81559 * kMiB;
  g.utilization = 0.25;
  g.memory_utilization = 0.125;
  g.processes = {{4242, 1000 * kMiB}, {5151, 540 * kMiB}};
  sample.gpus.push_back(g);

  MetricsInput in;
  in.node = "node-1";
  in.version = "0.1.0";
  in.sample = &sample;
  in.health["GPU-0000"] = GpuHealthView{true, ""};
  RegionView r;
  r.key = {"uid-1", "main"};
  r.ns = "default";
  r.pod = "pod \"quoted\"";
  r.path = "/h/vgpu/containers/uid-1_main/usage.cache";
  r.writable = true;
  r.last_kernel_elapsed_seconds = 1.5;
  r.priority = 0;
  r.utilization_switch = true;
  r.processes = {{7, 4242, region::layout::IdentitySource::kBroker}};
  r.identity_by_source[size_t(region::layout::IdentitySource::kBroker)] = 1;
  r.identity_reasons[size_t(region::layout::IdentityReason::kMissing)] = 2;
  r.spilled_bytes = 256 * kMiB;
  r.host_limit_bytes = 3000 * kMiB;
  r.spill_rejected = 1;
  r.imported_bytes = 64 * kMiB;
  DeviceView d;
  d.vdevice_index = 0;
  d.uuid = "GPU-0000";
  d.used_bytes = 1000 * kMiB;
  d.limit_bytes = 3000 * kMiB;
  d.peak_bytes = 1200 * kMiB;
  d.rejected = 3;
  d.kind_bytes[size_t(region::layout::UsageKind::kContext)] = 500 * kMiB;
  d.kind_bytes[size_t(region::layout::UsageKind::kModule)] = 4 * kMiB;
  d.kind_bytes[size_t(region::layout::UsageKind::kData)] = 496 * kMiB;
  d.sm_limit = 30;
  d.sm_limit_in_force = 30;
  d.limiter_mode = region::layout::LimiterMode::kClosedLoop;
  d.limiter_waited_seconds = 0.75;
  d.limiter_measured_ratio = 0.29;
  d.nvml_bytes = 1000 * kMiB;
  d.nvml_utilization = 0.3;
  r.devices.push_back(d);
  in.regions.push_back(r);
  // A second region file of the same container on the same device: not exported twice.
  RegionView dup = r;
  dup.path = "/h/vgpu/containers/uid-1_main/zz.cache";
  dup.devices[0].used_bytes = 1;
  in.regions.push_back(dup);
  in.containers = 2;
  in.containers_without_pod = 1;
  UnaccountedProcess u;
  u.pid = 5151;
  u.device_uuid = "GPU-0000";
  u.reason = UnaccountedReason::kNoRegion;
  u.nvml_bytes = 540 * kMiB;
  u.unaccounted_bytes = 540 * kMiB;
  u.attribution = {AttributionSource::kMountinfo, {"uid-2", "side"}};
  in.unaccounted.push_back(u);
  in.pods_by_uid["uid-2"] = PodRef{"team-a", "trainer"};
  in.region_errors.push_back({"/h/vgpu/containers/uid-3_x/usage.cache", "corrupt"});
  in.cleanup = CleanupView{true, 4, 1, 2, 0, 1, 0};
  in.feedback = FeedbackView{10, 1, 1, 0, 1, 3, 0};
  in.pods_synced = true;
  in.scans = 10;
  in.nvml_samples = 9;
  in.nvml_failures = 1;
  in.events_recorded = 1;
  return in;
}

TEST(RenderMetrics, MatchesTheGoldenExposition) {
  inventory::NodeSample sample;
  const std::string text = RenderMetrics(Example(sample));
  const std::string path = std::string(HAMI_MONITOR_TESTDATA) + "/metrics_golden.txt";
  if (const char* u = std::getenv("HAMI_UPDATE_GOLDEN"); u != nullptr && std::string(u) == "1") {
    std::ofstream(path) << text;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " (HAMI_UPDATE_GOLDEN=1 writes it)";
  std::stringstream golden;
  golden << in.rdbuf();
  EXPECT_EQ(text, golden.str());
}

TEST(RenderMetrics, EverySeriesCarriesTheZoneAndLabelsAreEscaped) {
  inventory::NodeSample sample;
  const std::string text = RenderMetrics(Example(sample));
  std::istringstream lines(text);
  std::string line;
  int samples = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    EXPECT_NE(line.find("zone=\"vGPU\""), std::string::npos) << line;
  }
  EXPECT_GT(samples, 40);
  EXPECT_NE(text.find("pod=\"pod \\\"quoted\\\"\""), std::string::npos);
  // The duplicate region file's value (1 byte) is not exported.
  EXPECT_EQ(
      text.find("hami_vgpu_memory_used_bytes{namespace=\"default\",pod=\"pod \\\"quoted\\\"\","
                "container=\"main\",vdevice_index=\"0\",device_uuid=\"GPU-0000\","
                "zone=\"vGPU\"} 1\n"),
      std::string::npos);
}

TEST(RenderMetrics, AClaimsRegionCarriesTheClaimAndItsFirstUserAndEveryUserHasAnInfoSeries) {
  MetricsInput in;
  in.node = "n";
  RegionView r;
  r.key = {"c-uid", "claim"};
  r.ns = "ml";
  r.pod = "trainer-0";
  r.claim = ClaimView{"shared-gpu", "c-uid", "main"};
  DeviceView d;
  d.uuid = "GPU-0000";
  d.used_bytes = 1000 * kMiB;
  d.limit_bytes = 3000 * kMiB;
  r.devices.push_back(d);
  in.regions.push_back(r);
  in.claim_uses = {{"ml", "shared-gpu", "c-uid", "trainer-0", "main"},
                   {"ml", "shared-gpu", "c-uid", "trainer-1", "main"}};
  const std::string text = RenderMetrics(in);
  const std::string labels =
      "namespace=\"ml\",pod=\"trainer-0\",container=\"main\",claim=\"shared-gpu\","
      "claim_uid=\"c-uid\"";
  EXPECT_NE(text.find("hami_vgpu_memory_used_bytes{" + labels +
                      ",vdevice_index=\"0\",device_uuid=\"GPU-0000\",zone=\"vGPU\"} 1048576000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("hami_container_processes{" + labels + ",zone=\"vGPU\"} 0\n"),
            std::string::npos)
      << text;
  // One series per claim: the directory's own container name ("claim") labels nothing.
  EXPECT_EQ(text.find("container=\"claim\""), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE hami_claim_container_info gauge\n"
                      "hami_claim_container_info{" +
                      labels +
                      ",zone=\"vGPU\"} 1\n"
                      "hami_claim_container_info{namespace=\"ml\",pod=\"trainer-1\","
                      "container=\"main\",claim=\"shared-gpu\",claim_uid=\"c-uid\","
                      "zone=\"vGPU\"} 1\n"),
            std::string::npos)
      << text;
}

TEST(RenderMetrics, NoSampleMeansNoHostSeries) {
  MetricsInput in;
  in.node = "n";
  const std::string text = RenderMetrics(in);
  EXPECT_EQ(text.find("hami_host_gpu_memory_used_bytes"), std::string::npos);
  EXPECT_NE(text.find("hami_build_info"), std::string::npos);
}

}  // namespace
}  // namespace hami::monitor
