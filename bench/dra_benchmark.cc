// hami_bench_dra: the DRA driver's node side as the kubelet meets it. The simulated API server
// runs in this process; the real hami-dra-plugin (build/bin) runs as a child process on a
// simulated h100-80g:8, and this process plays the kubelet with a gRPC client on the plugin's
// dra.sock (k8s.io.kubelet.pkg.apis.dra.v1).
//
// 1. Start: the API server (a Node, a namespace), the plugin; wait for its "serving" line and
//    for its ResourceSlice in the API server (the 8 GPUs, generation 1).
// 2. Claims: C ResourceClaims created as a user does and allocated through their status as the
//    scheduler writes it (one result each: 3000 MiB and 10 cores of hami-gpu-<i mod 8>, a share
//    ID), before any is prepared.
// 3. Prepare: one NodePrepareResources per claim, one after another, each timed by the client
//    from the call to its answer. The plugin reads each claim from the API server (one GET)
//    through a client with a rate limiter (50 requests/s, burst 100: --kube-qps, --kube-burst,
//    passed to it): before each call the benchmark waits until a model of that bucket, empty
//    when the plugin became ready, holds a token again, so that no call waits for the limiter.
//    Every answer is checked: no error, one device, its CDI device ID, the limits file.
// 4. Repeat: NodePrepareResources again for every claim (the kubelet does after its restart):
//    answered from the plugin's checkpoint, without the API server.
// 5. Health: for G GPUs, one after another, an Xid 79 recorded on the GPU in the simulated
//    machine's state (as `hami sim xid` does), timed from the injection to the moment a watch of
//    resourceslices in this process receives the rewritten slice with that GPU tainted (the
//    plugin's NVML event watcher, its slice loop's GET, PUT, and the API server's watch).
//    Between two changes the benchmark waits for the rate limiter's bucket to refill.
// 6. Unprepare: one NodeUnprepareResources per claim, timed; every file of the claim is then
//    checked gone.
// A table on stdout and the same figures as JSON (<this binary's dir>/dra.json, or --json).
// The goal (NodePrepareResources p99 <= 10 ms over 100 claims) is reported, never enforced: the
// exit status is 0 when every phase ran (or the run was skipped: the plugin needs root), 1
// otherwise, 2 on bad flags.
//
// usage: hami_bench_dra [--quick] [--claims N] [--health-changes N] [--json PATH]
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.h"
#include "draapi/dra_v1.grpc.pb.h"
#include "harness.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "sim/state.h"
#include "support/subprocess.h"

