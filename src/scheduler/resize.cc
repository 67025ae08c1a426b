#include "scheduler/resize.h"

#include <algorithm>

#include "kube/resource.h"
#include "log/log.h"

namespace hami::scheduler {

namespace {

using SteadyClock = std::chrono::steady_clock;

std::string ContainerNames(const kube::Pod& pod) {
  std::string out;
  for (const kube::Container& c : pod.containers) out += (out.empty() ? "" : ", ") + c.name;
  return out;
}

}  // namespace

ResizeDecision DecideResize(const kube::Pod& pod, const kube::ResizeRequest& request,
                            const PodShare& share, const NodeGpus& node,
                            const NamespaceQuota& quota, const QuotaAmounts& ns_used,
                            const config::DeviceConfig& config) {
  ResizeDecision d;
  const std::string who = "container \"" + request.container + "\"";
  size_t index = pod.containers.size();
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    if (pod.containers[i].name == request.container) index = i;
  }
  if (index == pod.containers.size()) {
    bool init = false;
    for (const kube::Container& c : pod.init_containers) init |= c.name == request.container;
    d.reason = init ? who + " is an init container; only containers are resized"
                    : "the pod has no container \"" + request.container +
                          "\" (its containers: " + ContainerNames(pod) + ")";
    return d;
  }
  const size_t entry = share.init_containers + index;
  if (entry >= share.devices.size() || share.devices[entry].empty()) {
    d.reason = who + " holds no GPU (hami.io/vgpu-devices-allocated); only a GPU share is resized";
    return d;
  }
  kube::PodDevices devices = share.devices;
  std::string changes;
  for (kube::ContainerDevice& dev : devices[entry]) {
    const int32_t old_mem = dev.mem_mib, old_cores = dev.cores;
    if (request.mem_mib) {
      const int64_t mib = int64_t(*request.mem_mib) * config.memory_factor;
      if (mib > INT32_MAX) {
        d.reason = who + ": gpumem " + std::to_string(*request.mem_mib) + " x memoryFactor " +
                   std::to_string(config.memory_factor) + " is more than 2^31-1 MiB";
        return d;
      }
      dev.mem_mib = int32_t(mib);
    }
    if (request.cores) dev.cores = *request.cores;
    changes += (changes.empty() ? "" : "; ") + dev.uuid + " " + std::to_string(old_mem) + " -> " +
               std::to_string(dev.mem_mib) + " MiB, " + std::to_string(old_cores) + " -> " +
               std::to_string(dev.cores) + " cores";
  }
  // The node with this pod's share replaced by the new one.
  NodeGpus after = node;
  AddUsage(after, ShareUsage(share.devices, share.init_containers), -1);
  AddUsage(after, ShareUsage(devices, share.init_containers), +1);
  for (const kube::ContainerDevice& dev : devices[entry]) {
    auto gpu = std::find_if(after.gpus.begin(), after.gpus.end(),
                            [&](const GpuState& g) { return g.device.id == dev.uuid; });
    if (gpu == after.gpus.end()) {
      d.reason = who + ": GPU " + dev.uuid + " is not in node " + share.node +
                 "'s inventory (hami.io/node-nvidia-register) now";
      return d;
    }
    const int64_t others_mem = gpu->used.mem_mib - dev.mem_mib;
    if (gpu->used.mem_mib > gpu->device.devmem_mib) {
      d.reason = who + ": GPU " + dev.uuid + " offers " + std::to_string(gpu->device.devmem_mib) +
                 " MiB, the other shares on it hold " + std::to_string(others_mem) + ", so " +
                 std::to_string(dev.mem_mib) + " MiB do not fit (at most " +
                 std::to_string(std::max<int64_t>(0, gpu->device.devmem_mib - others_mem)) + ")";
      return d;
    }
    if (gpu->used.exclusive > 0 && gpu->used.slots > 1) {
      d.reason = who + ": GPU " + dev.uuid + " is shared by " + std::to_string(gpu->used.slots) +
                 " pods, and 100 cores would take it exclusively";
      return d;
    }
    if (gpu->used.cores > gpu->device.devcore) {
      const int64_t others = gpu->used.cores - dev.cores;
      d.reason = who + ": GPU " + dev.uuid + " offers " + std::to_string(gpu->device.devcore) +
                 " cores, the other shares on it hold " + std::to_string(others) + ", so " +
                 std::to_string(dev.cores) + " do not fit (at most " +
                 std::to_string(std::max<int64_t>(0, gpu->device.devcore - others)) + ")";
      return d;
    }
  }
  const QuotaAmounts before = AllocationAmounts(share.devices, share.init_containers);
  const QuotaAmounts now = AllocationAmounts(devices, share.init_containers);
  if (quota.limited() && (now.memory_mib > before.memory_mib || now.cores > before.cores)) {
    QuotaAmounts others = ns_used;
    others -= before;
    if (auto over = QuotaExceeded(share.ns, quota, others, now, config)) {
      d.reason = who + ": " + *over;
      return d;
    }
  }
  d.accepted = true;
  d.devices = std::move(devices);
  d.reason = who + ": " + changes;
  return d;
}

