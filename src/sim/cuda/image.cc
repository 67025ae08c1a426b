#include "sim/cuda/image.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>

#include "common/strings.h"

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
constexpr uint16_t kEntryPtx = 1;
constexpr uint16_t kEntryElf = 2;
constexpr uint64_t kEntryLz4 = 0x2000;   // the payload is LZ4-compressed
constexpr uint64_t kEntryZstd = 0x8000;  // the payload is Zstandard-compressed
constexpr uint64_t kEntryCompressed = kEntryLz4 | kEntryZstd;

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

// ---- LZ4 (the block format: sequences of literals and back-references) ----

// The bytes `in` decodes to; `expected` is the size the fat-binary entry declares, which the
// output must reach exactly. Every length and offset is checked against what exists.
Result<std::vector<uint8_t>> Lz4Decode(std::span<const uint8_t> in, uint64_t expected) {
  // A sequence of n bytes yields at most 255 * n of output: a larger claim is not LZ4.
  if (expected > uint64_t(in.size()) * 255 + 16) {
    return Error(ErrorCode::kInvalidArgument, "LZ4 payload: " + std::to_string(in.size()) +
                                                  " bytes cannot decode to the " +
                                                  std::to_string(expected) + " the entry declares");
  }
  std::vector<uint8_t> out;
  out.reserve(size_t(expected));
  auto bad = [&](const char* what, size_t at) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string("LZ4 payload: ") + what + " at byte " + std::to_string(at));
  };
  size_t p = 0;
  // A length continued by bytes of 255 (each adds itself; the first below 255 ends it).
  auto length = [&](size_t base, size_t* n) -> bool {
    *n = base;
    if (base != 15) return true;
    for (;;) {
      if (p >= in.size()) return false;
      uint8_t b = in[p++];
      *n += b;
      if (b != 255) return true;
    }
  };
  while (p < in.size()) {
    uint8_t token = in[p++];
    size_t literals;
    if (!length(token >> 4, &literals)) return bad("a literal length runs past the end", p);
    if (literals > in.size() - p) return bad("literals run past the end", p);
    if (literals > expected - out.size()) return bad("output beyond the declared size", p);
    out.insert(out.end(), in.begin() + ptrdiff_t(p), in.begin() + ptrdiff_t(p + literals));
    p += literals;
    // The last sequence has literals only; a fat binary may pad the payload after it.
    if (p == in.size() || out.size() == expected) break;
    if (in.size() - p < 2) return bad("a match offset runs past the end", p);
    size_t offset = size_t(in[p]) | size_t(in[p + 1]) << 8;
    p += 2;
    if (offset == 0 || offset > out.size()) return bad("a match refers before the output", p);
    size_t match;
    if (!length(token & 15, &match)) return bad("a match length runs past the end", p);
    match += 4;
    if (match > expected - out.size()) return bad("output beyond the declared size", p);
    const size_t at = out.size();
    out.resize(at + match);  // within the reserved size: no reallocation
    uint8_t* o = out.data();
    if (offset >= match) {
      std::memcpy(o + at, o + at - offset, match);
    } else {
      for (size_t i = 0; i < match; ++i) o[at + i] = o[at - offset + i];  // repeats itself
    }
  }
  if (out.size() != expected) {
    return Error(ErrorCode::kInvalidArgument, "LZ4 payload: decodes to " +
                                                  std::to_string(out.size()) +
                                                  " bytes, the entry "
                                                  "declares " +
                                                  std::to_string(expected));
  }
  return out;
}

// ---- PTX text ----

// Kernel parameter space, in bytes (CUDA 12.1's limit).
constexpr uint64_t kMaxParamBytes = 32764;
// No global of a simulated device is larger.
constexpr uint64_t kMaxPtxGlobalBytes = uint64_t(1) << 40;

Error PtxError(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "PTX: " + what);
}

Error PtxErrorAt(const std::string& what, std::string_view text, size_t at) {
  size_t line = 1 + size_t(std::count(text.begin(), text.begin() + ptrdiff_t(at), '\n'));
  return PtxError(what + " (line " + std::to_string(line) + ")");
}

