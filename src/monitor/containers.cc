#include "monitor/containers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "node/paths.h"

namespace hami::monitor {

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

// Opens `path` as a directory without following a final symlink.
Result<DirPtr> OpenDir(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Error::FromErrno("opening directory " + path);
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    int err = errno;
    close(fd);
    return Error::FromErrno("opening directory " + path, err);
  }
  return DirPtr(d);
}

// The regular files named *.cache in `dir`: usage.cache first, the rest sorted.
Result<std::vector<std::string>> ListRegionFiles(const std::string& dir) {
  DirPtr d = HAMI_TRY(OpenDir(dir));
  std::vector<std::string> names;
  bool has_usage = false;
  while (dirent* e = readdir(d.get())) {
    std::string_view name = e->d_name;
    if (name.empty() || name[0] == '.' || !EndsWith(name, ".cache")) continue;
    struct stat st;
    if (fstatat(dirfd(d.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode)) continue;
    if (name == node::kRegionFileName) {
      has_usage = true;
    } else {
      names.emplace_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> paths;
  paths.reserve(names.size() + 1);
  if (has_usage) paths.push_back(dir + "/" + node::kRegionFileName);
  for (const auto& n : names) paths.push_back(dir + "/" + n);
  return paths;
}

}  // namespace

bool IsClaimDir(const ContainerKey& key, const std::string& dir) {
  if (key.container != node::kClaimContainerName) return false;
  struct stat st;
  return lstat(node::ClaimRecordPath(dir).c_str(), &st) == 0;
}

Result<ContainerKey> ParseContainerDirName(std::string_view name) {
  auto bad = [&](std::string_view why) {
    return Error(ErrorCode::kInvalidArgument,
                 "container directory '" + std::string(name) + "': " + std::string(why));
  };
  size_t sep = name.find('_');
  if (sep == std::string_view::npos) {
    return bad("no '_' between pod UID and container name");
  }
  std::string_view uid = name.substr(0, sep);
  std::string_view container = name.substr(sep + 1);
  if (auto s = node::ValidatePathComponent("pod UID", uid); !s.ok()) {
    return bad(s.error().message());
  }
  if (auto s = node::ValidatePathComponent("container name", container); !s.ok()) {
    return bad(s.error().message());
  }
  return ContainerKey{std::string(uid), std::string(container)};
}

Result<std::vector<ContainerDir>> ListContainerDirs(const std::string& hook_path,
                                                    std::vector<Error>* skipped) {
  std::string hook = hook_path;
  while (hook.size() > 1 && hook.back() == '/') hook.pop_back();
  std::string root = (hook == "/" ? "" : hook) + "/" + node::kContainersSubdir;
  auto opened = OpenDir(root);
  if (!opened.ok()) {
    if (opened.error().sys_errno() == ENOENT) return std::vector<ContainerDir>{};
    return std::move(opened).error();
  }
  DirPtr d = std::move(*opened);
  auto skip = [&](Error e) {
    if (skipped != nullptr) skipped->push_back(std::move(e));
  };
  std::vector<ContainerDir> dirs;
  while (dirent* e = readdir(d.get())) {
    std::string_view name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    std::string path = root + "/" + std::string(name);
    struct stat st;
    if (fstatat(dirfd(d.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) skip(Error::FromErrno("container entry " + path));
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (S_ISREG(st.st_mode) &&
          (EndsWith(name, node::kLimitsFileSuffix) || EndsWith(name, node::kClaimRecordSuffix))) {
        continue;
      }
      skip(
          Error(ErrorCode::kInvalidArgument,
                "container entry " + path +
                    (S_ISLNK(st.st_mode) ? ": is a symlink (not followed)" : ": not a directory")));
      continue;
    }
    auto key = ParseContainerDirName(name);
    if (!key.ok()) {
      skip(Error(key.error().code(), "container entry " + path + ": " + key.error().message()));
      continue;
    }
    auto regions = ListRegionFiles(path);
    if (!regions.ok()) {
      // Removed between the listing and now: the container ended; nothing to report.
      if (regions.error().sys_errno() != ENOENT) skip(std::move(regions).error());
      continue;
    }
    ContainerDir dir;
    dir.key = std::move(*key);
    dir.dir = path;
    dir.limits_file = path + node::kLimitsFileSuffix;
    dir.region_files = std::move(*regions);
    if (IsClaimDir(dir.key, path)) {
      dir.is_claim = true;
      auto record = node::ReadClaimRecord(node::ClaimRecordPath(path));
      if (!record.ok()) {
        if (record.error().sys_errno() != ENOENT) {
          skip(Error(record.error().code(), "claim directory " + path + ": " +
                                                record.error().message() +
                                                " (its series are not exported)"));
        }
      } else if (record->uid != dir.key.pod_uid) {
        skip(Error(ErrorCode::kInvalidArgument,
                   "claim directory " + path + ": its claim record names uid " + record->uid +
                       ", not " + dir.key.pod_uid + " (its series are not exported)"));
      } else {
        dir.claim = std::move(record).value();
      }
    }
    dirs.push_back(std::move(dir));
  }
  std::sort(dirs.begin(), dirs.end(),
            [](const ContainerDir& a, const ContainerDir& b) { return a.key < b.key; });
  return dirs;
}

}  // namespace hami::monitor
