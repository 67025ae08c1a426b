#include "region/region.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/file.h"
#include "common/proc.h"
#include "common/temp_dir.h"

namespace hami::region {
namespace {

using ::testing::HasSubstr;

PolicySpec TwoDevices(uint64_t limit0 = 1ull << 30, uint64_t limit1 = 0) {
  PolicySpec p;
  p.device_count = 2;
  p.memory_limit[0] = limit0;
  p.memory_limit[1] = limit1;
  p.sm_limit[0] = 30;
  p.uuid[0] = "GPU-aaaaaaaa-0000-4000-8000-000000000000";
  p.uuid[1] = "GPU-bbbbbbbb-0000-4000-8000-000000000000";
  return p;
}

class RegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    path_ = tmp_.File("usage.cache");
  }

  std::unique_ptr<Region> MustOpen(const PolicySpec& p = TwoDevices(),
                                   std::vector<PolicyDifference>* diffs = nullptr) {
    auto r = Region::Open(path_, &p, Create::kIfMissing, diffs);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
    return r.ok() ? std::move(r).value() : nullptr;
  }

  template <typename F>
  int InChild(F body) {
    pid_t pid = fork();
    if (pid == 0) _exit(body());
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  TempDir tmp_{"hami-region-test"};
  std::string dir_, path_;
};

TEST_F(RegionTest, TheCreatorStampsItsPolicyAndLaterOpenersSeeIt) {
  auto a = MustOpen();
  ASSERT_NE(a, nullptr);
  PolicyView p = a->Policy();
  EXPECT_EQ(p.device_count, 2);
  EXPECT_EQ(p.memory_limit[0], 1ull << 30);
  EXPECT_EQ(p.sm_limit[0], 30u);
  EXPECT_EQ(p.uuid[1], "GPU-bbbbbbbb-0000-4000-8000-000000000000");
  EXPECT_EQ(p.stamped_by_pid, getpid());
  EXPECT_EQ(p.utilization_switch, 1u);
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
}

TEST_F(RegionTest, ALaterProcessWithOtherLimitsIsToldTheDifferencesAndTheRegionStands) {
  auto a = MustOpen(TwoDevices(1ull << 30));
  std::vector<PolicyDifference> diffs;
  auto b = MustOpen(TwoDevices(2ull << 30), &diffs);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].field, "memory_limit[0]");
  EXPECT_EQ(diffs[0].region, std::to_string(1ull << 30));
  EXPECT_EQ(diffs[0].mine, std::to_string(2ull << 30));
  EXPECT_EQ(b->Policy().memory_limit[0], 1ull << 30);
  // The conflict is recorded in the region, for inspect: who, which field, both values.
  std::vector<Inconsistency> found = a->Check();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, Inconsistency::Kind::kPolicyConflict);
  EXPECT_EQ(found[0].device, 0);
  EXPECT_THAT(found[0].message, HasSubstr("pid " + std::to_string(getpid())));
  EXPECT_THAT(found[0].message,
              HasSubstr("memory_limit[0] = " + std::to_string(2ull << 30) +
                        " bytes but the region says " + std::to_string(1ull << 30) + " bytes"));
  // The same limits are no conflict; a read-only opener records nothing.
  auto c = MustOpen(TwoDevices(1ull << 30));
  EXPECT_EQ(a->Check().size(), 1u);
}

TEST_F(RegionTest, ConflictsPastTheKeptOnesAreCounted) {
  auto a = MustOpen(TwoDevices(1ull << 30));
  std::vector<std::unique_ptr<Region>> others;
  for (int i = 0; i < layout::kMaxConflicts + 3; ++i) {
    others.push_back(MustOpen(TwoDevices((uint64_t{2} + static_cast<uint64_t>(i)) << 30)));
  }
  std::vector<Inconsistency> found = a->Check();
  ASSERT_EQ(found.size(), size_t(layout::kMaxConflicts) + 1);
  EXPECT_THAT(found.back().message, HasSubstr("3 more policy conflicts were counted"));
}

