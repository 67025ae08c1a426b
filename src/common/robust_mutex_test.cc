#include "common/robust_mutex.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace hami {
namespace {

struct Shared {
  pthread_mutex_t mutex;
  int counter;
  int repaired;
};

void Repair(void* arg) {
  auto* s = static_cast<Shared*>(arg);
  s->repaired += 1;
  s->counter = 0;  // what the dead holder left half-done is rebuilt
}

class RobustMutexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p =
        mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    s_ = static_cast<Shared*>(p);
    ASSERT_TRUE(InitRobustMutex(&s_->mutex).ok());
  }
  void TearDown() override { munmap(s_, sizeof(Shared)); }
  Shared* s_ = nullptr;
};

TEST_F(RobustMutexTest, TheNextLockerRepairsAfterAHolderDies) {
  pid_t pid = fork();
  if (pid == 0) {
    pthread_mutex_lock(&s_->mutex);
    s_->counter = 42;  // half-done work
    _exit(0);          // dies holding the lock
  }
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  {
    RobustLockGuard g(&s_->mutex, Repair, s_);
    ASSERT_TRUE(g.locked());
    EXPECT_TRUE(g.repaired());
    EXPECT_EQ(s_->counter, 0);
    EXPECT_EQ(s_->repaired, 1);
  }
  RobustLockGuard again(&s_->mutex, Repair, s_);
  EXPECT_TRUE(again.locked());
  EXPECT_FALSE(again.repaired()) << "marked consistent: no second repair";
  EXPECT_EQ(s_->repaired, 1);
}

// A holder that never lets go: the timed guard gives up and names it.
TEST_F(RobustMutexTest, TheTimedGuardGivesUpOnALiveHolderAndNamesIt) {
  int go[2], done[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t holder = fork();
  if (holder == 0) {
    pthread_mutex_lock(&s_->mutex);
    char c = 1;
    if (write(go[1], &c, 1) != 1) _exit(2);
    (void)read(done[0], &c, 1);  // holds it until the parent is done
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(go[0], &c, 1), 1);
  EXPECT_EQ(RobustMutexHolder(&s_->mutex), holder);
  {
    RobustLockGuard g(&s_->mutex, Repair, s_, 20'000'000);
    EXPECT_FALSE(g.locked());
    EXPECT_TRUE(g.timed_out());
  }
  ASSERT_EQ(write(done[1], &c, 1), 1);
  ASSERT_EQ(waitpid(holder, nullptr, 0), holder);
  RobustLockGuard g(&s_->mutex, Repair, s_, 1'000'000'000);
  EXPECT_TRUE(g.locked()) << "the holder let go";
  EXPECT_FALSE(g.timed_out());
}

// A lock word forged to name a live process that never locked it: never waited on forever.
TEST_F(RobustMutexTest, AForgedLockWordIsNeverWaitedOnForever) {
  *reinterpret_cast<int*>(&s_->mutex) = int(getppid());
  EXPECT_EQ(RobustMutexHolder(&s_->mutex), getppid());
  RobustLockGuard g(&s_->mutex, Repair, s_, 20'000'000);
  EXPECT_FALSE(g.locked());
  EXPECT_TRUE(g.timed_out());
}

TEST_F(RobustMutexTest, ARepairerThatDiesLeavesTheRepairToTheNext) {
  pid_t holder = fork();
  if (holder == 0) {
    pthread_mutex_lock(&s_->mutex);
    _exit(0);
  }
  ASSERT_EQ(waitpid(holder, nullptr, 0), holder);
  pid_t repairer = fork();
  if (repairer == 0) {
    pthread_mutex_lock(&s_->mutex);  // EOWNERDEAD, then dies before marking it consistent
    _exit(0);
  }
  ASSERT_EQ(waitpid(repairer, nullptr, 0), repairer);
  RobustLockGuard g(&s_->mutex, Repair, s_);
  EXPECT_TRUE(g.locked());
  EXPECT_TRUE(g.repaired());
}

TEST_F(RobustMutexTest, SerializesThreadsOfManyProcesses) {
  constexpr int kProcs = 4, kIters = 2000;
  for (int p = 0; p < kProcs; ++p) {
    if (fork() == 0) {
      for (int i = 0; i < kIters; ++i) {
        RobustLockGuard g(&s_->mutex, Repair, s_);
        int v = s_->counter;
        s_->counter = v + 1;
      }
      _exit(0);
    }
  }
  for (int p = 0; p < kProcs; ++p) wait(nullptr);
  EXPECT_EQ(s_->counter, kProcs * kIters);
  EXPECT_EQ(s_->repaired, 0);
}

}  // namespace
}  // namespace hami