namespace hami::bench {
namespace {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
using nlohmann::json;

constexpr char kProgram[] = "hami_bench_dra";
constexpr char kUsage[] =
    "usage: hami_bench_dra [--quick] [--claims N] [--health-changes N] [--json PATH]\n"
    "  hami-dra-plugin on a simulated h100-80g:8 with the kubelet's gRPC calls:\n"
    "  NodePrepareResources p50/p99 over N claims (100) against the 10 ms goal, the repeat\n"
    "  from the checkpoint, NodeUnprepareResources, and the ResourceSlice's publication after\n"
    "  a GPU turns unhealthy (N GPUs, 8).\n"
    "  --quick              a short run: 10 claims, 2 health changes\n";
constexpr char kNode[] = "bench-node";
constexpr char kNamespace[] = "bench";
constexpr char kDriver[] = "hami-core-gpu.project-hami.io";
constexpr char kProfile[] = "h100-80g:8";
constexpr int kGpus = 8;
constexpr int kGoalClaims = 100;
constexpr double kGoalP99Ms = 10;
// The plugin's API client rate limit: its defaults (--kube-qps, --kube-burst), passed to it.
constexpr double kClientQps = 50;
constexpr double kClientBurst = 100;
// Requests a slice sync makes at most (list the slices, read the Node, write the slice), with
// one to spare.
constexpr double kSyncRequests = 4;

struct Options {
  CommonOptions common;
  int claims = kGoalClaims;
  int health_changes = kGpus;
};

std::optional<Options> Parse(int argc, char** argv) {
  Options o;
  FlagReader flags(argc, argv, kProgram, kUsage, &o.common);
  while (flags.Next()) {
    std::string_view v;
    if (flags.flag() == "--claims" || flags.flag() == "--health-changes") {
      const bool claims = flags.flag() == "--claims";
      if (!flags.TakeValue(&v)) return std::nullopt;
      const int n = std::atoi(std::string(v).c_str());
      const int max = claims ? 1000 : kGpus;
      if (n < 1 || n > max) {
        std::fprintf(stderr, "%s: %s: must be 1..%d\n", kProgram,
                     claims ? "--claims" : "--health-changes", max);
        return std::nullopt;
      }
      (claims ? o.claims : o.health_changes) = n;
    } else {
      flags.PrintUnknown();
      return std::nullopt;
    }
  }
  if (flags.failed()) return std::nullopt;
  if (o.common.quick) {
    o.claims = std::min(o.claims, 10);
    o.health_changes = std::min(o.health_changes, 2);
  }
  return o;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SleepUntilNs(int64_t t) {
  const int64_t now = NowNs();
  if (t > now) std::this_thread::sleep_for(std::chrono::nanoseconds(t - now));
}

// A model of the plugin's client-side token bucket: `qps` tokens a second up to `burst`. The
// benchmark charges it with the requests it causes and waits for tokens before the next.
class BucketModel {
 public:
  BucketModel(double qps, double burst, int64_t empty_at_ns)
      : qps_(qps), burst_(burst), at_ns_(empty_at_ns) {}
  // When the bucket holds `n` tokens.
  int64_t When(double n) const {
    if (tokens_ >= n) return at_ns_;
    return at_ns_ + int64_t(std::ceil((n - tokens_) / qps_ * 1e9));
  }
  void Take(double n, int64_t t) {
    tokens_ = std::min(burst_, tokens_ + double(t - at_ns_) / 1e9 * qps_) - n;
    at_ns_ = t;
  }

 private:
  double qps_, burst_;
  double tokens_ = 0;
  int64_t at_ns_;
};

std::string ClaimName(int i) { return "claim-" + std::to_string(i); }
std::string GpuName(int i) { return "hami-gpu-" + std::to_string(i); }

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// Whether the slice lists device `name` with a taint.
bool Tainted(const json& slice, const std::string& device) {
  const json* devices = nullptr;
  if (auto s = slice.find("spec"); s != slice.end() && s->is_object()) {
    if (auto d = s->find("devices"); d != s->end() && d->is_array()) devices = &*d;
  }
  if (devices == nullptr) return false;
  for (const json& d : *devices) {
    if (!d.is_object() || d.value("name", "") != device) continue;
    auto t = d.find("taints");
    return t != d.end() && t->is_array() && !t->empty();
  }
  return false;
}

struct Figures {
  std::string skipped;
  std::string error;
  int claims = 0;
  std::vector<int64_t> prepare_ns, repeat_ns, unprepare_ns, publish_ns;
  int64_t start_ns = 0;  // plugin start to its slice in the API server
  int plugin_exit_status = -1;
};

class Run {
 public:
  Run(const Options& o, Figures* f) : o_(o), f_(f) {}

  void Go() {
    if (!dir_.ok()) return Fail("cannot make a temporary directory");
    state_ = dir_.File("sim.state");
    setenv("HAMI_SIM_STATE", state_.c_str(), 1);
    setenv("HAMI_SIM_PROFILE", kProfile, 1);
    if (!StartApi() || !StartPlugin() || !MakeClaims()) return;
    if (!Prepare(/*repeat=*/false) || !Prepare(/*repeat=*/true)) return;
    if (!Health() || !Unprepare()) return;
    plugin_->Kill(SIGTERM);
    f_->plugin_exit_status = plugin_->Wait(30000);
    if (f_->plugin_exit_status != 0) {
      Fail("hami-dra-plugin exited with " + std::to_string(f_->plugin_exit_status) +
           " on SIGTERM (log: " + dir_.File("plugin.log") + ")");
    }
  }

  ~Run() {
    if (plugin_ != nullptr) plugin_->Kill(SIGKILL);
    client_.reset();
    if (api_ != nullptr) api_->Stop();
  }

 private:
  void Fail(const std::string& why) {
    if (f_->error.empty()) f_->error = why;
  }

  bool StartApi() {
    auto api = sim::kube::ApiServer::Start({});
    if (!api.ok()) return Fail("API server: " + api.error().message()), false;
    api_ = std::move(api).value();
    kube::Config c;
    c.server = api_->url();
    c.source = kProgram;
    kube::ClientOptions co;
    co.qps = 0;  // this process's own client is not the one measured
    auto client = kube::Client::Create(c, co);
    if (!client.ok()) return Fail("API client: " + client.error().message()), false;
    client_ = std::move(client).value();
    if (!api_->WriteKubeconfig(dir_.File("kubeconfig")).ok() ||
        !api_->CreateObject(kube::kNodes, {{"metadata", {{"name", kNode}}}}).ok() ||
        !api_->CreateObject(kube::kNamespaces, {{"metadata", {{"name", kNamespace}}}}).ok()) {
      return Fail("cannot prepare the API server"), false;
    }
    return true;
  }

  bool StartPlugin() {
    for (const char* d : {"reg", "plugins", "cdi", "hook", "lock"}) {
      std::error_code ec;
      std::filesystem::create_directories(dir_.File(d), ec);
      if (ec) return Fail("creating " + dir_.File(d) + ": " + ec.message()), false;
    }
    // The plugin installs it into <hook>/vgpu/ and checks it is a regular file; nothing loads
    // it here.
    if (!(std::ofstream(dir_.File("libvgpu.so")) << "ELF")) {
      return Fail("cannot write " + dir_.File("libvgpu.so")), false;
    }
    const std::string build = SelfDir() + "/..";
    const int64_t t0 = NowNs();
    plugin_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{
            "/bin/sh", "-c", "exec \"$0\" \"$@\" 2>" + dir_.File("plugin.log"),
            build + "/bin/hami-dra-plugin", "--node-name=" + std::string(kNode),
            "--kubeconfig=" + dir_.File("kubeconfig"), "--plugins-registry-dir=" + dir_.File("reg"),
            "--plugins-dir=" + dir_.File("plugins"), "--cdi-dir=" + dir_.File("cdi"),
            "--hook-path=" + dir_.File("hook"), "--lock-parent=" + dir_.File("lock"),
            "--kube-qps=" + std::to_string(int(kClientQps)),
            "--kube-burst=" + std::to_string(int(kClientBurst)),
            "--vgpu-library=" + dir_.File("libvgpu.so"),
            "--nvml-library=" + build + "/lib/sim/libnvidia-ml.so.1",
            "--cuda-library=" + build + "/lib/sim/libcuda.so.1"},
        std::map<std::string, std::string>{{"HAMI_SIM_STATE", state_},
                                           {"HAMI_SIM_PROFILE", kProfile},
                                           {"DP_DISABLE_HEALTHCHECKS", ""},
                                           {"DP_ENABLE_HEALTHCHECKS", ""}});
    if (!plugin_->WaitForLine("hami-dra-plugin: serving", 60000)) {
      return Fail("hami-dra-plugin did not start (log: " + dir_.File("plugin.log") + ")"), false;
    }
    // Its first slice: the 8 GPUs, published at start.
    const bool published = testing::PollUntil(
        [&] {
          kube::ListOptions lo;
          lo.field_selector = "spec.nodeName=" + std::string(kNode);
          auto list = client_->List(kube::kResourceSlices, "", lo);
          if (!list.ok()) return false;
          for (const json& s : list->value("items", json::array())) {
            const json spec = s.value("spec", json::object());
            if (spec.value("driver", "") == kDriver &&
                spec.value("devices", json::array()).size() == size_t(kGpus)) {
              return true;
            }
          }
          return false;
        },
        60000, 2000);
    if (!published) return Fail("the plugin's ResourceSlice never appeared"), false;
    f_->start_ns = NowNs() - t0;
    bucket_ = std::make_unique<BucketModel>(kClientQps, kClientBurst, NowNs());
    channel_ = grpc::CreateChannel("unix:" + dir_.File("plugins") + "/" + kDriver + "/dra.sock",
                                   grpc::InsecureChannelCredentials());
    stub_ = drav1::DRAPlugin::NewStub(channel_);
    return true;
  }

  bool MakeClaims() {
    for (int i = 0; i < o_.claims; ++i) {
      const json claim = {
          {"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", ClaimName(i)}, {"namespace", kNamespace}}},
          {"spec",
           {{"devices",
             {{"requests",
               {{{"name", "gpu"},
                 {"exactly",
                  {{"deviceClassName", kDriver},
                   {"capacity", {{"requests", {{"memory", "3000Mi"}, {"cores", "10"}}}}}}}}}}}}}}};
      auto created = client_->Create(kube::kResourceClaims, kNamespace, claim);
      if (!created.ok())
        return Fail("claim " + ClaimName(i) + ": " + created.error().message()), false;
      json allocated = *created;
      char share[40];
      std::snprintf(share, sizeof(share), "0b6f8c2e-6d1a-4f0e-9a55-%012d", i);
      allocated["status"]["allocation"] = {
          {"devices",
           {{"results",
             {{{"request", "gpu"},
               {"driver", kDriver},
               {"pool", kNode},
               {"device", GpuName(i % kGpus)},
               {"shareID", share},
               {"consumedCapacity", {{"memory", "3000Mi"}, {"cores", "10"}}}}}}}}};
      allocated["status"]["reservedFor"] = {
          {{"resource", "pods"}, {"name", "pod-" + std::to_string(i)}, {"uid", "pod-uid"}}};
      auto updated = client_->Update(kube::kResourceClaims, allocated, "status");
      if (!updated.ok()) {
        return Fail("claim " + ClaimName(i) + " status: " + updated.error().message()), false;
      }
      uids_.push_back((*updated)["metadata"]["uid"].get<std::string>());
      shares_.push_back(share);
    }
    f_->claims = o_.claims;
    return true;
  }