// A process never enforces more than it was given: its own limit holds with the region's,
// and the stricter of the two decides (the container's total counts against both).
TEST_F(RegionTest, AProcesssOwnLimitHoldsWithTheRegionsAndTheStricterDecides) {
  auto r = MustOpen(TwoDevices(100 << 20, 0));
  ASSERT_TRUE(r->Register().ok());
  r->SetOwnMemoryLimit(0, 50 << 20);  // stricter than the region's 100 MiB
  r->SetOwnMemoryLimit(1, 8 << 20);   // the region's device 1 is unlimited
  EXPECT_EQ(r->EffectiveMemoryLimit(0), 50u << 20);
  EXPECT_EQ(r->EffectiveMemoryLimit(1), 8u << 20);
  EXPECT_EQ(r->MemoryLimit(0), 100u << 20) << "the region's own limit is unchanged";
  EXPECT_EQ(r->Reserve(0, 40 << 20, UsageKind::kData), Admission::kOk);
  EXPECT_EQ(r->Reserve(0, 20 << 20, UsageKind::kData), Admission::kOverLimit);
  EXPECT_EQ(r->Reserve(1, 9 << 20, UsageKind::kData), Admission::kOverLimit);
  EXPECT_EQ(r->Reserve(1, 8 << 20, UsageKind::kData), Admission::kOk);
  // Looser than the region's: the region's decides.
  r->SetOwnMemoryLimit(0, 1ull << 40);
  EXPECT_EQ(r->EffectiveMemoryLimit(0), 100u << 20);
  EXPECT_EQ(r->Reserve(0, 61 << 20, UsageKind::kData), Admission::kOverLimit);
  EXPECT_EQ(r->Reserve(0, 60 << 20, UsageKind::kData), Admission::kOk);
  // The zero budget of a limit that could not be read admits nothing.
  r->SetOwnMemoryLimit(1, layout::kZeroBudgetBytes);
  EXPECT_EQ(r->Reserve(1, 4096, UsageKind::kData), Admission::kOverLimit);
  r->Unregister();
  static_assert(Region::StricterLimit(0, 0) == 0 && Region::StricterLimit(0, 5) == 5 &&
                Region::StricterLimit(7, 0) == 7 && Region::StricterLimit(7, 5) == 5);
}

// Whoever makes the file stamps its own limits; a process that joins with a stricter memory
// limit lowers the region's to it, so that both hold to the stricter whoever came first. A
// looser one changes nothing.
TEST_F(RegionTest, AJoinerWithAStricterMemoryLimitLowersTheRegionsAndALooserOneDoesNot) {
  auto first = MustOpen(TwoDevices(2ull << 30, 0));
  const uint64_t generation = first->Policy().generation;
  auto looser = MustOpen(TwoDevices(4ull << 30, 0));
  EXPECT_EQ(first->MemoryLimit(0), 2ull << 30) << "a looser joiner holds to the region's";
  EXPECT_EQ(first->Policy().generation, generation);
  auto stricter = MustOpen(TwoDevices(1ull << 30, 512ull << 20));
  EXPECT_EQ(first->MemoryLimit(0), 1ull << 30);
  EXPECT_EQ(first->MemoryLimit(1), 512ull << 20) << "an unlimited device takes the limit too";
  EXPECT_GT(first->Policy().generation, generation) << "a change of policy";
  EXPECT_EQ(first->EffectiveMemoryLimit(0), 1ull << 30) << "the creator holds to it at once";
  auto unlimited = MustOpen(TwoDevices(0, 0));
  EXPECT_EQ(first->MemoryLimit(0), 1ull << 30) << "no limit of its own lowers nothing";
}

