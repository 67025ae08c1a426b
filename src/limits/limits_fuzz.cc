// Fuzzes the limits file's reader and writer (limits/limits_file.h). Parsing arbitrary bytes
// never crashes and accounts for every non-empty line; whatever the reader accepted, the
// writer writes (last value of each key, the format line dropped) and the reader gives back
// exactly, sorted by key, with the format line; the writer refuses only what it documents.
//
// Input: the limits file's bytes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "limits/limits_file.h"

namespace {

using hami::limits::Entry;
using hami::limits::LimitsFile;

void Check(bool ok) {
  if (!ok) std::abort();
}

size_t NonEmptyLines(std::string_view text) {
  size_t n = 0;
  while (!text.empty()) {
    size_t eol = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(std::min(eol + 1, text.size()));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    n += !line.empty();
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  LimitsFile file = hami::limits::ParseLimitsFile(text, "/overrideEnv");
  Check(file.present && file.path == "/overrideEnv");
  Check(file.entries.size() + file.problems.size() == NonEmptyLines(text));
  for (const std::string& p : file.problems) {
    Check(p.starts_with("/overrideEnv line ") && p.ends_with("; skipped"));
    Check(p.find('\0') == std::string::npos);
  }

  // What the reader accepted, as a consumer sees it: the last value of each key.
  std::map<std::string, std::string> last;
  for (const auto& [key, value] : file.entries) {
    Check(hami::limits::IsValidKey(key));
    Check(value.find_first_of(std::string_view("\n\0", 2)) == std::string::npos);
    last[key] = value;
  }
  last.erase(hami::limits::kFormatKey);
  std::vector<Entry> entries(last.begin(), last.end());
  bool has_cr = false;
  for (const auto& [key, value] : entries) has_cr |= value.find('\r') != std::string::npos;

  auto written = hami::limits::LimitsText(entries);
  if (!written.ok()) {
    // Only a carriage return inside a value (a line "K=a\rb") or the size can be refused.
    Check(has_cr || size + 32 > hami::limits::kMaxFileBytes);
    return 0;
  }
  Check(written->size() <= hami::limits::kMaxFileBytes);
  LimitsFile again = hami::limits::ParseLimitsFile(*written, "/w");
  Check(again.problems.empty());
  std::vector<Entry> expected = entries;
  expected.emplace_back(hami::limits::kFormatKey, hami::limits::kFormat);
  std::sort(expected.begin(), expected.end());
  Check(again.entries == expected);
  return 0;
}
