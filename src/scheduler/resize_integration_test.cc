// Resizing a running pod through hami-scheduler against the simulated API server: the request
// annotation in, the decision out (status annotation, allocation, event), bad requests refused
// with the share untouched, and an API server that fails every request leaving nothing
// half-written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/resize.h"
#include "kube/resource.h"
#include "scheduler/daemon.h"
#include "scheduler/test_cluster.h"
#include "sim/kube/api_server.h"
#include "support/kube_control.h"

namespace hami::scheduler {
namespace {

using nlohmann::json;
using testing::GpuNode;
using testing::GpuNodeSpec;
using testing::GpuPodSpec;
using testing::GpuUuid;
using ::testing::HasSubstr;
using testing::RunningGpuPod;
using SteadyClock = std::chrono::steady_clock;
using kube::control_test::WaitUntil;

class ResizeIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(server.ok()) << server.error().message();
    api_ = std::move(server).value();
    kube::ClientOptions co;
    co.qps = 0;
    auto c = kube::Client::Create(Config(), co);
    ASSERT_TRUE(c.ok());
    client_ = std::move(c).value();
    GpuNodeSpec n{"n1", 1, 16384};
    ASSERT_TRUE(api_->CreateObject(kube::kNodes, GpuNode(n)).ok());
    // "p" holds 4000 MiB and 30 cores of the node's one GPU, "other" 8000 MiB and 50 cores.
    ASSERT_TRUE(
        api_->CreateObject(kube::kPods, RunningGpuPod({"other", "default", 1, 8000, 50}, "n1",
                                                      {{{GpuUuid("n1", 0), "NVIDIA", 8000, 50}}}))
            .ok());
    Start(RunningGpuPod({"p", "default", 1, 4000, 30}, "n1",
                        {{{GpuUuid("n1", 0), "NVIDIA", 4000, 30}}}));
  }

  void TearDown() override {
    daemon_.reset();
    client_.reset();
    if (api_) api_->Stop();
  }

  void Start(const json& pod) {
    ASSERT_TRUE(api_->CreateObject(kube::kPods, pod).ok());
    DaemonOptions o;
    o.server.http_bind = "127.0.0.1:0";
    o.server.metrics_bind = "127.0.0.1:0";
    o.handshake_enabled = false;
    o.client.qps = 0;
    o.resize.retry = std::chrono::milliseconds(50);
    o.scheduler.node_lock_wait = std::chrono::milliseconds(300);  // a held node: retried soon
    auto d = Daemon::Start(Config(), std::move(o));
    ASSERT_TRUE(d.ok()) << d.error().message();
    daemon_ = std::move(d).value();
    ASSERT_TRUE(daemon_->WaitReady(SteadyClock::now() + std::chrono::seconds(20)));
  }

  kube::Config Config() const {
    kube::Config c;
    c.server = api_->url();
    c.source = "test";
    return c;
  }

  void Annotate(const std::string& value) {
    json patch = {{"metadata", {{"annotations", {{std::string(kube::kResizeAnnotation), value}}}}}};
    auto r = client_->Patch(kube::kPods, "default", "p", kube::PatchType::kMerge, patch);
    ASSERT_TRUE(r.ok()) << r.error().message();
  }

  std::string PodAnnotation(std::string_view key) {
    auto p = api_->GetObject(kube::kPods, "default", "p");
    if (!p.ok()) return "";
    const json& a = (*p)["metadata"]["annotations"];
    auto it = a.find(std::string(key));
    return it != a.end() && it->is_string() ? it->get<std::string>() : "";
  }

  // The status that answers `request`, once there is one (bounded wait: the API server's store
  // has no change event a test can wait on).
  std::optional<kube::ResizeStatus> StatusFor(const std::string& request) {
    std::optional<kube::ResizeStatus> got;
    WaitUntil(
        [&] {
          auto s = kube::DecodeResizeStatus(PodAnnotation(kube::kResizeStatusAnnotation));
          if (s.ok() && s->request == request) got = *s;
          return got.has_value();
        },
        std::chrono::seconds(20));
    return got;
  }

