#include "sim/procfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace hami::sim::procfs {

namespace {

constexpr size_t kMaxProcText = 1 << 16;

std::string PathOf(pid_t pid, const char* leaf) {
  char path[64];
  if (pid == 0) {
    std::snprintf(path, sizeof(path), "/proc/self/%s", leaf);
  } else {
    std::snprintf(path, sizeof(path), "/proc/%d/%s", int(pid), leaf);
  }
  return path;
}

// The whole of a procfs file (they are small), or "" when it cannot be read.
std::string ReadProcText(pid_t pid, const char* leaf) {
  std::string text;
  const int fd = open(PathOf(pid, leaf).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[4096];
  while (text.size() < kMaxProcText) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      text.clear();
      break;
    }
    if (n == 0) break;
    text.append(buf, size_t(n));
  }
  close(fd);
  return text;
}

// `digits` as a decimal number of at most `max`; false when anything else.
bool ParseDecimal(std::string_view digits, uint64_t max, uint64_t* out) {
  if (digits.empty() || digits.size() > 20) return false;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = uint64_t(c - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// The rest of the line that starts with "<key>:" in a status text; false when there is none.
bool FindStatusLine(std::string_view status, std::string_view key, std::string_view* rest) {
  size_t at = 0;
  while (at < status.size()) {
    size_t eol = status.find('\n', at);
    if (eol == std::string_view::npos) eol = status.size();
    std::string_view line = status.substr(at, eol - at);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ':') {
      *rest = line.substr(key.size() + 1);
      return true;
    }
    at = eol + 1;
  }
  return false;
}

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

}  // namespace

uint64_t ParsePidNsLink(std::string_view link) {
  constexpr std::string_view kPrefix = "pid:[";
  if (link.size() <= kPrefix.size() + 1 || link.substr(0, kPrefix.size()) != kPrefix ||
      link.back() != ']') {
    return 0;
  }
  uint64_t inode = 0;
  if (!ParseDecimal(link.substr(kPrefix.size(), link.size() - kPrefix.size() - 1), UINT64_MAX,
                    &inode)) {
    return 0;
  }
  return inode;
}

std::vector<pid_t> ParseStatusPids(std::string_view status, std::string_view key) {
  std::vector<pid_t> pids;
  std::string_view rest;
  if (!FindStatusLine(status, key, &rest)) return pids;
  size_t i = 0;
  while (i < rest.size()) {
    if (IsBlank(rest[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < rest.size() && !IsBlank(rest[end])) ++end;
    uint64_t v = 0;
    if (!ParseDecimal(rest.substr(i, end - i), 0x7fffffff, &v) || v == 0) return {};
    pids.push_back(pid_t(v));
    i = end;
  }
  return pids;
}

pid_t ParseStatusParent(std::string_view status) {
  std::string_view rest;
  if (!FindStatusLine(status, "PPid", &rest)) return 0;
  while (!rest.empty() && IsBlank(rest.front())) rest.remove_prefix(1);
  while (!rest.empty() && IsBlank(rest.back())) rest.remove_suffix(1);
  uint64_t v = 0;
  return ParseDecimal(rest, 0x7fffffff, &v) ? pid_t(v) : 0;
}

uint64_t ParseStatStartTicks(std::string_view stat) {
  const size_t paren = stat.rfind(')');
  if (paren == std::string_view::npos) return 0;
  // Fields after the name: 3 (state) onwards, one space apart.
  std::string_view rest = stat.substr(paren + 1);
  int field = 2;
  size_t i = 0;
  while (i < rest.size()) {
    if (rest[i] == ' ' || rest[i] == '\n') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < rest.size() && rest[end] != ' ' && rest[end] != '\n') ++end;
    if (++field == 22) {
      uint64_t v = 0;
      return ParseDecimal(rest.substr(i, end - i), UINT64_MAX, &v) ? v : 0;
    }
    i = end;
  }
  return 0;
}

uint64_t PidNsInode(pid_t pid) {
  char target[64];
  const ssize_t n = readlink(PathOf(pid, "ns/pid").c_str(), target, sizeof(target));
  if (n <= 0 || size_t(n) >= sizeof(target)) return 0;
  return ParsePidNsLink(std::string_view(target, size_t(n)));
}

std::vector<pid_t> NsTgids(pid_t pid) {
  return ParseStatusPids(ReadProcText(pid, "status"), "NStgid");
}

pid_t ParentPid(pid_t pid) { return ParseStatusParent(ReadProcText(pid, "status")); }

uint64_t StartTicks(pid_t pid) { return ParseStatStartTicks(ReadProcText(pid, "stat")); }

std::string Comm() {
  std::string name = ReadProcText(0, "comm");
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

}  // namespace hami::sim::procfs
