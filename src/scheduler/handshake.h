// The handshake of seed 004 on hami.io/node-handshake, run by the leader only: every interval
// (15 s), for each node with a GPU inventory,
//   - no request pending (the annotation is absent, unreadable, Reported, or Deleted while the
//     node allocates GPUs): write Requesting_<now> (UTC, "YYYY-MM-DD HH:MM:SS");
//   - a request younger than the response timeout (60 s): leave it;
//   - an expired request while the node's allocatable GPU count is positive: request again (an
//     expired request alone never makes a node unavailable);
//   - an expired request while the node allocates no GPU: write Deleted_<now>; the scheduler
//     then offers none of the node's GPUs, and the loop leaves it so, until the node's
//     allocatable GPU count is positive again.
// Writes are merge patches carrying the Node's resourceVersion; a conflict (the plugin wrote
// meanwhile) waits for the next round. Inventory and device-count changes are tracked by the
// state (ClusterState::Stats) as the informer delivers them.
//
// Thread safety: DecideHandshake is pure; a HandshakeLoop runs on the thread that calls Run.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <stop_token>

#include "kube/annotations.h"
#include "kube/client.h"
#include "scheduler/metrics.h"
#include "scheduler/state.h"

namespace hami::scheduler {

enum class HandshakeAction { kNone, kRequest, kMarkDeleted };

HandshakeAction DecideHandshake(const std::optional<kube::Handshake>& current, kube::WallTime now,
                                int64_t allocatable_gpus, std::chrono::seconds response_timeout);

struct HandshakeOptions {
  std::chrono::milliseconds interval{15000};
  std::chrono::seconds response_timeout{60};
  std::function<kube::WallTime()> now;  // nullptr: the system clock
};

class HandshakeLoop {
 public:
  // Everything passed must outlive the loop.
  HandshakeLoop(kube::Client& client, const ClusterState& state, SchedulerMetrics& metrics,
                HandshakeOptions options)
      : client_(client), state_(state), metrics_(metrics), options_(std::move(options)) {}

  // One round over every node; returns the number of annotations written.
  int RunOnce();
  // Rounds every interval until `stop` is requested.
  void Run(std::stop_token stop);

 private:
  kube::Client& client_;
  const ClusterState& state_;
  SchedulerMetrics& metrics_;
  HandshakeOptions options_;
};

}  // namespace hami::scheduler