  template <typename Request>
  void AddClaim(Request* req, int i) {
    auto* c = req->add_claims();
    c->set_namespace_(kNamespace);
    c->set_name(ClaimName(i));
    c->set_uid(uids_[size_t(i)]);
  }

  bool Prepare(bool repeat) {
    std::vector<int64_t>& out = repeat ? f_->repeat_ns : f_->prepare_ns;
    for (int i = 0; i < o_.claims; ++i) {
      if (!repeat) {
        // One GET of the claim: wait for its token.
        const int64_t at = bucket_->When(1);
        SleepUntilNs(at);
        bucket_->Take(1, std::max(at, NowNs()));
      }
      drav1::NodePrepareResourcesRequest req;
      AddClaim(&req, i);
      drav1::NodePrepareResourcesResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
      const int64_t t0 = NowNs();
      const grpc::Status s = stub_->NodePrepareResources(&ctx, req, &resp);
      const int64_t t1 = NowNs();
      const std::string what =
          std::string(repeat ? "repeated " : "") + "prepare of " + ClaimName(i);
      if (!s.ok()) return Fail(what + ": " + s.error_message()), false;
      auto it = resp.claims().find(uids_[size_t(i)]);
      if (it == resp.claims().end()) return Fail(what + ": no answer for its UID"), false;
      if (!it->second.error().empty()) return Fail(what + ": " + it->second.error()), false;
      const std::string want = std::string("k8s.") + kDriver + "/claim=" + uids_[size_t(i)] + "-" +
                               GpuName(i % kGpus) + "-" + shares_[size_t(i)];
      if (it->second.devices_size() != 1 || it->second.devices(0).cdi_device_ids_size() != 1 ||
          it->second.devices(0).cdi_device_ids(0) != want) {
        return Fail(what + ": not the answer expected (" + it->second.ShortDebugString() + ")"),
               false;
      }
      if (!repeat) {
        std::ifstream limits(ClaimDir(i) + ".limits");
        std::stringstream text;
        text << limits.rdbuf();
        if (text.str().find("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n") == std::string::npos) {
          return Fail(what + ": its limits file lacks the claim's memory"), false;
        }
      }
      out.push_back(t1 - t0);
    }
    return true;
  }

