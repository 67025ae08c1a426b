#include "sim/kube/dra_claim_controller.h"

#include <algorithm>
#include <utility>

#include "kube/objects.h"
#include "kube/resource.h"
#include "log/log.h"
#include "sim/kube/dra_allocator.h"

namespace hami::sim::kube {

using hami::kube::ObjectPtr;
using nlohmann::json;

namespace {

constexpr std::chrono::milliseconds kBackoffBase{100};
constexpr std::chrono::milliseconds kBackoffCap{5000};
constexpr size_t kMaxGenerateBase = 57;

bool Done(const json& pod) {
  const std::string phase = JsonStringAt(pod, {"status", "phase"});
  return phase == "Succeeded" || phase == "Failed";
}

// The controller owner reference's {name, uid}, or empty strings.
std::pair<std::string, std::string> Controller(const json& object) {
  const json* owners = JsonAt(object, {"metadata", "ownerReferences"});
  if (owners == nullptr || !owners->is_array()) return {};
  for (const json& o : *owners) {
    const json* c = JsonAt(o, {"controller"});
    if (c != nullptr && c->is_boolean() && c->get<bool>() && JsonStringAt(o, {"kind"}) == "Pod") {
      return {JsonStringAt(o, {"name"}), JsonStringAt(o, {"uid"})};
    }
  }
  return {};
}

bool Generated(const json& claim) {
  return JsonAt(claim, {"metadata", "annotations", kPodClaimNameAnnotation}) != nullptr ||
         JsonStringAt(claim, {"metadata", "annotations", kExtendedResourceClaimAnnotation}) ==
             "true";
}

}  // namespace

ResourceClaimController::ResourceClaimController(hami::kube::Client& client,
                                                 hami::kube::InformerFactory& factory,
                                                 std::vector<std::string> scheduler_names)
    : client_(client),
      names_(std::move(scheduler_names)),
      pods_(factory.Get(hami::kube::kPods)),
      claims_(factory.Get(hami::kube::kResourceClaims)) {
  auto now = [] { return std::chrono::steady_clock::now(); };
  pods_->AddHandler({
      .on_add = [this,
                 now](const ObjectPtr& o) { Enqueue("pod/" + hami::kube::ObjectKey(*o), now()); },
      .on_update =
          [this, now](const ObjectPtr&, const ObjectPtr& o) {
            Enqueue("pod/" + hami::kube::ObjectKey(*o), now());
            if (Done(*o)) EnqueueClaimsOf(MetaOf(*o, "namespace"), MetaOf(*o, "uid"));
          },
      .on_delete =
          [this](const ObjectPtr& o) {
            EnqueueClaimsOf(MetaOf(*o, "namespace"), MetaOf(*o, "uid"));
          },
  });
  claims_->AddHandler({
      .on_add = [this,
                 now](const ObjectPtr& o) { Enqueue("claim/" + hami::kube::ObjectKey(*o), now()); },
      .on_update =
          [this, now](const ObjectPtr&, const ObjectPtr& o) {
            Enqueue("claim/" + hami::kube::ObjectKey(*o), now());
          },
  });
}

ResourceClaimController::~ResourceClaimController() { Stop(); }

void ResourceClaimController::Start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  worker_ = std::jthread([this](std::stop_token stop) { Worker(stop); });
}

void ResourceClaimController::Stop() {
  worker_.request_stop();
  if (worker_.joinable()) worker_.join();
}

ResourceClaimController::Stats ResourceClaimController::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void ResourceClaimController::Enqueue(const std::string& key, SteadyTime when) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = queued_.try_emplace(key, when);
  if (!fresh && when < it->second) it->second = when;
  cv_.notify_one();
}

void ResourceClaimController::EnqueueClaimsOf(const std::string& ns, const std::string& pod_uid) {
  const auto now = std::chrono::steady_clock::now();
  for (const ObjectPtr& claim : claims_->store().List()) {
    if (MetaOf(*claim, "namespace") != ns) continue;
    bool related = Controller(*claim).second == pod_uid;
    if (const json* reserved = JsonAt(*claim, {"status", "reservedFor"});
        reserved != nullptr && reserved->is_array()) {
      for (const json& r : *reserved) related = related || JsonStringAt(r, {"uid"}) == pod_uid;
    }
    if (related) Enqueue("claim/" + hami::kube::ObjectKey(*claim), now);
  }
}