  bool HasEvent(const std::string& reason, const std::string& contains) {
    bool found = false;
    WaitUntil(
        [&] {
          for (const json& e : api_->ListObjects(kube::kEvents)) {
            found |= e.value("reason", "") == reason &&
                     e["involvedObject"].value("name", "") == "p" &&
                     e.value("message", "").find(contains) != std::string::npos;
          }
          return found;
        },
        std::chrono::seconds(20));
    return found;
  }

  std::string Allocation(int32_t mem, int32_t cores) {
    return *kube::EncodePodDevices({{{GpuUuid("n1", 0), "NVIDIA", mem, cores}}},
                                   kube::kDevicesAllocatedAnnotation);
  }

  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(ResizeIntegration, AGrowthThatFitsIsAcceptedOnTheSameGpuAndRecorded) {
  Annotate("main:gpumem=8000,gpucores=50");
  auto status = StatusFor("main:gpumem=8000,gpucores=50");
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->phase, kube::ResizePhase::kAccepted) << status->reason;
  EXPECT_EQ(status->previous, Allocation(4000, 30));
  EXPECT_EQ(PodAnnotation(kube::kDevicesAllocatedAnnotation), Allocation(8000, 50));
  EXPECT_TRUE(HasEvent("ResizeAccepted", "4000 -> 8000 MiB, 30 -> 50 cores"));
  // The scheduler's view counts the new share: the GPU is now full.
  EXPECT_TRUE(daemon_->scheduler().state().WaitFor(
      [&] {
        for (const auto& g : daemon_->scheduler().state().Gpus()) {
          if (g.device.id == GpuUuid("n1", 0)) return g.used.mem_mib == 16000;
        }
        return false;
      },
      SteadyClock::now() + std::chrono::seconds(10)));
}

// A resize is decided and written with the pod's node held as a bind holds it: while another
// pod's bind holds the node lock nothing is decided (a bind could be counting the room the
// growth would take); once the lock is released the request is decided, and the resize leaves
// no lock of its own behind.
TEST_F(ResizeIntegration, IsDecidedUnderTheNodeLockAndLeavesNoneBehind) {
  // "binder" is in the middle of a bind to n1: bound there, annotated for it, allocating.
  json binder = {{"apiVersion", "v1"},
                 {"kind", "Pod"},
                 {"metadata",
                  {{"name", "binder"},
                   {"namespace", "default"},
                   {"annotations",
                    {{std::string(kube::kVgpuNodeAnnotation), "n1"},
                     {std::string(kube::kBindPhaseAnnotation), "allocating"}}}}},
                 {"spec",
                  {{"nodeName", "n1"},
                   {"containers", json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
  ASSERT_TRUE(api_->CreateObject(kube::kPods, binder).ok());
  auto lock = kube::EncodeNodeLock({std::chrono::system_clock::now(), "default", "binder"});
  ASSERT_TRUE(lock.ok());
  auto set_lock = [&](json value) {
    json patch = {
        {"metadata", {{"annotations", {{std::string(kube::kNodeLockAnnotation), value}}}}}};
    auto r = client_->Patch(kube::kNodes, "", "n1", kube::PatchType::kMerge, patch);
    ASSERT_TRUE(r.ok()) << r.error().message();
  };
  set_lock(*lock);

  const uint64_t tried_before = daemon_->resize().stats().retries;
  Annotate("main:gpumem=8000,gpucores=50");
  // Two passes that found the node held, and no answer.
  EXPECT_TRUE(WaitUntil([&] { return daemon_->resize().stats().retries >= tried_before + 2; },
                        std::chrono::seconds(20)));
  EXPECT_EQ(PodAnnotation(kube::kResizeStatusAnnotation), "");
  EXPECT_EQ(PodAnnotation(kube::kDevicesAllocatedAnnotation), Allocation(4000, 30));

  set_lock(nullptr);  // the bind is done
  auto status = StatusFor("main:gpumem=8000,gpucores=50");
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->phase, kube::ResizePhase::kAccepted) << status->reason;
  // Released right after the write that answered (the answer can be read a moment before).
  json annotations;
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto node = api_->GetObject(kube::kNodes, "", "n1");
        if (!node.ok()) return false;
        annotations = (*node)["metadata"].value("annotations", json::object());
        return !annotations.contains(std::string(kube::kNodeLockAnnotation));
      },
      std::chrono::seconds(20)))
      << annotations.dump();
}

