// The simulated GPU's device models: one named profile table, and the parser for the
// device list a user asks for (HAMI_SIM_PROFILE, `hami run --sim`).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami::sim {

inline constexpr int kMaxDevices = 16;
inline constexpr std::string_view kDefaultProfileSpec = "h100-80g:2";

// One GPU model. Numbers are those the real product reports (nvidia-smi, device queries);
// context_mib and reserved_mib are typical driver overheads.
struct DeviceProfile {
  std::string_view key;   // "h100-80g"
  std::string_view name;  // "NVIDIA H100 80GB HBM3"
  uint64_t memory_mib;    // total, as nvidia-smi shows it
  uint64_t reserved_mib;  // held by the driver, never allocatable
  uint64_t context_mib;   // device memory a CUDA context costs
  int sm_count;
  int max_threads_per_sm;
  int max_blocks_per_sm;
  int cc_major, cc_minor;
  int clock_mhz, memory_clock_mhz, memory_bus_width;
  int l2_bytes;
  int shared_mem_per_sm, shared_mem_per_block_optin;
  int cores_per_sm;
  int nvml_architecture;   // nvmlDeviceArchitecture_t
  uint32_t pci_device_id;  // (device << 16) | 0x10de
  int power_limit_w;
  int pcie_gen, pcie_width;
  // The GPUs of a board meet on NVLink switches (an HGX/DGX board): the driver offers
  // multicast objects (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED).
  bool nvlink_switch;
};

std::span<const DeviceProfile> Profiles();
const DeviceProfile* FindProfile(std::string_view key);

// One device of a simulated machine: its model plus what makes it this device.
struct DeviceSpec {
  const DeviceProfile* profile;
  int index;         // physical (NVML) index
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  uint8_t uuid_bytes[16];
  std::string pci_bus_id;  // "00000000:19:00.0"
  int pci_domain, pci_bus, pci_device;
  int numa_node;
  uint64_t total_bytes() const { return profile->memory_mib << 20; }
  uint64_t reserved_bytes() const { return profile->reserved_mib << 20; }
  // What processes can allocate: total minus the driver's reservation.
  uint64_t usable_bytes() const { return total_bytes() - reserved_bytes(); }
};

// Parses "profile[:count][,profile[:count]...]" (e.g. "h100-80g:2", "a100-40g,h100-80g:3")
// or "none" (a machine with the driver but no GPU). At most kMaxDevices devices. `node`
// seeds the UUIDs so that simulated nodes can differ; the same inputs give the same UUIDs.
Result<std::vector<DeviceSpec>> ParseProfileSpec(std::string_view spec, std::string_view node,
                                                 std::string_view what = "HAMI_SIM_PROFILE");

// "GPU-" and the 16 bytes at `bytes16` as 8-4-4-4-12 lower-case hex digits, the form in which
// nvidia-smi -L and NVML print a device UUID (and CUDA_VISIBLE_DEVICES names one). The
// simulator's own formatter: the product has another (common/visible_devices.h), and the
// simulated machine must not take its UUIDs' text from the code it checks.
std::string GpuUuidString(const void* bytes16);

// "a100-40g, a100-80g, ..." for error messages and help.
std::string ProfileKeys();

}  // namespace hami::sim
