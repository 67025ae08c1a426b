// The NVML loader (src/inventory/nvml_library.h) against the simulated GPU's NVML and the
// inventory's fake NVML (which has no event API), each opened by path.
#include "inventory/nvml_library.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>

#include "common/temp_dir.h"

namespace hami::inventory {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;

std::string SimNvml() { return std::string(HAMI_SIM_LIB_DIR) + "/libnvidia-ml.so.1"; }

// Whether the file at `path` is mapped in this process now.
bool Loaded(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

TEST(NvmlLibrary, ResolvesEveryFunctionOfTheSimulatedNvmlTyped) {
  auto lib = NvmlLibrary::Open(SimNvml(), Unload::kOnClose);
  ASSERT_TRUE(lib.ok()) << lib.error().message();
  const std::initializer_list<std::string_view> every = {
#define HAMI_NVML_NAME(name) #name,
      HAMI_NVML_FUNCTIONS(HAMI_NVML_NAME)
#undef HAMI_NVML_NAME
  };
  EXPECT_EQ(lib->FirstMissing(every), "");
  EXPECT_THAT(lib->Path(), EndsWith("/libnvidia-ml.so.1"));
  const NvmlFunctions& n = lib->fn();
  ASSERT_EQ(n.nvmlInit_v2(), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(n.nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_GT(count, 0u);
  EXPECT_EQ(n.nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(lib->Why(NVML_ERROR_INVALID_ARGUMENT), "Invalid Argument");
}

TEST(NvmlLibrary, NamesTheFirstRequiredFunctionTheLibraryLacks) {
  auto lib = NvmlLibrary::Open(HAMI_FAKE_NVML, Unload::kOnClose);
  ASSERT_TRUE(lib.ok()) << lib.error().message();
  EXPECT_EQ(lib->FirstMissing({"nvmlInit_v2", "nvmlDeviceGetUUID"}), "");
  EXPECT_EQ(lib->FirstMissing({"nvmlInit_v2", "nvmlEventSetCreate", "nvmlEventSetFree"}),
            "nvmlEventSetCreate");
  EXPECT_EQ(lib->fn().nvmlEventSetCreate, nullptr);
  EXPECT_EQ(lib->FirstMissing({"nvmlNotOnTheList"}), "nvmlNotOnTheList");
}

TEST(NvmlLibrary, WithoutNvmlErrorStringAnErrorIsItsNumber) {
  auto lib = NvmlLibrary::Open("libm.so.6", Unload::kOnClose);
  ASSERT_TRUE(lib.ok()) << lib.error().message();
  EXPECT_EQ(lib->FirstMissing({"nvmlInit_v2"}), "nvmlInit_v2");
  EXPECT_EQ(lib->Why(NVML_ERROR_GPU_IS_LOST), "NVML error 15");
}

TEST(NvmlLibrary, AMissingLibraryIsNotFoundWithTheLoadersReason) {
  auto lib = NvmlLibrary::Open("/nonexistent/libnvidia-ml.so.1", Unload::kOnClose);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(lib.error().message(),
              AllOf(HasSubstr("/nonexistent/libnvidia-ml.so.1"), HasSubstr("No such file")));
}

// Copies of libm (NVML's shape does not matter here, and a library with GNU unique symbols,
// as C++ ones often have, is never unloaded), so that no other handle keeps them loaded.
TEST(NvmlLibrary, ClosesOnDestructionUnlessToldToKeepItLoaded) {
  TempDir dir("hami-nvml-library-test");
  ASSERT_TRUE(dir.ok());
  std::string libm;
  {
    auto lib = NvmlLibrary::Open("libm.so.6", Unload::kOnClose);
    ASSERT_TRUE(lib.ok()) << lib.error().message();
    libm = lib->Path();
  }
  ASSERT_FALSE(libm.empty());
  const std::string closed = dir.File("closed.so"), kept = dir.File("kept.so");
  std::filesystem::copy_file(libm, closed);
  std::filesystem::copy_file(libm, kept);
  {
    auto a = NvmlLibrary::Open(closed, Unload::kOnClose);
    auto b = NvmlLibrary::Open(kept, Unload::kNever);
    ASSERT_TRUE(a.ok() && b.ok());
    NvmlLibrary moved = std::move(a).value();  // the moved-from one closes nothing
    EXPECT_EQ(moved.Path(), closed);
    EXPECT_TRUE(Loaded(closed));
    EXPECT_TRUE(Loaded(kept));
  }
  EXPECT_FALSE(Loaded(closed));
  EXPECT_TRUE(Loaded(kept));
}

}  // namespace
}  // namespace hami::inventory
