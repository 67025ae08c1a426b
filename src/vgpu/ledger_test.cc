#include "vgpu/ledger.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace hami::vgpu {
namespace {

constexpr uint64_t kGranule = 2ull << 20;
CUcontext Ctx(uintptr_t n) { return reinterpret_cast<CUcontext>(n); }

uint64_t DataOf(const Returns& r, int device = 0) { return r.of(device, UsageKind::kData); }

TEST(Ledger, SmallAllocationsShareAPageUntilItIsFull) {
  Ledger l;
  // The first needs a page; the next ones fit in it until 2 MiB of shares are taken.
  EXPECT_FALSE(l.TakeSmall(Ctx(1), 0, 512, kGranule));
  ASSERT_EQ(l.PagesNeeded(Ctx(1), 0, 512, kGranule), 1u);
  EXPECT_TRUE(l.TakeSmallWithPages(Ctx(1), 0, 512, 1, kGranule).empty());
  for (int i = 1; i < int(kGranule / 512); ++i) {
    ASSERT_TRUE(l.TakeSmall(Ctx(1), 0, 512, kGranule)) << i;
  }
  EXPECT_FALSE(l.TakeSmall(Ctx(1), 0, 512, kGranule));
  EXPECT_EQ(l.PagesNeeded(Ctx(1), 0, 512, kGranule), 1u);
  // Another context has pages of its own.
  EXPECT_EQ(l.PagesNeeded(Ctx(2), 0, 512, kGranule), 1u);
}

TEST(Ledger, TwoThreadsThatBothAdmittedAPageGiveTheSpareBack) {
  Ledger l;
  // Both found no room and each admitted one page for 4 KiB: one page is enough.
  Returns first = l.TakeSmallWithPages(Ctx(1), 0, 4096, 1, kGranule);
  Returns second = l.TakeSmallWithPages(Ctx(1), 0, 4096, 1, kGranule);
  EXPECT_TRUE(first.empty());
  EXPECT_EQ(DataOf(second), kGranule);
}

TEST(Ledger, FreeingTheLastShareOfAPageReturnsThePage) {
  Ledger l;
  l.TakeSmallWithPages(Ctx(1), 0, 1024, 1, kGranule);
  ASSERT_TRUE(l.TakeSmall(Ctx(1), 0, 1024, kGranule));
  const Allocation a{0, 1024, UsageKind::kData, Ctx(1), true};
  l.Track(0x1000, a);
  l.Track(0x2000, a);
  auto r1 = l.Forget(0x1000);
  ASSERT_TRUE(r1.has_value());
  EXPECT_TRUE(r1->empty()) << "the page still holds the other share";
  auto r2 = l.Forget(0x2000);
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(DataOf(*r2), kGranule);
  EXPECT_FALSE(l.Forget(0x2000).has_value()) << "an address is forgotten once";
}

TEST(Ledger, LargeAllocationsReturnTheirWholeCharge) {
  Ledger l;
  l.Track(0x10000, Allocation{1, 8ull << 20, UsageKind::kData, Ctx(1), false});
  auto r = l.Forget(0x10000);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(DataOf(*r, 1), 8ull << 20);
  EXPECT_EQ(DataOf(*r, 0), 0u);
}

TEST(Ledger, AnEndedContextReturnsItselfItsAllocationsPagesAndObjects) {
  Ledger l;
  l.AddContext(Ctx(1), ContextCharge{0, 300ull << 20, true});
  l.AddContext(Ctx(2), ContextCharge{0, 300ull << 20, false});
  l.Track(0x10000, Allocation{0, 8ull << 20, UsageKind::kData, Ctx(1), false});
  l.Track(0x20000, Allocation{0, 8ull << 20, UsageKind::kData, Ctx(2), false});
  l.TakeSmallWithPages(Ctx(1), 0, 4096, 1, kGranule);
  l.Track(0x30000, Allocation{0, 4096, UsageKind::kData, Ctx(1), true});
  int module = 0;
  l.TrackObject(&module, Held{0, 4ull << 20, UsageKind::kModule, Ctx(1)});
  int library = 0;
  l.TrackObject(&library, Held{0, 4ull << 20, UsageKind::kModule, nullptr});  // no context

  Returns r = l.EndContext(Ctx(1));
  EXPECT_EQ(r.of(0, UsageKind::kContext), 300ull << 20);
  EXPECT_EQ(DataOf(r), (8ull << 20) + kGranule);
  EXPECT_EQ(r.of(0, UsageKind::kModule), 4ull << 20);
  EXPECT_EQ(l.PrimaryOn(0), nullptr);
  EXPECT_EQ(l.DeviceOfContext(Ctx(2)), 0);
  EXPECT_FALSE(l.Forget(0x10000).has_value()) << "gone with its context";
  EXPECT_TRUE(l.Forget(0x20000).has_value()) << "another context's allocation stays";
  EXPECT_TRUE(l.ForgetObject(&library).has_value());
}

TEST(Ledger, AnOwnersCodeInEachContextGoesWithTheOwnerOrWithItsContext) {
  Ledger l;
  int library = 0, other = 0, f1 = 0, f2 = 0, f3 = 0;
  // The library itself held nothing (loaded lazily); its code in two contexts did.
  l.TrackObject(&f1, Held{0, kGranule, UsageKind::kModule, Ctx(1), &library});
  l.TrackObject(&f2, Held{1, kGranule, UsageKind::kModule, Ctx(2), &library});
  l.TrackObject(&f3, Held{0, kGranule, UsageKind::kModule, Ctx(1), &other});
  Returns ended = l.EndContext(Ctx(2));
  EXPECT_EQ(ended.of(1, UsageKind::kModule), kGranule) << "the code in the ended context";
  std::optional<Returns> unloaded = l.ForgetObject(&library);
  ASSERT_TRUE(unloaded.has_value()) << "the library owned something, though not tracked itself";
  EXPECT_EQ(unloaded->of(0, UsageKind::kModule), kGranule);
  EXPECT_EQ(unloaded->of(1, UsageKind::kModule), 0u) << "already gone with its context";
  EXPECT_FALSE(l.ForgetObject(&library).has_value()) << "once";
  EXPECT_FALSE(l.ForgetObject(&f1).has_value());
  EXPECT_TRUE(l.ForgetObject(&f3).has_value()) << "another owner's code stays";
  EXPECT_FALSE(l.ForgetObject(&other).has_value()) << "it owns nothing any more";
}

TEST(Ledger, PhysicalMemoryIsReturnedOnceReleasedAndUnmapped) {
  Ledger l;
  l.AddPhysical(7, 0, 2ull << 20);
  l.Map(0x100000, 2ull << 20, 7);
  l.RetainPhysical(7);  // a second handle
  EXPECT_TRUE(l.ReleasePhysical(7).empty()) << "one handle and the mapping remain";
  EXPECT_TRUE(l.ReleasePhysical(7).empty()) << "still mapped";
  Returns r = l.Unmap(0x100000, 2ull << 20);
  EXPECT_EQ(r.of(0, UsageKind::kVmm), 2ull << 20);
  EXPECT_TRUE(l.Unmap(0x100000, 2ull << 20).empty()) << "unmapped once";
}

TEST(Ledger, AnUnmapCoversEveryMappingThatStartsInItsRange) {
  Ledger l;
  l.AddPhysical(1, 0, 2ull << 20);
  l.AddPhysical(2, 0, 2ull << 20);
  l.Map(0x200000, 2ull << 20, 1);
  l.Map(0x400000, 2ull << 20, 2);
  l.ReleasePhysical(1);
  l.ReleasePhysical(2);
  Returns r = l.Unmap(0x200000, 4ull << 20);
  EXPECT_EQ(r.of(0, UsageKind::kVmm), 4ull << 20);
}

TEST(Ledger, ConcurrentSharesNeverLoseAPage) {
  Ledger l;
  // Threads take and free small shares in one context; whatever the interleaving, what the
  // ledger admitted minus what it returned is what its live shares need.
  constexpr int kThreads = 4, kRounds = 2000;
  std::atomic<uint64_t> admitted{0}, returned{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const uint64_t size = uint64_t{512} * static_cast<uint64_t>(1 + (i + t) % 64);
        if (!l.TakeSmall(Ctx(1), 0, size, kGranule)) {
          const uint64_t pages = l.PagesNeeded(Ctx(1), 0, size, kGranule);
          admitted += pages * kGranule;
          returned += DataOf(l.TakeSmallWithPages(Ctx(1), 0, size, pages, kGranule));
        }
        const CUdeviceptr p = CUdeviceptr{0x1000000} * static_cast<CUdeviceptr>(t + 1) +
                              static_cast<CUdeviceptr>(i) * 0x1000;
        l.Track(p, Allocation{0, size, UsageKind::kData, Ctx(1), true});
        if (i % 2 == 1) returned += DataOf(*l.Forget(p));
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t live = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kRounds; i += 2) {
      live += uint64_t{512} * static_cast<uint64_t>(1 + (i + t) % 64);
    }
  }
  const uint64_t held = admitted - returned;
  EXPECT_GE(held, RoundUp(live, kGranule)) << "a page in use was given back";
  EXPECT_EQ(held, RoundUp(live, kGranule)) << "a spare page was kept";
}

}  // namespace
}  // namespace hami::vgpu
