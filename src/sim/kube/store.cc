#include "sim/kube/store.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "kube/time.h"

namespace hami::sim::kube {

using hami::kube::Resource;
using nlohmann::json;

namespace {

bool Is(const Resource& a, const Resource& b) { return a.group == b.group && a.plural == b.plural; }

constexpr int kMaxUpdateAttempts = 32;
constexpr int kMaxGenerateNameAttempts = 8;

std::string Key(std::string_view ns, std::string_view name) {
  std::string key(ns);
  key += '/';
  key += name;
  return key;
}

std::string MetaString(const json& object, const char* field) {
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  auto it = m->find(field);
  return it != m->end() && it->is_string() ? it->get<std::string>() : "";
}

// metadata.<field>, or nullptr when absent or null.
const json* FindMeta(const json& object, const char* field) {
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return nullptr;
  auto it = m->find(field);
  return it != m->end() && !it->is_null() ? &*it : nullptr;
}

bool HasFinalizers(const json& object) {
  const json* f = FindMeta(object, "finalizers");
  return f != nullptr && f->is_array() && !f->empty();
}

std::string KeyOf(const StoredObject& o) {
  return Key(MetaString(o.object(), "namespace"), MetaString(o.object(), "name"));
}

// The objects of `table` in namespace `ns` (all when empty), in key order.
template <typename Table>
std::vector<ObjectPtr> Range(const Table& table, std::string_view ns) {
  std::vector<ObjectPtr> out;
  if (ns.empty()) {
    out.reserve(table.size());
    for (const auto& [key, object] : table) out.push_back(object);
    return out;
  }
  const std::string lo = std::string(ns) + "/";
  const std::string hi = std::string(ns) + char('/' + 1);
  for (auto it = table.lower_bound(lo); it != table.end() && it->first < hi; ++it) {
    out.push_back(it->second);
  }
  return out;
}

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string Base64UrlEncode(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : in) {
    acc = (acc << 8) | static_cast<unsigned char>(ch);
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kBase64Url[(acc >> bits) & 0x3f];
    }
  }
  if (bits > 0) out += kBase64Url[(acc << (6 - bits)) & 0x3f];
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const char* p = std::find(kBase64Url, kBase64Url + 64, c);
    if (p == kBase64Url + 64) return std::nullopt;
    acc = (acc << 6) | uint32_t(p - kBase64Url);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return out;
}

struct ContinueToken {
  int64_t rv = 0;
  uint64_t id = 0;
  std::string start;  // the last key returned
  std::string resource;
  std::string ns;
};

std::string EncodeToken(const ContinueToken& t) {
  json j = {{"v", "meta.k8s.io/v1"}, {"rv", t.rv}, {"start", t.start}, {"id", t.id},
            {"r", t.resource},       {"ns", t.ns}};
  return Base64UrlEncode(j.dump(-1, ' ', false, json::error_handler_t::replace));
}

ApiResult<ContinueToken> DecodeToken(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return BadRequest("continue key is not valid: " + why);
  };
  auto raw = Base64UrlDecode(text);
  if (!raw) return bad("not base64url");
  json j = json::parse(*raw, nullptr, false);
  if (!j.is_object()) return bad("not a continue token of this server");
  ContinueToken t;
  auto rv = j.find("rv");
  auto id = j.find("id");
  auto start = j.find("start");
  auto r = j.find("r");
  auto ns = j.find("ns");
  if (rv == j.end() || !rv->is_number_integer() || id == j.end() || !id->is_number_unsigned() ||
      start == j.end() || !start->is_string() || r == j.end() || !r->is_string() || ns == j.end() ||
      !ns->is_string()) {
    return bad("fields missing or mistyped");
  }
  t.rv = rv->get<int64_t>();
  t.id = id->get<uint64_t>();
  t.start = start->get<std::string>();
  t.resource = r->get<std::string>();
  t.ns = ns->get<std::string>();
  return t;
}

ApiStatus ContinueExpired() {
  return Expired(
      "The provided continue parameter is too old to display a consistent list result. You can "
      "start a new list without the continue parameter.");
}

bool IsProtectedNamespace(std::string_view name) {
  return name == "default" || name == "kube-system" || name == "kube-public";
}

}  // namespace

