// The real hami-monitor on the simulated GPU (HAMI_SIM_STATE) and the simulated API server:
// regions made by the region library, series values, promtool, a corrupted region file
// skipped while another container's metrics continue, the API server stopped with last-known
// metrics still served, a process holding GPU memory with no region (unaccounted series and a
// Warning event on its pod), a CUDA program under libvgpu.so accounted to the byte, and a second
// monitor on the node serving without cleanup; a DRA claim's region labelled with its first
// user and its claim, never cleaned up.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "common/temp_dir.h"
#include "inventory/nvml_sampler.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "region/region.h"
#include "sim/kube/api_server.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::monitor {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr char kNode[] = "node-1";
constexpr char kProfile[] = "h100-80g:2";

std::string Bin(const std::string& name) { return std::string(HAMI_BIN_DIR) + "/" + name; }

class MonitorIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    state_ = testing::SimEnv::NewStatePath();
    setenv("HAMI_SIM_STATE", state_.c_str(), 1);
    setenv("HAMI_SIM_PROFILE", kProfile, 1);
    auto sampler = inventory::NvmlSampler::Open(Nvml());
    ASSERT_TRUE(sampler.ok()) << sampler.error().message();
    inventory::NodeSample s = (*sampler)->Sample();
    ASSERT_EQ(s.gpus.size(), 2u);
    gpu0_ = s.gpus[0].uuid;

    auto api = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(api.ok()) << api.error().message();
    api_ = std::move(api).value();
    kubeconfig_ = dir_.path() + "/kubeconfig";
    ASSERT_TRUE(api_->WriteKubeconfig(kubeconfig_).ok());
    kube::Config c;
    c.server = api_->url();
    c.source = "monitor integration test";
    auto client = kube::Client::Create(c, {});
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();
    ASSERT_TRUE(api_->CreateObject(kube::kNodes, {{"metadata", {{"name", kNode}}}}).ok());
    hook_ = dir_.path() + "/hook";
    ASSERT_EQ(mkdir(hook_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((hook_ + "/vgpu").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((hook_ + "/vgpu/containers").c_str(), 0755), 0);
  }

  void TearDown() override {
    for (auto* m : {&monitor_, &second_}) {
      if (*m == nullptr) continue;
      (*m)->Kill(SIGTERM);
      EXPECT_EQ((*m)->Wait(20000), 0) << "hami-monitor stops cleanly on SIGTERM";
    }
    monitor_.reset();
    second_.reset();
    regions_.clear();
    client_.reset();
    if (api_ != nullptr) api_->Stop();
  }

  static std::string Nvml() { return std::string(HAMI_SIM_LIB_DIR) + "/libnvidia-ml.so.1"; }

  // A pod on the node; returns its UID.
  std::string CreatePod(const std::string& name) {
    nlohmann::json pod = {
        {"metadata", {{"name", name}, {"namespace", "default"}}},
        {"spec", {{"nodeName", kNode}, {"containers", {{{"name", "main"}, {"image", "x"}}}}}}};
    auto made = client_->Create(kube::kPods, "default", pod);
    EXPECT_TRUE(made.ok()) << made.error().message();
    return made.ok() ? (*made)["metadata"]["uid"].get<std::string>() : "";
  }

  std::string ContainerDir(const std::string& uid) {
    std::string d = hook_ + "/vgpu/containers/" + uid + "_main";
    mkdir(d.c_str(), 0755);
    return d;
  }

  // A region with this process registered in it, holding `used` bytes on GPU 0.
  void MakeRegion(const std::string& uid, uint64_t limit, uint64_t used) {
    MakeRegionIn(ContainerDir(uid), limit, used);
  }

  void MakeRegionIn(const std::string& dir, uint64_t limit, uint64_t used) {
    region::PolicySpec spec;
    spec.device_count = 1;
    spec.memory_limit[0] = limit;
    spec.sm_limit[0] = 30;
    spec.uuid[0] = gpu0_;
    auto r = region::Region::Open(dir + "/usage.cache", &spec, region::Create::kIfMissing, nullptr);
    ASSERT_TRUE(r.ok()) << r.error().message();
    ASSERT_TRUE((*r)->Register().ok());
    (*r)->SetHostPid(getpid(), region::IdentitySource::kSameNamespace);
    ASSERT_EQ((*r)->Reserve(0, used, region::UsageKind::kData), region::Admission::kOk);
    regions_.push_back(std::move(r).value());
  }

  // promtool's verdict on `text` ("" when it passes), or nullopt without promtool.
  std::optional<std::string> PromtoolProblems(const std::string& text) {
    if (access("/usr/bin/promtool", X_OK) != 0 &&
        std::system("command -v promtool >/dev/null") != 0) {
      return std::nullopt;
    }
    const std::string file = dir_.path() + "/promtool-input.txt";
    std::ofstream(file) << text;
    const std::string cmd = "promtool check metrics < " + file + " > " + dir_.path() + "/out 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream out(dir_.path() + "/out");
    std::string report((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 0 ? "" : "promtool failed: " + report;
  }

  // Starts hami-monitor and returns its metrics port (from its start line).
  int StartMonitor(std::unique_ptr<testing::Subprocess>& m,
                   const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {"/bin/sh",
                                     "-c",
                                     "exec \"$0\" \"$@\" 2>&1",
                                     Bin("hami-monitor"),
                                     "--node-name",
                                     kNode,
                                     "--hook-path",
                                     hook_,
                                     "--kubeconfig",
                                     kubeconfig_,
                                     "--metrics-bind-address",
                                     "127.0.0.1:0",
                                     "--feedback-interval",
                                     "200ms",
                                     "--resync-interval",
                                     "2s",
                                     "--nvml-library",
                                     Nvml(),
                                     "--no-health-checks"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    m = std::make_unique<testing::Subprocess>(
        argv, std::map<std::string, std::string>{{"HAMI_SIM_STATE", state_},
                                                 {"HAMI_SIM_PROFILE", kProfile}});
    for (;;) {
      auto line = m->ReadLine(20000);
      if (!line) {
        ADD_FAILURE() << "hami-monitor ended or stalled before its start line";
        return 0;
      }
      log_ += *line + "\n";
      if (line->find("event=started") == std::string::npos) continue;
      size_t at = line->find("metrics=127.0.0.1:");
      if (at == std::string::npos) return 0;
      return std::atoi(line->c_str() + at + std::strlen("metrics=127.0.0.1:"));
    }
  }

  std::string Get(int port, const std::string& path, int* status = nullptr) {
    httplib::Client http("127.0.0.1", port);
    auto res = http.Get(path);
    if (!res) return "";
    if (status != nullptr) *status = res->status;
    return res->body;
  }

  // The scrape once it holds `needle` (at most 20 s). The monitor announces no event when a
  // sampling tick has run, so its metrics are polled.
  std::string ScrapeUntil(int port, const std::string& needle) {
    std::string body;
    bool found = testing::PollUntil(
        [&] {
          body = Get(port, "/metrics");
          return body.find(needle) != std::string::npos;
        },
        20000, 20000);
    EXPECT_TRUE(found) << "no '" << needle << "' in:\n" << body << "\nlog:\n" << log_;
    return body;
  }

  std::string Series(const std::string& name, const std::string& pod, const std::string& value) {
    return name + "{namespace=\"default\",pod=\"" + pod +
           "\",container=\"main\",vdevice_index=\"0\",device_uuid=\"" + gpu0_ +
           "\",zone=\"vGPU\"} " + value + "\n";
  }

  TempDir dir_{"hami-monitor-it"};
  std::string state_, kubeconfig_, hook_, gpu0_, log_;
  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::vector<std::unique_ptr<region::Region>> regions_;
  std::unique_ptr<testing::Subprocess> monitor_, second_;
};

TEST_F(MonitorIntegration, ExportsRegionValuesWithPodLabelsAndPassesPromtool) {
  const std::string uid = CreatePod("alpha");
  MakeRegion(uid, 3000 * kMiB, 100 * kMiB);
  const int port = StartMonitor(monitor_);
  ASSERT_GT(port, 0) << log_;
  // Every line of its log names it, whatever part of it wrote the line.
  std::istringstream lines(log_);
  int logged = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("ts=", 0) != 0) continue;
    ++logged;
    EXPECT_NE(line.find(" component=hami-monitor pid="), std::string::npos) << line;
  }
  EXPECT_GT(logged, 0) << log_;
  ScrapeUntil(port, Series("hami_vgpu_memory_used_bytes", "alpha", "104857600"));
  // The first tick's NVML sample lands after its scan: wait for the host series too.
  const std::string body =
      ScrapeUntil(port, "hami_host_gpu_memory_total_bytes{node=\"node-1\",device_index=\"1\"");
  EXPECT_NE(body.find(Series("hami_vgpu_memory_used_bytes", "alpha", "104857600")),
            std::string::npos);
  EXPECT_NE(body.find(Series("hami_vgpu_memory_limit_bytes", "alpha", "3145728000")),
            std::string::npos);
  EXPECT_NE(body.find(Series("hami_vgpu_memory_buffer_bytes", "alpha", "104857600")),
            std::string::npos);
  EXPECT_NE(body.find(Series("hami_vgpu_core_limit_ratio", "alpha", "0.3")), std::string::npos);
  EXPECT_NE(body.find("hami_host_gpu_memory_total_bytes{node=\"node-1\",device_index=\"1\""),
            std::string::npos);
  EXPECT_NE(body.find("hami_container_processes{namespace=\"default\",pod=\"alpha\",container="
                      "\"main\",zone=\"vGPU\"} 1"),
            std::string::npos);
  EXPECT_NE(body.find("hami_monitor_cleanup_enabled{zone=\"vGPU\"} 1"), std::string::npos);
  EXPECT_NE(body.find("hami_monitor_scrape_duration_seconds_count{zone=\"vGPU\"}"),
            std::string::npos);
  int status = 0;
  EXPECT_EQ(Get(port, "/healthz", &status), "ok\n");
  EXPECT_TRUE(testing::PollUntil(
      [&] {
        Get(port, "/readyz", &status);
        return status == 200;
      },
      20000, 20000));

  if (access("/usr/bin/promtool", X_OK) != 0 &&
      std::system("command -v promtool >/dev/null") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus; scripts/setup.sh installs "
                    "it)";
  }
  const std::string file = dir_.path() + "/metrics.txt";
  std::ofstream(file) << Get(port, "/metrics");
  const std::string cmd = "promtool check metrics < " + file + " > " + dir_.path() + "/out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out(dir_.path() + "/out");
  std::string report((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(rc)) << report;
  EXPECT_EQ(WEXITSTATUS(rc), 0) << report;
}

TEST_F(MonitorIntegration, ACorruptRegionIsReportedAndSkippedWhileOthersContinue) {
  const std::string good = CreatePod("good");
  const std::string bad = CreatePod("bad");
  MakeRegion(good, 2000 * kMiB, 50 * kMiB);
  const std::string bad_file = ContainerDir(bad) + "/usage.cache";
  std::ofstream(bad_file) << std::string(20000, 'z');
  const int port = StartMonitor(monitor_);
  ASSERT_GT(port, 0) << log_;
  const std::string body =
      ScrapeUntil(port, Series("hami_vgpu_memory_used_bytes", "good", "52428800"));
  EXPECT_NE(body.find("hami_monitor_region_errors{path=\"" + bad_file +
                      "\",reason=\"corrupt\",zone=\"vGPU\"} 1"),
            std::string::npos)
      << body;
  EXPECT_EQ(body.find("pod=\"bad\""), std::string::npos) << body;
  // The refusal is logged once, naming the file (maybe before the start line).
  auto refused = [&] { return log_.find("event=region_refused path=" + bad_file); };
  while (refused() == std::string::npos) {
    auto line = monitor_->ReadLine(5000);
    if (!line) break;
    log_ += *line + "\n";
  }
  EXPECT_NE(refused(), std::string::npos) << log_;
}

TEST_F(MonitorIntegration, KeepsServingLastKnownMetricsWhileTheApiServerIsDown) {
  const std::string uid = CreatePod("steady");
  MakeRegion(uid, 1000 * kMiB, 10 * kMiB);
  const int port = StartMonitor(monitor_);
  ASSERT_GT(port, 0) << log_;
  ScrapeUntil(port, Series("hami_vgpu_memory_used_bytes", "steady", "10485760"));
  api_->Stop();
  // The region changes while the API server is away: the new value comes with the old labels.
  ASSERT_EQ(regions_[0]->Reserve(0, 5 * kMiB, region::UsageKind::kData), region::Admission::kOk);
  const std::string body =
      ScrapeUntil(port, Series("hami_vgpu_memory_used_bytes", "steady", "15728640"));
  EXPECT_NE(body.find("hami_monitor_pods_synced{zone=\"vGPU\"} 1"), std::string::npos);
  // A cleanup pass ran while the server was down: its list failed, and nothing was removed.
  ScrapeUntil(port, "hami_monitor_cleanup_list_failures_total{zone=\"vGPU\"} 1\n");
  struct stat st;
  EXPECT_EQ(stat((hook_ + "/vgpu/containers/" + uid + "_main").c_str(), &st), 0);
}

TEST_F(MonitorIntegration, AProcessWithoutRegionIsUnaccountedAndItsPodWarned) {
  const std::string uid = CreatePod("sneaky");
  const std::string dir = ContainerDir(uid);
  // A driver-API program without libvgpu.so: memory on GPU 0 that no region accounts for.
  testing::Subprocess worker(
      {testing::TestProgram("sim_worker"), "context", "alloc", "268435456", "hold"},
      {{"HAMI_SIM_STATE", state_}, {"HAMI_SIM_PROFILE", kProfile}});
  ASSERT_TRUE(worker.WaitForLine("holding", 20000).has_value());
  // Its mount table, as a container's would show the bound directory (a fake /proc: the
  // worker runs on the host here).
  const std::string proc = dir_.path() + "/proc";
  const std::string pid = std::to_string(worker.pid());
  ASSERT_EQ(mkdir(proc.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((proc + "/" + pid).c_str(), 0755), 0);
  std::ofstream(proc + "/" + pid + "/mountinfo")
      << "35 22 8:1 " << dir << " /usr/local/vgpu rw,relatime - ext4 /dev/sda1 rw\n";
  const int port = StartMonitor(monitor_, {"--proc-root", proc});
  ASSERT_GT(port, 0) << log_;
  const std::string series =
      "hami_container_unaccounted_memory_bytes{namespace=\"default\",pod="
      "\"sneaky\",container=\"main\",device_uuid=\"" +
      gpu0_ + "\",pid=\"" + pid +
      "\",reason=\"no_region\",attribution=\"mountinfo\",zone=\"vGPU\"} ";
  const std::string body = ScrapeUntil(port, series);
  // The context (500 MiB on this profile) and the allocation.
  EXPECT_NE(body.find(series + std::to_string((500 + 256) * kMiB) + "\n"), std::string::npos)
      << body;
  // One Warning event on the pod (polled: the recorder sends it after the tick).
  bool warned = testing::PollUntil(
      [&] {
        auto events = client_->List(kube::kEvents, "default", {});
        if (!events.ok()) return false;
        for (const auto& e : (*events)["items"]) {
          if (e.value("reason", "") == "UnaccountedGPUMemory" &&
              e["involvedObject"].value("uid", "") == uid && e.value("type", "") == "Warning") {
            return e.value("count", 0) == 1;
          }
        }
        return false;
      },
      20000, 20000);
  auto events = client_->List(kube::kEvents, "default", {});
  EXPECT_TRUE(warned) << log_ << (events.ok() ? events->dump() : events.error().message());
  worker.CloseStdin();
  EXPECT_EQ(worker.Wait(20000), 0);
}

TEST_F(MonitorIntegration, AProcessUnderLibvgpuIsAccountedToTheByteAndNotUnaccounted) {
  const std::string uid = CreatePod("real");
  const std::string dir = ContainerDir(uid);
  // A CUDA program under libvgpu.so with its region in the container's directory, as the
  // device plugin's mounts arrange in a pod.
  testing::Subprocess worker(
      {testing::TestProgram("sim_worker"), "context", "alloc", "268435456", "hold"},
      {{"HAMI_SIM_STATE", state_},
       {"HAMI_SIM_PROFILE", kProfile},
       {"LD_PRELOAD", std::string(HAMI_BIN_DIR) + "/../lib/libvgpu.so"},
       {"LD_LIBRARY_PATH", HAMI_SIM_LIB_DIR},
       {"CUDA_DEVICE_MEMORY_SHARED_CACHE", dir + "/usage.cache"},
       {"CUDA_DEVICE_MEMORY_LIMIT", "3g"}});
  ASSERT_TRUE(worker.WaitForLine("holding", 20000).has_value());
  const int port = StartMonitor(monitor_);
  ASSERT_GT(port, 0) << log_;
  // NVML shows the process holding its context (500 MiB on this profile) and the allocation;
  // the region accounts for exactly that.
  const std::string total = std::to_string((500 + 256) * kMiB);
  const std::string body =
      ScrapeUntil(port, Series("hami_container_device_memory_bytes", "real", total));
  EXPECT_NE(body.find(Series("hami_vgpu_memory_used_bytes", "real", total)), std::string::npos);
  EXPECT_NE(body.find(Series("hami_vgpu_memory_context_bytes", "real", std::to_string(500 * kMiB))),
            std::string::npos);
  EXPECT_NE(body.find(Series("hami_vgpu_memory_buffer_bytes", "real", std::to_string(256 * kMiB))),
            std::string::npos);
  EXPECT_NE(body.find(Series("hami_vgpu_memory_limit_bytes", "real", std::to_string(3072 * kMiB))),
            std::string::npos);
  const std::string pid = std::to_string(worker.pid());
  EXPECT_NE(
      body.find("hami_container_process_identity{namespace=\"default\",pod=\"real\","
                "container=\"main\",pid=\"" +
                pid + "\",host_pid=\"" + pid + "\",source=\"same-namespace\",zone=\"vGPU\"} 1"),
      std::string::npos)
      << body;
  EXPECT_EQ(body.find("pid=\"" + pid + "\",reason="), std::string::npos) << body;
  worker.CloseStdin();
  EXPECT_EQ(worker.Wait(20000), 0);
}

TEST_F(MonitorIntegration, AClaimsRegionIsLabelledWithItsFirstUserAndClaimAndNeverCleanedUp) {
  // Two pods share the ResourceClaim default/shared-gpu, as the DRA driver prepared it: the
  // directory <claimUID>_claim with its region, the limits file and the claim record.
  for (const char* name : {"user-a", "user-b"}) {
    nlohmann::json pod = {
        {"metadata", {{"name", name}, {"namespace", "default"}}},
        {"spec",
         {{"nodeName", kNode},
          {"resourceClaims", {{{"name", "gpu"}, {"resourceClaimName", "shared-gpu"}}}},
          {"containers",
           {{{"name", "main"}, {"image", "x"}, {"resources", {{"claims", {{{"name", "gpu"}}}}}}},
            {{"name", "log"}, {"image", "x"}}}}}}};
    auto made = client_->Create(kube::kPods, "default", pod);
    ASSERT_TRUE(made.ok()) << made.error().message();
  }
  const std::string claim_dir = hook_ + "/vgpu/containers/claim-uid-1_claim";
  ASSERT_EQ(mkdir(claim_dir.c_str(), 0777), 0);
  MakeRegionIn(claim_dir, 3000 * kMiB, 200 * kMiB);
  std::ofstream(claim_dir + ".limits") << "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n";
  std::ofstream(claim_dir + ".claim")
      << R"({"name":"shared-gpu","namespace":"default","uid":"claim-uid-1"})"
      << "\n";

  const int port = StartMonitor(monitor_);
  ASSERT_GT(port, 0) << log_;
  // One series per claim, with the pod and container of its first user (the oldest pod,
  // user-a), and one info series per container using it.
  const std::string labels =
      "namespace=\"default\",pod=\"user-a\",container=\"main\",claim=\"shared-gpu\","
      "claim_uid=\"claim-uid-1\"";
  std::string body = ScrapeUntil(
      port, "hami_vgpu_memory_used_bytes{" + labels + ",vdevice_index=\"0\",device_uuid=\"" +
                gpu0_ + "\",zone=\"vGPU\"} " + std::to_string(200 * kMiB) + "\n");
  EXPECT_NE(
      body.find("hami_vgpu_memory_limit_bytes{" + labels + ",vdevice_index=\"0\",device_uuid=\"" +
                gpu0_ + "\",zone=\"vGPU\"} " + std::to_string(3000 * kMiB) + "\n"),
      std::string::npos)
      << body;
  EXPECT_NE(body.find("hami_claim_container_info{" + labels + ",zone=\"vGPU\"} 1\n"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("hami_claim_container_info{namespace=\"default\",pod=\"user-b\","
                      "container=\"main\",claim=\"shared-gpu\",claim_uid=\"claim-uid-1\","
                      "zone=\"vGPU\"} 1\n"),
            std::string::npos)
      << body;
  EXPECT_EQ(body.find("container=\"log\""), std::string::npos) << body;
  EXPECT_NE(body.find("hami_monitor_containers{state=\"with_pod\",zone=\"vGPU\"} 1\n"),
            std::string::npos)
      << body;
  if (auto problems = PromtoolProblems(body)) {
    EXPECT_EQ(*problems, "");
  }

  // The claim's UID is no pod's, yet cleanup passes (every 2 s here) leave its files alone: the
  // DRA driver removes them at NodeUnprepareResources.
  // Nor is it a candidate kept for its attached process (this one holds the region): it is
  // not judged at all.
  body = ScrapeUntil(port, "hami_monitor_cleanup_passes_total{zone=\"vGPU\"} 4\n");
  for (const char* zero : {"hami_monitor_cleanup_candidates", "hami_monitor_cleanup_kept_attached",
                           "hami_monitor_cleanup_removed_total"}) {
    EXPECT_NE(body.find(std::string(zero) + "{zone=\"vGPU\"} 0\n"), std::string::npos)
        << zero << " in:\n"
        << body;
  }
  struct stat st {};
  EXPECT_EQ(stat((claim_dir + "/usage.cache").c_str(), &st), 0);
  EXPECT_EQ(stat((claim_dir + ".limits").c_str(), &st), 0);
  EXPECT_EQ(stat((claim_dir + ".claim").c_str(), &st), 0);
}

TEST_F(MonitorIntegration, ASecondMonitorOnTheNodeServesMetricsWithoutCleanup) {
  const int first = StartMonitor(monitor_);
  ASSERT_GT(first, 0) << log_;
  const int second = StartMonitor(second_);
  ASSERT_GT(second, 0) << log_;
  EXPECT_NE(log_.find("event=cleanup_disabled reason=second_monitor"), std::string::npos) << log_;
  ScrapeUntil(second, "hami_monitor_cleanup_enabled{zone=\"vGPU\"} 0");
  ScrapeUntil(first, "hami_monitor_cleanup_enabled{zone=\"vGPU\"} 1");
}

}  // namespace
}  // namespace hami::monitor
