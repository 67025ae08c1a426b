// The stand-ins of glibc_floor.cc behave as glibc's functions do. Linked into this test, its
// _dl_find_object interposes glibc's for the whole process (the shared unwinder included), so
// a C++ exception thrown and caught here is unwound through it; glibc's own is reached with
// dlvsym for the comparison.
#include "vgpu/glibc_floor.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>

namespace {

using FindObjectFn = int (*)(void*, dl_find_object*);

FindObjectFn GlibcFindObject() {
  return reinterpret_cast<FindObjectFn>(dlvsym(RTLD_NEXT, "_dl_find_object", "GLIBC_2.35"));
}

void ExpectSameAsGlibc(void* address) {
  FindObjectFn glibc = GlibcFindObject();
  ASSERT_NE(glibc, nullptr) << "glibc's _dl_find_object not found: " << dlerror();
  dl_find_object ours{}, theirs{};
  const int ours_rc = _dl_find_object(address, &ours);
  const int theirs_rc = glibc(address, &theirs);
  ASSERT_EQ(ours_rc, theirs_rc) << "address " << address;
  if (ours_rc != 0) return;
  EXPECT_EQ(ours.dlfo_eh_frame, theirs.dlfo_eh_frame) << "address " << address;
  EXPECT_EQ(ours.dlfo_link_map, theirs.dlfo_link_map) << "address " << address;
  // glibc reports the mapping from the first to the last PT_LOAD, page-rounded at the end.
  EXPECT_EQ(ours.dlfo_map_start, theirs.dlfo_map_start) << "address " << address;
  EXPECT_LE(reinterpret_cast<uintptr_t>(ours.dlfo_map_end),
            reinterpret_cast<uintptr_t>(theirs.dlfo_map_end));
  EXPECT_GT(reinterpret_cast<uintptr_t>(ours.dlfo_map_end), reinterpret_cast<uintptr_t>(address));
}

TEST(GlibcFloor, FindObjectAgreesWithGlibcInTheProgramAndInLibc) {
  ExpectSameAsGlibc(reinterpret_cast<void*>(&ExpectSameAsGlibc));
  ExpectSameAsGlibc(reinterpret_cast<void*>(&dlvsym));
  ExpectSameAsGlibc(reinterpret_cast<void*>(&testing::UnitTest::GetInstance));
}

TEST(GlibcFloor, FindObjectRefusesAnAddressOfNoObject) {
  int on_stack = 0;
  dl_find_object r{};
  EXPECT_EQ(_dl_find_object(&on_stack, &r), -1);
  EXPECT_EQ(_dl_find_object(nullptr, &r), -1);
}

TEST(GlibcFloor, AnExceptionUnwindsThroughTheStandIn) {
  bool caught = false;
  try {
    throw std::runtime_error("unwound");
  } catch (const std::runtime_error& e) {
    caught = std::string(e.what()) == "unwound";
  }
  EXPECT_TRUE(caught);
}

TEST(GlibcFloor, Arc4randomDrawsFromTheKernel) {
  // 64 draws of 32 bits all equal would mean no randomness at all.
  const uint32_t first = arc4random();
  bool differs = false;
  for (int i = 0; i < 64 && !differs; ++i) differs = arc4random() != first;
  EXPECT_TRUE(differs);
}

}  // namespace
