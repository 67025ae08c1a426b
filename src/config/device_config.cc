#include "config/device_config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "common/file.h"
#include "common/parse.h"
#include "common/quote.h"

namespace hami::config {
namespace {

constexpr size_t kMaxDeviceConfigBytes = 1 << 20;

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  Error Fail(std::string_view key, std::string_view what) const {
    std::string msg = "device config " + source_ + ": ";
    if (!key.empty()) msg += "nvidia." + std::string(key) + ": ";
    msg += what;
    return Error(ErrorCode::kInvalidArgument, std::move(msg));
  }

  Result<std::string> Scalar(const YAML::Node& node, std::string_view key) const {
    if (node.IsNull()) return std::string();
    if (!node.IsScalar()) return Fail(key, "expected a scalar value");
    return node.Scalar();
  }

  Result<int32_t> Int(const YAML::Node& node, std::string_view key, int64_t min,
                      int64_t max) const {
    const std::string text = HAMI_TRY(Scalar(node, key));
    auto parsed = ParseInt64(text, "value");
    if (!parsed.ok()) return Fail(key, QuoteInput(text) + " is not an integer");
    if (*parsed < min || *parsed > max) {
      return Fail(key, std::to_string(*parsed) + " is out of range " + std::to_string(min) + ".." +
                           std::to_string(max));
    }
    return static_cast<int32_t>(*parsed);
  }

  Result<double> Positive(const YAML::Node& node, std::string_view key) const {
    const std::string text = HAMI_TRY(Scalar(node, key));
    double value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
      return Fail(key, QuoteInput(text) + " is not a number");
    }
    if (value <= 0) return Fail(key, text + " must be greater than 0");
    return value;
  }

  Result<bool> Bool(const YAML::Node& node, std::string_view key) const {
    const std::string text = HAMI_TRY(Scalar(node, key));
    auto parsed = ParseBool(text, "value");
    if (!parsed.ok()) return Fail(key, QuoteInput(text) + " is not a boolean");
    return *parsed;
  }

  // A resource name: not empty, no whitespace or control characters.
  Result<std::string> Name(const YAML::Node& node, std::string_view key) const {
    std::string text = HAMI_TRY(Scalar(node, key));
    if (text.empty()) return Fail(key, "must not be empty");
    for (char c : text) {
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
        return Fail(key, QuoteInput(text) + " holds whitespace or a control character");
      }
    }
    return text;
  }

  Result<std::string> OneOf(const YAML::Node& node, std::string_view key,
                            std::initializer_list<std::string_view> allowed) const {
    std::string text = HAMI_TRY(Scalar(node, key));
    for (std::string_view a : allowed) {
      if (text == a) return text;
    }
    std::string list;
    for (std::string_view a : allowed) {
      if (!list.empty()) list += ", ";
      list += a;
    }
    return Fail(key, QuoteInput(text) + " is not one of " + list);
  }

 private:
  std::string source_;
};

using Setter = std::function<Status(const Reader&, const YAML::Node&, DeviceConfig&)>;

struct Key {
  std::string_view name;
  Setter set;
};

