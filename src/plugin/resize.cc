#include "plugin/resize.h"

#include <condition_variable>
#include <map>
#include <mutex>

#include "kube/annotations.h"
#include "kube/resize.h"
#include "kube/resource.h"
#include "limits/vocabulary.h"
#include "log/log.h"
#include "node/paths.h"
#include "plugin/allocate.h"
#include "region/region.h"

namespace hami::plugin {

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// What one container changes to.
struct Change {
  std::string container;
  std::string limits_path;
  std::unique_ptr<region::Region> region;
  kube::ContainerDevices devices;
  std::vector<uint64_t> device_bytes;  // each share's device part (deviceMemoryScaling)
  uint64_t host_bytes = 0;             // the host parts added up; 0 when not scaled
  std::vector<limits::Entry> limits;
};

// A region limit as it was before a change, to put back.
struct Previous {
  region::Region* region;
  int device;
  uint64_t memory_bytes;
  uint32_t sm_percent;
  uint64_t host_bytes;
};

// Sets every change's region limits, a memory limit only if the device holds no more than it
// (checked under the device's lock: no admission slips in between). When a device holds more
// (`refusal` says which) or a step fails (the error), every region is put back as it was.
Status ApplyToRegions(const std::vector<Change>& changes, std::string* refusal) {
  std::vector<Previous> done;
  auto put_back = [&] {
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      Status m = it->region->SetMemoryLimit(it->device, it->memory_bytes);
      Status c = it->region->SetSmLimit(it->device, it->sm_percent);
      if (it->device == 0 && m.ok()) m = it->region->SetHostLimit(it->host_bytes);
      if (!m.ok() || !c.ok()) {
        HAMI_LOG(kError, "event=resize_rollback_failed region=%s device=%d error=\"%s\"",
                 it->region->path().c_str(), it->device,
                 (m.ok() ? c : m).error().message().c_str());
      }
    }
  };
  for (const Change& ch : changes) {
    const uint32_t cores = uint32_t(ch.devices.front().cores);
    for (size_t i = 0; i < ch.devices.size(); ++i) {
      const int device = int(i);
      done.push_back({ch.region.get(), device, ch.region->MemoryLimit(device),
                      ch.region->SmLimit(device), ch.region->Policy().host_limit});
      const uint64_t bytes = ch.device_bytes[i];
      Status m = bytes == 0 ? ch.region->SetMemoryLimit(device, 0)
                            : ch.region->LowerMemoryLimitAboveUse(device, bytes);
      if (!m.ok() && m.error().code() == ErrorCode::kBusy) {
        *refusal = "container " + ch.container + ": " + m.error().message() + " (" +
                   ch.devices[i].uuid + "); nothing is taken from a running container";
        put_back();
        return OkStatus();
      }
      Status c = m.ok() ? ch.region->SetSmLimit(device, cores) : OkStatus();
      if (c.ok() && m.ok() && device == 0 && ch.host_bytes != 0) {
        c = ch.region->SetHostLimit(ch.host_bytes);
      }
      if (!m.ok() || !c.ok()) {
        put_back();
        Status failed = m.ok() ? std::move(c) : std::move(m);
        return std::move(failed).error().Context("container " + ch.container);
      }
    }
  }
  return OkStatus();
}

}  // namespace

std::vector<limits::Entry> ResizedLimits(const std::vector<limits::Entry>& current,
                                         const kube::ContainerDevices& devices,
                                         double memory_scaling) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : current) {
    if (k != limits::kFormatKey) out[k] = v;
  }
  uint64_t host = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    const ScaledShare share = SplitScaledShare(uint64_t(devices[i].mem_mib) * kMiB, memory_scaling);
    auto [k, v] = limits::SetDeviceMemoryLimit(int(i), share.device_bytes);
    out[k] = v;
    host += share.host_bytes;
  }
  if (memory_scaling > 1) {
    auto [k, v] = limits::SetOversubscribeHostLimit(host);
    out[k] = v;
  }
  if (!devices.empty()) {
    auto [k, v] = limits::SetSmLimit(uint32_t(devices[0].cores));
    out[k] = v;
  }
  return {out.begin(), out.end()};
}

ResizeApplier::ResizeApplier(kube::Client& client, ResizeApplierOptions options)
    : client_(client), options_(std::move(options)) {}

ResizeApplier::~ResizeApplier() { Stop(); }

