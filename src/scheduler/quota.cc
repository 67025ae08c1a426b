#include "scheduler/quota.h"

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

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

Error BadRecord(const std::string& field, const std::string& what) {
  std::string msg(kDraRequestAnnotation);
  msg += ": ";
  if (!field.empty()) msg += field + ": ";
  msg += what;
  return Error(ErrorCode::kInvalidArgument, std::move(msg));
}

// A whole number member of a record entry in [min, max].
Result<int64_t> RecordNumber(const nlohmann::json& entry, const char* key, const std::string& field,
                             int64_t min, int64_t max) {
  auto it = entry.find(key);
  const std::string name = field + "." + key;
  if (it == entry.end()) return BadRecord(name, "missing");
  if (!it->is_number_integer()) return BadRecord(name, "not a whole number");
  const bool in_range = it->is_number_unsigned()
                            ? it->get<uint64_t>() >= static_cast<uint64_t>(min) &&
                                  it->get<uint64_t>() <= static_cast<uint64_t>(max)
                            : it->get<int64_t>() >= min && it->get<int64_t>() <= max;
  if (!in_range) {
    return BadRecord(
        name, it->dump() + " is out of range " + std::to_string(min) + ".." + std::to_string(max));
  }
  return it->get<int64_t>();
}

Status DecodeRecordList(const nlohmann::json& record, const char* key,
                        std::vector<ContainerRequest>& into) {
  auto it = record.find(key);
  if (it == record.end()) return OkStatus();
  if (!it->is_array()) return BadRecord(key, "not a list");
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& e = (*it)[i];
    const std::string field = std::string(key) + "[" + std::to_string(i) + "]";
    if (!e.is_object()) return BadRecord(field, "not an object");
    for (const auto& [k, v] : e.items()) {
      if (k != "name" && k != "count" && k != "memory" && k != "cores") {
        return BadRecord(field, "unknown key \"" + k + "\"");
      }
    }
    ContainerRequest c;
    auto name = e.find("name");
    if (name == e.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return BadRecord(field + ".name", "missing or not a string");
    }
    c.name = name->get<std::string>();
    c.count = static_cast<int32_t>(HAMI_TRY(RecordNumber(e, "count", field, 1, 1024)));
    c.mem_mib = static_cast<int32_t>(
        HAMI_TRY(RecordNumber(e, "memory", field, 0, std::numeric_limits<int32_t>::max())));
    c.cores = static_cast<int32_t>(HAMI_TRY(RecordNumber(e, "cores", field, 0, 100)));
    into.push_back(std::move(c));
  }
  return OkStatus();
}

}  // namespace

std::string EncodeDraRequest(const PodRequest& request) {
  auto list = [](const std::vector<ContainerRequest>& containers) {
    nlohmann::json out = nlohmann::json::array();
    for (const ContainerRequest& c : containers) {
      if (!c.requests_gpus()) continue;
      out.push_back(
          {{"name", c.name}, {"count", c.count}, {"memory", c.mem_mib}, {"cores", c.cores}});
    }
    return out;
  };
  nlohmann::json record = {{"initContainers", list(request.init_containers)},
                           {"containers", list(request.containers)}};
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<PodRequest> DecodeDraRequest(std::string_view text) {
  const nlohmann::json record = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) return BadRecord("", "not JSON");
  if (!record.is_object()) return BadRecord("", "not a JSON object");
  for (const auto& [k, v] : record.items()) {
    if (k != "initContainers" && k != "containers")
      return BadRecord("", "unknown key \"" + k + "\"");
  }
  PodRequest out;
  HAMI_TRY(DecodeRecordList(record, "initContainers", out.init_containers));
  HAMI_TRY(DecodeRecordList(record, "containers", out.containers));
  return out;
}

Result<std::optional<QuotaAmounts>> DraRequestAmounts(const kube::Pod& pod) {
  auto label = pod.metadata.labels.find(kDraLabel);
  if (label == pod.metadata.labels.end() || label->second != "true") {
    return std::optional<QuotaAmounts>();
  }
  const std::string* record = pod.metadata.Annotation(kDraRequestAnnotation);
  if (record == nullptr || pod.IsTerminated()) return std::optional<QuotaAmounts>();
  PodRequest request = HAMI_TRY(DecodeDraRequest(*record));
  return std::optional<QuotaAmounts>(RequestAmounts(request));
}

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
