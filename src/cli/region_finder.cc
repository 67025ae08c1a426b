#include "cli/region_finder.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "cli/paths.h"
#include "cli/region_report.h"
#include "limits/limits_file.h"
#include "limits/vocabulary.h"
#include "node/claim_record.h"
#include "node/paths.h"
#include "node/pod_record.h"
#include "vgpu/config.h"

namespace hami::cli {

namespace {

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

std::string OwnerName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    return found->pw_name;
  }
  return "uid " + std::to_string(uid);
}

// Names of the entries of `dir` that are directories (not symlinks to one), or regular files
// when `want_dirs` is false; sorted. An unreadable directory has none.
std::vector<std::string> Entries(const std::string& dir, bool want_dirs) {
  std::vector<std::string> names;
  DirPtr d(opendir(dir.c_str()));
  if (d == nullptr) return names;
  while (dirent* e = readdir(d.get())) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    if (fstatat(dirfd(d.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Appends `base` at `path` when `path` is a regular file (not a symlink).
void AddIfRegion(const std::string& path, VisibleRegion base, std::vector<VisibleRegion>* out) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  base.path = path;
  base.owner = OwnerName(st.st_uid);
  out->push_back(std::move(base));
}

std::string ContainersDir(const std::string& hook_path) {
  std::string hook = hook_path;
  while (hook.size() > 1 && hook.back() == '/') hook.pop_back();
  return (hook == "/" ? "" : hook) + "/" + node::kContainersSubdir;
}

}  // namespace

std::optional<CallerRegion> FindCallerRegion(std::string* problem) {
  const limits::LimitsFile file = limits::ReadLimitsFile(node::kLimitsFilePath);
  const vgpu::Resolution r =
      vgpu::ResolveConfig(file, [](const char* name) { return std::getenv(name); });
  const std::string_view key = limits::Name(limits::Key::kSharedCache);
  for (const vgpu::Setting& s : r.config.settings) {
    if (s.name != key) continue;
    return CallerRegion{r.config.shared_cache,
                        std::string(key) + (s.source == vgpu::Source::kLimitsFile
                                                ? std::string(" in ") + node::kLimitsFilePath
                                                : std::string(" in the environment"))};
  }
  if (problem != nullptr) {
    problem->clear();
    for (const std::string& p : r.problems) {
      if (p.rfind(key, 0) == 0) *problem = p;
    }
  }
  return std::nullopt;
}

std::vector<VisibleRegion> ListVisibleRegions(const std::string& hook_path) {
  std::vector<VisibleRegion> out;
  AddIfRegion(node::kDefaultSharedCache, {}, &out);
  const std::string run_prefix = std::string(kRunDirPrefix) + "-";
  for (const std::string& name : Entries(kRunDirParent, /*want_dirs=*/true)) {
    if (name.rfind(run_prefix, 0) != 0) continue;
    AddIfRegion(std::string(kRunDirParent) + "/" + name + "/" + node::kRegionFileName, {}, &out);
  }
  const std::string containers = ContainersDir(hook_path);
  for (const std::string& name : Entries(containers, /*want_dirs=*/true)) {
    const size_t cut = name.find('_');
    if (cut == std::string::npos || cut == 0 || cut + 1 == name.size()) continue;
    const std::string dir = containers + "/" + name;
    VisibleRegion base;
    base.pod_uid = name.substr(0, cut);
    base.container = name.substr(cut + 1);
    if (auto record = node::ReadPodRecord(dir); record.ok()) {
      base.pod_namespace = record->ns;
      base.pod_name = record->name;
    }
    if (base.container == node::kClaimContainerName) {
      auto claim = node::ReadClaimRecord(node::ClaimRecordPath(dir));
      if (claim.ok() && claim->uid == base.pod_uid) {
        base.claim_namespace = claim->ns;
        base.claim_name = claim->name;
      }
    }
    for (const std::string& file : Entries(dir, /*want_dirs=*/false)) {
      if (file.size() > 6 && file.ends_with(".cache")) AddIfRegion(dir + "/" + file, base, &out);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const VisibleRegion& a, const VisibleRegion& b) { return a.path < b.path; });
  return out;
}

std::string DescribeVisibleRegion(const VisibleRegion& r) {
  std::string line = Printable(r.path) + "  owner " + Printable(r.owner);
  if (!r.claim_name.empty()) {
    line += "  claim " + Printable(r.claim_namespace) + "/" + Printable(r.claim_name) +
            " (claim UID " + Printable(r.pod_uid) + ")";
  } else if (!r.pod_uid.empty()) {
    if (!r.pod_name.empty()) {
      line += "  pod " + Printable(r.pod_namespace) + "/" + Printable(r.pod_name) + " (container " +
              Printable(r.container) + ", pod UID " + Printable(r.pod_uid) + ")";
    } else {
      line += "  pod UID " + Printable(r.pod_uid) + ", container " + Printable(r.container) +
              " (no pod record)";
    }
  }
  return line;
}

std::string NoRegionGivenMessage(std::string_view command, const std::string& problem,
                                 const std::vector<VisibleRegion>& regions,
                                 const std::string& hook_path) {
  const std::string cmd(command);
  std::string text = cmd + ": no region given, and " +
                     std::string(limits::Name(limits::Key::kSharedCache)) + " names none here (" +
                     (problem.empty() ? std::string("neither the environment nor ") +
                                            node::kLimitsFilePath + " sets it"
                                      : problem) +
                     "): which region is yours is unknown, so none is read\n";
  if (regions.empty()) {
    text += cmd + ": no region found (looked at " + node::kDefaultSharedCache + ", " +
            kRunDirParent + "/" + kRunDirPrefix + "-*/" + node::kRegionFileName + " and " +
            ContainersDir(hook_path) + ")\n";
  } else {
    text += cmd + ": regions on this host:\n";
    for (const VisibleRegion& r : regions) text += "  " + DescribeVisibleRegion(r) + "\n";
  }
  text += cmd + ": give one: " + cmd + " REGION\n";
  return text;
}

}  // namespace hami::cli
