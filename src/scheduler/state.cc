#include "scheduler/state.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "common/quote.h"
#include "kube/resize.h"
#include "log/log.h"

namespace hami::scheduler {
namespace {

size_t UidHash(std::string_view uid) { return std::hash<std::string_view>{}(uid); }

std::string Key(std::string_view ns, std::string_view name) {
  std::string k(ns);
  k += '/';
  k += name;
  return k;
}

// A fit that failed with room held for nominees says so.
void NoteHeld(ClusterState::NodeFit& nf) {
  if (nf.fit.fits || nf.held_for.empty()) return;
  nf.fit.reason += " (room held for pods nominated to this node: ";
  for (size_t i = 0; i < nf.held_for.size(); ++i) {
    if (i != 0) nf.fit.reason += ", ";
    nf.fit.reason += nf.held_for[i];
  }
  nf.fit.reason += ")";
}

bool SameShare(const PodShare& a, const PodShare& b) {
  return a.node == b.node && a.uid == b.uid && a.devices == b.devices &&
         a.init_containers == b.init_containers && a.terminating == b.terminating;
}

}  // namespace

std::vector<std::pair<std::string, DeviceUsage>> ShareUsage(const kube::PodDevices& devices,
                                                            size_t init_containers) {
  struct Acc {
    int64_t init_mem = 0, init_cores = 0, mem = 0, cores = 0;
    bool exclusive = false;
  };
  std::vector<std::pair<std::string, Acc>> acc;
  auto find = [&acc](const std::string& uuid) -> Acc& {
    for (auto& [u, a] : acc) {
      if (u == uuid) return a;
    }
    acc.emplace_back(uuid, Acc{});
    return acc.back().second;
  };
  for (size_t i = 0; i < devices.size(); ++i) {
    for (const auto& d : devices[i]) {
      Acc& a = find(d.uuid);
      if (i < init_containers) {
        a.init_mem = std::max<int64_t>(a.init_mem, d.mem_mib);
        a.init_cores = std::max<int64_t>(a.init_cores, d.cores);
      } else {
        a.mem += d.mem_mib;
        a.cores += d.cores;
      }
      if (d.cores >= 100) a.exclusive = true;
    }
  }
  std::vector<std::pair<std::string, DeviceUsage>> out;
  out.reserve(acc.size());
  for (auto& [uuid, a] : acc) {
    out.emplace_back(uuid, DeviceUsage{1, std::max(a.init_mem, a.mem),
                                       std::max(a.init_cores, a.cores), a.exclusive ? 1 : 0});
  }
  return out;
}

std::optional<PodShare> ShareOfPod(const kube::Pod& pod, std::optional<Error>* bad) {
  const std::string* node = pod.metadata.Annotation(kube::kVgpuNodeAnnotation);
  const std::string* allocated = pod.metadata.Annotation(kube::kDevicesAllocatedAnnotation);
  if (pod.IsTerminated() || node == nullptr || node->empty() || allocated == nullptr) {
    return std::nullopt;
  }
  auto devices = kube::DecodePodDevices(*allocated, kube::kDevicesAllocatedAnnotation);
  if (!devices.ok()) {
    if (bad != nullptr) *bad = std::move(devices).error();
    return std::nullopt;
  }
  PodShare s;
  s.ns = pod.metadata.ns;
  s.name = pod.metadata.name;
  s.uid = pod.metadata.uid;
  s.node = *node;
  s.priority = pod.priority.value_or(0);
  s.terminating = pod.metadata.deletion_timestamp.has_value();
  s.devices = std::move(devices).value();
  // A resize the node has not applied yet may still be refused there and the old share put
  // back: until then the larger of the two counts (kube/resize.h).
  if (const std::string* status = pod.metadata.Annotation(kube::kResizeStatusAnnotation)) {
    auto st = kube::DecodeResizeStatus(*status);
    if (st.ok() && st->phase == kube::ResizePhase::kAccepted) {
      auto previous = kube::DecodePodDevices(st->previous, kube::kDevicesAllocatedAnnotation);
      if (previous.ok()) s.devices = kube::LargerOfEach(s.devices, *previous);
    }
  }
  const size_t containers = pod.containers.size();
  s.init_containers = s.devices.size() > containers ? s.devices.size() - containers : 0;
  return s;
}

ClusterState::ClusterState(config::DeviceConfig config, std::chrono::seconds lock_timeout)
    : config_(std::move(config)), lock_timeout_(lock_timeout) {}

void ClusterState::Touch(NodeEntry& entry) {
  entry.info.generation = ++node_changes_;
  ++generation_;
}

void ClusterState::Notify() {
  { std::lock_guard lock(change_mu_); }
  change_cv_.notify_all();
}

void AddUsage(NodeGpus& gpus, const std::vector<std::pair<std::string, DeviceUsage>>& usage,
              int sign) {
  for (const auto& [uuid, u] : usage) {
    for (GpuState& g : gpus.gpus) {
      if (g.device.id != uuid) continue;
      g.used.slots += sign * u.slots;
      g.used.mem_mib += sign * u.mem_mib;
      g.used.cores += sign * u.cores;
      g.used.exclusive += sign * u.exclusive;
      break;
    }
  }
}

void ClusterState::RecomputeNode(NodeEntry& entry) {
  for (GpuState& g : entry.gpus.gpus) g.used = {};
  for (const std::string& key : entry.pods) {
    auto it = applied_.find(key);
    if (it != applied_.end()) AddUsage(entry.gpus, it->second.usage, +1);
  }
}

void ClusterState::Unapply(const std::string& key) {
  auto it = applied_.find(key);
  if (it == applied_.end()) return;
  Applied& a = it->second;
  if (auto n = nodes_.find(a.share.node); n != nodes_.end()) {
    AddUsage(n->second.gpus, a.usage, -1);
    n->second.pods.erase(key);
    std::erase_if(n->second.shares, [&](const auto& s) { return s.second == &a; });
    Touch(n->second);
  }
  QuotaAmounts& used = ns_used_[a.share.ns];
  used -= a.amounts;
  if (auto u = applied_by_uid_.find(a.share.uid); u != applied_by_uid_.end() && u->second == &a) {
    applied_by_uid_.erase(u);
  }
  applied_.erase(it);
  ++generation_;
}

void ClusterState::Apply(const std::string& key, const PodShare& share) {
  Applied a;
  a.share = share;
  a.usage = ShareUsage(share.devices, share.init_containers);
  a.amounts = AllocationAmounts(share.devices, share.init_containers);
  const Applied& stored = applied_[key] = std::move(a);
  if (auto n = nodes_.find(share.node); n != nodes_.end()) {
    AddUsage(n->second.gpus, stored.usage, +1);
    n->second.pods.insert(key);
    n->second.shares.emplace_back(UidHash(share.uid), &stored);
    Touch(n->second);
  }
  ns_used_[share.ns] += stored.amounts;
  if (!share.uid.empty()) applied_by_uid_[share.uid] = &stored;
  ++generation_;
}

void ClusterState::Refresh(const std::string& key) {
  const PodShare* want = nullptr;
  if (auto r = reservations_.find(key); r != reservations_.end()) {
    want = &r->second.share;
  } else if (auto p = allocations_.find(key); p != allocations_.end()) {
    want = &p->second;
  }
  auto cur = applied_.find(key);
  if (want == nullptr) {
    Unapply(key);
    return;
  }
  if (cur != applied_.end() && SameShare(cur->second.share, *want)) return;
  const PodShare copy = *want;
  Unapply(key);
  Apply(key, copy);
}

void ClusterState::UpsertNode(const kube::ObjectPtr& object) {
  // Everything is decoded before the lock is taken: fits read the view meanwhile.
  auto parsed = kube::ParseNode(*object);
  if (!parsed.ok()) {
    HAMI_LOG(kWarn, "event=bad_node error=%s", QuoteInput(parsed.error().message(), 300).c_str());
    std::unique_lock lock(mu_);
    ++stats_.bad_objects;
    return;
  }
  const kube::Node& node = *parsed;
  const std::string& name = node.metadata.name;
  uint64_t bad_annotations = 0;
  auto bad_annotation = [&](const Error& e) {
    ++bad_annotations;
    HAMI_LOG(kWarn, "event=bad_annotation node=%s error=%s", name.c_str(),
             QuoteInput(e.message(), 300).c_str());
  };

  std::vector<kube::NodeDevice> devices;
  if (const std::string* inv = node.metadata.Annotation(kube::kNodeRegisterAnnotation)) {
    auto decoded = kube::DecodeNodeInventory(*inv);
    if (decoded.ok()) {
      devices = std::move(decoded).value();
    } else {
      bad_annotation(decoded.error());
    }
  }
  std::vector<std::string> cordons;
  if (const std::string* c = node.metadata.Annotation(kDeviceCordonAnnotation)) {
    cordons = DecodeCordonList(*c);
  }
  std::vector<bool> cordoned(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string index = std::to_string(devices[i].index);
    cordoned[i] = std::find(cordons.begin(), cordons.end(), devices[i].id) != cordons.end() ||
                  std::find(cordons.begin(), cordons.end(), index) != cordons.end();
  }
  PairScores pair_scores;
  if (const std::string* s = node.metadata.Annotation(kNodeScoreAnnotation)) {
    auto scores = DecodePairScores(*s);
    if (scores.ok()) {
      pair_scores = std::move(scores).value();
    } else {
      bad_annotation(scores.error());
    }
  }
  std::optional<kube::Handshake> handshake;
  if (const std::string* h = node.metadata.Annotation(kube::kNodeHandshakeAnnotation)) {
    auto hs = kube::DecodeHandshake(*h);
    if (hs.ok()) {
      handshake = *hs;
    } else {
      bad_annotation(hs.error());
    }
  }
  std::optional<kube::NodeLock> node_lock;
  bool lock_present = false;
  if (const std::string* l = node.metadata.Annotation(kube::kNodeLockAnnotation)) {
    lock_present = true;
    auto nl = kube::DecodeNodeLock(*l);
    if (nl.ok()) {
      node_lock = *nl;
    } else {
      bad_annotation(nl.error());
    }
  }
  int64_t allocatable_gpus = 0;
  if (auto a = node.allocatable.find(config_.resource_count_name); a != node.allocatable.end()) {
    allocatable_gpus = a->second.Value();
  }
  std::string unavailable;
  if (handshake && handshake->state == kube::HandshakeState::kDeleted && allocatable_gpus <= 0) {
    unavailable = "its device plugin did not answer the handshake (" +
                  std::string(kube::kNodeHandshakeAnnotation) +
                  " is Deleted) and it allocates no " + config_.resource_count_name;
  }

  std::unique_lock lock(mu_);
  stats_.bad_node_annotations += bad_annotations;
  NodeEntry& entry = nodes_[name];
  const bool is_new = entry.info.object == nullptr;
  entry.gpus.name = name;
  entry.info.object = object;
  entry.info.resource_version = node.metadata.resource_version;

  bool inventory_changed = devices.size() != entry.gpus.gpus.size();
  for (size_t i = 0; !inventory_changed && i < devices.size(); ++i) {
    inventory_changed = !(devices[i] == entry.gpus.gpus[i].device);
  }
  // Whether anything a fit reads changed (usage, devices, cordons, pair scores, availability,
  // the node lock); a handshake or status change alone leaves the view's generation as it is.
  bool fit_changed = is_new || inventory_changed;
  if (inventory_changed) {
    if (!is_new || !devices.empty()) ++stats_.inventory_changes;
    if (devices.size() != entry.gpus.gpus.size()) {
      ++stats_.device_count_changes;
      if (!is_new) {
        HAMI_LOG(kInfo, "event=device_count_changed node=%s from=%zu to=%zu", name.c_str(),
                 entry.gpus.gpus.size(), devices.size());
      }
    }
    entry.gpus.gpus.clear();
    for (auto& d : devices) entry.gpus.gpus.push_back({std::move(d), {}, false});
    RecomputeNode(entry);
  }
  for (size_t i = 0; i < entry.gpus.gpus.size(); ++i) {
    GpuState& g = entry.gpus.gpus[i];
    if (g.cordoned != cordoned[i]) fit_changed = true;
    g.cordoned = cordoned[i];
  }
  if (entry.gpus.pair_scores != pair_scores) {
    fit_changed = true;
    entry.gpus.pair_scores = std::move(pair_scores);
  }
  if (entry.gpus.unavailable != unavailable) {
    fit_changed = true;
    entry.gpus.unavailable = std::move(unavailable);
  }
  if (entry.info.lock_present != lock_present || entry.info.lock != node_lock) fit_changed = true;
  entry.info.handshake = handshake;
  entry.info.lock = std::move(node_lock);
  entry.info.lock_present = lock_present;
  entry.info.allocatable_gpus = allocatable_gpus;
  entry.info.devices = entry.gpus.gpus.size();
  if (is_new) {
    // Shares that arrived before their node.
    for (auto& [key, a] : applied_) {
      if (a.share.node != name) continue;
      entry.pods.insert(key);
      entry.shares.emplace_back(UidHash(a.share.uid), &a);
    }
    RecomputeNode(entry);
  }
  entry.info.generation = ++node_changes_;
  if (fit_changed) ++generation_;
  lock.unlock();
  Notify();
}

void ClusterState::RemoveNode(const kube::ObjectPtr& object) {
  const std::string name(kube::MetadataString(*object, "name"));
  {
    std::unique_lock lock(mu_);
    nodes_.erase(name);
    ++generation_;
  }
  Notify();
}

void ClusterState::NotePodVersion(const nlohmann::json& pod) {
  const std::string_view rv = kube::MetadataString(pod, "resourceVersion");
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(rv.data(), rv.data() + rv.size(), v);
  if (ec == std::errc() && ptr == rv.data() + rv.size() && v > pods_applied_rv_) {
    pods_applied_rv_ = v;
  }
}

bool ClusterState::WaitPodsApplied(int64_t rv,
                                   std::chrono::steady_clock::time_point deadline) const {
  return WaitFor(
      [&] {
        std::shared_lock lock(mu_);
        return pods_applied_rv_ >= rv;
      },
      deadline);
}

bool ClusterState::WaitFor(const std::function<bool()>& condition,
                           std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(change_mu_);
  while (!condition()) {
    if (change_cv_.wait_until(lock, deadline) == std::cv_status::timeout) return condition();
  }
  return true;
}

void ClusterState::SetDraUsedLocked(const std::string& key, const std::string& ns,
                                    const std::optional<QuotaAmounts>& amounts) {
  auto it = dra_used_.find(key);
  if (it != dra_used_.end()) {
    if (amounts && it->second.first == ns && it->second.second == *amounts) return;
    ns_used_[it->second.first] -= it->second.second;
    dra_used_.erase(it);
    ++generation_;
  }
  if (!amounts) return;
  dra_used_[key] = {ns, *amounts};
  ns_used_[ns] += *amounts;
  ++generation_;
}

void ClusterState::UpsertPod(const kube::ObjectPtr& object) {
  auto parsed = kube::ParsePod(*object);
  std::optional<QuotaAmounts> dra;
  std::optional<Error> bad_dra;
  if (parsed.ok()) {
    auto amounts = DraRequestAmounts(*parsed);
    if (amounts.ok()) {
      dra = *amounts;
    } else {
      bad_dra = std::move(amounts).error();
    }
  }
  std::unique_lock lock(mu_);
  NotePodVersion(*object);
  if (!parsed.ok()) {
    ++stats_.bad_objects;
    HAMI_LOG(kWarn, "event=bad_pod error=%s", QuoteInput(parsed.error().message(), 300).c_str());
    return;
  }
  const kube::Pod& pod = *parsed;
  const std::string key = Key(pod.metadata.ns, pod.metadata.name);
  std::optional<Error> bad;
  std::optional<PodShare> share = ShareOfPod(pod, &bad);
  if (bad) {
    ++stats_.bad_pod_annotations;
    HAMI_LOG(kWarn, "event=bad_annotation pod=%s error=%s", key.c_str(),
             QuoteInput(bad->message(), 300).c_str());
  }
  if (bad_dra) {
    ++stats_.bad_pod_annotations;
    HAMI_LOG(kWarn, "event=bad_annotation pod=%s error=%s", key.c_str(),
             QuoteInput(bad_dra->message(), 300).c_str());
  }
  SetDraUsedLocked(key, pod.metadata.ns, dra);
  if (share) {
    // The informer has caught up with a reservation for this pod: the allocation replaces it.
    if (auto r = reservations_.find(key);
        r != reservations_.end() && r->second.share.node == share->node) {
      reservations_.erase(r);
    }
    allocations_[key] = std::move(*share);
  } else {
    allocations_.erase(key);
    if (pod.IsTerminated()) reservations_.erase(key);
  }
  Refresh(key);
  lock.unlock();
  Notify();
}

void ClusterState::RemovePod(const kube::ObjectPtr& object) {
  const std::string key =
      Key(kube::MetadataString(*object, "namespace"), kube::MetadataString(*object, "name"));
  {
    std::unique_lock lock(mu_);
    NotePodVersion(*object);
    allocations_.erase(key);
    reservations_.erase(key);
    SetDraUsedLocked(key, "", std::nullopt);
    Refresh(key);
  }
  Notify();
}

void ClusterState::UpsertQuota(const kube::ObjectPtr& object) {
  auto parsed = kube::ParseResourceQuota(*object);
  std::unique_lock lock(mu_);
  if (!parsed.ok()) {
    ++stats_.bad_objects;
    HAMI_LOG(kWarn, "event=bad_resourcequota error=%s",
             QuoteInput(parsed.error().message(), 300).c_str());
    return;
  }
  quotas_[parsed->metadata.ns][parsed->metadata.name] = *parsed;
  ++generation_;
  lock.unlock();
  Notify();
}

void ClusterState::RemoveQuota(const kube::ObjectPtr& object) {
  std::unique_lock lock(mu_);
  auto ns = quotas_.find(std::string(kube::MetadataString(*object, "namespace")));
  if (ns == quotas_.end()) return;
  ns->second.erase(std::string(kube::MetadataString(*object, "name")));
  ++generation_;
  if (ns->second.empty()) quotas_.erase(ns);
  lock.unlock();
  Notify();
}

kube::ResourceEventHandler ClusterState::NodeHandler() {
  return {[this](const kube::ObjectPtr& o) { UpsertNode(o); },
          [this](const kube::ObjectPtr&, const kube::ObjectPtr& o) { UpsertNode(o); },
          [this](const kube::ObjectPtr& o) { RemoveNode(o); }};
}

kube::ResourceEventHandler ClusterState::PodHandler() {
  return {[this](const kube::ObjectPtr& o) { UpsertPod(o); },
          [this](const kube::ObjectPtr&, const kube::ObjectPtr& o) { UpsertPod(o); },
          [this](const kube::ObjectPtr& o) { RemovePod(o); }};
}

kube::ResourceEventHandler ClusterState::QuotaHandler() {
  return {[this](const kube::ObjectPtr& o) { UpsertQuota(o); },
          [this](const kube::ObjectPtr&, const kube::ObjectPtr& o) { UpsertQuota(o); },
          [this](const kube::ObjectPtr& o) { RemoveQuota(o); }};
}

void ClusterState::SweepLocked(std::chrono::steady_clock::time_point now) {
  std::vector<std::string> expired;
  for (const auto& [key, r] : reservations_) {
    if (r.expires <= now) expired.push_back(key);
  }
  for (const std::string& key : expired) {
    reservations_.erase(key);
    Refresh(key);
  }
}

void ClusterState::Reserve(PodShare share, std::chrono::steady_clock::duration ttl) {
  const auto now = std::chrono::steady_clock::now();
  const std::string key = Key(share.ns, share.name);
  {
    std::unique_lock lock(mu_);
    SweepLocked(now);
    reservations_[key] = Reservation{std::move(share), now + ttl};
    Refresh(key);
  }
  Notify();
}

void ClusterState::Unreserve(std::string_view ns, std::string_view name) {
  const std::string key = Key(ns, name);
  {
    std::unique_lock lock(mu_);
    if (reservations_.erase(key) == 0) return;
    Refresh(key);
  }
  Notify();
}

void ClusterState::Sweep() {
  std::unique_lock lock(mu_);
  SweepLocked(std::chrono::steady_clock::now());
}

NamespaceQuota ClusterState::QuotaOf(std::string_view ns) const {
  auto it = quotas_.find(std::string(ns));
  if (it == quotas_.end()) return {};
  std::vector<kube::ResourceQuota> list;
  list.reserve(it->second.size());
  for (const auto& [name, q] : it->second) list.push_back(q);
  return QuotaFromResourceQuotas(list, config_);
}

QuotaCheck ClusterState::QuotaCheckLocked(std::string_view ns, const std::string& key,
                                          const NamespaceQuota& quota, const Applied** own) const {
  QuotaCheck check;
  check.ns = ns;
  check.quota = &quota;
  check.config = &config_;
  if (auto u = ns_used_.find(std::string(ns)); u != ns_used_.end()) check.used = u->second;
  if (own != nullptr) *own = nullptr;
  if (auto a = applied_.find(key); a != applied_.end()) {
    check.used -= a->second.amounts;
    if (own != nullptr) *own = &a->second;
  }
  return check;
}

void ClusterState::Nominate(std::string node, NominatedPod nominee) {
  {
    std::unique_lock lock(mu_);
    auto it = nominees_.find(nominee.key);
    uint64_t order = ++nominations_;
    if (it != nominees_.end()) {
      if (it->second.node == node && it->second.pod.priority == nominee.priority &&
          it->second.pod.request == nominee.request) {
        return;
      }
      if (it->second.node == node) order = it->second.order;  // still first come
      if (auto on = nominated_on_.find(it->second.node); on != nominated_on_.end()) {
        on->second.erase(nominee.key);
        if (on->second.empty()) nominated_on_.erase(on);
      }
    }
    nominated_on_[node].insert(nominee.key);
    std::string key = nominee.key;
    nominees_[key] = {std::move(node), order, std::move(nominee)};
    ++generation_;
  }
  Notify();
}

void ClusterState::Unnominate(std::string_view ns, std::string_view name) {
  {
    std::unique_lock lock(mu_);
    auto it = nominees_.find(Key(ns, name));
    if (it == nominees_.end()) return;
    if (auto on = nominated_on_.find(it->second.node); on != nominated_on_.end()) {
      on->second.erase(it->first);
      if (on->second.empty()) nominated_on_.erase(on);
    }
    nominees_.erase(it);
    ++generation_;
  }
  Notify();
}

std::map<std::string, std::string> ClusterState::Nominations() const {
  std::shared_lock lock(mu_);
  std::map<std::string, std::string> out;
  for (const auto& [key, n] : nominees_) out.emplace(key, n.node);
  return out;
}

std::vector<std::string> ClusterState::HoldNominatedLocked(const std::string& node,
                                                           const NodeEntry& entry,
                                                           const std::string& key, int32_t priority,
                                                           NodeGpus& gpus) const {
  auto on = nominated_on_.find(node);
  if (on == nominated_on_.end()) return {};
  // A nominee of this node yields to the nominees of its priority nominated before it only, so
  // that two nominated to one node never hold room against each other.
  uint64_t before = UINT64_MAX;
  if (auto self = nominees_.find(key); self != nominees_.end() && self->second.node == node) {
    before = self->second.order;
  }
  std::vector<const NominatedPod*> nominees;
  for (const std::string& k : on->second) {
    if (k == key || applied_.count(k) != 0) continue;  // itself, or holding a share already
    const Nomination& n = nominees_.at(k);
    if (n.pod.priority > priority || (n.pod.priority == priority && n.order < before)) {
      nominees.push_back(&n.pod);
    }
  }
  if (nominees.empty()) return {};
  NodeGpus without = gpus;
  bool terminating = false;
  for (const std::string& k : entry.pods) {
    auto a = applied_.find(k);
    if (a == applied_.end() || !a->second.share.terminating || k == key) continue;
    AddUsage(without, a->second.usage, -1);
    terminating = true;
  }
  return HoldNominated(gpus, terminating ? &without : nullptr, std::move(nominees));
}

std::vector<ClusterState::NodeFit> ClusterState::FitNodes(
    std::string_view ns, std::string_view name, int32_t priority, const PodRequest& request,
    const PodConstraints& constraints, const PodPolicy& policy,
    const std::vector<std::string>& names, kube::WallTime now, uint64_t* generation) const {
  const std::string key = Key(ns, name);
  std::shared_lock lock(mu_);
  if (generation != nullptr) *generation = generation_;
  const NamespaceQuota quota = QuotaOf(ns);
  const Applied* own = nullptr;
  const QuotaCheck check = QuotaCheckLocked(ns, key, quota, &own);
  std::vector<NodeFit> out;
  out.reserve(names.size());
  for (const std::string& n : names) {
    NodeFit nf;
    nf.name = n;
    auto it = nodes_.find(n);
    if (it == nodes_.end()) {
      out.push_back(std::move(nf));
      continue;
    }
    nf.known = true;
    const NodeEntry& entry = it->second;
    if (entry.info.lock_present) {
      const kube::NodeLock* l = entry.info.lock ? &*entry.info.lock : nullptr;
      const bool mine = l != nullptr && l->ns == ns && l->pod == name;
      const bool fresh = l == nullptr || now - l->time < lock_timeout_;
      nf.locked = !mine && fresh;
    }
    const bool mine_here = own != nullptr && own->share.node == n;
    if (mine_here || nominated_on_.count(n) != 0) {
      NodeGpus copy = entry.gpus;
      if (mine_here) AddUsage(copy, own->usage, -1);
      nf.held_for = HoldNominatedLocked(n, entry, key, priority, copy);
      nf.fit = FitPod(copy, request, constraints, policy, check);
      NoteHeld(nf);
    } else {
      nf.fit = FitPod(entry.gpus, request, constraints, policy, check);
    }
    out.push_back(std::move(nf));
  }
  return out;
}

ClusterState::NodeFit ClusterState::FitNodeFresh(std::string_view ns, std::string_view name,
                                                 int32_t priority, const PodRequest& request,
                                                 const PodConstraints& constraints,
                                                 const PodPolicy& policy, const std::string& node,
                                                 const std::vector<PodShare>& node_pods,
                                                 kube::WallTime now) const {
  (void)now;
  const std::string key = Key(ns, name);
  NodeFit nf;
  nf.name = node;
  std::shared_lock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return nf;
  nf.known = true;
  NodeGpus gpus = FreshGpusLocked(it->second, node, key, node_pods);
  nf.held_for = HoldNominatedLocked(node, it->second, key, priority, gpus);
  const NamespaceQuota quota = QuotaOf(ns);
  const QuotaCheck check = QuotaCheckLocked(ns, key, quota, nullptr);
  nf.fit = FitPod(gpus, request, constraints, policy, check);
  NoteHeld(nf);
  return nf;
}

NodeGpus ClusterState::FreshGpusLocked(const NodeEntry& entry, const std::string& node,
                                       const std::string& skip_key,
                                       const std::vector<PodShare>& node_pods) const {
  NodeGpus gpus = entry.gpus;
  for (GpuState& g : gpus.gpus) g.used = {};
  std::set<std::string> listed;
  for (const PodShare& s : node_pods) {
    const std::string k = Key(s.ns, s.name);
    listed.insert(k);
    if (k == skip_key || s.node != node) continue;
    AddUsage(gpus, ShareUsage(s.devices, s.init_containers), +1);
  }
  for (const auto& [k, r] : reservations_) {
    if (k == skip_key || r.share.node != node || listed.count(k) != 0) continue;
    AddUsage(gpus, ShareUsage(r.share.devices, r.share.init_containers), +1);
  }
  // Pods the view holds on this node that the list did not show (annotated, not yet bound).
  for (const std::string& k : entry.pods) {
    if (k == skip_key || listed.count(k) != 0 || reservations_.count(k) != 0) continue;
    if (auto a = applied_.find(k); a != applied_.end()) AddUsage(gpus, a->second.usage, +1);
  }
  return gpus;
}

std::optional<NodeGpus> ClusterState::NodeGpusFresh(const std::string& node,
                                                    const std::vector<PodShare>& node_pods) const {
  std::shared_lock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return FreshGpusLocked(it->second, node, "", node_pods);
}

std::vector<ClusterState::NodePreemption> ClusterState::ChooseVictimsOnNodes(
    std::string_view ns, std::string_view name, int32_t priority, const PodRequest& request,
    const PodConstraints& constraints, const PodPolicy& policy,
    const std::map<std::string, NodeVictims>& victims,
    const std::set<std::string>& departing) const {
  const std::string key = Key(ns, name);
  std::shared_lock lock(mu_);
  const NamespaceQuota quota = QuotaOf(ns);
  const Applied* own = nullptr;
  const QuotaCheck check = QuotaCheckLocked(ns, key, quota, &own);
  // The shares already on their way out, by node: looked up once, not once per node.
  std::unordered_map<std::string_view, std::vector<const Applied*>> departing_on;
  for (const std::string& uid : departing) {
    auto u = applied_by_uid_.find(uid);
    if (u != applied_by_uid_.end() && u->second != own) {
      departing_on[u->second->share.node].push_back(u->second);
    }
  }
  std::vector<NodePreemption> out;
  out.reserve(victims.size());
  // Reused from node to node, so that their strings and vectors keep their room.
  std::vector<VictimCandidate> candidates;
  std::vector<const Applied*> leaving;
  NodeGpus copy;
  for (const auto& [node, named] : victims) {
    NodePreemption np;
    np.name = node;
    auto it = nodes_.find(node);
    if (it == nodes_.end()) {
      np.ignored = named.pods.size();
      out.push_back(std::move(np));
      continue;
    }
    np.known = true;
    const NodeGpus& gpus = it->second.gpus;
    const auto gone = departing_on.find(node);
    auto departed = [&](const Applied* a) {
      return gone != departing_on.end() &&
             std::find(gone->second.begin(), gone->second.end(), a) != gone->second.end();
    };
    size_t count = 0;
    np.uids.reserve(named.pods.size());
    for (const VictimRef& ref : named.pods) {
      const Applied* a = nullptr;
      if (!ref.uid.empty()) {
        const size_t h = UidHash(ref.uid);
        for (const auto& [uid_hash, share] : it->second.shares) {
          if (uid_hash == h && share->share.uid == ref.uid) {
            a = share;
            break;
          }
        }
      } else if (!ref.name.empty()) {
        if (auto f = applied_.find(Key(ref.ns, ref.name)); f != applied_.end()) a = &f->second;
      }
      if (a == nullptr || a == own || a->share.node != node || departed(a)) {
        ++np.ignored;
        continue;
      }
      if (count == candidates.size()) candidates.emplace_back();
      VictimCandidate& c = candidates[count++];
      c.key.assign(a->share.ns).append("/").append(a->share.name);
      c.ns.assign(a->share.ns);
      c.priority = a->share.priority;
      c.amounts = a->amounts;
      c.usage.clear();
      for (const auto& [uuid, u] : a->usage) {
        for (size_t g = 0; g < gpus.gpus.size(); ++g) {
          if (gpus.gpus[g].device.id == uuid) c.usage.emplace_back(g, u);
        }
      }
      np.uids.push_back(ref.uid.empty() ? a->share.uid : ref.uid);  // the same when named by UID
    }
    candidates.resize(count);
    // What leaves the node anyway: the pod's own share, and victims already on their way.
    leaving.clear();
    if (own != nullptr && own->share.node == node) leaving.push_back(own);
    if (gone != departing_on.end()) {
      leaving.insert(leaving.end(), gone->second.begin(), gone->second.end());
    }
    if (leaving.empty() && nominated_on_.count(node) == 0) {
      np.choice = ChooseVictims(gpus, candidates, priority, request, constraints, policy, check);
    } else {
      copy = gpus;
      HoldNominatedLocked(node, it->second, key, priority, copy);
      QuotaCheck quota_left = check;
      for (const Applied* l : leaving) {
        AddUsage(copy, l->usage, -1);
        if (l != own && l->share.ns == ns) quota_left.used -= l->amounts;
      }
      np.choice =
          ChooseVictims(copy, candidates, priority, request, constraints, policy, quota_left);
    }
    out.push_back(std::move(np));
  }
  return out;
}

uint64_t ClusterState::generation() const {
  std::shared_lock lock(mu_);
  return generation_;
}

std::vector<std::string> ClusterState::NodeNames() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  out.reserve(nodes_.size());
  for (const auto& [name, e] : nodes_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<ClusterState::NodeInfo> ClusterState::Node(std::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = nodes_.find(std::string(name));
  if (it == nodes_.end()) return std::nullopt;
  return it->second.info;
}

bool ClusterState::WaitNodeChange(std::string_view name, uint64_t generation,
                                  std::chrono::steady_clock::time_point deadline) const {
  const std::string n(name);
  return WaitFor(
      [&] {
        std::shared_lock lock(mu_);
        auto it = nodes_.find(n);
        return it == nodes_.end() || it->second.info.generation != generation;
      },
      deadline);
}

std::optional<PodShare> ClusterState::Share(std::string_view ns, std::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = applied_.find(Key(ns, name));
  if (it == applied_.end()) return std::nullopt;
  return it->second.share;
}

std::map<std::string, PodShare> ClusterState::Shares() const {
  std::shared_lock lock(mu_);
  std::map<std::string, PodShare> out;
  for (const auto& [key, a] : applied_) out.emplace(key, a.share);
  return out;
}

std::vector<ClusterState::GpuReport> ClusterState::Gpus() const {
  std::shared_lock lock(mu_);
  std::vector<GpuReport> out;
  for (const auto& [name, e] : nodes_) {
    for (const GpuState& g : e.gpus.gpus) out.push_back({name, g.device, g.used});
  }
  std::sort(out.begin(), out.end(), [](const GpuReport& a, const GpuReport& b) {
    return a.node != b.node ? a.node < b.node : a.device.index < b.device.index;
  });
  return out;
}

std::pair<NamespaceQuota, QuotaAmounts> ClusterState::QuotaFor(std::string_view ns) const {
  std::shared_lock lock(mu_);
  QuotaAmounts used;
  if (auto u = ns_used_.find(std::string(ns)); u != ns_used_.end()) used = u->second;
  return {QuotaOf(ns), used};
}

std::map<std::string, std::pair<NamespaceQuota, QuotaAmounts>> ClusterState::Quotas() const {
  std::shared_lock lock(mu_);
  std::map<std::string, std::pair<NamespaceQuota, QuotaAmounts>> out;
  for (const auto& [ns, list] : quotas_) {
    QuotaAmounts used;
    if (auto u = ns_used_.find(ns); u != ns_used_.end()) used = u->second;
    out[ns] = {QuotaOf(ns), used};
  }
  return out;
}

ClusterState::Stats ClusterState::stats() const {
  std::shared_lock lock(mu_);
  return stats_;
}

}  // namespace hami::scheduler
