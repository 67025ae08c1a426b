// Reading module images: kernels, their parameters and registers, and globals with their
// sizes and initial values, from a cubin, from fat binaries built by nvcc from
// image_corpus/kernels.cu (of cubins, and of PTX plain and compressed) and from PTX text;
// malformed images are refused naming the field.
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

TEST(ModuleImage, AnLz4CompressedCubinIsReadToo) {
  std::string fatbin = Corpus("kernels_lz4.fatbin");
  auto info = Read(fatbin);
  ASSERT_TRUE(info.ok()) << info.error().message();
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

TEST(ModuleImage, APtxTextListsItsEntries) {
  std::string ptx = Corpus("kernel.ptx");
  auto info = Read(ptx);
  ASSERT_TRUE(info.ok()) << info.error().message();
  EXPECT_EQ(info->format, ImageFormat::kText);
  EXPECT_TRUE(info->complete);
  ASSERT_EQ(info->kernels.size(), 1u);
  EXPECT_TRUE(info->kernels.at("k").params_known);
  EXPECT_TRUE(info->kernels.at("k").params.empty());
  EXPECT_EQ(ImageExtent(ptx.c_str()), ptx.size() + 1);
}

TEST(ModuleImage, ATextThatIsNoPtxIsOpaqueAndIncomplete) {
  auto info = Read(std::string("an image the model cannot see into \"unclosed\n"));
  ASSERT_TRUE(info.ok()) << info.error().message();
  EXPECT_EQ(info->format, ImageFormat::kText);
  EXPECT_FALSE(info->complete) << "any name may be in it";
}

// What kernels.cu declares, read from its PTX: the cubin's view without register counts.
void ExpectPtxOfTheCorpus(const ImageInfo& info) {
  EXPECT_TRUE(info.complete);
  ASSERT_EQ(info.kernels.size(), 2u);
  const ImageKernel& k2 = info.kernels.at("_Z2k2Pfi");
  ASSERT_TRUE(k2.params_known);
  ASSERT_EQ(k2.params.size(), 2u);
  EXPECT_EQ(k2.params[0].offset, 0u);
  EXPECT_EQ(k2.params[0].size, 8u);
  EXPECT_EQ(k2.params[1].offset, 8u);
  EXPECT_EQ(k2.params[1].size, 4u);
  EXPECT_EQ(info.kernels.at("_Z1kPi").params.size(), 1u);
  EXPECT_EQ(info.kernels.count("_Z6helperi"), 0u) << "a device function is not a kernel";
  ASSERT_EQ(info.globals.count("table"), 1u);
  EXPECT_EQ(info.globals.at("table").bytes, 400u);
  EXPECT_TRUE(info.globals.at("table").init.empty());
  ASSERT_EQ(info.globals.count("coef"), 1u);
  const ImageGlobal& coef = info.globals.at("coef");
  EXPECT_EQ(coef.bytes, 64u);
  ASSERT_EQ(coef.init.size(), 12u);
  float first[3];
  std::memcpy(first, coef.init.data(), sizeof(first));
  EXPECT_EQ(first[0], 1.0f);
  EXPECT_EQ(first[1], 2.0f);
  EXPECT_EQ(first[2], 3.0f);
}

TEST(ModuleImage, AFatBinaryOfPtxIsReadThroughItsPtx) {
  for (const char* name : {"kernels_ptx.fatbin", "kernels_ptx_lz4.fatbin"}) {
    SCOPED_TRACE(name);
    std::string fatbin = Corpus(name);
    auto info = Read(fatbin);
    ASSERT_TRUE(info.ok()) << info.error().message();
    EXPECT_EQ(info->format, ImageFormat::kFatbin);
    ExpectPtxOfTheCorpus(*info);
    EXPECT_EQ(ImageExtent(fatbin.data()), fatbin.size());
  }
}

TEST(ModuleImage, AZstandardPayloadIsLeftUnreadAndTheImageIncomplete) {
  auto info = Read(Corpus("kernels_ptx_zstd.fatbin"));
  ASSERT_TRUE(info.ok()) << info.error().message();
  EXPECT_FALSE(info->complete);
  EXPECT_TRUE(info->kernels.empty());
}

TEST(ModuleImage, ACorruptLz4PayloadIsRefusedNamingIt) {
  std::string fatbin = Corpus("kernels_ptx_lz4.fatbin");
  ASSERT_GT(fatbin.size(), 16u + 64u);
  // The entry's uncompressed size (u64 at 56 in its header) one less than the payload holds.
  uint64_t declared;
  std::memcpy(&declared, fatbin.data() + 16 + 56, 8);
  const uint64_t less = declared - 1;
  std::memcpy(fatbin.data() + 16 + 56, &less, 8);
  auto info = Read(fatbin);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.error().message().find("LZ4 payload: output beyond the declared size"),
            std::string::npos)
      << info.error().message();
}

