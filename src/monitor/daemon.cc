#include "monitor/daemon.h"

#include <httplib.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "common/bind_address.h"
#include "common/prometheus.h"
#include "common/stop_signals.h"
#include "common/unique_fd.h"
#include "inventory/health.h"
#include "inventory/nvml_sampler.h"
#include "kube/event_recorder.h"
#include "kube/informer.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "log/log.h"
#include "monitor/attribution.h"
#include "monitor/claims.h"
#include "monitor/cleanup.h"
#include "monitor/feedback.h"
#include "monitor/metrics.h"
#include "monitor/regions.h"

namespace hami::monitor {

namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Error StepError(const char* step, const Error& e) {
  return Error(e.code(), std::string("step=") + step + ": " + e.message(), e.sys_errno());
}

std::string MiB(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

struct Daemon::Impl {
  DaemonOptions options;
  std::unique_ptr<inventory::NvmlSampler> sampler;
  std::unique_ptr<kube::Client> client;
  std::unique_ptr<kube::Informer> pods;
  std::unique_ptr<kube::EventRecorder> events;
  std::unique_ptr<Cleaner> cleaner;
  std::string cleanup_off_reason;
  std::unique_ptr<inventory::HealthWatcher> health;
  RegionSet regions;

  std::unique_ptr<httplib::Server> http;
  std::thread http_thread;
  int port = 0;

  std::jthread sampler_thread;
  // The sampler thread's own stop token, set by that thread when it starts (the jthread member
  // is still being assigned by Start then, so the thread must not read it).
  std::stop_token sampler_stop;
  std::atomic<bool> first_scan_done{false};
  bool stopped = false;

  prometheus::Histogram scrape_seconds;

  mutable std::mutex mu_;  // guards what follows
  std::shared_ptr<const inventory::NodeSample> sample;
  std::vector<UnaccountedProcess> unaccounted;
  // Sampler thread only: unaccounted processes of the previous tick.
  std::set<std::tuple<pid_t, std::string, UnaccountedReason>> seen_last_tick;
  // Unaccounted processes already logged, and those whose pod got its event.
  std::set<std::tuple<pid_t, std::string, UnaccountedReason>> reported;
  std::set<std::tuple<pid_t, std::string, UnaccountedReason>> evented;
  std::map<std::string, GpuHealthView> gpu_health;
  CleanupView cleanup;
  FeedbackView feedback;
  uint64_t nvml_samples = 0;
  uint64_t nvml_failures = 0;
  uint64_t events_recorded = 0;

  // uid -> namespace and name, from the informer's store (the last-known pods).
  std::map<std::string, PodRef> PodsByUid() const {
    std::map<std::string, PodRef> out;
    if (pods == nullptr) return out;
    for (const kube::ObjectPtr& o : pods->store().List()) {
      const nlohmann::json* meta = nullptr;
      if (auto it = o->find("metadata"); it != o->end() && it->is_object()) meta = &*it;
      if (meta == nullptr) continue;
      auto str = [&](const char* key) -> std::string {
        auto it = meta->find(key);
        return it != meta->end() && it->is_string() ? it->get<std::string>() : std::string();
      };
      std::string uid = str("uid");
      if (uid.empty()) continue;
      out[uid] = PodRef{str("namespace"), str("name")};
    }
    return out;
  }

  // The pods of the informer's store (the last-known pods).
  std::vector<kube::ObjectPtr> PodObjects() const {
    return pods == nullptr ? std::vector<kube::ObjectPtr>{} : pods->store().List();
  }

  Result<std::vector<std::string>> ListPodUids() {
    kube::ListOptions lo;
    lo.field_selector = "spec.nodeName=" + options.node_name;
    auto list = client->ListAll(kube::kPods, "", lo, sampler_stop);
    if (!list.ok()) return std::move(list).error();
    std::vector<std::string> uids;
    if (auto items = list->find("items"); items != list->end() && items->is_array()) {
      for (const auto& item : *items) {
        auto meta = item.find("metadata");
        if (meta == item.end() || !meta->is_object()) continue;
        auto uid = meta->find("uid");
        if (uid != meta->end() && uid->is_string()) uids.push_back(uid->get<std::string>());
      }
    }
    return uids;
  }

  void Tick(std::chrono::steady_clock::time_point now,
            std::chrono::steady_clock::time_point& next_cleanup) {
    auto fresh = std::make_shared<inventory::NodeSample>(sampler->Sample());
    if (!fresh->ok) {
      HAMI_LOG(kWarn, "event=nvml_sample_failed: %s", fresh->error.c_str());
    }

    {
      // Published before the scan, so that no scrape shows a container without the sample
      // of its GPUs.
      std::lock_guard lock(mu_);
      sample = fresh;
    }
    RegionSet::ScanReport scan = regions.Scan(options.hook_path);
    if (!scan.listed) {
      HAMI_LOG(kWarn, "event=scan_failed hook_path=%s: %s", options.hook_path.c_str(),
               scan.list_error.c_str());
    }
    for (const std::string& line : scan.new_problems) {
      HAMI_LOG(kWarn, "%s", line.c_str());
    }
    first_scan_done.store(true, std::memory_order_release);

    std::vector<RegionPtr> open = regions.regions();
    // Feedback: the first writable region of each container.
    std::vector<region::Region*> writable;
    std::set<ContainerKey> fed;
    for (const RegionPtr& r : open) {
      if (!r->writable) continue;
      r->region->SweepDeadIfDue();
      if (fed.insert(r->key).second) writable.push_back(r->region.get());
    }
    FeedbackStats fs = RunFeedbackPass(std::span<region::Region* const>(writable));

    // Unaccounted memory.
    std::vector<AccountedProcess> accounted;
    for (const RegionPtr& r : open) AppendAccounted(*r, accounted);
    std::vector<UnaccountedProcess> found;
    if (fresh->ok) {
      const std::string proc_root = options.proc_root;
      found = FindUnaccounted(*fresh, accounted, options.unaccounted_tolerance_bytes,
                              [&proc_root](pid_t pid) { return Attribute(proc_root, pid); });
    }
    // Reported only when two ticks in a row saw it: a process that ends between the NVML
    // sample and the slot read (or registers in between) is not flagged for that moment.
    {
      std::set<std::tuple<pid_t, std::string, UnaccountedReason>> now_seen;
      std::vector<UnaccountedProcess> confirmed;
      for (UnaccountedProcess& u : found) {
        auto key = std::make_tuple(u.pid, u.device_uuid, u.reason);
        now_seen.insert(key);
        if (seen_last_tick.contains(key)) confirmed.push_back(std::move(u));
      }
      seen_last_tick = std::move(now_seen);
      found = std::move(confirmed);
    }
    std::map<std::string, PodRef> pods_by_uid;
    if (!found.empty()) {
      pods_by_uid = PodsByUid();
      // A process attributed to a DRA claim's directory belongs to the claim's first user.
      const auto claims = regions.claims();
      std::vector<kube::ObjectPtr> objects;
      if (!claims.empty()) objects = PodObjects();
      for (UnaccountedProcess& u : found) {
        auto c = claims.find(u.attribution.key);
        if (c == claims.end() || !c->second) continue;
        const std::vector<ClaimUser> users = ClaimUsers(objects, *c->second);
        if (!users.empty()) u.attribution.key = {users[0].pod_uid, users[0].container};
      }
    }

    CleanupReport cleanup_report;
    bool cleaned = false;
    if (cleaner != nullptr && now >= next_cleanup) {
      cleanup_report = cleaner->Pass([this] { return ListPodUids(); }, now);
      cleaned = true;
      next_cleanup = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               options.resync_interval);
      if (!cleanup_report.listed) {
        HAMI_LOG(kWarn,
                 "event=cleanup_list_failed: %s (nothing is removed until the pod list is "
                 "resynced)",
                 cleanup_report.list_error.c_str());
      }
      for (const std::string& dir : cleanup_report.removed_dirs) {
        HAMI_LOG(kInfo, "event=cleanup_removed dir=%s", dir.c_str());
      }
      for (const Error& e : cleanup_report.errors) {
        HAMI_LOG(kWarn, "event=cleanup_error: %s", e.message().c_str());
      }
      if (cleanup_report.kept_attached > 0) {
        HAMI_LOG(kInfo, "event=cleanup_kept_attached count=%d", cleanup_report.kept_attached);
      }
    }

    std::lock_guard lock(mu_);
    if (fresh->ok) {
      ++nvml_samples;
    } else {
      ++nvml_failures;
    }
    ++feedback.passes;
    feedback.regions = fs.regions;
    feedback.active = fs.active;
    feedback.paused = fs.paused;
    feedback.switched_on = fs.switched_on;
    feedback.writes += uint64_t(fs.writes);
    feedback.errors += uint64_t(fs.errors);
    if (cleaned) {
      ++cleanup.passes;
      if (!cleanup_report.listed) ++cleanup.list_failures;
      cleanup.removed += uint64_t(cleanup_report.removed);
      cleanup.errors += cleanup_report.errors.size();
      cleanup.candidates = cleanup_report.candidates;
      cleanup.kept_attached = cleanup_report.kept_attached;
    }
    // Events: once per process, GPU and reason while it lasts.
    std::set<std::tuple<pid_t, std::string, UnaccountedReason>> still;
    for (const UnaccountedProcess& u : found) {
      auto key = std::make_tuple(u.pid, u.device_uuid, u.reason);
      still.insert(key);
      if (!reported.contains(key)) {
        const std::string who = u.attribution.key.pod_uid.empty()
                                    ? std::string("unattributed")
                                    : "pod_uid=" + u.attribution.key.pod_uid +
                                          (u.attribution.key.container.empty()
                                               ? std::string()
                                               : " container=" + u.attribution.key.container);
        HAMI_LOG(kWarn,
                 "event=unaccounted_memory pid=%d device_uuid=%s reason=%s bytes=%llu "
                 "accounted=%llu attribution=%s %s",
                 int(u.pid), u.device_uuid.c_str(), UnaccountedReasonName(u.reason),
                 static_cast<unsigned long long>(u.nvml_bytes),
                 static_cast<unsigned long long>(u.accounted_bytes),
                 AttributionSourceName(u.attribution.source), who.c_str());
        reported.insert(key);
      }
      // The event waits until the pod is known (the informer may not have synced yet).
      if (evented.contains(key)) continue;
      auto pod = pods_by_uid.find(u.attribution.key.pod_uid);
      if (events != nullptr && !u.attribution.key.pod_uid.empty() && pod != pods_by_uid.end()) {
        kube::ObjectMeta meta;
        meta.name = pod->second.pod;
        meta.ns = pod->second.ns;
        meta.uid = u.attribution.key.pod_uid;
        std::string message =
            u.reason == UnaccountedReason::kNoRegion
                ? "process " + std::to_string(u.pid) + " holds " + MiB(u.nvml_bytes) + " on GPU " +
                      u.device_uuid +
                      " that no shared region accounts for (it does not run under libvgpu.so: "
                      "a static binary, a private driver load or raw ioctls); the pod's memory "
                      "limit does not hold it"
                : "process " + std::to_string(u.pid) + " holds " + MiB(u.nvml_bytes) + " on GPU " +
                      u.device_uuid + " but its region accounts for " + MiB(u.accounted_bytes) +
                      "; the pod's memory limit does not hold the " + MiB(u.unaccounted_bytes) +
                      " difference";
        events->Record(kube::ReferenceTo("v1", "Pod", meta), kube::EventType::kWarning,
                       "UnaccountedGPUMemory", message);
        ++events_recorded;
        evented.insert(key);
      }
    }
    for (auto* set : {&reported, &evented}) {
      for (auto it = set->begin(); it != set->end();) {
        it = still.contains(*it) ? std::next(it) : set->erase(it);
      }
    }
    unaccounted = std::move(found);
  }

  void RunSampler(std::stop_token stop) {
    sampler_stop = stop;
    std::mutex m;
    std::condition_variable_any cv;
    auto next_cleanup = std::chrono::steady_clock::now();
    while (!stop.stop_requested()) {
      const auto start = std::chrono::steady_clock::now();
      Tick(start, next_cleanup);
      std::unique_lock lock(m);
      cv.wait_until(lock, stop,
                    start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                options.feedback_interval),
                    [] { return false; });
    }
  }

