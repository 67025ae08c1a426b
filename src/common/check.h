// Assertion tiers (the failure policy is written in docs/design.md, "Failure policy").
//
//   if (HAMI_BUG(broken, "literal")) return <fail-closed choice>;
//       `broken` true means an invariant of ours does not hold (a bug, not bad input). The
//       process-wide BugCount() goes up, the site logs once through a raw logger (one line
//       naming the literal, file and line; async-signal-safe, no allocation), and the macro
//       yields true so the caller takes the fail-closed branch it wrote (refuse the call,
//       treat a limit as unreadable). Use it wherever the process can keep going safely: in
//       the interposer always (it never aborts its host process).
//
//   HAMI_CHECK(invariant, "literal");
//       A release assert: when `invariant` is false it logs one line and aborts. Only for
//       daemons and tools whose state is no longer trustworthy and where stopping is the
//       safe choice (a supervisor restarts them); never in libvgpu.so.
//
// Both take a string literal (enforced at compile time) and evaluate their condition once.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace hami {

class RawLogger;

// How many HAMI_BUG conditions have fired in this process, all sites together. Thread-safe;
// async-signal-safe.
uint64_t BugCount();

// Where HAMI_BUG and HAMI_CHECK write; null (the default) means a logger tagged "hami" on
// stderr. The logger must outlive every later report (a static). The interposer passes its own.
void SetCheckLogger(const RawLogger* logger);

namespace check_internal {
void ReportBug(const char* what, const char* file, int line, std::atomic<bool>* logged);
[[noreturn]] void CheckFailed(const char* what, const char* file, int line);
}  // namespace check_internal

}  // namespace hami

#define HAMI_BUG(broken, literal)                                                           \
  ({                                                                                        \
    bool hami_bug_ = static_cast<bool>(broken);                                             \
    if (__builtin_expect(hami_bug_, 0)) {                                                   \
      static constinit std::atomic<bool> hami_bug_logged_{false};                           \
      ::hami::check_internal::ReportBug("" literal, __FILE__, __LINE__, &hami_bug_logged_); \
    }                                                                                       \
    hami_bug_;                                                                              \
  })

#define HAMI_CHECK(invariant, literal)                                     \
  do {                                                                     \
    if (__builtin_expect(!static_cast<bool>(invariant), 0)) {              \
      ::hami::check_internal::CheckFailed("" literal, __FILE__, __LINE__); \
    }                                                                      \
  } while (0)