  std::string ClaimDir(int i) const {
    return dir_.File("hook") + "/vgpu/containers/" + uids_[size_t(i)] + "_claim";
  }

  // The slice's resourceVersion now, to watch from.
  std::optional<std::string> SliceListVersion() {
    kube::ListOptions lo;
    lo.field_selector = "spec.nodeName=" + std::string(kNode);
    auto list = client_->List(kube::kResourceSlices, "", lo);
    if (!list.ok()) return std::nullopt;
    return list->value("metadata", json::object()).value("resourceVersion", "");
  }

  bool Health() {
    auto machine = sim::SharedState::OpenExisting(state_);
    if (!machine.ok()) return Fail("simulated machine: " + machine.error().message()), false;
    for (int g = 0; g < o_.health_changes; ++g) {
      // The slice sync's requests: wait until the bucket holds them all.
      const int64_t at = bucket_->When(kSyncRequests);
      SleepUntilNs(at);
      auto rv = SliceListVersion();
      if (!rv) return Fail("cannot list the slices"), false;
      std::atomic<int64_t> seen_ns{0};
      std::string watch_error;
      std::stop_source stop;
      kube::WatchOptions wo;
      wo.field_selector = "spec.nodeName=" + std::string(kNode);
      wo.resource_version = *rv;
      wo.timeout_seconds = 60;
      const std::string device = GpuName(g);
      std::thread watcher([&] {
        auto end = client_->Watch(
            kube::kResourceSlices, "", wo,
            [&](kube::WatchEvent&& e) {
              if (e.type != kube::WatchEventType::kModified || !Tainted(e.object, device)) {
                return true;
              }
              seen_ns.store(NowNs());
              return false;
            },
            stop.get_token());
        if (!end.ok()) watch_error = end.error().message();
      });
      const int64_t t0 = NowNs();
      Status recorded = (*machine)->RecordXid(g, 79);
      if (!recorded.ok()) {
        stop.request_stop();
        watcher.join();
        return Fail("recording an Xid on GPU " + std::to_string(g) + ": " +
                    recorded.error().message()),
               false;
      }
      watcher.join();
      bucket_->Take(kSyncRequests, std::max(at, t0));
      if (seen_ns.load() == 0) {
        return Fail("no slice with " + device + " tainted within 60 s" +
                    (watch_error.empty() ? "" : " (" + watch_error + ")")),
               false;
      }
      f_->publish_ns.push_back(seen_ns.load() - t0);
    }
    return true;
  }