  std::string Scrape() {
    const auto start = std::chrono::steady_clock::now();
    MetricsInput in;
    in.node = options.node_name;
    in.version = options.version;
    std::shared_ptr<const inventory::NodeSample> s;
    {
      std::lock_guard lock(mu_);
      s = sample;
      in.unaccounted = unaccounted;
      in.health = gpu_health;
      in.cleanup = cleanup;
      in.feedback = feedback;
      in.nvml_samples = nvml_samples;
      in.nvml_failures = nvml_failures;
      in.events_recorded = events_recorded;
    }
    in.cleanup.enabled = cleaner != nullptr;
    in.sample = s.get();
    in.pods_by_uid = PodsByUid();
    in.pods_synced = pods != nullptr && pods->HasSynced();
    in.scans = regions.scans();
    in.region_errors = regions.errors();
    const int64_t now = MonotonicNs();
    // DRA claims' directories: their users among the node's pods (claims.h).
    const auto claims = regions.claims();
    std::map<ContainerKey, std::vector<ClaimUser>> claim_users;
    if (!claims.empty()) {
      const std::vector<kube::ObjectPtr> objects = PodObjects();
      for (const auto& [key, record] : claims) {
        std::vector<ClaimUser>& users = claim_users[key];
        if (!record) continue;  // unreadable: no pod can be named
        users = ClaimUsers(objects, *record);
        for (const ClaimUser& u : users) {
          in.claim_uses.push_back({record->ns, record->name, record->uid, u.pod, u.container});
        }
      }
    }
    std::set<ContainerKey> without_pod;
    for (const RegionPtr& r : regions.regions()) {
      if (auto c = claim_users.find(r->key); c != claim_users.end()) {
        if (c->second.empty()) {
          without_pod.insert(r->key);
          continue;
        }
        const node::ClaimRecord& record = *claims.at(r->key);
        RegionView v = ReadRegion(*r, s.get(), now);
        v.ns = record.ns;
        v.pod = c->second[0].pod;
        v.claim = ClaimView{record.name, record.uid, c->second[0].container};
        in.regions.push_back(std::move(v));
        continue;
      }
      auto pod = in.pods_by_uid.find(r->key.pod_uid);
      if (pod == in.pods_by_uid.end()) {
        without_pod.insert(r->key);
        continue;
      }
      RegionView v = ReadRegion(*r, s.get(), now);
      v.ns = pod->second.ns;
      v.pod = pod->second.pod;
      in.regions.push_back(std::move(v));
    }
    // Counted from the scan the regions above come from, so that the two always agree.
    const std::vector<ContainerKey> containers = regions.containers();
    in.containers = int(containers.size());
    for (const ContainerKey& k : containers) {
      // A directory without a region yet counts by its pod too.
      if (auto c = claim_users.find(k); c != claim_users.end()) {
        if (c->second.empty()) without_pod.insert(k);
      } else if (!in.pods_by_uid.contains(k.pod_uid)) {
        without_pod.insert(k);
      }
    }
    in.containers_without_pod = int(without_pod.size());
    std::string out = RenderMetrics(in);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    scrape_seconds.Observe(seconds);
    scrape_seconds.Render(out, "hami_monitor_scrape_duration_seconds",
                          "Time to build the exposition of a scrape.", "zone=\"vGPU\"");
    return out;
  }

