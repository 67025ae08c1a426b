#include "sim/cluster/gpu_toolkit.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "common/file.h"
#include "sim/device_nodes.h"
#include "sim/options.h"
#include "sim/profiles.h"

namespace hami::sim::cluster {
namespace {

namespace fs = std::filesystem;

// The base image's /usr mount points (sim/oci/image.h, BaseImage) but /usr/lib.
constexpr const char* kUserlandDirs[] = {"/usr/bin", "/usr/sbin", "/usr/lib64", "/usr/libexec",
                                         "/usr/share"};

Error FsError(const std::error_code& ec, const std::string& what) {
  return Error(ErrorCode::kIo, what + ": " + ec.message());
}

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The node's GPU a NVIDIA_VISIBLE_DEVICES entry names: a whole UUID or a decimal index.
std::optional<size_t> FindGpu(std::string_view entry, std::span<const std::string> node_gpus) {
  if (!entry.empty() &&
      std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    size_t index = 0;
    for (char c : entry) {
      index = index * 10 + size_t(c - '0');
      if (index >= node_gpus.size()) return std::nullopt;
    }
    return index;
  }
  auto it = std::find(node_gpus.begin(), node_gpus.end(), entry);
  if (it == node_gpus.end()) return std::nullopt;
  return size_t(it - node_gpus.begin());
}

// Writes `text` to `path` through a temporary file renamed over it.
Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    UniqueFd fd = HAMI_TRY(OpenRegularFile(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644));
    HAMI_TRY(WriteAll(fd.get(), text));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return Error::FromErrno("rename " + tmp);
  return OkStatus();
}

}  // namespace

const char* MultiarchDir() {
#if defined(__x86_64__)
  return "x86_64-linux-gnu";
#elif defined(__aarch64__)
  return "aarch64-linux-gnu";
#else
#error "the simulated node knows the loader's directory of x86-64 and arm64 only"
#endif
}

std::vector<kubelet::Mount> HostUserlandMounts(const std::string& usr_lib) {
  std::vector<kubelet::Mount> out;
  for (const char* d : kUserlandDirs) out.push_back({d, d, true});
  out.push_back({"/usr/lib", usr_lib, true});
  return out;
}

std::vector<kubelet::Mount> HostUserlandMounts() { return HostUserlandMounts("/usr/lib"); }

Result<std::vector<std::string>> NodeGpus(const std::map<std::string, std::string>& sim_env) {
  const SimOptions options = HAMI_TRY(LoadSimOptions([&sim_env](const char* name) -> const char* {
    auto it = sim_env.find(name);
    return it == sim_env.end() ? nullptr : it->second.c_str();
  }));
  std::vector<std::string> out;
  for (const DeviceSpec& d : HAMI_TRY(ParseProfileSpec(options.profile_spec, options.node))) {
    out.push_back(d.uuid);
  }
  return out;
}

std::optional<std::string> ToolkitVisibleDevices(const ContainerPlan& container,
                                                 const kubelet::ContainerAllocation& response) {
  constexpr char kName[] = "NVIDIA_VISIBLE_DEVICES";
  if (auto own = container.env.find(kName); own != container.env.end()) return own->second;
  if (auto plugin = response.envs.find(kName); plugin != response.envs.end()) {
    return plugin->second;
  }
  return std::nullopt;
}

Result<std::vector<std::string>> ContainerGpus(std::optional<std::string_view> visible,
                                               std::span<const std::string> node_gpus) {
  std::vector<bool> chosen(node_gpus.size(), false);
  const std::string_view value = visible ? TrimBlanks(*visible) : std::string_view();
  if (value == "all") {
    chosen.assign(node_gpus.size(), true);
  } else if (!value.empty() && value != "void" && value != "none") {
    std::string_view rest = value;
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view entry = TrimBlanks(rest.substr(0, comma));
      std::optional<size_t> gpu = FindGpu(entry, node_gpus);
      if (!gpu) {
        return Error(ErrorCode::kInvalidArgument, "nvidia-container-cli: device error: " +
                                                      std::string(entry) + ": unknown device");
      }
      chosen[*gpu] = true;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < node_gpus.size(); ++i) {
    if (chosen[i]) out.push_back(node_gpus[i]);
  }
  return out;
}

