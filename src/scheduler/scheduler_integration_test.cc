// hami-scheduler against the simulated API server, over its real HTTP endpoints: filter,
// prioritize and bind as kube-scheduler calls them, the node lock under races, restart, bad
// input, readiness, metrics (promtool), HTTPS, the handshake loop. Where a test needs the
// device plugin's side of the bind, each node's real Allocator plays it (plugin::KubeletDriver),
// and no admission may fail.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "common/temp_dir.h"
#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "kube/time.h"
#include "plugin/kubelet_driver.h"
#include "scheduler/daemon.h"
#include "scheduler/handshake.h"
#include "scheduler/test_cluster.h"
#include "sim/kube/api_server.h"
#include "sim/kube/scheduler_standin.h"
#include "support/kube_control.h"

namespace hami::scheduler {
namespace {

using nlohmann::json;
using testing::GpuNode;
using testing::GpuNodeSpec;
using testing::GpuPod;
using testing::GpuPodSpec;
using testing::GpuUuid;
using testing::RunningGpuPod;
using SteadyClock = std::chrono::steady_clock;

// Waits until `pred`, which reads daemon `d`'s view, holds: re-checked at every change of the
// view, no polling. False after `timeout`.
bool ViewWait(Daemon* d, const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  return d->scheduler().state().WaitFor(pred, SteadyClock::now() + timeout);
}

// What has no change event to wait on (the API server's store and events, the kubelet
// driver's count, the leader flag) is polled, bounded by the timeout.
using kube::control_test::WaitUntil;

struct HttpAnswer {
  int status = 0;
  std::string body;
  json Json() const { return json::parse(body, nullptr, false); }
};

class SchedulerIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(server.ok()) << server.error().message();
    api_ = std::move(server).value();
    client_ = Connect();
  }

  void TearDown() override {
    if (plugin_) {
      plugin_->Stop();
      std::string messages;
      for (const std::string& m : plugin_->failure_messages()) messages += "\n  " + m;
      EXPECT_EQ(plugin_->failures(), 0u) << "the device plugin's side failed:" << messages;
    }
    plugin_.reset();
    daemons_.clear();
    client_.reset();
    if (api_) api_->Stop();
  }

  kube::Config Config() const {
    kube::Config c;
    c.server = api_->url();
    c.source = "test";
    return c;
  }

  std::unique_ptr<kube::Client> Connect() {
    kube::ClientOptions o;
    o.qps = 0;
    auto c = kube::Client::Create(Config(), o);
    EXPECT_TRUE(c.ok());
    return c.ok() ? std::move(c).value() : nullptr;
  }

  DaemonOptions Options() {
    DaemonOptions o;
    o.server.http_bind = "127.0.0.1:0";
    o.server.metrics_bind = "127.0.0.1:0";
    o.handshake_enabled = false;
    o.client.qps = 0;
    o.scheduler.node_lock_wait = std::chrono::milliseconds(5000);
    return o;
  }

  Daemon* StartDaemon(DaemonOptions o, bool wait_ready = true) {
    auto d = Daemon::Start(Config(), std::move(o));
    EXPECT_TRUE(d.ok()) << d.error().message();
    if (!d.ok()) return nullptr;
    if (wait_ready) {
      EXPECT_TRUE((*d)->WaitReady(SteadyClock::now() + std::chrono::seconds(20)));
    }
    daemons_.push_back(std::move(d).value());
    return daemons_.back().get();
  }

  // The device plugin's side of the bind, each node's real Allocator, asked as a kubelet asks.
  void StartPlugin() {
    plugin_ = std::make_unique<plugin::KubeletDriver>(*client_);
    plugin_->Start();
  }

  void AddNode(const GpuNodeSpec& spec) {
    auto r = api_->CreateObject(kube::kNodes, GpuNode(spec));
    ASSERT_TRUE(r.ok()) << r.error().message();
  }

  // The PriorityClass a pod of `spec` names, created once.
  void EnsurePriorityClass(const GpuPodSpec& spec) {
    if (!spec.priority) return;
    auto r = api_->CreateObject(kube::kPriorityClasses, testing::PriorityClass(*spec.priority));
    EXPECT_TRUE(r.ok() || r.error().code() == ErrorCode::kConflict) << r.error().message();
  }

  json AddPod(const GpuPodSpec& spec) {
    EnsurePriorityClass(spec);
    auto r = api_->CreateObject(kube::kPods, GpuPod(spec));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : json();
  }

  json AddRunningPod(const GpuPodSpec& spec, const std::string& node,
                     const kube::PodDevices& devices) {
    EnsurePriorityClass(spec);
    auto r = api_->CreateObject(kube::kPods, RunningGpuPod(spec, node, devices));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : json();
  }

  json GetPod(const std::string& name, const std::string& ns = "default") {
    auto r = api_->GetObject(kube::kPods, ns, name);
    return r.ok() ? *r : json();
  }

  // Waits until every daemon's view holds `n` pod shares.
  bool WaitShares(Daemon* d, size_t n) {
    return ViewWait(
        d, [&] { return d->scheduler().state().Shares().size() == n; }, std::chrono::seconds(10));
  }

  static HttpAnswer Post(int port, const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    auto res = c.Post(path.c_str(), body, "application/json");
    if (!res) return {};
    return {res->status, res->body};
  }
  static HttpAnswer Get(int port, const std::string& path) {
    httplib::Client c("127.0.0.1", port);
    auto res = c.Get(path.c_str());
    if (!res) return {};
    return {res->status, res->body};
  }

  static std::string Args(const json& pod, const std::vector<std::string>& names) {
    return sim::kube::ExtenderArgsJson(pod, {}, names, true).dump();
  }
  static std::string BindArgs(const json& pod, const std::string& node) {
    return sim::kube::ExtenderBindingArgsJson(kube::MetadataString(pod, "name"),
                                              kube::MetadataString(pod, "namespace"),
                                              kube::MetadataString(pod, "uid"), node)
        .dump();
  }
  // The bind's error ("" on success).
  static std::string Bind(int port, const json& pod, const std::string& node) {
    HttpAnswer a = Post(port, "/bind", BindArgs(pod, node));
    EXPECT_EQ(a.status, 200) << a.body;
    auto err = sim::kube::ParseExtenderBindingResultError(a.Json());
    return err.ok() ? *err : "unreadable answer: " + a.body;
  }

  bool HasEvent(const std::string& reason, const std::string& pod, const std::string& contains) {
    for (const json& e : api_->ListObjects(kube::kEvents)) {
      if (e.value("reason", "") == reason && e["involvedObject"].value("name", "") == pod &&
          e.value("message", "").find(contains) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
  std::unique_ptr<plugin::KubeletDriver> plugin_;
};

// ---- filter, prioritize, bind ----------------------------------------------------------------

TEST_F(SchedulerIntegration, FilterReturnsEveryFittingNodeAndAReasonForEachOther) {
  AddNode({.name = "fits-a", .gpus = 2});
  AddNode({.name = "fits-b", .gpus = 4});
  AddNode({.name = "small", .gpus = 2, .mem_mib = 4096});
  AddNode({.name = "full", .gpus = 1});
  ASSERT_TRUE(api_->CreateObject(kube::kNodes, {{"metadata", {{"name", "cpu-only"}}}}).ok());
  AddRunningPod({.name = "hog", .mem_mib = 15000}, "full",
                {{{GpuUuid("full", 0), "NVIDIA", 15000, 0}}});
  Daemon* d = StartDaemon(Options());
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(WaitShares(d, 1));
  json pod = AddPod({.name = "p", .mem_mib = 8000, .cores = 30});

  HttpAnswer a = Post(d->port(), "/filter",
                      Args(pod, {"fits-a", "fits-b", "small", "full", "cpu-only", "ghost"}));
  ASSERT_EQ(a.status, 200) << a.body;
  auto r = sim::kube::ParseExtenderFilterResult(a.Json());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->has_node_names);
  EXPECT_EQ(r->node_names, (std::vector<std::string>{"fits-a", "fits-b"}));
  EXPECT_EQ(r->error, "");
  ASSERT_EQ(r->failed_and_unresolvable_nodes.count("small"), 1u);
  EXPECT_NE(r->failed_and_unresolvable_nodes["small"].find("2 smaller than the request"),
            std::string::npos);
  EXPECT_EQ(r->failed_and_unresolvable_nodes["cpu-only"],
            "no GPUs registered (hami.io/node-nvidia-register)");
  ASSERT_EQ(r->failed_nodes.count("full"), 1u);
  EXPECT_NE(r->failed_nodes["full"].find("1 short of memory"), std::string::npos)
      << r->failed_nodes["full"];
  EXPECT_NE(r->failed_nodes["ghost"].find("has not seen this node"), std::string::npos);
}

TEST_F(SchedulerIntegration, FilterWithoutNodeCacheAnswersANodeList) {
  AddNode({.name = "n1", .gpus = 1});
  AddNode({.name = "n2", .gpus = 1, .mem_mib = 1000});
  Daemon* d = StartDaemon(Options());
  json pod = AddPod({.name = "p", .mem_mib = 2000});
  std::vector<std::shared_ptr<const json>> nodes;
  for (const char* n : {"n1", "n2"}) {
    nodes.push_back(std::make_shared<const json>(*api_->GetObject(kube::kNodes, "", n)));
  }
  HttpAnswer a =
      Post(d->port(), "/filter", sim::kube::ExtenderArgsJson(pod, nodes, {}, false).dump());
  ASSERT_EQ(a.status, 200) << a.body;
  auto r = sim::kube::ParseExtenderFilterResult(a.Json());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->has_nodes);
  EXPECT_EQ(r->nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(r->failed_and_unresolvable_nodes.count("n2"), 1u);
}

TEST_F(SchedulerIntegration, APodWithoutGpusPassesEveryNode) {
  AddNode({.name = "n1"});
  Daemon* d = StartDaemon(Options());
  json pod = AddPod({.name = "plain"});
  pod["spec"]["containers"][0]["resources"] = json::object();
  auto r = sim::kube::ParseExtenderFilterResult(
      Post(d->port(), "/filter", Args(pod, {"n1", "anything"})).Json());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node_names, (std::vector<std::string>{"n1", "anything"}));
}

TEST_F(SchedulerIntegration, SingleNodeFilterKeepsOnlyTheBestNode) {
  AddNode({.name = "busy", .gpus = 1});
  AddNode({.name = "idle", .gpus = 1});
  AddRunningPod({.name = "hog", .mem_mib = 8000}, "busy",
                {{{GpuUuid("busy", 0), "NVIDIA", 8000, 0}}});
  DaemonOptions o = Options();
  o.scheduler.single_node_filter = true;  // node policy binpack: the busier node
  Daemon* d = StartDaemon(o);
  ASSERT_TRUE(WaitShares(d, 1));
  json pod = AddPod({.name = "p", .mem_mib = 1000});
  auto r = sim::kube::ParseExtenderFilterResult(
      Post(d->port(), "/filter", Args(pod, {"busy", "idle"})).Json());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node_names, std::vector<std::string>{"busy"});
  EXPECT_NE(r->failed_nodes["idle"].find("single-node filter keeps only busy"), std::string::npos);
}

