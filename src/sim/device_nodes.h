// The simulated GPU's stand-in for device nodes: which GPUs of the machine a process can
// open. A mechanism of the simulator alone.
//
// On a real node the NVIDIA container toolkit gives a container only the device nodes
// (/dev/nvidiaN) of its GPUs, so every process in it, whatever its environment, sees only
// those through CUDA and NVML. The simulated GPU has no device nodes; the simulated node's
// toolkit stand-in (sim/cluster/gpu_toolkit.h) bind-mounts instead, read-only, a file listing
// the container's GPUs at a fixed path (HAMI_SIM_DEVICE_NODES, kDefaultDeviceNodesPath by
// default). A process on the host has no such file and has every device, as today.
//
// The file: one GPU UUID per line, as nvidia-smi -L prints it ("GPU-" and 8-4-4-4-12
// lower-case hex digits), each the UUID of a device of this machine, each line ended by '\n'
// (the last one's may be missing). Nothing else: no blanks, no comments, no empty line, no
// index, no prefix of a UUID. A UUID listed twice is one device. An empty file: no device.
//
// What the process sees, when the file exists:
//   CUDA  the listed devices, in the machine's enumeration order (not the file's), renumbered
//         from 0; CUDA_VISIBLE_DEVICES then applies over that set (sim/visible_devices.h):
//         its indices count within it, and the UUID of a device not listed names no device.
//   NVML  the listed devices only, in the machine's order, indexed from 0: nvmlDeviceGetCount,
//         handles by index, UUID, PCI bus id and serial, nvmlDeviceGetIndex. A device not
//         listed is not found (NVML_ERROR_NOT_FOUND), as real NVML ignores GPUs it cannot
//         open. Its minor number stays the machine's (the node /dev/nvidiaN keeps N).
// A file that cannot be read, or a line that is not the UUID of a device of this machine,
// fails closed: an error naming the file (and the line), and the process sees no device.
//
// Thread safety: pure functions, but for ReadDeviceNodes, which reads one file.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sim/profiles.h"

namespace hami::sim {

// Where the toolkit stand-in mounts a container's file (HAMI_SIM_DEVICE_NODES' default).
inline constexpr char kDefaultDeviceNodesPath[] = "/run/hami-sim/device-nodes";

// The physical indices of the devices `text` (the file at `path`) lists, in `devices`' order.
// kInvalidArgument naming `path`, the line's number and its text for a line that is not the
// UUID of one of `devices`.
Result<std::vector<int>> ParseDeviceNodes(std::string_view text,
                                          std::span<const DeviceSpec> devices,
                                          std::string_view path);

// The devices a process has the device nodes of: every device when no file is at `path`
// (ENOENT), else the devices the file lists (ParseDeviceNodes). An error names the file: one
// that cannot be read (a directory, no permission, larger than 64 KiB) or is malformed.
Result<std::vector<int>> ReadDeviceNodes(const std::string& path,
                                         std::span<const DeviceSpec> devices);

// The file's text for `uuids`, one per line (what the toolkit stand-in writes).
std::string DeviceNodesText(std::span<const std::string> uuids);

}  // namespace hami::sim