void ResourceClaimController::Worker(std::stop_token stop) {
  auto far = [] { return std::chrono::steady_clock::now() + std::chrono::hours(24); };
  while (!pods_->WaitForSync(far(), stop) || !claims_->WaitForSync(far(), stop)) {
    if (stop.stop_requested()) return;
  }
  for (;;) {
    std::string key;
    {
      std::unique_lock lock(mu_);
      for (;;) {
        if (stop.stop_requested()) return;
        const auto now = std::chrono::steady_clock::now();
        SteadyTime wake = far();
        for (auto it = queued_.begin(); it != queued_.end(); ++it) {
          if (it->second <= now) {
            key = it->first;
            queued_.erase(it);
            break;
          }
          wake = std::min(wake, it->second);
        }
        if (!key.empty()) break;
        cv_.wait_until(lock, stop, wake, [&] {
          return std::any_of(queued_.begin(), queued_.end(),
                             [&](const auto& e) { return e.second < wake; });
        });
      }
    }
    Status s = Reconcile(key);
    std::lock_guard lock(mu_);
    if (s.ok()) {
      failures_.erase(key);
      continue;
    }
    ++stats_.failures;
    const int n = ++failures_[key];
    auto delay = kBackoffBase;
    for (int i = 1; i < n && delay < kBackoffCap; ++i) delay *= 2;
    delay = std::min(delay, kBackoffCap);
    HAMI_LOG(kWarn, "event=dra_claim_reconcile_failed key=%s retry_ms=%lld error=\"%s\"",
             key.c_str(), static_cast<long long>(delay.count()), s.error().message().c_str());
    auto [it, fresh] = queued_.try_emplace(key, std::chrono::steady_clock::now() + delay);
    if (!fresh) it->second = std::max(it->second, std::chrono::steady_clock::now() + delay);
    cv_.notify_one();
  }
}

Status ResourceClaimController::Reconcile(const std::string& key) {
  const size_t slash = key.find('/');
  const std::string kind = key.substr(0, slash);
  const std::string rest = key.substr(slash + 1);
  const size_t ns_end = rest.find('/');
  if (ns_end == std::string::npos) return OkStatus();
  const std::string ns = rest.substr(0, ns_end);
  const std::string name = rest.substr(ns_end + 1);
  if (kind == "pod") return ReconcilePod(ns, name);
  return ReconcileClaim(ns, name);
}

bool ResourceClaimController::PodAlive(const std::string& ns, const std::string& name,
                                       const std::string& uid) const {
  ObjectPtr pod = pods_->store().Get(ns, name);
  if (pod != nullptr && MetaOf(*pod, "uid") == uid && !Done(*pod)) return true;
  // The informer may lag behind the API server: a pod created a moment ago (whose claim another
  // controller just made) is not in it yet. Nothing is released or deleted on the informer's
  // word alone; the API server decides, and when it cannot be asked the pod counts as alive
  // (the next resync tries again).
  auto live = client_.Get(hami::kube::kPods, ns, name);
  if (!live.ok()) return live.error().code() != ErrorCode::kNotFound;
  return MetaOf(*live, "uid") == uid && !Done(*live);
}