TEST_F(SchedulerIntegration, PrioritizeScoresByTheNodePolicyAndZeroForWhatDoesNotFit) {
  AddNode({.name = "busy", .gpus = 1});
  AddNode({.name = "idle", .gpus = 1});
  AddNode({.name = "small", .gpus = 1, .mem_mib = 500});
  AddRunningPod({.name = "hog", .mem_mib = 12000, .cores = 60}, "busy",
                {{{GpuUuid("busy", 0), "NVIDIA", 12000, 60}}});
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 1));
  json binpack = AddPod({.name = "bp", .mem_mib = 1000});
  json spread = AddPod({.name = "sp",
                        .mem_mib = 1000,
                        .annotations = {{"hami.io/node-scheduler-policy", "spread"}}});
  auto score = [&](const json& pod) {
    HttpAnswer a = Post(d->port(), "/prioritize", Args(pod, {"busy", "idle", "small"}));
    EXPECT_EQ(a.status, 200) << a.body;
    auto list = sim::kube::ParseHostPriorityList(a.Json());
    EXPECT_TRUE(list.ok());
    std::map<std::string, int64_t> m;
    if (list.ok()) {
      for (const auto& h : *list) m[h.host] = h.score;
    }
    return m;
  };
  auto b = score(binpack);
  auto s = score(spread);
  EXPECT_GT(b["busy"], b["idle"]);
  EXPECT_LT(s["busy"], s["idle"]);
  EXPECT_EQ(b["small"], 0);
  for (auto* m : {&b, &s}) {
    for (const auto& [host, v] : *m) {
      EXPECT_GE(v, 0);
      EXPECT_LE(v, 10);
    }
  }
}

TEST_F(SchedulerIntegration, BindWritesTheAnnotationsTakesTheNodeLockAndBinds) {
  AddNode({.name = "n1", .gpus = 2});
  Daemon* d = StartDaemon(Options());
  json pod = AddPod({.name = "p", .gpus = 2, .mem_mib = 3000, .cores = 20});
  ASSERT_TRUE(ViewWait(
      d, [&] { return d->scheduler().state().NodeNames().size() == 1; }, std::chrono::seconds(5)));
  const auto before = std::chrono::system_clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(Bind(d->port(), pod, "n1"), "");

  json stored = GetPod("p");
  EXPECT_EQ(stored["spec"].value("nodeName", ""), "n1");
  const json& ann = stored["metadata"]["annotations"];
  EXPECT_EQ(ann.value("hami.io/vgpu-node", ""), "n1");
  EXPECT_EQ(ann.value("hami.io/bind-phase", ""), "allocating");
  const std::string allocated = ann.value("hami.io/vgpu-devices-allocated", "");
  EXPECT_EQ(ann.value("hami.io/vgpu-devices-to-allocate", ""), allocated);
  auto devices = kube::DecodePodDevices(allocated, kube::kDevicesAllocatedAnnotation);
  ASSERT_TRUE(devices.ok()) << allocated;
  ASSERT_EQ(devices->size(), 1u);
  ASSERT_EQ((*devices)[0].size(), 2u);
  EXPECT_NE((*devices)[0][0].uuid, (*devices)[0][1].uuid);
  EXPECT_EQ((*devices)[0][0].mem_mib, 3000);
  EXPECT_EQ((*devices)[0][0].cores, 20);
  for (const char* key : {"hami.io/bind-time", "hami.io/vgpu-time"}) {
    auto t = kube::DecodeUnixSeconds(ann.value(key, ""), key);
    ASSERT_TRUE(t.ok()) << key;
    EXPECT_GE(*t, before);
  }
  json node = *api_->GetObject(kube::kNodes, "", "n1");
  auto lock = kube::DecodeNodeLock(
      node["metadata"]["annotations"].value(std::string(kube::kNodeLockAnnotation), ""));
  ASSERT_TRUE(lock.ok());
  EXPECT_EQ(lock->ns, "default");
  EXPECT_EQ(lock->pod, "p");

  // The plugin's side (the node's real Allocator): success, chunk taken, lock released, both
  // devices' limits published; the pod keeps its share.
  StartPlugin();
  ASSERT_TRUE(WaitUntil(
      [&] {
        json n = *api_->GetObject(kube::kNodes, "", "n1");
        return !n["metadata"]["annotations"].contains(std::string(kube::kNodeLockAnnotation));
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(GetPod("p")["metadata"]["annotations"].value("hami.io/bind-phase", ""), "success");
  EXPECT_EQ(GetPod("p")["metadata"]["annotations"].value("hami.io/vgpu-devices-to-allocate", ""),
            ";");
  std::ifstream file(plugin_->HookPath("n1") + "/vgpu/containers/" +
                     stored["metadata"].value("uid", "") + "_main.limits");
  std::stringstream limits;
  limits << file.rdbuf();
  EXPECT_NE(
      limits.str().find("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_MEMORY_LIMIT_1=3000m\n"),
      std::string::npos)
      << limits.str();
  EXPECT_NE(limits.str().find("CUDA_DEVICE_SM_LIMIT=20\n"), std::string::npos) << limits.str();
  auto share = d->scheduler().state().Share("default", "p");
  ASSERT_TRUE(share.has_value());
  EXPECT_EQ(share->node, "n1");
}

TEST_F(SchedulerIntegration, ThePluginReadsTheBindsChunksInTheKubeletsContainerOrder) {
  // An init container and a main container with GPUs and a sidecar without: the scheduler
  // writes one chunk per container, init containers first; the node's real Allocator, asked
  // container by container as the kubelet asks, must give each container its own chunk.
  AddNode({.name = "n1", .gpus = 2});
  Daemon* d = StartDaemon(Options());
  StartPlugin();
  auto gpu = [](int mem_mib) {
    return json{
        {"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", std::to_string(mem_mib)}}}};
  };
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "p"}, {"namespace", "default"}}},
      {"spec",
       {{"schedulerName", "hami-scheduler"},
        {"initContainers", {{{"name", "init"}, {"image", "cuda"}, {"resources", gpu(1000)}}}},
        {"containers",
         {{{"name", "sidecar"}, {"image", "busybox"}},
          {{"name", "main"}, {"image", "cuda"}, {"resources", gpu(2000)}}}}}}};
  auto created = api_->CreateObject(kube::kPods, pod);
  ASSERT_TRUE(created.ok()) << created.error().message();
  ASSERT_EQ(Bind(d->port(), *created, "n1"), "");
  // (Polled: the driver's count moves with each admission; nothing announces one.)
  ASSERT_TRUE(WaitUntil([&] { return plugin_->allocated() + plugin_->failures() == 1; },
                        std::chrono::seconds(20)));
  ASSERT_EQ(plugin_->failures(), 0u);
  const json ann = GetPod("p")["metadata"]["annotations"];
  EXPECT_EQ(ann.value("hami.io/bind-phase", ""), "success");
  EXPECT_EQ(ann.value("hami.io/vgpu-devices-to-allocate", ""), ";;;");
  const std::string uid = (*created)["metadata"].value("uid", "");
  for (const auto& [container, mib] : {std::pair{"init", 1000}, std::pair{"main", 2000}}) {
    std::ifstream file(plugin_->HookPath("n1") + "/vgpu/containers/" + uid + "_" + container +
                       ".limits");
    std::stringstream limits;
    limits << file.rdbuf();
    EXPECT_NE(limits.str().find("CUDA_DEVICE_MEMORY_LIMIT_0=" + std::to_string(mib) + "m\n"),
              std::string::npos)
        << container << ": " << limits.str();
  }
}

