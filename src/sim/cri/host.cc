#include "sim/cri/host.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "common/file.h"
#include "common/parse.h"
#include "common/strings.h"

namespace hami::sim::cri {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(char((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

Error LineError(std::string_view what, size_t line, const std::string& why) {
  return Error(ErrorCode::kCorrupt,
               std::string(what) + ": line " + std::to_string(line) + ": " + why);
}

bool ReadSmallFile(const std::string& path, std::string* out) {
  Result<std::string> r = ReadFileToString(path, 4 << 20, Symlinks::kFollow);
  if (!r.ok()) return false;
  *out = std::move(r).value();
  return true;
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* d = opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    Result<uint64_t> pid = ParseUint64(e->d_name, "/proc entry");
    if (pid.ok() && *pid > 0 && *pid < (uint64_t{1} << 22)) pids.push_back(pid_t(*pid));
  }
  closedir(d);
  return pids;
}

}  // namespace

Result<std::vector<MountInfo>> ParseMountInfo(std::string_view text, std::string_view what) {
  std::vector<MountInfo> out;
  size_t number = 0;
  for (std::string_view line : SplitString(text, '\n', true)) {
    ++number;
    // id parent major:minor root mount-point options [optional fields...] - fstype source
    // super-options
    std::vector<std::string_view> f = SplitString(line, ' ', true);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 10 || dash == f.end() || dash - f.begin() < 6 || f.end() - dash < 4) {
      return LineError(what, number, "not a mountinfo line: '" + std::string(line) + "'");
    }
    if (f[3].empty() || f[3][0] != '/' || f[4].empty() || f[4][0] != '/') {
      return LineError(what, number, "root or mount point is not an absolute path");
    }
    out.push_back(MountInfo{Unescape(f[3]), Unescape(f[4]), std::string(dash[1]),
                            std::string(dash[3]), std::string(f[5])});
  }
  return out;
}

Result<std::vector<CgroupMembership>> ParseProcCgroup(std::string_view text,
                                                      std::string_view what) {
  std::vector<CgroupMembership> out;
  size_t number = 0;
  for (std::string_view line : SplitString(text, '\n', true)) {
    ++number;
    const size_t a = line.find(':');
    const size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) {
      return LineError(what, number, "not 'id:controllers:path': '" + std::string(line) + "'");
    }
    Result<uint64_t> id = ParseUint64(line.substr(0, a), "hierarchy id");
    if (!id.ok() || *id > 1'000'000) {
      return LineError(what, number, "hierarchy id is not a number: '" + std::string(line) + "'");
    }
    CgroupMembership m;
    m.hierarchy_id = int(*id);
    for (std::string_view c : SplitString(line.substr(a + 1, b - a - 1), ',', true)) {
      m.controllers.emplace_back(c);
    }
    m.path = std::string(line.substr(b + 1));
    if (m.path.empty() || m.path[0] != '/') {
      return LineError(what, number, "path is not absolute: '" + std::string(line) + "'");
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<CgroupDir> CgroupDirsOf(const std::vector<CgroupMembership>& memberships,
                                    const std::vector<MountInfo>& mounts) {
  std::vector<CgroupDir> out;
  for (const CgroupMembership& m : memberships) {
    for (const MountInfo& mount : mounts) {
      bool match = false;
      if (m.controllers.empty()) {
        match = m.hierarchy_id == 0 && mount.fs_type == "cgroup2";
      } else if (mount.fs_type == "cgroup") {
        std::vector<std::string_view> opts = SplitString(mount.super_options, ',', true);
        match = std::all_of(m.controllers.begin(), m.controllers.end(), [&](const std::string& c) {
          return std::find(opts.begin(), opts.end(), c) != opts.end();
        });
      }
      if (!match) continue;
      std::string rel;
      if (mount.root == "/") {
        rel = m.path;
      } else if (m.path == mount.root || m.path.rfind(mount.root + "/", 0) == 0) {
        rel = m.path.substr(mount.root.size());
      } else {
        continue;
      }
      if (rel == "/") rel.clear();
      out.push_back(CgroupDir{mount.mount_point, mount.mount_point + rel});
      break;
    }
  }
  return out;
}

Result<std::vector<CgroupDir>> CgroupDirsOfProcess(pid_t pid) {
  const std::string cgroup_file =
      pid == 0 ? "/proc/self/cgroup" : "/proc/" + std::to_string(pid) + "/cgroup";
  std::string cgroup_text, mountinfo_text;
  if (!ReadSmallFile(cgroup_file, &cgroup_text)) {
    return Error(ErrorCode::kNotFound, "cannot read " + cgroup_file);
  }
  if (!ReadSmallFile("/proc/self/mountinfo", &mountinfo_text)) {
    return Error(ErrorCode::kIo, "cannot read /proc/self/mountinfo");
  }
  return CgroupDirsOf(HAMI_TRY(ParseProcCgroup(cgroup_text, cgroup_file)),
                      HAMI_TRY(ParseMountInfo(mountinfo_text, "/proc/self/mountinfo")));
}

Result<std::vector<std::string>> MountPointsUnder(const std::string& dir) {
  std::string text;
  if (!ReadSmallFile("/proc/self/mountinfo", &text)) {
    return Error(ErrorCode::kIo, "cannot read /proc/self/mountinfo");
  }
  std::set<std::string> found;
  for (const MountInfo& m : HAMI_TRY(ParseMountInfo(text, "/proc/self/mountinfo"))) {
    if (m.mount_point == dir || m.mount_point.rfind(dir + "/", 0) == 0) {
      found.insert(m.mount_point);
    }
  }
  std::vector<std::string> out(found.begin(), found.end());
  // Deepest first: a longer path under the same prefix sorts after its parent.
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  return out;
}

std::vector<pid_t> ProcessesWithArgument(std::string_view arg) {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  for (pid_t pid : AllPids()) {
    if (pid == self) continue;
    std::string cmdline;
    if (!ReadSmallFile("/proc/" + std::to_string(pid) + "/cmdline", &cmdline)) continue;
    std::vector<std::string_view> args = SplitString(cmdline, '\0', false);
    if (std::find(args.begin() + (args.empty() ? 0 : 1), args.end(), arg) != args.end()) {
      out.push_back(pid);
    }
  }
  return out;
}

std::string CommandName(pid_t pid) {
  std::string comm;
  if (!ReadSmallFile("/proc/" + std::to_string(pid) + "/comm", &comm)) return "";
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

std::vector<std::string> UnixSocketPathsOf(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::set<std::string> inodes;  // "socket:[123]" -> "123"
  if (DIR* d = opendir((proc + "/fd").c_str())) {
    while (dirent* e = readdir(d)) {
      char target[64];
      const std::string link = proc + "/fd/" + e->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      const std::string_view t(target, size_t(n));
      if (t.rfind("socket:[", 0) == 0 && t.back() == ']') {
        inodes.insert(std::string(t.substr(8, t.size() - 9)));
      }
    }
    closedir(d);
  }
  std::vector<std::string> out;
  std::string table;
  if (inodes.empty() || !ReadSmallFile(proc + "/net/unix", &table)) return out;
  // Num RefCount Protocol Flags Type St Inode Path
  for (std::string_view line : SplitString(table, '\n', true)) {
    std::vector<std::string_view> f = SplitString(line, ' ', true);
    if (f.size() >= 8 && inodes.count(std::string(f[6])) != 0 && !f[7].empty() && f[7][0] == '/') {
      out.emplace_back(f[7]);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace hami::sim::cri
