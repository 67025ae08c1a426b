#include "plugin/kubelet_driver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "common/file.h"
#include "kube/annotations.h"
#include "kube/resource.h"
#include "node/paths.h"
#include "plugin/allocate.h"
#include "plugin/types.h"

namespace hami::plugin {
namespace {

constexpr size_t kMessagesKept = 100;

// The replicas a container asks for: its nvidia.com/gpu limit, else its request (the kubelet
// takes an extended resource's limit; a request alone must equal it).
int64_t GpusAsked(const kube::Container& c) {
  for (const kube::QuantityMap* m : {&c.limits, &c.requests}) {
    auto it = m->find(kDefaultResourceName);
    if (it != m->end()) return it->second.Value();
  }
  return 0;
}

bool BoundAndAllocating(const nlohmann::json& o, std::string* node) {
  auto spec = o.find("spec");
  if (spec == o.end() || !spec->is_object()) return false;
  auto name = spec->find("nodeName");
  if (name == spec->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return false;
  }
  auto meta = o.find("metadata");
  if (meta == o.end() || !meta->is_object()) return false;
  auto ann = meta->find("annotations");
  if (ann == meta->end() || !ann->is_object()) return false;
  auto phase = ann->find(kube::kBindPhaseAnnotation);
  if (phase == ann->end() || *phase != kube::EncodeBindPhase(kube::BindPhase::kAllocating)) {
    return false;
  }
  *node = name->get<std::string>();
  return true;
}

bool Ended(const nlohmann::json& o) {
  auto status = o.find("status");
  if (status == o.end() || !status->is_object()) return false;
  const std::string phase = status->value("phase", "");
  return phase == "Succeeded" || phase == "Failed";
}

Status MakeDirectory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return Error::FromErrno("mkdir " + path);
  return OkStatus();
}

}  // namespace

KubeletDriver::KubeletDriver(kube::Client& client, int workers)
    : client_(client), workers_(std::max(workers, 1)) {
  pods_ = std::make_unique<kube::Informer>(client_, kube::kPods, kube::InformerScope{});
  pods_->AddHandler({[this](const kube::ObjectPtr& o) { Offer(o); },
                     [this](const kube::ObjectPtr&, const kube::ObjectPtr& o) { Offer(o); },
                     [this](const kube::ObjectPtr& o) {
                       std::lock_guard lock(mu_);
                       ReleaseLocked(std::string(kube::MetadataString(*o, "uid")));
                     }});
}

KubeletDriver::~KubeletDriver() { Stop(); }

void KubeletDriver::Start() {
  for (int i = 0; i < workers_; ++i) {
    threads_.emplace_back([this](std::stop_token stop) { Work(stop); });
  }
  pods_->Start();
}

void KubeletDriver::Stop() {
  pods_->Stop();
  for (auto& t : threads_) t.request_stop();
  cv_.notify_all();
  threads_.clear();
}

std::vector<std::string> KubeletDriver::failure_messages() const {
  std::lock_guard lock(mu_);
  return messages_;
}

std::string KubeletDriver::HookPath(std::string_view node) const {
  return root_.path() + "/" + std::string(node) + "/hook";
}

void KubeletDriver::Note(std::string message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::lock_guard lock(mu_);
  if (messages_.size() < kMessagesKept) messages_.push_back(std::move(message));
}

void KubeletDriver::Offer(const kube::ObjectPtr& pod) {
  const std::string uid(kube::MetadataString(*pod, "uid"));
  if (uid.empty()) return;
  if (Ended(*pod)) {
    std::lock_guard lock(mu_);
    ReleaseLocked(uid);
    return;
  }
  std::string node;
  if (!BoundAndAllocating(*pod, &node)) return;
  std::lock_guard lock(mu_);
  if (!pods_seen_.emplace(uid, PodEntry{node, {}, false}).second) return;  // queued or done
  NodeState& n = nodes_[node];
  n.pending.push_back(pod);
  if (!n.scheduled) {
    n.scheduled = true;
    ready_.push_back(node);
    cv_.notify_one();
  }
}

void KubeletDriver::ReleaseLocked(const std::string& uid) {
  auto entry = pods_seen_.find(uid);
  if (entry == pods_seen_.end()) return;
  entry->second.gone = true;
  NodeState& n = nodes_[entry->second.node];
  for (const std::string& r : entry->second.held) n.held.erase(r);
  entry->second.held.clear();
}