TEST_F(RegionTest, ReservationsStayWithinTheLimitAndReleasesReturnIt) {
  auto r = MustOpen(TwoDevices(100 << 20));
  ASSERT_TRUE(r->Register().ok());
  EXPECT_EQ(r->Reserve(0, 60 << 20, UsageKind::kData), Admission::kOk);
  EXPECT_EQ(r->Reserve(0, 40 << 20, UsageKind::kContext), Admission::kOk);
  EXPECT_EQ(r->Reserve(0, 1, UsageKind::kData), Admission::kOverLimit);
  DeviceSnapshot s = r->Snapshot(0);
  EXPECT_EQ(s.used_bytes, 100u << 20);
  EXPECT_EQ(s.slot_sum_bytes, s.used_bytes);
  EXPECT_EQ(s.rejected, 1u);
  ASSERT_EQ(s.slots.size(), 1u);
  EXPECT_EQ(s.slots[0].second[size_t(UsageKind::kData)], 60u << 20);
  EXPECT_EQ(s.slots[0].second[size_t(UsageKind::kContext)], 40u << 20);
  r->Release(0, 60 << 20, UsageKind::kData);
  EXPECT_EQ(r->Snapshot(0).used_bytes, 40u << 20);
  EXPECT_EQ(r->Reserve(1, 500ull << 30, UsageKind::kData), Admission::kOk) << "unlimited";
  r->Unregister();
  EXPECT_EQ(r->Snapshot(0).used_bytes, 0u);
  EXPECT_EQ(r->Snapshot(1).used_bytes, 0u);
  EXPECT_EQ(r->Reserve(0, 1, UsageKind::kData), Admission::kNotRegistered);
}

TEST_F(RegionTest, AnOperatorChangeOfTheLimitIsSeenByRunningProcesses) {
  auto a = MustOpen(TwoDevices(10 << 20));
  auto b = MustOpen();
  ASSERT_TRUE(a->Register().ok());
  EXPECT_EQ(a->Reserve(0, 20 << 20, UsageKind::kData), Admission::kOverLimit);
  uint64_t gen = a->Policy().generation;
  ASSERT_TRUE(b->SetMemoryLimit(0, 30 << 20).ok());
  EXPECT_EQ(a->Policy().generation, gen + 1);
  EXPECT_EQ(a->Reserve(0, 20 << 20, UsageKind::kData), Admission::kOk);
  EXPECT_FALSE(b->SetMemoryLimit(5, 1).ok());
  EXPECT_FALSE(b->SetSmLimit(0, 101).ok());
}

TEST_F(RegionTest, ADeadProcessIsReclaimedWhenTheBudgetLooksFull) {
  auto r = MustOpen(TwoDevices(100 << 20));
  EXPECT_EQ(InChild([&] {
              auto c = Region::Open(path_, nullptr, Create::kNever, nullptr);
              if (!c.ok() || !(*c)->Register().ok()) return 1;
              if ((*c)->Reserve(0, 90 << 20, UsageKind::kData) != Admission::kOk) return 2;
              _exit(0);  // no unregister: like a SIGKILL, the slot stays
            }),
            0);
  EXPECT_EQ(r->Snapshot(0).used_bytes, 90u << 20);
  ASSERT_TRUE(r->Register().ok());
  EXPECT_EQ(r->Reserve(0, 50 << 20, UsageKind::kData), Admission::kOk);
  EXPECT_EQ(r->Snapshot(0).used_bytes, 50u << 20);
}

// A registration claims its slot and reads no other: the dead process's slot and bytes stay
// until a sweep that is due (the first admission's, a view's, the monitor's) takes them back.
TEST_F(RegionTest, ARegistrationLeavesDeadSlotsToTheNextDueSweep) {
  auto r = MustOpen(TwoDevices(100 << 20));
  EXPECT_EQ(InChild([&] {
              auto c = Region::Open(path_, nullptr, Create::kNever, nullptr);
              if (!c.ok() || !(*c)->Register().ok()) return 1;
              if ((*c)->Reserve(0, 30 << 20, UsageKind::kData) != Admission::kOk) return 2;
              _exit(0);  // no unregister: like a SIGKILL, the slot stays
            }),
            0);
  ASSERT_TRUE(r->Register().ok());
  std::vector<SlotView> slots = r->Slots();
  ASSERT_EQ(slots.size(), 2u);
  for (const SlotView& s : slots) {
    EXPECT_EQ(s.alive, s.index == r->slot()) << "slot " << s.index;
  }
  EXPECT_EQ(r->Snapshot(0).used_bytes, 30u << 20);
  EXPECT_EQ(r->SweepDeadIfDue(), 1) << "no sweep has run: one is due";
  EXPECT_EQ(r->Snapshot(0).used_bytes, 0u);
  ASSERT_EQ(r->Slots().size(), 1u);
  EXPECT_EQ(r->SweepDeadIfDue(), 0) << "the next is not due for kSweepIntervalNs";
}