TEST_F(SchedulerIntegration, BindRechecksTheFitAgainstCurrentUsage) {
  AddNode({.name = "n1", .gpus = 1});
  Daemon* d = StartDaemon(Options());
  StartPlugin();
  json first = AddPod({.name = "first", .mem_mib = 10000});
  json second = AddPod({.name = "second", .mem_mib = 10000});
  // Both fit when filtered one after the other, before either is bound.
  for (const json* p : {&first, &second}) {
    auto r =
        sim::kube::ParseExtenderFilterResult(Post(d->port(), "/filter", Args(*p, {"n1"})).Json());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->node_names, std::vector<std::string>{"n1"});
  }
  EXPECT_EQ(Bind(d->port(), first, "n1"), "");
  const std::string err = Bind(d->port(), second, "n1");
  EXPECT_NE(err.find("pod default/second does not fit node n1 now"), std::string::npos) << err;
  EXPECT_NE(err.find("short of memory"), std::string::npos) << err;
  EXPECT_EQ(GetPod("second")["spec"].value("nodeName", ""), "");
  EXPECT_FALSE(GetPod("second")["metadata"].contains("annotations") &&
               GetPod("second")["metadata"]["annotations"].contains("hami.io/vgpu-node"));
  EXPECT_TRUE(WaitUntil([&] { return HasEvent("BindingFailed", "second", "does not fit"); },
                        std::chrono::seconds(10)));
  EXPECT_EQ(d->metrics().bind_failures(BindFailure::kNoFit), 1u);
}

TEST_F(SchedulerIntegration, ABindToALockedNodeWaitsAndFailsWhenTheLockIsNotReleased) {
  AddNode({.name = "n1", .gpus = 2});
  DaemonOptions o = Options();
  o.scheduler.node_lock_wait = std::chrono::milliseconds(300);
  Daemon* d = StartDaemon(o);
  json a = AddPod({.name = "a", .mem_mib = 1000});
  json b = AddPod({.name = "b", .mem_mib = 1000});
  ASSERT_EQ(Bind(d->port(), a, "n1"), "");
  // No plugin runs: a's lock stays, and b's bind gives up after the wait.
  const std::string err = Bind(d->port(), b, "n1");
  EXPECT_NE(err.find("node n1: the node lock hami.io/mutex.lock is held by default/a since"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("(waited 300 ms)"), std::string::npos) << err;
  EXPECT_TRUE(WaitUntil([&] { return HasEvent("BindingFailed", "b", "held by default/a"); },
                        std::chrono::seconds(10)));
  // A locked node scores 0 for the next pod, so kube-scheduler prefers another.
  auto list =
      sim::kube::ParseHostPriorityList(Post(d->port(), "/prioritize", Args(b, {"n1"})).Json());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)[0].score, 0);
  // Once the plugin has allocated a, b binds.
  StartPlugin();
  EXPECT_EQ(Bind(d->port(), b, "n1"), "");
}

TEST_F(SchedulerIntegration, TwoBindsRacingForOneNodeNeverDoubleBook) {
  // One GPU with room for one of the two pods; two schedulers (each with its own view) bind
  // at once. The node lock and the fresh read under it let exactly one in.
  AddNode({.name = "n1", .gpus = 1});
  StartPlugin();
  Daemon* d1 = StartDaemon(Options());
  Daemon* d2 = StartDaemon(Options());
  json a = AddPod({.name = "a", .mem_mib = 9000});
  json b = AddPod({.name = "b", .mem_mib = 9000});
  std::string err_a, err_b;
  std::thread ta([&] { err_a = Bind(d1->port(), a, "n1"); });
  std::thread tb([&] { err_b = Bind(d2->port(), b, "n1"); });
  ta.join();
  tb.join();
  EXPECT_TRUE(err_a.empty() != err_b.empty()) << "a: " << err_a << "\nb: " << err_b;
  const std::string& err = err_a.empty() ? err_b : err_a;
  EXPECT_NE(err.find("does not fit node n1 now"), std::string::npos) << err;
  // With room for both, both bind, one after the other.
  json c = AddPod({.name = "c", .mem_mib = 3000});
  json e = AddPod({.name = "e", .mem_mib = 3000});
  std::string err_c, err_e;
  std::thread tc([&] { err_c = Bind(d1->port(), c, "n1"); });
  std::thread te([&] { err_e = Bind(d2->port(), e, "n1"); });
  tc.join();
  te.join();
  EXPECT_EQ(err_c, "");
  EXPECT_EQ(err_e, "");
}

TEST_F(SchedulerIntegration, DanglingExpiredAndOwnLocksAreTakenOver) {
  AddNode({.name = "n1", .gpus = 4});
  kube::WallTime clock = std::chrono::system_clock::now();
  DaemonOptions o = Options();
  o.scheduler.node_lock_wait = std::chrono::milliseconds(300);
  o.scheduler.now = [&clock] { return clock; };
  Daemon* d = StartDaemon(o);
  auto set_lock = [&](const std::string& value) {
    ASSERT_TRUE(client_
                    ->Patch(kube::kNodes, "", "n1", kube::PatchType::kMerge,
                            {{"metadata", {{"annotations", {{"hami.io/mutex.lock", value}}}}}})
                    .ok());
    ASSERT_TRUE(ViewWait(
        d,
        [&] {
          auto info = d->scheduler().state().Node("n1");
          return info && info->lock && kube::EncodeNodeLock(*info->lock).value() == value;
        },
        std::chrono::seconds(5)));
  };
  auto lock_text = [](kube::WallTime t, const std::string& pod) {
    return *kube::EncodeNodeLock({t, "default", pod});
  };
  json holder = AddPod({.name = "holder", .mem_mib = 100});

  // A lock of a pod that does not exist is broken.
  set_lock(lock_text(clock, "ghost"));
  json p1 = AddPod({.name = "p1", .mem_mib = 100});
  EXPECT_EQ(Bind(d->port(), p1, "n1"), "");

  // A fresh lock of a live pod holds; five minutes later it has expired.
  set_lock(lock_text(clock, "holder"));
  json p2 = AddPod({.name = "p2", .mem_mib = 100});
  EXPECT_NE(Bind(d->port(), p2, "n1").find("held by default/holder"), std::string::npos);
  clock += std::chrono::minutes(5);
  EXPECT_EQ(Bind(d->port(), p2, "n1"), "");

  // A lock older than the wait whose holder binds nowhere (a scheduler died mid-bind) is broken;
  // a younger one is not (its holder may be about to write its annotations).
  json p4 = AddPod({.name = "p4", .mem_mib = 100});
  set_lock(lock_text(clock - std::chrono::milliseconds(100), "holder"));
  EXPECT_NE(Bind(d->port(), p4, "n1").find("held by default/holder"), std::string::npos);
  set_lock(lock_text(clock - std::chrono::seconds(2), "holder"));
  EXPECT_EQ(Bind(d->port(), p4, "n1"), "");

  // A holder annotated for this node and allocating but never bound (its scheduler was killed
  // between the annotations and the binding) holds the lock for as long as a bind may take,
  // then no longer; bound to the node (waiting for the device plugin), it holds it until the
  // timeout.
  json stale = AddPod({.name = "stale", .mem_mib = 100});
  ASSERT_TRUE(
      client_
          ->Patch(kube::kPods, "default", "stale", kube::PatchType::kMerge,
                  {{"metadata",
                    {{"annotations",
                      {{"hami.io/vgpu-node", "n1"}, {"hami.io/bind-phase", "allocating"}}}}}})
          .ok());
  json p5 = AddPod({.name = "p5", .mem_mib = 100});
  set_lock(lock_text(clock - std::chrono::seconds(5), "stale"));
  EXPECT_NE(Bind(d->port(), p5, "n1").find("held by default/stale"), std::string::npos);
  set_lock(lock_text(clock - std::chrono::seconds(12), "stale"));
  EXPECT_EQ(Bind(d->port(), p5, "n1"), "");
  json bound = AddPod({.name = "bound", .mem_mib = 100});
  set_lock(lock_text(clock, "ghost"));          // p5's lock, which no device plugin releases here
  ASSERT_EQ(Bind(d->port(), bound, "n1"), "");  // bound to n1, bind-phase allocating
  json p6 = AddPod({.name = "p6", .mem_mib = 100});
  set_lock(lock_text(clock - std::chrono::seconds(60), "bound"));
  EXPECT_NE(Bind(d->port(), p6, "n1").find("held by default/bound"), std::string::npos);

  // The same pod may lock again (a retried bind).
  json p3 = AddPod({.name = "p3", .mem_mib = 100});
  set_lock(lock_text(clock, "p3"));
  EXPECT_EQ(Bind(d->port(), p3, "n1"), "");
}

