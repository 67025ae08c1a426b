#include "vgpu/pointer_map.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace hami::vgpu {
namespace {

TEST(PointerMapTest, FindsWhatWasInsertedAndForgetsWhatWasErased) {
  PointerMap<int> m;
  EXPECT_EQ(m.Find(0x1000), nullptr);
  m.Insert(0x1000, 1);
  m.Insert(0x2000, 2);
  ASSERT_NE(m.Find(0x1000), nullptr);
  EXPECT_EQ(*m.Find(0x1000), 1);
  m.Insert(0x1000, 3);
  EXPECT_EQ(*m.Find(0x1000), 3) << "insert replaces";
  EXPECT_EQ(m.size(), 2u);
  int out = 0;
  EXPECT_TRUE(m.Erase(0x1000, &out));
  EXPECT_EQ(out, 3);
  EXPECT_FALSE(m.Erase(0x1000, &out));
  EXPECT_EQ(m.Find(0x1000), nullptr);
  EXPECT_EQ(*m.Find(0x2000), 2) << "erasing one leaves its neighbours findable";
}

TEST(PointerMapTest, TheReservedKeysAreNeverEntries) {
  PointerMap<int> m;
  m.Insert(0, 1);
  m.Insert(1, 1);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.Find(0), nullptr);
  EXPECT_EQ(m.Find(1), nullptr);
}

TEST(PointerMapTest, AgreesWithAStdMapUnderRandomChurn) {
  PointerMap<uint64_t> m;
  std::map<uint64_t, uint64_t> ref;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Aligned addresses from a small range, so that keys collide and come back.
    uint64_t key = ((rng() % 4096) + 1) << 12;
    switch (rng() % 3) {
      case 0:
      case 1:
        m.Insert(key, uint64_t(i));
        ref[key] = uint64_t(i);
        break;
      case 2: {
        uint64_t out = 0;
        bool had = ref.erase(key) != 0;
        ASSERT_EQ(m.Erase(key, &out), had);
        break;
      }
    }
    ASSERT_EQ(m.size(), ref.size());
  }
  for (const auto& [k, v] : ref) {
    ASSERT_NE(m.Find(k), nullptr);
    EXPECT_EQ(*m.Find(k), v);
  }
  m.EraseIf([](uint64_t k, uint64_t) { return (k >> 12) % 2 == 0; });
  std::erase_if(ref, [](const auto& e) { return (e.first >> 12) % 2 == 0; });
  EXPECT_EQ(m.size(), ref.size());
  for (const auto& [k, v] : ref) EXPECT_NE(m.Find(k), nullptr);
}

}  // namespace
}  // namespace hami::vgpu