  bool Unprepare() {
    for (int i = 0; i < o_.claims; ++i) {
      drav1::NodeUnprepareResourcesRequest req;
      AddClaim(&req, i);
      drav1::NodeUnprepareResourcesResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
      const int64_t t0 = NowNs();
      const grpc::Status s = stub_->NodeUnprepareResources(&ctx, req, &resp);
      const int64_t t1 = NowNs();
      const std::string what = "unprepare of " + ClaimName(i);
      if (!s.ok()) return Fail(what + ": " + s.error_message()), false;
      auto it = resp.claims().find(uids_[size_t(i)]);
      if (it == resp.claims().end()) return Fail(what + ": no answer for its UID"), false;
      if (!it->second.error().empty()) return Fail(what + ": " + it->second.error()), false;
      for (const std::string& p :
           {ClaimDir(i), ClaimDir(i) + ".limits", ClaimDir(i) + ".claim",
            dir_.File("cdi") + "/k8s." + kDriver + "-claim_" + uids_[size_t(i)] + ".json"}) {
        if (Exists(p)) return Fail(what + ": " + p + " is still there"), false;
      }
      f_->unprepare_ns.push_back(t1 - t0);
    }
    return true;
  }

  const Options& o_;
  Figures* f_;
  TempDir dir_{"hami-bench-dra"};
  std::string state_;
  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<testing::Subprocess> plugin_;
  std::unique_ptr<BucketModel> bucket_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<drav1::DRAPlugin::Stub> stub_;
  std::vector<std::string> uids_, shares_;
};

