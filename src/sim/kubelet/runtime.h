// The simulated container runtime: applies a device plugin's Allocate answer, as the simulated
// kubelet read it (kubelet::ContainerAllocation, sim/kubelet/types.h), for real and runs a command
// in the resulting "container", as containerd with runc and the NVIDIA container toolkit would.
// Test and demo infrastructure.
//
// A container is a private mount namespace (and, by default, a private PID namespace) whose
// root is an overlay of the host's root filesystem: the lower layer is the host's "/" (its
// root filesystem only, not the filesystems mounted below it), the upper layer a tmpfs that
// lives as long as the container. Whatever the container writes outside its mounts, and
// every mount point the runtime creates, lands in that upper layer: the host's files are never
// changed (no /overrideEnv, no /etc/ld.so.preload appears on the host). Inside, in this order:
//   /dev, /sys     the host's, bound recursively
//   /tmp           a tmpfs of the container's own (mode 01777)
//   /proc          a fresh procfs of the container's PID namespace
//   response.mounts, in the order listed (a parent before a mount nested in it, seed 000),
//                  each bound recursively, read-only when asked (EROFS inside)
//   response.devices, each host node bound at its container path (permissions not enforced)
//   host_mounts    what the caller adds, in order (the toolkit's /dev/nvidia*, a build dir)
//   driver_libs    each host file bound read-only at kDriverLibDir/<file name>, so a process
//                  started with an empty environment (su -, SSH, env -i) finds libcuda.so.1
//                  and libnvidia-ml.so.1 in the loader's default directory
//   sim_state      the simulated GPU's state file bound at kSimStatePath (its default path),
//                  and its host-PID resolver directory (<state>.hostpid) when that exists
// A mount point that does not exist is created (a directory or an empty file, as the source
// is), with its missing parents. It is created in the upper layer, or, when it lies inside an
// earlier mount, in that mount's source on the host, as runc does (e.g. /tmp/vgpulock/hostpid
// in the host's /tmp/vgpulock). Mount points are resolved inside the container's root, so a
// symbolic link in the image cannot point a mount at the host.
//
// The command's environment is exactly image_env plus response.envs (a response value wins
// over the image's). argv[0] without a '/' is searched in that environment's PATH inside the
// container. Its standard descriptors are the caller's unless stdin_fd/stdout_fd/stderr_fd
// name others.
//
// Processes: the caller forks a shim (as containerd-shim), which enters or makes the
// namespaces and forks the command's process. The shim dies with the thread that started it
// (PR_SET_PDEATHSIG: start containers from a thread that outlives them), and the command's
// process dies with the shim. With PidNamespace::kPrivate the command is PID 1 of its
// namespace: only signals it has a handler for reach it from outside, SIGKILL always does.
//
// Failures: every setup step in the children is reported back with the step, the mount it
// was at and the errno ("container: mount 3 (/var/run/hami/hostpid on /tmp/vgpulock/hostpid, ro):
// binding: No such file or directory"); the host paths are checked before the fork, so a
// missing one names its mount at once. The children run only async-signal-safe calls (the
// caller may have threads).
//
// Needs effective UID 0 (mount namespaces, overlayfs, pivot_root); refuses otherwise.
//
// Thread safety: Container and Process may be used from one thread at a time each; distinct
// objects are independent.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "sim/kubelet/types.h"

namespace hami::sim::runtime {

// Where the driver's libraries are found by a process with no LD_LIBRARY_PATH (the loader's
// default directory on Debian and Ubuntu x86-64), and where the simulated GPU's state file is
// looked for when HAMI_SIM_STATE is not set.
inline constexpr char kDriverLibDir[] = "/usr/lib/x86_64-linux-gnu";
inline constexpr char kSimStatePath[] = "/tmp/hami-sim.state";

using Env = std::map<std::string, std::string>;

enum class PidNamespace {
  kPrivate,  // the container's own, as a pod's (the command is PID 1)
  kHost,     // the host's (hostPID: true)
};

struct ContainerSpec {
  kubelet::ContainerAllocation response;  // envs, mounts (in order), devices; the rest unused
  std::vector<std::string> command;       // argv, not empty
  Env image_env;                          // the image's variables (PATH, HOME, ...)
  std::string working_dir = "/";          // inside the container
  PidNamespace pid_namespace = PidNamespace::kPrivate;
  std::vector<kubelet::Mount> host_mounts;  // added after the response's mounts and devices
  std::vector<std::string> driver_libs;     // host files, bound read-only into kDriverLibDir
  std::string sim_state;                    // host state file bound at kSimStatePath; "": none
  int stdin_fd = -1;                        // -1: the caller's
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// A second process run inside a running container (`kubectl exec`): it joins the container's
// mount namespace (its root is the container's) and PID namespace.
struct ExecSpec {
  std::vector<std::string> command;  // argv, not empty; searched in env's PATH without a '/'
  std::optional<Env> env;            // nullopt: the container's environment; {}: empty
  std::string working_dir = "/";
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

namespace internal {
struct Spawner;  // runtime.cc: makes Process and Container objects
}  // namespace internal

// One process started by the runtime, with the shim that waits for it.
class Process {
 public:
  ~Process();  // kills the process (SIGKILL) and its shim unless they have ended, and reaps
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // The process's PID in the host's PID namespace (in the caller's).
  pid_t pid() const { return pid_; }
  // Blocks until the process ends: its exit status, or 128 + the signal that ended it. Once
  // ended, returns the same status again.
  Result<int> Wait();
  // Sends `signal` to the process, through a pidfd (never to a reused PID; see the note on
  // PID 1 above). A process that has ended: OK, nothing sent.
  Status Kill(int signal);

 private:
  friend struct internal::Spawner;
  Process() = default;
  pid_t shim_ = -1;  // the caller's child; reaped by Wait or the destructor
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd report_;  // the shim's report socket; the last report carries the wait status
  std::optional<int> status_;
};

// A running container: its first process (the command) and what Exec needs to join it.
class Container {
 public:
  // Kills the command (SIGKILL) unless it has ended. With PidNamespace::kPrivate that ends
  // every process of the container; with kHost, exec'd processes live on until their own
  // Process objects go.
  ~Container() = default;
  Container(const Container&) = delete;
  Container& operator=(const Container&) = delete;

  Process& init() { return *init_; }
  pid_t pid() const { return init_->pid(); }
  // The command's environment (image_env plus the response's envs).
  const Env& env() const { return env_; }

  // Starts a second process inside the container; returns once it runs (its program was
  // executed) or with the step that failed. The container must still be running.
  Result<std::unique_ptr<Process>> StartExec(const ExecSpec& spec);
  // StartExec, then Wait.
  Result<int> Exec(const ExecSpec& spec);

 private:
  friend struct internal::Spawner;
  Container() = default;
  std::unique_ptr<Process> init_;
  Env env_;
};

// The command's environment for `spec`: image_env, then response.envs over it.
Env ContainerEnv(const ContainerSpec& spec);

// Creates the container and starts its command; returns once the command runs (its program
// was executed), or with the failed step. Checks first (kInvalidArgument / kNotFound naming
// the entry): a non-empty command, absolute container paths without "..", existing host paths
// (and regular driver libraries and state file).
Result<std::unique_ptr<Container>> StartContainer(const ContainerSpec& spec);

// StartContainer, then waits for the command: its exit status (128 + signal when a signal
// ended it).
Result<int> RunContainer(const ContainerSpec& spec);

}  // namespace hami::sim::runtime
