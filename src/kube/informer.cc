#include "kube/informer.h"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "kube/objects.h"
#include "log/log.h"

namespace hami::kube {
namespace {

std::string_view ResourceVersionOf(const nlohmann::json& object) {
  return MetadataString(object, "resourceVersion");
}

double Jitter() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.5, 1.5)(rng);
}

int RandomWatchTimeout(std::chrono::seconds min) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  int64_t lo = std::max<int64_t>(1, min.count());
  return int(std::uniform_int_distribution<int64_t>(lo, 2 * lo - 1)(rng));
}

}  // namespace

std::string ObjectKey(std::string_view ns, std::string_view name) {
  std::string key;
  if (!ns.empty()) {
    key.reserve(ns.size() + 1 + name.size());
    key.append(ns);
    key += '/';
  }
  key.append(name);
  return key;
}

std::string ObjectKey(const nlohmann::json& object) {
  std::string_view name = MetadataString(object, "name");
  if (name.empty()) return {};
  return ObjectKey(MetadataString(object, "namespace"), name);
}

ObjectPtr Store::Get(std::string_view key) const {
  std::shared_lock lock(mu_);
  auto it = objects_.find(std::string(key));
  return it == objects_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> Store::List() const {
  std::shared_lock lock(mu_);
  std::vector<ObjectPtr> out;
  out.reserve(objects_.size());
  for (const auto& [key, object] : objects_) out.push_back(object);
  return out;
}

std::vector<std::string> Store::ListKeys() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  out.reserve(objects_.size());
  for (const auto& [key, object] : objects_) out.push_back(key);
  return out;
}

size_t Store::size() const {
  std::shared_lock lock(mu_);
  return objects_.size();
}

ObjectPtr Store::Put(const std::string& key, ObjectPtr object) {
  std::unique_lock lock(mu_);
  ObjectPtr& slot = objects_[key];
  std::swap(slot, object);
  return object;
}

ObjectPtr Store::Remove(const std::string& key) {
  std::unique_lock lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return nullptr;
  ObjectPtr old = std::move(it->second);
  objects_.erase(it);
  return old;
}

std::unordered_map<std::string, ObjectPtr> Store::Snapshot() const {
  std::shared_lock lock(mu_);
  return objects_;
}

struct Informer::Item {
  enum class Kind { kAdded, kModified, kDeleted, kReplace };
  Kind kind;
  ObjectPtr object;              // events
  std::vector<ObjectPtr> items;  // kReplace: the whole list
};

Informer::Informer(Client& client, const Resource& resource, InformerScope scope,
                   InformerOptions options)
    : client_(client), resource_(resource), scope_(std::move(scope)), options_(options) {}

Informer::~Informer() { Stop(); }

void Informer::AddHandler(ResourceEventHandler handler) {
  {
    std::lock_guard lock(mu_);
    pending_handlers_.push_back(std::move(handler));
  }
  cv_.notify_all();
}

void Informer::Start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  dispatch_ = std::jthread([this](std::stop_token stop) { RunDispatch(stop); });
  reflector_ = std::jthread([this](std::stop_token stop) { RunReflector(stop); });
}

void Informer::Stop() {
  std::lock_guard stop_lock(stop_mu_);
  reflector_.request_stop();
  dispatch_.request_stop();
  if (reflector_.joinable()) reflector_.join();
  if (dispatch_.joinable()) dispatch_.join();
}

bool Informer::HasSynced() const {
  std::lock_guard lock(mu_);
  return synced_;
}

bool Informer::WaitForSync(std::chrono::steady_clock::time_point deadline,
                           std::stop_token stop) const {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, stop, deadline, [this] { return synced_; });
}

std::string Informer::last_resource_version() const {
  std::lock_guard lock(mu_);
  return last_rv_;
}

Informer::Stats Informer::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Informer::Enqueue(Item item) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(item));
  }
  cv_.notify_all();
}

bool Informer::Backoff(std::stop_token& stop, int& failures) {
  double ms = double(options_.backoff_base.count()) * double(1LL << std::min(failures, 20));
  ms = std::min(ms, double(options_.backoff_cap.count())) * Jitter();
  ++failures;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(ms * 1000));
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, stop, deadline, [] { return false; });
  return !stop.stop_requested();
}

