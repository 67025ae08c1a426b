#include "plugin/allocator.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <utility>

#include "common/file.h"
#include "kube/annotations.h"
#include "kube/node_lock.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "node/pod_record.h"

namespace hami::plugin {
namespace {

using nlohmann::json;

std::string PodName(const kube::Pod& pod) { return pod.metadata.ns + "/" + pod.metadata.name; }

// Writes the pod record (node/pod_record.h) into the container's directory, mode 0644.
Status WritePodRecord(const std::string& dir, const kube::Pod& pod, const std::string& container) {
  const std::string path = dir + "/" + node::kPodRecordFileName;
  auto fd = OpenRegularFile(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (!fd.ok()) return std::move(fd).error();
  if (::fchmod(fd->get(), 0644) != 0) return Error::FromErrno("chmod " + path);
  return WriteAll(fd->get(), node::PodRecordText({pod.metadata.ns, pod.metadata.name,
                                                  pod.metadata.uid, container}));
}

}  // namespace

Allocator::Allocator(kube::Client& client, PluginConfig config, std::vector<NodeGpu> gpus,
                     AllocatorOptions options)
    : client_(client),
      config_(std::move(config)),
      options_(std::move(options)),
      lock_host_dir_(options_.lock_dir.parent + "/" + options_.lock_dir.name),
      gpus_(std::move(gpus)) {}

void Allocator::SetGpus(std::vector<NodeGpu> gpus) {
  std::lock_guard lock(mu_);
  gpus_ = std::move(gpus);
}

Allocator::Stats Allocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Allocator::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

Result<Allocator::NodeView> Allocator::ReadNode() {
  NodeView view;
  auto node = client_.Get(kube::kNodes, "", config_.node_name);
  if (!node.ok()) return std::move(node).error().Context("reading node " + config_.node_name);
  auto meta = kube::ParseObjectMeta(*node, "Node");
  if (!meta.ok()) return std::move(meta).error().Context("reading node " + config_.node_name);
  if (const std::string* lock = meta->Annotation(kube::kNodeLockAnnotation)) {
    view.lock = *lock;
    view.has_lock = true;
  }
  kube::ListOptions list;
  list.field_selector = "spec.nodeName=" + config_.node_name;
  auto pods = client_.ListAll(kube::kPods, "", list);
  if (!pods.ok()) {
    return std::move(pods).error().Context("listing the pods of node " + config_.node_name);
  }
  view.pods = std::move(pods).value();
  return view;
}

Result<std::vector<ContainerResponse>> Allocator::Allocate(
    const std::vector<ContainerRequest>& requests) {
  std::lock_guard serial(allocate_mu_);
  auto r = AllocateLocked(requests);
  std::lock_guard lock(mu_);
  if (r.ok()) {
    ++stats_.allocations;
  } else {
    ++stats_.failures;
    Log("plugin event=allocate_failed node=" + config_.node_name + " error=\"" +
        r.error().message() + "\"");
  }
  return r;
}

Result<std::vector<ContainerResponse>> Allocator::AllocateLocked(
    const std::vector<ContainerRequest>& requests) {
  NodeView view = HAMI_TRY(ReadNode());

  std::vector<NodeGpu> gpus;
  std::map<std::string, int> known;
  std::string remembered_uid;
  {
    std::lock_guard lock(mu_);
    gpus = gpus_;
    if (!requests.empty()) {
      const std::string key = RequestKey(requests[0]);
      for (const Remembered& r : remembered_) {
        if (r.key == key) remembered_uid = r.pod_uid;
      }
    }
    for (const Remembered& r : remembered_) {
      if (r.pod_uid == remembered_uid && !remembered_uid.empty()) known[r.key] = r.chunk;
    }
  }

  // The pod this Allocate is for. The kubelet hands the same replicas to a new container
  // once the old one has ended, so an earlier answer for these replicas is a retry only
  // while its pod still waits for its containers: not when it has ended or is being deleted,
  // and not when another pod is waiting for its allocation (the scheduler's newest decision,
  // which the node lock names, comes first). Otherwise the new pod would get the old pod's
  // limits.
  auto pending = FindPendingPod(config_.node_name, view.has_lock ? &view.lock : nullptr, view.pods);
  const bool other_pod_allocating = [&] {
    if (!pending.ok() || pending->metadata.uid == remembered_uid) return false;
    const std::string* phase = pending->metadata.Annotation(kube::kBindPhaseAnnotation);
    return phase != nullptr && *phase == kube::EncodeBindPhase(kube::BindPhase::kAllocating);
  }();
  std::optional<kube::Pod> pod;
  if (!remembered_uid.empty() && !other_pod_allocating && view.pods.contains("items") &&
      view.pods["items"].is_array()) {
    for (const json& item : view.pods["items"]) {
      if (kube::MetadataString(item, "uid") != remembered_uid) continue;
      auto parsed = kube::ParsePod(item);
      if (parsed.ok() && !parsed->IsTerminated() && !parsed->metadata.deletion_timestamp) {
        pod = std::move(parsed).value();
      }
    }
  }
  if (!pod) {
    known.clear();
    if (!pending.ok()) return std::move(pending).error();
    pod = std::move(pending).value();
  }

  AllocateInput in;
  in.pod = &*pod;
  in.requests = requests;
  in.config = &config_;
  in.gpus = gpus;
  in.hook_path = options_.hook_path;
  in.broker = options_.broker;
  in.lock_host_dir = lock_host_dir_;
  in.broker_host_dir = options_.broker_host_dir;
  in.known_chunks = known.empty() ? nullptr : &known;
  auto plan = plugin::Allocate(in);
  if (!plan.ok()) {
    MarkFailed(*pod, plan.error());
    return std::move(plan).error();
  }
  for (const std::string& w : plan->warnings) Log("plugin event=allocate_warning " + w);

  if (Status s = Apply(*pod, *plan); !s.ok()) {
    MarkFailed(*pod, s.error());
    return std::move(s).error();
  }

  std::vector<ContainerResponse> responses;
  bool replay = false;
  {
    std::lock_guard lock(mu_);
    for (const ContainerPlan& c : plan->containers) {
      replay |= c.replay;
      std::erase_if(remembered_, [&](const Remembered& r) { return r.key == c.request_key; });
      remembered_.push_back({c.request_key, pod->metadata.uid, c.chunk});
      while (remembered_.size() > options_.remembered) remembered_.pop_front();
      responses.push_back(c.response);
    }
    if (replay) ++stats_.replays;
  }
  std::string containers;
  for (const ContainerPlan& c : plan->containers) {
    containers += (containers.empty() ? "" : ",") + c.container;
  }
  Log("plugin event=allocate pod=" + PodName(*pod) + " containers=" + containers + " delivery=" +
      std::string(LimitDeliveryName(plan->delivery)) + " replay=" + (replay ? "true" : "false") +
      " complete=" + (plan->complete ? "true" : "false"));
  return responses;
}

Status Allocator::Apply(const kube::Pod& pod, const AllocatePlan& plan) {
  bool needs_lock_dir = false;
  for (const ContainerPlan& c : plan.containers) needs_lock_dir |= !c.container_dir.empty();
  if (needs_lock_dir) {
    Status s = broker::PrepareLockDirectory(options_.lock_dir);
    if (!s.ok()) return std::move(s).error().Context("preparing " + lock_host_dir_);
  }
  for (const ContainerPlan& c : plan.containers) {
    if (c.container_dir.empty()) continue;
    if (Status s = RecreateContainerDirectory(c.container_dir); !s.ok()) {
      return std::move(s).error().Context("container " + c.container + " of pod " + PodName(pod));
    }
    if (Status s = WritePodRecord(c.container_dir, pod, c.container); !s.ok()) {
      // A label for people, not a limit: the container runs without it.
      Log("plugin event=pod_record_failed pod=" + PodName(pod) + " container=" + c.container +
          " error=\"" + s.error().message() + "\"");
    }
    if (!c.limits_path.empty()) {
      HAMI_TRY(limits::PublishLimitsFile(c.limits_path, c.limits, options_.publish));
    }
    HAMI_TRY(CheckHookFiles(c.response, "container " + c.container + " of pod " + PodName(pod),
                            "hami-device-plugin"));
  }

  const std::string* phase = pod.metadata.Annotation(kube::kBindPhaseAnnotation);
  const bool mark_success = plan.complete && (phase == nullptr || *phase != "success");
  if (plan.annotation_changed || mark_success) {
    json annotations = json::object();
    annotations[std::string(kube::kDevicesToAllocateAnnotation)] = plan.devices_to_allocate;
    if (plan.complete) {
      annotations[std::string(kube::kBindPhaseAnnotation)] =
          kube::EncodeBindPhase(kube::BindPhase::kSuccess);
    }
    auto patched =
        client_.Patch(kube::kPods, pod.metadata.ns, pod.metadata.name, kube::PatchType::kMerge,
                      {{"metadata", {{"annotations", annotations}}}});
    if (!patched.ok()) return std::move(patched).error().Context("patching pod " + PodName(pod));
  }
  if (plan.complete) {
    kube::NodeLocker locker(client_, options_.lock_timeout);
    Status s = locker.Unlock(config_.node_name, pod.metadata.ns, pod.metadata.name);
    if (!s.ok()) {
      Log("plugin event=unlock_failed node=" + config_.node_name + " pod=" + PodName(pod) +
          " error=\"" + s.error().message() + "\"");
    }
  }
  return OkStatus();
}

void Allocator::MarkFailed(const kube::Pod& pod, const Error& error) {
  json patch = {{"metadata",
                 {{"annotations",
                   {{std::string(kube::kBindPhaseAnnotation),
                     kube::EncodeBindPhase(kube::BindPhase::kFailed)}}}}}};
  auto patched = client_.Patch(kube::kPods, pod.metadata.ns, pod.metadata.name,
                               kube::PatchType::kMerge, patch);
  if (!patched.ok()) {
    Log("plugin event=mark_failed_failed pod=" + PodName(pod) + " error=\"" +
        patched.error().message() + "\"");
  }
  kube::NodeLocker locker(client_, options_.lock_timeout);
  Status s = locker.Unlock(config_.node_name, pod.metadata.ns, pod.metadata.name);
  if (!s.ok()) {
    Log("plugin event=unlock_failed node=" + config_.node_name + " pod=" + PodName(pod) +
        " error=\"" + s.error().message() + "\"");
  }
  Log("plugin event=allocation_failed pod=" + PodName(pod) + " bind_phase=failed error=\"" +
      error.message() + "\"");
}

Result<std::vector<std::vector<std::string>>> Allocator::Prefer(
    const std::vector<PreferredRequest>& requests) {
  std::vector<NodeGpu> gpus;
  {
    std::lock_guard lock(mu_);
    gpus = gpus_;
  }
  std::optional<kube::PodDevices> pending;
  auto view = ReadNode();
  if (!view.ok()) {
    Log("plugin event=prefer_warning error=\"" + view.error().message() + "\"");
  } else {
    auto pod =
        FindPendingPod(config_.node_name, view->has_lock ? &view->lock : nullptr, view->pods);
    if (pod.ok()) {
      if (const std::string* v = pod->metadata.Annotation(kube::kDevicesToAllocateAnnotation)) {
        auto decoded = kube::DecodePodDevices(*v, kube::kDevicesToAllocateAnnotation);
        if (decoded.ok()) {
          pending = std::move(decoded).value();
        } else {
          Log("plugin event=prefer_warning pod=" + PodName(*pod) + " error=\"" +
              decoded.error().message() + "\"");
        }
      }
    }
  }
  PreferredPlan plan = PreferredAllocation(pending ? &*pending : nullptr, requests, gpus);
  for (const std::string& w : plan.warnings) Log("plugin event=prefer_warning " + w);
  return std::move(plan.answers);
}

AllocateFn Allocator::AllocateFunction() {
  return [this](const std::vector<ContainerRequest>& requests) { return Allocate(requests); };
}

PreferFn Allocator::PreferFunction() {
  return [this](const std::vector<PreferredRequest>& requests) { return Prefer(requests); };
}

}  // namespace hami::plugin
