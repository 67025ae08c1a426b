#include "sim/kube/cri_log.h"

#include <charconv>
#include <chrono>

namespace hami::sim::kube {

namespace {

using hami::kube::WallTime;

struct Entry {
  WallTime time;
  bool partial = false;
  std::string_view content;
};

std::optional<Entry> ParseEntry(std::string_view line) {
  const size_t t_end = line.find(' ');
  if (t_end == std::string_view::npos) return std::nullopt;
  const size_t s_end = line.find(' ', t_end + 1);
  if (s_end == std::string_view::npos) return std::nullopt;
  const size_t g_end = line.find(' ', s_end + 1);
  if (g_end == std::string_view::npos) return std::nullopt;
  const std::string_view stream = line.substr(t_end + 1, s_end - t_end - 1);
  if (stream != "stdout" && stream != "stderr") return std::nullopt;
  const std::string_view tags = line.substr(s_end + 1, g_end - s_end - 1);
  const std::string_view tag = tags.substr(0, tags.find(':'));
  if (tag != "P" && tag != "F") return std::nullopt;
  auto time = hami::kube::ParseTime(line.substr(0, t_end));
  if (!time.ok()) return std::nullopt;
  return Entry{*time, tag == "P", line.substr(g_end + 1)};
}

// Go's time.RFC3339Nano in UTC: "2026-12-07T10:00:00.1234Z", "2026-12-07T10:00:00Z".
std::string FormatNanoTime(WallTime t) {
  const auto seconds = std::chrono::floor<std::chrono::seconds>(t);
  const int64_t nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(t - seconds).count();
  std::string out = hami::kube::FormatTime(seconds);
  if (nanos == 0) return out;
  std::string fraction = std::to_string(nanos);
  fraction.insert(0, 9 - fraction.size(), '0');
  fraction.erase(fraction.find_last_not_of('0') + 1);
  out.insert(out.size() - 1, "." + fraction);
  return out;
}

// Keeps the last `n` lines of `text`; the last line's newline ends it rather than starting
// another.
void KeepLastLines(std::string& text, int64_t n) {
  if (n == 0) {
    text.clear();
    return;
  }
  size_t pos = text.size();
  if (pos > 0 && text.back() == '\n') --pos;
  for (int64_t found = 0; pos > 0;) {
    const size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      pos = 0;
    } else if (++found == n) {
      pos = nl + 1;
      break;
    } else {
      pos = nl;
    }
  }
  text.erase(0, pos);
}

}  // namespace

CriLogOutput DecodeCriLog(std::string_view file_text, const CriLogOptions& options) {
  CriLogOutput out;
  bool line_start = true;
  size_t number = 0;
  for (size_t pos = 0; pos < file_text.size();) {
    const size_t nl = file_text.find('\n', pos);
    const std::string_view line =
        file_text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? file_text.size() : nl + 1;
    ++number;
    const std::optional<Entry> e = ParseEntry(line);
    if (!e) {
      if (out.malformed_lines++ == 0) out.first_malformed_line = number;
      continue;
    }
    // As the kubelet does, an entry left out still decides where the next line starts.
    const bool starts_line = line_start;
    line_start = !e->partial;
    if (options.since && e->time < *options.since) continue;
    if (starts_line && options.timestamps == LogTimestamps::kPrefix) {
      out.text += FormatNanoTime(e->time);
      out.text += ' ';
    }
    out.text += e->content;
    if (!e->partial) out.text += '\n';
  }
  if (options.tail_lines) KeepLastLines(out.text, *options.tail_lines);
  if (options.limit_bytes && out.text.size() > uint64_t(*options.limit_bytes)) {
    out.text.resize(size_t(*options.limit_bytes));
  }
  return out;
}

std::optional<int64_t> ParseRestartLogName(std::string_view file_name) {
  constexpr std::string_view kSuffix = ".log";
  if (file_name.size() <= kSuffix.size() || !file_name.ends_with(kSuffix)) return std::nullopt;
  const std::string_view digits = file_name.substr(0, file_name.size() - kSuffix.size());
  if (digits.front() < '0' || digits.front() > '9') return std::nullopt;  // no sign
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

ContainerLogFiles PickContainerLogFiles(std::span<const std::string> file_names) {
  ContainerLogFiles files;
  for (const std::string& name : file_names) {
    const std::optional<int64_t> n = ParseRestartLogName(name);
    if (!n) continue;
    if (!files.current || *n > *files.current) {
      files.previous = files.current;
      files.current = n;
    } else if (*n < *files.current && (!files.previous || *n > *files.previous)) {
      files.previous = n;
    }
  }
  return files;
}

std::string RestartLogName(int64_t restart_count) { return std::to_string(restart_count) + ".log"; }

}  // namespace hami::sim::kube