Result<std::unique_ptr<GpuToolkit>> GpuToolkit::Prepare(
    const std::string& dir, const std::vector<std::string>& driver_libs,
    const std::string& sim_state, const std::map<std::string, std::string>& sim_env) {
  std::unique_ptr<GpuToolkit> t(new GpuToolkit());
  Result<std::vector<std::string>> gpus = NodeGpus(sim_env);
  if (!gpus.ok()) {
    return Error(ErrorCode::kInvalidArgument,
                 "the GPU toolkit: the node's GPUs: " + gpus.error().message());
  }
  t->gpus_ = *std::move(gpus);
  const std::string layer = dir + "/driver";
  const std::string lib_dir = layer + "/" + MultiarchDir();
  t->usr_lib_ = dir + "/usr-lib";
  t->containers_dir_ = dir + "/containers";
  std::error_code ec;
  for (const std::string& d : {lib_dir, t->usr_lib_, t->containers_dir_}) {
    fs::create_directories(d, ec);
    if (ec) return FsError(ec, "the GPU toolkit's directory " + d);
  }
  for (const std::string& lib : driver_libs) {
    const std::string to = lib_dir + "/" + fs::path(lib).filename().string();
    fs::copy_file(lib, to, fs::copy_options::overwrite_existing, ec);
    if (ec) return FsError(ec, "copying the simulated driver library " + lib + " to " + to);
  }
  const std::string hostpid = sim_state + ".hostpid";
  fs::create_directories(hostpid, ec);
  if (ec) return FsError(ec, "the simulated GPU's host-PID directory " + hostpid);
  // A read-only overlay (lower layers only): the driver layer over the host's /usr/lib.
  const std::string options = "lowerdir=" + layer + ":/usr/lib";
  if (mount("overlay", t->usr_lib_.c_str(), "overlay", MS_RDONLY, options.c_str()) != 0) {
    return Error::FromErrno("mounting the GPU toolkit's /usr/lib overlay on " + t->usr_lib_ + " (" +
                            options + ")");
  }
  t->mounted_ = true;
  t->mounts_ = HostUserlandMounts(t->usr_lib_);
  t->mounts_.push_back({kContainerSimState, sim_state, false});
  t->mounts_.push_back({std::string(kContainerSimState) + ".hostpid", hostpid, false});
  return t;
}

GpuToolkit::~GpuToolkit() { (void)Unmount(); }

Result<std::string> GpuToolkit::WriteDeviceNodes(const std::string& pod_uid,
                                                 const ContainerPlan& container,
                                                 const kubelet::ContainerAllocation& response) {
  const std::optional<std::string> visible = ToolkitVisibleDevices(container, response);
  const std::vector<std::string> gpus = HAMI_TRY(ContainerGpus(visible, gpus_));
  const std::string dir = containers_dir_ + "/" + pod_uid + "_" + container.name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return FsError(ec, "the GPU toolkit's container directory " + dir);
  const std::string path = dir + "/device-nodes";
  HAMI_TRY(WriteFileAtomically(path, DeviceNodesText(gpus)));
  return path;
}

void GpuToolkit::RemovePod(const std::string& pod_uid) {
  std::error_code ec;
  const std::string prefix = pod_uid + "_";
  std::vector<fs::path> pods;
  for (auto it = fs::directory_iterator(containers_dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().starts_with(prefix)) pods.push_back(it->path());
  }
  for (const fs::path& p : pods) fs::remove_all(p, ec);
}

Status GpuToolkit::Unmount() {
  if (!mounted_) return OkStatus();
  if (umount2(usr_lib_.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    return Error::FromErrno("unmounting the GPU toolkit's overlay " + usr_lib_);
  }
  mounted_ = false;
  return OkStatus();
}

}  // namespace hami::sim::cluster