std::optional<size_t> ResourceIndex(const Resource& r) {
  auto all = hami::kube::AllResources();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].group == r.group && all[i].plural == r.plural) return i;
  }
  return std::nullopt;
}

const std::string& StoredObject::Json() const {
  std::call_once(once_,
                 [this] { json_ = object_.dump(-1, ' ', false, json::error_handler_t::replace); });
  return json_;
}

std::string_view EventTypeName(EventType t) {
  switch (t) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
  }
  return "ERROR";
}

Watcher::Watcher(size_t resource, std::string ns, size_t limit)
    : resource_(resource),
      ns_(std::move(ns)),
      limit_(std::max<size_t>(limit, 1)),
      event_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void Watcher::SignalLocked() {
  if (signaled_) return;
  signaled_ = true;
  if (event_fd_.valid()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(event_fd_.get(), &one, sizeof(one));
  }
}

bool Watcher::Push(ChangePtr change) {
  std::lock_guard lock(mu_);
  if (state_ != State::kOpen) return false;
  queue_.push_back(std::move(change));
  const bool overflowed = queue_.size() > limit_;
  if (overflowed) {
    state_ = State::kOverflowed;
    queue_.clear();
  }
  SignalLocked();
  return overflowed;
}

void Watcher::Close() {
  std::lock_guard lock(mu_);
  if (state_ == State::kOpen) state_ = State::kClosed;
  queue_.clear();
  SignalLocked();
}

std::vector<ChangePtr> Watcher::Take() {
  std::lock_guard lock(mu_);
  std::vector<ChangePtr> out(std::make_move_iterator(queue_.begin()),
                             std::make_move_iterator(queue_.end()));
  queue_.clear();
  if (signaled_ && state_ == State::kOpen) {
    signaled_ = false;
    if (event_fd_.valid()) {
      uint64_t value = 0;
      [[maybe_unused]] ssize_t n = read(event_fd_.get(), &value, sizeof(value));
    }
  }
  return out;
}

bool Watcher::Empty() const {
  std::lock_guard lock(mu_);
  return queue_.empty();
}

Watcher::State Watcher::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

Store::Store(const Options& options)
    : options_(options),
      tables_(hami::kube::AllResources().size()),
      watchers_(hami::kube::AllResources().size()),
      rng_(std::random_device{}()) {}

