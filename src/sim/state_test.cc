#include "sim/state.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/file.h"
#include "common/temp_dir.h"

namespace hami::sim {
namespace {

using ::testing::HasSubstr;

class StateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    path_ = tmp_.File("state");
  }

  std::unique_ptr<SharedState> MustOpen(const char* profile = "h100-80g:2") {
    auto s = SharedState::Open(path_, profile, "");
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message());
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::string ReadAll() { return *ReadFileToString(path_, 64 << 20); }

  // Runs `body` in a child process; returns its exit status (128+signal if killed).
  template <typename F>
  int InChild(F body) {
    pid_t pid = fork();
    if (pid == 0) _exit(body());
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  TempDir tmp_{"hami-state-test"};
  std::string dir_, path_;
};

TEST_F(StateTest, CreatesTheFileAndReopensItWithTheSameMachine) {
  auto a = MustOpen();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->devices().size(), 2u);
  EXPECT_EQ(a->profile_spec(), "h100-80g:2");
  auto b = MustOpen();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->devices()[1].uuid, a->devices()[1].uuid);
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u) << "the machine file is shared by every user";
}

TEST_F(StateTest, OpenExistingTakesTheMachineFromTheFile) {
  { auto a = MustOpen("a100-40g,sim-1g"); }
  auto b = SharedState::OpenExisting(path_);
  ASSERT_TRUE(b.ok()) << b.error().message();
  ASSERT_EQ((*b)->devices().size(), 2u);
  EXPECT_EQ((*b)->devices()[1].profile->key, "sim-1g");
  EXPECT_EQ(SharedState::OpenExisting(dir_ + "/missing").error().sys_errno(), ENOENT);
}

TEST_F(StateTest, RefusesASymlinkAndANonRegularFile) {
  { auto a = MustOpen(); }
  std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(path_.c_str(), link.c_str()), 0);
  auto r = SharedState::Open(link, "h100-80g:2", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("symbolic link"));
  auto d = SharedState::Open(dir_, "h100-80g:2", "");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code(), ErrorCode::kIo);  // open(O_RDWR) of a directory: EISDIR
}

TEST_F(StateTest, RefusesAForeignFileAndLeavesItUntouched) {
  std::string foreign(8192, 'x');
  ASSERT_TRUE(WriteAll(OpenRegularFile(path_, O_CREAT | O_WRONLY)->get(), foreign).ok());
  auto r = SharedState::Open(path_, "h100-80g:2", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(r.error().message(), HasSubstr(path_));
  EXPECT_THAT(r.error().message(), HasSubstr("bad magic"));
  EXPECT_EQ(ReadAll(), foreign);
}

TEST_F(StateTest, RefusesAFileSmallerThanItsHeader) {
  ASSERT_TRUE(WriteAll(OpenRegularFile(path_, O_CREAT | O_WRONLY)->get(), "HAMISIM1").ok());
  auto r = SharedState::Open(path_, "h100-80g:2", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("smaller than a header"));
  EXPECT_EQ(ReadAll(), "HAMISIM1");
}

TEST_F(StateTest, RemakesAFileItsCreatorLeftUnfinished) {
  // Killed after sizing the file, before writing a byte of it: the full size, all zero.
  {
    auto fd = OpenRegularFile(path_, O_CREAT | O_RDWR);
    ASSERT_TRUE(fd.ok());
    ASSERT_EQ(ftruncate(fd->get(), off_t(sizeof(state::File))), 0);
  }
  auto existing = SharedState::OpenExisting(path_);
  ASSERT_FALSE(existing.ok());
  EXPECT_EQ(existing.error().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(existing.error().message(), HasSubstr("is not initialized"));
  auto a = MustOpen();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->devices().size(), 2u);

  // Killed after writing the header, before publishing it.
  a.reset();
  {
    auto fd = OpenRegularFile(path_, O_RDWR);
    uint32_t zero = 0;
    ASSERT_EQ(pwrite(fd->get(), &zero, sizeof(zero), offsetof(state::Header, initialized)), 4);
  }
  EXPECT_EQ(SharedState::OpenExisting(path_).error().code(), ErrorCode::kCorrupt);
  a = MustOpen("a100-40g:3");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->profile_spec(), "a100-40g:3");
}

