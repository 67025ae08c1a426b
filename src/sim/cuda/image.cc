#include "sim/cuda/image.h"

#include <cstring>
#include <optional>
#include <string_view>

namespace hami::sim {

namespace {

// ELF64 as cubins use it (little-endian).
constexpr size_t kElfHeaderSize = 64;
constexpr size_t kSectionHeaderSize = 64;
constexpr size_t kProgramHeaderSize = 56;
constexpr size_t kSymbolSize = 24;
constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtNobits = 8;
constexpr uint8_t kSttObject = 1;
constexpr uint8_t kSttFunc = 2;
constexpr uint8_t kStoCudaEntry = 0x10;  // st_other of a kernel's symbol

// .nv.info attributes (format byte, attribute byte, then a u16 size or value).
constexpr uint8_t kEifmtSval = 4;
constexpr uint8_t kEiattrKparamInfo = 0x17;
constexpr uint8_t kEiattrRegcount = 0x2f;

// Fat binary entries.
constexpr size_t kFatbinHeaderSize = 16;
constexpr uint16_t kEntryElf = 2;
constexpr uint64_t kEntryCompressed = 0x2000 | 0x8000;  // LZ4 or Zstandard payload

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A bounds-checked view: every read says which field of which format it is.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const char* format) : bytes_(bytes), format_(format) {}

  size_t size() const { return bytes_.size(); }

  template <typename T>
  Result<T> At(uint64_t offset, const char* field) const {
    if (offset > bytes_.size() || sizeof(T) > bytes_.size() - offset) {
      return Truncated(field, offset, sizeof(T));
    }
    return Load<T>(bytes_.data() + offset);
  }

  Result<std::span<const uint8_t>> Span(uint64_t offset, uint64_t n, const char* field) const {
    if (offset > bytes_.size() || n > bytes_.size() - offset) return Truncated(field, offset, n);
    return bytes_.subspan(size_t(offset), size_t(n));
  }

  Error Truncated(const char* field, uint64_t offset, uint64_t n) const {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(format_) + ": " + field + " (" + std::to_string(n) + " bytes at " +
                     std::to_string(offset) + ") lies outside the image of " +
                     std::to_string(bytes_.size()) + " bytes");
  }

 private:
  std::span<const uint8_t> bytes_;
  const char* format_;
};

struct Section {
  std::string_view name;
  uint32_t type;
  uint32_t link;
  uint32_t info;
  uint64_t offset;
  uint64_t size;
};

// The NUL-terminated string at `offset` of a string table.
std::optional<std::string_view> StringAt(std::span<const uint8_t> table, uint64_t offset) {
  if (offset >= table.size()) return std::nullopt;
  const auto* start = reinterpret_cast<const char*>(table.data() + offset);
  const void* nul = std::memchr(start, '\0', table.size() - size_t(offset));
  if (nul == nullptr) return std::nullopt;
  return std::string_view(start, size_t(static_cast<const char*>(nul) - start));
}

bool IsElf(std::span<const uint8_t> b) {
  return b.size() >= 4 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
}

// Walks the attributes of one .nv.info section, calling f(attribute, value bytes) for each
// attribute that carries a value of its own (format "sval").
template <typename F>
Status ForEachInfo(const Reader& elf, const Section& s, F&& f) {
  auto bytes = HAMI_TRY(elf.Span(s.offset, s.size, "an .nv.info section"));
  size_t p = 0;
  while (p + 4 <= bytes.size()) {
    uint8_t format = bytes[p];
    uint8_t attribute = bytes[p + 1];
    if (format != kEifmtSval) {
      p += 4;  // the other formats carry at most two bytes, inline
      continue;
    }
    uint16_t n = Load<uint16_t>(bytes.data() + p + 2);
    if (n > bytes.size() - p - 4) {
      return Error(ErrorCode::kInvalidArgument, "cubin: attribute " + std::to_string(attribute) +
                                                    " of section " + std::string(s.name) +
                                                    " runs past its end");
    }
    f(attribute, bytes.subspan(p + 4, n));
    p += 4 + size_t(n);
  }
  return OkStatus();
}

