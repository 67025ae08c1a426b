// Which sanitizer this translation unit is built with, as GCC (__SANITIZE_*__) and clang
// (__has_feature) each say it: HAMI_TSAN and HAMI_ASAN are 1 or 0, for #if, and the
// constants below for ordinary code.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define HAMI_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HAMI_TSAN 1
#endif
#endif
#ifndef HAMI_TSAN
#define HAMI_TSAN 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define HAMI_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAMI_ASAN 1
#endif
#endif
#ifndef HAMI_ASAN
#define HAMI_ASAN 0
#endif

namespace hami {

inline constexpr bool kThreadSanitizer = HAMI_TSAN;
inline constexpr bool kAddressSanitizer = HAMI_ASAN;

}  // namespace hami
