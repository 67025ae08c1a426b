#include "monitor/cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <string_view>
#include <utility>

#include "common/file.h"
#include "common/ofd_lock.h"
#include "node/claim_record.h"
#include "node/paths.h"
#include "region/region.h"

namespace hami::monitor {

namespace {

constexpr char kLockFileName[] = "monitor.lock";
constexpr int kMaxDepth = 32;  // a container directory holds a few files, not a tree

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

// A directory stream over `name` below `parent_fd`, never following a symlink.
Result<DirPtr> OpenDirAt(int parent_fd, const char* name, const std::string& path) {
  int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Error::FromErrno("opening directory " + path);
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    close(fd);
    return Error::FromErrno("opening directory " + path, err);
  }
  return DirPtr(d);
}

// One container's names in the containers directory.
struct Entry {
  std::string name;               // "<uid>_<container>", present or not
  bool has_main = false;          // an entry of that name exists (a directory, a link, a file)
  bool has_limits = false;        // "<name>.limits" exists
  bool has_claim_record = false;  // "<uid>_claim.claim" exists: a DRA claim's, never touched
};

// Removes `name` below `parent_fd` (`path` names it in errors): a directory recursively, any
// other kind of file (a symlink included) by unlinking it. Never follows a link, never
// descends into another device. A name already gone is success.
Status RemoveAt(int parent_fd, const std::string& name, const std::string& path, dev_t dev,
                int depth) {
  struct stat st;
  if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return OkStatus();
    return Error::FromErrno("stat " + path);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(parent_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return Error::FromErrno("removing " + path);
    }
    return OkStatus();
  }
  if (st.st_dev != dev) {
    return Error(ErrorCode::kPermission,
                 path + ": a mount point (another file system); not removed");
  }
  if (depth >= kMaxDepth) {
    return Error(ErrorCode::kUnsupported, path + ": nested deeper than " +
                                              std::to_string(kMaxDepth) + " levels; not removed");
  }
  {
    DirPtr d = HAMI_TRY(OpenDirAt(parent_fd, name.c_str(), path));
    std::vector<std::string> children;
    errno = 0;
    while (dirent* e = readdir(d.get())) {
      std::string_view child = e->d_name;
      if (child == "." || child == "..") continue;
      children.emplace_back(child);
    }
    for (const std::string& child : children) {
      HAMI_TRY(RemoveAt(dirfd(d.get()), child, path + "/" + child, dev, depth + 1));
    }
  }
  if (unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return Error::FromErrno("removing directory " + path);
  }
  return OkStatus();
}

// Whether a live process is attached to one of the regions (regular *.cache files) of the
// directory `name` below `parent_fd`. False when `name` is not a directory.
Result<bool> Attached(int parent_fd, const std::string& name, const std::string& path) {
  struct stat st;
  if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    return Error::FromErrno("stat " + path);
  }
  if (!S_ISDIR(st.st_mode)) return false;
  DirPtr d = HAMI_TRY(OpenDirAt(parent_fd, name.c_str(), path));
  while (dirent* e = readdir(d.get())) {
    std::string_view file = e->d_name;
    if (!EndsWith(file, ".cache")) continue;
    struct stat fst;
    if (fstatat(dirfd(d.get()), e->d_name, &fst, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(fst.st_mode)) {
      continue;
    }
    auto attached = region::AnyProcessAttached(path + "/" + std::string(file));
    if (!attached.ok()) {
      if (attached.error().sys_errno() == ENOENT) continue;
      return std::move(attached).error();
    }
    if (*attached) return true;
  }
  return false;
}

}  // namespace

Cleaner::Cleaner(CleanupOptions options, std::string lock_path, UniqueFd lock)
    : options_(std::move(options)), lock_path_(std::move(lock_path)), lock_(std::move(lock)) {
  containers_dir_ = options_.hook_path + "/" + node::kContainersSubdir;
}

Result<std::unique_ptr<Cleaner>> Cleaner::Start(CleanupOptions options) {
  std::string& hook = options.hook_path;
  while (hook.size() > 1 && hook.back() == '/') hook.pop_back();
  if (hook.empty() || hook[0] != '/') {
    return Error(ErrorCode::kInvalidArgument, "hook path '" + hook + "': not an absolute path");
  }
  if (hook == "/" || ("/" + hook + "/").find("/../") != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument,
                 "hook path '" + hook + "': must be an absolute directory with no '..'");
  }
  if (options.resync_interval.count() < 0) {
    return Error(ErrorCode::kInvalidArgument, "cleanup resync interval is negative");
  }
  const std::string vgpu_dir = hook + "/vgpu";
  if (mkdir(vgpu_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Error::FromErrno("making " + vgpu_dir);
  }
  std::string lock_path = vgpu_dir + "/" + kLockFileName;
  UniqueFd fd = HAMI_TRY(OpenRegularFile(lock_path, O_RDWR | O_CREAT, 0644));
  const int err = OfdLockByte(fd.get(), 0, F_WRLCK, LockWait::kNo);
  if (err == EAGAIN || err == EACCES) {
    std::string holder;
    if (auto text = ReadFileToString(lock_path, 64); text.ok()) {
      for (char c : *text) {
        if (c < '0' || c > '9') break;
        holder += c;
      }
    }
    return Error(ErrorCode::kBusy,
                 lock_path + " is held by another hami-monitor" +
                     (holder.empty() ? std::string() : " (pid " + holder + ")") +
                     "; container directory cleanup stays off in this one",
                 err);
  }
  if (err != 0) return Error::FromErrno("locking " + lock_path, err);
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd.get(), 0) != 0) return Error::FromErrno("truncating " + lock_path);
  if (pwrite(fd.get(), pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    return Error::FromErrno("writing " + lock_path);
  }
  return std::unique_ptr<Cleaner>(
      new Cleaner(std::move(options), std::move(lock_path), std::move(fd)));
}