// ---- state ----------------------------------------------------------------------------------

TEST_F(SchedulerIntegration, ARestartReachesTheSameUsageBeforeItIsReady) {
  for (int i = 0; i < 4; ++i) AddNode({.name = "n" + std::to_string(i), .gpus = 2});
  StartPlugin();
  Daemon* d = StartDaemon(Options());
  for (int i = 0; i < 12; ++i) {
    json pod = AddPod({.name = "p" + std::to_string(i), .mem_mib = 1000 + 100 * i, .cores = 10});
    ASSERT_EQ(Bind(d->port(), pod, "n" + std::to_string(i % 4)), "");
  }
  ASSERT_TRUE(WaitUntil([&] { return plugin_->allocated() == 12; }, std::chrono::seconds(20)));
  ASSERT_TRUE(ViewWait(
      d,
      [&] {
        for (const auto& [k, s] : d->scheduler().state().Shares()) {
          (void)k;
          if (GetPod(s.name)["metadata"]["annotations"].value("hami.io/bind-phase", "") !=
              "success") {
            return false;
          }
        }
        return d->scheduler().state().Shares().size() == 12;
      },
      std::chrono::seconds(10)));
  const auto before = d->scheduler().state().Gpus();
  daemons_.clear();

  DaemonOptions o = Options();
  auto restarted = Daemon::Start(Config(), o);
  ASSERT_TRUE(restarted.ok());
  ASSERT_TRUE((*restarted)->WaitReady(SteadyClock::now() + std::chrono::seconds(20)));
  // Ready means the view is the cluster's already: nothing to wait for.
  const auto after = (*restarted)->scheduler().state().Gpus();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].device.id, after[i].device.id);
    EXPECT_EQ(before[i].used, after[i].used) << before[i].device.id;
  }
  daemons_.push_back(std::move(restarted).value());
}

TEST_F(SchedulerIntegration, APodThatEndsOrIsDeletedReleasesItsShare) {
  AddNode({.name = "n1", .gpus = 1});
  AddRunningPod({.name = "done", .mem_mib = 4000}, "n1",
                {{{GpuUuid("n1", 0), "NVIDIA", 4000, 10}}});
  AddRunningPod({.name = "gone", .mem_mib = 2000}, "n1", {{{GpuUuid("n1", 0), "NVIDIA", 2000, 5}}});
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 2));
  EXPECT_EQ(d->scheduler().state().Gpus()[0].used, (DeviceUsage{2, 6000, 15, 0}));
  json done = GetPod("done");
  done["status"]["phase"] = "Succeeded";
  ASSERT_TRUE(client_->Update(kube::kPods, done, "status").ok());
  ASSERT_TRUE(WaitShares(d, 1));
  EXPECT_EQ(d->scheduler().state().Gpus()[0].used, (DeviceUsage{1, 2000, 5, 0}));
  ASSERT_TRUE(api_->DeleteObject(kube::kPods, "default", "gone").ok());
  ASSERT_TRUE(WaitShares(d, 0));
  EXPECT_EQ(d->scheduler().state().Gpus()[0].used, DeviceUsage{});
}

TEST_F(SchedulerIntegration, NamespaceQuotaIsCountedFromTheAllocations) {
  AddNode({.name = "n1", .gpus = 2});
  ASSERT_TRUE(api_->CreateObject(kube::kResourceQuotas,
                                 {{"metadata", {{"name", "gpu-quota"}, {"namespace", "default"}}},
                                  {"spec", {{"hard", {{"limits.nvidia.com/gpumem", "5000"}}}}}})
                  .ok());
  AddRunningPod({.name = "old", .mem_mib = 3000}, "n1", {{{GpuUuid("n1", 0), "NVIDIA", 3000, 0}}});
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 1));
  json ok = AddPod({.name = "ok", .mem_mib = 2000});
  json over = AddPod({.name = "over", .mem_mib = 2001});
  auto r =
      sim::kube::ParseExtenderFilterResult(Post(d->port(), "/filter", Args(ok, {"n1"})).Json());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node_names, std::vector<std::string>{"n1"});
  auto r2 =
      sim::kube::ParseExtenderFilterResult(Post(d->port(), "/filter", Args(over, {"n1"})).Json());
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(r2->node_names.empty());
  EXPECT_EQ(r2->failed_nodes["n1"],
            "namespace default: limits.nvidia.com/gpumem of ResourceQuota gpu-quota is 5000 MiB, "
            "3000 are used and the pod needs 2001");
}

// ---- preemption --------------------------------------------------------------------------------

// The preempt verb's answer: node -> victim UIDs.
std::map<std::string, std::vector<std::string>> PreemptAnswer(const HttpAnswer& a) {
  std::map<std::string, std::vector<std::string>> out;
  auto parsed = sim::kube::ParseExtenderPreemptionResult(a.Json());
  EXPECT_TRUE(parsed.ok()) << a.body;
  if (!parsed.ok()) return out;
  for (auto& [node, v] : *parsed) out[node] = v.uids;
  return out;
}

std::string Uid(const json& pod) { return pod["metadata"]["uid"].get<std::string>(); }

std::string PreemptArgs(const json& pod, const std::map<std::string, std::vector<json>>& victims,
                        bool meta) {
  std::map<std::string, std::vector<std::shared_ptr<const json>>> m;
  for (const auto& [node, pods] : victims) {
    for (const json& p : pods) m[node].push_back(std::make_shared<const json>(p));
  }
  return sim::kube::ExtenderPreemptionArgsJson(pod, m, meta).dump();
}

TEST_F(SchedulerIntegration, PreemptNamesOnlyTheVictimWhoseGpuThePodNeeds) {
  // n1: GPU 0 holds a (8000) and b (6000), GPU 1 holds c (10000), all of priority 0, and e of
  // priority 1000 (2000) on GPU 1. A pod of priority 1000 asking 12000 needs GPU 1 without c.
  AddNode({.name = "n1", .gpus = 2});
  json a = AddRunningPod({.name = "a", .mem_mib = 8000, .priority = 0}, "n1",
                         {{{GpuUuid("n1", 0), "NVIDIA", 8000, 0}}});
  json b = AddRunningPod({.name = "b", .mem_mib = 6000, .priority = 0}, "n1",
                         {{{GpuUuid("n1", 0), "NVIDIA", 6000, 0}}});
  json c = AddRunningPod({.name = "c", .mem_mib = 10000, .priority = 0}, "n1",
                         {{{GpuUuid("n1", 1), "NVIDIA", 10000, 0}}});
  json e = AddRunningPod({.name = "e", .mem_mib = 2000, .priority = 1000}, "n1",
                         {{{GpuUuid("n1", 1), "NVIDIA", 2000, 0}}});
  // n2: one GPU held by a pod of equal priority only. n3: not known to the scheduler.
  AddNode({.name = "n2", .gpus = 1});
  json same = AddRunningPod({.name = "same", .mem_mib = 10000, .priority = 1000}, "n2",
                            {{{GpuUuid("n2", 0), "NVIDIA", 10000, 0}}});
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 5));
  json unknown = {{"metadata", {{"name", "ghost"}, {"namespace", "default"}, {"uid", "no-such"}}}};

  for (bool meta : {true, false}) {
    SCOPED_TRACE(meta ? "NodeNameToMetaVictims" : "NodeNameToVictims");
    json pod =
        AddPod({.name = meta ? "high-meta" : "high-full", .mem_mib = 12000, .priority = 1000});
    HttpAnswer ans = Post(
        d->port(), "/preempt",
        PreemptArgs(pod, {{"n1", {unknown, a, b, c, e}}, {"n2", {same}}, {"n3", {unknown}}}, meta));
    ASSERT_EQ(ans.status, 200) << ans.body;
    auto victims = PreemptAnswer(ans);
    EXPECT_EQ(victims, (std::map<std::string, std::vector<std::string>>{{"n1", {Uid(c)}}}))
        << ans.body;
    // Asked again before c's deletion shows: c counts as gone, and nothing more must go.
    ans = Post(d->port(), "/preempt", PreemptArgs(pod, {{"n1", {a, b, c, e}}}, meta));
    ASSERT_EQ(ans.status, 200) << ans.body;
    EXPECT_TRUE(PreemptAnswer(ans).empty()) << ans.body;
  }

  // Too big for any GPU: no node is answered, whatever the victims.
  json huge = AddPod({.name = "huge", .mem_mib = 20000, .priority = 1000});
  HttpAnswer ans =
      Post(d->port(), "/preempt", PreemptArgs(huge, {{"n1", {a, b, c}}, {"n2", {same}}}, true));
  ASSERT_EQ(ans.status, 200) << ans.body;
  EXPECT_TRUE(PreemptAnswer(ans).empty()) << ans.body;
}