Status ResourceClaimController::ReconcilePod(const std::string& ns, const std::string& name) {
  ObjectPtr pod = pods_->store().Get(ns, name);
  if (pod == nullptr || Done(*pod) || JsonAt(*pod, {"metadata", "deletionTimestamp"}) != nullptr) {
    return OkStatus();
  }
  std::string scheduler = JsonStringAt(*pod, {"spec", "schedulerName"});
  if (scheduler.empty()) scheduler = "default-scheduler";
  if (std::find(names_.begin(), names_.end(), scheduler) == names_.end()) return OkStatus();
  const json* pod_claims = JsonAt(*pod, {"spec", "resourceClaims"});
  if (pod_claims == nullptr || !pod_claims->is_array()) return OkStatus();
  const std::string uid = MetaOf(*pod, "uid");

  json statuses = json::array();
  std::set<std::string> recorded;
  if (const json* s = JsonAt(*pod, {"status", "resourceClaimStatuses"});
      s != nullptr && s->is_array()) {
    statuses = *s;
    for (const json& e : *s) recorded.insert(JsonStringAt(e, {"name"}));
  }
  bool changed = false;
  for (const json& pc : *pod_claims) {
    const std::string pod_claim = JsonStringAt(pc, {"name"});
    const std::string tmpl = JsonStringAt(pc, {"resourceClaimTemplateName"});
    if (tmpl.empty() || recorded.contains(pod_claim)) continue;
    std::string claim_name;
    {
      std::lock_guard lock(mu_);
      if (auto it = created_.find(uid + "/" + pod_claim); it != created_.end()) {
        claim_name = it->second;
      }
    }
    for (const ObjectPtr& c : claims_->store().List()) {
      if (!claim_name.empty()) break;
      if (MetaOf(*c, "namespace") == ns && Controller(*c).second == uid &&
          JsonStringAt(*c, {"metadata", "annotations", kPodClaimNameAnnotation}) == pod_claim) {
        claim_name = MetaOf(*c, "name");
      }
    }
    if (claim_name.empty()) {
      auto t = client_.Get(hami::kube::kResourceClaimTemplates, ns, tmpl);
      if (!t.ok()) {
        return Error(t.error().code(), "pod " + ns + "/" + name + " claim " + pod_claim +
                                           ": ResourceClaimTemplate " + tmpl + ": " +
                                           t.error().message());
      }
      std::string base = name + "-" + pod_claim;
      if (base.size() > kMaxGenerateBase) base.resize(kMaxGenerateBase);
      json meta = {{"generateName", base + "-"},
                   {"namespace", ns},
                   {"ownerReferences", json::array({{{"apiVersion", "v1"},
                                                     {"kind", "Pod"},
                                                     {"name", name},
                                                     {"uid", uid},
                                                     {"controller", true},
                                                     {"blockOwnerDeletion", true}}})}};
      if (const json* labels = JsonAt(*t, {"spec", "metadata", "labels"});
          labels && labels->is_object()) {
        meta["labels"] = *labels;
      }
      json annotations = json::object();
      if (const json* a = JsonAt(*t, {"spec", "metadata", "annotations"}); a && a->is_object()) {
        annotations = *a;
      }
      annotations[kPodClaimNameAnnotation] = pod_claim;
      meta["annotations"] = std::move(annotations);
      const json* spec = JsonAt(*t, {"spec", "spec"});
      json claim = {{"apiVersion", "resource.k8s.io/v1"},
                    {"kind", "ResourceClaim"},
                    {"metadata", std::move(meta)},
                    {"spec", spec != nullptr ? *spec : json::object()}};
      auto created = client_.Create(hami::kube::kResourceClaims, ns, claim);
      if (!created.ok()) return std::move(created).error();
      claim_name = MetaOf(*created, "name");
      HAMI_LOG(kInfo, "event=dra_claim_created pod=%s/%s pod_claim=%s claim=%s", ns.c_str(),
               name.c_str(), pod_claim.c_str(), claim_name.c_str());
      std::lock_guard lock(mu_);
      created_[uid + "/" + pod_claim] = claim_name;
      ++stats_.claims_created;
    }
    statuses.push_back({{"name", pod_claim}, {"resourceClaimName", claim_name}});
    recorded.insert(pod_claim);
    changed = true;
  }
  if (!changed) return OkStatus();
  json patch = {{"status", {{"resourceClaimStatuses", std::move(statuses)}}}};
  auto patched =
      client_.Patch(hami::kube::kPods, ns, name, hami::kube::PatchType::kMerge, patch, "status");
  if (!patched.ok() && patched.error().code() != ErrorCode::kNotFound) {
    return std::move(patched).error();
  }
  return OkStatus();
}

