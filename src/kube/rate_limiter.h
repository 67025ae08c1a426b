// Client-side rate limiting as client-go does it: a token bucket that refills at `qps` tokens
// per second up to `burst` and starts full (flowcontrol.NewTokenBucketRateLimiter, i.e.
// golang.org/x/time/rate). A caller takes one token per request; when none is left it is given
// the time at which its token will exist and waits for it, so callers are served in the order
// they asked and the long-run rate never exceeds qps.
//
// Time comes from a Clock so that tests can run the limiter (and the client's retry waits)
// without sleeping.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>

namespace hami::kube {

// Monotonic time and waiting. Implementations must be thread-safe.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() = 0;
  virtual void SleepFor(std::chrono::nanoseconds d) = 0;  // d <= 0 returns at once

  // std::chrono::steady_clock and a real sleep. Never destroyed.
  static Clock* Steady();
};

// A clock for tests: Now() stands still until SleepFor or Advance moves it; SleepFor returns at
// once after adding `d` to the time and to slept(). Thread-safe.
class FakeClock : public Clock {
 public:
  TimePoint Now() override;
  void SleepFor(std::chrono::nanoseconds d) override;
  void Advance(std::chrono::nanoseconds d);
  std::chrono::nanoseconds slept() const { return std::chrono::nanoseconds(slept_ns_.load()); }
  int sleeps() const { return sleeps_.load(); }  // calls of SleepFor with d > 0

 private:
  std::atomic<int64_t> now_ns_{int64_t(1) << 40};  // far from 0, like a real steady clock
  std::atomic<int64_t> slept_ns_{0};
  std::atomic<int> sleeps_{0};
};

// Thread-safe; shared by every thread of a Client. `clock` is not owned and must outlive the
// limiter.
class RateLimiter {
 public:
  // qps <= 0: unlimited (Wait and Reserve return at once). burst < 1 counts as 1.
  RateLimiter(double qps, int burst, Clock* clock = Clock::Steady());

  // Takes a token and returns how long from now the caller must wait before using it (zero
  // while the bucket has tokens). Never blocks.
  std::chrono::nanoseconds Reserve();
  // Reserve(), then sleeps that long on the clock. Returns the time waited.
  std::chrono::nanoseconds Wait();

  double qps() const { return qps_; }
  int burst() const { return burst_; }

 private:
  const double qps_;
  const int burst_;
  Clock* const clock_;
  std::mutex mu_;
  double tokens_;  // may go negative: tokens promised to waiting callers
  Clock::TimePoint last_;
};

}  // namespace hami::kube
