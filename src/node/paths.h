// Every path on a GPU node that more than one component agrees on, in one place: the
// interposer (libvgpu.so), the device plugin, the monitor, the broker and `hami run` all take
// them from here. The values are HAMi's contracts (docs/design.md, "Contracts kept from
// HAMi"); changing one breaks compatibility with HAMi-core and HAMi's plugin.
//
// Two sides of a node:
//   the host     <hook path>/vgpu/containers/<podUID>_<container>/usage.cache   (the region)
//                <hook path>/vgpu/containers/<podUID>_<container>/pod.json      (node/pod_record.h)
//                <hook path>/vgpu/containers/<podUID>_<container>.limits        (limits file)
//                <hook path>/vgpu/containers/<claimUID>_claim(.limits|.claim)  (a DRA claim's
//                                                 directory, limits file and claim record:
//                                                 node/claim_record.h)
//                /var/run/hami/hostpid/broker.sock                  (the host-PID broker)
//   a container  /overrideEnv                    (the limits file, bound read-only)
//                /tmp/vgpulock                   (root-owned, 01777: node-wide locks)
//                /tmp/vgpulock/probe.lock        (the NVML identity probe's lock)
//                /tmp/vgpulock/hostpid/broker.sock  (the broker's directory, bound read-only)
//                /tmp/cudevshr.cache             (the region when nothing names one)
//
// The limits file sits beside the container's directory, never inside it: the directory is
// mounted read-write into the container, and a read-only bind mount protects only its own
// mount point (seed 003).
//
// The constants are usable in constant expressions and from code built without exceptions
// (libvgpu.so); the functions allocate and are thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::node {

// ---- inside every container (and on the host, where the plugin prepares them) ----

// Compiled into libvgpu.so and never taken from a variable: a login session (SSH, su -,
// cron) loses its variables, and the limits must survive that.
inline constexpr char kLimitsFilePath[] = "/overrideEnv";

// The region every process of a container maps when no CUDA_DEVICE_MEMORY_SHARED_CACHE says
// otherwise (HAMi-core's default).
inline constexpr char kDefaultSharedCache[] = "/tmp/cudevshr.cache";

// The node-wide lock directory: root-owned, mode 01777, made without following symlinks
// (broker/node_prep.h does it); shared by every container through a host mount.
inline constexpr char kLockDirParent[] = "/tmp";
inline constexpr char kLockDirName[] = "vgpulock";
inline constexpr char kLockDir[] = "/tmp/vgpulock";
inline constexpr mode_t kLockDirMode = 01777;

// The OFD-locked file that serializes NVML identity probes across the node.
inline constexpr char kProbeLockPath[] = "/tmp/vgpulock/probe.lock";

// ---- the host-PID broker ----

inline constexpr char kBrokerSocketName[] = "broker.sock";
// Where the device plugin serves, on the host.
inline constexpr char kBrokerHostDir[] = "/var/run/hami/hostpid";
inline constexpr char kBrokerHostSocket[] = "/var/run/hami/hostpid/broker.sock";
// Where a workload reaches it: kBrokerHostDir bound read-only here.
inline constexpr char kBrokerContainerDir[] = "/tmp/vgpulock/hostpid";
inline constexpr char kBrokerContainerSocket[] = "/tmp/vgpulock/hostpid/broker.sock";

// ---- the host layout the device plugin writes and the monitor scans ----

// HAMi's default hook path (the plugin's --hook-path / HOOK_PATH): the host directory whose
// vgpu/ holds libvgpu.so, ld.so.preload and containers/, so that with the default the
// layout is /usr/local/vgpu/containers/<podUID>_<container>, as HAMi's chart has it.
inline constexpr char kDefaultHookPath[] = "/usr/local";
// Below the hook path: one directory per container, and one limits file beside each.
inline constexpr char kContainersSubdir[] = "vgpu/containers";
inline constexpr char kRegionFileName[] = "usage.cache";
inline constexpr char kLimitsFileSuffix[] = ".limits";

namespace internal {
// Whether `whole` is `dir` + "/" + `name`.
constexpr bool IsJoin(std::string_view whole, std::string_view dir, std::string_view name) {
  return whole.size() == dir.size() + 1 + name.size() && whole.substr(0, dir.size()) == dir &&
         whole[dir.size()] == '/' && whole.substr(dir.size() + 1) == name;
}
}  // namespace internal

// The composite paths are spelled out (so they read as the contract), and checked here
// against their parts.
static_assert(internal::IsJoin(kLockDir, kLockDirParent, kLockDirName));
static_assert(internal::IsJoin(kProbeLockPath, kLockDir, "probe.lock"));
static_assert(internal::IsJoin(kBrokerContainerDir, kLockDir, "hostpid"));
static_assert(internal::IsJoin(kBrokerContainerSocket, kBrokerContainerDir, kBrokerSocketName));
static_assert(internal::IsJoin(kBrokerHostSocket, kBrokerHostDir, kBrokerSocketName));

// Checks one name that becomes part of a host path (a pod UID, a container name): it must be
// non-empty, hold no '/', no "..", no control character (0x00-0x1f, 0x7f), and not be ".".
// The error (kInvalidArgument) names `what` and the value and says what is wrong:
//   container name 'a/b': contains '/'
Status ValidatePathComponent(std::string_view what, std::string_view value);

// A container on the host, as the device plugin names it: the pod's UID and the container's
// name. Both are validated by every function below.
struct ContainerRef {
  std::string_view pod_uid;
  std::string_view container;
};

// <hook_path>/vgpu/containers/<podUID>_<container>: the container's directory (mounted
// read-write into it). `hook_path` must be absolute, with no ".." and no control character;
// a trailing '/' is dropped.
Result<std::string> ContainerDir(std::string_view hook_path, const ContainerRef& ref);
// <ContainerDir>/usage.cache: the container's shared region.
Result<std::string> ContainerRegionPath(std::string_view hook_path, const ContainerRef& ref);
// <hook_path>/vgpu/containers/<podUID>_<container>.limits: its limits file, beside the
// directory (bound read-only at kLimitsFilePath).
Result<std::string> ContainerLimitsPath(std::string_view hook_path, const ContainerRef& ref);

}  // namespace hami::node
