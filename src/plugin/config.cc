#include "plugin/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/file.h"
#include "common/quote.h"
#include "kube/annotations.h"

namespace hami::plugin {
namespace {

using nlohmann::json;

constexpr size_t kMaxNodeConfigBytes = 1 << 20;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// The value as an error shows it: JSON text, cut to 80 bytes.
std::string Shown(const json& v) {
  if (v.is_string()) return QuoteInput(v.get_ref<const std::string&>());
  std::string text = v.dump();
  if (text.size() > 80) text = text.substr(0, 80) + "...";
  return text;
}

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  Error Fail(std::string_view key, std::string_view what) const {
    std::string msg = "device plugin config " + source_ + ": ";
    if (!key.empty()) msg += std::string(key) + ": ";
    msg += what;
    return Error(ErrorCode::kInvalidArgument, std::move(msg));
  }

  Result<int64_t> Int(const json& v, const std::string& key, int64_t min, int64_t max,
                      bool allow_string = false) const {
    int64_t value = 0;
    if (v.is_number_integer()) {
      value = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX} ? INT64_MAX
                                                                                : v.get<int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (d != std::floor(d) || d < -9e18 || d > 9e18) {
        return Fail(key, Shown(v) + " is not an integer");
      }
      value = static_cast<int64_t>(d);
    } else if (allow_string && v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      errno = 0;
      char* end = nullptr;
      const long long parsed = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || end != s.c_str() + s.size() || errno != 0 || s[0] == ' ' || s[0] == '+') {
        return Fail(key, Shown(v) + " is not an integer");
      }
      value = parsed;
    } else {
      return Fail(key, Shown(v) + " is not an integer");
    }
    if (value < min) return Fail(key, std::to_string(value) + " must be >= " + std::to_string(min));
    if (value > max) return Fail(key, std::to_string(value) + " must be <= " + std::to_string(max));
    return value;
  }

  Result<double> Positive(const json& v, const std::string& key) const {
    if (!v.is_number()) return Fail(key, Shown(v) + " is not a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || d <= 0) return Fail(key, Shown(v) + " must be > 0");
    return d;
  }

  Result<bool> Bool(const json& v, const std::string& key) const {
    if (!v.is_boolean()) return Fail(key, Shown(v) + " is not a boolean (true or false)");
    return v.get<bool>();
  }

  Result<std::string> OneOf(const json& v, const std::string& key,
                            std::initializer_list<std::string_view> allowed) const {
    std::string list;
    for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    if (!v.is_string()) return Fail(key, Shown(v) + " is not a string (one of " + list + ")");
    const std::string& s = v.get_ref<const std::string&>();
    for (std::string_view a : allowed) {
      if (s == a) return s;
    }
    return Fail(key, Shown(v) + " is not one of " + list);
  }

  // Walks an object's members by lower-cased key: each must be one of `handlers`' keys and
  // given once.
  Status Members(
      const json& object, const std::string& prefix,
      const std::vector<
          std::pair<std::string_view, std::function<Status(const json&, const std::string&)>>>&
          handlers) const {
    std::vector<std::string> seen;
    for (auto it = object.begin(); it != object.end(); ++it) {
      const std::string key = Lower(it.key());
      const std::string path = prefix + it.key();
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        return Fail(path, "key given twice (keys are matched without regard to case)");
      }
      seen.push_back(key);
      bool known = false;
      for (const auto& [name, handler] : handlers) {
        if (name != key) continue;
        known = true;
        if (!it.value().is_null()) HAMI_TRY(handler(it.value(), path));
        break;
      }
      if (!known) return Fail(path, "unknown key");
    }
    return OkStatus();
  }

 private:
  std::string source_;
};