ResizeController::ResizeController(kube::Client& client, kube::Informer& pods,
                                   kube::EventRecorder* events, const ClusterState& state,
                                   std::function<bool()> synced, NodeLockedFn node_locked,
                                   ResizeOptions options)
    : client_(client),
      events_(events),
      state_(state),
      synced_(std::move(synced)),
      node_locked_(std::move(node_locked)),
      options_(options) {
  kube::ResourceEventHandler h;
  h.on_add = [this](const kube::ObjectPtr& pod) { Enqueue(pod); };
  h.on_update = [this](const kube::ObjectPtr&, const kube::ObjectPtr& pod) { Enqueue(pod); };
  pods.AddHandler(std::move(h));
  worker_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

ResizeController::~ResizeController() {
  worker_.request_stop();
  cv_.notify_all();
}

ResizeController::Stats ResizeController::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

// Only what the request and status annotations say is looked at here (no decoding of the
// rest): a pod whose request is not answered yet, and not in flight on its node.
void ResizeController::Enqueue(const kube::ObjectPtr& pod) {
  if (!pod) return;
  const nlohmann::json* annotations = nullptr;
  if (auto m = pod->find("metadata"); m != pod->end() && m->is_object()) {
    if (auto a = m->find("annotations"); a != m->end() && a->is_object()) annotations = &*a;
  }
  if (annotations == nullptr) return;
  auto req = annotations->find(kube::kResizeAnnotation);
  if (req == annotations->end() || !req->is_string()) return;
  if (auto st = annotations->find(kube::kResizeStatusAnnotation);
      st != annotations->end() && st->is_string()) {
    auto status = kube::DecodeResizeStatus(st->get<std::string>());
    if (status.ok() && status->request == req->get<std::string>()) return;  // answered
  }
  const std::string key = std::string(kube::MetadataString(*pod, "namespace")) + "/" +
                          std::string(kube::MetadataString(*pod, "name"));
  {
    std::lock_guard l(mu_);
    if (!queued_.insert(key).second) return;
    queue_.push_back(key);
  }
  cv_.notify_all();
}

void ResizeController::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::string key;
    {
      std::unique_lock l(mu_);
      for (;;) {
        if (stop.stop_requested()) return;
        const auto now = SteadyClock::now();
        while (!retry_at_.empty() && retry_at_.begin()->first <= now) {
          for (const std::string& k : retry_at_.begin()->second) {
            if (queued_.insert(k).second) queue_.push_back(k);
          }
          retry_at_.erase(retry_at_.begin());
        }
        if (!queue_.empty()) break;
        if (retry_at_.empty()) {
          cv_.wait(l, stop, [&] { return !queue_.empty(); });
        } else {
          cv_.wait_until(l, stop, retry_at_.begin()->first, [&] { return !queue_.empty(); });
        }
      }
      key = queue_.front();
      queue_.pop_front();
      queued_.erase(key);
    }
    if (!Handle(key)) {
      std::lock_guard l(mu_);
      ++stats_.retries;
      retry_at_[SteadyClock::now() + options_.retry].insert(key);
    }
  }
}

