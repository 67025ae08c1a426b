// The probe lock: exclusion, the hand-over on release, a holder killed with SIGKILL, the
// bound that a stuck holder hits and a moving queue does not, the file and its directory.
//
// No sleep orders anything here: a waiter's tries are observed through its clock (called once
// per try), its sleep through /proc/self/task/<tid>/syscall, and the tests that reason about
// time give the waiter a clock that advances only when the test answers it.
#include "vgpu/probe_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/temp_dir.h"

namespace hami::vgpu {
namespace {

constexpr int64_t kHourNs = 3'600'000'000'000;

// Options under which only a release (or the test's clock) ends a wait.
ProbeLockOptions Patient() {
  ProbeLockOptions o;
  o.stall_ns = kHourNs;
  o.bound_ns = 10 * kHourNs;
  o.recheck_ns = 60'000'000'000;  // a minute: long past any hand-over
  return o;
}

// A clock that counts the waiter's tries (waking whoever awaits a count) and otherwise tells
// the real time.
struct CountingClock {
  std::atomic<int> calls{0};
  static int64_t Now(void* arg) {
    auto* self = static_cast<CountingClock*>(arg);
    self->calls.fetch_add(1);
    self->calls.notify_all();
    return MonotonicNs();
  }
  ProbeLockClock clock() { return {&CountingClock::Now, this}; }
  // Returns once the waiter has tried at least `n` times.
  void AwaitCalls(int n) const {
    for (int c = calls.load(); c < n; c = calls.load()) calls.wait(c);
  }
};

// A clock the test steps: each call (one per try of the waiter) blocks until the test
// answers it with a time. Between a call and its answer the waiter can do nothing, so the
// test can change the lock's holder with no race against it.
class SteppedClock {
 public:
  static int64_t Now(void* arg) { return static_cast<SteppedClock*>(arg)->Await(); }
  ProbeLockClock clock() { return {&SteppedClock::Now, this}; }

  // Waiter side, once Acquire has returned.
  void Finish() {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
    cv_.notify_all();
  }

  // Test side: the number of the waiter's pending call (from 1), or nullopt once it finished.
  std::optional<int> NextCall() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return done_ || calls_ > answered_; });
    if (calls_ > answered_) return calls_;
    return std::nullopt;
  }
  void Answer(int64_t now_ns) {
    std::lock_guard<std::mutex> l(mu_);
    now_ = now_ns;
    answered_ = calls_;
    cv_.notify_all();
  }

 private:
  int64_t Await() {
    std::unique_lock<std::mutex> l(mu_);
    const int mine = ++calls_;
    cv_.notify_all();
    cv_.wait(l, [&] { return answered_ >= mine; });
    return now_;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  int answered_ = 0;
  int64_t now_ = 0;
  bool done_ = false;
};

pid_t Gettid() { return pid_t(syscall(SYS_gettid)); }

// True while thread `tid` of this process is blocked in futex(2).
bool InFutex(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  in >> number;
  return number == SYS_futex;
}

// Waits until the waiter has tried at least once and sleeps in its futex wait.
void AwaitSleepingWaiter(const CountingClock& clock, const std::atomic<pid_t>& tid) {
  clock.AwaitCalls(1);  // it has tried (and stored its tid before that)
  while (!InFutex(tid.load())) {
    // The kernel announces no entry into futex(2): a poll of its view of the thread.
    SleepForNs(1'000'000);
  }
}

// A waiter on its own thread.
struct Waiter {
  std::atomic<pid_t> tid{0};
  ProbeLockReport report;
  bool held_after = false;
  std::thread thread;

  void Start(const std::string& path, ProbeLockOptions options,
             std::function<void()> after = nullptr) {
    thread = std::thread([this, path, options, after] {
      tid.store(Gettid());
      ProbeLock lock = ProbeLock::Acquire(path, options, &report);
      held_after = lock.held();
      if (after) after();
    });
  }
  void Join() { thread.join(); }
};

class ProbeLockTest : public ::testing::Test {
 protected:
  TempDir dir_{"hami-probe-lock"};
  std::string path_ = dir_.File("probe.lock");
};

