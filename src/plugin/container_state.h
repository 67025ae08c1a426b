// One container's share of its GPUs on the node, as both front doors hand it out: the device
// plugin's Allocate (a container of a pod, plugin/allocate.h) and the DRA driver's
// NodePrepareResources (a prepared claim, dra/). From the devices and their shares to the
// variables libvgpu.so reads, the mounts that carry the container's directory, libvgpu.so, the
// lock directory, the broker socket, /etc/ld.so.preload and the limits file, and the files on
// the host that back them. One home, so that a claim gets exactly what a container of a pod
// gets.
//
// The pure part (BuildContainerShare) decides; the I/O part (InstallHookFiles,
// RecreateContainerDirectory, CheckHookFiles) makes the directory and checks that the files bound
// as files are files. The limits file itself is published by limits::PublishLimitsFile,
// /tmp/vgpulock prepared by broker::PrepareLockDirectory.
//
// Thread safety: BuildContainerShare, NormalizePath, ReconcileLockMounts and SplitScaledShare
// are pure; the I/O functions touch only the paths they are given.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/device_config.h"
#include "limits/limits_file.h"
#include "limits/vocabulary.h"
#include "node/paths.h"
#include "plugin/types.h"

namespace hami::plugin {

// Container-side paths of the response (HAMi's, with seed 003's stable region name).
inline constexpr char kContainerVgpuDir[] = "/usr/local/vgpu";
inline constexpr char kContainerLibVgpu[] = "/usr/local/vgpu/libvgpu.so";
inline constexpr char kContainerSharedCache[] = "/usr/local/vgpu/usage.cache";
inline constexpr char kContainerLdSoPreload[] = "/etc/ld.so.preload";
// Host-side files below the hook path that the deployment installs.
inline constexpr char kHostLibVgpu[] = "vgpu/libvgpu.so";
inline constexpr char kHostLdSoPreload[] = "vgpu/ld.so.preload";

// The broker gate variable; only "1" enables.
inline constexpr const char* kBrokerGateEnv = limits::KeyName(limits::Key::kHostPidBroker);
inline constexpr char kDisableControlEnv[] = "CUDA_DISABLE_CONTROL";
inline constexpr char kVisibleDevicesEnv[] = "NVIDIA_VISIBLE_DEVICES";

enum class Broker { kDisabled, kEnabled };
// Whether the share is delivered as a limits file bound at /overrideEnv (file mode) or only as
// variables (env mode).
enum class LimitsFile { kWrite, kNone };
// Whether /etc/ld.so.preload is bound (not when the container asked CUDA_DISABLE_CONTROL=true).
enum class Preload { kMount, kSkip };

// "/a//b/./c/" -> "/a/b/c"; ".." removes the component before it (never above "/").
std::string NormalizePath(std::string_view path);

// Makes the lock-directory mounts of `mounts` canonical (seed 000): every mount whose container
// path is path-equivalent to /tmp/vgpulock, and every broker mount (container path at or below
// /tmp/vgpulock/hostpid, or host path at or below `broker_host_dir`), is removed; then one
// read-write `lock_host_dir` -> /tmp/vgpulock and, when the broker is enabled, one read-only
// `broker_host_dir` -> /tmp/vgpulock/hostpid right after it are put where the first removed
// one was, or before the first mount nested below /tmp/vgpulock, or at the end. Other mounts
// keep their order.
std::vector<Mount> ReconcileLockMounts(std::vector<Mount> mounts, Broker broker,
                                       std::string_view lock_host_dir = node::kLockDir,
                                       std::string_view broker_host_dir = node::kBrokerHostDir);

// deviceMemoryScaling above 1 advertises a GPU's memory times the scaling; what it advertises
// past the physical memory can only be host memory. So a container's share of a GPU (`bytes`,
// what the scheduler counted against the scaled memory) is held as device memory for its part
// of the physical GPU, bytes / scaling rounded down to a byte, and as host memory for the rest
// (libvgpu's oversubscription, docs/vgpu.md). Every container's device part together stays
// within the GPU's memory; the two parts together are what was advertised. At a scaling of 1
// or less, all of it is device memory. A device part of 0 (a scaling so large that less than a
// byte is left) is 0 here: the caller refuses it, since 0 would be no limit.
struct ScaledShare {
  uint64_t device_bytes = 0;
  uint64_t host_bytes = 0;
};
ScaledShare SplitScaledShare(uint64_t bytes, double scaling);

// One device of the container, in the container's CUDA order (the ordinal of
// CUDA_DEVICE_MEMORY_LIMIT_<i>).
struct ShareDevice {
  std::string uuid;
  uint64_t memory_bytes = 0;  // the share of the (scaled) memory; > 0
  uint32_t cores = 0;         // percent of the GPU's SMs; 0 and 100: no limit
};

struct ContainerShareInput {
  std::span<const ShareDevice> devices;                 // at least one
  const config::DeviceConfig* device_config = nullptr;  // required
  node::ContainerRef ref;                               // names the directory and the limits file
  std::string_view hook_path = node::kDefaultHookPath;
  Broker broker = Broker::kDisabled;
  std::string_view lock_host_dir = node::kLockDir;
  std::string_view broker_host_dir = node::kBrokerHostDir;
  LimitsFile limits_file = LimitsFile::kWrite;
  Preload preload = Preload::kMount;
  // The container's own CUDA_TASK_PRIORITY and GPU_CORE_UTILIZATION_POLICY, already checked.
  std::optional<int32_t> task_priority;
  std::optional<limits::CorePolicy> core_policy;
};

struct ContainerShare {
  ContainerResponse response;         // env and mounts
  std::string container_dir;          // host directory to recreate
  std::string limits_path;            // host limits file to publish; empty in env mode
  std::vector<limits::Entry> limits;  // its entries (without HAMI_LIMITS_FORMAT)
};

// The share, as the device plugin's Allocate answers a container in hami-core mode:
//   env     CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m per device (the device part of
//           SplitScaledShare), CUDA_DEVICE_SM_LIMIT=<cores of the first device>,
//           CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache,
//           with deviceMemoryScaling > 1 CUDA_OVERSUBSCRIBE=true and
//           CUDA_OVERSUBSCRIBE_HOST_LIMIT=<the host parts added up>,
//           LIBCUDA_LOG_LEVEL when libCudaLogLevel is not 2, GPU_CORE_UTILIZATION_POLICY (the
//           container's own, else gpuCorePolicy when not `default`; `disable` when
//           disableCoreLimit), CUDA_TASK_PRIORITY (the container's own),
//           LIBVGPU_HOSTPID_BROKER=1 when the broker is enabled,
//           NVIDIA_VISIBLE_DEVICES=<the UUIDs, each once, comma-separated>;
//   mounts  <dir> -> /usr/local/vgpu rw, <hook>/vgpu/libvgpu.so ro, the lock directory rw
//           (and the broker directory ro), <hook>/vgpu/ld.so.preload ro (Preload::kMount),
//           <limits file> -> /overrideEnv ro (LimitsFile::kWrite), in the order
//           ReconcileLockMounts gives;
//   limits  all of the env but NVIDIA_VISIBLE_DEVICES.
// Errors: no devices, a device without memory (0 would be no limit), a scaling that leaves no
// device memory, a name that cannot be a path component (node::ContainerDir's message), an
// entry the limits file cannot hold.
Result<ContainerShare> BuildContainerShare(const ContainerShareInput& input);

// ---- I/O ----

// Removes `dir` (not following symlinks) and makes it again, mode 0777 whatever the umask, its
// parents 0755 where missing.
Status RecreateContainerDirectory(const std::string& dir);

// The files that hold a container to its limits must be files when the runtime binds them:
// containerd makes a missing bind source an empty directory, and a container whose
// /etc/ld.so.preload is a directory runs without libvgpu. Checks the host side of the mounts
// of libvgpu.so, /etc/ld.so.preload and /overrideEnv in `response`; kNotFound names the path,
// `whose` ("container main of pod default/p") and the daemon to restart.
Status CheckHookFiles(const ContainerResponse& response, std::string_view whose,
                      std::string_view daemon);

// What every container's mounts bind from the hook path, installed by the daemon at its start:
// <hook>/vgpu/, <hook>/vgpu/containers/ (directories, 0755, made when missing),
// <hook>/vgpu/libvgpu.so (a copy of `vgpu_library`, 0755; empty: one must be there already) and
// <hook>/vgpu/ld.so.preload (the library's path in the container, 0644). Each file is written
// to a temporary file beside it, fsync'd and renamed over it, so that a container being created
// at the same time maps the old file or the new one, never a part.
Status InstallHookFiles(const std::string& hook_path, const std::string& vgpu_library);

}  // namespace hami::plugin
