// Informers: a local, continuously updated copy of one resource collection, in client-go's
// shape. A reflector thread lists (every page) and then watches from the list's
// resourceVersion; a dispatch thread applies what it receives to a thread-safe Store and calls
// the handlers in order. One informer per (resource, namespace, selectors) serves every handler
// of a process: get it from an InformerFactory.
//
// What the reflector does on each outcome of a watch:
//   an event (ADDED/MODIFIED/DELETED/BOOKMARK)  remember its resourceVersion
//   the server ended the stream                 watch again from the last version, at once
//   a transport error, 429/5xx, an ERROR event  watch again from the last version after a
//                                               jittered exponential backoff
//   410 Expired, or a garbled stream            list again (after a healthy watch at once,
//                                               else after the backoff)
// A relist replaces the store, and the handlers get the difference: adds, updates, and
// deletes (with the last known state) for objects that went away during the gap. A failed list
// is retried with the same backoff. Stop() ends all of it promptly, a list or watch request in
// flight included (the reflector's stop token aborts it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kube/client.h"
#include "kube/resource.h"

namespace hami::kube {

// Objects are shared, immutable and never copied by the store or the informer: a reader keeps
// the version it got for as long as it likes.
using ObjectPtr = std::shared_ptr<const nlohmann::json>;

// "namespace/name", or "name" for cluster-scoped objects (client-go's MetaNamespaceKeyFunc).
std::string ObjectKey(std::string_view ns, std::string_view name);
// The key of an object from its metadata ("" when metadata.name is missing).
std::string ObjectKey(const nlohmann::json& object);

// The informer's copy of the collection. Thread-safe: readers share a lock held only to copy a
// pointer (Get) or the vector of pointers (List).
class Store {
 public:
  ObjectPtr Get(std::string_view key) const;  // nullptr when absent
  ObjectPtr Get(std::string_view ns, std::string_view name) const {
    return Get(ObjectKey(ns, name));
  }
  std::vector<ObjectPtr> List() const;  // in no particular order
  std::vector<std::string> ListKeys() const;
  size_t size() const;

  // Writers (the informer's dispatch thread). Put returns the object it replaced, or nullptr.
  ObjectPtr Put(const std::string& key, ObjectPtr object);
  ObjectPtr Remove(const std::string& key);  // the removed object, or nullptr
  // Every key and object, for a relist's difference.
  std::unordered_map<std::string, ObjectPtr> Snapshot() const;

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, ObjectPtr> objects_;
};

// Callbacks of one handler, each optional. They run on the informer's dispatch thread, one
// event at a time and in the order the changes happened, after the store shows the change. A
// handler that blocks delays every handler of the informer (enqueue work, do not do it here).
// An exception thrown by a handler is caught and counted (Stats::handler_errors).
struct ResourceEventHandler {
  std::function<void(const ObjectPtr& object)> on_add{};
  // Also called with old == new for every object once per resync period.
  std::function<void(const ObjectPtr& old_object, const ObjectPtr& new_object)> on_update{};
  // The object's final state: the DELETED event's object, or for an object found gone at a
  // relist, the last state the informer had.
  std::function<void(const ObjectPtr& object)> on_delete{};
};

// What an informer watches. Two informers with equal scopes are the same informer in a factory.
struct InformerScope {
  std::string ns{};  // empty: all namespaces (ignored for cluster-scoped resources)
  std::string label_selector{};
  std::string field_selector{};
  auto operator<=>(const InformerScope&) const = default;
};

struct InformerOptions {
  std::chrono::milliseconds resync_period{0};  // 0: no resync
  int64_t list_page_size = 500;                // client-go's page size
  // Watches ask the server to end the stream after a random time in [min, 2*min) (client-go:
  // 5 to 10 minutes), so that a stream that silently died cannot hang the informer forever.
  std::chrono::seconds min_watch_timeout{300};
  std::chrono::milliseconds backoff_base{200};   // doubled after each failure, +-50% jitter,
  std::chrono::milliseconds backoff_cap{30000};  // reset after a success
};

class Informer {
 public:
  // Counters since construction, for metrics.
  struct Stats {
    uint64_t lists = 0;    // successful lists, the first included
    uint64_t relists = 0;  // lists after the first (410 Expired or a garbled stream)
    uint64_t list_failures = 0;
    uint64_t watches = 0;         // watch requests made
    uint64_t watch_restarts = 0;  // watches made after another one ended, for any reason
    uint64_t watch_failures = 0;  // watches that ended with an error (410 and garbage included)
    uint64_t events = 0;          // ADDED, MODIFIED and DELETED events received
    uint64_t bookmarks = 0;
    uint64_t resyncs = 0;
    uint64_t handler_errors = 0;
  };