// The claim reads no procfs file: the start time is recorded when asked, once.
TEST_F(RegionTest, TheStartTimeIsRecordedAfterTheClaimOnce) {
  auto r = MustOpen();
  auto view = MustOpen();
  r->RecordStartTime();  // not registered: nothing to record in
  ASSERT_TRUE(r->Register().ok());
  ASSERT_EQ(view->Slots().size(), 1u);
  EXPECT_EQ(view->Slots()[0].start_time_ticks, 0u);
  r->RecordStartTime();
  const uint64_t ticks = ProcessStartTicks();
  ASSERT_GT(ticks, 0u);
  EXPECT_EQ(view->Slots()[0].start_time_ticks, ticks);
  r->Unregister();
  ASSERT_TRUE(r->Register().ok());
  EXPECT_EQ(view->Slots()[0].start_time_ticks, 0u) << "a new claim starts unrecorded";
}

TEST_F(RegionTest, ForkChildRegistersAsItselfAndLeavesItsParentsSlotAlone) {
  auto r = MustOpen();
  int parent_slot = *r->Register();
  ASSERT_EQ(r->Reserve(0, 1 << 20, UsageKind::kData), Admission::kOk);
  EXPECT_EQ(InChild([&] {
              if (!r->ReopenAfterFork().ok()) return 1;
              auto s = r->Register();
              if (!s.ok() || *s == parent_slot) return 2;
              if (r->Reserve(0, 2 << 20, UsageKind::kData) != Admission::kOk) return 3;
              r->Unregister();
              return 0;
            }),
            0);
  auto slots = r->Slots();
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].index, parent_slot);
  EXPECT_TRUE(slots[0].alive);
  EXPECT_EQ(r->Snapshot(0).used_bytes, 1u << 20);
}

TEST_F(RegionTest, ADeviceThePolicyDoesNotHaveIsRefusedAndNothingIsCharged) {
  auto r = MustOpen();  // two devices
  ASSERT_TRUE(r->Register().ok());
  EXPECT_EQ(r->Reserve(5, 1 << 20, UsageKind::kData), Admission::kNoSuchDevice);
  EXPECT_EQ(r->Reserve(-1, 1 << 20, UsageKind::kData), Admission::kNoSuchDevice);
  EXPECT_EQ(r->Snapshot(5).used_bytes, 0u);
  EXPECT_EQ(r->Snapshot(5).slot_sum_bytes, 0u);
  EXPECT_TRUE(r->Check().empty());
}

TEST_F(RegionTest, AForkChildMustReopenBeforeItRegistersOrSweeps) {
  auto r = MustOpen();
  int parent_slot = *r->Register();
  EXPECT_EQ(InChild([&] {
              if (r->Register().ok()) return 1;  // the parent's handle: refused
              if (r->SweepDead() != 0) return 2;
              r->Unregister();  // forgets the parent's slot, touches nothing
              if (r->slot() != -1) return 3;
              if (!r->ReopenAfterFork().ok()) return 4;
              auto s = r->Register();
              if (!s.ok() || *s == parent_slot) return 5;
              r->Unregister();
              return 0;
            }),
            0);
  auto slots = r->Slots();
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].index, parent_slot);
  EXPECT_TRUE(slots[0].alive);
}

