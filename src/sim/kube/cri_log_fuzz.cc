// Fuzzes pods/log's reading of a CRI log file: the first byte picks the options (timestamps,
// since, tail, limit), the rest is the file's text; each line of it is also read as a file name
// of a container's log directory. Nothing crashes; the output respects tail and limit, and
// without timestamps is never longer than the file; the current log is never below the
// previous one.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "sim/kube/cri_log.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

size_t CountNewlines(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  hami::sim::kube::CriLogOptions o;
  if (pick & 1) o.timestamps = hami::sim::kube::LogTimestamps::kPrefix;
  if (pick & 2) o.since = hami::kube::ParseTime("2026-12-07T10:00:00Z").value();
  if (pick & 4) o.tail_lines = (pick >> 4) & 3;
  if (pick & 8) o.limit_bytes = pick >> 6;
  const hami::sim::kube::CriLogOutput out = hami::sim::kube::DecodeCriLog(text, o);
  if (o.limit_bytes) Check(out.text.size() <= size_t(*o.limit_bytes));
  if (o.tail_lines) Check(CountNewlines(out.text) <= size_t(*o.tail_lines));
  if (o.timestamps == hami::sim::kube::LogTimestamps::kOmit) Check(out.text.size() <= text.size());
  Check((out.malformed_lines == 0) == (out.first_malformed_line == 0));

  std::vector<std::string> names;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    names.emplace_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  const hami::sim::kube::ContainerLogFiles f = hami::sim::kube::PickContainerLogFiles(names);
  if (f.previous) Check(f.current && *f.previous < *f.current);
  for (const std::string& name : names) {
    if (auto n = hami::sim::kube::ParseRestartLogName(name)) {
      Check(*n >= 0 && hami::sim::kube::RestartLogName(*n) == name);
    }
  }
  return 0;
}
