#include "vgpu/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <map>

#include "common/parse.h"
#include "region/region.h"

namespace hami::vgpu {

namespace {

using region::layout::CorePolicy;
using region::layout::IdentityTier;

// ---- The parsers of vgpu/options.def: the vocabulary's codec (limits/vocabulary.h) as
// Parse(name, text) -> Result<T>, and Value(value), as people read it. ---------------------

// The limits. `kClosed` is what a device gets when its value cannot be read, and
// `kConsequence` says so in the problem.
struct MemoryLimit {
  static constexpr uint64_t kClosed = region::layout::kZeroBudgetBytes;
  static constexpr const char* kConsequence = "no allocation is admitted (a zero memory budget)";
  static Result<uint64_t> Parse(std::string_view name, std::string_view v) {
    return limits::SizeCodec::Parse(name, v);
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
    return limits::PercentCodec::Parse(name, v);
  }
  static OptionValue Value(uint32_t percent) {
    std::string text = std::to_string(percent);
    text += percent == 0 || percent == 100 ? " (unlimited)" : "%";
    return {text, "percent", percent};
  }
};

struct AbsolutePath {
  static Result<std::string> Parse(std::string_view name, std::string_view v) {
    return limits::PathCodec::Parse(name, v);
  }
  static OptionValue Value(const std::string& path) { return {path}; }
};

// An absolute path, or unset (empty) for "not used".
struct OptionalAbsolutePath {
  static Result<std::string> Parse(std::string_view name, std::string_view v) {
    return limits::OptionalPathCodec::Parse(name, v);
  }
  static OptionValue Value(const std::string& path) {
    return {path.empty() ? "unset (not used)" : path};
  }
};

// The vocabulary's policy, as the region stores it.
struct CorePolicyName {
  static Result<CorePolicy> Parse(std::string_view name, std::string_view v) {
    switch (HAMI_TRY(limits::CorePolicyCodec::Parse(name, v))) {
      case limits::CorePolicy::kForce:
        return CorePolicy::kForce;
      case limits::CorePolicy::kDisable:
        return CorePolicy::kDisable;
      case limits::CorePolicy::kDefault:
        break;
    }
    return CorePolicy::kDefault;
  }
  static OptionValue Value(CorePolicy policy) {
    switch (policy) {
      case CorePolicy::kForce:
        return {std::string(limits::CorePolicyName(limits::CorePolicy::kForce))};
      case CorePolicy::kDisable:
        return {std::string(limits::CorePolicyName(limits::CorePolicy::kDisable))};
      case CorePolicy::kDefault:
        return {std::string(limits::CorePolicyName(limits::CorePolicy::kDefault))};
    }
    return {"?"};
  }
};

struct UnaccountedPolicyName {
  static Result<UnaccountedPolicy> Parse(std::string_view name, std::string_view v) {
    return limits::UnaccountedPolicyCodec::Parse(name, v);
  }
  static OptionValue Value(UnaccountedPolicy policy) {
    return {std::string(limits::UnaccountedPolicyName(policy))};
  }
};

// A size that is not a limit: bytes, or k/m/g/t units.
struct Bytes {
  static Result<uint64_t> Parse(std::string_view name, std::string_view v) {
    return limits::SizeCodec::Parse(name, v);
  }
  static OptionValue Value(uint64_t bytes) {
    return {FormatBytes(bytes) + ", " + std::to_string(bytes) + " bytes", "bytes", bytes};
  }
};

// CUDA_OVERSUBSCRIBE_HOST_LIMIT: unset, the container's device memory limits added up (the
// region is stamped with it, vgpu/spill.h); a value that cannot be read allows no host memory
// at all: an oversubscription whose bound is unknown is no oversubscription.
struct HostLimit {
  static constexpr std::optional<uint64_t> kClosed = 0;
  static constexpr const char* kConsequence =
      "nothing is served from host memory: an allocation past the device budget fails with "
      "CUDA_ERROR_OUT_OF_MEMORY";
  static Result<std::optional<uint64_t>> Parse(std::string_view name, std::string_view v) {
    return std::optional<uint64_t>(HAMI_TRY(limits::SizeCodec::Parse(name, v)));
  }
  static OptionValue Value(const std::optional<uint64_t>& bytes) {
    if (!bytes) return {"the device memory limits, added up"};
    if (*bytes == 0) return {"0 (none)", "bytes", 0};
    return {FormatBytes(*bytes) + ", " + std::to_string(*bytes) + " bytes", "bytes", *bytes};
  }
};

struct TaskPriority {
  static Result<int32_t> Parse(std::string_view name, std::string_view v) {
    return limits::PriorityCodec::Parse(name, v);
  }
  static OptionValue Value(int32_t priority) { return {priority == 0 ? "0 (high)" : "1 (low)"}; }
};

struct LogLevelNumber {
  static constexpr const char* kNames[] = {"off", "errors", "errors and warnings", "info", "debug"};
  static Result<int> Parse(std::string_view name, std::string_view v) {
    return limits::LogLevelCodec::Parse(name, v);
  }
  static OptionValue Value(int level) {
    return {std::to_string(level) + " (" + (level >= 0 && level <= 4 ? kNames[level] : "?") + ")"};
  }
};

struct Boolean {
  static Result<bool> Parse(std::string_view name, std::string_view v) {
    return limits::BoolCodec::Parse(name, v);
  }
  static OptionValue Value(bool on) { return {on ? "true" : "false"}; }
};

// LIBVGPU_HOSTPID_BROKER: only the exact string "1" enables; "0" and "" are off without
// comment; anything else is reported (and so off).
struct ExactlyOne {
  static Result<bool> Parse(std::string_view name, std::string_view v) {
    return limits::BrokerGateCodec::Parse(name, v);
  }
  static OptionValue Value(bool on) { return {on ? "1 (on)" : "off"}; }
};

// HAMI_IDENTITY_TIERS: "none", or a comma-separated subset of the tier names (the region's
// IdentityTierName, any case), tried always in the tiers' own order.
struct IdentityTiers {
  static Result<uint8_t> Parse(std::string_view name, std::string_view v) {
    return limits::IdentityTiersCodec::Parse(name, v);
  }
  static OptionValue Value(uint8_t tiers) { return {IdentityTiersText(tiers)}; }
};

struct WaitMs {
  static Result<uint32_t> Parse(std::string_view name, std::string_view v) {
    return limits::MillisecondsCodec::Parse(name, v);
  }
  static OptionValue Value(uint32_t ms) { return {std::to_string(ms) + " ms"}; }
};

struct LimitsFormat {
  static Result<uint32_t> Parse(std::string_view name, std::string_view v) {
    return limits::FormatCodec::Parse(name, v);
  }
  static OptionValue Value(uint32_t format) { return {std::to_string(format)}; }
};

// CUDA_VISIBLE_DEVICES, kept as given: set but empty ("no device") differs from unset.
struct VisibleDevicesList {
  static Result<std::optional<std::string>> Parse(std::string_view name, std::string_view v) {
    return limits::DeviceListCodec::Parse(name, v);
  }
  static OptionValue Value(const std::optional<std::string>& v) {
    return {!v ? "all devices" : v->empty() ? "no device" : *v};
  }
};

// ---- The rows, expanded from vgpu/options.def. -------------------------------------------

// A parser with a fail-closed value (kClosed, and kConsequence saying what it means): a scalar
// row of it is held closed, as the limits are, when its value cannot be read.
template <typename Parser>
concept FailsClosed = requires {
  Parser::kClosed;
  Parser::kConsequence;
};
template <typename Parser, typename Field>
const char* CloseScalar(Field& field) {
  if constexpr (FailsClosed<Parser>) {
    field = Parser::kClosed;
    return Parser::kConsequence;
  } else {
    return nullptr;
  }
}

struct Option {
  limits::Key key;
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

constexpr Option kOptions[] = {
#define HAMI_OPTION(key, field, type, default_value, parser, doc)         \
  {limits::Key::k##key,                                                   \
   OptionScope::kScalar,                                                  \
   limits::KeyName(limits::Key::k##key),                                  \
   doc,                                                                   \
   [](Config& c, std::string_view n, int, std::string_view v) -> Status { \
     c.field = HAMI_TRY(parser::Parse(n, v));                             \
     return OkStatus();                                                   \
   },                                                                     \
   [](const Config& c, int) { return parser::Value(c.field); },           \
   [] { return parser::Value(type(default_value)).text; },                \
   FailsClosed<parser> ? +[](Config& c, int) { return CloseScalar<parser>(c.field); } : nullptr},
#define HAMI_DEVICE_OPTION(key, field, type, default_value, parser, doc)     \
  {limits::Key::k##key,                                                      \
   OptionScope::kAllDevices,                                                 \
   limits::KeyName(limits::Key::k##key),                                     \
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
#define HAMI_PER_DEVICE_OPTION(key, field, parser, doc)                      \
  {limits::Key::k##key,                                                      \
   OptionScope::kPerDevice,                                                  \
   limits::KeyName(limits::Key::k##key),                                     \
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

static_assert(region::layout::kMaxDevices == limits::kMaxDevices);

// Every row of the vocabulary has its row here, at the same index.
constexpr bool RowsFollowTheVocabulary() {
  if (kOptionCount != std::size(limits::kKeyNames)) return false;
  for (size_t i = 0; i < kOptionCount; ++i) {
    if (static_cast<size_t>(kOptions[i].key) != i) return false;
  }
  return true;
}
static_assert(RowsFollowTheVocabulary(),
              "vgpu/options.def must list the keys of limits/vocabulary.def, in its order");

// The all-devices row's name of a per-device row (the row before it).
std::string_view AllDevicesName(const Option& per_device) { return (&per_device - 1)->name; }

// Finds the option for a variable name; *index gets the device of a per-device one.
const Option* Find(std::string_view name, int* index) {
  const limits::KeyInfo* key = limits::Lookup(name, index);
  return key == nullptr ? nullptr : &kOptions[static_cast<size_t>(key->key)];
}

}  // namespace

std::string IdentityTiersText(uint8_t tiers) { return limits::IdentityTiersCodec::Format(tiers); }

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
      t->defaults[i] =
          o.scope == OptionScope::kPerDevice ? std::string(AllDevicesName(o)) : o.default_text();
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
      // "NAME_<i>": the name is written once, each index into its tail (no string per index).
      const std::string_view prefix = std::string_view(o.name).substr(0, std::strlen(o.name) - 3);
      char name[64];
      static_assert(kMaxDevices <= 100, "two digits at most");
      if (prefix.size() + 3 > sizeof(name)) continue;
      std::memcpy(name, prefix.data(), prefix.size());
      for (int i = 0; i < kMaxDevices; ++i) {
        char* end = std::to_chars(name + prefix.size(), name + sizeof(name) - 1, i).ptr;
        *end = '\0';
        if (const char* v = getenv_fn(name)) {
          candidates[std::string(name, end)].push_back({v, Source::kEnvironment});
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
      if (o.close == nullptr || o.scope == OptionScope::kPerDevice) continue;
      const char* consequence = o.close(r.config, 0);
      r.closed.push_back(std::string(o.name) + ": " + file.path + " could not be read, so " +
                         (o.scope == OptionScope::kAllDevices ? "on every device " : "") +
                         consequence);
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
                                  ? "on device " + std::to_string(index) + " "
                              : o->scope == OptionScope::kAllDevices
                                  ? std::string("on every device without a value of its own ")
                                  : std::string();
        r.closed.push_back(st.error().message() + where + "; " + devices + consequence);
        r.config.settings.push_back({name, c.value, c.source, true});
        break;
      }
    }
  }
  return r;
}

FileLimits LimitsFromFile(const LimitsFile& file) {
  FileLimits out;
  if (!file.present && !file.unreadable) return out;
  Resolution r = ResolveConfig(file, [](const char*) -> const char* { return nullptr; });
  out.closed = std::move(r.closed);
  const std::string_view memory_all = limits::Name(limits::Key::kMemoryLimit);
  const std::string_view sm_all = limits::Name(limits::Key::kSmLimit);
  const std::string_view host = limits::Name(limits::Key::kOversubscribeHostLimit);
  bool memory_every = file.unreadable, sm_every = file.unreadable;
  bool host_set = file.unreadable;
  std::array<bool, kMaxDevices> memory_one{}, sm_one{};
  for (const Setting& s : r.config.settings) {
    memory_every |= s.name == memory_all;
    sm_every |= s.name == sm_all;
    host_set |= s.name == host;
    int device = -1;
    const limits::KeyInfo* k = limits::Lookup(s.name, &device);
    if (k == nullptr || device < 0 || device >= kMaxDevices) continue;
    memory_one[size_t(device)] |= k->key == limits::Key::kDeviceMemoryLimit;
    sm_one[size_t(device)] |= k->key == limits::Key::kDeviceSmLimit;
  }
  for (size_t i = 0; i < size_t(kMaxDevices); ++i) {
    if (memory_every || memory_one[i]) out.memory_limit[i] = r.config.memory_limit[i];
    if (sm_every || sm_one[i]) out.sm_limit[i] = r.config.sm_limit[i];
  }
  if (host_set) out.host_limit = r.config.host_limit.value_or(0);
  return out;
}

std::string LimitsFileState(const LimitsFile& file) {
  if (file.unreadable) return "unreadable";
  std::string state;
  for (const auto& [key, value] : file.entries) state += key + "=" + value + "\n";
  for (const auto& [key, shown] : file.skipped) state += "skipped " + key + " " + shown + "\n";
  return state;
}

}  // namespace hami::vgpu