CleanupReport Cleaner::Pass(const std::function<Result<std::vector<std::string>>()>& list_pods,
                            std::chrono::steady_clock::time_point now) {
  CleanupReport report;
  // 1. The scan.
  UniqueFd dir_fd(open(containers_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  const int open_errno = dir_fd.valid() ? 0 : errno;
  std::map<ContainerKey, Entry> seen;
  dev_t dev = 0;
  if (!dir_fd.valid() && open_errno != ENOENT) {
    report.errors.push_back(Error::FromErrno("opening directory " + containers_dir_, open_errno));
  } else if (dir_fd.valid()) {
    struct stat st;
    if (fstat(dir_fd.get(), &st) != 0) {
      report.errors.push_back(Error::FromErrno("stat " + containers_dir_));
    } else {
      dev = st.st_dev;
      auto d = OpenDirAt(dir_fd.get(), ".", containers_dir_);
      if (!d.ok()) {
        report.errors.push_back(std::move(d).error());
      } else {
        while (dirent* e = readdir(d->get())) {
          std::string_view name = e->d_name;
          if (name.empty() || name[0] == '.') continue;
          const bool limits = EndsWith(name, node::kLimitsFileSuffix);
          std::string_view base =
              limits
                  ? name.substr(0, name.size() - std::string_view(node::kLimitsFileSuffix).size())
                  : name;
          if (!limits && EndsWith(name, node::kClaimRecordSuffix)) {
            std::string_view stem =
                name.substr(0, name.size() - std::string_view(node::kClaimRecordSuffix).size());
            auto claim = ParseContainerDirName(stem);
            if (claim.ok() && claim->container == node::kClaimContainerName) {
              Entry& entry = seen[*claim];
              entry.name = std::string(stem);
              entry.has_claim_record = true;
              continue;
            }
          }
          auto key = ParseContainerDirName(base);
          if (!key.ok()) continue;  // not the plugin's: never touched
          Entry& entry = seen[*key];
          entry.name = std::string(base);
          (limits ? entry.has_limits : entry.has_main) = true;
        }
      }
    }
  }
  // 2. The list.
  Result<std::vector<std::string>> pods = list_pods();
  if (!pods.ok()) {
    report.list_error = pods.error().message();
    absent_since_.clear();
    return report;
  }
  report.listed = true;
  const std::set<std::string> live(pods->begin(), pods->end());
  // 3. The marks, and what is due.
  std::map<ContainerKey, std::chrono::steady_clock::time_point> marks;
  for (const auto& [key, entry] : seen) {
    // A DRA claim's files are the driver's: NodeUnprepareResources removes them.
    if (entry.has_claim_record) continue;
    if (live.count(key.pod_uid) != 0) continue;
    auto it = absent_since_.find(key);
    const auto since = it == absent_since_.end() ? now : it->second;
    marks.emplace(key, since);
    if (it == absent_since_.end() || now - since < options_.resync_interval) {
      ++report.waiting;
      continue;
    }
    ++report.candidates;
    const std::string path = containers_dir_ + "/" + entry.name;
    if (entry.has_main) {
      auto attached = Attached(dir_fd.get(), entry.name, path);
      if (!attached.ok()) {
        report.errors.push_back(std::move(attached).error());
        continue;
      }
      if (*attached) {
        ++report.kept_attached;
        continue;
      }
      if (Status s = RemoveAt(dir_fd.get(), entry.name, path, dev, 0); !s.ok()) {
        report.errors.push_back(std::move(s).error());
        continue;
      }
    }
    if (entry.has_limits) {
      const std::string limits = entry.name + node::kLimitsFileSuffix;
      if (Status s = RemoveAt(dir_fd.get(), limits, path + node::kLimitsFileSuffix, dev, 0);
          !s.ok()) {
        report.errors.push_back(std::move(s).error());
        continue;
      }
    }
    ++report.removed;
    report.removed_dirs.push_back(entry.has_main ? path : path + node::kLimitsFileSuffix);
    marks.erase(key);
  }
  absent_since_ = std::move(marks);
  return report;
}

}  // namespace hami::monitor
