#include "kube/rate_limiter.h"

#include <algorithm>
#include <thread>

namespace hami::kube {
namespace {

class SteadyClock : public Clock {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
  void SleepFor(std::chrono::nanoseconds d) override {
    if (d > std::chrono::nanoseconds::zero()) std::this_thread::sleep_for(d);
  }
};

}  // namespace

Clock* Clock::Steady() {
  static auto* clock = new SteadyClock;
  return clock;
}

Clock::TimePoint FakeClock::Now() { return TimePoint(std::chrono::nanoseconds(now_ns_.load())); }

void FakeClock::SleepFor(std::chrono::nanoseconds d) {
  if (d <= std::chrono::nanoseconds::zero()) return;
  sleeps_.fetch_add(1);
  slept_ns_.fetch_add(d.count());
  now_ns_.fetch_add(d.count());
}

void FakeClock::Advance(std::chrono::nanoseconds d) { now_ns_.fetch_add(d.count()); }

RateLimiter::RateLimiter(double qps, int burst, Clock* clock)
    : qps_(qps), burst_(std::max(burst, 1)), clock_(clock), tokens_(burst_), last_(clock->Now()) {}

std::chrono::nanoseconds RateLimiter::Reserve() {
  if (qps_ <= 0) return std::chrono::nanoseconds::zero();
  std::lock_guard lock(mu_);
  Clock::TimePoint now = clock_->Now();
  if (now > last_) {
    double elapsed_s = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(double(burst_), tokens_ + elapsed_s * qps_);
    last_ = now;
  }
  tokens_ -= 1;
  if (tokens_ >= 0) return std::chrono::nanoseconds::zero();
  return std::chrono::nanoseconds(int64_t(-tokens_ / qps_ * 1e9 + 0.5));
}

std::chrono::nanoseconds RateLimiter::Wait() {
  std::chrono::nanoseconds d = Reserve();
  clock_->SleepFor(d);
  return d;
}

}  // namespace hami::kube
