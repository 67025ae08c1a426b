#include "kube/rate_limiter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace hami::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST(RateLimiter, StartsFullAndThenSpacesRequestsByOneOverQps) {
  FakeClock clock;
  RateLimiter limiter(/*qps=*/10, /*burst=*/3, &clock);
  EXPECT_EQ(limiter.Reserve(), nanoseconds(0));
  EXPECT_EQ(limiter.Reserve(), nanoseconds(0));
  EXPECT_EQ(limiter.Reserve(), nanoseconds(0));
  EXPECT_EQ(limiter.Reserve(), milliseconds(100));
  EXPECT_EQ(limiter.Reserve(), milliseconds(200));  // queued behind the previous caller
}

TEST(RateLimiter, RefillsWithTimeButNeverBeyondBurst) {
  FakeClock clock;
  RateLimiter limiter(/*qps=*/10, /*burst=*/2, &clock);
  EXPECT_EQ(limiter.Reserve(), nanoseconds(0));
  EXPECT_EQ(limiter.Reserve(), nanoseconds(0));
  clock.Advance(std::chrono::seconds(60));  // would be 600 tokens without the cap
  EXPECT_EQ(limiter.Reserve(), nanoseconds(0));
  EXPECT_EQ(limiter.Reserve(), nanoseconds(0));
  EXPECT_EQ(limiter.Reserve(), milliseconds(100));
  clock.Advance(milliseconds(150));  // the promised token plus half of the next
  EXPECT_EQ(limiter.Reserve(), milliseconds(50));
}

TEST(RateLimiter, WaitSleepsOnTheClockForTheReservedTime) {
  FakeClock clock;
  RateLimiter limiter(/*qps=*/5, /*burst=*/1, &clock);
  EXPECT_EQ(limiter.Wait(), nanoseconds(0));
  EXPECT_EQ(limiter.Wait(), milliseconds(200));
  EXPECT_EQ(limiter.Wait(), milliseconds(200));  // the clock moved on with the first sleep
  EXPECT_EQ(clock.slept(), milliseconds(400));
  EXPECT_EQ(clock.sleeps(), 2);
}

TEST(RateLimiter, ZeroQpsMeansUnlimited) {
  FakeClock clock;
  RateLimiter limiter(/*qps=*/0, /*burst=*/1, &clock);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(limiter.Wait(), nanoseconds(0));
  EXPECT_EQ(clock.sleeps(), 0);
}

TEST(RateLimiter, ThreadsShareOneBucketAndEachGetsADistinctSlot) {
  FakeClock clock;  // stands still: the delays show the order in which tokens were promised
  RateLimiter limiter(/*qps=*/100, /*burst=*/4, &clock);
  constexpr int kThreads = 4, kPerThread = 25;
  std::vector<std::vector<nanoseconds>> delays(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) delays[size_t(t)].push_back(limiter.Reserve());
    });
  }
  for (auto& t : threads) t.join();
  std::vector<nanoseconds> all;
  for (auto& d : delays) all.insert(all.end(), d.begin(), d.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), size_t(kThreads * kPerThread));
  for (size_t i = 0; i < all.size(); ++i) {
    nanoseconds want = i < 4 ? nanoseconds(0) : milliseconds(10) * int64_t(i - 3);
    EXPECT_NEAR(double(all[i].count()), double(want.count()), 1000.0) << "slot " << i;
  }
}

TEST(RateLimiter, SteadyClockWaitsRoughlyTheRate) {
  RateLimiter limiter(/*qps=*/100, /*burst=*/1);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) limiter.Wait();
  // Five waits of 10 ms: at least 45 ms (the first token was free).
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(45));
}

}  // namespace
}  // namespace hami::kube
