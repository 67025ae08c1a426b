#include "scheduler/request.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace hami::scheduler {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// One resource of a container: limits, else requests.
struct Found {
  const kube::Quantity* quantity = nullptr;
  const char* section = nullptr;  // "limits" or "requests"
};

Found Lookup(const kube::Container& c, std::string_view name) {
  if (auto it = c.limits.find(name); it != c.limits.end()) return {&it->second, "limits"};
  if (auto it = c.requests.find(name); it != c.requests.end()) return {&it->second, "requests"};
  return {};
}

// The whole number a quantity holds, in [min, max]; the error names the resource.
Result<int64_t> WholeNumber(const Found& f, std::string_view name, std::string_view what,
                            int64_t min, int64_t max) {
  const kube::Quantity& q = *f.quantity;
  auto fail = [&](std::string_view why) {
    return Error(ErrorCode::kInvalidArgument, std::string(what) + ": resources." + f.section + "." +
                                                  std::string(name) + ": " + q.ToString() + " " +
                                                  std::string(why));
  };
  if (q.MilliValue() % 1000 != 0) return fail("is not a whole number");
  const int64_t v = q.Value();
  if (v < min || v > max) {
    return fail("is out of range " + std::to_string(min) + ".." + std::to_string(max));
  }
  return v;
}

}  // namespace

bool PodRequest::RequestsGpus() const {
  auto any = [](const std::vector<ContainerRequest>& v) {
    return std::any_of(v.begin(), v.end(), [](const auto& c) { return c.requests_gpus(); });
  };
  return any(init_containers) || any(containers);
}

int32_t PodRequest::PeakGpuCount() const {
  int32_t init = 0;
  for (const auto& c : init_containers) init = std::max(init, c.count);
  int64_t sum = 0;
  for (const auto& c : containers) sum += c.count;
  return static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(init, sum), kInt32Max));
}

Result<ContainerRequest> ParseContainerRequest(const kube::Container& container,
                                               const config::DeviceConfig& config,
                                               std::string_view what) {
  const Found count = Lookup(container, config.resource_count_name);
  const Found mem = Lookup(container, config.resource_memory_name);
  const Found percent = Lookup(container, config.resource_memory_percentage_name);
  const Found cores = Lookup(container, config.resource_core_name);
  const Found priority = Lookup(container, config.resource_priority_name);

  ContainerRequest r;
  r.name = container.name;
  if (priority.quantity != nullptr) {
    r.priority = static_cast<int32_t>(
        HAMI_TRY(WholeNumber(priority, config.resource_priority_name, what, 0, 1)));
  }
  const bool names_share =
      mem.quantity != nullptr || percent.quantity != nullptr || cores.quantity != nullptr;
  if (count.quantity == nullptr && !names_share) return r;

  if (count.quantity != nullptr) {
    r.count = static_cast<int32_t>(
        HAMI_TRY(WholeNumber(count, config.resource_count_name, what, 0, 1024)));
    if (r.count == 0) {
      if (names_share) {
        return Error(ErrorCode::kInvalidArgument,
                     std::string(what) + ": resources." + count.section + "." +
                         config.resource_count_name +
                         " is 0 while the container asks for GPU memory or cores");
      }
      return r;
    }
  } else {
    r.count = config.default_gpu_num;
  }

  int64_t mem_mib = 0;
  if (mem.quantity != nullptr) {
    mem_mib = HAMI_TRY(WholeNumber(mem, config.resource_memory_name, what, 0, kInt32Max));
    mem_mib *= config.memory_factor;
    if (mem_mib > kInt32Max) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string(what) + ": resources." + mem.section + "." +
                       config.resource_memory_name + ": " + mem.quantity->ToString() + " x " +
                       "memoryFactor " + std::to_string(config.memory_factor) +
                       " is more than 2^31-1 MiB");
    }
  }
  if (mem_mib > 0) {
    r.mem_mib = static_cast<int32_t>(mem_mib);
  } else if (percent.quantity != nullptr) {
    r.mem_percentage = static_cast<int32_t>(
        HAMI_TRY(WholeNumber(percent, config.resource_memory_percentage_name, what, 1, 100)));
  } else if (config.default_memory_mib > 0) {
    r.mem_mib = config.default_memory_mib;
  } else {
    r.mem_percentage = 100;
  }

  r.cores = config.default_cores;
  if (cores.quantity != nullptr) {
    r.cores =
        static_cast<int32_t>(HAMI_TRY(WholeNumber(cores, config.resource_core_name, what, 0, 100)));
  }
  return r;
}

std::string DescribePod(const kube::ObjectMeta& meta) {
  if (meta.name.empty()) return "Pod (no name)";
  if (meta.ns.empty()) return "Pod " + meta.name;
  return "Pod " + meta.ns + "/" + meta.name;
}

Result<PodRequest> ParsePodRequest(const kube::Pod& pod, const config::DeviceConfig& config) {
  PodRequest out;
  const std::string pod_name = DescribePod(pod.metadata);
  auto parse = [&](const std::vector<kube::Container>& list, std::string_view field,
                   std::vector<ContainerRequest>& into) -> Status {
    into.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string what = pod_name + ": container \"" + list[i].name + "\" (spec." +
                               std::string(field) + "[" + std::to_string(i) + "])";
      into.push_back(HAMI_TRY(ParseContainerRequest(list[i], config, what)));
    }
    return OkStatus();
  };
  HAMI_TRY(parse(pod.init_containers, "initContainers", out.init_containers));
  HAMI_TRY(parse(pod.containers, "containers", out.containers));
  return out;
}

}  // namespace hami::scheduler