TEST_F(RegionTest, ThreadsMayRegisterReserveSweepAndUnregisterTogether) {
  auto r = MustOpen(TwoDevices(1 << 20));
  // A fixed amount of work, not a duration: the registering thread runs kCycles cycles and
  // each worker goes on until it has seen them end and done kRounds rounds of its own.
  constexpr int kCycles = 2000;
  constexpr int kRounds = 2000;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    for (int i = 0; i < kCycles; ++i) {
      (void)r->Register();
      std::this_thread::yield();
      r->Unregister();
    }
    stop = true;
  });
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds || !stop.load(); ++round) {
        if (r->Reserve(t % 2, 4096, UsageKind::kData) == Admission::kOk) {
          r->Release(t % 2, 4096, UsageKind::kData);
        }
        r->SweepDead();
        (void)r->Snapshot(t % 2);
      }
    });
  }
  for (auto& t : threads) t.join();
  r->Unregister();
  EXPECT_TRUE(r->Slots().empty());
  EXPECT_TRUE(r->Check().empty());
  EXPECT_EQ(r->Snapshot(0).used_bytes, 0u) << "a reservation landed in a slot being freed";
  EXPECT_EQ(r->Snapshot(1).used_bytes, 0u) << "a reservation landed in a slot being freed";
}

TEST_F(RegionTest, RefusesForeignSmallAndLinkedFilesNamingThem) {
  ASSERT_TRUE(
      WriteAll(OpenRegularFile(path_, O_CREAT | O_WRONLY)->get(), std::string(8192, 'q')).ok());
  PolicySpec p = TwoDevices();
  auto r = Region::Open(path_, &p, Create::kIfMissing, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr(path_));
  EXPECT_THAT(r.error().message(), HasSubstr("bad magic"));
  EXPECT_EQ(*ReadFileToString(path_), std::string(8192, 'q'));
  std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(path_.c_str(), link.c_str()), 0);
  EXPECT_THAT(Region::Open(link, &p, Create::kIfMissing, nullptr).error().message(),
              HasSubstr("symbolic link"));
}

TEST_F(RegionTest, ALimitIsLoweredOnlyToWhatTheDeviceHoldsOrMore) {
  auto a = MustOpen(TwoDevices(100 << 20));
  auto node = MustOpen();
  ASSERT_TRUE(a->Register().ok());
  ASSERT_EQ(a->Reserve(0, 40 << 20, UsageKind::kData), Admission::kOk);
  Status below = node->LowerMemoryLimitAboveUse(0, 30 << 20);
  ASSERT_FALSE(below.ok());
  EXPECT_EQ(below.error().code(), ErrorCode::kBusy);
  EXPECT_THAT(below.error().message(),
              HasSubstr("device 0 holds 41943040 bytes, more than the limit of 31457280"));
  EXPECT_EQ(node->MemoryLimit(0), uint64_t(100 << 20));
  ASSERT_TRUE(node->LowerMemoryLimitAboveUse(0, 50 << 20).ok());
  EXPECT_EQ(a->MemoryLimit(0), uint64_t(50 << 20));
  EXPECT_EQ(a->Reserve(0, 20 << 20, UsageKind::kData), Admission::kOverLimit);
  EXPECT_FALSE(node->LowerMemoryLimitAboveUse(0, 0).ok()) << "0 would be no limit at all";
  EXPECT_FALSE(node->LowerMemoryLimitAboveUse(5, 1 << 20).ok());
}

// The check and the change are one step under the device's lock: whenever a lowering
// succeeds, no reservation made around it ends past the new limit.
TEST_F(RegionTest, ALoweringRacingReservationsNeverLeavesTheDeviceOverItsLimit) {
  for (int round = 0; round < 50; ++round) {
    path_ = tmp_.File("usage.cache." + std::to_string(round));
    auto r = MustOpen(TwoDevices(0));
    auto node = MustOpen();
    ASSERT_TRUE(r->Register().ok());
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&] {
        while (!stop.load() && r->Reserve(0, 4096, UsageKind::kData) == Admission::kOk) {
        }
      });
    }
    Status lowered = OkStatus();
    do {
      lowered = node->LowerMemoryLimitAboveUse(0, node->UsedBytes(0) + 2 * 4096);
    } while (!lowered.ok());
    stop = true;
    for (auto& t : threads) t.join();
    EXPECT_LE(r->UsedBytes(0), r->MemoryLimit(0)) << "round " << round;
  }
}

