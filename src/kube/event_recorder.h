// The event recorder: core/v1 Events about objects, as `kubectl describe` shows them.
//
// Record() never waits for the API server: it puts the event on a bounded queue and returns
// (a full queue drops the event and counts it). One sender thread writes the queue in order.
// Repeats are aggregated as client-go's recorder does: an event with the same involved object,
// reason, message and type as one this recorder already created is not created again; the
// recorder merge-patches that Event's count and lastTimestamp instead (and creates it afresh,
// with the running count, if it was deleted meanwhile). A failed request is counted and logged,
// and the event is not retried: a failing API server costs the caller nothing.
//
// Event fields written: metadata.name "<object name>.<unique hex>", metadata.namespace (the
// object's, "default" for cluster-scoped objects), involvedObject (ObjectReferenceToJson of
// kube/objects.h: apiVersion, kind, namespace, name, uid, resourceVersion, fieldPath, each when
// set), reason, message, type, source.component, firstTimestamp and lastTimestamp (Time: when
// Record was called), count, reportingComponent, reportingInstance. Events are aggregated when
// their whole involved object (field path included), reason, message and type are equal.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "kube/client.h"
#include "kube/objects.h"
#include "kube/time.h"

namespace hami::kube {

enum class EventType { kNormal, kWarning };
std::string_view EventTypeName(EventType type);  // "Normal", "Warning"

struct EventRecorderOptions {
  std::string component = "hami";  // source.component and reportingComponent
  std::string instance;            // reportingInstance; empty: the host name
  size_t queue_capacity = 1024;    // events waiting to be sent; more are dropped
  size_t cache_size = 4096;        // distinct events remembered for aggregation (LRU)
};

class EventRecorder {
 public:
  struct Stats {
    uint64_t recorded = 0;  // Record calls accepted onto the queue
    uint64_t dropped = 0;   // Record calls refused: the queue was full, or stopped
    uint64_t created = 0;   // Events created
    uint64_t patched = 0;   // repeats sent as a patch of count and lastTimestamp
    uint64_t failed = 0;    // requests that failed
  };

  // Starts the sender thread. `client` must outlive the recorder.
  EventRecorder(Client& client, EventRecorderOptions options = {});
  // Stops the sender: events still queued are dropped; a request in flight is waited for.
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // Thread-safe; never waits for I/O. `object` names what the event is about: ReferenceTo or
  // ReferenceToObject of kube/objects.h make one.
  void Record(const ObjectReference& object, EventType type, std::string_view reason,
              std::string_view message);

  // Waits until every event recorded before the call was sent (or failed); false on deadline.
  bool Flush(std::chrono::steady_clock::time_point deadline);

  Stats stats() const;

 private:
  struct Pending {
    ObjectReference object;
    EventType type = EventType::kNormal;
    std::string reason;
    std::string message;
    WallTime time;
  };
  struct Aggregate {  // an Event this recorder created
    std::string key;
    std::string ns;
    std::string name;
    int64_t count;
    std::string first_timestamp;
  };

  void RunSender(std::stop_token stop);
  void Send(const Pending& event);
  bool CreateEvent(const Pending& event, Aggregate& agg, const std::string& last_timestamp);
  void CountFailure(const Error& error);

  Client& client_;
  const EventRecorderOptions options_;
  std::string instance_;

  // Sender thread only.
  std::list<Aggregate> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Aggregate>::iterator> cache_;
  uint64_t name_counter_ = 0;

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable_any cv_;
  std::deque<Pending> queue_;
  uint64_t enqueued_ = 0;
  uint64_t processed_ = 0;
  Stats stats_;

  std::jthread sender_;  // last: started after everything above exists
};

}  // namespace hami::kube
