// The vocabulary of the variables libvgpu.so reads (vocabulary.def): each variable's name,
// whether it is per device, and how its value is written and read. Every writer of these
// variables — the device plugin's Allocate, `hami run`, the webhook — writes them through the
// typed Set* functions, and libvgpu.so reads them through the Parse* functions, so a name or a
// format is spelled once, here.
//
// A codec is a struct with
//   using Value = ...;
//   static Result<Value> Parse(std::string_view name, std::string_view text);
//       refuses text the library would not take, naming the variable and the text:
//       CUDA_DEVICE_SM_LIMIT='150': must be a percentage from 0 to 100
//   static std::string Format(const Value& value);
//       the text every writer writes; Parse(name, Format(v)) == v for every value Format
//       accepts (vocabulary_test.cc walks every row).
//
// Built without exceptions (libvgpu.so links it); pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/result.h"

namespace hami::limits {

using Entry = std::pair<std::string, std::string>;  // as limits_file.h

inline constexpr int kMaxDevices = 16;

// ---- Values with names of their own. ------------------------------------------------------

// GPU_CORE_UTILIZATION_POLICY.
enum class CorePolicy : uint8_t { kDefault, kForce, kDisable };
// HAMI_UNACCOUNTED_POLICY.
enum class UnaccountedPolicy : uint8_t { kReport, kSuspend };
// HAMI_IDENTITY_TIERS: the ways libvgpu learns a process's host PID, in the order it tries
// them (the region's layout::IdentityTier numbers them); a set of them is a bit mask (bit i =
// tier i).
inline constexpr int kIdentityTierCount = 4;
inline constexpr uint8_t kAllIdentityTiers = 0xf;
std::string_view CorePolicyName(CorePolicy policy);         // "default", "force", "disable"
std::string_view UnaccountedPolicyName(UnaccountedPolicy);  // "report", "suspend"
// "broker", "procfs", "namespace", "probe"; "invalid" outside 0..kIdentityTierCount-1.
std::string_view IdentityTierName(int tier);

// ---- Codecs. -------------------------------------------------------------------------------

struct SizeCodec {  // bytes
  using Value = uint64_t;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value bytes);  // 3000 MiB: "3000m"; 1536 B: "1536"...
};
struct PercentCodec {  // 0..100
  using Value = uint32_t;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value percent);
};
struct PathCodec {  // absolute
  using Value = std::string;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(const Value& path);
};
struct OptionalPathCodec {  // absolute, or "" for none
  using Value = std::string;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(const Value& path);
};
struct CorePolicyCodec {
  using Value = CorePolicy;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value policy);
};
struct UnaccountedPolicyCodec {
  using Value = UnaccountedPolicy;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value policy);
};
struct PriorityCodec {  // 0 high, 1 low
  using Value = int32_t;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value priority);
};
struct LogLevelCodec {  // 0..4
  using Value = int;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value level);
};
struct BoolCodec {
  using Value = bool;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value on);
};
struct BrokerGateCodec {  // only the exact "1" is on
  using Value = bool;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value on);  // "1" or "0"
};
struct IdentityTiersCodec {  // a mask of IdentityTier bits
  using Value = uint8_t;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value tiers);  // "none", "broker,procfs"
};
struct MillisecondsCodec {  // at most 600000
  using Value = uint32_t;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value ms);
};
struct FormatCodec {  // the limits file's format: 1
  using Value = uint32_t;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(Value format);
};
struct DeviceListCodec {  // CUDA_VISIBLE_DEVICES as written; nullopt: unset
  using Value = std::optional<std::string>;
  static Result<Value> Parse(std::string_view name, std::string_view text);
  static std::string Format(const Value& list);
};

// ---- The keys. -----------------------------------------------------------------------------

enum class Scope : uint8_t { kScalar, kAllDevices, kPerDevice };

enum class Key : uint8_t {
#define HAMI_LIMIT_KEY(id, name, codec, scope, unit) k##id,
#include "limits/vocabulary.def"
#undef HAMI_LIMIT_KEY
};

// The names, indexed by Key: usable in constant expressions (libvgpu's tables are built at
// compile time, not at load).
inline constexpr const char* kKeyNames[] = {
#define HAMI_LIMIT_KEY(id, name, codec, scope, unit) name,
#include "limits/vocabulary.def"
#undef HAMI_LIMIT_KEY
};
constexpr const char* KeyName(Key key) { return kKeyNames[static_cast<size_t>(key)]; }

struct KeyInfo {
  Key key;
  const char* name;  // "CUDA_DEVICE_MEMORY_LIMIT_<i>" for a per-device key
  Scope scope;
  const char* unit;  // unit and format, one line (Markdown code spans)
};

// Every row, in vocabulary.def's order.
std::span<const KeyInfo> Keys();
const KeyInfo& Info(Key key);
// The variable's name; for a per-device key, with its "_<i>".
std::string_view Name(Key key);
// A per-device key's name for `device` ("CUDA_DEVICE_MEMORY_LIMIT_3"); `device` must be in
// 0..kMaxDevices-1. For another key, its name.
std::string Name(Key key, int device);
// The key a variable name is, with the device of a per-device one in *device; nullptr for a
// name outside the vocabulary. A per-device name takes its ordinal in plain decimal only
// ("_1", never "_01"), below kMaxDevices.
const KeyInfo* Lookup(std::string_view name, int* device);

// ---- Typed writers and readers, one pair per row. --------------------------------------------
//   Entry SetMemoryLimit(uint64_t bytes);             // {"CUDA_DEVICE_MEMORY_LIMIT", "3000m"}
//   Entry SetDeviceMemoryLimit(int device, uint64_t bytes);
//   Result<uint64_t> ParseMemoryLimit(std::string_view text);   (per device: (device, text))

#define HAMI_LIMIT_KEY_kScalar(id, name, codec)                                            \
  inline Entry Set##id(const codec::Value& value) { return {name, codec::Format(value)}; } \
  inline Result<codec::Value> Parse##id(std::string_view text) { return codec::Parse(name, text); }
#define HAMI_LIMIT_KEY_kAllDevices(id, name, codec) HAMI_LIMIT_KEY_kScalar(id, name, codec)
#define HAMI_LIMIT_KEY_kPerDevice(id, name, codec)                           \
  inline Entry Set##id(int device, const codec::Value& value) {              \
    return {Name(Key::k##id, device), codec::Format(value)};                 \
  }                                                                          \
  inline Result<codec::Value> Parse##id(int device, std::string_view text) { \
    return codec::Parse(Name(Key::k##id, device), text);                     \
  }
#define HAMI_LIMIT_KEY(id, name, codec, scope, unit) HAMI_LIMIT_KEY_##scope(id, name, codec)
#include "limits/vocabulary.def"
#undef HAMI_LIMIT_KEY
#undef HAMI_LIMIT_KEY_kScalar
#undef HAMI_LIMIT_KEY_kAllDevices
#undef HAMI_LIMIT_KEY_kPerDevice

}  // namespace hami::limits