TEST_F(RegionTest, ThreadsReservingConcurrentlyNeverPassTheLimit) {
  auto r = MustOpen(TwoDevices(1000));
  ASSERT_TRUE(r->Register().ok());
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (r->Reserve(0, 7, UsageKind::kData) == Admission::kOk) ok++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 1000 / 7);
  EXPECT_EQ(r->Snapshot(0).used_bytes, uint64_t(1000 / 7 * 7));
}

// ---- memory outside the device budget (layout minor 5) ----

TEST_F(RegionTest, TheHostBudgetIsHeldExactlyAcrossProcessesAndThreads) {
  PolicySpec p = TwoDevices();
  p.oversubscribe = true;
  p.host_limit = 1400;  // 200 pieces: what one child gets fits its exit status
  auto r = MustOpen(p);
  EXPECT_EQ(r->Policy().host_limit, 1400u);
  // Four processes of four threads each race for 7-byte pieces; every process keeps what it
  // got (it does not unregister) and says how much in its exit status. None exits (its pieces
  // would become reclaimable) until every one has finished racing: each says so on `done`
  // and waits for `release` to close.
  int done[2], release[2];
  ASSERT_EQ(pipe(done), 0);
  ASSERT_EQ(pipe(release), 0);
  std::vector<pid_t> children;
  for (int c = 0; c < 4; ++c) {
    pid_t pid = fork();
    if (pid == 0) {
      close(done[0]);
      close(release[1]);
      auto mine = Region::Open(path_, nullptr, Create::kNever, nullptr);
      if (!mine.ok() || !(*mine)->Register().ok()) _exit(255);
      std::atomic<int> got{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
          for (int i = 0; i < 200; ++i) {
            if ((*mine)->ReserveHost(7) == Admission::kOk) got++;
          }
        });
      }
      for (auto& t : threads) t.join();
      char byte = 1, eof;
      if (write(done[1], &byte, 1) != 1) _exit(254);
      while (read(release[0], &eof, 1) < 0 && errno == EINTR) {
      }
      _exit(got.load());
    }
    children.push_back(pid);
  }
  close(done[1]);
  close(release[0]);
  for (size_t finished = 0; finished < children.size();) {
    char byte;
    const ssize_t n = read(done[0], &byte, 1);
    if (n == 0) break;  // a child died before saying so: its status says why below
    if (n == 1) ++finished;
  }
  close(done[0]);
  close(release[1]);
  int total = 0;
  for (pid_t pid : children) {
    int st = 0;
    waitpid(pid, &st, 0);
    ASSERT_TRUE(WIFEXITED(st));
    total += WEXITSTATUS(st);
  }
  EXPECT_EQ(total, 1400 / 7) << "every piece that fit, and not one more";
  EXPECT_EQ(r->Host().peak_bytes, 1400u);
  EXPECT_GT(r->Host().rejected, 0u);
  // The children died holding their pieces: a reservation that needs them reclaims them.
  ASSERT_TRUE(r->Register().ok());
  EXPECT_EQ(r->ReserveHost(1300), Admission::kOk);
  EXPECT_EQ(r->Host().spilled_bytes, 1300u);
}

TEST_F(RegionTest, AProcessHoldsToTheSmallerHostBudgetAndReleasesWhatItHolds) {
  PolicySpec p = TwoDevices();
  p.host_limit = 1000;
  auto r = MustOpen(p);
  ASSERT_TRUE(r->Register().ok());
  r->SetOwnHostLimit(600);
  EXPECT_EQ(r->HostLimitInForce(), 600u);
  EXPECT_EQ(r->ReserveHost(700), Admission::kOverLimit);
  EXPECT_EQ(r->ReserveHost(600), Admission::kOk);
  EXPECT_EQ(r->ReserveHost(1), Admission::kOverLimit);
  r->ReleaseHost(250);
  EXPECT_EQ(r->Host().spilled_bytes, 350u);
  r->ReleaseHost(1000);  // more than held: nothing goes below zero
  EXPECT_EQ(r->Host().spilled_bytes, 0u);
  r->SetOwnHostLimit(5000);
  EXPECT_EQ(r->HostLimitInForce(), 1000u) << "never more than the region's";
  ASSERT_TRUE(r->SetHostLimit(300).ok());  // a resize of a scaled container
  EXPECT_EQ(r->HostLimitInForce(), 300u);
  EXPECT_EQ(r->Policy().host_limit, 300u);
  EXPECT_EQ(r->Host().rejected, 2u);
}

