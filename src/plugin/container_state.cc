#include "plugin/container_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <utility>

#include "common/file.h"
#include "common/strings.h"
#include "common/unique_fd.h"

namespace hami::plugin {
namespace {

bool IsBelow(std::string_view path, std::string_view dir) {
  return path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/';
}

bool AtOrBelow(std::string_view path, std::string_view dir) {
  return path == dir || IsBelow(path, dir);
}

// Makes `path` a directory (mode 0755) unless it is one already.
Status MakeDirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) return Error::FromErrno("stat " + path);
    if (!S_ISDIR(st.st_mode)) {
      return Error(ErrorCode::kInvalidArgument, path + ": exists and is not a directory");
    }
    return OkStatus();
  }
  return Error::FromErrno("mkdir " + path);
}

// Writes `text` to `path` through a temporary file in the same
// directory, fsynced and renamed over it, so that a container being created at the same time
// maps either the old library or the new one, never a part.
Status InstallFile(const std::string& path, const std::string& text, mode_t mode) {
  std::string tmp = path + ".tmp-XXXXXX";
  int raw = mkstemp(tmp.data());
  if (raw < 0) return Error::FromErrno("creating " + tmp);
  UniqueFd fd(raw);
  auto fail = [&](const std::string& what) {
    int err = errno;
    unlink(tmp.c_str());
    return Error::FromErrno(what + " " + tmp, err);
  };
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("writing");
    done += size_t(n);
  }
  if (fchmod(fd.get(), mode) != 0) return fail("chmod");
  if (fsync(fd.get()) != 0) return fail("fsync");
  if (rename(tmp.c_str(), path.c_str()) != 0) return fail("renaming over " + path + " from");
  return OkStatus();
}

}  // namespace

std::string NormalizePath(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::string_view part : SplitString(path, '/', true)) {
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (part != ".") {
      parts.push_back(part);
    }
  }
  std::string out;
  for (std::string_view p : parts) {
    out += '/';
    out += p;
  }
  return out.empty() ? "/" : out;
}

std::vector<Mount> ReconcileLockMounts(std::vector<Mount> mounts, Broker broker,
                                       std::string_view lock_host_dir,
                                       std::string_view broker_host_dir) {
  const std::string lock_dir = node::kLockDir;
  const std::string broker_dir = node::kBrokerContainerDir;
  const std::string broker_host = NormalizePath(broker_host_dir);
  std::vector<Mount> out;
  std::optional<size_t> insert_at;
  for (Mount& m : mounts) {
    const std::string container = NormalizePath(m.container_path);
    const bool is_lock = container == lock_dir;
    const bool is_broker =
        AtOrBelow(container, broker_dir) || AtOrBelow(NormalizePath(m.host_path), broker_host);
    if (is_lock || is_broker) {
      if (!insert_at) insert_at = out.size();
      continue;
    }
    if (!insert_at && IsBelow(container, lock_dir)) insert_at = out.size();
    out.push_back(std::move(m));
  }
  std::vector<Mount> canonical;
  canonical.push_back({lock_dir, std::string(lock_host_dir), false});
  if (broker == Broker::kEnabled) {
    canonical.push_back({broker_dir, std::string(broker_host_dir), true});
  }
  const size_t at = insert_at.value_or(out.size());
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), canonical.begin(), canonical.end());
  return out;
}

ScaledShare SplitScaledShare(uint64_t bytes, double scaling) {
  if (!(scaling > 1)) return {bytes, 0};
  // Exact in a double up to 2^53 bytes; a quotient rounded up past the true one is taken back.
  auto device = static_cast<uint64_t>(std::floor(static_cast<double>(bytes) / scaling));
  while (device > 0 && static_cast<double>(device) * scaling > static_cast<double>(bytes)) {
    --device;
  }
  device = std::min(device, bytes);
  return {device, bytes - device};
}