// Every key of `nvidia:` this build reads. Keys that HAMi's chart writes for features this
// project does not have (MIG profile lists) are accepted and ignored.
const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> k;
    auto name = [&k](std::string_view key, std::string DeviceConfig::*field) {
      k.push_back(
          {key, [key, field](const Reader& r, const YAML::Node& n, DeviceConfig& c) -> Status {
             c.*field = HAMI_TRY(r.Name(n, key));
             return OkStatus();
           }});
    };
    auto integer = [&k](std::string_view key, int32_t DeviceConfig::*field, int64_t min,
                        int64_t max) {
      k.push_back({key, [=](const Reader& r, const YAML::Node& n, DeviceConfig& c) -> Status {
                     c.*field = HAMI_TRY(r.Int(n, key, min, max));
                     return OkStatus();
                   }});
    };
    auto positive = [&k](std::string_view key, double DeviceConfig::*field) {
      k.push_back({key, [=](const Reader& r, const YAML::Node& n, DeviceConfig& c) -> Status {
                     c.*field = HAMI_TRY(r.Positive(n, key));
                     return OkStatus();
                   }});
    };
    auto boolean = [&k](std::string_view key, bool DeviceConfig::*field) {
      k.push_back({key, [=](const Reader& r, const YAML::Node& n, DeviceConfig& c) -> Status {
                     c.*field = HAMI_TRY(r.Bool(n, key));
                     return OkStatus();
                   }});
    };
    auto ignored = [&k](std::string_view key) {
      k.push_back({key, [](const Reader&, const YAML::Node&, DeviceConfig&) -> Status {
                     return OkStatus();
                   }});
    };
    constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
    name("resourceCountName", &DeviceConfig::resource_count_name);
    name("resourceMemoryName", &DeviceConfig::resource_memory_name);
    name("resourceMemoryPercentageName", &DeviceConfig::resource_memory_percentage_name);
    name("resourceCoreName", &DeviceConfig::resource_core_name);
    name("resourcePriorityName", &DeviceConfig::resource_priority_name);
    integer("defaultMemory", &DeviceConfig::default_memory_mib, 0, kInt32Max);
    integer("defaultCores", &DeviceConfig::default_cores, 0, 100);
    integer("defaultGPUNum", &DeviceConfig::default_gpu_num, 1, 1024);
    integer("memoryFactor", &DeviceConfig::memory_factor, 1, kInt32Max);
    boolean("overwriteEnv", &DeviceConfig::overwrite_env);
    integer("deviceSplitCount", &DeviceConfig::device_split_count, 1, 1024);
    positive("deviceMemoryScaling", &DeviceConfig::device_memory_scaling);
    positive("deviceCoreScaling", &DeviceConfig::device_core_scaling);
    integer("preConfiguredDeviceMemory", &DeviceConfig::pre_configured_device_memory, 0, kInt32Max);
    boolean("enableNumaTopology", &DeviceConfig::enable_numa_topology);
    boolean("advertiseMemoryAndCores", &DeviceConfig::advertise_memory_and_cores);
    boolean("disableCoreLimit", &DeviceConfig::disable_core_limit);
    boolean("disablecorelimit", &DeviceConfig::disable_core_limit);
    integer("libCudaLogLevel", &DeviceConfig::lib_cuda_log_level, 0, 4);
    k.push_back(
        {"gpuCorePolicy", [](const Reader& r, const YAML::Node& n, DeviceConfig& c) -> Status {
           c.gpu_core_policy =
               HAMI_TRY(r.OneOf(n, "gpuCorePolicy", {"default", "force", "disable"}));
           return OkStatus();
         }});
    k.push_back(
        {"limitDelivery", [](const Reader& r, const YAML::Node& n, DeviceConfig& c) -> Status {
           c.limit_delivery = HAMI_TRY(r.OneOf(n, "limitDelivery", {"file", "env"}));
           return OkStatus();
         }});
    k.push_back(
        {"runtimeClassName", [](const Reader& r, const YAML::Node& n, DeviceConfig& c) -> Status {
           c.runtime_class_name = HAMI_TRY(r.Scalar(n, "runtimeClassName"));
           return OkStatus();
         }});
    for (std::string_view key : {"migStrategy", "migstrategy"}) {
      k.push_back({key, [key](const Reader& r, const YAML::Node& n, DeviceConfig& c) -> Status {
                     c.mig_strategy = HAMI_TRY(r.OneOf(n, key, {"none", "single", "mixed"}));
                     return OkStatus();
                   }});
    }
    ignored("migProfileAllowlist");
    ignored("knownMigGeometries");
    return k;
  }();
  return keys;
}

}  // namespace

Result<DeviceConfig> ParseDeviceConfig(std::string_view text, std::string_view source) {
  const Reader reader(source);
  DeviceConfig config;
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    if (root.IsNull()) return config;
    if (!root.IsMap()) return reader.Fail("", "not a YAML mapping");
    const YAML::Node nvidia = root["nvidia"];
    if (!nvidia || nvidia.IsNull()) return config;
    if (!nvidia.IsMap()) return reader.Fail("", "nvidia: expected a mapping");
    for (const auto& entry : nvidia) {
      if (!entry.first.IsScalar()) return reader.Fail("", "nvidia: a key is not a scalar");
      const std::string key = entry.first.Scalar();
      const Key* found = nullptr;
      for (const Key& k : Keys()) {
        if (k.name == key) found = &k;
      }
      if (found == nullptr) {
        const bool plain = QuoteInput(key) == "'" + key + "'";
        return reader.Fail(plain ? key : QuoteInput(key), "unknown key");
      }
      HAMI_TRY(found->set(reader, entry.second, config));
    }
  } catch (const YAML::Exception& e) {
    return reader.Fail("", std::string("YAML: ") + e.what());
  }
  return config;
}

Result<DeviceConfig> LoadDeviceConfig(const std::string& path) {
  auto text = ReadFileToString(path, kMaxDeviceConfigBytes, Symlinks::kFollow);
  if (!text.ok()) return std::move(text).error().Context("device config");
  return ParseDeviceConfig(*text, path);
}

}  // namespace hami::config