Result<NodeConfigEntry> ParseEntry(const Reader& r, const json& v, const std::string& at) {
  if (!v.is_object()) return r.Fail(at, Shown(v) + " is not an object");
  NodeConfigEntry e;
  bool has_name = false;
  using Handler = std::function<Status(const json&, const std::string&)>;
  std::vector<std::pair<std::string_view, Handler>> h;
  h.emplace_back("name", [&](const json& x, const std::string& k) -> Status {
    if (!x.is_string() || x.get_ref<const std::string&>().empty()) {
      return r.Fail(k, Shown(x) + " must be a non-empty string");
    }
    e.name = x.get<std::string>();
    has_name = true;
    return OkStatus();
  });
  h.emplace_back("devicesplitcount", [&](const json& x, const std::string& k) -> Status {
    e.device_split_count = static_cast<int32_t>(HAMI_TRY(r.Int(x, k, 1, 1024)));
    return OkStatus();
  });
  h.emplace_back("devicememoryscaling", [&](const json& x, const std::string& k) -> Status {
    e.device_memory_scaling = HAMI_TRY(r.Positive(x, k));
    return OkStatus();
  });
  h.emplace_back("devicecorescaling", [&](const json& x, const std::string& k) -> Status {
    e.device_core_scaling = HAMI_TRY(r.Positive(x, k));
    return OkStatus();
  });
  h.emplace_back("preconfigureddevicememory", [&](const json& x, const std::string& k) -> Status {
    e.pre_configured_memory =
        static_cast<int32_t>(HAMI_TRY(r.Int(x, k, 0, std::numeric_limits<int32_t>::max())));
    return OkStatus();
  });
  h.emplace_back("libcudaloglevel", [&](const json& x, const std::string& k) -> Status {
    e.lib_cuda_log_level = static_cast<int32_t>(HAMI_TRY(r.Int(x, k, 0, 4, true)));
    return OkStatus();
  });
  h.emplace_back("enablenumatopology", [&](const json& x, const std::string& k) -> Status {
    e.enable_numa_topology = HAMI_TRY(r.Bool(x, k));
    return OkStatus();
  });
  h.emplace_back("operatingmode", [&](const json& x, const std::string& k) -> Status {
    const std::string mode = HAMI_TRY(r.OneOf(x, k, {"hami-core", "mig"}));
    e.operating_mode = mode == "mig" ? OperatingMode::kMig : OperatingMode::kHamiCore;
    return OkStatus();
  });
  h.emplace_back("migstrategy", [&](const json& x, const std::string& k) -> Status {
    e.mig_strategy = HAMI_TRY(r.OneOf(x, k, {"none", "single", "mixed"}));
    return OkStatus();
  });
  h.emplace_back("enablegetpreferredallocation",
                 [&](const json& x, const std::string& k) -> Status {
                   e.enable_preferred = HAMI_TRY(r.Bool(x, k));
                   return OkStatus();
                 });
  h.emplace_back("limitdelivery", [&](const json& x, const std::string& k) -> Status {
    const std::string d = HAMI_TRY(r.OneOf(x, k, {"file", "env"}));
    e.limit_delivery = d == "env" ? LimitDelivery::kEnv : LimitDelivery::kFile;
    return OkStatus();
  });
  h.emplace_back("advertisememoryandcores", [&](const json& x, const std::string& k) -> Status {
    e.advertise_memory_and_cores = HAMI_TRY(r.Bool(x, k));
    return OkStatus();
  });
  h.emplace_back("filterdevices", [&](const json& x, const std::string& k) -> Status {
    if (!x.is_object()) return r.Fail(k, Shown(x) + " is not an object");
    std::vector<std::pair<std::string_view, Handler>> f;
    f.emplace_back("uuid", [&](const json& list, const std::string& lk) -> Status {
      if (!list.is_array()) return r.Fail(lk, Shown(list) + " is not an array");
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string ik = lk + "[" + std::to_string(i) + "]";
        if (!list[i].is_string() || list[i].get_ref<const std::string&>().empty()) {
          return r.Fail(ik, Shown(list[i]) + " must be a non-empty string");
        }
        e.filter.uuids.push_back(list[i].get<std::string>());
      }
      return OkStatus();
    });
    f.emplace_back("index", [&](const json& list, const std::string& lk) -> Status {
      if (!list.is_array()) return r.Fail(lk, Shown(list) + " is not an array");
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string ik = lk + "[" + std::to_string(i) + "]";
        e.filter.indices.push_back(static_cast<int32_t>(HAMI_TRY(r.Int(list[i], ik, 0, 1023))));
      }
      return OkStatus();
    });
    return r.Members(x, k + ".", f);
  });
  HAMI_TRY(r.Members(v, at + ".", h));
  if (!has_name) return r.Fail(at + ".name", "missing (every entry names its node)");
  return e;
}

}  // namespace

std::string_view LimitDeliveryName(LimitDelivery delivery) {
  return delivery == LimitDelivery::kEnv ? "env" : "file";
}

Result<LimitDelivery> ParseLimitDelivery(std::string_view value, std::string_view what) {
  if (value == "file") return LimitDelivery::kFile;
  if (value == "env") return LimitDelivery::kEnv;
  return Error(ErrorCode::kInvalidArgument,
               std::string(what) + ": " + QuoteInput(value) + " is not one of file, env");
}

std::string_view OperatingModeName(OperatingMode mode) {
  return mode == OperatingMode::kMig ? "mig" : "hami-core";
}

