#include "vgpu/call_census.h"

#include <gtest/gtest.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

namespace hami::vgpu {
namespace {

using Count = CallCensus::Count;

// Both writer kinds: the plain stores read through a barrier, and the fenced fallback.
class CallCensusTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) census_.UseFences();
  }
  CallCensus census_;
};

TEST_P(CallCensusTest, CountsEntriesAndWhatIsInFlight) {
  EXPECT_EQ(census_.Read(), (Count{0, 0}));
  census_.Enter();
  EXPECT_EQ(census_.Read(), (Count{1, 1}));
  census_.Enter();  // a nested call (a free inside an allocation's undo)
  census_.Exit();
  EXPECT_EQ(census_.Read(), (Count{2, 1}));
  census_.Exit();
  EXPECT_EQ(census_.Read(), (Count{2, 0}));
}

TEST_P(CallCensusTest, SeesAnotherThreadInFlightAndAfter) {
  std::atomic<int> stage{0};
  std::thread t([&] {
    census_.Enter();
    stage.store(1);
    stage.notify_all();
    stage.wait(1);
    census_.Exit();
    stage.store(3);
    stage.notify_all();
  });
  stage.wait(0);
  const Count during = census_.Read();
  EXPECT_EQ(during.in_flight, 1u);
  EXPECT_EQ(during.begun, 1u);
  stage.store(2);
  stage.notify_all();
  stage.wait(2);
  t.join();
  EXPECT_EQ(census_.Read(), (Count{1, 0}));
}

// The window rule of modules.h: a reading taken before and after compares equal only when no
// call began in between, whichever thread made it and whether or not that thread is gone.
TEST_P(CallCensusTest, AnyCallBetweenTwoReadingsChangesTheCount) {
  const Count before = census_.Read();
  std::thread([&] {
    census_.Enter();
    census_.Exit();
  }).join();
  const Count after = census_.Read();
  EXPECT_NE(before, after);
  EXPECT_EQ(after.begun, before.begun + 1);
  EXPECT_EQ(after.in_flight, 0u);
  EXPECT_EQ(census_.Read(), after);  // and nothing changes it while nothing runs
}

// Threads that exit give their counters back; the counts they made stay, so the sum of begun
// calls never goes down however many threads come and go (more than the table holds).
TEST_P(CallCensusTest, CountsSurviveThreadsComingAndGoing) {
  constexpr int kThreads = CallCensus::kCounters + 40;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&] {
        for (int k = 0; k < 10; ++k) {
          census_.Enter();
          census_.Exit();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(census_.Read(), (Count{uint64_t(10) * kThreads * uint64_t(round + 1), 0}));
  }
}

// Many threads at once, more than the table holds, some sharing the overflow counter: no
// entry is lost.
TEST_P(CallCensusTest, ConcurrentWritersLoseNothing) {
  constexpr int kThreads = CallCensus::kCounters + 8;
  constexpr int kCalls = 200;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      census_.Enter();  // every thread holds a counter before any finishes
      census_.Exit();
      ready.fetch_add(1);
      go.wait(false);
      for (int k = 1; k < kCalls; ++k) {
        census_.Enter();
        census_.Exit();
      }
    });
  }
  while (ready.load() < kThreads) std::this_thread::yield();
  go.store(true);
  go.notify_all();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(census_.Read(), (Count{uint64_t(kThreads) * kCalls, 0}));
}

// The counter table is made by the first call of the process: threads whose first calls race
// to make it share one table, and no call is lost to a table that lost the race.
TEST_P(CallCensusTest, FirstCallsRacingToMakeTheTableLoseNothing) {
  constexpr int kThreads = 8;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      census_.Enter();
      census_.Exit();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(census_.Read(), (Count{kThreads, 0}));
}

// A fork child of a process that never made a call has no table to reset.
TEST_P(CallCensusTest, ForkChildBeforeAnyCallStartsAtZero) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    census_.ResetInForkChild();
    bool ok = census_.Read() == Count{0, 0};
    census_.Enter();
    ok = ok && census_.Read() == Count{1, 1};
    census_.Exit();
    _exit(ok && census_.Read() == Count{1, 0} ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(census_.Read(), (Count{0, 0}));
}

// A fork child has one thread: the parent's other threads' calls in flight are not its own.
TEST_P(CallCensusTest, ForkChildKeepsOnlyItsOwnCallsInFlight) {
  std::atomic<int> stage{0};
  std::thread t([&] {
    census_.Enter();
    stage.store(1);
    stage.notify_all();
    stage.wait(1);
    census_.Exit();
  });
  stage.wait(0);
  census_.Enter();  // this thread, inside a call, forks (a child made from inside a hook)
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    census_.ResetInForkChild();
    const Count c = census_.Read();
    bool ok = c.in_flight == 1 && c.begun == 2;
    census_.Exit();
    census_.Enter();
    census_.Exit();
    const Count later = census_.Read();
    ok = ok && later.in_flight == 0 && later.begun == 3;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  census_.Exit();
  stage.store(2);
  stage.notify_all();
  t.join();
  EXPECT_EQ(census_.Read(), (Count{2, 0}));
}

INSTANTIATE_TEST_SUITE_P(Writers, CallCensusTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Fenced") : std::string("Asymmetric");
                         });

// On this kernel the cheap writers are in use (membarrier's private expedited barrier is
// available to an unconfined process); the reading that finds out keeps them.
TEST(CallCensus, UsesTheBarrierWhereTheKernelHasIt) {
  const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0u, 0);
  if (cmds <= 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) {
    GTEST_SKIP() << "this kernel (or its seccomp profile) offers no private expedited "
                    "membarrier; the fenced writers, tested above, are what runs here";
  }
  CallCensus census;
  census.Enter();
  census.Exit();
  EXPECT_EQ(census.Read(), (Count{1, 0}));
  EXPECT_TRUE(census.asymmetric());
}

}  // namespace
}  // namespace hami::vgpu
