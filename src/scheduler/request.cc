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

constexpr int64_t kBytesPerMiB = int64_t{1} << 20;

// The quantity as a plain decimal when it has a fraction ("1.5" for 1500m), for messages.
std::string PlainDecimal(const kube::Quantity& q) {
  const int64_t milli = q.MilliValue();
  std::string whole = std::to_string(milli / 1000);
  if (milli < 0 && milli / 1000 == 0) whole = "-0";
  std::string fraction = std::to_string((milli < 0 ? -milli : milli) % 1000);
  fraction.insert(0, 3 - fraction.size(), '0');
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  return fraction.empty() ? whole : whole + "." + fraction;
}

// The letters after the digits of a decimal or binary quantity's canonical text: "Mi" of
// "500Mi", "" of "3000".
std::string_view SuffixOf(std::string_view canonical) {
  size_t i = canonical.size();
  while (i > 0 && (canonical[i - 1] < '0' || canonical[i - 1] > '9')) --i;
  return canonical.substr(i);
}

// The memory resource: a plain, non-negative integer count of MiB. The API server writes a
// plain count that ends in 000 with the suffix k ("3000" reaches the webhook and the
// scheduler as "3k"), so k counts as plain; every other suffix (Ki..Ei, M..E, an exponent)
// is refused with the count of MiB the quantity is as bytes, rounded up.
Result<int64_t> MemoryMib(const Found& f, std::string_view name, std::string_view what) {
  const kube::Quantity& q = *f.quantity;
  const std::string text = q.ToString();
  const std::string unit = MemoryUnitNote(name);
  auto fail = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, std::string(what) + ": resources." + f.section + "." +
                                                  std::string(name) + ": " + text + " " + why);
  };
  if (q.Sign() < 0) return fail("is negative: " + unit);
  if (q.MilliValue() % 1000 != 0) {
    return fail("(" + PlainDecimal(q) + ") is not a whole number: " + unit);
  }
  const std::string suffix(SuffixOf(text));
  const bool plain =
      q.format() == kube::QuantityFormat::kDecimalSI && (suffix.empty() || suffix == "k");
  const int64_t v = q.Value();
  if (!plain) {
    const int64_t mib = v / kBytesPerMiB + (v % kBytesPerMiB != 0 ? 1 : 0);
    const std::string written = q.format() == kube::QuantityFormat::kDecimalExponent
                                    ? "is written with an exponent"
                                    : "has a unit suffix (" + suffix + ")";
    return fail(written + ", but " + std::string(name) + " is a plain integer count of MiB (" +
                text + " would ask for " + std::to_string(v) + " MiB): for " + text +
                " of memory write " + std::to_string(mib) +
                (v % kBytesPerMiB != 0 ? " (rounded up)" : ""));
  }
  if (v > kInt32Max) {
    return fail("is out of range 0.." + std::to_string(kInt32Max) + ": " + unit);
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
    mem_mib = HAMI_TRY(MemoryMib(mem, config.resource_memory_name, what));
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

std::string MemoryUnitNote(std::string_view memory_resource) {
  return std::string(memory_resource) +
         " is a plain integer count of MiB (write 3000 for 3000 MiB)";
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
