#include "plugin/allocate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "common/quote.h"
#include "common/strings.h"
#include "kube/time.h"
#include "limits/vocabulary.h"

namespace hami::plugin {
namespace {

using nlohmann::json;

// Go's strconv.ParseBool true values, as HAMi reads CUDA_DISABLE_CONTROL.
bool GoTrue(std::string_view v) {
  return v == "1" || v == "t" || v == "T" || v == "TRUE" || v == "true" || v == "True";
}

// The container's variable as the spec sets it (the last of duplicates wins, as in the
// kubelet); nullptr when unset or set from valueFrom.
const std::string* SpecEnv(const kube::Container& c, std::string_view name) {
  const std::string* found = nullptr;
  for (const kube::EnvVar& e : c.env) {
    if (e.name == name) found = e.value.empty() ? nullptr : &e.value;
  }
  return found;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

bool IsCandidate(const kube::Pod& p, std::string_view node) {
  if (p.phase != kube::PodPhase::kPending && p.phase != kube::PodPhase::kUnset) return false;
  if (p.metadata.Annotation(kube::kBindTimeAnnotation) == nullptr) return false;
  const std::string* phase = p.metadata.Annotation(kube::kBindPhaseAnnotation);
  if (phase == nullptr || (*phase != "allocating" && *phase != "success")) return false;
  const std::string* n = p.metadata.Annotation(kube::kVgpuNodeAnnotation);
  return n != nullptr && *n == node;
}

std::vector<std::string> SortedUuids(const kube::ContainerDevices& devs) {
  std::vector<std::string> out;
  for (const auto& d : devs) out.push_back(d.uuid);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string NoBindingPodMessage(std::string_view node_name) {
  return "no binding pod found on node " + std::string(node_name);
}

Result<kube::Pod> FindPendingPod(std::string_view node_name, const std::string* node_lock,
                                 const json& pods) {
  const json* items = &pods;
  if (pods.is_object()) {
    auto it = pods.find("items");
    if (it == pods.end() || !(it->is_array() || it->is_null())) {
      return Error(ErrorCode::kInvalidArgument, "pod list: no items array");
    }
    items = &*it;
  } else if (!pods.is_array()) {
    return Error(ErrorCode::kInvalidArgument, "pod list: expected a PodList or an array of pods");
  }
  std::vector<kube::Pod> candidates;
  if (items->is_array()) {
    for (const json& item : *items) {
      auto pod = kube::ParsePod(item);
      if (pod.ok() && IsCandidate(*pod, node_name)) candidates.push_back(std::move(pod).value());
    }
  }
  if (node_lock != nullptr) {
    auto lock = kube::DecodeNodeLock(*node_lock);
    if (lock.ok() && !lock->ns.empty()) {
      for (const kube::Pod& p : candidates) {
        if (p.metadata.ns == lock->ns && p.metadata.name == lock->pod) return p;
      }
    }
  }
  if (candidates.empty()) return Error(ErrorCode::kNotFound, NoBindingPodMessage(node_name));
  auto order = [](const kube::Pod& p) {
    const bool success = *p.metadata.Annotation(kube::kBindPhaseAnnotation) == "success";
    auto t = kube::DecodeUnixSeconds(*p.metadata.Annotation(kube::kBindTimeAnnotation),
                                     kube::kBindTimeAnnotation);
    const bool bad_time = !t.ok();
    const kube::WallTime time = t.ok() ? *t : kube::WallTime{};
    return std::make_tuple(success, bad_time, time, p.metadata.ns, p.metadata.name);
  };
  return *std::min_element(
      candidates.begin(), candidates.end(),
      [&](const kube::Pod& a, const kube::Pod& b) { return order(a) < order(b); });
}

std::string RequestKey(const ContainerRequest& request) {
  std::vector<std::string> ids = request.device_ids;
  std::sort(ids.begin(), ids.end());
  return Join(ids, ",");
}

std::string PhysicalUuid(std::string_view id, std::span<const NodeGpu> gpus) {
  for (const NodeGpu& g : gpus) {
    if (g.uuid.empty() || id.size() <= g.uuid.size() + 1) continue;
    if (id.substr(0, g.uuid.size()) != g.uuid || id[g.uuid.size()] != '-') continue;
    std::string_view rest = id.substr(g.uuid.size() + 1);
    if (std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return g.uuid;
    }
  }
  return std::string(id);
}

Result<AllocatePlan> Allocate(const AllocateInput& in) {
  if (in.pod == nullptr || in.config == nullptr) {
    return Error(ErrorCode::kInternal, "Allocate: no pod or no configuration");
  }
  const kube::Pod& pod = *in.pod;
  const PluginConfig& cfg = *in.config;
  const std::string who = "pod " + pod.metadata.ns + "/" + pod.metadata.name;
  auto fail = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, who + ": " + what);
  };
  const std::string to_allocate_key(kube::kDevicesToAllocateAnnotation);
  const std::string allocated_key(kube::kDevicesAllocatedAnnotation);

  AllocatePlan plan;
  if (in.requests.empty()) return fail("the kubelet's Allocate request names no container");
  auto delivery =
      ResolveLimitDelivery(cfg, pod.metadata.Annotation(kube::kLimitDeliveryAnnotation));
  if (!delivery.ok()) return std::move(delivery).error().Context(who);
  plan.delivery = *delivery;

  const std::string* to_allocate = pod.metadata.Annotation(kube::kDevicesToAllocateAnnotation);
  if (to_allocate == nullptr) return fail(to_allocate_key + ": missing");
  auto decoded = kube::DecodePodDevices(*to_allocate, kube::kDevicesToAllocateAnnotation);
  if (!decoded.ok()) return std::move(decoded).error().Context(who);
  kube::PodDevices pending = std::move(decoded).value();

  std::optional<kube::PodDevices> allocated;
  auto load_allocated = [&]() -> Status {
    if (allocated) return OkStatus();
    const std::string* value = pod.metadata.Annotation(kube::kDevicesAllocatedAnnotation);
    if (value == nullptr) {
      return fail(to_allocate_key + ": no container is left to allocate, and " + allocated_key +
                  " (to answer a repeated request) is missing");
    }
    auto all = kube::DecodePodDevices(*value, kube::kDevicesAllocatedAnnotation);
    if (!all.ok()) return std::move(all).error().Context(who);
    allocated = std::move(all).value();
    return OkStatus();
  };

  const size_t inits = pod.init_containers.size();
  const size_t total = inits + pod.containers.size();
  const bool mig = cfg.operating_mode == OperatingMode::kMig;
  bool popped = false;

  for (size_t r = 0; r < in.requests.size(); ++r) {
    const ContainerRequest& req = in.requests[r];
    const std::string at = "container request " + std::to_string(r);
    if (req.device_ids.empty()) return fail(at + ": names no devices");
    ContainerPlan cp;
    cp.request_key = RequestKey(req);
    std::vector<std::string> physical;
    for (const std::string& id : req.device_ids) physical.push_back(PhysicalUuid(id, in.gpus));
    std::vector<std::string> physical_sorted = physical;
    std::sort(physical_sorted.begin(), physical_sorted.end());
    kube::ContainerDevices devs;

    // A request answered before: its chunk is empty now; answer from the full allocation.
    if (in.known_chunks != nullptr) {
      auto it = in.known_chunks->find(cp.request_key);
      if (it != in.known_chunks->end() && it->second >= 0 &&
          (static_cast<size_t>(it->second) >= pending.size() ||
           pending[static_cast<size_t>(it->second)].empty())) {
        HAMI_TRY(load_allocated());
        const size_t j = static_cast<size_t>(it->second);
        if (j < allocated->size() && (*allocated)[j].size() == req.device_ids.size()) {
          cp.chunk = it->second;
          cp.replay = true;
          devs = (*allocated)[j];
        }
      }
    }
    if (cp.chunk < 0) {
      for (size_t j = 0; j < pending.size(); ++j) {
        if (!pending[j].empty()) {
          cp.chunk = static_cast<int>(j);
          devs = pending[j];
          break;
        }
      }
    }
    if (cp.chunk < 0) {
      // Every chunk is taken: a repeated request for a container already answered.
      HAMI_TRY(load_allocated());
      std::vector<size_t> matches;
      for (size_t j = 0; j < allocated->size(); ++j) {
        if ((j >= pending.size() || pending[j].empty()) && !(*allocated)[j].empty() &&
            SortedUuids((*allocated)[j]) == physical_sorted) {
          matches.push_back(j);
        }
      }
      if (matches.empty()) {
        return fail(to_allocate_key +
                    ": no container is left to allocate (every chunk is empty), and no "
                    "allocated container has the kubelet's devices " +
                    Join(req.device_ids, ","));
      }
      if (matches.size() > 1) {
        return fail(to_allocate_key +
                    ": no container is left to allocate, and the kubelet's "
                    "devices " +
                    Join(req.device_ids, ",") + " match " + std::to_string(matches.size()) +
                    " allocated containers: cannot tell which one this request repeats");
      }
      cp.chunk = static_cast<int>(matches[0]);
      cp.replay = true;
      devs = (*allocated)[matches[0]];
    }

    const size_t chunk = static_cast<size_t>(cp.chunk);
    if (chunk >= total) {
      return fail(std::string(cp.replay ? allocated_key : to_allocate_key) + ": container " +
                  std::to_string(chunk) + " has devices but the pod has " + std::to_string(total) +
                  " containers");
    }
    const kube::Container& ctr =
        chunk < inits ? pod.init_containers[chunk] : pod.containers[chunk - inits];
    cp.container = ctr.name;
    if (devs.size() != req.device_ids.size()) {
      return fail(at + ": device number not matched: the kubelet allocated " +
                  std::to_string(req.device_ids.size()) + " devices, " + to_allocate_key + " has " +
                  std::to_string(devs.size()) + " for container " + ctr.name);
    }
    if (!cp.replay) {
      pending[chunk].clear();
      popped = true;
    }

    ContainerResponse& resp = cp.response;
    if (!mig) {
      // Realign to the kubelet's order; a replica of a GPU the chunk lacks keeps the
      // scheduler's device.
      kube::ContainerDevices aligned(devs.size());
      std::vector<bool> used(devs.size(), false), filled(devs.size(), false);
      for (size_t k = 0; k < physical.size(); ++k) {
        for (size_t j = 0; j < devs.size(); ++j) {
          if (!used[j] && devs[j].uuid == physical[k]) {
            aligned[k] = devs[j];
            used[j] = filled[k] = true;
            break;
          }
        }
      }
      size_t next = 0;
      for (size_t k = 0; k < physical.size(); ++k) {
        if (filled[k]) continue;
        while (used[next]) ++next;
        aligned[k] = devs[next];
        used[next] = true;
        plan.warnings.push_back(who + " container " + ctr.name + ": the kubelet chose replica " +
                                req.device_ids[k] + ", not of a GPU the scheduler assigned; " +
                                aligned[k].uuid + " is used as the scheduler decided");
      }
      devs = std::move(aligned);
      std::vector<ShareDevice> shares;
      for (size_t k = 0; k < devs.size(); ++k) {
        const kube::ContainerDevice& d = devs[k];
        auto gpu = std::find_if(in.gpus.begin(), in.gpus.end(),
                                [&](const NodeGpu& g) { return g.uuid == d.uuid; });
        if (gpu == in.gpus.end()) {
          return fail(to_allocate_key + ": container " + ctr.name + " device " + std::to_string(k) +
                      ": " + QuoteInput(d.uuid) + " is not a GPU of node " + cfg.node_name);
        }
        if (cfg.filter.Excludes(gpu->uuid, gpu->index)) {
          return fail(to_allocate_key + ": container " + ctr.name + " device " + std::to_string(k) +
                      ": " + d.uuid + " is excluded by this node's filterdevices");
        }
        if (!gpu->healthy) {
          plan.warnings.push_back(who + " container " + ctr.name + ": GPU " + d.uuid +
                                  " is unhealthy");
        }
        if (d.mem_mib <= 0) {
          return fail(to_allocate_key + ": container " + ctr.name + " device " + d.uuid +
                      ": 0 MiB of memory would be no limit; refusing to allocate");
        }
        const ScaledShare share = SplitScaledShare(static_cast<uint64_t>(d.mem_mib) << 20,
                                                   cfg.device.device_memory_scaling);
        if (share.device_bytes == 0) {
          return fail("container " + ctr.name + " device " + d.uuid + ": deviceMemoryScaling " +
                      std::to_string(cfg.device.device_memory_scaling) + " leaves no device " +
                      "memory of its " + std::to_string(d.mem_mib) + " MiB share");
        }
        shares.push_back(
            {d.uuid, static_cast<uint64_t>(d.mem_mib) << 20, static_cast<uint32_t>(devs[k].cores)});
      }
      // A container's own priority and policy are checked as libvgpu.so reads them, and
      // passed on in the form every writer writes.
      ContainerShareInput si;
      const std::string priority_name(limits::Name(limits::Key::kTaskPriority));
      if (const std::string* v = SpecEnv(ctr, priority_name)) {
        auto priority = limits::ParseTaskPriority(*v);
        if (!priority.ok()) {
          return fail("container " + ctr.name + ": env " + priority_name + " " + QuoteInput(*v) +
                      " is not 0 (high) or 1 (low)");
        }
        si.task_priority = *priority;
      }
      const std::string policy_name(limits::Name(limits::Key::kCorePolicy));
      if (const std::string* v = SpecEnv(ctr, policy_name)) {
        auto policy = limits::ParseCorePolicy(*v);
        if (!policy.ok()) {
          return fail("container " + ctr.name + ": env " + policy_name + " " + QuoteInput(*v) +
                      " is not one of default, force, disable");
        }
        si.core_policy = *policy;
      }
      const std::string* disable = SpecEnv(ctr, kDisableControlEnv);
      si.devices = shares;
      si.device_config = &cfg.device;
      si.ref = node::ContainerRef{pod.metadata.uid, ctr.name};
      si.hook_path = in.hook_path;
      si.broker = in.broker;
      si.lock_host_dir = in.lock_host_dir;
      si.broker_host_dir = in.broker_host_dir;
      si.limits_file =
          plan.delivery == LimitDelivery::kFile ? LimitsFile::kWrite : LimitsFile::kNone;
      si.preload = disable == nullptr || !GoTrue(*disable) ? Preload::kMount : Preload::kSkip;
      auto built = BuildContainerShare(si);
      if (!built.ok()) return std::move(built).error().Context(who);
      resp = std::move(built->response);
      cp.container_dir = std::move(built->container_dir);
      cp.limits_path = std::move(built->limits_path);
      cp.limits = std::move(built->limits);
    } else {
      std::vector<std::string> visible;
      for (const auto& d : devs) {
        if (std::find(visible.begin(), visible.end(), d.uuid) == visible.end()) {
          visible.push_back(d.uuid);
        }
      }
      resp.envs[kVisibleDevicesEnv] = Join(visible, ",");
    }
    cp.devices = std::move(devs);
    plan.containers.push_back(std::move(cp));
  }

  auto encoded = kube::EncodePodDevices(pending, kube::kDevicesToAllocateAnnotation);
  if (!encoded.ok()) return std::move(encoded).error().Context(who);
  plan.devices_to_allocate = std::move(encoded).value();
  plan.annotation_changed = popped;
  plan.complete = std::all_of(pending.begin(), pending.end(),
                              [](const kube::ContainerDevices& c) { return c.empty(); });
  return plan;
}

PreferredPlan PreferredAllocation(const kube::PodDevices* pending,
                                  std::span<const PreferredRequest> requests,
                                  std::span<const NodeGpu> gpus) {
  PreferredPlan plan;
  std::vector<const kube::ContainerDevices*> chunks;
  if (pending != nullptr) {
    for (const auto& c : *pending) {
      if (!c.empty()) chunks.push_back(&c);
    }
  }
  for (size_t r = 0; r < requests.size(); ++r) {
    const PreferredRequest& req = requests[r];
    const size_t size = req.allocation_size > 0 ? static_cast<size_t>(req.allocation_size) : 0;
    auto fallback = [&](const std::string& why) {
      plan.warnings.push_back("preferred allocation for container request " + std::to_string(r) +
                              ": " + why + "; answering the first available replicas");
      std::vector<std::string> out = req.must_include_device_ids;
      for (const std::string& id : req.available_device_ids) {
        if (out.size() >= size) break;
        if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
      }
      plan.answers.push_back(std::move(out));
    };
    if (pending == nullptr) {
      fallback("no pending pod");
      continue;
    }
    if (r >= chunks.size()) {
      fallback("the pending pod has " + std::to_string(chunks.size()) +
               " containers left to allocate");
      continue;
    }
    const kube::ContainerDevices& desired = *chunks[r];
    if (desired.size() < size) {
      fallback("the scheduler assigned " + std::to_string(desired.size()) +
               " devices, the kubelet asks for " + std::to_string(size));
      continue;
    }
    std::vector<std::string> selected = req.must_include_device_ids;
    std::map<std::string, int> required_by_gpu;
    for (const std::string& id : req.must_include_device_ids)
      ++required_by_gpu[PhysicalUuid(id, gpus)];
    std::map<std::string, std::vector<std::string>> available_by_gpu;
    for (const std::string& id : req.available_device_ids) {
      if (std::find(selected.begin(), selected.end(), id) != selected.end()) continue;
      available_by_gpu[PhysicalUuid(id, gpus)].push_back(id);
    }
    bool ok = true;
    std::string why;
    for (size_t k = 0; k < size; ++k) {
      const std::string& uuid = desired[k].uuid;
      if (required_by_gpu[uuid] > 0) {
        --required_by_gpu[uuid];
        continue;
      }
      auto& candidates = available_by_gpu[uuid];
      if (candidates.empty()) {
        ok = false;
        why = "no replica of GPU " + uuid + " is available";
        break;
      }
      selected.push_back(candidates.front());
      candidates.erase(candidates.begin());
    }
    if (ok && selected.size() != size) {
      ok = false;
      why = "the must-include replicas are not on the scheduler's GPUs";
    }
    if (!ok) {
      fallback(why);
      continue;
    }
    plan.answers.push_back(std::move(selected));
  }
  return plan;
}

}  // namespace hami::plugin
