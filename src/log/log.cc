#include "log/log.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace hami::log {

namespace {

constexpr size_t kComponentBytes = 64;

// The settings, each an atomic of its own: a line reads them without a lock.
std::atomic<int> g_level{int(Level::kInfo)};
std::atomic<int> g_verbosity{0};
std::atomic<int> g_fd{2};
// The component's name is written once by Configure; a line that races a second Configure
// may print a mix of the two names, never an unterminated one (the last byte stays 0).
char g_component[kComponentBytes] = {};
std::atomic<bool> g_component_set{false};

int EffectiveVerbosity() {
  int v = g_verbosity.load(std::memory_order_relaxed);
  int level = g_level.load(std::memory_order_relaxed);
  if (level >= int(Level::kTrace)) return v > 5 ? v : 5;
  if (level >= int(Level::kDebug)) return v > 4 ? v : 4;
  return v;
}

const char* Component() {
  if (g_component_set.load(std::memory_order_acquire)) return g_component;
  return program_invocation_short_name;
}

void Write(const char* level_name, int verbosity, const char* fmt, va_list args) {
  char line[kMaxLine];
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm utc{};
  gmtime_r(&now.tv_sec, &utc);
  int n = std::snprintf(line, sizeof(line),
                        "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s component=%s pid=%d ",
                        utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                        utc.tm_sec, now.tv_nsec / 1000000, level_name, Component(), int(getpid()));
  if (n < 0) return;
  size_t used = size_t(n) < sizeof(line) ? size_t(n) : sizeof(line) - 1;
  if (verbosity > 0 && used < sizeof(line)) {
    int m = std::snprintf(line + used, sizeof(line) - used, "v=%d ", verbosity);
    if (m > 0) used += size_t(m) < sizeof(line) - used ? size_t(m) : sizeof(line) - used - 1;
  }
  int m = std::vsnprintf(line + used, sizeof(line) - used, fmt, args);
  if (m < 0) return;
  used += size_t(m);
  if (used >= sizeof(line) - 1) {  // truncated: mark it and keep room for '\n'
    used = sizeof(line) - 1;
    std::memcpy(line + used - 3, "...", 3);
  }
  line[used++] = '\n';
  const char* p = line;
  int fd = g_fd.load(std::memory_order_relaxed);
  while (used > 0) {
    ssize_t w = ::write(fd, p, used);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    used -= size_t(w);
  }
}

}  // namespace

Result<Level> ParseLevel(std::string_view text, std::string_view flag) {
  if (text == "error") return Level::kError;
  if (text == "warn" || text == "warning") return Level::kWarn;
  if (text == "info") return Level::kInfo;
  if (text == "debug") return Level::kDebug;
  if (text == "trace") return Level::kTrace;
  return Error(ErrorCode::kInvalidArgument, std::string(flag) + "='" + std::string(text) +
                                                "': not a log level (error, warn, info, debug, "
                                                "trace)");
}

std::string_view LevelName(Level level) {
  switch (level) {
    case Level::kError:
      return "error";
    case Level::kWarn:
      return "warn";
    case Level::kInfo:
      return "info";
    case Level::kDebug:
      return "debug";
    case Level::kTrace:
      return "trace";
  }
  return "?";
}

void Configure(const Settings& settings) {
  if (!settings.component.empty()) {
    size_t n = settings.component.size() < kComponentBytes - 1 ? settings.component.size()
                                                               : kComponentBytes - 1;
    std::memcpy(g_component, settings.component.data(), n);
    g_component[n] = '\0';
    g_component_set.store(true, std::memory_order_release);
  }
  g_level.store(int(settings.level), std::memory_order_relaxed);
  int v = settings.verbosity < 0 ? 0 : settings.verbosity;
  g_verbosity.store(v > kMaxVerbosity ? kMaxVerbosity : v, std::memory_order_relaxed);
}

Settings Current() {
  Settings s;
  s.component = Component();
  s.level = Level(g_level.load(std::memory_order_relaxed));
  s.verbosity = g_verbosity.load(std::memory_order_relaxed);
  return s;
}

void SetFd(int fd) { g_fd.store(fd, std::memory_order_relaxed); }

bool Enabled(Level level) {
  int threshold = g_level.load(std::memory_order_relaxed);
  if (level <= Level::kInfo) return int(level) <= threshold;
  return V(level == Level::kDebug ? 4 : 5);
}

bool V(int verbosity) {
  if (g_level.load(std::memory_order_relaxed) < int(Level::kInfo)) return false;
  return verbosity <= EffectiveVerbosity();
}

void Log(Level level, const char* fmt, ...) {
  if (!Enabled(level)) return;
  int verbosity = level == Level::kDebug ? 4 : level == Level::kTrace ? 5 : 0;
  va_list args;
  va_start(args, fmt);
  Write(LevelName(level).data(), verbosity, fmt, args);
  va_end(args);
}

void VLog(int verbosity, const char* fmt, ...) {
  if (!V(verbosity)) return;
  va_list args;
  va_start(args, fmt);
  Level named = verbosity >= 5 ? Level::kTrace : verbosity >= 4 ? Level::kDebug : Level::kInfo;
  Write(LevelName(named).data(), verbosity, fmt, args);
  va_end(args);
}

std::string Quoted(std::string_view text) {
  bool plain = !text.empty();
  for (char c : text) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20 ||
        c == 0x7f) {
      plain = false;
      break;
    }
  }
  if (plain) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
          out += hex;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace hami::log
