#include "dra/publisher.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/quote.h"
#include "dra/slices.h"
#include "kube/resource.h"

namespace hami::dra {
namespace {

using nlohmann::json;

constexpr int kConflictAttempts = 3;
constexpr std::chrono::milliseconds kFirstRetry{1000};

const json* At(const json& j, std::initializer_list<const char*> keys) {
  const json* v = &j;
  for (const char* k : keys) {
    if (!v->is_object()) return nullptr;
    auto it = v->find(k);
    if (it == v->end()) return nullptr;
    v = &*it;
  }
  return v;
}

int64_t GenerationOf(const json& slice) {
  const json* g = At(slice, {"spec", "pool", "generation"});
  return g != nullptr && g->is_number_integer() ? g->get<int64_t>() : 0;
}

std::string NameOf(const json& object) {
  const json* n = At(object, {"metadata", "name"});
  return n != nullptr && n->is_string() ? n->get<std::string>() : "";
}

}  // namespace

SlicePublisher::SlicePublisher(kube::Client& client, PublisherOptions options)
    : client_(client), options_(std::move(options)) {}

void SlicePublisher::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

Result<SyncResult> SlicePublisher::Sync(const inventory::Inventory& inventory,
                                        std::stop_token stop) {
  for (int attempt = 1;; ++attempt) {
    auto r = SyncOnce(inventory, stop);
    if (r.ok() || r.error().code() != ErrorCode::kConflict || attempt == kConflictAttempts) {
      return r;
    }
  }
}

Result<SyncResult> SlicePublisher::SyncOnce(const inventory::Inventory& inventory,
                                            std::stop_token stop) {
  SliceInput in;
  in.driver = options_.driver;
  in.node_name = options_.node_name;
  in.inventory = inventory;
  // The owner reference makes the slice go with its Node; a Node that cannot be read (not yet
  // registered, no permission) leaves the slice without one rather than unpublished.
  if (auto node = client_.Get(kube::kNodes, "", options_.node_name); node.ok()) {
    const json* uid = At(*node, {"metadata", "uid"});
    if (uid != nullptr && uid->is_string()) in.node_uid = uid->get<std::string>();
  }
  auto wanted = BuildResourceSlice(in);
  if (!wanted.ok()) return std::move(wanted).error();
  const std::string name = NameOf(*wanted);

  kube::ListOptions list;
  list.field_selector = "spec.driver=" + options_.driver + ",spec.nodeName=" + options_.node_name;
  auto existing = client_.ListAll(kube::kResourceSlices, "", list, stop);
  if (!existing.ok()) return std::move(existing).error().Context("publishing the ResourceSlice");
  const json* current = nullptr;
  int64_t highest = last_generation_;
  const json* items = At(*existing, {"items"});
  if (items != nullptr && items->is_array()) {
    for (const json& item : *items) {
      highest = std::max(highest, GenerationOf(item));
      if (NameOf(item) == name) current = &item;
    }
  }

  SyncResult result;
  result.name = name;
  if (current != nullptr) {
    json same = (*wanted)["spec"];
    same["pool"]["generation"] = GenerationOf(*current);
    const json* refs = At(*current, {"metadata", "ownerReferences"});
    const json* wanted_refs = At(*wanted, {"metadata", "ownerReferences"});
    const bool refs_same = wanted_refs == nullptr || (refs != nullptr && *refs == *wanted_refs);
    if (At(*current, {"spec"}) != nullptr && (*current)["spec"] == same && refs_same) {
      result.generation = GenerationOf(*current);
    } else {
      json next = *current;
      next["spec"] = (*wanted)["spec"];
      next["spec"]["pool"]["generation"] = highest + 1;
      if (wanted_refs != nullptr) next["metadata"]["ownerReferences"] = *wanted_refs;
      auto updated = client_.Update(kube::kResourceSlices, next);
      if (!updated.ok()) return std::move(updated).error();
      result.action = SyncResult::Action::kUpdated;
      result.generation = highest + 1;
    }
  } else {
    json next = *wanted;
    next["spec"]["pool"]["generation"] = highest + 1;
    auto created = client_.Create(kube::kResourceSlices, "", next);
    // A 409 (created in between by an earlier attempt or another instance) decides again.
    if (!created.ok()) return std::move(created).error();
    result.action = SyncResult::Action::kCreated;
    result.generation = highest + 1;
  }
  last_generation_ = std::max(last_generation_, result.generation);

  if (items != nullptr && items->is_array()) {
    for (const json& item : *items) {
      const std::string other = NameOf(item);
      if (other == name || other.empty()) continue;
      auto deleted = client_.Delete(kube::kResourceSlices, "", other);
      if (!deleted.ok() && deleted.error().code() != ErrorCode::kNotFound) {
        return std::move(deleted).error();
      }
      ++result.deleted;
      Log("dra event=slice_deleted name=" + QuoteInput(other) + " node=" + options_.node_name);
    }
  }
  if (result.action != SyncResult::Action::kUnchanged) {
    Log(std::string("dra event=slice_") +
        (result.action == SyncResult::Action::kCreated ? "created" : "updated") + " name=" + name +
        " generation=" + std::to_string(result.generation) +
        " devices=" + std::to_string(inventory.devices.size()));
  }
  return result;
}

SliceLoop::SliceLoop(kube::Client& client, PublisherOptions options, inventory::Inventory inventory,
                     std::chrono::milliseconds resync_interval)
    : publisher_(client, std::move(options)),
      resync_interval_(resync_interval),
      inventory_(std::move(inventory)) {
  thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

SliceLoop::~SliceLoop() { Stop(); }

void SliceLoop::Set(inventory::Inventory inventory) {
  {
    std::lock_guard lock(mu_);
    inventory_ = std::move(inventory);
    dirty_ = true;
  }
  cv_.notify_all();
}

void SliceLoop::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  cv_.notify_all();
  thread_.join();
}

uint64_t SliceLoop::Synced() const {
  std::lock_guard lock(mu_);
  return synced_;
}

bool SliceLoop::WaitSynced(uint64_t after, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return synced_ > after; });
}

void SliceLoop::Run(std::stop_token stop) {
  std::chrono::milliseconds retry = kFirstRetry;
  bool failed = false;
  while (!stop.stop_requested()) {
    inventory::Inventory inventory;
    {
      // Woken by Set; else the resync interval (or the backoff after a failure) passes.
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, stop, failed ? retry : resync_interval_, [&] { return dirty_; });
      if (stop.stop_requested()) return;
      dirty_ = false;
      inventory = inventory_;
    }
    auto r = publisher_.Sync(inventory, stop);
    if (stop.stop_requested()) return;
    if (r.ok()) {
      failed = false;
      retry = kFirstRetry;
      {
        std::lock_guard lock(mu_);
        ++synced_;
      }
      cv_.notify_all();
      continue;
    }
    if (failed) retry = std::min(retry * 2, std::max(resync_interval_, kFirstRetry));
    failed = true;
    publisher_.Log("dra event=slice_publish_failed retry_ms=" + std::to_string(retry.count()) +
                   " error=" + QuoteInput(r.error().message(), 512));
  }
}

}  // namespace hami::dra