std::string Store::NewUidLocked() {
  uint64_t hi = rng_();
  uint64_t lo = rng_();
  hi = (hi & ~0xf000ULL) | 0x4000ULL;                         // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // RFC 4122 variant
  char buf[40];
  std::snprintf(buf, sizeof(buf),
                "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64, hi >> 32,
                (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48, lo & uint64_t{0xffffffffffff});
  return buf;
}

std::string Store::RandomSuffixLocked() {
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string out;
  for (int i = 0; i < 5; ++i) out += kAlphabet[rng_() % (sizeof(kAlphabet) - 1)];
  return out;
}

ObjectPtr Store::CommitLocked(size_t index, const std::string& key, EventType type, json object,
                              ObjectPtr previous) {
  ++rv_;
  std::string ns = MetaString(object, "namespace");
  object["metadata"]["resourceVersion"] = std::to_string(rv_);
  auto stored = std::make_shared<const StoredObject>(std::move(object), rv_);
  if (type == EventType::kDeleted) {
    tables_[index].erase(key);
  } else {
    tables_[index].insert_or_assign(key, stored);
  }
  auto change = std::make_shared<const Change>(
      Change{type, index, std::move(ns), rv_, stored, std::move(previous)});
  if (options_.watch_window > 0) {
    changes_.push_back(change);
    while (int64_t(changes_.size()) > options_.watch_window) changes_.pop_front();
  }
  for (const auto& w : watchers_[index]) {
    if ((w->ns().empty() || w->ns() == change->ns) && w->Push(change)) ++watches_overflowed_;
  }
  return stored;
}

ApiResult<ObjectPtr> Store::Create(const Resource& r, std::string_view ns, json object,
                                   WriteMode mode) {
  auto index = ResourceIndex(r);
  if (!index) return PathNotFound();
  auto decoded = DecodeObject(r, std::move(object));
  if (!decoded.ok()) return std::move(decoded).status();
  return CreateDecoded(*index, r, ns, std::move(*decoded), mode);
}

ApiResult<ObjectPtr> Store::CreateDecoded(size_t index, const Resource& r, std::string_view ns,
                                          json object, WriteMode mode) {
  json& meta = object["metadata"];
  if (r.namespaced) {
    const std::string body_ns = meta.value("namespace", "");
    if (!body_ns.empty() && body_ns != ns) {
      return BadRequest(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
    meta["namespace"] = ns;
  } else {
    meta.erase("namespace");
  }
  if (!meta.value("resourceVersion", "").empty()) {
    return BadRequest("resourceVersion should not be set on objects to be created");
  }
  meta.erase("resourceVersion");
  std::string name = meta.value("name", "");
  const std::string generate = meta.value("generateName", "");
  if (name.empty() && generate.empty()) {
    return Invalid(r, "", "metadata.name", "Required value: name or generateName is required");
  }
  if (auto bad = ValidateName(r, name.empty() ? generate + "x" : name)) return std::move(*bad);
  auto prepared = PrepareForCreate(r, std::move(object));
  if (!prepared.ok()) return std::move(prepared).status();
  json& m = (*prepared)["metadata"];
  m.erase("deletionTimestamp");
  m.erase("deletionGracePeriodSeconds");
  m.erase("selfLink");
  m["creationTimestamp"] = hami::kube::FormatTime(std::chrono::system_clock::now());

  std::unique_lock lock(mu_);
  if (r.namespaced) {
    const size_t ns_index = *ResourceIndex(hami::kube::kNamespaces);
    if (!tables_[ns_index].contains(Key("", ns))) return NotFound(hami::kube::kNamespaces, ns);
  }
  const std::string key_ns = r.namespaced ? std::string(ns) : std::string();
  if (name.empty()) {
    for (int i = 0; i < kMaxGenerateNameAttempts && name.empty(); ++i) {
      std::string candidate = generate + RandomSuffixLocked();
      if (!tables_[index].contains(Key(key_ns, candidate))) name = std::move(candidate);
    }
    if (name.empty()) return AlreadyExists(r, generate);
    m["name"] = name;
  }
  const std::string key = Key(key_ns, name);
  if (tables_[index].contains(key)) return AlreadyExists(r, name);
  if (Is(r, hami::kube::kServices)) AllocateClusterIpLocked(index, *prepared);
  m["uid"] = NewUidLocked();
  if (mode == WriteMode::kDryRun)
    return std::make_shared<const StoredObject>(std::move(*prepared), 0);
  return CommitLocked(index, key, EventType::kAdded, std::move(*prepared), nullptr);
}

void Store::AllocateClusterIpLocked(size_t index, json& service) {
  json& spec = service["spec"];
  if (!spec.is_object() || spec.value("type", "") == "ExternalName") return;
  auto ip = spec.find("clusterIP");
  if (ip != spec.end() && ip->is_string() && !ip->get_ref<const std::string&>().empty()) {
    if (!spec.contains("clusterIPs")) spec["clusterIPs"] = json::array({*ip});
    return;
  }
  std::set<std::string> used;
  for (const auto& [key, o] : tables_[index]) {
    const json& other = o->object();
    auto other_spec = other.find("spec");
    if (other_spec == other.end() || !other_spec->is_object()) continue;
    auto other_ip = other_spec->find("clusterIP");
    if (other_ip != other_spec->end() && other_ip->is_string())
      used.insert(other_ip->get<std::string>());
  }
  // 10.96.0.0/12, from 10.96.0.2 up: 10.96.0.1 is the `kubernetes` service's in a real cluster.
  for (uint32_t host = 2; host < (1u << 20) - 1; ++host) {
    const uint32_t a = (10u << 24) | (96u << 16) | host;
    const std::string text = std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 0xff) +
                             "." + std::to_string((a >> 8) & 0xff) + "." + std::to_string(a & 0xff);
    if (used.contains(text)) continue;
    spec["clusterIP"] = text;
    spec["clusterIPs"] = json::array({text});
    return;
  }
}

ApiResult<ObjectPtr> Store::Get(const Resource& r, std::string_view ns,
                                std::string_view name) const {
  auto index = ResourceIndex(r);
  if (!index) return PathNotFound();
  std::shared_lock lock(mu_);
  auto it = tables_[*index].find(Key(r.namespaced ? ns : "", name));
  if (it == tables_[*index].end()) return NotFound(r, name);
  return it->second;
}

ApiResult<Store::Updated> Store::Update(const Resource& r, std::string_view ns,
                                        std::string_view name, Subresource sub,
                                        const Mutation& mutation, bool create_if_missing,
                                        WriteMode mode) {
  auto index = ResourceIndex(r);
  if (!index) return PathNotFound();
  const std::string key = Key(r.namespaced ? ns : "", name);
  for (int attempt = 0; attempt < kMaxUpdateAttempts; ++attempt) {
    ObjectPtr current;
    {
      std::shared_lock lock(mu_);
      auto it = tables_[*index].find(key);
      if (it != tables_[*index].end()) current = it->second;
    }
    ApiResult<json> desired = [&]() -> ApiResult<json> {
      if (!current) return mutation(nullptr);
      json typed = current->object();
      typed["kind"] = r.kind;
      typed["apiVersion"] = r.ApiVersion();
      return mutation(&typed);
    }();
    if (!desired.ok()) return std::move(desired).status();
    auto decoded = DecodeObject(r, std::move(*desired));
    if (!decoded.ok()) return std::move(decoded).status();
    json next = std::move(*decoded);
    json& meta = next["metadata"];
    const std::string body_name = meta.value("name", "");
    if (body_name != name) {
      return BadRequest("the name of the object (" + body_name +
                        ") does not match the name on the URL (" + std::string(name) + ")");
    }
    if (r.namespaced) {
      const std::string body_ns = meta.value("namespace", "");
      if (!body_ns.empty() && body_ns != ns) {
        return BadRequest(
            "the namespace of the provided object does not match the namespace sent on the "
            "request");
      }
      meta["namespace"] = ns;
    } else {
      meta.erase("namespace");
    }
    if (!current) {
      if (!create_if_missing) return NotFound(r, name);
      meta.erase("resourceVersion");
      auto created = CreateDecoded(*index, r, ns, std::move(next), mode);
      if (!created.ok()) {
        if (created.status().reason == "AlreadyExists") continue;  // created meanwhile
        return std::move(created).status();
      }
      return Updated{std::move(*created), true};
    }
    const json& old = current->object();
    const std::string current_rv = std::to_string(current->rv());
    const std::string body_rv = meta.value("resourceVersion", "");
    if (!body_rv.empty() && body_rv != current_rv) return ModifiedConflict(r, name);
    const std::string old_uid = MetaString(old, "uid");
    const std::string body_uid = meta.value("uid", "");
    if (!body_uid.empty() && body_uid != old_uid) {
      return Invalid(r, name, "metadata.uid",
                     "Invalid value: \"" + body_uid + "\": field is immutable");
    }
    meta["uid"] = old_uid;
    meta["creationTimestamp"] = MetaString(old, "creationTimestamp");
    meta.erase("selfLink");
    // Only a delete sets the deletion fields; an update keeps what it finds.
    for (const char* field : {"deletionTimestamp", "deletionGracePeriodSeconds"}) {
      if (const json* f = FindMeta(old, field)) {
        meta[field] = *f;
      } else {
        meta.erase(field);
      }
    }
    auto prepared = PrepareForUpdate(r, sub, old, std::move(next));
    if (!prepared.ok()) return std::move(prepared).status();
    (*prepared)["metadata"]["resourceVersion"] = current_rv;
    if (*prepared == old) return Updated{current, false};
    // A deleting object whose last finalizer was removed goes.
    const bool finished =
        FindMeta(*prepared, "deletionTimestamp") != nullptr && !HasFinalizers(*prepared);
    if (mode == WriteMode::kDryRun) {
      return Updated{std::make_shared<const StoredObject>(std::move(*prepared), current->rv()),
                     false};
    }
    std::unique_lock lock(mu_);
    auto it = tables_[*index].find(key);
    if (it == tables_[*index].end() || it->second != current) continue;  // changed meanwhile
    return Updated{CommitLocked(*index, key, finished ? EventType::kDeleted : EventType::kModified,
                                std::move(*prepared), current),
                   false};
  }
  return ModifiedConflict(r, name);
}

ApiResult<ObjectPtr> Store::Delete(const Resource& r, std::string_view ns, std::string_view name,
                                   const Preconditions& preconditions, WriteMode mode) {
  auto index = ResourceIndex(r);
  if (!index) return PathNotFound();
  const std::string key = Key(r.namespaced ? ns : "", name);
  std::unique_lock lock(mu_);
  auto it = tables_[*index].find(key);
  if (it == tables_[*index].end()) return NotFound(r, name);
  ObjectPtr current = it->second;
  const std::string current_rv = std::to_string(current->rv());
  if (!preconditions.resource_version.empty() && preconditions.resource_version != current_rv) {
    return Conflict(r, name,
                    "the ResourceVersion in the precondition (" + preconditions.resource_version +
                        ") does not match the ResourceVersion in record (" + current_rv +
                        "). The object might have been modified");
  }
  const std::string uid = MetaString(current->object(), "uid");
  if (!preconditions.uid.empty() && preconditions.uid != uid) {
    return Conflict(r, name,
                    "the UID in the precondition (" + preconditions.uid +
                        ") does not match the UID in record (" + uid +
                        "). The object might have been deleted and then recreated");
  }
  const bool is_namespace = *index == *ResourceIndex(hami::kube::kNamespaces);
  if (is_namespace && IsProtectedNamespace(name)) {
    return Forbidden(r, name, "this namespace may not be deleted");
  }
  if (!is_namespace && HasFinalizers(current->object())) {
    // Marked for deletion; it goes when its last finalizer is removed (Update).
    if (FindMeta(current->object(), "deletionTimestamp") != nullptr) return current;
    json marked = current->object();
    marked["metadata"]["deletionTimestamp"] =
        hami::kube::FormatTime(std::chrono::system_clock::now());
    marked["metadata"]["deletionGracePeriodSeconds"] = 0;
    if (mode == WriteMode::kDryRun) {
      return std::make_shared<const StoredObject>(std::move(marked), current->rv());
    }
    return CommitLocked(*index, key, EventType::kModified, std::move(marked), current);
  }
  if (mode == WriteMode::kDryRun) return current;
  if (is_namespace) {
    auto all = hami::kube::AllResources();
    for (size_t i = 0; i < all.size(); ++i) {
      if (!all[i].namespaced) continue;
      for (const ObjectPtr& o : Range(tables_[i], name)) {
        CommitLocked(i, KeyOf(*o), EventType::kDeleted, o->object(), o);
      }
    }
  }
  CommitLocked(*index, key, EventType::kDeleted, current->object(), current);
  return current;
}

std::shared_ptr<Store::Snapshot> Store::FindSnapshot(uint64_t id) {
  std::lock_guard lock(snapshots_mu_);
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return nullptr;
  const auto now = std::chrono::steady_clock::now();
  if (now - it->second->last_used > options_.snapshot_ttl) {
    snapshots_.erase(it);
    return nullptr;
  }
  it->second->last_used = now;
  return it->second;
}

uint64_t Store::SaveSnapshot(std::shared_ptr<Snapshot> snapshot) {
  std::lock_guard lock(snapshots_mu_);
  snapshot->last_used = std::chrono::steady_clock::now();
  const uint64_t id = next_snapshot_++;
  snapshots_.emplace(id, std::move(snapshot));
  while (snapshots_.size() > std::max<size_t>(options_.max_snapshots, 1)) {
    auto oldest = std::min_element(
        snapshots_.begin(), snapshots_.end(),
        [](const auto& a, const auto& b) { return a.second->last_used < b.second->last_used; });
    snapshots_.erase(oldest);
  }
  return id;
}

ApiResult<Store::Page> Store::List(const Resource& r, std::string_view ns, const Filter& filter,
                                   int64_t limit, std::string_view continue_token) {
  auto index = ResourceIndex(r);
  if (!index) return PathNotFound();
  const std::string list_ns = r.namespaced ? std::string(ns) : std::string();
  std::shared_ptr<Snapshot> snapshot;
  uint64_t snapshot_id = 0;
  std::string start;
  if (!continue_token.empty()) {
    auto token = DecodeToken(continue_token);
    if (!token.ok()) return std::move(token).status();
    if (token->resource != r.QualifiedName() || token->ns != list_ns) {
      return BadRequest("continue key is not valid: it belongs to another list");
    }
    snapshot = FindSnapshot(token->id);
    if (!snapshot || snapshot->rv != token->rv || snapshot->resource != *index ||
        resource_version() - snapshot->rv > options_.watch_window) {
      return ContinueExpired();
    }
    snapshot_id = token->id;
    start = std::move(token->start);
  } else {
    snapshot = std::make_shared<Snapshot>();
    snapshot->resource = *index;
    snapshot->ns = list_ns;
    std::shared_lock lock(mu_);
    snapshot->items = Range(tables_[*index], list_ns);
    snapshot->rv = rv_;
  }
  Page page;
  page.rv = snapshot->rv;
  const auto& items = snapshot->items;
  auto it = items.begin();
  if (!start.empty()) {
    it = std::upper_bound(
        items.begin(), items.end(), start,
        [](const std::string& key, const ObjectPtr& o) { return key < KeyOf(*o); });
  }
  for (; it != items.end(); ++it) {
    if (limit > 0 && int64_t(page.items.size()) >= limit) break;
    if (!filter || filter((*it)->object())) page.items.push_back(*it);
  }
  if (limit > 0 && it != items.end()) {
    int64_t remaining = 0;
    for (auto rest = it; rest != items.end(); ++rest) {
      if (!filter || filter((*rest)->object())) ++remaining;
    }
    if (remaining > 0 && !page.items.empty()) {
      if (snapshot_id == 0) snapshot_id = SaveSnapshot(snapshot);
      page.continue_token = EncodeToken(
          {snapshot->rv, snapshot_id, KeyOf(*page.items.back()), r.QualifiedName(), list_ns});
      page.remaining = remaining;
    }
  }
  return page;
}

ApiResult<Store::WatchStart> Store::Watch(const Resource& r, std::string_view ns,
                                          std::optional<int64_t> from_rv) {
  auto index = ResourceIndex(r);
  if (!index) return PathNotFound();
  const std::string watch_ns = r.namespaced ? std::string(ns) : std::string();
  WatchStart start;
  start.watcher = std::make_shared<Watcher>(*index, watch_ns,
                                            size_t(std::max<int64_t>(options_.watch_window, 1)));
  std::unique_lock lock(mu_);
  if (from_rv) {
    const int64_t n = *from_rv;
    const int64_t oldest = changes_.empty() ? rv_ + 1 : changes_.front()->rv;
    if (n < oldest - 1) {
      return Expired("too old resource version: " + std::to_string(n) + " (" +
                     std::to_string(oldest - 1) + ")");
    }
    for (int64_t i = std::max<int64_t>(n + 1 - oldest, 0); i < int64_t(changes_.size()); ++i) {
      const ChangePtr& c = changes_[size_t(i)];
      if (c->resource == *index && (watch_ns.empty() || c->ns == watch_ns)) {
        if (start.watcher->Push(c)) ++watches_overflowed_;
      }
    }
    start.rv = n;
  } else {
    start.initial = Range(tables_[*index], watch_ns);
    start.rv = rv_;
  }
  if (watchers_closed_) start.watcher->Close();
  watchers_[*index].push_back(start.watcher);
  return start;
}

void Store::Unwatch(const std::shared_ptr<Watcher>& watcher) {
  std::unique_lock lock(mu_);
  auto& list = watchers_[watcher->resource()];
  list.erase(std::remove(list.begin(), list.end(), watcher), list.end());
}

std::optional<int64_t> Store::DrainedRv(const Watcher& watcher) const {
  std::shared_lock lock(mu_);
  if (watcher.state() != Watcher::State::kOpen) return std::nullopt;
  if (!watcher.Empty()) return std::nullopt;
  return rv_;
}

void Store::CloseWatchers() {
  std::unique_lock lock(mu_);
  watchers_closed_ = true;
  for (const auto& list : watchers_) {
    for (const auto& w : list) w->Close();
  }
}

int64_t Store::resource_version() const {
  std::shared_lock lock(mu_);
  return rv_;
}

size_t Store::watcher_count() const {
  std::shared_lock lock(mu_);
  size_t n = 0;
  for (const auto& list : watchers_) n += list.size();
  return n;
}

}  // namespace hami::sim::kube