  // `client` must outlive the informer. Nothing starts before Start().
  Informer(Client& client, const Resource& resource, InformerScope scope,
           InformerOptions options = {});
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Adds a handler; any thread, any time. A handler added while the store has objects first
  // gets an on_add for each of them (on the dispatch thread, before any later event).
  void AddHandler(ResourceEventHandler handler);

  // Starts the threads; later calls do nothing. An informer is started once.
  void Start();
  // Ends the threads and returns when they are gone (see the top of this file); idempotent.
  // No handler runs after Stop() returns. The store keeps its last contents.
  void Stop();

  // True once the first list has been applied to the store and its on_add calls have run.
  bool HasSynced() const;
  // Waits for HasSynced(); false when `deadline` passed or `stop` was requested first.
  bool WaitForSync(std::chrono::steady_clock::time_point deadline, std::stop_token stop = {}) const;

  const Store& store() const { return store_; }
  const Resource& resource() const { return resource_; }
  const InformerScope& scope() const { return scope_; }
  // The last resourceVersion the reflector saw (list, event or bookmark).
  std::string last_resource_version() const;
  Stats stats() const;

 private:
  struct Item;  // one entry of the dispatch queue
  void RunReflector(std::stop_token stop);
  void RunDispatch(std::stop_token stop);
  Status ListOnce(std::stop_token stop);
  void Enqueue(Item item);
  void Apply(Item& item);
  void Deliver(const std::function<void(ResourceEventHandler&)>& call,
               std::vector<ResourceEventHandler>& handlers);
  bool Backoff(std::stop_token& stop, int& failures);

  Client& client_;
  const Resource resource_;
  const InformerScope scope_;
  const InformerOptions options_;
  Store store_;

  std::mutex stop_mu_;     // serializes Stop()
  mutable std::mutex mu_;  // guards what follows
  mutable std::condition_variable_any cv_;
  std::vector<Item> queue_;
  std::vector<ResourceEventHandler> pending_handlers_;
  bool synced_ = false;
  std::string last_rv_;
  Stats stats_;
  bool started_ = false;

  std::vector<ResourceEventHandler> handlers_;  // dispatch thread only
  std::jthread reflector_;
  std::jthread dispatch_;
};

// Hands out one informer per (resource, scope), shared by every caller. Thread-safe. The
// factory owns the informers; `client` must outlive it.
class InformerFactory {
 public:
  explicit InformerFactory(Client& client, InformerOptions defaults = {});
  ~InformerFactory();  // StopAll()
  InformerFactory(const InformerFactory&) = delete;
  InformerFactory& operator=(const InformerFactory&) = delete;

  // The informer for this resource and scope, made with the factory's options on first use.
  // Informers made after Start() start at once.
  std::shared_ptr<Informer> Get(const Resource& resource, const InformerScope& scope = {});

  void Start();  // starts every informer made so far, and every later one
  void StopAll();
  // Waits for every informer made so far to sync; false on deadline or stop.
  bool WaitForSync(std::chrono::steady_clock::time_point deadline, std::stop_token stop = {});

 private:
  using Key = std::tuple<std::string, InformerScope>;  // Resource::QualifiedName()
  Client& client_;
  const InformerOptions defaults_;
  std::mutex mu_;
  std::map<Key, std::shared_ptr<Informer>> informers_;
  bool started_ = false;
};

}  // namespace hami::kube