Result<ContainerShare> BuildContainerShare(const ContainerShareInput& in) {
  if (in.device_config == nullptr) {
    return Error(ErrorCode::kInternal, "BuildContainerShare: no device configuration");
  }
  if (in.devices.empty()) return Error(ErrorCode::kInvalidArgument, "the share names no device");
  const config::DeviceConfig& cfg = *in.device_config;
  ContainerShare share;
  ContainerResponse& resp = share.response;
  auto set = [&resp](limits::Entry e) { resp.envs[e.first] = std::move(e.second); };
  uint64_t host_bytes = 0;  // the host parts of the shares (deviceMemoryScaling > 1)
  for (size_t k = 0; k < in.devices.size(); ++k) {
    const ShareDevice& d = in.devices[k];
    if (d.memory_bytes == 0) {
      return Error(ErrorCode::kInvalidArgument,
                   "device " + d.uuid + ": 0 bytes of memory would be no limit; refusing");
    }
    const ScaledShare scaled = SplitScaledShare(d.memory_bytes, cfg.device_memory_scaling);
    if (scaled.device_bytes == 0) {
      return Error(ErrorCode::kInvalidArgument, "device " + d.uuid + ": deviceMemoryScaling " +
                                                    std::to_string(cfg.device_memory_scaling) +
                                                    " leaves no device memory of its share");
    }
    set(limits::SetDeviceMemoryLimit(static_cast<int>(k), scaled.device_bytes));
    host_bytes += scaled.host_bytes;
  }
  set(limits::SetSmLimit(in.devices[0].cores));
  set(limits::SetSharedCache(kContainerSharedCache));
  if (cfg.device_memory_scaling > 1) {
    set(limits::SetOversubscribe(true));
    set(limits::SetOversubscribeHostLimit(host_bytes));
  }
  if (cfg.lib_cuda_log_level != 2) set(limits::SetLogLevel(cfg.lib_cuda_log_level));
  if (in.task_priority) set(limits::SetTaskPriority(*in.task_priority));
  if (in.core_policy) {
    set(limits::SetCorePolicy(*in.core_policy));
  } else if (auto policy = limits::ParseCorePolicy(cfg.gpu_core_policy);
             policy.ok() && *policy != limits::CorePolicy::kDefault) {
    set(limits::SetCorePolicy(*policy));
  }
  if (cfg.disable_core_limit) set(limits::SetCorePolicy(limits::CorePolicy::kDisable));
  resp.envs.erase(std::string(limits::Name(limits::Key::kHostPidBroker)));
  if (in.broker == Broker::kEnabled) set(limits::SetHostPidBroker(true));

  std::vector<std::string> visible;
  for (const ShareDevice& d : in.devices) {
    if (std::find(visible.begin(), visible.end(), d.uuid) == visible.end()) {
      visible.push_back(d.uuid);
    }
  }
  std::string joined;
  for (const std::string& u : visible) joined += (joined.empty() ? "" : ",") + u;
  resp.envs[kVisibleDevicesEnv] = joined;

  auto dir = node::ContainerDir(in.hook_path, in.ref);
  if (!dir.ok()) return std::move(dir).error();
  share.container_dir = *dir;
  // ContainerDir has validated the hook path; drop a trailing '/' as it does.
  std::string hook(in.hook_path);
  while (hook.size() > 1 && hook.back() == '/') hook.pop_back();
  std::vector<Mount> mounts;
  mounts.push_back({kContainerVgpuDir, share.container_dir, false});
  mounts.push_back({kContainerLibVgpu, hook + "/" + kHostLibVgpu, true});
  mounts.push_back({node::kLockDir, std::string(in.lock_host_dir), false});
  if (in.preload == Preload::kMount) {
    mounts.push_back({kContainerLdSoPreload, hook + "/" + kHostLdSoPreload, true});
  }
  if (in.limits_file == LimitsFile::kWrite) {
    auto path = node::ContainerLimitsPath(in.hook_path, in.ref);
    if (!path.ok()) return std::move(path).error();
    share.limits_path = *path;
    mounts.push_back({node::kLimitsFilePath, share.limits_path, true});
    for (const auto& [k, v] : resp.envs) {
      if (k != kVisibleDevicesEnv) share.limits.emplace_back(k, v);
    }
    auto text = limits::LimitsText(share.limits);
    if (!text.ok()) return std::move(text).error();
  }
  resp.mounts =
      ReconcileLockMounts(std::move(mounts), in.broker, in.lock_host_dir, in.broker_host_dir);
  return share;
}

Status RecreateContainerDirectory(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return Error(ErrorCode::kIo, "removing " + dir + ": " + ec.message(), ec.value());
  const fs::path parent = fs::path(dir).parent_path();
  fs::create_directories(parent, ec);
  if (ec) {
    return Error(ErrorCode::kIo, "creating " + parent.string() + ": " + ec.message(), ec.value());
  }
  if (::mkdir(dir.c_str(), 0777) != 0) return Error::FromErrno("mkdir " + dir);
  if (::chmod(dir.c_str(), 0777) != 0) return Error::FromErrno("chmod " + dir);
  return OkStatus();
}

Status CheckHookFiles(const ContainerResponse& response, std::string_view whose,
                      std::string_view daemon) {
  for (const Mount& m : response.mounts) {
    if (m.container_path != kContainerLibVgpu && m.container_path != kContainerLdSoPreload &&
        m.container_path != node::kLimitsFilePath) {
      continue;
    }
    struct stat st {};
    const bool exists = stat(m.host_path.c_str(), &st) == 0;
    if (!exists || !S_ISREG(st.st_mode)) {
      return Error(ErrorCode::kNotFound,
                   m.host_path + " (bound at " + m.container_path + " in " + std::string(whose) +
                       ") is " + (exists ? "not a regular file" : "missing") +
                       ": the container would run without its limits, so it is refused; "
                       "restart " +
                       std::string(daemon) + " to install its hook files again");
    }
  }
  return OkStatus();
}

Status InstallHookFiles(const std::string& hook_path, const std::string& vgpu_library) {
  const std::string vgpu = hook_path + "/vgpu";
  HAMI_TRY(MakeDirectory(hook_path));
  HAMI_TRY(MakeDirectory(vgpu));
  HAMI_TRY(MakeDirectory(vgpu + "/containers"));
  const std::string library = hook_path + "/" + kHostLibVgpu;
  if (!vgpu_library.empty()) {
    auto bytes = ReadFileToString(vgpu_library, size_t(256) << 20, Symlinks::kFollow);
    if (!bytes.ok()) {
      return Error(ErrorCode::kNotFound,
                   "reading the libvgpu.so to install: " + bytes.error().message());
    }
    HAMI_TRY(InstallFile(library, *bytes, 0755));
  } else {
    struct stat st {};
    if (stat(library.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return Error(ErrorCode::kNotFound,
                   library +
                       ": no libvgpu.so in the hook path (install one, or name it with "
                       "--vgpu-library): containers would run without their limits");
    }
  }
  // The preload list every container gets at /etc/ld.so.preload: the library at the path the
  // container sees it.
  return InstallFile(hook_path + "/" + kHostLdSoPreload, std::string(kContainerLibVgpu) + "\n",
                     0644);
}

}  // namespace hami::plugin