TEST_F(StateTest, RefusesAnotherLayoutVersionAndATruncatedFile) {
  { auto a = MustOpen(); }
  std::string original = ReadAll();
  // Another layout version: refused, not rewritten.
  {
    auto fd = OpenRegularFile(path_, O_RDWR);
    uint32_t v = state::kVersion + 1;
    ASSERT_EQ(pwrite(fd->get(), &v, sizeof(v), offsetof(state::Header, version)), 4);
  }
  auto r = SharedState::Open(path_, "h100-80g:2", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kIncompatible);
  EXPECT_THAT(r.error().message(),
              HasSubstr("layout version " + std::to_string(state::kVersion + 1)));
  // Right version, wrong size.
  {
    auto fd = OpenRegularFile(path_, O_RDWR);
    uint32_t v = state::kVersion;
    ASSERT_EQ(pwrite(fd->get(), &v, sizeof(v), offsetof(state::Header, version)), 4);
    ASSERT_EQ(ftruncate(fd->get(), off_t(original.size() - 4096)), 0);
  }
  r = SharedState::Open(path_, "h100-80g:2", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(r.error().message(), HasSubstr("but its header says"));
}

TEST_F(StateTest, RefusesAWrongLayoutFingerprint) {
  { auto a = MustOpen(); }
  auto fd = OpenRegularFile(path_, O_RDWR);
  uint64_t f = 0x1234;
  ASSERT_EQ(pwrite(fd->get(), &f, sizeof(f), offsetof(state::Header, layout_fingerprint)), 8);
  auto r = SharedState::Open(path_, "h100-80g:2", "");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("different layout"));
}

TEST_F(StateTest, AnUnusedStateIsRemadeForAnotherMachine) {
  { auto a = MustOpen("h100-80g:2"); }
  auto b = MustOpen("a100-40g:3");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->devices().size(), 3u);
  EXPECT_EQ(b->profile_spec(), "a100-40g:3");
}

TEST_F(StateTest, AStateInUseIsNotRemadeForAnotherMachine) {
  auto a = MustOpen("h100-80g:2");
  auto r = SharedState::Open(path_, "a100-40g:3", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kBusy);
  EXPECT_THAT(r.error().message(), HasSubstr("h100-80g:2"));
  EXPECT_THAT(r.error().message(), HasSubstr("a100-40g:3"));
  EXPECT_EQ(a->devices().size(), 2u);
}

TEST_F(StateTest, ManyProcessesOpeningANewFileAtOnceShareOneMachine) {
  constexpr int kChildren = 8;
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      auto s = SharedState::Open(path_, "sim-1g:2", "");
      if (!s.ok()) _exit(1);
      auto slot = (*s)->ClaimSlot();
      if (!slot.ok() || (*s)->Charge(*slot, 0, 1 << 20) != ChargeResult::kOk) _exit(2);
      _exit(0);  // slot and charge left for the survivors to reclaim
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  auto s = MustOpen("sim-1g:2");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->UsedBytes(0), uint64_t(kChildren) << 20);
  EXPECT_EQ(s->SweepDead(), kChildren);
  EXPECT_EQ(s->UsedBytes(0), 0u);
}

TEST_F(StateTest, ChargesNeverExceedTheDeviceUnderConcurrentProcessesAndThreads) {
  // sim-1g: 1024 MiB less 16 MiB reserved = 1008 MiB usable; 7 MiB charges: 144 fit.
  constexpr uint64_t kChunk = 7ull << 20;
  const uint64_t usable = (1024ull - 16) << 20;
  auto parent = MustOpen("sim-1g");
  ASSERT_NE(parent, nullptr);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < 3; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      auto s = SharedState::Open(path_, "sim-1g", "");
      if (!s.ok()) _exit(1);
      int slot = *(*s)->ClaimSlot();
      std::atomic<int> ok{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
          for (int k = 0; k < 40; ++k) {
            if ((*s)->Charge(slot, 0, kChunk) == ChargeResult::kOk) ok++;
          }
        });
      }
      for (auto& t : threads) t.join();
      int n = ok;
      if (write(fds[1], &n, sizeof(n)) != sizeof(n)) _exit(3);
      char c;
      if (read(fds[0], &c, 0) < 0) _exit(4);
      pause();  // hold the charges until killed
    }
    pids.push_back(pid);
  }
  int total = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    int n = 0;
    ASSERT_EQ(read(fds[0], &n, sizeof(n)), ssize_t(sizeof(n)));
    total += n;
  }
  EXPECT_EQ(uint64_t(total), usable / kChunk) << "every chunk that fits, and not one more";
  EXPECT_LE(parent->UsedBytes(0), usable);
  EXPECT_EQ(parent->UsedBytes(0), uint64_t(total) * kChunk);
  for (pid_t pid : pids) kill(pid, SIGKILL);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  EXPECT_EQ(parent->SweepDead(), 3);
  EXPECT_EQ(parent->UsedBytes(0), 0u);
  close(fds[0]);
  close(fds[1]);
}