TEST_F(SchedulerIntegration, MalformedPreemptRequestsGet400NamingWhatWasWrong) {
  AddNode({.name = "n1", .gpus = 1});
  Daemon* d = StartDaemon(Options());
  const std::pair<std::string, std::string> cases[] = {
      {"{", "ExtenderPreemptionArgs: not valid JSON"},
      {R"({"NodeNameToMetaVictims":{}})", "ExtenderPreemptionArgs: Pod: missing"},
      {R"({"Pod":{"metadata":{"name":"p"}},"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":1}]}}})",
       R"(NodeNameToMetaVictims["n1"].Pods[0].UID: expected a string)"},
      {R"({"Pod":{"metadata":{"name":"p"},"spec":{"containers":[{"name":"m","resources":)"
       R"({"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"2Gi"}}}]}}})",
       "ExtenderPreemptionArgs: Pod: "},
  };
  for (const auto& [body, want] : cases) {
    HttpAnswer a = Post(d->port(), "/preempt", body);
    EXPECT_EQ(a.status, 400) << body;
    EXPECT_NE(a.Json().value("Error", "").find(want), std::string::npos) << a.body;
  }
  EXPECT_EQ(Get(d->port(), "/preempt").status, 405);
  // The server goes on.
  HttpAnswer ok = Post(d->port(), "/preempt", R"({"Pod":{"metadata":{"name":"p"}}})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.Json(), json::parse(R"({"NodeNameToMetaVictims":{}})"));
}

// The kube-scheduler stand-in in this process, over the daemon's HTTP verbs.
std::unique_ptr<sim::kube::SchedulerStandin> StartStandin(kube::Client& client, int port,
                                                          int parallelism) {
  auto config = sim::kube::ParseSchedulerConfig(testing::ExtenderSchedulerConfig(port), "test");
  EXPECT_TRUE(config.ok()) << config.error().message();
  if (!config.ok()) return nullptr;
  sim::kube::StandinOptions o;
  o.parallelism = parallelism;
  o.initial_backoff = std::chrono::milliseconds(50);
  o.max_backoff = std::chrono::milliseconds(200);
  o.seed = 1;
  auto s = sim::kube::SchedulerStandin::Create(client, std::move(*config), o);
  EXPECT_TRUE(s.ok()) << s.error().message();
  if (!s.ok()) return nullptr;
  (*s)->Start();
  return std::move(s).value();
}

TEST_F(SchedulerIntegration, AHighPriorityPodPreemptsTheOnePodWhoseGpuItNeedsAndRunsThere) {
  AddNode({.name = "n1", .gpus = 2});
  AddRunningPod({.name = "a", .mem_mib = 8000, .priority = 0}, "n1",
                {{{GpuUuid("n1", 0), "NVIDIA", 8000, 0}}});
  AddRunningPod({.name = "b", .mem_mib = 6000, .priority = 0}, "n1",
                {{{GpuUuid("n1", 0), "NVIDIA", 6000, 0}}});
  AddRunningPod({.name = "c", .mem_mib = 10000, .priority = 0}, "n1",
                {{{GpuUuid("n1", 1), "NVIDIA", 10000, 0}}});
  // Of equal priority to the preemptor: never a victim, though its removal would also help.
  AddNode({.name = "n2", .gpus = 1});
  AddRunningPod({.name = "same", .mem_mib = 10000, .priority = 1000}, "n2",
                {{{GpuUuid("n2", 0), "NVIDIA", 10000, 0}}});
  StartPlugin();
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 4));
  auto standin = StartStandin(*client_, d->port(), 1);
  ASSERT_NE(standin, nullptr);
  AddPod({.name = "high", .mem_mib = 12000, .priority = 1000});

  ASSERT_TRUE(WaitUntil([&] { return GetPod("high")["spec"].value("nodeName", "") == "n1"; },
                        std::chrono::seconds(20)))
      << GetPod("high").dump();
  EXPECT_TRUE(GetPod("c").is_null());
  for (const char* kept : {"a", "b", "same"}) EXPECT_FALSE(GetPod(kept).is_null()) << kept;
  json high = GetPod("high");
  EXPECT_EQ(high["status"].value("nominatedNodeName", ""), "n1");
  auto devices = kube::DecodePodDevices(
      high["metadata"]["annotations"][std::string(kube::kDevicesAllocatedAnnotation)]
          .get<std::string>(),
      kube::kDevicesAllocatedAnnotation);
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_EQ((*devices)[0][0].uuid, GpuUuid("n1", 1));
  EXPECT_TRUE(HasEvent("Preempted", "c", "Preempted by pod " + Uid(high) + " on node n1"));
  EXPECT_EQ(standin->stats().victims_deleted, 1u);
  standin->Stop();
}

TEST_F(SchedulerIntegration, APodThatCannotFitEvenAnEmptyGpuTakesNoVictim) {
  AddNode({.name = "n1", .gpus = 2});
  AddRunningPod({.name = "a", .mem_mib = 8000, .priority = 0}, "n1",
                {{{GpuUuid("n1", 0), "NVIDIA", 8000, 0}}});
  AddRunningPod({.name = "b", .mem_mib = 8000, .priority = 0}, "n1",
                {{{GpuUuid("n1", 1), "NVIDIA", 8000, 0}}});
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 2));
  auto standin = StartStandin(*client_, d->port(), 1);
  ASSERT_NE(standin, nullptr);
  AddPod({.name = "huge", .mem_mib = 20000, .priority = 1000});
  // Wait for the stand-in's FailedScheduling event: filtering said unresolvable.
  ASSERT_TRUE(WaitUntil([&] { return HasEvent("FailedScheduling", "huge", "preemption:"); },
                        std::chrono::seconds(10)));
  EXPECT_TRUE(HasEvent("FailedScheduling", "huge",
                       "preemption: 0/1 nodes are available: 1 Preemption is not helpful"));
  EXPECT_FALSE(GetPod("a").is_null());
  EXPECT_FALSE(GetPod("b").is_null());
  EXPECT_EQ(standin->stats().preempt_calls, 0u);
  EXPECT_EQ(standin->stats().victims_deleted, 0u);
  EXPECT_EQ(GetPod("huge")["status"].value("nominatedNodeName", ""), "");
  standin->Stop();
}

TEST_F(SchedulerIntegration, TwoPreemptorsRacingForOneGpuExactlyOneWins) {
  AddNode({.name = "n1", .gpus = 1});
  AddRunningPod({.name = "low", .mem_mib = 12000, .priority = 0}, "n1",
                {{{GpuUuid("n1", 0), "NVIDIA", 12000, 0}}});
  StartPlugin();
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 1));
  // Both pending before the stand-in starts, scheduled at once by two workers.
  AddPod({.name = "p1", .mem_mib = 12000, .priority = 1000});
  AddPod({.name = "p2", .mem_mib = 12000, .priority = 1000});
  auto standin = StartStandin(*client_, d->port(), 2);
  ASSERT_NE(standin, nullptr);
  auto bound = [&](const char* name) {
    return !GetPod(name)["spec"].value("nodeName", "").empty();
  };
  ASSERT_TRUE(WaitUntil([&] { return bound("p1") || bound("p2"); }, std::chrono::seconds(20)));
  EXPECT_TRUE(GetPod("low").is_null());
  // The loser keeps trying: each attempt finds the GPU held by a pod of equal priority, which it
  // never preempts. Let it try a few times, then look again.
  const uint64_t attempts = standin->stats().attempts;
  ASSERT_TRUE(WaitUntil([&] { return standin->stats().attempts >= attempts + 3; },
                        std::chrono::seconds(10)));
  EXPECT_NE(bound("p1"), bound("p2"));
  EXPECT_FALSE(GetPod("p1").is_null());
  EXPECT_FALSE(GetPod("p2").is_null());
  EXPECT_EQ(standin->stats().victims_deleted, 1u);
  EXPECT_EQ(d->scheduler().state().Gpus()[0].used.mem_mib, 12000);
  standin->Stop();
}