bool ResizeController::Handle(const std::string& key) {
  if (!synced_()) return false;  // decided once the state is the cluster's
  const size_t slash = key.find('/');
  const std::string ns = key.substr(0, slash), name = key.substr(slash + 1);
  auto got = client_.Get(kube::kPods, ns, name);
  if (!got.ok()) {
    if (got.error().code() == ErrorCode::kNotFound) return true;  // gone: nothing to do
    HAMI_LOG(kWarn, "event=resize_read_failed pod=%s error=\"%s\"", key.c_str(),
             got.error().message().c_str());
    return false;
  }
  auto pod = kube::ParsePod(*got);
  if (!pod.ok()) {
    HAMI_LOG(kWarn, "event=resize_skipped pod=%s error=\"%s\"", key.c_str(),
             pod.error().message().c_str());
    return true;
  }
  const std::string* request_text = pod->metadata.Annotation(kube::kResizeAnnotation);
  if (request_text == nullptr) return true;
  if (const std::string* st = pod->metadata.Annotation(kube::kResizeStatusAnnotation)) {
    auto status = kube::DecodeResizeStatus(*st);
    if (status.ok() && status->request == *request_text) return true;  // answered
    if (status.ok() && status->phase == kube::ResizePhase::kAccepted) {
      return true;  // the node has the previous request; its answer brings the pod back here
    }
  }
  const std::string* phase = pod->metadata.Annotation(kube::kBindPhaseAnnotation);
  const bool allocating = phase != nullptr && *phase == "allocating";
  if (allocating) return true;  // the node's Allocate is not done: its update brings it back

  // The decision, and what to write.
  ResizeDecision d;
  std::optional<PodShare> share;
  auto request = kube::DecodeResizeRequest(*request_text);
  if (!request.ok()) {
    d.reason = request.error().message();
  } else if (pod->IsTerminated()) {
    d.reason = "the pod has ended";
  } else if (std::optional<Error> bad; !(share = ShareOfPod(*pod, &bad))) {
    d.reason = bad ? "its allocation cannot be read: " + bad->message()
                   : std::string("the pod holds no GPU share from hami-scheduler (no ") +
                         std::string(kube::kDevicesAllocatedAnnotation) + " on a bound pod)";
  }
  kube::ResizeStatus status;
  status.request = *request_text;
  std::optional<nlohmann::json> patched;  // the pod as the write stored it
  // Writes `d` in one patch carrying the pod's resourceVersion.
  auto write = [&]() -> Status {
    status.reason = d.reason;
    nlohmann::json annotations = nlohmann::json::object();
    if (d.accepted) {
      auto encoded = kube::EncodePodDevices(d.devices, kube::kDevicesAllocatedAnnotation);
      if (!encoded.ok()) {
        d.accepted = false;
        status.reason = encoded.error().message();
      } else {
        status.phase = kube::ResizePhase::kAccepted;
        status.previous = *pod->metadata.Annotation(kube::kDevicesAllocatedAnnotation);
        annotations[std::string(kube::kDevicesAllocatedAnnotation)] = *encoded;
      }
    }
    annotations[std::string(kube::kResizeStatusAnnotation)] = kube::EncodeResizeStatus(status);
    nlohmann::json patch = {
        {"metadata",
         {{"resourceVersion", pod->metadata.resource_version}, {"annotations", annotations}}}};
    auto p = client_.Patch(kube::kPods, ns, name, kube::PatchType::kMerge, patch);
    if (!p.ok()) return std::move(p).error();
    patched = std::move(p).value();
    return OkStatus();
  };
  Status written = OkStatus();
  if (share) {
    // Decided and written with the node held: a bind to it waits, and then counts the new share.
    written = node_locked_(share->node, ns, name, [&](const NodeGpus& gpus) {
      NodeGpus node = gpus;
      node.name = share->node;
      auto [quota, used] = state_.QuotaFor(ns);
      d = DecideResize(*pod, *request, *share, node, quota, used, state_.config());
      return write();
    });
  } else {
    written = write();
  }
  if (!written.ok()) {
    HAMI_LOG(kWarn, "event=resize_write_failed pod=%s error=\"%s\" retry_in_ms=%lld", key.c_str(),
             written.error().message().c_str(), static_cast<long long>(options_.retry.count()));
    return false;  // a conflict, a held node or an absent server: read and decide again
  }
  {
    std::lock_guard l(mu_);
    ++(d.accepted ? stats_.accepted : stats_.refused);
  }
  HAMI_LOG(kInfo, "event=resize_%s pod=%s request=\"%s\" reason=\"%s\"",
           d.accepted ? "accepted" : "refused", key.c_str(), request_text->c_str(),
           status.reason.c_str());
  if (events_ != nullptr) {
    events_->Record(kube::ReferenceToObject(kube::kPods, *patched),
                    d.accepted ? kube::EventType::kNormal : kube::EventType::kWarning,
                    d.accepted ? "ResizeAccepted" : "ResizeRefused",
                    "hami.io/resize '" + *request_text + "': " + status.reason);
  }
  return true;
}

}  // namespace hami::scheduler
