// Publishing the node's ResourceSlice (slices.h builds it) through the API server, as a DRA
// driver must for the scheduler to see its devices (research/dra.md §2.2, §5.3).
//
// SlicePublisher::Sync reconciles once, from the node's GPUs to the API:
//   1. the slices of this driver and node: GET resourceslices?fieldSelector=spec.driver=<driver>,
//      spec.nodeName=<node>;
//   2. the wanted slice (BuildResourceSlice; owner reference to the Node when the Node can be
//      read). The slice of the wanted name whose spec equals the wanted one (its generation
//      aside) is left as it is: a restarted plugin on unchanged GPUs writes nothing. Otherwise
//      the slice is created, or updated (conditional on its resourceVersion), with
//      spec.pool.generation one above the highest generation of the pool seen (in the API, or
//      published before by this publisher), so that consumers take it as the pool's newest;
//   3. every other slice of this driver and node (an older name, a leftover) is deleted.
// A conflict (someone wrote the slice in between) re-reads and decides again, up to 3 times.
//
// SliceLoop runs Sync on a thread of its own: at start, after every Set (a health change, a
// GPU gone), and every resync interval (a slice deleted by someone else comes back); a failed
// Sync is retried with backoff (1 s doubling to the resync interval) and logged
// (`dra event=slice_publish_failed`). Its Synced() count lets tests wait for a sync to happen.
//
// Thread safety: SlicePublisher is not thread-safe (SliceLoop calls it from its one thread);
// SliceLoop's methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>

#include "common/result.h"
#include "inventory/inventory.h"
#include "kube/client.h"

namespace hami::dra {

struct PublisherOptions {
  std::string driver;     // kDriverName
  std::string node_name;  // the node and the pool; required
  // One structured line per event; nullptr: stderr.
  std::function<void(std::string_view line)> log;
};

// What one Sync did.
struct SyncResult {
  enum class Action { kUnchanged, kCreated, kUpdated };
  Action action = Action::kUnchanged;
  std::string name;        // the slice
  int64_t generation = 0;  // its spec.pool.generation now
  int deleted = 0;         // other slices of this driver and node removed
};

class SlicePublisher {
 public:
  // The client must outlive the publisher.
  SlicePublisher(kube::Client& client, PublisherOptions options);

  // `stop` ends the list of slices at once; the other requests are bounded by the client's
  // request timeout.
  Result<SyncResult> Sync(const inventory::Inventory& inventory, std::stop_token stop = {});
  void Log(const std::string& line) const;

 private:
  Result<SyncResult> SyncOnce(const inventory::Inventory& inventory, std::stop_token stop);

  kube::Client& client_;
  const PublisherOptions options_;
  int64_t last_generation_ = 0;  // the highest generation this publisher wrote
};

class SliceLoop {
 public:
  SliceLoop(kube::Client& client, PublisherOptions options, inventory::Inventory inventory,
            std::chrono::milliseconds resync_interval = std::chrono::seconds(60));
  ~SliceLoop();  // stops
  SliceLoop(const SliceLoop&) = delete;
  SliceLoop& operator=(const SliceLoop&) = delete;

  // The node's GPUs changed (health, a GPU gone): publish them.
  void Set(inventory::Inventory inventory);
  // Ends the thread: at once while it waits or lists, else after the request in flight.
  void Stop();
  // Successful syncs so far; WaitSynced waits until there are more than `after` (false on
  // timeout or stop).
  uint64_t Synced() const;
  bool WaitSynced(uint64_t after, std::chrono::milliseconds timeout) const;

 private:
  void Run(std::stop_token stop);

  SlicePublisher publisher_;
  const std::chrono::milliseconds resync_interval_;
  mutable std::mutex mu_;
  mutable std::condition_variable_any cv_;
  inventory::Inventory inventory_;  // guarded by mu_
  bool dirty_ = true;               // guarded by mu_
  uint64_t synced_ = 0;             // guarded by mu_
  std::jthread thread_;
};

}  // namespace hami::dra