TEST_F(ProbeLockTest, FreeLockIsTakenAtOnceAndCreatesTheFile) {
  ProbeLockReport report;
  ProbeLock lock = ProbeLock::Acquire(path_, Patient(), &report);
  ASSERT_TRUE(lock.held()) << report.error;
  EXPECT_EQ(report.outcome, ProbeLockOutcome::kAcquired);
  EXPECT_EQ(report.sleeps, 0u);
  EXPECT_TRUE(report.doorbell);
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  EXPECT_GE(st.st_size, 4);
}

TEST_F(ProbeLockTest, CreatesTheMissingDirectoryShared) {
  const std::string dir = dir_.File("vgpulock");
  const std::string path = dir + "/probe.lock";
  ProbeLockReport report;
  ProbeLock lock = ProbeLock::Acquire(path, Patient(), &report);
  ASSERT_TRUE(lock.held()) << report.error;
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  EXPECT_EQ(stat(path.c_str(), &st), 0);
}

TEST_F(ProbeLockTest, UnavailableWhenMoreThanTheDirectoryIsMissing) {
  const std::string path = dir_.File("a/b/probe.lock");
  ProbeLockReport report;
  ProbeLock lock = ProbeLock::Acquire(path, Patient(), &report);
  EXPECT_FALSE(lock.held());
  EXPECT_EQ(report.outcome, ProbeLockOutcome::kUnavailable);
  EXPECT_NE(report.error.find(path), std::string::npos) << report.error;
}

TEST_F(ProbeLockTest, RefusesASymlink) {
  const std::string target = dir_.File("elsewhere");
  ASSERT_EQ(symlink(target.c_str(), path_.c_str()), 0);
  ProbeLockReport report;
  ProbeLock lock = ProbeLock::Acquire(path_, Patient(), &report);
  EXPECT_FALSE(lock.held());
  EXPECT_EQ(report.outcome, ProbeLockOutcome::kUnavailable);
  EXPECT_NE(report.error.find("symbolic link"), std::string::npos) << report.error;
  struct stat st;
  EXPECT_NE(lstat(target.c_str(), &st), 0) << "the link was followed";
}

TEST_F(ProbeLockTest, AnotherOpenCannotTakeItWhileHeld) {
  ProbeLockReport first_report, second_report;
  ProbeLock first = ProbeLock::Acquire(path_, Patient(), &first_report);
  ASSERT_TRUE(first.held());
  ProbeLockOptions no_wait = Patient();
  no_wait.stall_ns = 0;
  ProbeLock second = ProbeLock::Acquire(path_, no_wait, &second_report);
  EXPECT_FALSE(second.held());
  EXPECT_EQ(second_report.outcome, ProbeLockOutcome::kStalled);
  first.Release();
  EXPECT_FALSE(first.held());
  second = ProbeLock::Acquire(path_, no_wait, &second_report);
  EXPECT_TRUE(second.held());
  EXPECT_EQ(second_report.outcome, ProbeLockOutcome::kAcquired);
}

TEST_F(ProbeLockTest, ReleaseHandsTheLockToTheSleepingWaiter) {
  ProbeLockReport report;
  ProbeLock holder = ProbeLock::Acquire(path_, Patient(), &report);
  ASSERT_TRUE(holder.held());

  CountingClock clock;
  ProbeLockOptions options = Patient();
  options.clock = clock.clock();
  Waiter waiter;
  waiter.Start(path_, options);
  AwaitSleepingWaiter(clock, waiter.tid);
  holder.Release();
  waiter.Join();

  EXPECT_TRUE(waiter.held_after);
  EXPECT_EQ(waiter.report.outcome, ProbeLockOutcome::kAcquired);
  EXPECT_GE(waiter.report.sleeps, 1u);
  // The release ended the sleep, not the minute-long recheck.
  EXPECT_EQ(waiter.report.woken, waiter.report.sleeps);
  EXPECT_EQ(waiter.report.rechecks, 0u);
  EXPECT_GE(waiter.report.holder_changes, 1u);
}