Status Informer::ListOnce(std::stop_token stop) {
  ListOptions lo;
  lo.label_selector = scope_.label_selector;
  lo.field_selector = scope_.field_selector;
  lo.limit = options_.list_page_size;
  nlohmann::json list = HAMI_TRY(client_.ListAll(resource_, scope_.ns, lo, std::move(stop)));
  Item replace{Item::Kind::kReplace, nullptr, {}};
  std::string rv(ResourceVersionOf(list));
  if (rv.empty()) {
    return Error(ErrorCode::kCorrupt, "list " + DescribeObject(resource_, scope_.ns, "") +
                                          ": the answer has no metadata.resourceVersion");
  }
  auto items = list.find("items");
  if (items != list.end() && items->is_array()) {
    replace.items.reserve(items->size());
    for (nlohmann::json& item : *items) {
      if (ObjectKey(item).empty()) {
        return Error(ErrorCode::kCorrupt, "list " + DescribeObject(resource_, scope_.ns, "") +
                                              ": an item has no metadata.name");
      }
      if (!item.contains("kind")) item["kind"] = resource_.kind;
      if (!item.contains("apiVersion")) item["apiVersion"] = resource_.ApiVersion();
      replace.items.push_back(std::make_shared<const nlohmann::json>(std::move(item)));
    }
  } else if (items != list.end() && !items->is_null()) {
    return Error(ErrorCode::kCorrupt,
                 "list " + DescribeObject(resource_, scope_.ns, "") + ": items is not an array");
  }
  {
    std::lock_guard lock(mu_);
    last_rv_ = rv;
    if (stats_.lists > 0) ++stats_.relists;
    ++stats_.lists;
  }
  Enqueue(std::move(replace));
  return OkStatus();
}

void Informer::RunReflector(std::stop_token stop) {
  int failures = 0;
  bool need_list = true;
  while (!stop.stop_requested()) {
    if (need_list) {
      Status listed = ListOnce(stop);
      if (stop.stop_requested()) return;
      if (!listed.ok()) {
        {
          std::lock_guard lock(mu_);
          ++stats_.list_failures;
        }
        HAMI_LOG(kWarn, "informer %s: %s", std::string(resource_.QualifiedName()).c_str(),
                 listed.error().message().c_str());
        Backoff(stop, failures);
        continue;
      }
      need_list = false;
    }

    WatchOptions wo;
    wo.label_selector = scope_.label_selector;
    wo.field_selector = scope_.field_selector;
    wo.allow_bookmarks = true;
    wo.timeout_seconds = RandomWatchTimeout(options_.min_watch_timeout);
    {
      std::lock_guard lock(mu_);
      wo.resource_version = last_rv_;
      if (stats_.watches > 0) ++stats_.watch_restarts;
      ++stats_.watches;
    }
    bool got_event = false;
    bool garbled = false;
    nlohmann::json error_status;
    auto started = std::chrono::steady_clock::now();
    Result<WatchEnd> end = client_.Watch(
        resource_, scope_.ns, wo,
        [&](WatchEvent&& ev) {
          if (ev.type == WatchEventType::kError) {
            error_status = std::move(ev.object);
            return false;
          }
          std::string rv(ResourceVersionOf(ev.object));
          if (rv.empty() ||
              (ev.type != WatchEventType::kBookmark && ObjectKey(ev.object).empty())) {
            garbled = true;
            return false;
          }
          got_event = true;
          failures = 0;
          {
            std::lock_guard lock(mu_);
            last_rv_ = std::move(rv);
            if (ev.type == WatchEventType::kBookmark) {
              ++stats_.bookmarks;
            } else {
              ++stats_.events;
            }
          }
          if (ev.type == WatchEventType::kBookmark) return true;
          Item::Kind kind = ev.type == WatchEventType::kAdded      ? Item::Kind::kAdded
                            : ev.type == WatchEventType::kModified ? Item::Kind::kModified
                                                                   : Item::Kind::kDeleted;
          Enqueue(Item{kind, std::make_shared<const nlohmann::json>(std::move(ev.object)), {}});
          return true;
        },
        stop);
    if (stop.stop_requested()) return;

    bool expired = !end.ok() && end.error().code() == ErrorCode::kExpired;
    bool corrupt = garbled || (!end.ok() && end.error().code() == ErrorCode::kCorrupt);
    if (!error_status.is_null()) {
      auto code = error_status.find("code");
      if (code != error_status.end() && code->is_number_integer() && code->get<int>() == 410) {
        expired = true;
      }
    }
    bool failed = !end.ok() || !error_status.is_null() || garbled;
    if (failed) {
      std::lock_guard lock(mu_);
      ++stats_.watch_failures;
    }
    if (expired) {
      need_list = true;  // at once after a healthy watch; backing off when it keeps happening
      if (failures == 0) {
        ++failures;
      } else {
        Backoff(stop, failures);
      }
    } else if (corrupt) {
      HAMI_LOG(kWarn, "informer %s: watch stream garbled, listing again",
               std::string(resource_.QualifiedName()).c_str());
      need_list = true;
      Backoff(stop, failures);
    } else if (failed) {
      if (!end.ok()) {
        HAMI_LOG(kWarn, "informer %s: %s", std::string(resource_.QualifiedName()).c_str(),
                 end.error().message().c_str());
      }
      Backoff(stop, failures);
    } else if (got_event || std::chrono::steady_clock::now() - started > std::chrono::seconds(1)) {
      failures = 0;  // an ordinary end of a stream: resume at once
    } else {
      Backoff(stop, failures);  // closed at once without a word: do not spin
    }
  }
}

void Informer::Deliver(const std::function<void(ResourceEventHandler&)>& call,
                       std::vector<ResourceEventHandler>& handlers) {
  for (ResourceEventHandler& h : handlers) {
    try {
      call(h);
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      ++stats_.handler_errors;
      HAMI_LOG(kWarn, "informer %s: a handler threw: %s",
               std::string(resource_.QualifiedName()).c_str(), e.what());
    } catch (...) {
      std::lock_guard lock(mu_);
      ++stats_.handler_errors;
    }
  }
}