TEST_F(StateTest, AChargeThatWouldFailReclaimsDeadProcessesFirst) {
  auto s = MustOpen("sim-1g");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(InChild([&] {
              auto c = SharedState::Open(path_, "sim-1g", "");
              int slot = *(*c)->ClaimSlot();
              return (*c)->Charge(slot, 0, 900ull << 20) == ChargeResult::kOk ? 0 : 1;
            }),
            0);
  int slot = *s->ClaimSlot();
  EXPECT_EQ(s->Charge(slot, 0, 900ull << 20), ChargeResult::kOk)
      << "the dead child's 900 MiB must have been reclaimed";
  EXPECT_EQ(s->Charge(slot, 0, 200ull << 20), ChargeResult::kOutOfMemory);
  EXPECT_EQ(s->UsedBytes(0), 900ull << 20);
}

TEST_F(StateTest, AProcessKilledHoldingADeviceLockLeavesAStateTheNextUserRepairs) {
  auto s = MustOpen("sim-1g");
  ASSERT_NE(s, nullptr);
  // The child dies inside Charge, holding the device mutex, after updating its slot but
  // before the device total.
  EXPECT_EQ(InChild([&] {
              auto c = SharedState::Open(path_, "sim-1g", "", "device-lock-held");
              int slot = *(*c)->ClaimSlot();
              (*c)->Charge(slot, 0, 64ull << 20);
              return 0;
            }),
            128 + SIGKILL);
  // Locking repairs the total from the slots (64 MiB), then the dead slot is reclaimed.
  EXPECT_EQ(s->UsedBytes(0), 64ull << 20);
  EXPECT_EQ(s->SweepDead(), 1);
  EXPECT_EQ(s->UsedBytes(0), 0u);
  int slot = *s->ClaimSlot();
  EXPECT_EQ(s->Charge(slot, 0, 1ull << 20), ChargeResult::kOk);
}

TEST_F(StateTest, ClosingAHandleReleasesItsSlotsAndMemory) {
  auto a = MustOpen();
  {
    auto b = MustOpen();
    int slot = *b->ClaimSlot();
    b->AddContexts(slot, 1, 1);
    ASSERT_EQ(b->Charge(slot, 1, 5 << 20), ChargeResult::kOk);
    EXPECT_EQ(a->Processes(1).size(), 1u);
  }
  EXPECT_TRUE(a->Processes(1).empty());
  EXPECT_EQ(a->UsedBytes(1), 0u);
}

TEST_F(StateTest, ProcessesNamesTheOwnerAndItsMemory) {
  auto s = MustOpen();
  int slot = *s->ClaimSlot();
  s->AddContexts(slot, 0, 1);
  ASSERT_EQ(s->Charge(slot, 0, 3 << 20), ChargeResult::kOk);
  auto procs = s->Processes(0);
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].host_pid, getpid());
  EXPECT_EQ(procs[0].ns_pid, getpid());
  EXPECT_EQ(procs[0].used_bytes, 3u << 20);
  EXPECT_EQ(procs[0].contexts, 1u);
  EXPECT_TRUE(s->Processes(1).empty());
}