void KubeletDriver::Work(std::stop_token stop) {
  while (true) {
    std::string node;
    kube::ObjectPtr pod;
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait(lock, stop, [this] { return !ready_.empty(); })) return;
      node = std::move(ready_.front());
      ready_.pop_front();
      NodeState& n = nodes_[node];
      pod = n.pending.front();
      n.pending.pop_front();
    }
    Status s = Admit(node, pod);
    if (s.ok()) {
      allocated_.fetch_add(1);
    } else {
      // The message first: a reader that sees the count sees its message.
      Note("kubelet-driver event=admission_failed node=" + node + " error=\"" +
           s.error().message() + "\"");
      failures_.fetch_add(1);
    }
    std::lock_guard lock(mu_);
    NodeState& n = nodes_[node];
    if (n.pending.empty()) {
      n.scheduled = false;
    } else {
      ready_.push_back(node);  // the node's next pod, after the other nodes' waiting ones
      cv_.notify_one();
    }
  }
}

Result<Allocator*> KubeletDriver::NodeAllocator(const std::string& node) {
  {
    std::lock_guard lock(mu_);
    NodeState& n = nodes_[node];
    if (n.allocator) return n.allocator.get();
  }
  auto object = client_.Get(kube::kNodes, "", node);
  if (!object.ok()) return std::move(object).error().Context("reading node " + node);
  auto parsed = kube::ParseNode(*object);
  if (!parsed.ok()) return std::move(parsed).error().Context("reading node " + node);
  const std::string* value = parsed->metadata.Annotation(kube::kNodeRegisterAnnotation);
  if (value == nullptr) {
    return Error(ErrorCode::kNotFound, "node " + node + ": no " +
                                           std::string(kube::kNodeRegisterAnnotation) +
                                           " (no device plugin registered its GPUs)");
  }
  auto gpus = kube::DecodeNodeInventory(*value);
  if (!gpus.ok()) {
    return std::move(gpus).error().Context("node " + node + ": " +
                                           std::string(kube::kNodeRegisterAnnotation));
  }
  if (!root_.ok()) {
    return Error(ErrorCode::kIo, "the kubelet driver's temporary directory could not be made");
  }
  const std::string dir = root_.path() + "/" + node;
  HAMI_TRY(MakeDirectory(dir));
  HAMI_TRY(MakeDirectory(HookPath(node)));
  // The hook files hami-device-plugin installs at its start, which every answer binds
  // read-only (the Allocator refuses an answer whose files are missing).
  HAMI_TRY(MakeDirectory(HookPath(node) + "/vgpu"));
  for (const auto& [file, text] :
       {std::pair<const char*, std::string>{kHostLibVgpu, "a stand-in for libvgpu.so\n"},
        std::pair<const char*, std::string>{kHostLdSoPreload,
                                            std::string(kContainerLibVgpu) + "\n"}}) {
    const std::string path = HookPath(node) + "/" + file;
    UniqueFd fd = HAMI_TRY(OpenRegularFile(path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
    HAMI_TRY(WriteAll(fd.get(), text));
  }

  std::vector<NodeGpu> node_gpus;
  for (const kube::NodeDevice& d : *gpus) node_gpus.push_back({d.id, d.index, d.health});
  PluginConfig config;
  config.node_name = node;
  AllocatorOptions options;
  options.hook_path = HookPath(node);
  options.lock_dir.parent = dir;
  options.lock_dir.expected_owner = ::geteuid();
  options.log = [this](std::string_view line) {
    // A plain successful allocation is the expected case; everything else is kept.
    if (line.starts_with("plugin event=allocate ")) return;
    Note(std::string(line));
  };
  auto allocator =
      std::make_unique<Allocator>(client_, std::move(config), std::move(node_gpus), options);
  std::lock_guard lock(mu_);
  NodeState& n = nodes_[node];
  n.gpus = std::move(gpus).value();
  std::sort(n.gpus.begin(), n.gpus.end(),
            [](const kube::NodeDevice& a, const kube::NodeDevice& b) { return a.index < b.index; });
  n.allocator = std::move(allocator);
  return n.allocator.get();
}

Result<std::vector<std::string>> KubeletDriver::TakeReplicas(const std::string& node,
                                                             const std::string& uid,
                                                             const kube::ContainerDevices& chunk,
                                                             int64_t count) {
  std::lock_guard lock(mu_);
  PodEntry& entry = pods_seen_[uid];
  if (entry.gone) {
    return Error(ErrorCode::kNotFound, "the pod ended or was deleted before its admission");
  }
  NodeState& n = nodes_[node];
  std::vector<std::string> taken;
  // The lowest free replica of `gpu`, marked held; false when every one is held.
  auto take = [&](const kube::NodeDevice& gpu) {
    for (int32_t i = 0; i < gpu.count; ++i) {
      std::string id = gpu.id + "-" + std::to_string(i);
      if (n.held.insert(id).second) {
        taken.push_back(std::move(id));
        return true;
      }
    }
    return false;
  };
  std::vector<std::string> used_gpus;
  for (const kube::ContainerDevice& d : chunk) {
    if (int64_t(taken.size()) == count) break;
    auto gpu = std::find_if(n.gpus.begin(), n.gpus.end(),
                            [&](const kube::NodeDevice& g) { return g.id == d.uuid; });
    if (gpu == n.gpus.end()) {
      for (const std::string& r : taken) n.held.erase(r);
      return Error(ErrorCode::kNotFound, "GPU " + d.uuid + " is not in node " + node + "'s " +
                                             std::string(kube::kNodeRegisterAnnotation));
    }
    if (!take(*gpu)) {
      for (const std::string& r : taken) n.held.erase(r);
      return Error(ErrorCode::kBusy, "every replica of GPU " + d.uuid + " on node " + node +
                                         " is held by another pod");
    }
    used_gpus.push_back(d.uuid);
  }
  for (const kube::NodeDevice& gpu : n.gpus) {
    if (int64_t(taken.size()) == count) break;
    if (std::find(used_gpus.begin(), used_gpus.end(), gpu.id) != used_gpus.end()) continue;
    take(gpu);
  }
  if (int64_t(taken.size()) < count) {
    for (const std::string& r : taken) n.held.erase(r);
    return Error(ErrorCode::kBusy, "node " + node + " has fewer than " + std::to_string(count) +
                                       " free " + kDefaultResourceName + " replicas");
  }
  entry.held.insert(entry.held.end(), taken.begin(), taken.end());
  return taken;
}

Status KubeletDriver::Admit(const std::string& node, const kube::ObjectPtr& object) {
  auto parsed = kube::ParsePod(*object);
  if (!parsed.ok()) return std::move(parsed).error().Context("pod on node " + node);
  const kube::Pod& pod = *parsed;
  const std::string name = pod.metadata.ns + "/" + pod.metadata.name;
  auto fail = [&](Error e) { return std::move(e).Context("pod " + name + " on node " + node); };

  const std::string* to_allocate = pod.metadata.Annotation(kube::kDevicesToAllocateAnnotation);
  if (to_allocate == nullptr) {
    return fail(
        Error(ErrorCode::kNotFound, std::string(kube::kDevicesToAllocateAnnotation) + ": missing"));
  }
  auto chunks = kube::DecodePodDevices(*to_allocate, kube::kDevicesToAllocateAnnotation);
  if (!chunks.ok()) return fail(std::move(chunks).error());
  auto allocator = NodeAllocator(node);
  if (!allocator.ok()) return fail(std::move(allocator).error());

  std::vector<const kube::Container*> containers;
  for (const kube::Container& c : pod.init_containers) containers.push_back(&c);
  for (const kube::Container& c : pod.containers) containers.push_back(&c);
  for (size_t i = 0; i < containers.size() || i < chunks->size(); ++i) {
    const kube::Container* c = i < containers.size() ? containers[i] : nullptr;
    const kube::ContainerDevices none;
    const kube::ContainerDevices& chunk = i < chunks->size() ? (*chunks)[i] : none;
    const int64_t asked = c != nullptr ? GpusAsked(*c) : 0;
    if (asked <= 0) {
      if (!chunk.empty()) {
        return fail(Error(ErrorCode::kInvalidArgument,
                          std::string(kube::kDevicesToAllocateAnnotation) + " assigns " +
                              std::to_string(chunk.size()) + " devices to " +
                              (c != nullptr ? "container " + c->name : "no container") +
                              " (position " + std::to_string(i) + "), which asks for no " +
                              kDefaultResourceName +
                              ": the kubelet never calls Allocate for it, so the pod never "
                              "reaches bind-phase success"));
      }
      continue;
    }
    auto replicas = TakeReplicas(node, pod.metadata.uid, chunk, asked);
    if (!replicas.ok()) return fail(std::move(replicas).error().Context("container " + c->name));
    auto answers = (*allocator)->Allocate({ContainerRequest{*replicas}});
    if (!answers.ok()) {
      return fail(std::move(answers).error().Context("Allocate for container " + c->name));
    }
    if (answers->size() != 1) {
      return fail(Error(ErrorCode::kCorrupt, "Allocate for container " + c->name + " answered " +
                                                 std::to_string(answers->size()) +
                                                 " containers, not 1"));
    }
    auto dir = node::ContainerDir(HookPath(node), {pod.metadata.uid, c->name});
    if (!dir.ok()) return fail(std::move(dir).error());
    for (const Mount& m : (*answers)[0].mounts) {
      if (m.container_path == kContainerVgpuDir && m.host_path != *dir) {
        return fail(Error(ErrorCode::kCorrupt, "Allocate for container " + c->name + " mounted " +
                                                   m.host_path + " at " + kContainerVgpuDir +
                                                   ", not " + *dir +
                                                   ": the answer is for another pod or container"));
      }
    }
  }
  return OkStatus();
}

}  // namespace hami::plugin
