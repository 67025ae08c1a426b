// Reading module images: kernels, their parameters and registers, and globals with their
// sizes and initial values, from a cubin and from a fat binary built by nvcc from
// image_corpus/kernels.cu; malformed images are refused naming the field.
#include "sim/cuda/image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/file.h"

namespace hami::sim {
namespace {

std::string Corpus(const std::string& name) {
  auto text = ReadFileToString(std::string(HAMI_IMAGE_CORPUS) + "/" + name, 1 << 20);
  EXPECT_TRUE(text.ok()) << name;
  return text.ok() ? *text : std::string();
}

Result<ImageInfo> Read(const std::string& bytes) {
  return ReadImage(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

void ExpectKernelsOfTheCorpus(const ImageInfo& info) {
  EXPECT_TRUE(info.complete);
  ASSERT_EQ(info.kernels.size(), 2u);
  const ImageKernel& k2 = info.kernels.at("_Z2k2Pfi");  // k2(float*, int)
  ASSERT_TRUE(k2.params_known);
  ASSERT_EQ(k2.params.size(), 2u);
  EXPECT_EQ(k2.params[0].offset, 0u);
  EXPECT_EQ(k2.params[0].size, 8u);
  EXPECT_EQ(k2.params[1].offset, 8u);
  EXPECT_EQ(k2.params[1].size, 4u);
  EXPECT_GT(k2.num_regs, 0);
  EXPECT_EQ(info.kernels.at("_Z1kPi").params.size(), 1u);
  EXPECT_EQ(info.kernels.count("_Z6helperi"), 0u) << "a device function is not a kernel";
  ASSERT_EQ(info.globals.count("table"), 1u);
  EXPECT_EQ(info.globals.at("table").bytes, 400u);
  ASSERT_EQ(info.globals.count("coef"), 1u);
  const ImageGlobal& coef = info.globals.at("coef");
  EXPECT_EQ(coef.bytes, 64u);
  ASSERT_GE(coef.init.size(), 12u);
  float first[3];
  std::memcpy(first, coef.init.data(), sizeof(first));
  EXPECT_EQ(first[0], 1.0f);
  EXPECT_EQ(first[2], 3.0f);
}

TEST(ModuleImage, ACubinListsItsKernelsParametersAndGlobals) {
  std::string cubin = Corpus("kernels.cubin");
  auto info = Read(cubin);
  ASSERT_TRUE(info.ok()) << info.error().message();
  EXPECT_EQ(info->format, ImageFormat::kElf);
  ExpectKernelsOfTheCorpus(*info);
  EXPECT_EQ(ImageExtent(cubin.data()), cubin.size());
}

TEST(ModuleImage, AFatBinaryIsReadThroughItsCubin) {
  std::string fatbin = Corpus("kernels.fatbin");
  auto info = Read(fatbin);
  ASSERT_TRUE(info.ok()) << info.error().message();
  EXPECT_EQ(info->format, ImageFormat::kFatbin);
  ExpectKernelsOfTheCorpus(*info);
  EXPECT_EQ(ImageExtent(fatbin.data()), fatbin.size());
}

TEST(ModuleImage, TheRuntimesWrapperPointsAtItsFatBinary) {
  std::string fatbin = Corpus("kernels.fatbin");
  struct {
    uint32_t magic, version;
    const void* data;
    const void* extra;
  } wrapper{kFatbinWrapperMagic, 1, fatbin.data(), nullptr};
  EXPECT_EQ(UnwrapImage(&wrapper), fatbin.data());
  EXPECT_EQ(UnwrapImage(fatbin.data()), fatbin.data());
  EXPECT_EQ(UnwrapImage("x"), static_cast<const void*>("x")) << "a short text is left alone";
}

TEST(ModuleImage, ATextImageIsOpaqueAndIncomplete) {
  std::string ptx = Corpus("kernel.ptx");
  auto info = Read(ptx);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->format, ImageFormat::kText);
  EXPECT_FALSE(info->complete) << "any name may be in it";
  EXPECT_EQ(ImageExtent(ptx.c_str()), ptx.size() + 1);
}

TEST(ModuleImage, TruncatedImagesAreRefusedNamingWhatIsMissing) {
  auto cubin = Read(Corpus("truncated.cubin"));
  ASSERT_FALSE(cubin.ok());
  EXPECT_NE(cubin.error().message().find("cubin: section table"), std::string::npos)
      << cubin.error().message();
  auto fatbin = Read(Corpus("truncated.fatbin"));
  ASSERT_FALSE(fatbin.ok());
  EXPECT_NE(fatbin.error().message().find("fat binary: entries"), std::string::npos)
      << fatbin.error().message();
}

TEST(ModuleImage, AnElfThatIsNoCubinIsRefusedOrLeftAlone) {
  std::string elf32 = Corpus("elf32.bin");
  auto info = Read(elf32);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.error().message().find("not a 64-bit little-endian ELF"), std::string::npos);
  EXPECT_EQ(ImageExtent(elf32.data()), 0u) << "not for the CUDA machine: no extent";
}

}  // namespace
}  // namespace hami::sim
