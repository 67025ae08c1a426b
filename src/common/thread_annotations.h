// Clang's thread-safety analysis (-Wthread-safety): what a mutex guards and what a function
// needs held, written as attributes the compiler checks instead of comments. Under GCC the
// macros expand to nothing; the clang build in CI checks them.
#pragma once

#if defined(__clang__)
#define HAMI_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define HAMI_THREAD_ATTRIBUTE(x)
#endif

// Abseil's internal thread_annotations.h (reached through the gRPC headers) defines some of
// the same legacy names with the same meaning; ours replace them without a warning.
#undef GUARDED_BY
#undef PT_GUARDED_BY
#undef ACQUIRED_BEFORE
#undef ACQUIRED_AFTER
#undef NO_THREAD_SAFETY_ANALYSIS

#define CAPABILITY(x) HAMI_THREAD_ATTRIBUTE(capability(x))
#define SCOPED_CAPABILITY HAMI_THREAD_ATTRIBUTE(scoped_lockable)
#define GUARDED_BY(x) HAMI_THREAD_ATTRIBUTE(guarded_by(x))
#define PT_GUARDED_BY(x) HAMI_THREAD_ATTRIBUTE(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) HAMI_THREAD_ATTRIBUTE(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) HAMI_THREAD_ATTRIBUTE(acquired_after(__VA_ARGS__))
#define REQUIRES(...) HAMI_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) HAMI_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define RELEASE(...) HAMI_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) HAMI_THREAD_ATTRIBUTE(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) HAMI_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
#define RETURN_CAPABILITY(x) HAMI_THREAD_ATTRIBUTE(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS HAMI_THREAD_ATTRIBUTE(no_thread_safety_analysis)
