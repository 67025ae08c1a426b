#include "kube/node_lock.h"

#include <nlohmann/json.hpp>

#include "kube/objects.h"
#include "kube/resource.h"
#include "kube/time.h"

namespace hami::kube {
namespace {

using nlohmann::json;

const std::string* LockAnnotation(const json& node) {
  auto meta = node.find("metadata");
  if (meta == node.end() || !meta->is_object()) return nullptr;
  auto ann = meta->find("annotations");
  if (ann == meta->end() || !ann->is_object()) return nullptr;
  auto it = ann->find(kNodeLockAnnotation);
  if (it == ann->end() || !it->is_string()) return nullptr;
  return &it->get_ref<const std::string&>();
}

json LockPatch(std::string_view resource_version, const json& value) {
  return {{"metadata",
           {{"resourceVersion", resource_version},
            {"annotations", {{std::string(kNodeLockAnnotation), value}}}}}};
}

}  // namespace

LockView ClassifyLock(const std::string* annotation, std::string_view ns, std::string_view pod,
                      WallTime now, std::chrono::seconds timeout) {
  LockView v;
  if (annotation == nullptr) return v;
  auto lock = DecodeNodeLock(*annotation);
  if (!lock.ok()) {
    v.state = LockState::kUnreadable;
    return v;
  }
  v.lock = *lock;
  if (lock->ns == ns && lock->pod == pod && !lock->pod.empty()) {
    v.state = LockState::kMine;
  } else if (now - lock->time >= timeout) {
    v.state = LockState::kExpired;
  } else {
    v.state = LockState::kHeld;
  }
  return v;
}

std::string DescribeLock(const NodeLock& lock) {
  std::string s = "held ";
  if (!lock.pod.empty()) s += "by " + lock.ns + "/" + lock.pod + " ";
  return s + "since " + FormatTime(lock.time);
}

Result<json> NodeLocker::TryLock(const json& node, std::string_view ns, std::string_view name,
                                 WallTime now,
                                 const std::function<bool(const NodeLock&)>& holder_binds) {
  const std::string node_name(MetadataString(node, "name"));
  const LockView view = ClassifyLock(LockAnnotation(node), ns, name, now, timeout_);
  if (view.state == LockState::kHeld) {
    const bool dangling = view.lock && !view.lock->pod.empty() && !holder_binds(*view.lock);
    if (!dangling) {
      return Error(ErrorCode::kBusy, "node " + node_name + ": the node lock " +
                                         std::string(kNodeLockAnnotation) + " is " +
                                         DescribeLock(*view.lock));
    }
  }
  NodeLock mine{now, std::string(ns), std::string(name)};
  auto value = EncodeNodeLock(mine);
  if (!value.ok()) return std::move(value).error();
  const json patch = LockPatch(MetadataString(node, "resourceVersion"), *value);
  return client_.Patch(kNodes, "", node_name, PatchType::kMerge, patch);
}

Status NodeLocker::Unlock(std::string_view node_name, std::string_view ns, std::string_view name) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto node = client_.Get(kNodes, "", node_name);
    if (!node.ok()) {
      if (node.error().code() == ErrorCode::kNotFound) return OkStatus();
      return std::move(node).error();
    }
    const std::string* value = LockAnnotation(*node);
    if (value == nullptr) return OkStatus();
    auto lock = DecodeNodeLock(*value);
    if (lock.ok() && (lock->ns != ns || lock->pod != name)) return OkStatus();
    auto patched = client_.Patch(kNodes, "", node_name, PatchType::kMerge,
                                 LockPatch(MetadataString(*node, "resourceVersion"), nullptr));
    if (patched.ok()) return OkStatus();
    if (patched.error().code() != ErrorCode::kConflict) return std::move(patched).error();
  }
  return Error(ErrorCode::kConflict, "node " + std::string(node_name) +
                                         ": the node lock could not be released (the node kept "
                                         "changing)");
}

}  // namespace hami::kube
