#include "vgpu/nstgid.h"

#include <climits>

namespace hami::vgpu {
namespace {

constexpr std::string_view kField = "NStgid:";

bool IsSeparator(char c) { return c == '\t' || c == ' '; }

}  // namespace

Status ParseNStgid(std::string_view text, pid_t* pids, size_t capacity, size_t* count) {
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
      if (found) return Error(ErrorCode::kInvalidArgument, "NStgid field repeated");
      found = true;
      line = l.substr(kField.size());
    }
    if (end == text.size()) break;
    pos = end + 1;
  }
  if (!found) return Error(ErrorCode::kInvalidArgument, "no NStgid field");

  size_t n = 0;
  size_t i = 0;
  while (i < line.size()) {
    if (IsSeparator(line[i])) {
      ++i;
      continue;
    }
    if (line[i] < '0' || line[i] > '9')
      return Error(ErrorCode::kInvalidArgument, "NStgid field holds something other than PIDs");
    if (line[i] == '0') {
      // "0" alone is PID 0; "0" followed by more digits is a leading zero.
      if (i + 1 < line.size() && line[i + 1] >= '0' && line[i + 1] <= '9') {
        return Error(ErrorCode::kInvalidArgument, "NStgid field holds something other than PIDs");
      }
      if (i + 1 < line.size() && !IsSeparator(line[i + 1]))
        return Error(ErrorCode::kInvalidArgument, "NStgid field holds something other than PIDs");
      return Error(ErrorCode::kInvalidArgument, "NStgid field holds PID 0");
    }
    long long v = 0;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9') {
      v = v * 10 + (line[i] - '0');
      if (v > INT_MAX)
        return Error(ErrorCode::kInvalidArgument, "NStgid field holds a PID above INT_MAX");
      ++i;
    }
    if (i < line.size() && !IsSeparator(line[i]))
      return Error(ErrorCode::kInvalidArgument, "NStgid field holds something other than PIDs");
    if (n == capacity)
      return Error(ErrorCode::kUnsupported,
                   "NStgid field lists more PID namespace levels than fit");
    pids[n++] = pid_t(v);
  }
  if (n == 0) return Error(ErrorCode::kInvalidArgument, "NStgid field empty");
  *count = n;
  return OkStatus();
}

}  // namespace hami::vgpu
