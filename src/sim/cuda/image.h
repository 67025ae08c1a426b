// What a module image declares, read from the image itself: the kernels (with their
// parameter layouts and register counts) and the global variables (with their sizes) of a
// cubin (ELF), of a fat binary holding cubins (plain or LZ4-compressed), or of the runtime's
// fat-binary wrapper; and the kernels and globals of PTX (no register counts), as text or as
// the entries of a fat binary without a readable cubin, plain or LZ4-compressed.
//
// Images are outside input: ReadImage reads only the bytes it is given, checks every
// offset, and refuses a malformed header, payload or PTX text with an error naming the
// format and the field. An image it cannot see into (Zstandard-compressed payloads, text
// that is no PTX, other formats) is accepted as incomplete: the simulated driver then lets
// any kernel or global name resolve, since the image may hold it.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

namespace hami::sim {

inline constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;
inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;

struct KernelParam {
  uint32_t offset = 0;  // bytes from the start of the parameter buffer
  uint32_t size = 0;    // bytes
};

struct ImageKernel {
  bool params_known = false;
  std::vector<KernelParam> params;  // by ordinal
  int num_regs = 0;                 // 0: not recorded
  uint64_t wave_ns = 0;             // a manifest's device time per wave; 0: the default
};

struct ImageGlobal {
  uint64_t bytes = 0;
  std::vector<uint8_t> init;  // initial contents (shorter than `bytes`: the rest is zero)
};

enum class ImageFormat : uint8_t { kManifest, kElf, kFatbin, kText, kOpaque };

struct ImageInfo {
  ImageFormat format = ImageFormat::kOpaque;
  // Every code entry could be read: a name the image does not list does not exist in it.
  bool complete = false;
  std::map<std::string, ImageKernel> kernels;  // by (mangled) name
  std::map<std::string, ImageGlobal> globals;
};

// The fat binary a runtime wrapper (u32 magic 0x466243B1, u32 version, pointer to the fat
// binary, pointer) points to, or `image` itself when it is not a wrapper. Reads no further
// into a NUL-terminated text than its NUL.
const void* UnwrapImage(const void* image);

// How many bytes of the image at `image` its own header covers: a fat binary's header and
// entries, a cubin's headers, sections and section table, a text image (PTX) up to and
// including its NUL. 0 when the first bytes are of no known format. `image` must point to a
// whole image, as the driver API requires (only the bytes its format implies are read).
size_t ImageExtent(const void* image);

// Reads `bytes` (an ELF cubin, a fat binary, or anything else, which is opaque).
Result<ImageInfo> ReadImage(std::span<const uint8_t> bytes);

}  // namespace hami::sim