class RefusedResize : public ResizeIntegration,
                      public ::testing::WithParamInterface<std::pair<const char*, const char*>> {};

TEST_P(RefusedResize, IsAWarningEventNamingWhatIsWrongAndTheShareIsUntouched) {
  const std::string request = GetParam().first;
  Annotate(request);
  auto status = StatusFor(request);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->phase, kube::ResizePhase::kRefused);
  EXPECT_THAT(status->reason, HasSubstr(GetParam().second));
  EXPECT_EQ(PodAnnotation(kube::kDevicesAllocatedAnnotation), Allocation(4000, 30));
  EXPECT_TRUE(HasEvent("ResizeRefused", GetParam().second));
}

INSTANTIATE_TEST_SUITE_P(
    BadInput, RefusedResize,
    ::testing::Values(std::pair{"main:gpumem=4Gi", "not a whole number of MiB"},
                      std::pair{"main=4096", "no ':'"},
                      std::pair{"sidecar:gpumem=100", "the pod has no container \"sidecar\""},
                      std::pair{"main:gpumem=9000", "at most 8384"},
                      std::pair{"main:gpucores=100", "take it exclusively"}));

// With every request failing, the controller reads nothing and writes nothing: the pod keeps its
// allocation and carries no status; when the server answers again, the request is decided.
TEST_F(ResizeIntegration, AnApiServerThatFailsEveryRequestLeavesNothingHalfWritten) {
  daemon_.reset();
  sim::kube::Faults down;
  down.rate_500 = 1;
  json pod =
      RunningGpuPod({"q", "default", 1, 1000, 0}, "n1", {{{GpuUuid("n1", 0), "NVIDIA", 1000, 0}}});
  pod["metadata"]["annotations"][std::string(kube::kResizeAnnotation)] = "main:gpumem=2000";
  ASSERT_TRUE(api_->CreateObject(kube::kPods, pod).ok());
  // Started while the server fails: its informers cannot sync, and nothing is decided.
  DaemonOptions o;
  o.server.http_bind = "127.0.0.1:0";
  o.server.metrics_bind = "127.0.0.1:0";
  o.handshake_enabled = false;
  o.client.qps = 0;
  o.resize.retry = std::chrono::milliseconds(50);
  api_->SetFaults(down);
  auto d = Daemon::Start(Config(), std::move(o));
  ASSERT_TRUE(d.ok()) << d.error().message();
  daemon_ = std::move(d).value();
  sim::kube::Faults up;
  // The informers' first list fails too until the faults are lifted; the controller is then
  // handed the pod at once. Lift them only after the daemon has tried and failed.
  EXPECT_FALSE(daemon_->WaitReady(SteadyClock::now() + std::chrono::milliseconds(300)));
  auto q = api_->GetObject(kube::kPods, "default", "q");
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(
      (*q)["metadata"]["annotations"].contains(std::string(kube::kResizeStatusAnnotation)));
  api_->SetFaults(up);
  ASSERT_TRUE(daemon_->WaitReady(SteadyClock::now() + std::chrono::seconds(20)));
  bool decided = false;
  WaitUntil(
      [&] {
        auto now = api_->GetObject(kube::kPods, "default", "q");
        decided = now.ok() && (*now)["metadata"]["annotations"].contains(
                                  std::string(kube::kResizeStatusAnnotation));
        return decided;
      },
      std::chrono::seconds(20));
  ASSERT_TRUE(decided);
  auto after = api_->GetObject(kube::kPods, "default", "q");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)["metadata"]["annotations"][std::string(kube::kDevicesAllocatedAnnotation)],
            *kube::EncodePodDevices({{{GpuUuid("n1", 0), "NVIDIA", 2000, 0}}},
                                    kube::kDevicesAllocatedAnnotation));
}

}  // namespace
}  // namespace hami::scheduler