Status ResourceClaimController::ReconcileClaim(const std::string& ns, const std::string& name) {
  ObjectPtr current = claims_->store().Get(ns, name);
  if (current == nullptr) return OkStatus();
  json claim = *current;
  json kept = json::array();
  size_t dropped = 0;
  if (const json* reserved = JsonAt(claim, {"status", "reservedFor"});
      reserved != nullptr && reserved->is_array()) {
    for (const json& r : *reserved) {
      if (JsonStringAt(r, {"resource"}) == "pods" &&
          !PodAlive(ns, JsonStringAt(r, {"name"}), JsonStringAt(r, {"uid"}))) {
        ++dropped;
      } else {
        kept.push_back(r);
      }
    }
  }
  const bool allocated = JsonAt(claim, {"status", "allocation"}) != nullptr;
  const bool deallocate = allocated && kept.empty();
  if (dropped > 0 || deallocate) {
    json& status = claim["status"];
    if (kept.empty()) {
      status.erase("reservedFor");
    } else {
      status["reservedFor"] = kept;
    }
    if (deallocate) {
      status.erase("allocation");
      status.erase("devices");
    }
    auto written = client_.Update(hami::kube::kResourceClaims, claim, "status");
    if (!written.ok()) {
      if (written.error().code() == ErrorCode::kNotFound) return OkStatus();
      return std::move(written).error();
    }
    claim = std::move(*written);
    HAMI_LOG(kInfo, "event=dra_claim_released claim=%s/%s reservations_dropped=%zu deallocated=%d",
             ns.c_str(), name.c_str(), dropped, int(deallocate));
    std::lock_guard lock(mu_);
    stats_.reservations_dropped += dropped;
    if (deallocate) ++stats_.deallocations;
  }
  const bool unallocated = JsonAt(claim, {"status", "allocation"}) == nullptr;
  const auto [owner, owner_uid] = Controller(claim);
  const bool orphan = Generated(claim) && !owner_uid.empty() && !PodAlive(ns, owner, owner_uid);
  json* finalizers = claim["metadata"].is_object() && claim["metadata"].contains("finalizers")
                         ? &claim["metadata"]["finalizers"]
                         : nullptr;
  // The finalizer goes with a deallocation, or from a claim nobody will allocate again; never
  // from a claim the scheduler is allocating right now (finalizer first, then the status).
  const bool release =
      deallocate || orphan || JsonAt(claim, {"metadata", "deletionTimestamp"}) != nullptr;
  if (release && unallocated && finalizers != nullptr && finalizers->is_array()) {
    auto it = std::find(finalizers->begin(), finalizers->end(), kDraFinalizer);
    if (it != finalizers->end()) {
      finalizers->erase(it);
      if (finalizers->empty()) claim["metadata"].erase("finalizers");
      auto updated = client_.Update(hami::kube::kResourceClaims, claim);
      if (!updated.ok()) {
        if (updated.error().code() == ErrorCode::kNotFound) return OkStatus();
        return std::move(updated).error();
      }
      claim = std::move(*updated);
    }
  }
  if (orphan && unallocated && JsonAt(claim, {"metadata", "deletionTimestamp"}) == nullptr) {
    auto deleted = client_.Delete(hami::kube::kResourceClaims, ns, name);
    if (!deleted.ok()) {
      if (deleted.error().code() == ErrorCode::kNotFound) return OkStatus();
      return std::move(deleted).error();
    }
    HAMI_LOG(kInfo, "event=dra_claim_deleted claim=%s/%s pod=%s", ns.c_str(), name.c_str(),
             owner.c_str());
    std::lock_guard lock(mu_);
    ++stats_.claims_deleted;
    for (auto it = created_.begin(); it != created_.end();) {
      it = it->second == name && it->first.starts_with(owner_uid + "/") ? created_.erase(it)
                                                                        : std::next(it);
    }
  }
  return OkStatus();
}

}  // namespace hami::sim::kube