TEST_F(StateTest, BusyTimeIsSerializedPerDeviceAndMeasuredOverAWindow) {
  auto s = MustOpen();
  int slot = *s->ClaimSlot();
  int64_t t0 = MonotonicNs() + 1000000000;  // in the future: nothing else overlaps
  int64_t e1 = s->ReserveBusy(slot, 0, t0, 100);
  int64_t e2 = s->ReserveBusy(slot, 0, t0, 100);  // queued after the first
  EXPECT_EQ(e1, t0 + 100);
  EXPECT_EQ(e2, t0 + 200);
  int64_t e3 = s->ReserveBusy(slot, 1, t0, 50);  // another device runs in parallel
  EXPECT_EQ(e3, t0 + 50);
  BusyWindow w = s->DeviceBusy(0, t0 + 50, t0 + 250);
  EXPECT_EQ(w.busy_ns, 150);
  EXPECT_EQ(w.covered_ns, 200);
  auto per = s->ProcessesBusy(0, t0, t0 + 1000);
  ASSERT_EQ(per.size(), 1u);
  EXPECT_EQ(per[0].host_pid, getpid());
  EXPECT_EQ(per[0].busy_ns, 200);
}

TEST_F(StateTest, AWrappedRingReportsOnlyTheWindowItCovers) {
  auto a = MustOpen();
  auto b = MustOpen();
  int sa = *a->ClaimSlot(), sb = *b->ClaimSlot();
  int64_t t0 = MonotonicNs() + 1000000000;
  // Alternating owners defeat merging: one record per reservation, wrapping the ring.
  for (int i = 0; i < state::kBusyRing + 100; ++i) {
    (i % 2 == 0 ? a : b)->ReserveBusy(i % 2 == 0 ? sa : sb, 0, t0, 10);
  }
  int64_t end = t0 + 10ll * (state::kBusyRing + 100);
  BusyWindow w = a->DeviceBusy(0, t0, end);
  EXPECT_EQ(w.covered_ns, 10ll * state::kBusyRing);
  EXPECT_EQ(w.busy_ns, w.covered_ns);
}

TEST_F(StateTest, XidsAreLoggedPerDeviceInOrderAndTheOldestAreOverwritten) {
  auto s = MustOpen();
  EXPECT_EQ(s->XidCount(0), 0u);
  EXPECT_FALSE(s->XidFrom(0, 0).has_value());
  ASSERT_TRUE(s->RecordXid(1, 79).ok());
  ASSERT_TRUE(s->RecordXid(1, 13).ok());
  EXPECT_EQ(s->XidCount(0), 0u);
  EXPECT_EQ(s->XidCount(1), 2u);
  auto first = s->XidFrom(1, 0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->sequence, 0u);
  EXPECT_EQ(first->code, 79u);
  EXPECT_GT(first->realtime_ns, 0);
  EXPECT_EQ(s->XidFrom(1, 1)->code, 13u);
  EXPECT_FALSE(s->XidFrom(1, 2).has_value());
  for (int i = 0; i < state::kXidRing + 3; ++i) {
    ASSERT_TRUE(s->RecordXid(0, static_cast<uint64_t>(100 + i)).ok());
  }
  auto oldest = s->XidFrom(0, 0);  // the first three were overwritten
  ASSERT_TRUE(oldest.has_value());
  EXPECT_EQ(oldest->sequence, 3u);
  EXPECT_EQ(oldest->code, 103u);
}

TEST_F(StateTest, RecordXidRefusesADeviceTheMachineLacks) {
  auto s = MustOpen();
  Status st = s->RecordXid(2, 79);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(st.error().message(), HasSubstr("no device 2"));
  EXPECT_FALSE(s->RecordXid(-1, 79).ok());
}

TEST_F(StateTest, AnXidRecordedByAnotherProcessWakesAWaiterAndIsSeenThere) {
  auto s = MustOpen();
  const uint32_t epoch = s->EventEpoch();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    char c;
    if (read(pipe_fds[0], &c, 1) != 1) _exit(2);  // the parent is about to wait
    auto other = SharedState::OpenExisting(path_);
    _exit(other.ok() && (*other)->RecordXid(0, 79).ok() ? 0 : 1);
  }
  ASSERT_EQ(write(pipe_fds[1], "x", 1), 1);
  // Waits until the epoch moves; the bound only keeps a broken build from hanging.
  const int64_t deadline = MonotonicNs() + 60'000'000'000;
  while (s->EventEpoch() == epoch && MonotonicNs() < deadline) {
    s->WaitForEvent(epoch, deadline - MonotonicNs());
  }
  int st = 0;
  waitpid(pid, &st, 0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_NE(s->EventEpoch(), epoch);
  EXPECT_EQ(s->XidFrom(0, 0)->code, 79u);
}

}  // namespace
}  // namespace hami::sim
