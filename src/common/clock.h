// Monotonic time in nanoseconds (CLOCK_MONOTONIC: one clock for every process on a host,
// so timestamps in shared files compare across processes).
#pragma once

#include <time.h>

#include <cerrno>
#include <cstdint>

namespace hami {

inline int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Sleeps until MonotonicNs() >= deadline_ns (restarts after signals).
inline void SleepUntilNs(int64_t deadline_ns) {
  timespec ts{time_t(deadline_ns / 1000000000), long(deadline_ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

inline void SleepForNs(int64_t ns) {
  if (ns > 0) SleepUntilNs(MonotonicNs() + ns);
}

}  // namespace hami
