#include "common/proc.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/file.h"
#include "common/parse.h"

namespace hami {

namespace {

std::string ProcPath(pid_t pid, const char* leaf) {
  return (pid == 0 ? std::string("/proc/self/") : "/proc/" + std::to_string(pid) + "/") + leaf;
}

}  // namespace

uint64_t PidNamespaceInode(pid_t pid) {
  struct stat st;
  if (stat(ProcPath(pid, "ns/pid").c_str(), &st) != 0) return 0;
  return uint64_t(st.st_ino);
}

uint64_t ProcessStartTicks(pid_t pid) {
  // One open/read/close into a stack buffer: registration pays for this on every start.
  char path[32];
  if (pid == 0) {
    std::snprintf(path, sizeof(path), "/proc/self/stat");
  } else {
    std::snprintf(path, sizeof(path), "/proc/%d/stat", int(pid));
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // comm may contain spaces and ')': fields resume after the last ')'.
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr) return 0;
  const char* p = close_paren + 1;
  // Field 3 (state) is the first after ')'; start time is field 22.
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
  }
  while (*p == ' ') ++p;
  const char* end = p;
  while (*end >= '0' && *end <= '9') ++end;
  auto v = ParseUint64(std::string_view(p, size_t(end - p)), "starttime");
  return v.ok() ? *v : 0;
}

std::vector<pid_t> NsTgids(pid_t pid) {
  std::vector<pid_t> out;
  auto text = ReadFileToString(ProcPath(pid, "status"), 1 << 16);
  if (!text.ok()) return out;
  size_t pos = text->find("\nNStgid:");
  if (pos == std::string::npos) return out;
  size_t eol = text->find('\n', pos + 1);
  std::string_view line(text->data() + pos + 8,
                        (eol == std::string::npos ? text->size() : eol) - pos - 8);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) {
      auto v = ParseUint64(line.substr(i, j - i), "NStgid");
      if (!v.ok() || *v == 0 || *v > 0x7fffffff) return {};
      out.push_back(pid_t(*v));
    }
    i = j;
  }
  return out;
}

std::string ExecutableDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, size_t(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string ProcessComm(pid_t pid) {
  if (pid == 0) {
    char name[17] = {};
    if (prctl(PR_GET_NAME, name) == 0) return name;  // no file to open for our own name
  }
  auto text = ReadFileToString(ProcPath(pid, "comm"), 256);
  if (!text.ok()) return "";
  std::string s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

namespace {
std::atomic<uint64_t> g_forks{0};
}  // namespace

uint64_t ForkCount() {
  static const bool registered = [] {
    return pthread_atfork(nullptr, nullptr,
                          [] { g_forks.fetch_add(1, std::memory_order_relaxed); }) == 0;
  }();
  (void)registered;
  return g_forks.load(std::memory_order_relaxed);
}

bool RaiseOpenFileLimit(uint64_t needed) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  if (r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= needed) return true;
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < needed) return false;
  r.rlim_cur = rlim_t(needed);
  return setrlimit(RLIMIT_NOFILE, &r) == 0;
}

}  // namespace hami