TEST_F(SchedulerIntegration, TheRoomAVictimFreesIsHeldForItsNominatedPreemptor) {
  // One GPU of 16384 MiB, 12000 held by `low`; a finalizer keeps it terminating once deleted,
  // until the test removes it.
  AddNode({.name = "n1", .gpus = 1});
  AddRunningPod({.name = "low", .mem_mib = 12000, .priority = 0}, "n1",
                {{{GpuUuid("n1", 0), "NVIDIA", 12000, 0}}});
  ASSERT_TRUE(client_
                  ->Patch(kube::kPods, "default", "low", kube::PatchType::kMerge,
                          {{"metadata", {{"finalizers", {"test.hami.io/hold"}}}}})
                  .ok());
  StartPlugin();
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 1));
  auto standin = StartStandin(*client_, d->port(), 1);
  ASSERT_NE(standin, nullptr);
  json high = AddPod({.name = "high", .mem_mib = 12000, .priority = 1000});
  ASSERT_TRUE(ViewWait(
      d, [&] { return d->scheduler().state().Nominations().count("default/high") != 0; },
      std::chrono::seconds(20)));
  EXPECT_EQ(d->scheduler().state().Nominations().at("default/high"), "n1");
  EXPECT_TRUE(GetPod("low")["metadata"]["deletionTimestamp"].is_string());
  standin->Stop();

  // Created while the victim terminates; 8000 would fit beside nothing but not beside high.
  json later = AddPod({.name = "later", .mem_mib = 8000, .priority = 500});
  ASSERT_TRUE(client_
                  ->Patch(kube::kPods, "default", "low", kube::PatchType::kMerge,
                          {{"metadata", {{"finalizers", nullptr}}}})
                  .ok());
  ASSERT_TRUE(WaitShares(d, 0));
  ASSERT_TRUE(GetPod("low").is_null());
  auto r =
      sim::kube::ParseExtenderFilterResult(Post(d->port(), "/filter", Args(later, {"n1"})).Json());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->node_names.empty());
  EXPECT_NE(r->failed_nodes["n1"].find("room held for pods nominated to this node: default/high"),
            std::string::npos)
      << r->failed_nodes["n1"];
  EXPECT_NE(Bind(d->port(), later, "n1").find("does not fit node n1 now"), std::string::npos);
  // A smaller pod fits beside the held room.
  json small = AddPod({.name = "small", .mem_mib = 4000, .priority = 500});
  auto r2 =
      sim::kube::ParseExtenderFilterResult(Post(d->port(), "/filter", Args(small, {"n1"})).Json());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->node_names, std::vector<std::string>{"n1"});
  ASSERT_TRUE(api_->DeleteObject(kube::kPods, "default", "small").ok());

  // The scheduler again: the preemptor gets the GPU, the later pod stays pending.
  standin = StartStandin(*client_, d->port(), 1);
  ASSERT_NE(standin, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return GetPod("high")["spec"].value("nodeName", "") == "n1"; },
                        std::chrono::seconds(20)))
      << GetPod("high").dump();
  ASSERT_TRUE(ViewWait(
      d, [&] { return d->scheduler().state().Nominations().empty(); }, std::chrono::seconds(10)));
  // Tried by the second scheduler (the first stopped before it was created), and refused.
  ASSERT_TRUE(WaitUntil([&] { return HasEvent("FailedScheduling", "later", "0/1 nodes"); },
                        std::chrono::seconds(10)));
  EXPECT_EQ(GetPod("later")["spec"].value("nodeName", ""), "");
  EXPECT_EQ(d->scheduler().state().Gpus()[0].used.mem_mib, 12000);
  standin->Stop();
}

// ---- bad input, readiness, metrics, HTTPS ------------------------------------------------------

TEST_F(SchedulerIntegration, BadRequestsGet400NamingTheFieldAndTheServerGoesOn) {
  AddNode({.name = "n1"});
  Daemon* d = StartDaemon(Options());
  const int port = d->port();
  auto error_of = [](const HttpAnswer& a) { return a.Json().value("Error", std::string()); };
  HttpAnswer a = Post(port, "/filter", "{not json");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(error_of(a), "ExtenderArgs: not valid JSON");
  a = Post(port, "/filter", R"({"NodeNames":["n1"]})");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(error_of(a), "ExtenderArgs: Pod: missing");
  a = Post(port, "/prioritize", R"({"Pod":{"metadata":{"name":"x"}},"NodeNames":["n1",7]})");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(error_of(a), "ExtenderArgs: NodeNames[1]: expected a string");
  a = Post(port, "/filter", R"({"Pod":{"metadata":{"name":"x"}}})");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(error_of(a), "ExtenderArgs: neither NodeNames nor Nodes is set");
  json bad_quantity = GpuPod({.name = "q"});
  bad_quantity["metadata"]["namespace"] = "default";
  bad_quantity["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "1.5.3";
  a = Post(port, "/filter", Args(bad_quantity, {"n1"}));
  EXPECT_EQ(a.status, 400);
  EXPECT_NE(error_of(a).find("ExtenderArgs: Pod: Pod default/q: "
                             "spec.containers[0].resources.limits.nvidia.com/gpumem: quantity "
                             "'1.5.3'"),
            std::string::npos)
      << error_of(a);
  // Memory with a Kubernetes unit (a pod the webhook did not see): the reason says MiB.
  json with_unit = GpuPod({.name = "u"});
  with_unit["metadata"]["namespace"] = "default";
  with_unit["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "2Gi";
  a = Post(port, "/filter", Args(with_unit, {"n1"}));
  EXPECT_EQ(a.status, 400);
  EXPECT_NE(error_of(a).find("resources.limits.nvidia.com/gpumem: 2Gi has a unit suffix (Gi), "
                             "but nvidia.com/gpumem is a plain integer count of MiB"),
            std::string::npos)
      << error_of(a);
  EXPECT_NE(error_of(a).find("for 2Gi of memory write 2048"), std::string::npos) << error_of(a);
  json bad_policy = GpuPod({.name = "bp", .annotations = {{"hami.io/gpu-scheduler-policy", "x"}}});
  a = Post(port, "/filter", Args(bad_policy, {"n1"}));
  EXPECT_EQ(a.status, 400);
  EXPECT_NE(error_of(a).find("annotation hami.io/gpu-scheduler-policy: 'x' is not a GPU policy"),
            std::string::npos)
      << error_of(a);
  a = Post(port, "/bind", R"({"PodName":"x","Node":"n1"})");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(error_of(a), "ExtenderBindingArgs: PodNamespace: missing");
  // Go field names match ignoring case.
  a = Post(port, "/bind", R"({"podname":"nope","podnamespace":"default","node":"n1"})");
  EXPECT_EQ(a.status, 200);
  EXPECT_NE(a.Json().value("Error", "").find("binding pod default/nope"), std::string::npos);
  // Over 1 MiB.
  std::string big = R"({"Pod":{"metadata":{"name":")" + std::string(1 << 20, 'x') + R"("}}})";
  a = Post(port, "/filter", big);
  EXPECT_EQ(a.status, 413);
  EXPECT_EQ(error_of(a), "request body over 1048576 bytes");
  {
    httplib::Client c("127.0.0.1", port);
    auto res = c.Post(
        "/filter",
        [&](size_t offset, httplib::DataSink& sink) {
          if (offset >= big.size()) {
            sink.done();
            return true;
          }
          sink.write(big.data() + offset, std::min<size_t>(65536, big.size() - offset));
          return true;
        },
        "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 413) << "chunked";
  }
  EXPECT_EQ(Get(port, "/nope").status, 404);
  EXPECT_EQ(Get(port, "/filter").status, 405);
  // Still serving.
  json pod = AddPod({.name = "fine"});
  a = Post(port, "/filter", Args(pod, {"n1"}));
  EXPECT_EQ(a.status, 200) << a.body;
}

TEST_F(SchedulerIntegration, MalformedAnnotationsAreCountedAndTakenAsAbsent) {
  AddNode({.name = "good", .gpus = 1});
  json bad_node = GpuNode({.name = "bad", .gpus = 1});
  bad_node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "[{\"id\":";
  bad_node["metadata"]["annotations"]["hami.io/node-nvidia-score"] = "not json";
  ASSERT_TRUE(api_->CreateObject(kube::kNodes, bad_node).ok());
  json bad_pod = RunningGpuPod({.name = "garbled"}, "good", {});
  bad_pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-good-0,NVIDIA:;";
  ASSERT_TRUE(api_->CreateObject(kube::kPods, bad_pod).ok());
  Daemon* d = StartDaemon(Options());
  json pod = AddPod({.name = "p", .mem_mib = 1000});
  auto r = sim::kube::ParseExtenderFilterResult(
      Post(d->port(), "/filter", Args(pod, {"good", "bad"})).Json());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node_names, std::vector<std::string>{"good"});
  EXPECT_EQ(r->failed_and_unresolvable_nodes["bad"],
            "no GPUs registered (hami.io/node-nvidia-register)");
  const auto stats = d->scheduler().state().stats();
  EXPECT_EQ(stats.bad_node_annotations, 2u);
  EXPECT_EQ(stats.bad_pod_annotations, 1u);
  EXPECT_TRUE(d->scheduler().state().Shares().empty());
  const std::string metrics = Get(d->metrics_port(), "/metrics").body;
  EXPECT_NE(metrics.find("hami_scheduler_bad_annotations_total{object=\"node\"} 2"),
            std::string::npos);
  EXPECT_NE(metrics.find("hami_scheduler_bad_annotations_total{object=\"pod\"} 1"),
            std::string::npos);
}

TEST_F(SchedulerIntegration, ReadyOnlyOnceTheInformersHaveSynced) {
  AddNode({.name = "n1"});
  sim::kube::Faults slow;
  slow.latency = std::chrono::milliseconds(800);
  api_->SetFaults(slow);
  Daemon* d = StartDaemon(Options(), /*wait_ready=*/false);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(Get(d->port(), "/healthz").status, 200);
  // The first lists take at least the injected latency.
  EXPECT_EQ(Get(d->port(), "/readyz").status, 503);
  json pod = GpuPod({.name = "early"});
  HttpAnswer a = Post(d->port(), "/filter", Args(pod, {"n1"}));
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.body.find("hami-scheduler is not ready"), std::string::npos);
  ASSERT_TRUE(d->WaitReady(SteadyClock::now() + std::chrono::seconds(30)));
  api_->SetFaults({});
  EXPECT_EQ(Get(d->port(), "/readyz").status, 200);
}

TEST_F(SchedulerIntegration, MetricsPassPromtool) {
  AddNode({.name = "n1", .gpus = 2});
  ASSERT_TRUE(api_->CreateObject(kube::kResourceQuotas,
                                 {{"metadata", {{"name", "q"}, {"namespace", "default"}}},
                                  {"spec",
                                   {{"hard",
                                     {{"limits.nvidia.com/gpumem", "50000"},
                                      {"limits.nvidia.com/gpucores", "300"}}}}}})
                  .ok());
  AddRunningPod({.name = "r", .mem_mib = 3000, .cores = 30}, "n1",
                {{{GpuUuid("n1", 1), "NVIDIA", 3000, 30}}});
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 1));
  json pod = AddPod({.name = "p"});
  Post(d->port(), "/filter", Args(pod, {"n1"}));
  Post(d->port(), "/bind", "{}");
  HttpAnswer m = Get(d->metrics_port(), "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(Get(d->port(), "/metrics").status, 200);
  for (const char* line :
       {"hami_gpu_memory_limit_bytes{node=\"n1\",device_uuid=\"GPU-n1-0\",device_index=\"0\","
        "device_type=\"NVIDIA-A100-SXM4-40GB\"} 17179869184",
        "hami_gpu_memory_allocated_bytes{node=\"n1\",device_uuid=\"GPU-n1-1\",device_index=\"1\","
        "device_type=\"NVIDIA-A100-SXM4-40GB\"} 3145728000",
        "hami_gpu_shared_count{node=\"n1\",device_uuid=\"GPU-n1-1\",device_index=\"1\","
        "device_type=\"NVIDIA-A100-SXM4-40GB\"} 1",
        "hami_gpu_core_allocated_ratio{node=\"n1\",device_uuid=\"GPU-n1-1\",device_index=\"1\","
        "device_type=\"NVIDIA-A100-SXM4-40GB\"} 0.3",
        "hami_vgpu_memory_allocated_bytes{namespace=\"default\",node=\"n1\",pod=\"r\","
        "container_index=\"0\",device_uuid=\"GPU-n1-1\"} 3145728000",
        "hami_resource_quota_used{namespace=\"default\",resource=\"limits.nvidia.com/gpumem\"} "
        "3000",
        "hami_resource_quota_limit{namespace=\"default\",resource=\"limits.nvidia.com/gpucores\"} "
        "300",
        "hami_scheduler_filter_duration_seconds_count 1",
        "hami_scheduler_bind_failures_total{reason=\"invalid\"} 1",
        "hami_scheduler_requests_total{verb=\"bind\",code=\"400\"} 1", "hami_scheduler_ready 1"}) {
    EXPECT_NE(m.body.find(line), std::string::npos) << line;
  }
  if (access("/usr/bin/promtool", X_OK) != 0 &&
      std::system("command -v promtool >/dev/null") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus; scripts/setup.sh installs "
                    "it)";
  }
  TempDir dir("hami-sched");
  const std::string file = dir.path() + "/metrics.txt";
  std::ofstream(file) << m.body;
  const std::string cmd = "promtool check metrics < " + file + " > " + dir.path() + "/out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out(dir.path() + "/out");
  std::string report((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  // Exit 3 is lint findings only (the text parsed). The one accepted finding is HAMi's own
  // name hami_gpu_shared_count, which a gauge ending in _count trips; anything else fails.
  ASSERT_TRUE(WIFEXITED(rc)) << report;
  if (WEXITSTATUS(rc) == 3) {
    std::istringstream lines(report);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      EXPECT_EQ(line.rfind("hami_gpu_shared_count non-histogram and non-summary metrics should "
                           "not have \"_count\" suffix",
                           0),
                0u)
          << line;
    }
  } else {
    EXPECT_EQ(WEXITSTATUS(rc), 0) << report;
  }
}

TEST_F(SchedulerIntegration, ServesHttpsWithTheGivenCertificate) {
  TempDir dir("hami-sched");
  const std::string cert = dir.path() + "/tls.crt";
  const std::string key = dir.path() + "/tls.key";
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl could not make a certificate";
  AddNode({.name = "n1"});
  DaemonOptions o = Options();
  o.server.cert_file = cert;
  o.server.key_file = key;
  Daemon* d = StartDaemon(o);
  ASSERT_NE(d, nullptr);
  httplib::SSLClient c("127.0.0.1", d->port());
  c.set_ca_cert_path(cert.c_str());
  c.enable_server_certificate_verification(true);
  json pod = AddPod({.name = "p"});
  auto res = c.Post("/filter", Args(pod, {"n1"}), "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  auto r = sim::kube::ParseExtenderFilterResult(json::parse(res->body));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node_names, std::vector<std::string>{"n1"});

  DaemonOptions half = Options();
  half.server.cert_file = cert;
  auto bad = Daemon::Start(Config(), half);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("--cert-file and --key-file: HTTPS needs both"),
            std::string::npos);
}

// ---- the webhook route -------------------------------------------------------------------------

json AdmissionReview(const json& pod, const std::string& ns) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "u-1"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
            {"namespace", ns},
            {"operation", "CREATE"},
            {"object", pod}}}};
}