// PTX split into tokens: directives and identifiers (".entry", "_Z1kPi", "%r1"), numbers,
// quoted strings and single punctuation characters; comments dropped.
Result<std::vector<std::string_view>> PtxSplit(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  auto word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' ||
           c == '.';
  };
  while (i < text.size()) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (text.substr(i, 2) == "//") {
      size_t end = text.find('\n', i);
      i = end == std::string_view::npos ? text.size() : end;
    } else if (text.substr(i, 2) == "/*") {
      size_t end = text.find("*/", i + 2);
      if (end == std::string_view::npos) return PtxErrorAt("a comment is not closed", text, i);
      i = end + 2;
    } else if (c == '"') {
      size_t end = text.find('"', i + 1);
      if (end == std::string_view::npos) return PtxErrorAt("a string is not closed", text, i);
      out.push_back(text.substr(i, end + 1 - i));
      i = end + 1;
    } else if (word(c)) {
      size_t start = i;
      while (i < text.size() && word(text[i])) ++i;
      out.push_back(text.substr(start, i - start));
    } else {
      out.push_back(text.substr(i++, 1));
    }
  }
  return out;
}

// The bytes of one element of a fundamental type (".u64"), 0 for a token that is none.
uint64_t PtxTypeBytes(std::string_view t) {
  if (t == ".b8" || t == ".u8" || t == ".s8" || t == ".pred") return 1;
  if (t == ".b16" || t == ".u16" || t == ".s16" || t == ".f16" || t == ".bf16") return 2;
  if (t == ".b32" || t == ".u32" || t == ".s32" || t == ".f32" || t == ".f16x2" || t == ".bf16x2" ||
      t == ".tf32") {
    return 4;
  }
  if (t == ".b64" || t == ".u64" || t == ".s64" || t == ".f64") return 8;
  if (t == ".b128") return 16;
  return 0;
}

std::optional<uint64_t> PtxNumber(std::string_view t) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
  return v;
}

// One declaration: [.align N] [.vN] type [qualifiers] name [dims]..., from tokens [b, e).
struct PtxVariable {
  std::string_view name;
  uint64_t align = 0;
  uint64_t bytes = 0;
  uint64_t element = 0;         // bytes of one value
  bool typed = false;           // of a fundamental type (not a texture reference, say)
  bool open_dimension = false;  // "[]": the size comes from the initializer
  size_t end = 0;               // the first token after the declaration's dimensions
};

Result<PtxVariable> PtxDeclaration(const std::vector<std::string_view>& t, size_t b, size_t e,
                                   const char* what) {
  PtxVariable v;
  uint64_t element = 0, vector = 1;
  size_t i = b;
  for (; i < e; ++i) {
    std::string_view tok = t[i];
    if (tok == ".align") {
      if (i + 1 >= e) return PtxError(std::string(what) + ": .align without a value");
      auto n = PtxNumber(t[++i]);
      if (!n || *n == 0 || *n > 4096 || (*n & (*n - 1)) != 0) {
        return PtxError(std::string(what) + ": bad alignment '" + std::string(t[i]) + "'");
      }
      v.align = *n;
    } else if (tok == ".v2" || tok == ".v4" || tok == ".v8") {
      vector = uint64_t(tok[2] - '0');
    } else if (uint64_t n = PtxTypeBytes(tok); n != 0) {
      element = n;
    } else if (!tok.empty() && tok[0] == '.') {
      continue;  // a state space or qualifier (.param, .ptr, .global, .const, .visible ...)
    } else {
      break;
    }
  }
  if (element == 0) return v;
  v.typed = true;
  v.element = element;
  if (i >= e) return PtxError(std::string(what) + " has no name");
  v.name = t[i++];
  if (!std::isalpha(static_cast<unsigned char>(v.name[0])) && v.name[0] != '_' &&
      v.name[0] != '$' && v.name[0] != '%') {
    return PtxError(std::string(what) + ": '" + std::string(v.name) + "' is not a name");
  }
  uint64_t count = 1;
  while (i < e && t[i] == "[") {
    if (i + 1 < e && t[i + 1] == "]") {
      v.open_dimension = true;
      i += 2;
      continue;
    }
    auto n = i + 2 < e && t[i + 2] == "]" ? PtxNumber(t[i + 1]) : std::nullopt;
    if (!n) return PtxError(std::string(what) + " " + std::string(v.name) + ": bad dimension");
    if (*n != 0 && count > kMaxPtxGlobalBytes / *n) {
      return PtxError(std::string(what) + " " + std::string(v.name) + " is too large");
    }
    count *= *n;
    i += 3;
  }
  v.bytes = element * vector * count;
  if (v.bytes > kMaxPtxGlobalBytes) {
    return PtxError(std::string(what) + " " + std::string(v.name) + " is too large");
  }
  if (v.align == 0) v.align = element * vector;
  v.end = i;
  return v;
}

