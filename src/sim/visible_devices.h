// CUDA_VISIBLE_DEVICES as the simulated driver reads it.
//
// The simulator's own reading of NVIDIA's documented rules (CUDA Programming Guide, "CUDA
// Environment Variables"; MPS and MIG user guides), written apart from the product's parser
// (common/visible_devices.h) on purpose: the simulator is the product's oracle, and a
// misreading shared by both would pass every test. This file must not include or link it.
//
//   unset                  every device, in enumeration order
//   set and empty          no device
//   otherwise              a comma-separated list; the devices it names are visible, in the
//                          list's order, up to the first entry that names no device
//
// An entry is one of:
//   - a decimal index of a device ("0", "2"; "01" is index 1). Anything else made of digits
//     and signs ("-1", "+1", "1gpu") names no device.
//   - "GPU-" followed by a device's UUID as nvidia-smi -L prints it (lower-case hex), or by
//     enough of its beginning to match exactly one device. "GPU-" alone matches nothing.
//   - a MIG device, "MIG-<uuid>" or "MIG-GPU-<uuid>/<gpu instance>/<compute instance>". The
//     simulator models no MIG (every device runs with MIG off), so such an entry names no
//     device and ends the list like any other unknown device.
// Blanks (space, tab) around an entry are ignored. An entry that names no device (empty,
// unknown index, UUID of no device, ambiguous prefix, MIG device, anything else) ends the
// list: devices named before it stay visible, none after it. An entry naming a device already
// listed also ends the list there.
//
// A process that has the device nodes of only some devices (sim/device_nodes.h) applies the
// variable over those alone, as the driver does in a container: indices count within them,
// and the UUID of any other device names no device (kNoSuchUuid).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/profiles.h"

namespace hami::sim {

// Why an entry ended the list.
enum class VisibleStop {
  kEmptyEntry,     // nothing between two commas, or after the last one
  kNoSuchIndex,    // a decimal index of no device
  kNoSuchUuid,     // "GPU-..." that begins no device's UUID
  kAmbiguousUuid,  // "GPU-..." that begins more than one device's UUID
  kMigDevice,      // "MIG-...": the simulator models no MIG
  kRepeated,       // a device the list already named
  kNotADevice,     // neither an index nor a UUID
};

// A phrase for logs: "names no device (unknown index)", ...
std::string_view VisibleStopText(VisibleStop reason);

struct VisibleDevices {
  std::vector<int> physical;  // CUDA ordinal -> physical index (DeviceSpec::index order)
  struct Stop {
    std::string entry;  // the entry that ended the list, blanks around it removed
    VisibleStop reason;
  };
  std::optional<Stop> stopped;  // set when an entry ended the list
};

// `value`: the variable's value, nullopt when unset. `devices`: the machine in enumeration
// order.
VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   std::span<const DeviceSpec> devices);

// The same over the devices of `devices` whose nodes the process has (`accessible`: physical
// indices, in enumeration order). `physical` still holds physical indices.
VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   std::span<const DeviceSpec> devices,
                                   std::span<const int> accessible);

}  // namespace hami::sim