Status ResizeApplier::Reconcile(const nlohmann::json& object) {
  auto pod = kube::ParsePod(object);
  if (!pod.ok()) return OkStatus();  // not ours to judge
  const std::string* st = pod->metadata.Annotation(kube::kResizeStatusAnnotation);
  const std::string* node = pod->metadata.Annotation(kube::kVgpuNodeAnnotation);
  const std::string* allocated = pod->metadata.Annotation(kube::kDevicesAllocatedAnnotation);
  if (st == nullptr || node == nullptr || *node != options_.node_name || allocated == nullptr) {
    return OkStatus();
  }
  auto status = kube::DecodeResizeStatus(*st);
  if (!status.ok() || status->phase != kube::ResizePhase::kAccepted) return OkStatus();
  const std::string who = pod->metadata.ns + "/" + pod->metadata.name;

  std::string refusal;
  std::vector<Change> changes;
  auto devices = kube::DecodePodDevices(*allocated, kube::kDevicesAllocatedAnnotation);
  if (!devices.ok()) refusal = devices.error().message();
  const size_t init = devices.ok() && devices->size() > pod->containers.size()
                          ? devices->size() - pod->containers.size()
                          : 0;
  for (size_t c = 0; refusal.empty() && c < pod->containers.size(); ++c) {
    if (init + c >= devices->size() || (*devices)[init + c].empty()) continue;
    Change ch;
    ch.container = pod->containers[c].name;
    ch.devices = (*devices)[init + c];
    for (const kube::ContainerDevice& d : ch.devices) {
      const ScaledShare share =
          SplitScaledShare(uint64_t(d.mem_mib) * kMiB, options_.memory_scaling);
      ch.device_bytes.push_back(share.device_bytes);
      ch.host_bytes += share.host_bytes;
    }
    const node::ContainerRef ref{pod->metadata.uid, ch.container};
    auto limits_path = node::ContainerLimitsPath(options_.hook_path, ref);
    auto region_path = node::ContainerRegionPath(options_.hook_path, ref);
    if (!limits_path.ok() || !region_path.ok()) {
      refusal = (limits_path.ok() ? region_path.error() : limits_path.error()).message();
      break;
    }
    ch.limits_path = *limits_path;
    limits::LimitsFile file = limits::ReadLimitsFile(ch.limits_path);
    if (!file.present) {
      refusal = "container " + ch.container + ": its limits file " + ch.limits_path +
                (file.unreadable ? " cannot be read (" + file.problems.front() + ")"
                                 : std::string(" is absent (limits delivered by environment "
                                               "variables only cannot change while it runs)"));
      break;
    }
    auto region = region::Region::Open(*region_path, nullptr, region::Create::kNever, nullptr);
    if (!region.ok()) {
      refusal = "container " + ch.container + ": " + region.error().message();
      break;
    }
    ch.region = std::move(region).value();
    ch.region->SetLockTimeout(region::Region::kHostLockTimeoutNs);
    ch.region->SweepDead();  // what dead processes held is not the container's
    for (size_t i = 0; i < ch.devices.size() && refusal.empty(); ++i) {
      const uint64_t limit = ch.device_bytes[i];
      const uint64_t used = ch.region->UsedBytes(int(i));
      if (used > limit) {
        refusal = "container " + ch.container + " holds " + std::to_string(used / kMiB) +
                  " MiB on " + ch.devices[i].uuid + ", more than the new " +
                  (limit == uint64_t(ch.devices[i].mem_mib) * kMiB
                       ? std::to_string(ch.devices[i].mem_mib) + " MiB"
                       : std::to_string(limit / kMiB) + " MiB of device memory (the rest of its " +
                             std::to_string(ch.devices[i].mem_mib) +
                             " MiB is host memory: deviceMemoryScaling)") +
                  "; nothing is taken from a running container";
      }
    }
    std::vector<limits::Entry> current(file.entries.begin(), file.entries.end());
    ch.limits = ResizedLimits(current, ch.devices, options_.memory_scaling);
    changes.push_back(std::move(ch));
  }

  const std::string rv = pod->metadata.resource_version;
  kube::ResizeStatus next = *status;
  nlohmann::json annotations = nlohmann::json::object();
  if (refusal.empty()) {
    auto applied = ApplyToRegions(changes, &refusal);
    if (!applied.ok()) return std::move(applied).error().Context("resizing " + who);
  }
  if (refusal.empty()) {
    for (Change& ch : changes) {
      if (Status f = limits::UpdateLimitsFileInPlace(ch.limits_path, ch.limits); !f.ok()) {
        return std::move(f).error().Context("resizing " + who);
      }
    }
    next.phase = kube::ResizePhase::kApplied;
  } else {
    next.phase = kube::ResizePhase::kRefused;
    next.reason = "node " + options_.node_name + ": " + refusal;
    annotations[std::string(kube::kDevicesAllocatedAnnotation)] = status->previous;
  }
  next.previous.clear();
  annotations[std::string(kube::kResizeStatusAnnotation)] = kube::EncodeResizeStatus(next);
  nlohmann::json patch = {{"metadata", {{"resourceVersion", rv}, {"annotations", annotations}}}};
  auto patched = client_.Patch(kube::kPods, pod->metadata.ns, pod->metadata.name,
                               kube::PatchType::kMerge, patch);
  if (!patched.ok()) return std::move(patched).error().Context("recording the resize of " + who);
  HAMI_LOG(kInfo, "event=resize_%s pod=%s request=\"%s\" reason=\"%s\"",
           refusal.empty() ? "applied" : "refused", who.c_str(), status->request.c_str(),
           next.reason.c_str());
  return OkStatus();
}

Status ResizeApplier::ReconcileAll() {
  kube::ListOptions lo;
  lo.field_selector = "spec.nodeName=" + options_.node_name;
  auto list = client_.List(kube::kPods, "", lo);
  if (!list.ok()) return std::move(list).error();
  Status first = OkStatus();
  if (auto items = list->find("items"); items != list->end() && items->is_array()) {
    for (const nlohmann::json& pod : *items) {
      Status s = Reconcile(pod);
      if (!s.ok()) {
        HAMI_LOG(kWarn, "event=resize_failed error=\"%s\"", s.error().message().c_str());
        if (first.ok()) first = s;
      }
    }
  }
  return first;
}

void ResizeApplier::Start() {
  loop_ = std::jthread([this](std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    while (!stop.stop_requested()) {
      (void)ReconcileAll();
      std::unique_lock l(mu);
      cv.wait_for(l, stop, options_.period, [] { return false; });
    }
  });
}

void ResizeApplier::Stop() {
  if (loop_.joinable()) {
    loop_.request_stop();
    loop_.join();
  }
}

}  // namespace hami::plugin