TEST_F(SchedulerIntegration, WebhookIsServedWithTheNamespacesLabelsAndQuotaFromTheCluster) {
  AddNode({.name = "n1", .gpus = 2});
  ASSERT_TRUE(
      api_->CreateObject(
              kube::kNamespaces,
              {{"metadata", {{"name", "quiet"}, {"labels", {{"hami.io/webhook", "ignore"}}}}}})
          .ok());
  ASSERT_TRUE(api_->CreateObject(kube::kResourceQuotas,
                                 {{"metadata", {{"name", "gpu-quota"}, {"namespace", "default"}}},
                                  {"spec", {{"hard", {{"limits.nvidia.com/gpumem", "5000"}}}}}})
                  .ok());
  AddRunningPod({.name = "old", .mem_mib = 4000}, "n1", {{{GpuUuid("n1", 0), "NVIDIA", 4000, 0}}});
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(WaitShares(d, 1));
  auto review = [&](const json& pod, const std::string& ns) {
    HttpAnswer a = Post(d->port(), "/webhook", AdmissionReview(pod, ns).dump());
    EXPECT_EQ(a.status, 200) << a.body;
    return a.Json()["response"];
  };
  json fits = GpuPod({.name = "fits", .mem_mib = 1000, .scheduler_name = ""});
  json r = review(fits, "default");
  EXPECT_EQ(r.value("uid", ""), "u-1");
  EXPECT_TRUE(r.value("allowed", false)) << r.dump();
  EXPECT_EQ(r.value("patchType", ""), "JSONPatch");
  json over = GpuPod({.name = "over", .mem_mib = 2000, .scheduler_name = ""});
  r = review(over, "default");
  EXPECT_FALSE(r.value("allowed", true)) << r.dump();
  EXPECT_NE(r["status"].value("message", "").find("gpu-quota"), std::string::npos) << r.dump();
  // The namespace's label skips the pod: allowed, nothing changed.
  r = review(over, "quiet");
  EXPECT_TRUE(r.value("allowed", false)) << r.dump();
  EXPECT_FALSE(r.contains("patch")) << r.dump();
  HttpAnswer bad = Post(d->port(), "/webhook", "{}");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.Json().value("Error", "").find("AdmissionReview"), std::string::npos) << bad.body;
}

