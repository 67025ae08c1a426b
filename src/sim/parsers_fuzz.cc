// Fuzzes the simulated GPU's parsers of outside input: the device list (HAMI_SIM_PROFILE),
// CUDA_VISIBLE_DEVICES, the device-nodes file, module manifests and the procfs texts it reads. None
// may crash; what they accept must be self-consistent.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "sim/device_nodes.h"
#include "sim/manifest.h"
#include "sim/procfs.h"
#include "sim/profiles.h"
#include "sim/visible_devices.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto devices = hami::sim::ParseProfileSpec(text, "fuzz");
  if (devices.ok() && devices->size() > size_t(hami::sim::kMaxDevices)) std::abort();
  static const auto machine = *hami::sim::ParseProfileSpec("h100-80g:3,a100-40g", "");
  hami::sim::VisibleDevices v = hami::sim::ParseVisibleDevices(text, machine);
  for (int p : v.physical) {
    if (p < 0 || p >= int(machine.size())) std::abort();
  }
  static const std::vector<int> accessible = {1, 3};
  v = hami::sim::ParseVisibleDevices(text, machine, accessible);
  for (int p : v.physical) {
    if (p != 1 && p != 3) std::abort();
  }
  auto nodes = hami::sim::ParseDeviceNodes(text, machine, "fuzz");
  if (nodes.ok()) {
    for (size_t i = 0; i < nodes->size(); ++i) {
      const int p = (*nodes)[i];
      if (p < 0 || p >= int(machine.size()) || (i > 0 && p <= (*nodes)[i - 1])) std::abort();
    }
  }
  auto manifest = hami::sim::ParseManifest(text);
  if (manifest.ok()) {
    for (const auto& [name, bytes] : manifest->globals) {
      if (bytes == 0 || name.empty()) std::abort();
    }
  }
  for (pid_t pid : hami::sim::procfs::ParseStatusPids(text, "NStgid")) {
    if (pid <= 0) std::abort();
  }
  (void)hami::sim::procfs::ParsePidNsLink(text);
  (void)hami::sim::procfs::ParseStatusParent(text);
  (void)hami::sim::procfs::ParseStatStartTicks(text);
  return 0;
}
