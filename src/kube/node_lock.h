// The node lock of seed 004 (hami.io/mutex.lock on the Node): taken by the scheduler when it
// binds a pod to the node, released by the device plugin once the pod's devices are allocated
// (or by the scheduler when the bind fails). It keeps a node's binds one at a time, so that the
// plugin can tell which pending pod an Allocate call is for.
//
// Taking it is a merge patch of the annotation carrying the Node's resourceVersion as it was
// read: if the Node changed meanwhile (another scheduler took the lock first) the API answers
// 409 and the caller reads the Node again. A lock may be taken when it is absent, held by the
// same pod (a retried bind re-locks), older than the lock timeout (5 minutes), unreadable, or
// dangling: its holder no longer binds to this node (the caller decides: a pod that no longer
// exists, or, once the lock is older than a grace period, one whose hami.io/vgpu-node names
// another node or whose bind-phase is no longer allocating, as a scheduler killed mid-bind
// leaves it, or that is still unbound long after any bind would have posted its binding).
//
// Thread safety: ClassifyLock is pure; NodeLocker may be used from any thread (the Client is).
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "kube/annotations.h"
#include "kube/client.h"

namespace hami::kube {

enum class LockState {
  kFree,        // no lock annotation
  kMine,        // held by this pod
  kExpired,     // older than the timeout
  kUnreadable,  // the annotation does not decode
  kHeld,        // held by another pod (or an unknown holder), within the timeout
};

struct LockView {
  LockState state = LockState::kFree;
  std::optional<NodeLock> lock;  // when the annotation decodes
};

// `annotation` is the value of hami.io/mutex.lock, or nullptr when absent.
LockView ClassifyLock(const std::string* annotation, std::string_view ns, std::string_view pod,
                      WallTime now, std::chrono::seconds timeout);

// "held by default/a since 2024-05-20T10:02:05Z" (an unknown holder: "held since ...").
std::string DescribeLock(const NodeLock& lock);

class NodeLocker {
 public:
  // `client` must outlive the locker.
  NodeLocker(Client& client, std::chrono::seconds timeout) : client_(client), timeout_(timeout) {}

  std::chrono::seconds timeout() const { return timeout_; }

  // One attempt to lock `node` (the Node object as last read) for pod `ns/name` at `now`.
  // Returns the Node as the API stored it. Errors: kConflict when the Node changed since it was
  // read (read it again and retry), kBusy when another pod holds the lock ("node n1: the node
  // lock hami.io/mutex.lock is held by default/a since ..."), or the client's error. A lock held
  // by another pod is broken when `holder_binds(lock)` says its holder no longer binds here.
  Result<nlohmann::json> TryLock(const nlohmann::json& node, std::string_view ns,
                                 std::string_view name, WallTime now,
                                 const std::function<bool(const NodeLock&)>& holder_binds);

  // Removes the lock from node `node_name` if pod `ns/name` holds it (reading the Node, and
  // again after a conflict, up to 5 times); a lock of another pod is left alone, an unreadable
  // one is removed. A node that is gone is not an error.
  Status Unlock(std::string_view node_name, std::string_view ns, std::string_view name);

 private:
  Client& client_;
  const std::chrono::seconds timeout_;
};

}  // namespace hami::kube
