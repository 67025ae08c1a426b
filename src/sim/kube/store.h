// The simulated API server's storage: every object of every served resource, one cluster-wide
// resourceVersion counter, the recent changes for watch, and consistent list snapshots for
// pagination. It plays the parts of etcd, the registry and the watch cache; the HTTP layer
// (api_server.cc) only parses requests and renders answers.
//
// Objects are stored without `kind` and `apiVersion` (the form of a list's items) and are
// immutable once stored: readers share them (ObjectPtr) without copying or locking.
//
// Thread safety: every method may be called from any thread. Writers hold one exclusive lock
// only to commit (the new object is computed before, and the commit retries when the object
// changed meanwhile, as the API server's GuaranteedUpdate does); readers take it shared. Fan-out
// to watchers never blocks on a watcher: each has its own queue, and one that falls more than
// the watch window behind is marked overflowed (its stream then ends with 410 Expired).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.h"
#include "kube/resource.h"
#include "sim/kube/api_status.h"
#include "sim/kube/strategy.h"

namespace hami::sim::kube {

// One stored version of an object. Immutable; `Json()` is its serialization, made once.
class StoredObject {
 public:
  StoredObject(nlohmann::json object, int64_t rv) : object_(std::move(object)), rv_(rv) {}
  const nlohmann::json& object() const { return object_; }
  int64_t rv() const { return rv_; }
  // The compact JSON text (invalid UTF-8 replaced), computed on first use; thread-safe.
  const std::string& Json() const;

 private:
  nlohmann::json object_;
  int64_t rv_;
  mutable std::once_flag once_;
  mutable std::string json_;
};
using ObjectPtr = std::shared_ptr<const StoredObject>;

enum class EventType { kAdded, kModified, kDeleted };
std::string_view EventTypeName(EventType t);  // "ADDED", "MODIFIED", "DELETED"

// One committed change. `object` is the new state; for kDeleted, the last state with the
// deletion's resourceVersion. `previous` is the state before (null for kAdded).
struct Change {
  EventType type;
  size_t resource;  // index in hami::kube::AllResources()
  std::string ns;
  int64_t rv;
  ObjectPtr object;
  ObjectPtr previous;
};
using ChangePtr = std::shared_ptr<const Change>;

// The queue of one watch stream, filled by the store and drained by the stream's thread.
class Watcher {
 public:
  enum class State { kOpen, kOverflowed, kClosed };
  Watcher(size_t resource, std::string ns, size_t limit);
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // Readable (poll) while changes are queued or the state is not kOpen.
  int fd() const { return event_fd_.get(); }
  // Takes every queued change, oldest first.
  std::vector<ChangePtr> Take();
  State state() const;
  bool Empty() const;
  size_t resource() const { return resource_; }
  const std::string& ns() const { return ns_; }

  // For the store: adds a change (kOverflowed, dropping the queue, beyond `limit`), or ends.
  // True when this change is the one that overflowed the queue.
  bool Push(ChangePtr change);
  void Close();

 private:
  void SignalLocked();

  const size_t resource_;
  const std::string ns_;  // empty: every namespace
  const size_t limit_;
  UniqueFd event_fd_;
  mutable std::mutex mu_;
  std::deque<ChangePtr> queue_;
  State state_ = State::kOpen;
  bool signaled_ = false;
};

// How a write is carried out: for real, or validated and answered without storing (dryRun=All).
enum class WriteMode { kCommit, kDryRun };

class Store {
 public:
  struct Options {
    int64_t watch_window = 10000;  // changes kept for watch (and list snapshots' lifetime)
    std::chrono::seconds snapshot_ttl{300};
    size_t max_snapshots = 128;
  };
  explicit Store(const Options& options);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // POST of a collection. `object` is a decoded body (DecodeObject); `ns` the URL's namespace
  // (ignored for cluster-scoped resources). Assigns uid, creationTimestamp, resourceVersion and
  // a name for generateName; 404 when the namespace is missing, 409 AlreadyExists.
  ApiResult<ObjectPtr> Create(const hami::kube::Resource& r, std::string_view ns,
                              nlohmann::json object, WriteMode mode = WriteMode::kCommit);

  ApiResult<ObjectPtr> Get(const hami::kube::Resource& r, std::string_view ns,
                           std::string_view name) const;

  // Computes the desired object from the current one (null when absent): a PUT body, or a
  // patch applied to it. The result is decoded (DecodeObject) by the store.
  using Mutation = std::function<ApiResult<nlohmann::json>(const nlohmann::json* current)>;
  struct Updated {
    ObjectPtr object;
    bool created = false;  // the object did not exist (create on update, apply)
  };
  // PUT/PATCH of an object or its subresource. A desired object carrying a resourceVersion
  // other than the stored one is a 409 Conflict; one equal to the stored object (whatever its
  // resourceVersion says) changes nothing and emits no event. A missing object is created when
  // `create_if_missing` (the mutation gets null), else 404.
  ApiResult<Updated> Update(const hami::kube::Resource& r, std::string_view ns,
                            std::string_view name, Subresource sub, const Mutation& mutation,
                            bool create_if_missing, WriteMode mode = WriteMode::kCommit);