Status ReadElf(std::span<const uint8_t> bytes, ImageInfo* info) {
  Reader elf(bytes, "cubin");
  if (bytes.size() < kElfHeaderSize) {
    return elf.Truncated("the ELF header", 0, kElfHeaderSize);
  }
  if (bytes[4] != 2 || bytes[5] != 1) {
    return Error(ErrorCode::kInvalidArgument, "cubin: not a 64-bit little-endian ELF (class " +
                                                  std::to_string(bytes[4]) + ", data " +
                                                  std::to_string(bytes[5]) + ")");
  }
  uint64_t shoff = HAMI_TRY(elf.At<uint64_t>(0x28, "e_shoff"));
  uint16_t shentsize = HAMI_TRY(elf.At<uint16_t>(0x3a, "e_shentsize"));
  uint16_t shnum = HAMI_TRY(elf.At<uint16_t>(0x3c, "e_shnum"));
  uint16_t shstrndx = HAMI_TRY(elf.At<uint16_t>(0x3e, "e_shstrndx"));
  if (shnum == 0) return OkStatus();  // no sections: nothing declared
  if (shentsize != kSectionHeaderSize) {
    return Error(ErrorCode::kInvalidArgument,
                 "cubin: section headers of " + std::to_string(shentsize) + " bytes (expected 64)");
  }
  if (shstrndx >= shnum) {
    return Error(ErrorCode::kInvalidArgument, "cubin: e_shstrndx " + std::to_string(shstrndx) +
                                                  " names no section (" + std::to_string(shnum) +
                                                  " sections)");
  }
  auto table = HAMI_TRY(elf.Span(shoff, uint64_t(shnum) * kSectionHeaderSize, "section table"));
  std::vector<Section> sections(shnum);
  for (size_t i = 0; i < shnum; ++i) {
    const uint8_t* h = table.data() + i * kSectionHeaderSize;
    sections[i] = {{},
                   Load<uint32_t>(h + 4),
                   Load<uint32_t>(h + 40),
                   Load<uint32_t>(h + 44),
                   Load<uint64_t>(h + 24),
                   Load<uint64_t>(h + 32)};
  }
  const Section& shstr = sections[shstrndx];
  auto names = HAMI_TRY(elf.Span(shstr.offset, shstr.size, "section name table"));
  for (size_t i = 0; i < shnum; ++i) {
    auto name = StringAt(names, Load<uint32_t>(table.data() + i * kSectionHeaderSize));
    if (!name)
      return Error(ErrorCode::kInvalidArgument,
                   "cubin: section " + std::to_string(i) + " has no name in the name table");
    sections[i].name = *name;
  }

  std::vector<std::string> symbol_names;  // by symbol index, for the register counts
  for (const Section& s : sections) {
    if (s.type != kShtSymtab) continue;
    if (s.link >= shnum) {
      return Error(ErrorCode::kInvalidArgument, "cubin: the symbol table links no string table");
    }
    auto symbols = HAMI_TRY(elf.Span(s.offset, s.size, "symbol table"));
    const Section& strtab = sections[s.link];
    auto strings = HAMI_TRY(elf.Span(strtab.offset, strtab.size, "symbol name table"));
    symbol_names.assign(symbols.size() / kSymbolSize, std::string());
    for (size_t i = 0; i < symbols.size() / kSymbolSize; ++i) {
      const uint8_t* sym = symbols.data() + i * kSymbolSize;
      auto name = StringAt(strings, Load<uint32_t>(sym));
      if (!name || name->empty()) continue;
      uint8_t type = sym[4] & 0xf;
      uint8_t other = sym[5];
      uint16_t shndx = Load<uint16_t>(sym + 6);
      uint64_t size = Load<uint64_t>(sym + 16);
      symbol_names[i] = std::string(*name);
      if (type == kSttFunc && (other & kStoCudaEntry) != 0) {
        info->kernels.try_emplace(std::string(*name));
      } else if (type == kSttObject && shndx < shnum) {
        std::string_view in = sections[shndx].name;
        if (in.starts_with(".nv.shared") || in.starts_with(".nv.local") ||
            in.starts_with(".nv.constant0")) {
          continue;  // per-block, per-thread or parameter storage: no global address
        }
        ImageGlobal& g = info->globals[std::string(*name)];
        g.bytes = size;
        const Section& data = sections[shndx];
        uint64_t value = Load<uint64_t>(sym + 8);  // offset in its section
        if (data.type != kShtNobits && value <= data.size && size <= data.size - value) {
          auto init = HAMI_TRY(elf.Span(data.offset + value, size, "a global's initial data"));
          g.init.assign(init.begin(), init.end());
        }
      }
    }
  }

  for (const Section& s : sections) {
    if (s.type == kShtNobits || !s.name.starts_with(".nv.info")) continue;
    if (s.name == ".nv.info") {
      HAMI_TRY(ForEachInfo(elf, s, [&](uint8_t attribute, std::span<const uint8_t> v) {
        if (attribute != kEiattrRegcount || v.size() < 8) return;
        uint32_t index = Load<uint32_t>(v.data());
        if (index >= symbol_names.size()) return;
        auto k = info->kernels.find(symbol_names[index]);
        if (k != info->kernels.end()) k->second.num_regs = int(Load<uint32_t>(v.data() + 4));
      }));
      continue;
    }
    if (!s.name.starts_with(".nv.info.")) continue;
    auto k = info->kernels.find(std::string(s.name.substr(9)));
    if (k == info->kernels.end()) continue;
    ImageKernel& kernel = k->second;
    kernel.params_known = true;
    kernel.params.clear();
    HAMI_TRY(ForEachInfo(elf, s, [&](uint8_t attribute, std::span<const uint8_t> v) {
      // u32 index, u16 ordinal, u16 offset, u32 flags (size in bytes in bits 18..31).
      if (attribute != kEiattrKparamInfo || v.size() < 12) return;
      uint16_t ordinal = Load<uint16_t>(v.data() + 4);
      uint16_t offset = Load<uint16_t>(v.data() + 6);
      uint32_t param_size = (Load<uint32_t>(v.data() + 8) >> 18) & 0x3fff;
      if (ordinal >= 4096) return;  // no kernel has that many parameters
      if (kernel.params.size() <= ordinal) kernel.params.resize(size_t(ordinal) + 1);
      kernel.params[ordinal] = {offset, param_size};
    }));
  }
  info->complete = true;
  return OkStatus();
}

