// What libvgpu.so is told: one options table (vgpu/options.def) for every variable it reads,
// the limits file that carries them to processes without the environment (SSH, su -, cron;
// the format is limits/limits_file.h), and the resolution of both into one Config that
// remembers where each value came from.
//
// Precedence: a value in the limits file beats the same variable in the environment, which
// beats the default. A per-device variable (CUDA_DEVICE_MEMORY_LIMIT_<i>,
// CUDA_DEVICE_SM_LIMIT_<i>) beats the all-devices one, whichever source each came from.
// A malformed memory or SM limit — in the file or the environment, or a skipped line of the
// file meant for one, or a file that cannot be read — fails closed: that device gets a zero
// memory budget or the strictest compute share, never the next candidate or the default
// (Resolution::closed says which and why). Any other malformed value is reported naming it
// and ignored, as if it were absent; everything else still applies.
//
// Built without exceptions (libvgpu.so links it); thread-safe (no shared state but the
// options table, built once).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "limits/limits_file.h"
#include "limits/vocabulary.h"
#include "node/paths.h"
#include "region/crosscheck.h"
#include "region/layout.h"

namespace hami::vgpu {

using limits::kMaxDevices;
// Compiled in, never taken from the environment: that is what a login session loses.
using node::kLimitsFilePath;
inline constexpr uint32_t kDefaultProbeWaitMs = 10000;
// The identity tiers (a bit per region::layout::IdentityTier, named by the vocabulary), tried
// in that order.
using limits::kAllIdentityTiers;

// HAMI_UNACCOUNTED_POLICY: what a gap the NVML cross-check finds does (vgpu/watch.h):
// kReport logs it and records it in the region (hami inspect exits 3); kSuspend also refuses
// the container's allocations on the device while it lasts.
using limits::UnaccountedPolicy;

enum class Source { kDefault, kEnvironment, kLimitsFile };
const char* SourceName(Source source);

struct Setting {
  std::string name;  // "CUDA_DEVICE_MEMORY_LIMIT_0"
  std::string value;
  Source source;
  bool closed = false;  // a limit whose value could not be read: held closed instead
};

namespace internal {
template <typename T>
constexpr std::array<T, kMaxDevices> EveryDevice(T value) {
  std::array<T, kMaxDevices> a{};
  a.fill(value);
  return a;
}
}  // namespace internal

// The resolved configuration: one member per row of vgpu/options.def (memory_limit is bytes
// by CUDA ordinal, 0 = unlimited; sm_limit percent, 0 or 100 = unlimited; log_level 0 off ..
// 4 debug; identity_tiers a bit per IdentityTier; visible_devices CUDA_VISIBLE_DEVICES as
// given, unset = every device), and every variable that was set.
struct Config {
#define HAMI_OPTION(name, field, type, default_value, parser, doc) type field = default_value;
#define HAMI_DEVICE_OPTION(name, field, type, default_value, parser, doc) \
  std::array<type, kMaxDevices> field = internal::EveryDevice<type>(default_value);
#define HAMI_PER_DEVICE_OPTION(name, field, parser, doc)
#include "vgpu/options.def"
#undef HAMI_OPTION
#undef HAMI_DEVICE_OPTION
#undef HAMI_PER_DEVICE_OPTION
  std::vector<Setting> settings;  // every variable that was set, and where from
};

// The limits file: one reader for the library, `hami env` and the device plugin.
using limits::LimitsFile;
using limits::ParseLimitsFile;
using limits::ReadLimitsFile;

using GetEnvFn = std::function<const char*(const char*)>;

struct Resolution {
  Config config;
  // Limits that could not be read (malformed, out of range, a skipped line of the limits
  // file, an unreadable limits file), each naming the variable, the value and the
  // consequence: the device's memory budget is zero (MemoryLimit's kZeroBudgetBytes) or its
  // compute share the strictest (1%). Never a looser value in their place.
  std::vector<std::string> closed;
  std::vector<std::string> problems;  // other malformed values, named; each was ignored
  std::vector<std::string> notes;     // informational (absent file, unknown keys)
};

Resolution ResolveConfig(const LimitsFile& file, const GetEnvFn& getenv_fn);

// The memory and SM limits the limits file alone sets, per CUDA ordinal: what a running process
// follows when the root-owned file changes (vgpu/watch.h), never the environment, which the
// process itself can change. Resolved as ResolveConfig resolves the file (per-device beats
// all-devices; a malformed or skipped limit line, or an unreadable file, is held closed), with
// nullopt where the file sets no limit for the device (the process's own stands) and for an
// absent or empty file (nothing to follow: a file that vanished never loosens a limit).
struct FileLimits {
  std::array<std::optional<uint64_t>, kMaxDevices> memory_limit{};
  std::array<std::optional<uint32_t>, kMaxDevices> sm_limit{};
  // CUDA_OVERSUBSCRIBE_HOST_LIMIT when the file sets it (0: malformed, or the file unreadable).
  std::optional<uint64_t> host_limit;
  std::vector<std::string> closed;  // as Resolution::closed
};
FileLimits LimitsFromFile(const LimitsFile& file);

// What a read of the limits file found, as one string: equal for two reads exactly when what
// they would configure is the same (its entries, its skipped lines, unreadable). The watcher
// compares it with the state the process was configured from, and then with the last followed.
std::string LimitsFileState(const LimitsFile& file);

// What a row of the options table is.
enum class OptionScope {
  kScalar,      // one variable
  kAllDevices,  // the all-devices variable of a per-device limit
  kPerDevice,   // NAME_<i>, one variable per CUDA ordinal
};

// One row of the options table, for `hami env` and the docs.
struct OptionInfo {
  const char* name;          // "CUDA_DEVICE_MEMORY_LIMIT_<i>" for the per-device ones
  const char* default_text;  // the default as people read it; a per-device row: its
                             // all-devices variable's name
  const char* doc;           // one line (Markdown code spans allowed)
  OptionScope scope;
};
// In the order of vgpu/options.def.
std::span<const OptionInfo> OptionTable();

// What a configuration holds for one row, as people read it ("2.9 GiB, 3145728000 bytes",
// "force", "1 (low)"), and the number behind the limits (the JSON of `hami env`).
struct OptionValue {
  std::string text;
  const char* number_key = nullptr;  // "bytes" or "percent"; nullptr: no number
  uint64_t number = 0;
};
// `row` indexes OptionTable(); `device` is the CUDA ordinal of a per-device or all-devices
// row (ignored for the others).
OptionValue DescribeOption(const Config& config, size_t row, int device);

// "broker,procfs,namespace,probe" (the tiers set in `tiers`, in their order), or "none".
std::string IdentityTiersText(uint8_t tiers);

}  // namespace hami::vgpu
