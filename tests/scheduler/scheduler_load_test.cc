// Correctness under load, the whole system: 2,000 GPU pods submitted at once against 100 nodes,
// scheduled by the kube-scheduler stand-in through a real hami-scheduler process (its HTTP
// verbs, as kube-scheduler calls them), with the device plugin's side of the bind flow played
// by each node's real Allocator, asked as a kubelet asks (plugin::KubeletDriver). The scheduler
// is killed (SIGKILL) mid-burst and started again on the same port. At the end, read from the
// pods' annotations alone: no GPU holds more memory, cores or slots than it has, every pod that
// fits is bound, and every other pod is unschedulable with a reason; and every bound pod was
// allocated by its node's plugin (bind-phase success, its limits file published with its
// share), none failed.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/sanitizers.h"
#include "common/temp_dir.h"
#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "plugin/kubelet_driver.h"
#include "scheduler/test_cluster.h"
#include "sim/kube/api_server.h"
#include "sim/kube/scheduler_standin.h"
#include "support/subprocess.h"

namespace hami {
namespace {

using nlohmann::json;

#if HAMI_TSAN
// Under ThreadSanitizer every process here runs several times slower: a quarter of the
// cluster and of the burst, the same shape (a fifth of the pods never fit).
constexpr int kNodes = 25;
constexpr int kPods = 500;
#else
constexpr int kNodes = 100;
constexpr int kPods = 2000;
#endif
constexpr int kGpusPerNode = 4;
constexpr int32_t kGpuMemMib = 16384;
constexpr int32_t kPodMemMib = 4096;  // four per GPU by memory, and by cores
constexpr int32_t kPodCores = 25;
constexpr int kFitting = kNodes * kGpusPerNode * 4;  // 1,600

// A running hami-scheduler; the first start picks a port, a restart reuses it.
class SchedulerProcess {
 public:
  SchedulerProcess(const std::string& kubeconfig, int port) {
    proc_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{std::string(HAMI_BIN_DIR) + "/hami-scheduler", "--kubeconfig",
                                 kubeconfig, "--http-bind", "127.0.0.1:" + std::to_string(port),
                                 "--metrics-bind-address", "", "--kube-qps", "0",
                                 "--node-lock-wait", "2s", "--handshake-interval", "1h"},
        std::map<std::string, std::string>{});
    auto line = proc_->WaitForLine("hami-scheduler: serving on port ", 20000);
    if (line)
      port_ = std::stoi(line->substr(std::string("hami-scheduler: serving on port ").size()));
  }
  int port() const { return port_; }
  void Kill() {
    proc_->Kill(SIGKILL);
    proc_->Wait(10000);
  }

 private:
  std::unique_ptr<testing::Subprocess> proc_;
  int port_ = 0;
};

bool Scheduled(const json& pod) { return !pod["spec"].value("nodeName", "").empty(); }

// The PodScheduled=False message the stand-in writes, or "".
std::string UnschedulableMessage(const json& pod) {
  auto status = pod.find("status");
  if (status == pod.end() || !status->contains("conditions")) return "";
  for (const json& c : (*status)["conditions"]) {
    if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False") {
      return c.value("message", "");
    }
  }
  return "";
}

