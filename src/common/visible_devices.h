// CUDA_VISIBLE_DEVICES as the NVIDIA driver reads it: a comma-separated list of device
// indices or UUIDs ("GPU-" followed by the UUID or a unique prefix of it), in any order.
// The list ends at the first entry that names no device, is ambiguous, or repeats one;
// devices listed after it are not visible. Unset: every device; empty: none.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hami {

struct VisibleDevices {
  std::vector<int> physical;  // CUDA ordinal -> index in `uuids`
  // The entry that ended the list ("" for an empty entry), when one did.
  std::optional<std::string> stopped_at;
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML and nvidia-smi print the 16 bytes of a
// device UUID (CUuuid::bytes).
std::string GpuUuidText(const void* bytes16);

// `uuids`: the devices in the driver's enumeration order, "GPU-..." each.
VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   const std::vector<std::string>& uuids);

}  // namespace hami