  struct Preconditions {
    std::string resource_version;  // empty: none
    std::string uid;
  };
  // DELETE: answers the object's last state. Deleting a namespace deletes everything in it;
  // default, kube-system and kube-public may not be deleted (403). An object (other than a
  // namespace) with metadata.finalizers is only marked, as the API server does: its
  // deletionTimestamp (and deletionGracePeriodSeconds 0) are set, and it goes when an update
  // leaves it without finalizers. Updates keep the deletion fields as the store has them.
  ApiResult<ObjectPtr> Delete(const hami::kube::Resource& r, std::string_view ns,
                              std::string_view name, const Preconditions& preconditions,
                              WriteMode mode = WriteMode::kCommit);

  // A page of a list. `filter` selects items (selectors); `limit` 0 means all. A page that
  // leaves matching items behind carries a continue token; the next page, with that token,
  // comes from the same snapshot (the same resourceVersion). A token whose snapshot is gone
  // (older than the watch window or the TTL, or evicted) is 410 Expired; a malformed one, or
  // one from another resource or namespace, is 400.
  using Filter = std::function<bool(const nlohmann::json&)>;
  struct Page {
    std::vector<ObjectPtr> items;
    int64_t rv = 0;
    std::string continue_token;
    std::optional<int64_t> remaining;  // matching items after this page, when `limit` was set
  };
  ApiResult<Page> List(const hami::kube::Resource& r, std::string_view ns, const Filter& filter,
                       int64_t limit, std::string_view continue_token);

  // Starts a watch of `r` in `ns` (empty: all namespaces). With `from_rv`, the queue starts
  // with the kept changes after it (410 Expired "too old resource version: N (M)" when some
  // are no longer kept); without, `initial` holds every current object (synthetic ADDED) and
  // the queue the changes after them. Atomic with respect to writers.
  struct WatchStart {
    std::shared_ptr<Watcher> watcher;
    std::vector<ObjectPtr> initial;
    int64_t rv = 0;  // the resourceVersion the watch starts from
  };
  ApiResult<WatchStart> Watch(const hami::kube::Resource& r, std::string_view ns,
                              std::optional<int64_t> from_rv);
  void Unwatch(const std::shared_ptr<Watcher>& watcher);
  // The current resourceVersion when `watcher`'s queue is empty (every change up to it has been
  // taken: a bookmark may carry it), else nullopt.
  std::optional<int64_t> DrainedRv(const Watcher& watcher) const;
  // Closes every watcher, present and future (Stop).
  void CloseWatchers();

  int64_t resource_version() const;
  size_t watcher_count() const;
  // How many watchers have fallen more than the watch window behind, since the start.
  uint64_t watches_overflowed() const { return watches_overflowed_.load(); }

 private:
  struct Snapshot {
    size_t resource;
    std::string ns;
    int64_t rv;
    std::vector<ObjectPtr> items;  // key order
    std::chrono::steady_clock::time_point last_used;
  };
  using Table = std::map<std::string, ObjectPtr, std::less<>>;  // "ns/name" → object

  std::atomic<uint64_t> watches_overflowed_{0};

  ApiResult<ObjectPtr> CreateDecoded(size_t index, const hami::kube::Resource& r,
                                     std::string_view ns, nlohmann::json object, WriteMode mode);
  // Commits a change (the exclusive lock held): assigns the next resourceVersion to `object`.
  ObjectPtr CommitLocked(size_t index, const std::string& key, EventType type,
                         nlohmann::json object, ObjectPtr previous);
  // Services: assigns spec.clusterIP (and clusterIPs) from 10.96.0.0/12 when the object has
  // none; "None" (headless) and ExternalName services get none.
  void AllocateClusterIpLocked(size_t index, nlohmann::json& service);
  std::string NewUidLocked();
  std::string RandomSuffixLocked();
  std::shared_ptr<Snapshot> FindSnapshot(uint64_t id);
  uint64_t SaveSnapshot(std::shared_ptr<Snapshot> snapshot);

  const Options options_;
  mutable std::shared_mutex mu_;
  std::vector<Table> tables_;  // by resource index
  int64_t rv_ = 0;
  std::deque<ChangePtr> changes_;  // the last watch_window changes, rv consecutive
  std::vector<std::vector<std::shared_ptr<Watcher>>> watchers_;  // by resource index
  bool watchers_closed_ = false;
  std::mt19937_64 rng_;

  std::mutex snapshots_mu_;
  std::map<uint64_t, std::shared_ptr<Snapshot>> snapshots_;
  uint64_t next_snapshot_ = 1;
};

// The index of `r` in hami::kube::AllResources(), or nullopt for a resource not served.
std::optional<size_t> ResourceIndex(const hami::kube::Resource& r);

}  // namespace hami::sim::kube
