// What libvgpu.so is told: one options table for every variable it reads, the limits file
// that carries them to processes without the environment (SSH, su -, cron), and the
// resolution of both into one Config that remembers where each value came from.
//
// Precedence: a value in the limits file beats the same variable in the environment, which
// beats the default. A per-device variable (CUDA_DEVICE_MEMORY_LIMIT_<i>,
// CUDA_DEVICE_SM_LIMIT_<i>) beats the all-devices one, whichever source each came from.
// A malformed value — in the file or the environment — is reported naming it and ignored,
// as if it were absent; everything else still applies.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "region/layout.h"

namespace hami::vgpu {

inline constexpr int kMaxDevices = 16;
// Compiled in, never taken from the environment: that is what a login session loses.
inline constexpr const char kLimitsFilePath[] = "/overrideEnv";
inline constexpr const char kDefaultSharedCache[] = "/tmp/cudevshr.cache";
inline constexpr const char kLimitsFormat[] = "1";
inline constexpr const char kDefaultProbeLock[] = "/tmp/vgpulock/probe.lock";
inline constexpr uint32_t kDefaultProbeWaitMs = 10000;
// The identity tiers (a bit per region::layout::IdentityTier), tried in that order.
inline constexpr uint8_t kAllIdentityTiers = 0xf;

enum class Source { kDefault, kEnvironment, kLimitsFile };
const char* SourceName(Source source);

struct Setting {
  std::string name;  // "CUDA_DEVICE_MEMORY_LIMIT_0"
  std::string value;
  Source source;
};

struct Config {
  std::array<uint64_t, kMaxDevices> memory_limit{};  // bytes by CUDA ordinal; 0 = unlimited
  std::array<uint32_t, kMaxDevices> sm_limit{};      // percent; 0 or 100 = unlimited
  std::string shared_cache = kDefaultSharedCache;
  region::layout::CorePolicy core_policy = region::layout::CorePolicy::kDefault;
  int32_t priority = 1;  // 0 high, 1 low
  int log_level = 2;     // 0 off, 1 errors, 2 warnings, 3 info, 4 debug
  bool oversubscribe = false;
  bool hostpid_broker = false;                   // LIBVGPU_HOSTPID_BROKER is exactly "1"
  std::string host_procfs;                       // LIBVGPU_HOST_PROCFS
  uint8_t identity_tiers = kAllIdentityTiers;    // HAMI_IDENTITY_TIERS, bit per IdentityTier
  std::string probe_lock = kDefaultProbeLock;    // HAMI_IDENTITY_PROBE_LOCK
  uint32_t probe_wait_ms = kDefaultProbeWaitMs;  // HAMI_IDENTITY_PROBE_WAIT_MS
  std::optional<std::string> visible_devices;    // CUDA_VISIBLE_DEVICES as given
  std::vector<Setting> settings;                 // every variable that was set, and where from
};

// The limits file, parsed tolerantly: a line that is not KEY=VALUE is reported with its
// number and skipped; the rest applies.
struct LimitsFile {
  bool present = false;
  std::string path;
  std::vector<std::pair<std::string, std::string>> entries;  // in file order
  std::vector<std::string> problems;  // "/overrideEnv line 3 'x': not KEY=VALUE; skipped"
};

LimitsFile ParseLimitsFile(std::string_view text, std::string_view path);
// Reads `path`; an absent (or empty) file is `present == false`, not an error.
LimitsFile ReadLimitsFile(const std::string& path);

using GetEnvFn = std::function<const char*(const char*)>;

struct Resolution {
  Config config;
  std::vector<std::string> problems;  // malformed values, named; each was ignored
  std::vector<std::string> notes;     // informational (absent file, unknown keys)
};

Resolution ResolveConfig(const LimitsFile& file, const GetEnvFn& getenv_fn);

// One row of the options table, for `hami env` and the docs.
struct OptionInfo {
  const char* name;  // "CUDA_DEVICE_MEMORY_LIMIT_<i>" for the per-device ones
  const char* default_text;
  const char* doc;
};
std::span<const OptionInfo> OptionTable();

// "broker,procfs,namespace,probe" (the tiers set in `tiers`, in their order), or "none".
std::string IdentityTiersText(uint8_t tiers);

}  // namespace hami::vgpu