TEST(ModuleImage, MalformedPtxIsRefusedNamingWhatIsWrong) {
  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      {".version 8.0\n.target sm_80\n.entry k(.param .u64 p\n", "parameters of k are not closed"},
      {".version 8.0\n.entry k(.param p) {}\n", "a parameter of k has no type"},
      {".version 8.0\n.entry k(.param .b8 p[40000]) {}\n", "take more than 32764 bytes"},
      {".version 8.0\n.global .b8 g[x];\n", "a global g: bad dimension"},
      {".version 8.0\n.entry k() {\n", "a block is not closed"},
      {".version 8.0\n/* open\n", "a comment is not closed (line 2)"},
      {".version 8.0\n.global .align 3 .b8 g;\n", "bad alignment '3'"},
  };
  for (const Case& c : cases) {
    auto info = Read(c.text);
    ASSERT_FALSE(info.ok()) << c.text;
    EXPECT_NE(info.error().message().find(c.error), std::string::npos)
        << c.text << " -> " << info.error().message();
    EXPECT_EQ(info.error().message().rfind("PTX: ", 0), 0u) << info.error().message();
  }
}

TEST(ModuleImage, PtxParametersAreLaidOutByTheirAlignment) {
  auto info = Read(std::string(
      ".version 8.0\n.target sm_80\n"
      ".visible .entry f(.param .u8 a, .param .align 16 .b8 s[24], .param .u64 .ptr .global "
      ".align 8 p, .param .v2 .f32 v)\n{ ret; }\n"
      ".visible .global .align 8 .u64 counter = 0x10;\n"
      ".global .s32 neg[2] = {-1, 7};\n"
      ".global .f32 open[] = {0f3F800000, 0f40000000, 0f40400000};\n"
      ".extern .global .b8 elsewhere[16];\n"
      ".global .texref tex;\n"));
  ASSERT_TRUE(info.ok()) << info.error().message();
  const auto& params = info->kernels.at("f").params;
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].offset, 0u);
  EXPECT_EQ(params[0].size, 1u);
  EXPECT_EQ(params[1].offset, 16u);
  EXPECT_EQ(params[1].size, 24u);
  EXPECT_EQ(params[2].offset, 40u);
  EXPECT_EQ(params[2].size, 8u);
  EXPECT_EQ(params[3].offset, 48u);
  EXPECT_EQ(params[3].size, 8u);
  EXPECT_EQ(info->globals.at("counter").bytes, 8u);
  EXPECT_EQ(info->globals.at("counter").init, std::vector<uint8_t>({0x10, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(info->globals.at("neg").init,
            std::vector<uint8_t>({0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0}));
  EXPECT_EQ(info->globals.at("open").bytes, 12u);
  EXPECT_EQ(info->globals.count("elsewhere"), 0u) << "declared, not defined here";
  EXPECT_EQ(info->globals.count("tex"), 0u) << "a texture reference has no memory";
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
