#include "limits/vocabulary.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "common/parse.h"
#include "limits/limits_file.h"

namespace hami::limits {

namespace {

Error Bad(std::string_view name, std::string_view value, std::string_view why) {
  return Error(ErrorCode::kInvalidArgument,
               std::string(name) + "='" + std::string(value) + "': " + std::string(why));
}

std::string Lower(std::string_view v) {
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr KeyInfo kKeys[] = {
#define HAMI_LIMIT_KEY(id, name, codec, scope, unit) {Key::k##id, name, Scope::scope, unit},
#include "limits/vocabulary.def"
#undef HAMI_LIMIT_KEY
};

constexpr bool KeysInOrder() {
  for (size_t i = 0; i < std::size(kKeys); ++i) {
    if (static_cast<size_t>(kKeys[i].key) != i) return false;
  }
  return true;
}
static_assert(KeysInOrder(), "Key values index kKeys");
// The limits file's own format line is the vocabulary's LimitsFormat.
static_assert(std::string_view(kFormatKey) == KeyName(Key::kLimitsFormat));

constexpr std::array<std::string_view, 3> kCorePolicyNames = {"default", "force", "disable"};
constexpr std::array<std::string_view, kIdentityTierCount> kTierNames = {"broker", "procfs",
                                                                         "namespace", "probe"};

}  // namespace

std::string_view CorePolicyName(CorePolicy policy) {
  size_t i = static_cast<size_t>(policy);
  return i < kCorePolicyNames.size() ? kCorePolicyNames[i] : "?";
}

std::string_view UnaccountedPolicyName(UnaccountedPolicy policy) {
  return policy == UnaccountedPolicy::kSuspend ? "suspend" : "report";
}

std::string_view IdentityTierName(int tier) {
  return tier >= 0 && tier < kIdentityTierCount ? kTierNames[static_cast<size_t>(tier)] : "invalid";
}

// ---- Codecs. -------------------------------------------------------------------------------

Result<uint64_t> SizeCodec::Parse(std::string_view name, std::string_view text) {
  return ParseSize(text, name);
}

std::string SizeCodec::Format(uint64_t bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20, kKiB = uint64_t{1} << 10;
  if (bytes != 0 && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "m";
  if (bytes != 0 && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + "k";
  return std::to_string(bytes);
}

Result<uint32_t> PercentCodec::Parse(std::string_view name, std::string_view text) {
  uint64_t p = HAMI_TRY(ParseUint64(text, name));
  if (p > 100) return Bad(name, text, "must be a percentage from 0 to 100");
  return static_cast<uint32_t>(p);
}

std::string PercentCodec::Format(uint32_t percent) { return std::to_string(percent); }

Result<std::string> PathCodec::Parse(std::string_view name, std::string_view text) {
  if (text.empty() || text[0] != '/') return Bad(name, text, "must be an absolute path");
  return std::string(text);
}

std::string PathCodec::Format(const std::string& path) { return path; }

Result<std::string> OptionalPathCodec::Parse(std::string_view name, std::string_view text) {
  return PathCodec::Parse(name, text);
}

std::string OptionalPathCodec::Format(const std::string& path) { return path; }

Result<CorePolicy> CorePolicyCodec::Parse(std::string_view name, std::string_view text) {
  const std::string s = Lower(text);
  for (size_t i = 0; i < kCorePolicyNames.size(); ++i) {
    if (s == kCorePolicyNames[i]) return static_cast<CorePolicy>(i);
  }
  return Bad(name, text, "expected default, force or disable");
}

std::string CorePolicyCodec::Format(CorePolicy policy) {
  return std::string(CorePolicyName(policy));
}

Result<UnaccountedPolicy> UnaccountedPolicyCodec::Parse(std::string_view name,
                                                        std::string_view text) {
  const std::string s = Lower(text);
  if (s == "report") return UnaccountedPolicy::kReport;
  if (s == "suspend") return UnaccountedPolicy::kSuspend;
  return Bad(name, text, "expected report or suspend");
}

std::string UnaccountedPolicyCodec::Format(UnaccountedPolicy policy) {
  return std::string(UnaccountedPolicyName(policy));
}

Result<int32_t> PriorityCodec::Parse(std::string_view name, std::string_view text) {
  if (text != "0" && text != "1") return Bad(name, text, "expected 0 (high) or 1 (low)");
  return text == "0" ? 0 : 1;
}

std::string PriorityCodec::Format(int32_t priority) { return priority == 0 ? "0" : "1"; }

Result<int> LogLevelCodec::Parse(std::string_view name, std::string_view text) {
  uint64_t level = HAMI_TRY(ParseUint64(text, name));
  if (level > 4) return Bad(name, text, "must be from 0 to 4");
  return static_cast<int>(level);
}

std::string LogLevelCodec::Format(int level) { return std::to_string(level); }

Result<bool> BoolCodec::Parse(std::string_view name, std::string_view text) {
  return ParseBool(text, name);
}

std::string BoolCodec::Format(bool on) { return on ? "true" : "false"; }

Result<bool> BrokerGateCodec::Parse(std::string_view name, std::string_view text) {
  if (text == "1") return true;
  if (text == "0" || text.empty()) return false;
  return Bad(name, text, "only the exact value 1 enables the broker; treated as off");
}

std::string BrokerGateCodec::Format(bool on) { return on ? "1" : "0"; }

Result<uint8_t> IdentityTiersCodec::Parse(std::string_view name, std::string_view text) {
  const std::string s = Lower(text);
  if (s == "none") return uint8_t{0};
  uint8_t tiers = 0;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = std::min(s.find(',', pos), s.size());
    std::string_view t = std::string_view(s).substr(pos, end - pos);
    auto it = std::find(kTierNames.begin(), kTierNames.end(), t);
    if (it == kTierNames.end()) {
      return Bad(name, text,
                 "expected none or a comma-separated list of broker, procfs, namespace, probe");
    }
    tiers = static_cast<uint8_t>(tiers | (1u << static_cast<unsigned>(it - kTierNames.begin())));
    pos = end + 1;
  }
  return tiers;
}

std::string IdentityTiersCodec::Format(uint8_t tiers) {
  std::string text;
  for (size_t t = 0; t < kTierNames.size(); ++t) {
    if ((tiers & (1u << t)) == 0) continue;
    if (!text.empty()) text += ",";
    text += kTierNames[t];
  }
  return text.empty() ? "none" : text;
}

Result<uint32_t> MillisecondsCodec::Parse(std::string_view name, std::string_view text) {
  uint64_t ms = HAMI_TRY(ParseUint64(text, name));
  if (ms > 600000) return Bad(name, text, "must be at most 600000 (10 minutes)");
  return static_cast<uint32_t>(ms);
}

std::string MillisecondsCodec::Format(uint32_t ms) { return std::to_string(ms); }

Result<uint32_t> FormatCodec::Parse(std::string_view name, std::string_view text) {
  if (text != "1") return Bad(name, text, "unknown limits-file format; reading it as format 1");
  return uint32_t{1};
}

std::string FormatCodec::Format(uint32_t format) { return std::to_string(format); }

Result<std::optional<std::string>> DeviceListCodec::Parse(std::string_view, std::string_view text) {
  return std::optional<std::string>(std::string(text));
}

std::string DeviceListCodec::Format(const std::optional<std::string>& list) {
  return list.value_or("");
}

// ---- Keys. ---------------------------------------------------------------------------------

std::span<const KeyInfo> Keys() { return kKeys; }

const KeyInfo& Info(Key key) { return kKeys[static_cast<size_t>(key)]; }

std::string_view Name(Key key) { return Info(key).name; }

std::string Name(Key key, int device) {
  std::string_view name = Name(key);
  if (Info(key).scope != Scope::kPerDevice) return std::string(name);
  name.remove_suffix(3);  // "<i>"
  return std::string(name) + std::to_string(device);
}

const KeyInfo* Lookup(std::string_view name, int* device) {
  for (const KeyInfo& k : kKeys) {
    std::string_view n = k.name;
    if (k.scope != Scope::kPerDevice) {
      if (n == name) return &k;
      continue;
    }
    std::string_view prefix = n.substr(0, n.size() - 3);  // drop "<i>"
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) continue;
    std::string_view digits = name.substr(prefix.size());
    // Only the ordinal in plain decimal ("_1", never "_01"): the names the environment is
    // read by.
    if (digits.size() > 2 || digits.find_first_not_of("0123456789") != std::string_view::npos ||
        (digits.size() > 1 && digits[0] == '0')) {
      continue;
    }
    int i = 0;
    for (char c : digits) i = i * 10 + (c - '0');
    if (i >= kMaxDevices) continue;
    if (device != nullptr) *device = i;
    return &k;
  }
  return nullptr;
}

}  // namespace hami::limits
