#include "kube/event_recorder.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "log/log.h"

namespace hami::kube {
namespace {

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

std::string AggregationKey(const ObjectReference& o, EventType type, const std::string& reason,
                           const std::string& message) {
  std::string key;
  for (const std::string* part :
       {&o.api_version, &o.kind, &o.ns, &o.name, &o.uid, &o.field_path, &reason, &message}) {
    key += *part;
    key += '\0';
  }
  key += EventTypeName(type);
  return key;
}

}  // namespace

std::string_view EventTypeName(EventType type) {
  return type == EventType::kWarning ? "Warning" : "Normal";
}

EventRecorder::EventRecorder(Client& client, EventRecorderOptions options)
    : client_(client), options_(std::move(options)) {
  instance_ = options_.instance.empty() ? HostName() : options_.instance;
  sender_ = std::jthread([this](std::stop_token stop) { RunSender(stop); });
}

EventRecorder::~EventRecorder() {
  sender_.request_stop();
  if (sender_.joinable()) sender_.join();
}

void EventRecorder::Record(const ObjectReference& object, EventType type, std::string_view reason,
                           std::string_view message) {
  Pending p{object, type, std::string(reason), std::string(message),
            std::chrono::system_clock::now()};
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= options_.queue_capacity || sender_.get_stop_token().stop_requested()) {
      ++stats_.dropped;
      return;
    }
    queue_.push_back(std::move(p));
    ++enqueued_;
    ++stats_.recorded;
  }
  cv_.notify_all();
}

bool EventRecorder::Flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  uint64_t target = enqueued_;
  return cv_.wait_until(lock, deadline, [&] { return processed_ >= target; });
}

EventRecorder::Stats EventRecorder::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void EventRecorder::RunSender(std::stop_token stop) {
  while (true) {
    Pending p;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, stop, [this] { return !queue_.empty(); });
      if (stop.stop_requested()) return;
      p = std::move(queue_.front());
      queue_.pop_front();
    }
    Send(p);
    {
      std::lock_guard lock(mu_);
      ++processed_;
    }
    cv_.notify_all();
  }
}

void EventRecorder::CountFailure(const Error& error) {
  uint64_t failed;
  {
    std::lock_guard lock(mu_);
    failed = ++stats_.failed;
  }
  if (failed == 1 || failed % 100 == 0) {
    HAMI_LOG(kWarn, "event not recorded (%" PRIu64 " so far): %s", failed, error.message().c_str());
  }
}

bool EventRecorder::CreateEvent(const Pending& p, Aggregate& agg,
                                const std::string& last_timestamp) {
  char suffix[40];
  auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(p.time.time_since_epoch());
  std::snprintf(suffix, sizeof(suffix), ".%" PRIx64, uint64_t(nanos.count()) + name_counter_++);
  agg.name = p.object.name + suffix;

  nlohmann::json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", agg.name}, {"namespace", agg.ns}}},
      {"involvedObject", ObjectReferenceToJson(p.object)},
      {"reason", p.reason},
      {"message", p.message},
      {"type", std::string(EventTypeName(p.type))},
      {"source", {{"component", options_.component}}},
      {"firstTimestamp", agg.first_timestamp},
      {"lastTimestamp", last_timestamp},
      {"count", agg.count},
      {"reportingComponent", options_.component},
      {"reportingInstance", instance_},
  };
  Result<nlohmann::json> created = client_.Create(kEvents, agg.ns, event);
  if (!created.ok()) {
    CountFailure(created.error());
    return false;
  }
  std::lock_guard lock(mu_);
  ++stats_.created;
  return true;
}

void EventRecorder::Send(const Pending& p) {
  std::string key = AggregationKey(p.object, p.type, p.reason, p.message);
  std::string now = FormatTime(p.time);
  auto hit = cache_.find(key);
  if (hit != cache_.end()) {
    lru_.splice(lru_.begin(), lru_, hit->second);
    Aggregate& agg = *hit->second;
    ++agg.count;
    nlohmann::json patch = {{"count", agg.count}, {"lastTimestamp", now}};
    Result<nlohmann::json> patched =
        client_.Patch(kEvents, agg.ns, agg.name, PatchType::kMerge, patch);
    if (patched.ok()) {
      std::lock_guard lock(mu_);
      ++stats_.patched;
      return;
    }
    if (patched.error().code() != ErrorCode::kNotFound) {
      CountFailure(patched.error());
      return;
    }
    if (!CreateEvent(p, agg, now)) {  // deleted meanwhile (or expired): create it again
      cache_.erase(key);
      lru_.pop_front();
    }
    return;
  }

  Aggregate agg{key, p.object.ns.empty() ? std::string("default") : p.object.ns, "", 1, now};
  if (!CreateEvent(p, agg, now)) return;
  lru_.push_front(std::move(agg));
  cache_[key] = lru_.begin();
  while (lru_.size() > options_.cache_size && !lru_.empty()) {
    cache_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

}  // namespace hami::kube
