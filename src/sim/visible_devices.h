// CUDA_VISIBLE_DEVICES as the NVIDIA driver reads it: a comma-separated list of device
// indices or UUIDs ("GPU-" followed by the UUID or a unique prefix of it), in any order.
// The list ends at the first entry that names no device, is ambiguous, or repeats one;
// devices listed after it are not visible. Unset: every device; empty: none.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/profiles.h"

namespace hami::sim {

struct VisibleDevices {
  std::vector<int> physical;  // CUDA ordinal -> physical index
  // The entry that ended the list ("" for an empty entry), when one did.
  std::optional<std::string> stopped_at;
};

VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   const std::vector<DeviceSpec>& devices);

}  // namespace hami::sim
