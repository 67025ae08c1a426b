// CUDA_VISIBLE_DEVICES over a simulated machine's devices (common/visible_devices.h).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "common/visible_devices.h"
#include "sim/profiles.h"

namespace hami::sim {

using hami::VisibleDevices;

VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   const std::vector<DeviceSpec>& devices);

}  // namespace hami::sim