TEST_F(ProbeLockTest, HolderKilledWithSigkillDoesNotBlockTheNextWaiter) {
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ProbeLockReport r;
    ProbeLock lock = ProbeLock::Acquire(path_, Patient(), &r);
    const char c = lock.held() ? '1' : '0';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    for (;;) pause();  // holds the lock until killed
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(c, '1') << "the child could not take the lock";

  CountingClock clock;
  ProbeLockOptions options = Patient();
  options.recheck_ns = 20'000'000;  // how soon a sleeping waiter looks for a dead holder
  options.clock = clock.clock();
  Waiter waiter;
  waiter.Start(path_, options);
  AwaitSleepingWaiter(clock, waiter.tid);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  waiter.Join();

  EXPECT_TRUE(waiter.held_after);
  EXPECT_EQ(waiter.report.outcome, ProbeLockOutcome::kAcquired);
  // Nobody released: the kernel dropped the dead holder's lock and a recheck found it.
  EXPECT_EQ(waiter.report.holder_changes, 0u);
  EXPECT_GE(waiter.report.rechecks, 1u);
}

TEST_F(ProbeLockTest, StuckHolderMakesTheWaiterGiveUpAtTheCap) {
  ProbeLockReport report;
  ProbeLock holder = ProbeLock::Acquire(path_, Patient(), &report);
  ASSERT_TRUE(holder.held());

  ProbeLockOptions options;
  options.stall_ns = 20'000'000;
  options.bound_ns = kHourNs;
  ProbeLockReport waited;
  ProbeLock lock = ProbeLock::Acquire(path_, options, &waited);
  EXPECT_FALSE(lock.held());
  EXPECT_EQ(waited.outcome, ProbeLockOutcome::kStalled);
  EXPECT_EQ(waited.holder_changes, 0u);
  EXPECT_GE(waited.waited_ns, options.stall_ns);
}

// The waiter's tries, answered at `step_ns` apart; before answering try k the test runs
// `at_try(k)`, which may change the holder. Returns once the waiter's Acquire has returned.
void Drive(SteppedClock* clock, int64_t step_ns, const std::function<void(int)>& at_try) {
  while (std::optional<int> k = clock->NextCall()) {
    at_try(*k);
    clock->Answer(int64_t(*k - 1) * step_ns);
  }
}

TEST_F(ProbeLockTest, ChangingHoldersKeepTheWaiterPastTheCap) {
  ProbeLockReport report;
  ProbeLock a = ProbeLock::Acquire(path_, Patient(), &report);
  ASSERT_TRUE(a.held());
  ProbeLock b;

  SteppedClock clock;
  ProbeLockOptions options;
  options.stall_ns = kHourNs;
  options.bound_ns = 100 * kHourNs;
  options.recheck_ns = 10'000'000'000;
  options.clock = clock.clock();
  Waiter waiter;
  waiter.Start(path_, options, [&clock] { clock.Finish(); });

  // Six tries 0.6 h apart, each after a change of holder between A and B that the waiter
  // cannot race (it is inside its clock); then the holder releases without a successor.
  constexpr int kChanges = 6;
  Drive(&clock, kHourNs * 6 / 10, [&](int k) {
    ProbeLockReport r;
    if (k <= kChanges) {
      ProbeLock& from = a.held() ? a : b;
      ProbeLock& to = a.held() ? b : a;
      from.Release();
      to = ProbeLock::Acquire(path_, Patient(), &r);
      ASSERT_TRUE(to.held());
    } else if (k == kChanges + 1) {
      a.Release();
      b.Release();
    }
  });
  waiter.Join();

  EXPECT_TRUE(waiter.held_after);
  EXPECT_EQ(waiter.report.outcome, ProbeLockOutcome::kAcquired);
  EXPECT_GT(waiter.report.waited_ns, 3 * options.stall_ns) << "the queue outlasted the cap";
  EXPECT_GE(waiter.report.holder_changes, uint32_t(kChanges));
}

