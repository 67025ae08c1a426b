#include "scheduler/quota.h"

#include <algorithm>
#include <map>

namespace hami::scheduler {
namespace {

void Tighten(const kube::QuantityMap& hard, const std::string& resource, const std::string& source,
             std::optional<int64_t>& limit, std::string& limit_source) {
  for (std::string_view prefix : {"limits.", "limit."}) {
    auto it = hard.find(std::string(prefix) + resource);
    if (it == hard.end()) continue;
    const int64_t v = std::max<int64_t>(it->second.Value(), 0);
    if (!limit || v < *limit) {
      limit = v;
      limit_source = source;
    }
  }
}

}  // namespace

NamespaceQuota QuotaFromResourceQuotas(const std::vector<kube::ResourceQuota>& quotas,
                                       const config::DeviceConfig& config) {
  NamespaceQuota out;
  for (const auto& q : quotas) {
    Tighten(q.spec_hard, config.resource_memory_name, q.metadata.name, out.memory_mib,
            out.memory_source);
    Tighten(q.spec_hard, config.resource_core_name, q.metadata.name, out.cores, out.cores_source);
  }
  return out;
}

QuotaAmounts AllocationAmounts(const kube::PodDevices& devices, size_t init_containers) {
  struct Share {
    int64_t init_peak_mem = 0, init_peak_cores = 0, mem = 0, cores = 0;
  };
  std::map<std::string_view, Share> per_device;
  for (size_t i = 0; i < devices.size(); ++i) {
    const bool init = i < init_containers;
    for (const auto& d : devices[i]) {
      Share& s = per_device[d.uuid];
      if (init) {
        s.init_peak_mem = std::max<int64_t>(s.init_peak_mem, d.mem_mib);
        s.init_peak_cores = std::max<int64_t>(s.init_peak_cores, d.cores);
      } else {
        s.mem += d.mem_mib;
        s.cores += d.cores;
      }
    }
  }
  QuotaAmounts out;
  for (const auto& [uuid, s] : per_device) {
    out.memory_mib += std::max(s.init_peak_mem, s.mem);
    out.cores += std::max(s.init_peak_cores, s.cores);
  }
  return out;
}

QuotaAmounts RequestAmounts(const PodRequest& request) {
  QuotaAmounts init, sum;
  for (const auto& c : request.init_containers) {
    init.memory_mib = std::max<int64_t>(init.memory_mib, int64_t{c.count} * c.mem_mib);
    init.cores = std::max<int64_t>(init.cores, int64_t{c.count} * c.cores);
  }
  for (const auto& c : request.containers) {
    sum.memory_mib += int64_t{c.count} * c.mem_mib;
    sum.cores += int64_t{c.count} * c.cores;
  }
  return {std::max(init.memory_mib, sum.memory_mib), std::max(init.cores, sum.cores)};
}

std::optional<std::string> QuotaExceeded(std::string_view ns, const NamespaceQuota& quota,
                                         const QuotaAmounts& used, const QuotaAmounts& request,
                                         const config::DeviceConfig& config) {
  auto check = [&](const std::optional<int64_t>& limit, int64_t in_use, int64_t wanted,
                   const std::string& resource, const std::string& source,
                   std::string_view unit) -> std::optional<std::string> {
    if (!limit || wanted <= 0 || in_use + wanted <= *limit) return std::nullopt;
    return "namespace " + std::string(ns) + ": limits." + resource + " of ResourceQuota " + source +
           " is " + std::to_string(*limit) + std::string(unit) + ", " + std::to_string(in_use) +
           " are used and the pod needs " + std::to_string(wanted);
  };
  if (auto r = check(quota.memory_mib, used.memory_mib, request.memory_mib,
                     config.resource_memory_name, quota.memory_source, " MiB")) {
    return r;
  }
  return check(quota.cores, used.cores, request.cores, config.resource_core_name,
               quota.cores_source, " percent");
}

}  // namespace hami::scheduler
