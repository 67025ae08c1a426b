// Fuzzes the limits-file parser and the resolution of a file with an environment
// (vgpu/config.h). Neither may crash, and what they produce must keep their contracts:
// every non-empty line becomes an entry or a problem naming its number; every setting's
// value is the one its source holds; a file value loses to the environment's only when it
// was reported malformed; each device's limits are its own variable's, else the
// all-devices one's, else unlimited. (ParseSize itself is fuzzed by common/parse_fuzz.cc.)
//
// Input: the bytes before the first 0xFF are the limits file; those after it are the
// environment, one NAME=VALUE per line (a value ends at a NUL, as in a real environment).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "common/parse.h"
#include "vgpu/config.h"

namespace {

using hami::vgpu::Config;
using hami::vgpu::kMaxDevices;
using hami::vgpu::LimitsFile;
using hami::vgpu::Resolution;
using hami::vgpu::Setting;
using hami::vgpu::Source;

constexpr char kPath[] = "/overrideEnv";

void Check(bool ok) {
  if (!ok) std::abort();
}

std::map<std::string, std::string> ParseEnvironment(std::string_view text) {
  std::map<std::string, std::string> env;
  while (!text.empty()) {
    size_t eol = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(std::min(eol + 1, text.size()));
    line = line.substr(0, line.find('\0'));
    size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return env;
}

size_t NonEmptyLines(std::string_view text) {
  size_t n = 0;
  while (!text.empty()) {
    size_t eol = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(std::min(eol + 1, text.size()));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    n += !line.empty();
  }
  return n;
}

const Setting* Find(const Config& c, const std::string& name) {
  const Setting* found = nullptr;
  for (const Setting& s : c.settings) {
    if (s.name != name) continue;
    Check(found == nullptr);  // one setting per variable
    found = &s;
  }
  return found;
}

bool HasProblemStartingWith(const Resolution& r, const std::string& prefix) {
  return std::any_of(r.problems.begin(), r.problems.end(),
                     [&](const std::string& p) { return p.starts_with(prefix); });
}

// Whether the limit `name` was held closed ("NAME='v': ..." or "NAME: its line ...").
bool Closed(const Resolution& r, const std::string& name) {
  return std::any_of(r.closed.begin(), r.closed.end(), [&](const std::string& p) {
    return p.starts_with(name + "='") || p.starts_with(name + ": ");
  });
}

void CheckFile(std::string_view text, const LimitsFile& file) {
  Check(file.present);
  Check(file.entries.size() + file.problems.size() == NonEmptyLines(text));
  for (const auto& [key, value] : file.entries) {
    Check(!key.empty());
    Check(std::all_of(key.begin(), key.end(), [](char c) {
      return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    }));
    Check(value.find('\0') == std::string::npos && value.find('\n') == std::string::npos);
  }
  for (const std::string& p : file.problems) {
    Check(p.starts_with(std::string(kPath) + " line "));
    Check(p.find('\0') == std::string::npos);
  }
}

// The value a device limit must have from its own and the all-devices setting: the closed
// value when that setting could not be read.
template <typename Parse>
uint64_t Expected(const Resolution& r, const std::string& all, int device, Parse parse,
                  uint64_t closed) {
  const Setting* s = Find(r.config, all + "_" + std::to_string(device));
  if (s == nullptr) s = Find(r.config, all);
  if (s == nullptr) return 0;
  if (Closed(r, s->name)) return closed;
  auto v = parse(s->value);
  Check(v.ok());  // a value that was applied parses
  return *v;
}

void CheckResolution(const LimitsFile& file, const std::map<std::string, std::string>& env,
                     const Resolution& r) {
  // The last line for a key is the file's value.
  std::map<std::string, std::string> file_value;
  for (const auto& [key, value] : file.entries) file_value[key] = value;
  for (const Setting& s : r.config.settings) {
    (void)Find(r.config, s.name);  // aborts on a second setting of the same name
    auto in_file = file_value.find(s.name);
    if (s.source == Source::kLimitsFile) {
      // A limit's skipped line is recorded as shown, not as an entry.
      Check((in_file != file_value.end() && in_file->second == s.value) || Closed(r, s.name));
    } else {
      Check(s.source == Source::kEnvironment);
      auto in_env = env.find(s.name);
      Check(in_env != env.end() && in_env->second == s.value);
      // The environment stands in for a file value only when that is not a limit (a limit's
      // file value, readable or not, is the one used).
      if (in_file != file_value.end()) {
        Check(!s.name.starts_with("CUDA_DEVICE_MEMORY_LIMIT") &&
              !s.name.starts_with("CUDA_DEVICE_SM_LIMIT"));
        Check(HasProblemStartingWith(r, s.name + "='" + in_file->second + "'"));
      }
    }
  }
  const Config& c = r.config;
  for (int d = 0; d < kMaxDevices; ++d) {
    Check(c.memory_limit[size_t(d)] ==
          Expected(
              r, "CUDA_DEVICE_MEMORY_LIMIT", d,
              [](const std::string& v) { return hami::ParseSize(v, "fuzz"); },
              hami::region::layout::kZeroBudgetBytes));
    Check(c.sm_limit[size_t(d)] <= 100);
    Check(c.sm_limit[size_t(d)] ==
          Expected(
              r, "CUDA_DEVICE_SM_LIMIT", d,
              [](const std::string& v) { return hami::ParseUint64(v, "fuzz"); },
              hami::region::layout::kStrictestSmPercent));
  }
  // The host budget: its variable's value, none at all when that could not be read (or the
  // file could not be), and unset (the device limits) otherwise.
  if (const Setting* s = Find(c, "CUDA_OVERSUBSCRIBE_HOST_LIMIT")) {
    Check(c.host_limit.has_value());
    if (Closed(r, s->name)) {
      Check(*c.host_limit == 0);
    } else {
      auto v = hami::ParseSize(s->value, "fuzz");
      Check(v.ok() && *c.host_limit == *v);
    }
  } else {
    Check(!c.host_limit.has_value() || (file.unreadable && *c.host_limit == 0));
  }
  Check(!c.shared_cache.empty() && c.shared_cache[0] == '/');
  Check(c.priority == 0 || c.priority == 1);
  Check(c.log_level >= 0 && c.log_level <= 4);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t split = std::min(input.find('\xff'), input.size());
  std::string_view text = input.substr(0, split);
  const auto env = ParseEnvironment(input.substr(std::min(split + 1, input.size())));
  auto getenv_fn = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };

  LimitsFile file = hami::vgpu::ParseLimitsFile(text, kPath);
  CheckFile(text, file);
  Resolution r = hami::vgpu::ResolveConfig(file, getenv_fn);
  CheckResolution(file, env, r);

  // The same inputs resolve the same way.
  Resolution again = hami::vgpu::ResolveConfig(file, getenv_fn);
  Check(again.config.memory_limit == r.config.memory_limit &&
        again.config.sm_limit == r.config.sm_limit && again.problems == r.problems &&
        again.closed == r.closed && again.config.settings.size() == r.config.settings.size());

  // With no file, only the environment can be a source.
  LimitsFile absent;
  absent.path = kPath;
  Resolution env_only = hami::vgpu::ResolveConfig(absent, getenv_fn);
  for (const Setting& s : env_only.config.settings) Check(s.source == Source::kEnvironment);
  CheckResolution(absent, env, env_only);
  return 0;
}