  bool Ready() const {
    return first_scan_done.load(std::memory_order_acquire) && pods != nullptr && pods->HasSynced();
  }
};

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() { Stop(); }

Result<std::unique_ptr<Daemon>> Daemon::Start(kube::Config config, DaemonOptions options) {
  if (options.node_name.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "step=config: no node name (--node-name or $NODE_NAME)");
  }
  if (options.feedback_interval <= std::chrono::nanoseconds(0) ||
      options.resync_interval <= std::chrono::nanoseconds(0)) {
    return Error(ErrorCode::kInvalidArgument,
                 "step=config: --feedback-interval and --resync-interval must be positive");
  }
  auto bind = ParseBindAddress(options.metrics_bind, "--metrics-bind-address");
  if (!bind.ok()) return StepError("config", bind.error());

  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.options = std::move(options);
  d.options.client.user_agent = "hami-monitor";

  auto sampler = inventory::NvmlSampler::Open(d.options.nvml_library);
  if (!sampler.ok()) return StepError("nvml", sampler.error());
  d.sampler = std::move(sampler).value();

  auto client = kube::Client::Create(std::move(config), d.options.client);
  if (!client.ok()) return StepError("kube_client", client.error());
  d.client = std::move(client).value();

  kube::InformerScope scope;
  scope.field_selector = "spec.nodeName=" + d.options.node_name;
  d.pods = std::make_unique<kube::Informer>(*d.client, kube::kPods, scope);
  d.pods->Start();
  kube::EventRecorderOptions eo;
  eo.component = "hami-monitor";
  eo.instance = d.options.node_name;
  d.events = std::make_unique<kube::EventRecorder>(*d.client, eo);

  if (d.options.cleanup) {
    CleanupOptions co;
    co.hook_path = d.options.hook_path;
    co.resync_interval = d.options.resync_interval;
    auto cleaner = Cleaner::Start(co);
    if (cleaner.ok()) {
      d.cleaner = std::move(cleaner).value();
      HAMI_LOG(kInfo, "event=cleanup_enabled lock=%s resync_interval_s=%.3f",
               d.cleaner->lock_path().c_str(),
               std::chrono::duration<double>(d.options.resync_interval).count());
    } else if (cleaner.error().code() == ErrorCode::kBusy) {
      d.cleanup_off_reason = cleaner.error().message();
      HAMI_LOG(kError, "event=cleanup_disabled reason=second_monitor: %s",
               d.cleanup_off_reason.c_str());
      HAMI_LOG(kWarn,
               "event=cleanup_disabled: another hami-monitor cleans this node; this one serves "
               "metrics only (hami_monitor_cleanup_enabled 0)");
      HAMI_LOG(kInfo, "event=cleanup_disabled holder_lock=%s/vgpu/monitor.lock",
               d.options.hook_path.c_str());
    } else {
      return StepError("cleanup", cleaner.error());
    }
  } else {
    d.cleanup_off_reason = "--no-cleanup";
    HAMI_LOG(kInfo, "event=cleanup_disabled reason=flag");
  }

  if (d.options.health_checks) {
    inventory::HealthOptions ho;
    ho.nvml_library = d.options.nvml_library;
    ho.xids = inventory::XidPolicy::FromEnvironment();
    Impl* self = &d;
    ho.on_change = [self](const inventory::HealthChange& c) {
      log::Log(c.healthy ? log::Level::kInfo : log::Level::kError,
               "event=gpu_health device_uuid=%s healthy=%d reason=%s", c.uuid.c_str(),
               int(c.healthy), c.reason.c_str());
      std::lock_guard lock(self->mu_);
      self->gpu_health[c.uuid] = GpuHealthView{c.healthy, c.reason};
    };
    auto health = inventory::HealthWatcher::Start(std::move(ho));
    if (health.ok()) {
      d.health = std::move(health).value();
    } else {
      HAMI_LOG(kWarn, "event=health_off step=health: %s", health.error().message().c_str());
    }
  }

  d.http = std::make_unique<httplib::Server>();
  d.http->new_task_queue = [] { return new httplib::ThreadPool(4); };
  d.http->set_tcp_nodelay(true);
  Impl* self = &d;
  d.http->Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    res.set_content(self->Scrape(), prometheus::kContentType);
  });
  d.http->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  d.http->Get("/readyz", [self](const httplib::Request&, httplib::Response& res) {
    if (self->Ready()) {
      res.set_content("ok\n", "text/plain; charset=utf-8");
      return;
    }
    res.status = 503;
    res.set_content(self->first_scan_done.load() ? "not ready: the pod informer has not synced\n"
                                                 : "not ready: the first scan has not run\n",
                    "text/plain; charset=utf-8");
  });
  const auto& [host, want] = *bind;
  if (want == 0) {
    d.port = d.http->bind_to_any_port(host);
    if (d.port <= 0) {
      return Error(ErrorCode::kIo,
                   "step=metrics_server: --metrics-bind-address: cannot bind " + host + ":0");
    }
  } else {
    if (!d.http->bind_to_port(host, want)) {
      return Error(ErrorCode::kIo, "step=metrics_server: --metrics-bind-address: cannot bind " +
                                       host + ":" + std::to_string(want) +
                                       " (in use, or not an address of this host)");
    }
    d.port = want;
  }
  httplib::Server* server = d.http.get();
  d.http_thread = std::thread([server] { server->listen_after_bind(); });

  d.sampler_thread = std::jthread([self](std::stop_token stop) { self->RunSampler(stop); });
  HAMI_LOG(kInfo,
           "event=started node=%s hook_path=%s metrics=%s:%d feedback_interval_s=%.3f "
           "resync_interval_s=%.3f cleanup=%s nvml=%s",
           d.options.node_name.c_str(), d.options.hook_path.c_str(), host.c_str(), d.port,
           std::chrono::duration<double>(d.options.feedback_interval).count(),
           std::chrono::duration<double>(d.options.resync_interval).count(),
           d.cleaner != nullptr ? "on" : "off", d.options.nvml_library.c_str());
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