// One value of an initializer: an integer (decimal or 0x hex) or a float as its bits (0f
// followed by 8 hex digits, 0d by 16).
std::optional<uint64_t> PtxValue(std::string_view t, bool negative) {
  auto hex = [](std::string_view digits) -> std::optional<uint64_t> {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, 16);
    if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return v;
  };
  if (!t.empty() && (t.back() == 'U' || t.back() == 'u')) t.remove_suffix(1);
  std::optional<uint64_t> v;
  if (t.size() == 10 && (t.starts_with("0f") || t.starts_with("0F"))) {
    v = negative ? std::nullopt : hex(t.substr(2));
  } else if (t.size() == 18 && (t.starts_with("0d") || t.starts_with("0D"))) {
    v = negative ? std::nullopt : hex(t.substr(2));
  } else if (t.size() > 2 && (t.starts_with("0x") || t.starts_with("0X"))) {
    v = hex(t.substr(2));
  } else {
    v = PtxNumber(t);
  }
  if (v && negative) *v = ~*v + 1;
  return v;
}

// The initial bytes of a variable whose values are the tokens [b, e) (braces and commas
// included), little-endian, `element` bytes each; empty when a value is not a number (an
// address, say: the model leaves such a variable zero).
std::vector<uint8_t> PtxInitializer(const std::vector<std::string_view>& t, size_t b, size_t e,
                                    uint64_t element, uint64_t bytes) {
  std::vector<uint8_t> init;
  bool negative = false;
  for (size_t i = b; i < e; ++i) {
    if (t[i] == "{" || t[i] == "}" || t[i] == ",") continue;
    if (t[i] == "-") {
      negative = true;
      continue;
    }
    auto v = PtxValue(t[i], negative);
    negative = false;
    if (!v || init.size() + element > bytes) return {};
    for (uint64_t k = 0; k < element; ++k) init.push_back(uint8_t(k < 8 ? *v >> (8 * k) : 0));
  }
  return init;
}

