#include "vgpu/config.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "common/parse.h"
#include "region/region.h"

namespace hami::vgpu {

namespace {

using region::layout::CorePolicy;
using region::layout::IdentityTier;

Error Bad(std::string_view name, std::string_view value, std::string_view why) {
  return Error(ErrorCode::kInvalidArgument,
               std::string(name) + "='" + std::string(value) + "': " + std::string(why));
}

std::string Lower(std::string_view v) {
  std::string s(v);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// ---- The parsers of vgpu/options.def: Parse(name, text) -> Result<T>, Text(value). -------

// The limits. `kClosed` is what a device gets when its value cannot be read, and
// `kConsequence` says so in the problem.
struct MemoryLimit {
  static constexpr uint64_t kClosed = region::layout::kZeroBudgetBytes;
  static constexpr const char* kConsequence = "no allocation is admitted (a zero memory budget)";
  static Result<uint64_t> Parse(std::string_view name, std::string_view v) {
    return ParseSize(v, name);
  }
  static OptionValue Value(uint64_t bytes) {
    std::string text = bytes == 0 ? "0 (unlimited)"
                       : bytes == kClosed
                           ? "a zero budget (1 byte: nothing fits)"
                           : FormatBytes(bytes) + ", " + std::to_string(bytes) + " bytes";
    return {std::move(text), "bytes", bytes};
  }
};

struct SmLimit {
  static constexpr uint32_t kClosed = region::layout::kStrictestSmPercent;
  static constexpr const char* kConsequence = "the compute share is the strictest, 1%";
  static Result<uint32_t> Parse(std::string_view name, std::string_view v) {
    uint64_t p = HAMI_TRY(ParseUint64(v, name));
    if (p > 100) return Bad(name, v, "must be a percentage from 0 to 100");
    return uint32_t(p);
  }
  static OptionValue Value(uint32_t percent) {
    std::string text = std::to_string(percent);
    text += percent == 0 || percent == 100 ? " (unlimited)" : "%";
    return {text, "percent", percent};
  }
};

struct AbsolutePath {
  static Result<std::string> Parse(std::string_view name, std::string_view v) {
    if (v.empty() || v[0] != '/') return Bad(name, v, "must be an absolute path");
    return std::string(v);
  }
  static OptionValue Value(const std::string& path) { return {path}; }
};

// An absolute path, or unset (empty) for "not used".
struct OptionalAbsolutePath {
  static Result<std::string> Parse(std::string_view name, std::string_view v) {
    return AbsolutePath::Parse(name, v);
  }
  static OptionValue Value(const std::string& path) {
    return {path.empty() ? "unset (not used)" : path};
  }
};

struct CorePolicyName {
  struct Named {
    CorePolicy policy;
    const char* name;
  };
  static constexpr Named kNames[] = {{CorePolicy::kDefault, "default"},
                                     {CorePolicy::kForce, "force"},
                                     {CorePolicy::kDisable, "disable"}};
  static Result<CorePolicy> Parse(std::string_view name, std::string_view v) {
    const std::string s = Lower(v);
    for (const auto& n : kNames) {
      if (s == n.name) return n.policy;
    }
    return Bad(name, v, "expected default, force or disable");
  }
  static OptionValue Value(CorePolicy policy) {
    for (const auto& n : kNames) {
      if (n.policy == policy) return {n.name};
    }
    return {"?"};
  }
};

struct UnaccountedPolicyName {
  static Result<UnaccountedPolicy> Parse(std::string_view name, std::string_view v) {
    const std::string s = Lower(v);
    if (s == "report") return UnaccountedPolicy::kReport;
    if (s == "suspend") return UnaccountedPolicy::kSuspend;
    return Bad(name, v, "expected report or suspend");
  }
  static OptionValue Value(UnaccountedPolicy policy) {
    return {policy == UnaccountedPolicy::kSuspend ? "suspend" : "report"};
  }
};

// A size that is not a limit: bytes, or k/m/g/t units.
struct Bytes {
  static Result<uint64_t> Parse(std::string_view name, std::string_view v) {
    return ParseSize(v, name);
  }
  static OptionValue Value(uint64_t bytes) {
    return {FormatBytes(bytes) + ", " + std::to_string(bytes) + " bytes", "bytes", bytes};
  }
};

struct TaskPriority {
  static Result<int32_t> Parse(std::string_view name, std::string_view v) {
    if (v != "0" && v != "1") return Bad(name, v, "expected 0 (high) or 1 (low)");
    return v == "0" ? 0 : 1;
  }
  static OptionValue Value(int32_t priority) { return {priority == 0 ? "0 (high)" : "1 (low)"}; }
};

struct LogLevelNumber {
  static constexpr const char* kNames[] = {"off", "errors", "errors and warnings", "info", "debug"};
  static Result<int> Parse(std::string_view name, std::string_view v) {
    uint64_t level = HAMI_TRY(ParseUint64(v, name));
    if (level > 4) return Bad(name, v, "must be from 0 to 4");
    return int(level);
  }
  static OptionValue Value(int level) {
    return {std::to_string(level) + " (" + (level >= 0 && level <= 4 ? kNames[level] : "?") + ")"};
  }
};

struct Boolean {
  static Result<bool> Parse(std::string_view name, std::string_view v) {
    return ParseBool(v, name);
  }
  static OptionValue Value(bool on) { return {on ? "true" : "false"}; }
};

// LIBVGPU_HOSTPID_BROKER: only the exact string "1" enables; "0" and "" are off without
// comment; anything else is reported (and so off).
struct ExactlyOne {
  static Result<bool> Parse(std::string_view name, std::string_view v) {
    if (v == "1") return true;
    if (v == "0" || v.empty()) return false;
    return Bad(name, v, "only the exact value 1 enables the broker; treated as off");
  }
  static OptionValue Value(bool on) { return {on ? "1 (on)" : "off"}; }
};

// HAMI_IDENTITY_TIERS: "none", or a comma-separated subset of the tier names (the region's
// IdentityTierName, any case), tried always in the tiers' own order.
struct IdentityTiers {
  static Result<uint8_t> Parse(std::string_view name, std::string_view v) {
    const std::string s = Lower(v);
    if (s == "none") return uint8_t{0};
    uint8_t tiers = 0;
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t end = std::min(s.find(',', pos), s.size());
      std::string_view t = std::string_view(s).substr(pos, end - pos);
      bool known = false;
      for (int i = 0; i < region::layout::kIdentityTiers; ++i) {
        if (t == region::IdentityTierName(IdentityTier(i))) {
          tiers |= uint8_t(1u << unsigned(i));
          known = true;
        }
      }
      if (!known) {
        std::string list;
        for (int i = 0; i < region::layout::kIdentityTiers; ++i) {
          list += std::string(i == 0 ? "" : ", ") + region::IdentityTierName(IdentityTier(i));
        }
        return Bad(name, v, "expected none or a comma-separated list of " + list);
      }
      pos = end + 1;
    }
    return tiers;
  }
  static OptionValue Value(uint8_t tiers) { return {IdentityTiersText(tiers)}; }
};

struct WaitMs {
  static Result<uint32_t> Parse(std::string_view name, std::string_view v) {
    uint64_t ms = HAMI_TRY(ParseUint64(v, name));
    if (ms > 600000) return Bad(name, v, "must be at most 600000 (10 minutes)");
    return uint32_t(ms);
  }
  static OptionValue Value(uint32_t ms) { return {std::to_string(ms) + " ms"}; }
};

struct LimitsFormat {
  static Result<uint32_t> Parse(std::string_view name, std::string_view v) {
    if (v != limits::kFormat) {
      return Bad(name, v, "unknown limits-file format; reading it as format 1");
    }
    return uint32_t{1};
  }
  static OptionValue Value(uint32_t format) { return {std::to_string(format)}; }
};

// CUDA_VISIBLE_DEVICES, kept as given: set but empty ("no device") differs from unset.
struct VisibleDevicesList {
  static Result<std::optional<std::string>> Parse(std::string_view, std::string_view v) {
    return std::optional<std::string>(std::string(v));
  }
  static OptionValue Value(const std::optional<std::string>& v) {
    return {!v ? "all devices" : v->empty() ? "no device" : *v};
  }
};

// ---- The rows, expanded from vgpu/options.def. -------------------------------------------

struct Option {
  OptionScope scope;
  const char* name;
  const char* doc;
  // Parses `value` of the variable `name` into the config (`device`: a per-device row's).
  Status (*apply)(Config& c, std::string_view name, int device, std::string_view value);
  OptionValue (*describe)(const Config& c, int device);
  std::string (*default_text)();
  // The limits (per-device and all-devices rows): sets the fail-closed value for `device`
  // (every device for an all-devices row) and returns what that means. Null for the rest,
  // whose malformed values are skipped.
  const char* (*close)(Config& c, int device);
};

const Option kOptions[] = {
#define HAMI_OPTION(name, field, type, default_value, parser, doc)        \
  {OptionScope::kScalar,                                                  \
   name,                                                                  \
   doc,                                                                   \
   [](Config& c, std::string_view n, int, std::string_view v) -> Status { \
     c.field = HAMI_TRY(parser::Parse(n, v));                             \
     return OkStatus();                                                   \
   },                                                                     \
   [](const Config& c, int) { return parser::Value(c.field); },           \
   [] { return parser::Value(type(default_value)).text; },                \
   nullptr},
#define HAMI_DEVICE_OPTION(name, field, type, default_value, parser, doc)    \
  {OptionScope::kAllDevices,                                                 \
   name,                                                                     \
   doc,                                                                      \
   [](Config& c, std::string_view n, int, std::string_view v) -> Status {    \
     c.field.fill(HAMI_TRY(parser::Parse(n, v)));                            \
     return OkStatus();                                                      \
   },                                                                        \
   [](const Config& c, int d) { return parser::Value(c.field[size_t(d)]); }, \
   [] { return parser::Value(type(default_value)).text; },                   \
   [](Config& c, int) {                                                      \
     c.field.fill(parser::kClosed);                                          \
     return parser::kConsequence;                                            \
   }},
#define HAMI_PER_DEVICE_OPTION(name, field, parser, doc)                     \
  {OptionScope::kPerDevice,                                                  \
   name,                                                                     \
   doc,                                                                      \
   [](Config& c, std::string_view n, int d, std::string_view v) -> Status {  \
     c.field[size_t(d)] = HAMI_TRY(parser::Parse(n, v));                     \
     return OkStatus();                                                      \
   },                                                                        \
   [](const Config& c, int d) { return parser::Value(c.field[size_t(d)]); }, \
   nullptr,                                                                  \
   [](Config& c, int d) {                                                    \
     c.field[size_t(d)] = parser::kClosed;                                   \
     return parser::kConsequence;                                            \
   }},
#include "vgpu/options.def"
#undef HAMI_OPTION
#undef HAMI_DEVICE_OPTION
#undef HAMI_PER_DEVICE_OPTION
};
constexpr size_t kOptionCount = std::size(kOptions);

// "CUDA_DEVICE_MEMORY_LIMIT" for "CUDA_DEVICE_MEMORY_LIMIT_<i>".
std::string_view AllDevicesName(std::string_view per_device_name) {
  return per_device_name.substr(0, per_device_name.size() - 4);  // drop "_<i>"
}

// Finds the option for a variable name; *index gets the device of a per-device one.
const Option* Find(std::string_view name, int* index) {
  for (const Option& o : kOptions) {
    std::string_view n = o.name;
    if (o.scope != OptionScope::kPerDevice) {
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
    int i = 0;
    for (char c : digits) i = i * 10 + (c - '0');
    if (i >= kMaxDevices) continue;
    *index = i;
    return &o;
  }
  return nullptr;
}

}  // namespace

std::string IdentityTiersText(uint8_t tiers) {
  std::string text;
  for (int t = 0; t < region::layout::kIdentityTiers; ++t) {
    if ((tiers & (1u << unsigned(t))) == 0) continue;
    if (!text.empty()) text += ",";
    text += region::IdentityTierName(IdentityTier(t));
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
  struct Table {
    std::array<std::string, kOptionCount> defaults;
    std::array<OptionInfo, kOptionCount> rows;
  };
  static const Table* table = [] {
    auto* t = new Table();  // never freed: usable during static destruction
    for (size_t i = 0; i < kOptionCount; ++i) {
      const Option& o = kOptions[i];
      t->defaults[i] = o.scope == OptionScope::kPerDevice ? std::string(AllDevicesName(o.name))
                                                          : o.default_text();
      t->rows[i] = {o.name, t->defaults[i].c_str(), o.doc, o.scope};
    }
    return t;
  }();
  return table->rows;
}

OptionValue DescribeOption(const Config& config, size_t row, int device) {
  if (row >= kOptionCount) return {"?"};
  if (device < 0 || device >= kMaxDevices) device = 0;
  return kOptions[row].describe(config, device);
}

Resolution ResolveConfig(const LimitsFile& file, const GetEnvFn& getenv_fn) {
  Resolution r;
  // Every candidate value of each variable, best first: the file's, then the environment's.
  // An unreadable one is a line of the file that was skipped (its shown text).
  struct Candidate {
    std::string value;
    Source source;
    bool readable = true;
  };
  std::map<std::string, std::vector<Candidate>> candidates;
  for (const Option& o : kOptions) {
    if (o.scope == OptionScope::kPerDevice) {
      std::string_view n = o.name;
      std::string prefix(n.substr(0, n.size() - 3));
      for (int i = 0; i < kMaxDevices; ++i) {
        std::string name = prefix + std::to_string(i);
        if (const char* v = getenv_fn(name.c_str())) {
          candidates[name].push_back({v, Source::kEnvironment});
        }
      }
    } else if (const char* v = getenv_fn(o.name)) {
      candidates[o.name].push_back({v, Source::kEnvironment});
    }
  }
  if (!file.present && !file.unreadable) {
    r.notes.push_back(file.path + " absent: limits come from the environment");
  }
  for (const std::string& p : file.problems) r.problems.push_back(p);
  if (file.unreadable) {
    // What the file says is unknown, and it would beat the environment: every limit fails
    // closed, and no value of the environment may loosen one.
    for (const Option& o : kOptions) {
      if (o.close == nullptr || o.scope != OptionScope::kAllDevices) continue;
      const char* consequence = o.close(r.config, 0);
      r.closed.push_back(std::string(o.name) + ": " + file.path +
                         " could not be read, so on every device " + consequence);
    }
  }
  bool format_seen = false;
  for (const auto& [key, value] : file.entries) {
    int index = 0;
    if (Find(key, &index) == nullptr) {
      r.notes.push_back(file.path + ": " + key + " is not a variable libvgpu reads; ignored");
      continue;
    }
    format_seen |= key == limits::kFormatKey;
    auto& list = candidates[key];
    // A later line for the same key replaces an earlier one.
    if (!list.empty() && list.front().source == Source::kLimitsFile) list.erase(list.begin());
    list.insert(list.begin(), {value, Source::kLimitsFile});
  }
  // A skipped line meant for a limit is a limit that could not be read, whatever the other
  // lines say: it comes first.
  for (const auto& [key, shown] : file.skipped) {
    int index = 0;
    const Option* o = Find(key, &index);
    if (o == nullptr || o->close == nullptr) continue;
    auto& list = candidates[key];
    list.insert(list.begin(), {shown, Source::kLimitsFile, false});
  }
  if (file.present && !format_seen) {
    r.notes.push_back(file.path + " has no " + limits::kFormatKey + " line; reading it as format " +
                      limits::kFormat);
  }
  // Every other option first, so per-device ones (applied after) beat the all-devices ones.
  // A malformed limit fails closed for its devices; any other malformed value is skipped in
  // favour of the next candidate.
  for (bool per_device : {false, true}) {
    for (const auto& [name, list] : candidates) {
      int index = 0;
      const Option* o = Find(name, &index);
      if (o == nullptr || (o->scope == OptionScope::kPerDevice) != per_device) continue;
      if (o->close != nullptr && file.unreadable) continue;  // closed above
      for (const Candidate& c : list) {
        std::string where = c.source == Source::kLimitsFile ? " (in " + file.path + ")" : "";
        Status st = c.readable
                        ? o->apply(r.config, name, index, c.value)
                        : Status(Error(ErrorCode::kInvalidArgument,
                                       name + ": its line could not be read ('" + c.value + "')"));
        if (st.ok()) {
          r.config.settings.push_back({name, c.value, c.source});
          break;
        }
        if (o->close == nullptr) {
          r.problems.push_back(st.error().message() + where);
          continue;
        }
        // The limit the process was given is unknown: never fall back to a looser one.
        const char* consequence = o->close(r.config, index);
        std::string devices = o->scope == OptionScope::kPerDevice
                                  ? "on device " + std::to_string(index)
                                  : std::string("on every device without a value of its own");
        r.closed.push_back(st.error().message() + where + "; " + devices + " " + consequence);
        r.config.settings.push_back({name, c.value, c.source, true});
        break;
      }
    }
  }
  return r;
}

}  // namespace hami::vgpu
