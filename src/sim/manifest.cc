#include "sim/manifest.h"

#include <cstring>

#include "common/parse.h"

namespace hami::sim {

namespace {

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

bool IsManifest(const char* image) {
  return std::strncmp(image, kManifestMagic.data(), kManifestMagic.size()) == 0;
}

Result<Manifest> ParseManifest(std::string_view text) {
  Manifest m;
  int number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? text.npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto bad = [&](const std::string& why) {
      return Error(ErrorCode::kInvalidArgument, "module manifest line " + std::to_string(number) +
                                                    " '" + std::string(line) + "': " + why);
    };
    if (number == 1) {
      if (line != kManifestMagic) {
        return bad("the first line must be '" + std::string(kManifestMagic) + "'");
      }
      continue;
    }
    std::vector<std::string_view> w = Words(line);
    if (w.empty() || w[0][0] == '#') continue;
    if (w[0] != "kernel" && w[0] != "global") {
      return bad("unknown entry '" + std::string(w[0]) + "' (expected kernel or global)");
    }
    if (w.size() < 2) return bad("expected 'kernel NAME [wave_ns=N]' or 'global NAME bytes=N'");
    std::string name(w[1]);
    uint64_t wave_ns = 0, bytes = 0;
    for (size_t k = 2; k < w.size(); ++k) {
      size_t eq = w[k].find('=');
      if (eq == std::string_view::npos)
        return bad("expected key=value, got '" + std::string(w[k]) + "'");
      std::string_view key = w[k].substr(0, eq), value = w[k].substr(eq + 1);
      if (w[0] == "kernel" && key == "wave_ns") {
        auto v = ParseUint64(value, "wave_ns");
        if (!v.ok() || *v == 0) return bad("wave_ns must be a positive integer");
        wave_ns = *v;
      } else if (w[0] == "global" && key == "bytes") {
        auto v = ParseSize(value, "bytes");
        if (!v.ok() || *v == 0) return bad("bytes must be a positive size (k/m/g suffixes)");
        bytes = *v;
      } else {
        return bad("unknown option '" + std::string(key) + "'");
      }
    }
    if (w[0] == "kernel") {
      if (m.kernels.count(name) != 0) return bad("kernel '" + name + "' declared twice");
      m.kernels[name] = wave_ns;
    } else {
      if (bytes == 0) return bad("a global needs bytes=N");
      for (const auto& g : m.globals) {
        if (g.first == name) return bad("global '" + name + "' declared twice");
      }
      m.globals.push_back({name, bytes});
    }
  }
  if (number == 0) return Error(ErrorCode::kInvalidArgument, "module manifest: empty");
  return m;
}

}  // namespace hami::sim
