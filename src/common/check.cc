#include "common/check.h"

#include <cstdlib>

#include "common/raw_log.h"

namespace hami {
namespace {

constinit std::atomic<uint64_t> g_bugs{0};
constinit std::atomic<const RawLogger*> g_logger{nullptr};
constinit RawLogger g_default_logger("hami", LogLevel::kError);

const RawLogger& Logger() {
  const RawLogger* l = g_logger.load(std::memory_order_acquire);
  return l != nullptr ? *l : g_default_logger;
}

}  // namespace

uint64_t BugCount() { return g_bugs.load(std::memory_order_relaxed); }

void SetCheckLogger(const RawLogger* logger) { g_logger.store(logger, std::memory_order_release); }

namespace check_internal {

void ReportBug(const char* what, const char* file, int line, std::atomic<bool>* logged) {
  uint64_t n = g_bugs.fetch_add(1, std::memory_order_relaxed) + 1;
  if (logged->exchange(true, std::memory_order_relaxed)) return;
  Logger().Log(LogLevel::kError,
               "bug: %s (%s:%d); the call fails closed; logged once per site, %llu so far in "
               "this process",
               what, file, line, static_cast<unsigned long long>(n));
}

void CheckFailed(const char* what, const char* file, int line) {
  Logger().Log(LogLevel::kError, "check failed: %s (%s:%d); aborting", what, file, line);
  std::abort();
}

}  // namespace check_internal
}  // namespace hami
