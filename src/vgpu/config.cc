#include "vgpu/config.h"

#include <fcntl.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "common/file.h"
#include "common/parse.h"

namespace hami::vgpu {

namespace {

using region::layout::CorePolicy;

struct Context {
  Config* config;
  // Per-device values beat all-devices ones: remember which devices got their own.
  std::array<bool, kMaxDevices> own_memory{};
  std::array<bool, kMaxDevices> own_sm{};
};

Error Bad(std::string_view name, std::string_view value, std::string_view why) {
  return Error(ErrorCode::kInvalidArgument,
               std::string(name) + "='" + std::string(value) + "': " + std::string(why));
}

Result<uint32_t> ParsePercent(std::string_view name, std::string_view v) {
  uint64_t p = HAMI_TRY(ParseUint64(v, name));
  if (p > 100) return Bad(name, v, "must be a percentage from 0 to 100");
  return uint32_t(p);
}

std::string Lower(std::string_view v) {
  std::string s(v);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An option: applies its value to the config. `index` is the device for per-device ones.
struct Option {
  OptionInfo info;
  bool per_device;
  Status (*apply)(Context& ctx, std::string_view name, int index, std::string_view value);
};

const Option kOptions[] = {
    {{"CUDA_DEVICE_MEMORY_LIMIT", "0 (unlimited)",
      "memory limit of every device: bytes, or k/m/g/t units (binary; 3000m is 3000 MiB)"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       uint64_t bytes = HAMI_TRY(ParseSize(v, name));
       for (int d = 0; d < kMaxDevices; ++d) {
         if (!c.own_memory[size_t(d)]) c.config->memory_limit[size_t(d)] = bytes;
       }
       return OkStatus();
     }},
    {{"CUDA_DEVICE_MEMORY_LIMIT_<i>", "CUDA_DEVICE_MEMORY_LIMIT",
      "memory limit of the device with CUDA ordinal i (as the container sees it)"},
     true,
     [](Context& c, std::string_view name, int i, std::string_view v) -> Status {
       c.config->memory_limit[size_t(i)] = HAMI_TRY(ParseSize(v, name));
       c.own_memory[size_t(i)] = true;
       return OkStatus();
     }},
    {{"CUDA_DEVICE_SM_LIMIT", "0 (unlimited)",
      "SM (compute) share of every device in percent; 0 or 100 = unlimited"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       uint32_t p = HAMI_TRY(ParsePercent(name, v));
       for (int d = 0; d < kMaxDevices; ++d) {
         if (!c.own_sm[size_t(d)]) c.config->sm_limit[size_t(d)] = p;
       }
       return OkStatus();
     }},
    {{"CUDA_DEVICE_SM_LIMIT_<i>", "CUDA_DEVICE_SM_LIMIT", "SM share of CUDA device i in percent"},
     true,
     [](Context& c, std::string_view name, int i, std::string_view v) -> Status {
       c.config->sm_limit[size_t(i)] = HAMI_TRY(ParsePercent(name, v));
       c.own_sm[size_t(i)] = true;
       return OkStatus();
     }},
    {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", kDefaultSharedCache,
      "the shared region every process of the container maps (absolute path)"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       if (v.empty() || v[0] != '/') return Bad(name, v, "must be an absolute path");
       c.config->shared_cache = std::string(v);
       return OkStatus();
     }},
    {{"GPU_CORE_UTILIZATION_POLICY", "default",
      "default (limit while the region's utilization switch is on), force, disable"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       std::string s = Lower(v);
       if (s == "default") {
         c.config->core_policy = CorePolicy::kDefault;
       } else if (s == "force") {
         c.config->core_policy = CorePolicy::kForce;
       } else if (s == "disable") {
         c.config->core_policy = CorePolicy::kDisable;
       } else {
         return Bad(name, v, "expected default, force or disable");
       }
       return OkStatus();
     }},
    {{"CUDA_TASK_PRIORITY", "1", "0 high, 1 low: high-priority work may pause low-priority work"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       if (v != "0" && v != "1") return Bad(name, v, "expected 0 (high) or 1 (low)");
       c.config->priority = v == "0" ? 0 : 1;
       return OkStatus();
     }},
    {{"LIBCUDA_LOG_LEVEL", "2", "0 off, 1 errors, 2 warnings, 3 info, 4 debug"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       uint64_t level = HAMI_TRY(ParseUint64(v, name));
       if (level > 4) return Bad(name, v, "must be from 0 to 4");
       c.config->log_level = int(level);
       return OkStatus();
     }},
    {{"CUDA_OVERSUBSCRIBE", "false", "true: allow allocations beyond the limit into host memory"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       c.config->oversubscribe = HAMI_TRY(ParseBool(v, name));
       return OkStatus();
     }},
    {{"LIBVGPU_HOSTPID_BROKER", "unset", "exactly 1: ask the node's host-PID broker"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       c.config->hostpid_broker = v == "1";
       if (v != "1" && v != "0" && !v.empty()) {
         return Bad(name, v, "only the exact value 1 enables the broker; treated as off");
       }
       return OkStatus();
     }},
    {{"LIBVGPU_HOST_PROCFS", "unset", "root of a procfs mounted from the host's PID namespace"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       if (v.empty() || v[0] != '/') return Bad(name, v, "must be an absolute path");
       c.config->host_procfs = std::string(v);
       return OkStatus();
     }},
    {{"HAMI_IDENTITY_TIERS", "broker,procfs,namespace,probe",
      "how the host PID is learned: tiers tried in this order (a subset, or none)"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       std::string s = Lower(v);
       if (s == "none") {
         c.config->identity_tiers = 0;
         return OkStatus();
       }
       uint8_t tiers = 0;
       size_t pos = 0;
       while (pos <= s.size()) {
         size_t end = s.find(',', pos);
         if (end == std::string::npos) end = s.size();
         std::string_view t = std::string_view(s).substr(pos, end - pos);
         if (t == "broker") {
           tiers |= 1u << unsigned(region::layout::IdentityTier::kBroker);
         } else if (t == "procfs") {
           tiers |= 1u << unsigned(region::layout::IdentityTier::kProcfs);
         } else if (t == "namespace") {
           tiers |= 1u << unsigned(region::layout::IdentityTier::kNamespace);
         } else if (t == "probe") {
           tiers |= 1u << unsigned(region::layout::IdentityTier::kProbe);
         } else {
           return Bad(name, v,
                      "expected none or a comma-separated list of broker, procfs, namespace, "
                      "probe");
         }
         pos = end + 1;
       }
       c.config->identity_tiers = tiers;
       return OkStatus();
     }},
    {{"HAMI_IDENTITY_PROBE_LOCK", kDefaultProbeLock,
      "the node-wide lock file that serializes NVML identity probes (absolute path)"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       if (v.empty() || v[0] != '/') return Bad(name, v, "must be an absolute path");
       c.config->probe_lock = std::string(v);
       return OkStatus();
     }},
    {{"HAMI_IDENTITY_PROBE_WAIT_MS", "10000",
      "longest wait for the probe lock, in milliseconds (then retried later)"},
     false,
     [](Context& c, std::string_view name, int, std::string_view v) -> Status {
       uint64_t ms = HAMI_TRY(ParseUint64(v, name));
       if (ms > 600000) return Bad(name, v, "must be at most 600000 (10 minutes)");
       c.config->probe_wait_ms = uint32_t(ms);
       return OkStatus();
     }},
    {{"HAMI_LIMITS_FORMAT", kLimitsFormat, "format of the limits file (1)"},
     false,
     [](Context&, std::string_view name, int, std::string_view v) -> Status {
       if (v != kLimitsFormat) {
         return Bad(name, v, "unknown limits-file format; reading it as format 1");
       }
       return OkStatus();
     }},
    {{"CUDA_VISIBLE_DEVICES", "all",
      "devices the process sees, by index or UUID (GPU-...), in any order"},
     false,
     [](Context& c, std::string_view, int, std::string_view v) -> Status {
       c.config->visible_devices = std::string(v);
       return OkStatus();
     }},
};

// Finds the option for a variable name; *index gets the device of a per-device one.
const Option* Find(std::string_view name, int* index) {
  for (const Option& o : kOptions) {
    std::string_view n = o.info.name;
    if (!o.per_device) {
      if (n == name) return &o;
      continue;
    }
    std::string_view prefix = n.substr(0, n.size() - 3);  // drop "<i>"
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) continue;
    std::string_view digits = name.substr(prefix.size());
    // Only the ordinal in plain decimal ("_1", never "_01"): the names the environment is read by.
    if (digits.size() > 2 || digits.find_first_not_of("0123456789") != std::string_view::npos ||
        (digits.size() > 1 && digits[0] == '0')) {
      continue;
    }
    int i = std::stoi(std::string(digits));
    if (i >= kMaxDevices) continue;
    *index = i;
    return &o;
  }
  return nullptr;
}

bool ValidKey(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

std::string IdentityTiersText(uint8_t tiers) {
  static constexpr const char* kNames[] = {"broker", "procfs", "namespace", "probe"};
  std::string text;
  for (unsigned t = 0; t < 4; ++t) {
    if ((tiers & (1u << t)) == 0) continue;
    if (!text.empty()) text += ",";
    text += kNames[t];
  }
  return text.empty() ? "none" : text;
}

const char* SourceName(Source source) {
  switch (source) {
    case Source::kDefault:
      return "default";
    case Source::kEnvironment:
      return "environment";
    case Source::kLimitsFile:
      return "limits file";
  }
  return "?";
}

std::span<const OptionInfo> OptionTable() {
  static const auto table = [] {
    std::array<OptionInfo, std::size(kOptions)> t{};
    for (size_t i = 0; i < std::size(kOptions); ++i) t[i] = kOptions[i].info;
    return t;
  }();
  return table;
}

LimitsFile ParseLimitsFile(std::string_view text, std::string_view path) {
  LimitsFile out;
  out.present = true;
  out.path = std::string(path);
  int number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? text.npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    auto problem = [&](const std::string& why) {
      std::string shown(line.substr(0, std::min<size_t>(80, line.find('\0'))));
      out.problems.push_back(std::string(path) + " line " + std::to_string(number) + " '" + shown +
                             "': " + why + "; skipped");
    };
    // A value is used as a C string: a NUL would silently cut it short.
    if (line.find('\0') != std::string_view::npos) {
      problem("contains a NUL byte");
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      problem("not KEY=VALUE");
      continue;
    }
    std::string_view key = line.substr(0, eq);
    if (!ValidKey(key)) {
      problem("the key is not a variable name");
      continue;
    }
    out.entries.emplace_back(std::string(key), std::string(line.substr(eq + 1)));
  }
  return out;
}

LimitsFile ReadLimitsFile(const std::string& path) {
  auto text = ReadFileToString(path, 1 << 16);
  if (!text.ok() || text->empty()) {
    LimitsFile absent;
    absent.path = path;
    if (!text.ok() && text.error().sys_errno() != ENOENT) {
      absent.problems.push_back(text.error().message());
    }
    return absent;
  }
  return ParseLimitsFile(*text, path);
}

Resolution ResolveConfig(const LimitsFile& file, const GetEnvFn& getenv_fn) {
  Resolution r;
  Context ctx{&r.config};
  // Every candidate value of each variable, best first: the file's, then the environment's.
  std::map<std::string, std::vector<std::pair<std::string, Source>>> candidates;
  for (const Option& o : kOptions) {
    if (o.per_device) {
      std::string_view n = o.info.name;
      std::string prefix(n.substr(0, n.size() - 3));
      for (int i = 0; i < kMaxDevices; ++i) {
        std::string name = prefix + std::to_string(i);
        if (const char* v = getenv_fn(name.c_str())) {
          candidates[name].push_back({v, Source::kEnvironment});
        }
      }
    } else if (const char* v = getenv_fn(o.info.name)) {
      candidates[o.info.name].push_back({v, Source::kEnvironment});
    }
  }
  if (!file.present) {
    r.notes.push_back(file.path + " absent: limits come from the environment");
  }
  for (const std::string& p : file.problems) r.problems.push_back(p);
  bool format_seen = false;
  for (const auto& [key, value] : file.entries) {
    int index = 0;
    if (Find(key, &index) == nullptr) {
      r.notes.push_back(file.path + ": " + key + " is not a variable libvgpu reads; ignored");
      continue;
    }
    format_seen |= key == "HAMI_LIMITS_FORMAT";
    auto& list = candidates[key];
    // A later line for the same key replaces an earlier one.
    if (!list.empty() && list.front().second == Source::kLimitsFile) list.erase(list.begin());
    list.insert(list.begin(), {value, Source::kLimitsFile});
  }
  if (file.present && !format_seen) {
    r.notes.push_back(file.path + " has no HAMI_LIMITS_FORMAT line; reading it as format 1");
  }
  // All-devices options first, so per-device ones (applied after) win. A malformed value is
  // skipped in favour of the next candidate.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [name, list] : candidates) {
      int index = 0;
      const Option* o = Find(name, &index);
      if (o == nullptr || o->per_device != (pass == 1)) continue;
      for (const auto& [value, source] : list) {
        Status st = o->apply(ctx, name, index, value);
        if (st.ok()) {
          r.config.settings.push_back({name, value, source});
          break;
        }
        std::string where = source == Source::kLimitsFile ? " (in " + file.path + ")" : "";
        r.problems.push_back(st.error().message() + where);
      }
    }
  }
  return r;
}

}  // namespace hami::vgpu