TEST_F(SchedulerIntegration, DraWebhookRewritesPodsThroughTheApiServerAndKeepsTheQuota) {
  ASSERT_TRUE(api_->CreateObject(kube::kResourceQuotas,
                                 {{"metadata", {{"name", "gpu-quota"}, {"namespace", "default"}}},
                                  {"spec", {{"hard", {{"limits.nvidia.com/gpumem", "7000"}}}}}})
                  .ok());
  DaemonOptions o = Options();
  o.webhook_mode = webhook::WebhookMode::kDra;
  Daemon* d = StartDaemon(o);
  ASSERT_NE(d, nullptr);
  json hook = {
      {"name", "webhook.hami.io"},
      {"clientConfig", {{"url", "http://127.0.0.1:" + std::to_string(d->port()) + "/webhook"}}},
      {"rules", json::array({{{"operations", {"CREATE"}},
                              {"apiGroups", {""}},
                              {"apiVersions", {"v1"}},
                              {"resources", {"pods"}}}})},
      {"sideEffects", "NoneOnDryRun"},
      {"admissionReviewVersions", {"v1"}},
      {"failurePolicy", "Fail"},
      {"timeoutSeconds", 10}};
  ASSERT_TRUE(api_->CreateObject(
                      kube::kMutatingWebhookConfigurations,
                      {{"metadata", {{"name", "hami-webhook"}}}, {"webhooks", json::array({hook})}})
                  .ok());
  auto pod = [](const std::string& memory) {
    return json{{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"generateName", "train-"}, {"namespace", "default"}}},
                {"spec",
                 {{"containers", json::array({{{"name", "main"},
                                               {"image", "cuda:12"},
                                               {"resources",
                                                {{"limits",
                                                  {{"nvidia.com/gpumem", memory},
                                                   {"nvidia.com/gpucores", "30"}}}}}}})}}}};
  };
  // A generateName pod: rewritten by the webhook as the API server calls it.
  auto created = client_->Create(kube::kPods, "default", pod("3000"));
  ASSERT_TRUE(created.ok()) << created.error().message();
  const json& stored = *created;
  EXPECT_EQ(stored["metadata"]["labels"]["hami.io/dra"], "true");
  const json& ctr = stored["spec"]["containers"][0];
  EXPECT_FALSE(ctr["resources"].contains("limits") &&
               ctr["resources"]["limits"].contains("nvidia.com/gpumem"))
      << ctr.dump();
  EXPECT_EQ(ctr["resources"]["claims"], json::array({{{"name", "hami-main"}}}));
  ASSERT_EQ(stored["spec"]["resourceClaims"].size(), 1u);
  const std::string name = stored["spec"]["resourceClaims"][0]["resourceClaimTemplateName"];
  EXPECT_EQ(name, webhook::ClaimTemplate("default", 1, 3000, 30, {})["metadata"]["name"]);
  // The template exists, with the request's shape.
  auto tmpl = client_->Get(kube::kResourceClaimTemplates, "default", name);
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message();
  EXPECT_EQ((*tmpl)["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"],
            json({{"memory", "3000Mi"}, {"cores", "30"}}));

  // A second pod of the same shape shares the template (found, not created again).
  auto same = client_->Create(kube::kPods, "default", pod("3000"));
  ASSERT_TRUE(same.ok()) << same.error().message();
  EXPECT_EQ((*same)["spec"]["resourceClaims"][0]["resourceClaimTemplateName"], name);

  // The scheduler's view counts the DRA pods against the quota: a third 3000 MiB is refused.
  ASSERT_TRUE(ViewWait(
      d, [&] { return d->scheduler().state().QuotaFor("default").second.memory_mib == 6000; },
      std::chrono::seconds(10)));
  auto over = client_->Create(kube::kPods, "default", pod("3000"));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message().find("GPU quota exceeded: namespace default: "
                                        "limits.nvidia.com/gpumem of ResourceQuota gpu-quota is "
                                        "7000 MiB, 6000 are used and the pod needs 3000"),
            std::string::npos)
      << over.error().message();

  // A template of that name holding another spec: the pod is refused, naming it.
  json other = webhook::ClaimTemplate("default", 1, 500, 30, {});
  const std::string other_name = other["metadata"]["name"];
  other["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] =
      "600Mi";
  ASSERT_TRUE(api_->CreateObject(kube::kResourceClaimTemplates, other).ok());
  auto refused = client_->Create(kube::kPods, "default", pod("500"));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("ResourceClaimTemplate default/" + other_name),
            std::string::npos)
      << refused.error().message();
  EXPECT_NE(refused.error().message().find("exists with another spec"), std::string::npos)
      << refused.error().message();
}

// ---- handshake -------------------------------------------------------------------------------

TEST_F(SchedulerIntegration, HandshakeRequestsRenewsAndMarksANodeWithoutGpusDeleted) {
  AddNode({.name = "plugged", .gpus = 1});
  GpuNodeSpec gone_spec{.name = "unplugged", .gpus = 1};
  json gone = GpuNode(gone_spec);
  gone["status"]["allocatable"]["nvidia.com/gpu"] = "0";
  ASSERT_TRUE(api_->CreateObject(kube::kNodes, gone).ok());
  Daemon* d = StartDaemon(Options());
  ASSERT_TRUE(ViewWait(
      d, [&] { return d->scheduler().state().NodeNames().size() == 2; }, std::chrono::seconds(5)));
  kube::WallTime clock = *kube::ParseTime("2024-01-23T04:30:04Z");
  HandshakeOptions ho;
  ho.now = [&clock] { return clock; };
  HandshakeLoop loop(*client_, d->scheduler().state(), d->metrics(), ho);
  auto handshake = [&](const std::string& node) {
    return (*api_->GetObject(kube::kNodes, "", node))["metadata"]["annotations"].value(
        "hami.io/node-handshake", "");
  };
  auto seen = [&](const std::string& node, const std::string& value) {
    return ViewWait(
        d,
        [&] {
          auto info = d->scheduler().state().Node(node);
          return info && info->handshake &&
                 kube::EncodeHandshake(info->handshake->state, info->handshake->time) == value;
        },
        std::chrono::seconds(5));
  };
  EXPECT_EQ(loop.RunOnce(), 2);
  EXPECT_EQ(handshake("plugged"), "Requesting_2024-01-23 04:30:04");
  ASSERT_TRUE(seen("plugged", "Requesting_2024-01-23 04:30:04"));
  ASSERT_TRUE(seen("unplugged", "Requesting_2024-01-23 04:30:04"));
  // Pending: nothing written.
  clock += std::chrono::seconds(30);
  EXPECT_EQ(loop.RunOnce(), 0);
  // Expired: the node with GPUs is asked again and stays usable; the other is marked Deleted.
  clock += std::chrono::seconds(31);
  EXPECT_EQ(loop.RunOnce(), 2);
  EXPECT_EQ(handshake("plugged"), "Requesting_2024-01-23 04:31:05");
  EXPECT_EQ(handshake("unplugged"), "Deleted_2024-01-23 04:31:05");
  ASSERT_TRUE(seen("unplugged", "Deleted_2024-01-23 04:31:05"));
  json pod = AddPod({.name = "p"});
  auto r = sim::kube::ParseExtenderFilterResult(
      Post(d->port(), "/filter", Args(pod, {"plugged", "unplugged"})).Json());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node_names, std::vector<std::string>{"plugged"});
  EXPECT_NE(r->failed_and_unresolvable_nodes["unplugged"].find("did not answer the handshake"),
            std::string::npos);
  // A Deleted node is left so while it allocates no GPU.
  clock += std::chrono::seconds(61);
  EXPECT_EQ(loop.RunOnce(), 1);
  EXPECT_EQ(handshake("unplugged"), "Deleted_2024-01-23 04:31:05");
}

TEST(Handshake, DecisionRules) {
  const kube::WallTime t = *kube::ParseTime("2024-01-23T04:30:04Z");
  const std::chrono::seconds timeout(60);
  using HS = kube::HandshakeState;
  EXPECT_EQ(DecideHandshake(std::nullopt, t, 8, timeout), HandshakeAction::kRequest);
  EXPECT_EQ(DecideHandshake(kube::Handshake{HS::kReported, t}, t, 8, timeout),
            HandshakeAction::kRequest);
  EXPECT_EQ(DecideHandshake(kube::Handshake{HS::kRequesting, t}, t + std::chrono::seconds(59), 0,
                            timeout),
            HandshakeAction::kNone);
  EXPECT_EQ(DecideHandshake(kube::Handshake{HS::kRequesting, t}, t + std::chrono::seconds(60), 8,
                            timeout),
            HandshakeAction::kRequest);
  EXPECT_EQ(DecideHandshake(kube::Handshake{HS::kRequesting, t}, t + std::chrono::seconds(60), 0,
                            timeout),
            HandshakeAction::kMarkDeleted);
  EXPECT_EQ(DecideHandshake(kube::Handshake{HS::kDeleted, t}, t, 0, timeout),
            HandshakeAction::kNone);
  EXPECT_EQ(DecideHandshake(kube::Handshake{HS::kDeleted, t}, t, 8, timeout),
            HandshakeAction::kRequest);
}

TEST_F(SchedulerIntegration, LeaderElectionRunsTheHandshakeOnOneReplica) {
  AddNode({.name = "n1", .gpus = 1});
  DaemonOptions o = Options();
  o.handshake_enabled = true;
  o.leader_elect = true;
  o.lease_namespace = "default";
  o.leader_identity = "replica-a";  // two replicas in one process need names of their own
  Daemon* a = StartDaemon(o);
  o.leader_identity = "replica-b";
  Daemon* b = StartDaemon(o);
  ASSERT_TRUE(WaitUntil([&] { return a->metrics().leader.load() || b->metrics().leader.load(); },
                        std::chrono::seconds(20)));
  EXPECT_NE(a->metrics().leader.load(), b->metrics().leader.load());
  EXPECT_TRUE(WaitUntil(
      [&] {
        return (*api_->GetObject(kube::kNodes, "", "n1"))["metadata"]["annotations"].contains(
            "hami.io/node-handshake");
      },
      std::chrono::seconds(10)));
}

}  // namespace
}  // namespace hami::scheduler
