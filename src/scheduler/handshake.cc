#include "scheduler/handshake.h"

#include <condition_variable>
#include <mutex>

#include "common/quote.h"
#include "kube/resource.h"
#include "log/log.h"

namespace hami::scheduler {
namespace {}  // namespace

HandshakeAction DecideHandshake(const std::optional<kube::Handshake>& current, kube::WallTime now,
                                int64_t allocatable_gpus, std::chrono::seconds response_timeout) {
  if (current && current->state == kube::HandshakeState::kDeleted && allocatable_gpus <= 0) {
    return HandshakeAction::kNone;  // stays unavailable until the node allocates GPUs again
  }
  if (!current || current->state != kube::HandshakeState::kRequesting) {
    return HandshakeAction::kRequest;
  }
  if (now - current->time < response_timeout) return HandshakeAction::kNone;
  return allocatable_gpus > 0 ? HandshakeAction::kRequest : HandshakeAction::kMarkDeleted;
}

int HandshakeLoop::RunOnce() {
  int written = 0;
  for (const std::string& name : state_.NodeNames()) {
    auto info = state_.Node(name);
    if (!info || info->devices == 0) continue;
    const kube::WallTime now = options_.now ? options_.now() : std::chrono::system_clock::now();
    const HandshakeAction action =
        DecideHandshake(info->handshake, now, info->allocatable_gpus, options_.response_timeout);
    if (action == HandshakeAction::kNone) continue;
    const kube::HandshakeState state = action == HandshakeAction::kRequest
                                           ? kube::HandshakeState::kRequesting
                                           : kube::HandshakeState::kDeleted;
    const nlohmann::json patch = {
        {"metadata",
         {{"resourceVersion", info->resource_version},
          {"annotations",
           {{std::string(kube::kNodeHandshakeAnnotation), kube::EncodeHandshake(state, now)}}}}}};
    auto r = client_.Patch(kube::kNodes, "", name, kube::PatchType::kMerge, patch);
    if (!r.ok()) {
      if (r.error().code() != ErrorCode::kConflict && r.error().code() != ErrorCode::kNotFound) {
        HAMI_LOG(kWarn, "event=handshake_failed node=%s error=%s", name.c_str(),
                 QuoteInput(r.error().message(), 300).c_str());
      }
      continue;
    }
    ++written;
    if (state == kube::HandshakeState::kRequesting) {
      metrics_.handshake_requesting.fetch_add(1);
    } else {
      metrics_.handshake_deleted.fetch_add(1);
      HAMI_LOG(kWarn, "event=handshake_expired node=%s allocatable=0 action=devices_unavailable",
               name.c_str());
    }
  }
  return written;
}

void HandshakeLoop::Run(std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  while (!stop.stop_requested()) {
    RunOnce();
    std::unique_lock lock(mu);
    cv.wait_for(lock, stop, options_.interval, [] { return false; });
  }
}

}  // namespace hami::scheduler