void Informer::Apply(Item& item) {
  auto add = [](const ObjectPtr& o) {
    return [&o](ResourceEventHandler& h) {
      if (h.on_add) h.on_add(o);
    };
  };
  auto update = [](const ObjectPtr& old_o, const ObjectPtr& new_o) {
    return [&old_o, &new_o](ResourceEventHandler& h) {
      if (h.on_update) h.on_update(old_o, new_o);
    };
  };
  auto remove = [](const ObjectPtr& o) {
    return [&o](ResourceEventHandler& h) {
      if (h.on_delete) h.on_delete(o);
    };
  };

  if (item.kind == Item::Kind::kReplace) {
    std::unordered_map<std::string, ObjectPtr> before = store_.Snapshot();
    for (const ObjectPtr& o : item.items) {
      std::string key = ObjectKey(*o);
      auto it = before.find(key);
      store_.Put(key, o);
      if (it == before.end()) {
        Deliver(add(o), handlers_);
        continue;
      }
      ObjectPtr old = std::move(it->second);
      before.erase(it);
      if (ResourceVersionOf(*old) != ResourceVersionOf(*o)) Deliver(update(old, o), handlers_);
    }
    for (auto& [key, old] : before) {
      store_.Remove(key);
      Deliver(remove(old), handlers_);
    }
    bool first = false;
    {
      std::lock_guard lock(mu_);
      first = !synced_;
      synced_ = true;
    }
    if (first) cv_.notify_all();
    return;
  }

  std::string key = ObjectKey(*item.object);
  if (item.kind == Item::Kind::kDeleted) {
    if (store_.Remove(key) != nullptr) Deliver(remove(item.object), handlers_);
    return;
  }
  ObjectPtr old = store_.Put(key, item.object);
  if (old == nullptr) {
    Deliver(add(item.object), handlers_);
  } else {
    Deliver(update(old, item.object), handlers_);
  }
}

void Informer::RunDispatch(std::stop_token stop) {
  using SteadyClock = std::chrono::steady_clock;
  const bool resync = options_.resync_period.count() > 0;
  SteadyClock::time_point next_resync =
      resync ? SteadyClock::now() + options_.resync_period : SteadyClock::time_point::max();
  std::vector<Item> batch;
  std::vector<ResourceEventHandler> added;
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, stop, next_resync,
                     [this] { return !queue_.empty() || !pending_handlers_.empty(); });
      if (stop.stop_requested()) return;
      batch.swap(queue_);
      added.swap(pending_handlers_);
    }
    if (!added.empty()) {
      std::vector<ObjectPtr> existing = store_.List();
      for (const ObjectPtr& o : existing) {
        Deliver(
            [&o](ResourceEventHandler& h) {
              if (h.on_add) h.on_add(o);
            },
            added);
      }
      for (ResourceEventHandler& h : added) handlers_.push_back(std::move(h));
      added.clear();
    }
    for (Item& item : batch) {
      if (stop.stop_requested()) return;
      Apply(item);
    }
    batch.clear();
    if (resync && SteadyClock::now() >= next_resync) {
      {
        std::lock_guard lock(mu_);
        ++stats_.resyncs;
      }
      for (const ObjectPtr& o : store_.List()) {
        Deliver(
            [&o](ResourceEventHandler& h) {
              if (h.on_update) h.on_update(o, o);
            },
            handlers_);
      }
      next_resync = SteadyClock::now() + options_.resync_period;
    }
  }
}

InformerFactory::InformerFactory(Client& client, InformerOptions defaults)
    : client_(client), defaults_(defaults) {}

InformerFactory::~InformerFactory() { StopAll(); }

std::shared_ptr<Informer> InformerFactory::Get(const Resource& resource,
                                               const InformerScope& scope) {
  InformerScope s = scope;
  if (!resource.namespaced) s.ns.clear();
  std::lock_guard lock(mu_);
  Key key{resource.QualifiedName(), s};
  auto it = informers_.find(key);
  if (it != informers_.end()) return it->second;
  auto informer = std::make_shared<Informer>(client_, resource, std::move(s), defaults_);
  informers_.emplace(std::move(key), informer);
  if (started_) informer->Start();
  return informer;
}

void InformerFactory::Start() {
  std::lock_guard lock(mu_);
  started_ = true;
  for (auto& [key, informer] : informers_) informer->Start();
}

void InformerFactory::StopAll() {
  std::vector<std::shared_ptr<Informer>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, informer] : informers_) all.push_back(informer);
  }
  for (auto& informer : all) informer->Stop();  // unlocked: a handler may call Get()
}

bool InformerFactory::WaitForSync(std::chrono::steady_clock::time_point deadline,
                                  std::stop_token stop) {
  std::vector<std::shared_ptr<Informer>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, informer] : informers_) all.push_back(informer);
  }
  for (auto& informer : all) {
    if (!informer->WaitForSync(deadline, stop)) return false;
  }
  return true;
}

}  // namespace hami::kube