TEST_F(RegionTest, ImportsAreRecordedPerProcessAndGoWithTheSlot) {
  auto r = MustOpen();
  ASSERT_TRUE(r->Register().ok());
  r->AddImported(3 << 20);
  EXPECT_EQ(InChild([&] {
              auto c = Region::Open(path_, nullptr, Create::kNever, nullptr);
              if (!c.ok() || !(*c)->Register().ok()) return 1;
              (*c)->AddImported(5 << 20);
              (*c)->ReserveHost(0);
              (*c)->Unregister();
              return (*c)->Host().imported_bytes == (3u << 20) ? 0 : 2;
            }),
            0);
  EXPECT_EQ(r->Host().imported_bytes, 3u << 20);
  for (const SlotView& s : r->Slots()) EXPECT_EQ(s.imported_bytes, 3u << 20);
  r->SubtractImported(1 << 20);
  EXPECT_EQ(r->Host().imported_bytes, 2u << 20);
  EXPECT_EQ(r->Host().spilled_bytes, 0u);
  r->Unregister();
  EXPECT_EQ(r->Host().imported_bytes, 0u);
}

// The launch a test injects between the feedback loop's load and its swap.
Region* g_launching = nullptr;

uint32_t DecayOnce(uint32_t v) { return v == 0 ? 0 : v - 1; }

TEST_F(RegionTest, ALaunchRaisesTheRecentKernelCounterAndNeverLowersIt) {
  auto r = MustOpen();
  ASSERT_TRUE(r->Register().ok());
  EXPECT_EQ(r->RecentKernel(), 0u);
  r->RecordActivity(1, 100);
  EXPECT_EQ(r->RecentKernel(), kRecentKernelOnLaunch);
  r->RecordActivity(256, 200);
  EXPECT_EQ(r->RecentKernel(), kRecentKernelOnLaunch) << "launches raise it, they do not add";
  EXPECT_EQ(r->file().policy.last_kernel_ns.load(), 200);
}

TEST_F(RegionTest, ADecayRacingALaunchRetriesOnTheLaunchsValueSoTheLaunchIsNotLost) {
  auto r = MustOpen();
  ASSERT_TRUE(r->Register().ok());
  r->RecordActivity(1, 100);
  ASSERT_EQ(*r->UpdateRecentKernel(DecayOnce), kRecentKernelOnLaunch);
  ASSERT_EQ(r->RecentKernel(), 1u);
  // The decay reads 1 and would store 0; a launch lands before its swap.
  g_launching = r.get();
  auto decay_with_launch = [](uint32_t v) -> uint32_t {
    if (g_launching != nullptr) {
      Region* launching = std::exchange(g_launching, nullptr);
      launching->RecordActivity(1, 200);
    }
    return v == 0 ? 0 : v - 1;
  };
  auto replaced = r->UpdateRecentKernel(decay_with_launch);
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(*replaced, kRecentKernelOnLaunch) << "the swap was retried on the launch's value";
  EXPECT_EQ(r->RecentKernel(), kRecentKernelOnLaunch - 1);
}

TEST_F(RegionTest, UpdatingTheRecentKernelCounterWritesNothingWhenUnchangedAndNeedsWriteAccess) {
  auto r = MustOpen();
  const uint64_t generation = r->Policy().generation;
  EXPECT_EQ(*r->UpdateRecentKernel(DecayOnce), 0u);
  EXPECT_EQ(r->RecentKernel(), 0u);
  EXPECT_EQ(r->Policy().generation, generation) << "the counter is not a policy change";
  auto ro = Region::Open(path_, nullptr, Create::kNever, nullptr, Access::kReadOnly);
  ASSERT_TRUE(ro.ok());
  auto refused = (*ro)->UpdateRecentKernel(DecayOnce);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kPermission);
  EXPECT_THAT(refused.error().message(), HasSubstr(path_));
}