TEST_F(ProbeLockTest, HardBoundEndsTheWaitEvenWhileHoldersChange) {
  ProbeLockReport report;
  ProbeLock a = ProbeLock::Acquire(path_, Patient(), &report);
  ASSERT_TRUE(a.held());
  ProbeLock b;

  SteppedClock clock;
  ProbeLockOptions options;
  options.stall_ns = kHourNs;
  options.bound_ns = 2 * kHourNs;
  options.recheck_ns = 10'000'000'000;
  options.clock = clock.clock();
  Waiter waiter;
  waiter.Start(path_, options, [&clock] { clock.Finish(); });
  Drive(&clock, kHourNs * 6 / 10, [&](int) {
    ProbeLockReport r;
    ProbeLock& from = a.held() ? a : b;
    ProbeLock& to = a.held() ? b : a;
    from.Release();
    to = ProbeLock::Acquire(path_, Patient(), &r);
    ASSERT_TRUE(to.held());
  });
  waiter.Join();

  EXPECT_FALSE(waiter.held_after);
  EXPECT_EQ(waiter.report.outcome, ProbeLockOutcome::kBoundReached);
  EXPECT_GE(waiter.report.waited_ns, options.bound_ns);
  EXPECT_GE(waiter.report.holder_changes, 3u);
}

TEST_F(ProbeLockTest, StillHolderWithASteppedClockStallsAfterTheCap) {
  ProbeLockReport report;
  ProbeLock a = ProbeLock::Acquire(path_, Patient(), &report);
  ASSERT_TRUE(a.held());

  SteppedClock clock;
  ProbeLockOptions options;
  options.stall_ns = kHourNs;
  options.bound_ns = 100 * kHourNs;
  options.recheck_ns = 1'000'000;  // wakes often; only the clock decides
  options.clock = clock.clock();
  Waiter waiter;
  waiter.Start(path_, options, [&clock] { clock.Finish(); });
  int tries = 0;
  Drive(&clock, kHourNs * 6 / 10, [&](int k) { tries = k; });
  waiter.Join();

  EXPECT_EQ(waiter.report.outcome, ProbeLockOutcome::kStalled);
  EXPECT_EQ(waiter.report.holder_changes, 0u);
  EXPECT_EQ(tries, 3) << "tries at 0, 0.6 h and 1.2 h: the third is past the cap";
}

TEST_F(ProbeLockTest, FileTruncatedUnderTheWaiterDoesNotCrashIt) {
  ProbeLockReport report;
  ProbeLock holder = ProbeLock::Acquire(path_, Patient(), &report);
  ASSERT_TRUE(holder.held());
  CountingClock clock;
  ProbeLockOptions options = Patient();
  options.recheck_ns = 20'000'000;
  options.clock = clock.clock();
  Waiter waiter;
  waiter.Start(path_, options);
  AwaitSleepingWaiter(clock, waiter.tid);
  ASSERT_EQ(truncate(path_.c_str(), 0), 0);
  // The waiter's next recheck sleeps on a word past the file's end (refused, not SIGBUS).
  const int seen = clock.calls.load();
  clock.AwaitCalls(seen + 2);
  holder.Release();
  waiter.Join();
  EXPECT_TRUE(waiter.held_after);
  EXPECT_EQ(waiter.report.outcome, ProbeLockOutcome::kAcquired);
}

TEST_F(ProbeLockTest, OneHolderAtATime) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  std::atomic<int> inside{0}, most{0}, taken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        ProbeLockReport r;
        ProbeLock lock = ProbeLock::Acquire(path_, Patient(), &r);
        if (!lock.held()) continue;
        const int now = inside.fetch_add(1) + 1;
        int prev = most.load();
        while (now > prev && !most.compare_exchange_weak(prev, now)) {
        }
        taken.fetch_add(1);
        inside.fetch_sub(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(taken.load(), kThreads * kRounds);
  EXPECT_EQ(most.load(), 1);
}

TEST(ProbeLockOptionsTest, WaitMsSetsTheCapAndTheHardBound) {
  const ProbeLockOptions o = ProbeLockOptions::ForWaitMs(10000);
  EXPECT_EQ(o.stall_ns, 10'000'000'000);
  EXPECT_EQ(o.bound_ns, 600'000'000'000);
  EXPECT_EQ(o.recheck_ns, kProbeLockRecheckNs);
  EXPECT_STREQ(ProbeLockOutcomeName(ProbeLockOutcome::kBoundReached), "bound-reached");
}

}  // namespace
}  // namespace hami::vgpu
