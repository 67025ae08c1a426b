#include "common/raw_log.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace hami {

namespace {

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kOff:
      break;
  }
  return "?";
}

}  // namespace

void RawLogger::Log(LogLevel level, const char* fmt, ...) const {
  if (!Enabled(level)) return;
  va_list args;
  va_start(args, fmt);
  VLog(level, fmt, args);
  va_end(args);
}

void RawLogger::VLog(LogLevel level, const char* fmt, va_list args) const {
  if (Enabled(level)) Write(level, fmt, args);
}

void RawLogger::Always(LogLevel level, const char* fmt, ...) const {
  va_list args;
  va_start(args, fmt);
  Write(level, fmt, args);
  va_end(args);
}

void RawLogger::Write(LogLevel level, const char* fmt, va_list args) const {
  char line[kMaxLine];
  int n =
      std::snprintf(line, sizeof(line), "[%s pid=%d %s] ", tag_, int(getpid()), LevelName(level));
  if (n < 0) return;
  size_t used = size_t(n) < sizeof(line) ? size_t(n) : sizeof(line) - 1;
  int m = std::vsnprintf(line + used, sizeof(line) - used, fmt, args);
  if (m < 0) return;
  used += size_t(m);
  if (used >= sizeof(line) - 1) {  // truncated: mark it and keep room for '\n'
    used = sizeof(line) - 1;
    std::memcpy(line + used - 3, "...", 3);
  }
  line[used++] = '\n';
  const char* p = line;
  while (used > 0) {
    ssize_t w = ::write(fd_.load(std::memory_order_relaxed), p, used);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    used -= size_t(w);
  }
}

}  // namespace hami