Status ReadFatbin(std::span<const uint8_t> bytes, ImageInfo* info) {
  Reader fatbin(bytes, "fat binary");
  uint16_t header_size = HAMI_TRY(fatbin.At<uint16_t>(6, "header size"));
  uint64_t size = HAMI_TRY(fatbin.At<uint64_t>(8, "size"));
  if (header_size < kFatbinHeaderSize) {
    return Error(ErrorCode::kInvalidArgument,
                 "fat binary: header size " + std::to_string(header_size) + " (at least 16)");
  }
  auto entries = HAMI_TRY(fatbin.Span(header_size, size, "entries"));
  Reader r(entries, "fat binary entry");
  bool any = false;  // one readable cubin lists what every entry holds
  for (uint64_t p = 0; p < entries.size();) {
    uint16_t kind = HAMI_TRY(r.At<uint16_t>(p, "kind"));
    uint32_t entry_header = HAMI_TRY(r.At<uint32_t>(p + 4, "header size"));
    uint64_t payload_size = HAMI_TRY(r.At<uint64_t>(p + 8, "payload size"));
    if (entry_header < 16) {
      return Error(
          ErrorCode::kInvalidArgument,
          "fat binary entry: header size " + std::to_string(entry_header) + " (at least 16)");
    }
    uint64_t flags = entry_header >= 48 ? HAMI_TRY(r.At<uint64_t>(p + 40, "flags")) : 0;
    auto payload = HAMI_TRY(r.Span(p + entry_header, payload_size, "payload"));
    if (kind == kEntryElf) {
      if ((flags & kEntryCompressed) == 0 && IsElf(payload)) {
        HAMI_TRY(ReadElf(payload, info));
        any = true;
      }
    }
    p += entry_header + payload_size;
  }
  info->complete = any;
  return OkStatus();
}

}  // namespace

// True when `b` starts with the `n` non-zero bytes of `magic`; compares byte by byte, so a
// shorter NUL-terminated text is never read past its NUL.
bool StartsWith(const uint8_t* b, const uint8_t* magic, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != magic[i]) return false;
  }
  return true;
}

