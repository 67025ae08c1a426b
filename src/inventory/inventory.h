// The GPUs of this machine, as NVML lists them: the one way `hami run`, the device plugin and
// the monitor learn devices. Nothing here knows about the simulated GPU: on a machine
// without a driver the simulated libnvidia-ml.so.1 answers, found as the loader finds any
// library (LD_LIBRARY_PATH pointing at build/lib/sim, as `hami run` arranges for its
// commands), or named by path in Options.
//
// What is read, per device (NVML index order, which is PCI bus order):
//   UUID, name, total memory, compute capability, PCI bus id   NVML (required)
//   NUMA node     nvmlDeviceGetNumaNodeId, else /sys/bus/pci/devices/<bus id>/numa_node
//   MIG mode      nvmlDeviceGetMigMode (NOT_SUPPORTED: the device cannot do MIG)
//   SM count      the CUDA driver's CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, matched by
//                 UUID. NVML has no SM count for a whole GPU (nvmlDeviceGetAttributes serves
//                 MIG devices only), so the inventory also opens libcuda.so.1 when
//                 Options.cuda_library is set; without it, or for a device CUDA does not
//                 show (CUDA_VISIBLE_DEVICES in this process), sm_count is 0 (unknown).
// A device whose required queries fail is listed unhealthy with the first failure as the
// reason ("nvmlDeviceGetMemoryInfo: GPU is lost"); the other devices are unaffected. An
// optional query that is not supported is not a failure.
//
// Libraries are opened RTLD_LOCAL, NVML through its one loader (nvml_library.h). NVML is shut
// down before ReadInventory returns; both stay loaded (RTLD_NODELETE): what NVML's constructors
// allocated is reachable only from its own data, and once cuInit ran the CUDA driver's threads
// may run its code. Calls are typed through decltype of the declarations in nvml/nvml.h and
// cuda.h.
// Thread-safe as far as NVML is (nvmlInit/nvmlShutdown are reference-counted); not for libvgpu.so
// (it allocates and calls dlopen).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace hami::inventory {

enum class MigMode { kUnsupported, kDisabled, kEnabled };
const char* MigModeName(MigMode mode);  // "unsupported", "disabled", "enabled"

struct Device {
  int index = -1;             // NVML index
  std::string uuid;           // "GPU-8f6b..."; empty when it could not be read
  std::string name;           // "NVIDIA H100 80GB HBM3"
  uint64_t memory_bytes = 0;  // total device memory
  int sm_count = 0;           // multiprocessors; 0: unknown
  int cc_major = 0, cc_minor = 0;
  std::string pci_bus_id;                    // "00000000:3B:00.0", as NVML prints it
  int numa_node = -1;                        // -1: none or unknown
  MigMode mig_mode = MigMode::kUnsupported;  // the current mode
  bool healthy = true;
  std::string health_reason;  // why not healthy; empty when healthy
};

// Health by GPU UUID, as the health watcher (health.h) reports it: true is healthy.
using HealthMap = std::map<std::string, bool>;

struct Inventory {
  std::string nvml_library;    // the file the loader opened (realpath), for provenance
  std::string driver_version;  // nvmlSystemGetDriverVersion; empty when not available
  std::vector<Device> devices;
};

struct Options {
  // dlopen()ed as given: a soname is searched as the loader searches; a path is opened as is.
  std::string nvml_library = "libnvidia-ml.so.1";
  // For SM counts; empty: not opened (sm_count stays 0, and cuInit is never called).
  std::string cuda_library = "libcuda.so.1";
  // Root of sysfs, for the NUMA fallback (tests point it at a fake tree).
  std::string sysfs_root = "/sys";
};

// Reads every device. Fails only when there is no inventory at all: NVML cannot be opened
// (kNotFound, with the loader's message), lacks a required function (kIncompatible), or
// nvmlInit / nvmlDeviceGetCount fail (kUnavailable, with NVML's error string).
Result<Inventory> ReadInventory(const Options& options = {});

// The UUIDs of `inventory`'s devices in index order (empty strings for unreadable ones).
std::vector<std::string> Uuids(const Inventory& inventory);

}  // namespace hami::inventory