// Reads a PTX module: its kernels (.entry, with the layout of their .param lists) and its
// globals (.global and .const variables at module scope, with initial values written as
// numbers).
// False when the text is no PTX (it declares no .version).
Result<bool> ReadPtx(std::string_view text, ImageInfo* info) {
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) text = text.substr(0, nul);
  if (text.find(".version") == std::string_view::npos) return false;
  auto tokens = HAMI_TRY(PtxSplit(text));
  const auto& t = tokens;
  if (std::find(t.begin(), t.end(), ".version") == t.end()) return false;
  int braces = 0, parens = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == "{") {
      ++braces;
    } else if (t[i] == "}") {
      if (--braces < 0) return PtxError("'}' closes no block");
    } else if (t[i] == "(") {
      ++parens;
    } else if (t[i] == ")") {
      if (--parens < 0) return PtxError("')' closes nothing");
    }
    if (braces != 0 || parens != 0) continue;
    if (t[i] == ".entry") {
      if (i + 1 >= t.size()) return PtxError(".entry has no name");
      std::string name(t[++i]);
      ImageKernel kernel;
      kernel.params_known = true;
      if (i + 1 < t.size() && t[i + 1] == "(") {
        size_t close = i + 2;
        while (close < t.size() && t[close] != ")") ++close;
        if (close == t.size()) return PtxError("the parameters of " + name + " are not closed");
        uint64_t offset = 0;
        for (size_t b = i + 2; b < close;) {
          size_t e = b;
          while (e < close && t[e] != ",") ++e;
          auto p = HAMI_TRY(PtxDeclaration(t, b, e, "a parameter"));
          if (!p.typed) return PtxError("a parameter of " + name + " has no type");
          offset = RoundUp(offset, p.align);
          if (p.bytes > kMaxParamBytes || offset + p.bytes > kMaxParamBytes) {
            return PtxError("the parameters of " + name + " take more than " +
                            std::to_string(kMaxParamBytes) + " bytes");
          }
          kernel.params.push_back({uint32_t(offset), uint32_t(p.bytes)});
          offset += p.bytes;
          b = e + 1;
        }
        i = close;
      }
      info->kernels.insert_or_assign(std::move(name), std::move(kernel));
    } else if ((t[i] == ".global" || t[i] == ".const") && (i == 0 || t[i - 1] != ".extern")) {
      size_t e = i;
      while (e < t.size() && t[e] != ";" && t[e] != "=") ++e;
      auto v = HAMI_TRY(PtxDeclaration(t, i, e, "a global"));
      if (!v.typed) {  // a texture, sampler or surface reference: no memory of its own
        while (e < t.size() && t[e] != ";") ++e;
        i = e;
        continue;
      }
      uint64_t bytes = v.bytes;
      if (v.open_dimension) {  // one element per initializer value
        uint64_t values = 1;
        size_t j = e;
        for (; j < t.size() && t[j] != ";"; ++j) {
          if (t[j] == ",") ++values;
        }
        bytes *= values;
      }
      ImageGlobal& g = info->globals[std::string(v.name)];
      g.bytes = bytes;
      size_t end = e;
      while (end < t.size() && t[end] != ";") ++end;
      if (e < t.size() && t[e] == "=") g.init = PtxInitializer(t, e + 1, end, v.element, bytes);
      i = end;
    }
  }
  if (braces != 0 || parens != 0) return PtxError("a block is not closed");
  return true;
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
  bool cubin = false;   // one readable cubin lists what every entry holds
  bool unread = false;  // an entry the model cannot see into
  struct Ptx {
    std::span<const uint8_t> payload;
    uint64_t flags;
    uint64_t decoded_size;
  };
  std::vector<Ptx> ptx;
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
    uint64_t decoded_size =
        entry_header >= 64 ? HAMI_TRY(r.At<uint64_t>(p + 56, "uncompressed size")) : 0;
    auto payload = HAMI_TRY(r.Span(p + entry_header, payload_size, "payload"));
    if (kind == kEntryElf && (flags & kEntryCompressed) == 0 && IsElf(payload)) {
      HAMI_TRY(ReadElf(payload, info));
      cubin = true;
    } else if (kind == kEntryElf && (flags & kEntryCompressed) == kEntryLz4) {
      auto decoded = HAMI_TRY(Lz4Decode(payload, decoded_size));
      if (IsElf(decoded)) {
        HAMI_TRY(ReadElf(decoded, info));
        cubin = true;
      } else {
        unread = true;
      }
    } else if (kind == kEntryPtx && (flags & kEntryZstd) == 0) {
      ptx.push_back({payload, flags, decoded_size});
    } else {
      unread = true;
    }
    p += entry_header + payload_size;
  }
  if (cubin) {
    info->complete = true;
    return OkStatus();
  }
  // No cubin: the kernels are those of the PTX the driver would compile, when nothing else
  // in the fat binary could hold more.
  bool read_ptx = false;
  for (const Ptx& e : ptx) {
    std::vector<uint8_t> decoded;
    std::span<const uint8_t> text = e.payload;
    if ((e.flags & kEntryLz4) != 0) {
      decoded = HAMI_TRY(Lz4Decode(e.payload, e.decoded_size));
      text = decoded;
    }
    bool is_ptx = HAMI_TRY(
        ReadPtx(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), info));
    if (is_ptx) {
      read_ptx = true;
    } else {
      unread = true;
    }
  }
  info->complete = read_ptx && !unread;
  return OkStatus();
}

// True when `b` starts with the `n` non-zero bytes of `magic`; compares byte by byte, so a
// shorter NUL-terminated text is never read past its NUL.
bool StartsWith(const uint8_t* b, const uint8_t* magic, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != magic[i]) return false;
  }
  return true;
}

}  // namespace

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
    bool is_ptx = HAMI_TRY(ReadPtx(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), &info));
    info.complete = is_ptx;
  }
  return info;
}

}  // namespace hami::sim