bool DeviceFilter::Excludes(std::string_view uuid, int index) const {
  if (!uuid.empty() && std::find(uuids.begin(), uuids.end(), uuid) != uuids.end()) return true;
  return index >= 0 && std::find(indices.begin(), indices.end(), index) != indices.end();
}

Result<std::vector<NodeConfigEntry>> ParseNodeConfig(std::string_view text,
                                                     std::string_view source) {
  const Reader r(source);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    return r.Fail("", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) return r.Fail("", "not a JSON object");
  std::vector<NodeConfigEntry> entries;
  using Handler = std::function<Status(const json&, const std::string&)>;
  std::vector<std::pair<std::string_view, Handler>> h;
  h.emplace_back("nodeconfig", [&](const json& list, const std::string& k) -> Status {
    if (!list.is_array()) return r.Fail(k, Shown(list) + " is not an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = k + "[" + std::to_string(i) + "]";
      NodeConfigEntry e = HAMI_TRY(ParseEntry(r, list[i], at));
      for (size_t j = 0; j < entries.size(); ++j) {
        if (entries[j].name == e.name) {
          return r.Fail(at + ".name", QuoteInput(e.name) + " is also the name of " + k + "[" +
                                          std::to_string(j) + "]");
        }
      }
      entries.push_back(std::move(e));
    }
    return OkStatus();
  });
  HAMI_TRY(r.Members(root, "", h));
  return entries;
}

Result<PluginConfig> ResolvePluginConfig(const config::DeviceConfig& global,
                                         const std::vector<NodeConfigEntry>& nodes,
                                         std::string_view node_name) {
  PluginConfig c;
  c.node_name = std::string(node_name);
  c.device = global;
  c.limit_delivery = HAMI_TRY(ParseLimitDelivery(global.limit_delivery, "nvidia.limitDelivery"));
  for (const NodeConfigEntry& e : nodes) {
    if (e.name != node_name) continue;
    c.node_entry_found = true;
    if (e.device_split_count) c.device.device_split_count = *e.device_split_count;
    if (e.device_memory_scaling) c.device.device_memory_scaling = *e.device_memory_scaling;
    if (e.device_core_scaling) c.device.device_core_scaling = *e.device_core_scaling;
    if (e.pre_configured_memory) c.device.pre_configured_device_memory = *e.pre_configured_memory;
    if (e.lib_cuda_log_level) c.device.lib_cuda_log_level = *e.lib_cuda_log_level;
    if (e.enable_numa_topology) c.device.enable_numa_topology = *e.enable_numa_topology;
    if (e.mig_strategy) c.device.mig_strategy = *e.mig_strategy;
    if (e.advertise_memory_and_cores) {
      c.device.advertise_memory_and_cores = *e.advertise_memory_and_cores;
    }
    if (e.operating_mode) c.operating_mode = *e.operating_mode;
    if (e.enable_preferred) c.enable_preferred_allocation = *e.enable_preferred;
    if (e.limit_delivery) {
      c.limit_delivery = *e.limit_delivery;
      c.device.limit_delivery = std::string(LimitDeliveryName(*e.limit_delivery));
    }
    c.filter = e.filter;
  }
  return c;
}

Result<std::string> ResolveNodeName(std::string_view flag, const char* env) {
  if (!flag.empty()) return std::string(flag);
  if (env != nullptr && *env != '\0') return std::string(env);
  return Error(ErrorCode::kInvalidArgument, "node name: neither --node-name nor NODE_NAME is set");
}

Result<PluginConfig> LoadPluginConfig(const LoadOptions& options) {
  config::DeviceConfig global;
  if (!options.device_config_path.empty()) {
    global = HAMI_TRY(config::LoadDeviceConfig(options.device_config_path));
  }
  std::vector<NodeConfigEntry> nodes;
  if (!options.node_config_path.empty()) {
    auto text = ReadFileToString(options.node_config_path, kMaxNodeConfigBytes, Symlinks::kFollow);
    if (text.ok()) {
      nodes = HAMI_TRY(ParseNodeConfig(*text, options.node_config_path));
    } else if (text.error().sys_errno() != ENOENT) {
      return std::move(text).error().Context("device plugin config " + options.node_config_path);
    }
  }
  return ResolvePluginConfig(global, nodes, options.node_name);
}

Result<LimitDelivery> ResolveLimitDelivery(const PluginConfig& config,
                                           const std::string* annotation) {
  if (annotation == nullptr) return config.limit_delivery;
  return ParseLimitDelivery(*annotation, kube::kLimitDeliveryAnnotation);
}

}  // namespace hami::plugin