std::vector<std::string> LatencyRow(const std::string& name, const Percentiles& p) {
  if (p.count == 0) return {name, "-", "-", "-", "-", "0"};
  return {name,
          Duration(p.p50),
          Duration(p.p95),
          Duration(p.p99),
          Duration(p.max),
          std::to_string(p.count)};
}

int RunBenchmark(const Options& o) {
  Figures f;
  if (geteuid() != 0) {
    f.skipped = "needs root: hami-dra-plugin prepares its lock directory root-owned (euid " +
                std::to_string(geteuid()) + ")";
  } else {
    Run run(o, &f);
    run.Go();
  }
  const bool ran = f.error.empty() && f.skipped.empty();
  auto pct = [](const std::vector<int64_t>& v) {
    return v.empty() ? Percentiles{} : NearestRank(v);
  };
  const Percentiles prepare = pct(f.prepare_ns), repeat = pct(f.repeat_ns),
                    unprepare = pct(f.unprepare_ns), publish = pct(f.publish_ns);

  if (!f.skipped.empty()) std::printf("skipped: %s\n\n", f.skipped.c_str());
  if (!f.error.empty()) std::fprintf(stderr, "%s: %s\n", kProgram, f.error.c_str());
  std::printf("hami-dra-plugin on %s: %d claims, %zu health changes\n\n", kProfile, f.claims,
              f.publish_ns.size());
  PrintTable({{"call", "p50", "p95", "p99", "max", "n"},
              LatencyRow("NodePrepareResources", prepare),
              LatencyRow("NodePrepareResources (repeat)", repeat),
              LatencyRow("NodeUnprepareResources", unprepare),
              LatencyRow("slice with the taint after an Xid", publish)},
             1, 6, TrailingSpaces::kTrim);
  std::printf("\n");
  const bool full = f.claims == kGoalClaims;
  std::vector<Goal> goals = {AtMost("NodePrepareResources p99", double(prepare.p99) / 1e6, "ms",
                                    kGoalP99Ms, prepare.count > 0,
                                    std::to_string(kGoalClaims) + " claims", full)};
  std::vector<Row> rows;
  for (const Goal& g : goals) {
    rows.push_back(
        {g.name, Fixed(g.measured.get<double>(), 3) + " " + g.unit, g.goal, MeetsText(g)});
  }
  PrintTable(rows);

  Json doc;
  doc["benchmark"] = "dra";
  doc["profile"] = kProfile;
  doc["gpus"] = kGpus;
  doc["claims"] = f.claims;
  doc["health_changes"] = f.publish_ns.size();
  doc["start_to_slice_ns"] = f.start_ns;
  doc["prepare_ns"] = ToJson(prepare);
  doc["repeat_prepare_ns"] = ToJson(repeat);
  doc["unprepare_ns"] = ToJson(unprepare);
  doc["slice_publication_ns"] = ToJson(publish);
  doc["plugin_exit_status"] = f.plugin_exit_status;
  doc["client_qps"] = kClientQps;
  doc["client_burst"] = kClientBurst;
  doc["skipped"] = f.skipped;
  doc["error"] = f.error;
  Json goals_json = Json::array();
  for (const Goal& g : goals) goals_json.push_back(ToJson(g));
  doc["goals"] = goals_json;
  const std::string json_path =
      o.common.json_path.empty() ? SelfDir() + "/dra.json" : o.common.json_path;
  if (!WriteJson(json_path, doc, kProgram)) return 1;
  return ran || !f.skipped.empty() ? 0 : 1;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::Parse, hami::bench::RunBenchmark);
}