TEST(SchedulerLoad, TwoThousandPodsOnAHundredNodesNeverOverAllocateThroughAKill) {
  auto started = sim::kube::ApiServer::Start({});
  ASSERT_TRUE(started.ok()) << started.error().message();
  std::unique_ptr<sim::kube::ApiServer> api = std::move(started).value();
  TempDir dir("hami-sched-load");
  const std::string kubeconfig = dir.File("kubeconfig");
  ASSERT_TRUE(api->WriteKubeconfig(kubeconfig).ok());
  for (int n = 0; n < kNodes; ++n) {
    scheduler::testing::GpuNodeSpec spec;
    spec.name = "node-" + std::to_string(n);
    spec.gpus = kGpusPerNode;
    spec.mem_mib = kGpuMemMib;
    ASSERT_TRUE(api->CreateObject(kube::kNodes, scheduler::testing::GpuNode(spec)).ok());
  }

  auto first = std::make_unique<SchedulerProcess>(kubeconfig, 0);
  const int port = first->port();
  ASSERT_GT(port, 0) << "hami-scheduler did not start";

  kube::Config config;
  config.server = api->url();
  config.source = "load test";
  kube::ClientOptions co;
  co.qps = 0;
  auto client = kube::Client::Create(config, co);
  ASSERT_TRUE(client.ok());
  plugin::KubeletDriver plugin(**client, 4);
  plugin.Start();

  auto sched_config = sim::kube::ParseSchedulerConfig(
      scheduler::testing::ExtenderSchedulerConfig(port), "load test");
  ASSERT_TRUE(sched_config.ok()) << sched_config.error().message();
  sim::kube::StandinOptions so;
  so.parallelism = 16;
  so.initial_backoff = std::chrono::milliseconds(100);
  so.max_backoff = std::chrono::milliseconds(1000);
  so.seed = 7;
  auto standin = sim::kube::SchedulerStandin::Create(**client, *sched_config, so);
  ASSERT_TRUE(standin.ok()) << standin.error().message();
  std::atomic<int> scheduled{0};
  (*standin)->set_observer([&](const sim::kube::ScheduleAttempt& a) {
    if (a.outcome == sim::kube::ScheduleAttempt::Outcome::kScheduled) scheduled.fetch_add(1);
  });

  // All at once.
  for (int i = 0; i < kPods; ++i) {
    scheduler::testing::GpuPodSpec spec;
    spec.name = "pod-" + std::to_string(i);
    spec.mem_mib = kPodMemMib;
    spec.cores = kPodCores;
    ASSERT_TRUE(api->CreateObject(kube::kPods, scheduler::testing::GpuPod(spec)).ok());
  }
  (*standin)->Start();

  // Kill the scheduler mid-burst, start another on the same port.
  // (Polled: the count moves with every bind the stand-in makes; nothing announces a third.)
  ASSERT_TRUE(testing::PollUntil([&] { return scheduled.load() >= kFitting / 3; }, 300000, 20000))
      << "the burst did not progress";
  first->Kill();
  SchedulerProcess second(kubeconfig, port);
  ASSERT_EQ(second.port(), port) << "the restarted scheduler did not take the port";

  // The end: every fitting pod bound, every other one marked unschedulable.
  auto done = [&] {
    int bound = 0, unschedulable = 0;
    for (const json& pod : api->ListObjects(kube::kPods)) {
      if (Scheduled(pod)) {
        ++bound;
      } else if (UnschedulableMessage(pod).find("short of memory") != std::string::npos) {
        ++unschedulable;
      }
    }
    return bound == kFitting && unschedulable == kPods - kFitting &&
           plugin.allocated() + plugin.failures() >= uint64_t(kFitting);
  };
  // (Polled: the API server's store is the only place the outcome shows.) Bounded well inside
  // CTest's timeout, so that a run that does not finish says where it stands.
  const bool finished = testing::PollUntil(done, 240000, 100000);
  if (!finished) {
    int bound = 0;
    std::map<std::string, int> pending;  // by the start of the last message
    for (const json& pod : api->ListObjects(kube::kPods)) {
      if (Scheduled(pod)) {
        ++bound;
      } else {
        ++pending[UnschedulableMessage(pod).substr(0, 160)];
      }
    }
    std::string report;
    for (const auto& [msg, n] : pending) report += "\n  " + std::to_string(n) + " x '" + msg + "'";
    for (const json& node : api->ListObjects(kube::kNodes)) {
      const json& ann = node["metadata"]["annotations"];
      if (ann.contains("hami.io/mutex.lock")) {
        report += "\n  lock on " + node["metadata"].value("name", "") + ": " +
                  ann.value("hami.io/mutex.lock", "");
      }
    }
    ADD_FAILURE() << bound << " of " << kFitting
                  << " bound; pending pods by last message:" << report
                  << "\nkubelet driver: " << plugin.allocated() << " allocated, "
                  << plugin.failures() << " failures";
  }
  // The outcome as it stands now (stopping the stand-in may still touch a pod's condition).
  const std::vector<json> pods = api->ListObjects(kube::kPods);
  (*standin)->Stop();
  plugin.Stop();

  // Checked from the annotations alone.
  struct Held {
    int64_t mem = 0, cores = 0, slots = 0;
  };
  std::map<std::string, Held> held;
  int bound = 0;
  std::map<std::string, int> reasons;
  for (const json& pod : pods) {
    const std::string name = pod["metadata"].value("name", "");
    if (!Scheduled(pod)) {
      const std::string msg = UnschedulableMessage(pod);
      EXPECT_FALSE(msg.empty()) << name << " is neither bound nor unschedulable";
      if (!msg.empty())
        ++reasons[msg.find("short of memory") != std::string::npos ? "short of memory" : msg];
      continue;
    }
    ++bound;
    const json& ann = pod["metadata"]["annotations"];
    const std::string node = pod["spec"]["nodeName"];
    EXPECT_EQ(ann.value("hami.io/vgpu-node", ""), node) << name;
    auto devices = kube::DecodePodDevices(ann.value("hami.io/vgpu-devices-allocated", ""),
                                          kube::kDevicesAllocatedAnnotation);
    ASSERT_TRUE(devices.ok()) << name << ": " << devices.error().message();
    ASSERT_EQ(devices->size(), 1u) << name;
    ASSERT_EQ((*devices)[0].size(), 1u) << name;
    const kube::ContainerDevice& d = (*devices)[0][0];
    EXPECT_EQ(d.uuid.rfind("GPU-" + node + "-", 0), 0u) << name << " holds " << d.uuid;
    Held& h = held[d.uuid];
    h.mem += d.mem_mib;
    h.cores += d.cores;
    h.slots += 1;
    // The plugin's side: the pod was allocated on its node, with its share.
    EXPECT_EQ(ann.value("hami.io/bind-phase", ""), "success") << name;
    EXPECT_EQ(ann.value("hami.io/vgpu-devices-to-allocate", ""), ";") << name;
    const std::string uid = pod["metadata"].value("uid", "");
    std::ifstream file(plugin.HookPath(node) + "/vgpu/containers/" + uid + "_main.limits");
    const std::string limits((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
    EXPECT_NE(limits.find("CUDA_DEVICE_MEMORY_LIMIT_0=" + std::to_string(kPodMemMib) + "m\n"),
              std::string::npos)
        << name << "'s limits file: '" << limits << "'";
    EXPECT_NE(limits.find("CUDA_DEVICE_SM_LIMIT=" + std::to_string(kPodCores) + "\n"),
              std::string::npos)
        << name << "'s limits file: '" << limits << "'";
  }
  EXPECT_EQ(bound, kFitting);
  std::string messages;
  for (const std::string& m : plugin.failure_messages()) messages += "\n  " + m;
  EXPECT_EQ(plugin.allocated(), uint64_t(kFitting)) << messages;
  EXPECT_EQ(plugin.failures(), 0u) << messages;
  for (const auto& [uuid, h] : held) {
    EXPECT_LE(h.mem, kGpuMemMib) << uuid;
    EXPECT_LE(h.cores, 100) << uuid;
    EXPECT_LE(h.slots, 10) << uuid;
  }
  EXPECT_EQ(held.size(), size_t(kNodes * kGpusPerNode));
  for (const auto& [reason, count] : reasons) {
    EXPECT_EQ(reason, "short of memory") << count << " pods: " << reason;
  }
}

}  // namespace
}  // namespace hami