TEST_F(RegionTest, LaunchesAndDecaysFromManyThreadsKeepTheCounterInRange) {
  auto r = MustOpen();
  ASSERT_TRUE(r->Register().ok());
  std::atomic<bool> out_of_range{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        if (t % 2 == 0) {
          r->RecordActivity(1, i);
        } else if (auto old = r->UpdateRecentKernel(DecayOnce); !old.ok() || *old > 2) {
          out_of_range = true;
        }
        if (r->RecentKernel() > kRecentKernelOnLaunch) out_of_range = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(out_of_range.load());
  r->RecordActivity(1, 0);
  EXPECT_EQ(*r->UpdateRecentKernel(DecayOnce), kRecentKernelOnLaunch);
  EXPECT_EQ(r->RecentKernel(), 1u);
}

TEST_F(RegionTest, AnyProcessAttachedSeesARegisteredProcessUntilItExits) {
  auto r = MustOpen();
  r.reset();
  EXPECT_FALSE(*AnyProcessAttached(path_));
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  pid_t child = fork();
  if (child == 0) {
    auto mine = Region::Open(path_, nullptr, Create::kNever, nullptr);
    if (!mine.ok() || !(*mine)->Register().ok()) _exit(1);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    if (read(release[0], &c, 1) != 1) _exit(3);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_TRUE(*AnyProcessAttached(path_));
  ASSERT_EQ(write(release[1], &c, 1), 1);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_FALSE(*AnyProcessAttached(path_)) << "the slot's lock went with the process";
  for (int fd : {ready[0], ready[1], release[0], release[1]}) close(fd);

  std::string link = dir_ + "/link.cache";
  ASSERT_EQ(symlink(path_.c_str(), link.c_str()), 0);
  auto linked = AnyProcessAttached(link);
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(linked.error().code(), ErrorCode::kPermission);
  EXPECT_THAT(linked.error().message(), HasSubstr(link));
  auto missing = AnyProcessAttached(dir_ + "/none.cache");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().sys_errno(), ENOENT);
  EXPECT_THAT(missing.error().message(), HasSubstr(dir_ + "/none.cache"));
}

// A process never runs looser than it was given, for compute too: its own share holds with
// the region's for its launches, and the container's controller holds the container to the
// strictest share of its live processes.
TEST_F(RegionTest, AProcesssOwnSmShareHoldsWithTheRegionsAndTheStrictestHoldsTheContainer) {
  auto a = MustOpen();  // sm_limit[0] = 30, none on device 1
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Register().ok());
  EXPECT_EQ(a->SmLimitInForce(0), 30u);
  a->SetOwnSmLimit(0, 20);
  a->SetOwnSmLimit(1, 40);
  EXPECT_EQ(a->SmLimitInForce(0), 20u) << "its own is stricter";
  EXPECT_EQ(a->SmLimitInForce(1), 40u) << "the region has none: its own holds";
  a->SetOwnSmLimit(0, 50);
  EXPECT_EQ(a->SmLimitInForce(0), 30u) << "the region's is stricter";
  a->SetOwnSmLimit(0, 100);
  EXPECT_EQ(a->SmLimitInForce(0), 30u) << "100 is none of its own";

  auto b = MustOpen();
  ASSERT_NE(b, nullptr);
  b->SetOwnSmLimit(0, 10);  // published when it registers
  ASSERT_TRUE(b->Register().ok());
  EXPECT_EQ(a->SmLimitInForce(0), 30u) << "another process's share is not a's launch limit";
  EXPECT_EQ(a->ContainerSmLimit(0), 10u) << "but it holds the container";
  EXPECT_EQ(a->ContainerSmLimit(1), 40u);
  b->Unregister();
  EXPECT_EQ(a->ContainerSmLimit(0), 30u) << "gone with its process";

  ASSERT_TRUE(a->SetCorePolicy(CorePolicy::kDisable).ok());
  EXPECT_EQ(a->SmLimitInForce(1), 0u) << "the core policy gates its own share as the region's";
  EXPECT_EQ(a->ContainerSmLimit(1), 0u);
}

}  // namespace
}  // namespace hami::region
