#include "sim/visible_devices.h"

#include <string>

namespace hami::sim {

VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   const std::vector<DeviceSpec>& devices) {
  std::vector<std::string> uuids;
  for (const DeviceSpec& d : devices) uuids.push_back(d.uuid);
  return hami::ParseVisibleDevices(value, uuids);
}

}  // namespace hami::sim