constexpr uint8_t kWrapperBytes[4] = {0xb1, 0x43, 0x62, 0x46};
constexpr uint8_t kFatbinBytes[4] = {0x50, 0xed, 0x55, 0xba};
constexpr uint8_t kElfBytes[4] = {0x7f, 'E', 'L', 'F'};
constexpr uint16_t kEmCuda = 190;

const void* UnwrapImage(const void* image) {
  const auto* b = static_cast<const uint8_t*>(image);
  if (!StartsWith(b, kWrapperBytes, 4)) return image;
  return reinterpret_cast<const void*>(uintptr_t(Load<uint64_t>(b + 8)));
}

size_t ImageExtent(const void* image) {
  const auto* b = static_cast<const uint8_t*>(image);
  if (StartsWith(b, kFatbinBytes, 4)) {
    uint16_t header_size = Load<uint16_t>(b + 6);
    uint64_t size = Load<uint64_t>(b + 8);
    if (size > (uint64_t(1) << 40)) return 0;
    return size_t(header_size + size);
  }
  // A cubin: a 64-bit little-endian ELF for the CUDA machine (checked before the rest of
  // the header is read, so a short text that merely starts like an ELF is left alone).
  if (StartsWith(b, kElfBytes, 4) && b[4] == 2 && b[5] == 1 && b[6] == 1 &&
      Load<uint16_t>(b + 18) == kEmCuda) {
    if (Load<uint16_t>(b + 0x34) != kElfHeaderSize ||
        Load<uint16_t>(b + 0x3a) != kSectionHeaderSize) {
      return 0;
    }
    uint64_t end = kElfHeaderSize;
    uint64_t shoff = Load<uint64_t>(b + 0x28);
    uint16_t shnum = Load<uint16_t>(b + 0x3c);
    if (shoff > (uint64_t(1) << 40)) return 0;
    end = std::max(end, shoff + uint64_t(shnum) * kSectionHeaderSize);
    // The program headers and the segments they describe (a cubin's last bytes).
    uint64_t phoff = Load<uint64_t>(b + 0x20);
    uint16_t phentsize = Load<uint16_t>(b + 0x36), phnum = Load<uint16_t>(b + 0x38);
    if (phnum > 0) {
      if (phoff > (uint64_t(1) << 40) || phentsize != kProgramHeaderSize) return 0;
      end = std::max(end, phoff + uint64_t(phnum) * kProgramHeaderSize);
      for (uint16_t i = 0; i < phnum; ++i) {
        const uint8_t* h = b + phoff + size_t(i) * kProgramHeaderSize;
        uint64_t off = Load<uint64_t>(h + 8), size = Load<uint64_t>(h + 32);
        if (off > (uint64_t(1) << 40) || size > (uint64_t(1) << 40)) return 0;
        end = std::max(end, off + size);
      }
    }
    for (uint16_t i = 0; i < shnum; ++i) {
      const uint8_t* h = b + shoff + size_t(i) * kSectionHeaderSize;
      if (Load<uint32_t>(h + 4) == kShtNobits) continue;
      uint64_t off = Load<uint64_t>(h + 24), size = Load<uint64_t>(h + 32);
      if (off > (uint64_t(1) << 40) || size > (uint64_t(1) << 40)) return 0;
      end = std::max(end, off + size);
    }
    return size_t(end);
  }
  if (b[0] == '\t' || b[0] == '\n' || b[0] == '\r' || (b[0] >= 0x20 && b[0] < 0x7f)) {
    return std::strlen(reinterpret_cast<const char*>(b)) + 1;
  }
  return 0;
}

Result<ImageInfo> ReadImage(std::span<const uint8_t> bytes) {
  ImageInfo info;
  if (IsElf(bytes)) {
    info.format = ImageFormat::kElf;
    HAMI_TRY(ReadElf(bytes, &info));
  } else if (bytes.size() >= 4 && Load<uint32_t>(bytes.data()) == kFatbinMagic) {
    info.format = ImageFormat::kFatbin;
    HAMI_TRY(ReadFatbin(bytes, &info));
  } else if (!bytes.empty() && bytes[0] != 0 && bytes[0] < 0x80) {
    info.format = ImageFormat::kText;
  }
  return info;
}

}  // namespace hami::sim
