// The daemons' logger: hami-device-plugin, hami-scheduler, hami-monitor, the Kubernetes
// library they share, and the simulated cluster's components (`hami sim ...`). libvgpu and
// the simulated driver keep the raw logger (common/raw_log.h) and LIBCUDA_LOG_LEVEL.
//
// One line per event, logfmt: `ts=<UTC, ms> level=<error|warn|info|debug|trace>
// component=<daemon> pid=<n>[ v=<n>]` (debug: an info line of verbosity 4, trace: 5 and up) and
// then the caller's `key=value` pairs, by convention `event=<name>` first. A value that may hold a
// space or a quote goes through Quoted().
//
// What is written follows klog's rules, which a HAMi operator already knows:
// - `--log-level` (error, warn, info, debug, trace) is the lowest severity written; debug
//   and trace are info with verbosity 4 and 5 at least.
// - `--v=N` writes the info lines of verbosity N and below: 0 the default (starts, stops,
//   changes of state), 2 useful steady-state detail, 4 debug (each bind, each allocation),
//   5 trace. Verbosity lines are info lines: --log-level=warn drops them whatever --v says.
//
// Thread-safe: the settings are atomics, and each line is formatted on the stack and written
// with one write(2), so lines of many threads do not interleave. Allocates nothing.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

inline constexpr int kMaxVerbosity = 10;
inline constexpr int kMaxLine = 4096;  // longer lines end with "..."

struct Settings {
  // Names the process in every line ("hami-scheduler"); at most 63 bytes are kept. Before
  // Configure, the program's own name.
  std::string component;
  Level level = Level::kInfo;
  int verbosity = 0;  // 0..kMaxVerbosity
};

// "error", "warn" (or "warning"), "info", "debug", "trace"; anything else is an error naming
// `flag` and the text.
Result<Level> ParseLevel(std::string_view text, std::string_view flag = "--log-level");
std::string_view LevelName(Level level);

// Sets the process's settings; main() calls it once, before starting threads (a later call
// is safe, and takes effect line by line).
void Configure(const Settings& settings);
Settings Current();

// Where lines go; tests point it at a pipe. Default 2 (stderr).
void SetFd(int fd);

// Whether a line of this severity, or an info line of this verbosity, would be written.
bool Enabled(Level level);
bool V(int verbosity);

void Log(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void VLog(int verbosity, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// `text` as a logfmt value: as it is when it is a plain word, else in double quotes with
// '"', '\\' and control characters escaped.
std::string Quoted(std::string_view text);

}  // namespace hami::log

// The arguments of a line that is not written are not evaluated.
#define HAMI_LOG(level, ...)                                    \
  do {                                                          \
    if (::hami::log::Enabled(::hami::log::Level::level)) {      \
      ::hami::log::Log(::hami::log::Level::level, __VA_ARGS__); \
    }                                                           \
  } while (0)
#define HAMI_VLOG(verbosity, ...)                                             \
  do {                                                                        \
    if (::hami::log::V(verbosity)) ::hami::log::VLog(verbosity, __VA_ARGS__); \
  } while (0)
