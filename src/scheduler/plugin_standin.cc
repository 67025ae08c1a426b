#include "scheduler/plugin_standin.h"

#include <algorithm>

#include "kube/annotations.h"
#include "kube/objects.h"
#include "kube/resource.h"

namespace hami::scheduler {

PluginStandin::PluginStandin(kube::Client& client, int workers)
    : client_(client), workers_(std::max(workers, 1)), locker_(client, std::chrono::seconds(300)) {
  pods_ = std::make_unique<kube::Informer>(client_, kube::kPods, kube::InformerScope{});
  pods_->AddHandler({[this](const kube::ObjectPtr& o) { Offer(o); },
                     [this](const kube::ObjectPtr&, const kube::ObjectPtr& o) { Offer(o); },
                     {}});
}

PluginStandin::~PluginStandin() { Stop(); }

void PluginStandin::Start() {
  for (int i = 0; i < workers_; ++i) {
    threads_.emplace_back([this](std::stop_token stop) { Work(stop); });
  }
  pods_->Start();
}

void PluginStandin::Stop() {
  pods_->Stop();
  for (auto& t : threads_) t.request_stop();
  cv_.notify_all();
  threads_.clear();
}

void PluginStandin::Offer(const kube::ObjectPtr& pod) {
  const nlohmann::json& o = *pod;
  auto spec = o.find("spec");
  if (spec == o.end() || !spec->is_object()) return;
  auto node = spec->find("nodeName");
  if (node == spec->end() || !node->is_string() || node->get_ref<const std::string&>().empty()) {
    return;
  }
  auto meta = o.find("metadata");
  if (meta == o.end()) return;
  auto ann = meta->find("annotations");
  if (ann == meta->end() || !ann->is_object()) return;
  auto phase = ann->find(kube::kBindPhaseAnnotation);
  if (phase == ann->end() || *phase != "allocating") return;
  const std::string key = kube::ObjectKey(o);
  std::lock_guard lock(mu_);
  if (std::find(in_queue_.begin(), in_queue_.end(), key) != in_queue_.end()) return;
  in_queue_.push_back(key);
  queue_.push_back(pod);
  cv_.notify_one();
}

void PluginStandin::Work(std::stop_token stop) {
  while (true) {
    kube::ObjectPtr pod;
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait(lock, stop, [this] { return !queue_.empty(); })) return;
      pod = queue_.front();
      queue_.pop_front();
    }
    const std::string ns(kube::MetadataString(*pod, "namespace"));
    const std::string name(kube::MetadataString(*pod, "name"));
    const std::string node = (*pod)["spec"]["nodeName"].get<std::string>();
    size_t containers = 0;
    auto alloc = kube::DecodePodDevices(
        (*pod)["metadata"]["annotations"].value(std::string(kube::kDevicesAllocatedAnnotation), ""),
        kube::kDevicesAllocatedAnnotation);
    if (alloc.ok()) containers = alloc->size();
    auto empty =
        kube::EncodePodDevices(kube::PodDevices(containers), kube::kDevicesToAllocateAnnotation);
    const nlohmann::json patch = {
        {"metadata",
         {{"annotations",
           {{std::string(kube::kBindPhaseAnnotation),
             std::string(kube::EncodeBindPhase(kube::BindPhase::kSuccess))},
            {std::string(kube::kDevicesToAllocateAnnotation), empty.ok() ? *empty : ";"}}}}}};
    auto patched = client_.Patch(kube::kPods, ns, name, kube::PatchType::kMerge, patch);
    auto unlocked = locker_.Unlock(node, ns, name);
    if (patched.ok() && unlocked.ok()) {
      allocated_.fetch_add(1);
    } else {
      failures_.fetch_add(1);
    }
    std::lock_guard lock(mu_);
    in_queue_.erase(std::find(in_queue_.begin(), in_queue_.end(), ns + "/" + name));
  }
}

}  // namespace hami::scheduler
