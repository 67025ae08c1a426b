#include "sim/cluster/gpu_toolkit.h"

#include <errno.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

namespace hami::sim::cluster {
namespace {

namespace fs = std::filesystem;

// The base image's /usr mount points (sim/oci/image.h, BaseImage) but /usr/lib.
constexpr const char* kUserlandDirs[] = {"/usr/bin", "/usr/sbin", "/usr/lib64", "/usr/libexec",
                                         "/usr/share"};

Error FsError(const std::error_code& ec, const std::string& what) {
  return Error(ErrorCode::kIo, what + ": " + ec.message());
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

Result<std::unique_ptr<GpuToolkit>> GpuToolkit::Prepare(const std::string& dir,
                                                        const std::vector<std::string>& driver_libs,
                                                        const std::string& sim_state) {
  std::unique_ptr<GpuToolkit> t(new GpuToolkit());
  const std::string layer = dir + "/driver";
  const std::string lib_dir = layer + "/" + MultiarchDir();
  t->usr_lib_ = dir + "/usr-lib";
  std::error_code ec;
  for (const std::string& d : {lib_dir, t->usr_lib_}) {
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

Status GpuToolkit::Unmount() {
  if (!mounted_) return OkStatus();
  if (umount2(usr_lib_.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    return Error::FromErrno("unmounting the GPU toolkit's overlay " + usr_lib_);
  }
  mounted_ = false;
  return OkStatus();
}

}  // namespace hami::sim::cluster