void Daemon::Stop() {
  if (impl_ == nullptr || impl_->stopped) return;
  Impl& d = *impl_;
  d.stopped = true;
  if (d.sampler_thread.joinable()) {
    d.sampler_thread.request_stop();
    d.sampler_thread.join();
  }
  if (d.http != nullptr) {
    d.http->stop();
    if (d.http_thread.joinable()) d.http_thread.join();
  }
  if (d.health != nullptr) d.health->Stop();
  if (d.pods != nullptr) d.pods->Stop();
  if (d.events != nullptr)
    d.events->Flush(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  d.events.reset();
  d.cleaner.reset();
  HAMI_LOG(kInfo, "event=stopped scans=%llu", static_cast<unsigned long long>(d.regions.scans()));
}

Status Daemon::Wait(int stop_fd) {
  StopEvent event = HAMI_TRY(WaitForStop({stop_fd}));
  if (event.signal != 0) {
    HAMI_LOG(kInfo, "event=signal signal=%s", strsignal(event.signal));
  }
  return OkStatus();
}

std::string Daemon::Scrape() { return impl_->Scrape(); }
bool Daemon::ready() const { return impl_->Ready(); }
int Daemon::metrics_port() const { return impl_->port; }
bool Daemon::cleanup_enabled() const { return impl_->cleaner != nullptr; }

}  // namespace hami::monitor
