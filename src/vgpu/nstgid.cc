#include "vgpu/nstgid.h"

#include <climits>

namespace hami::vgpu {
namespace {

constexpr std::string_view kField = "NStgid:";

bool IsSeparator(char c) { return c == '\t' || c == ' '; }

}  // namespace

const char* NsPidsErrorName(NsPidsError e) {
  switch (e) {
    case NsPidsError::kNone:
      return "none";
    case NsPidsError::kNoField:
      return "no NStgid field";
    case NsPidsError::kRepeated:
      return "NStgid field repeated";
    case NsPidsError::kEmpty:
      return "NStgid field empty";
    case NsPidsError::kJunk:
      return "NStgid field holds something other than PIDs";
    case NsPidsError::kNotPositive:
      return "NStgid field holds PID 0";
    case NsPidsError::kTooLarge:
      return "NStgid field holds a PID above INT_MAX";
    case NsPidsError::kTooManyLevels:
      return "NStgid field lists more PID namespace levels than fit";
  }
  return "unknown";
}

NsPidsError ParseNStgid(std::string_view text, pid_t* pids, size_t capacity, size_t* count) {
  *count = 0;
  // Find the one line that starts with the field name.
  std::string_view line;
  bool found = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    if (l.substr(0, kField.size()) == kField) {
      if (found) return NsPidsError::kRepeated;
      found = true;
      line = l.substr(kField.size());
    }
    if (end == text.size()) break;
    pos = end + 1;
  }
  if (!found) return NsPidsError::kNoField;

  size_t n = 0;
  size_t i = 0;
  while (i < line.size()) {
    if (IsSeparator(line[i])) {
      ++i;
      continue;
    }
    if (line[i] < '0' || line[i] > '9') return NsPidsError::kJunk;
    if (line[i] == '0') {
      // "0" alone is PID 0; "0" followed by more digits is a leading zero.
      if (i + 1 < line.size() && line[i + 1] >= '0' && line[i + 1] <= '9') {
        return NsPidsError::kJunk;
      }
      if (i + 1 < line.size() && !IsSeparator(line[i + 1])) return NsPidsError::kJunk;
      return NsPidsError::kNotPositive;
    }
    long long v = 0;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9') {
      v = v * 10 + (line[i] - '0');
      if (v > INT_MAX) return NsPidsError::kTooLarge;
      ++i;
    }
    if (i < line.size() && !IsSeparator(line[i])) return NsPidsError::kJunk;
    if (n == capacity) return NsPidsError::kTooManyLevels;
    pids[n++] = pid_t(v);
  }
  if (n == 0) return NsPidsError::kEmpty;
  *count = n;
  return NsPidsError::kNone;
}

}  // namespace hami::vgpu
