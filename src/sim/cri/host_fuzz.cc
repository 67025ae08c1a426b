// Fuzzes the readers of the kernel's /proc text that Containerd::Stop relies on: mountinfo and
// /proc/<pid>/cgroup. None may crash; what they accept must hold what the contract promises.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sim/cri/host.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto mounts = hami::sim::cri::ParseMountInfo(text, "fuzz");
  if (mounts.ok()) {
    for (const auto& m : *mounts) {
      if (m.mount_point.empty() || m.mount_point[0] != '/' || m.root.empty()) std::abort();
    }
  }
  auto cgroups = hami::sim::cri::ParseProcCgroup(text, "fuzz");
  if (cgroups.ok()) {
    for (const auto& c : *cgroups) {
      if (c.path.empty() || c.path[0] != '/' || c.hierarchy_id < 0) std::abort();
    }
    if (mounts.ok()) {
      for (const auto& d : hami::sim::cri::CgroupDirsOf(*cgroups, *mounts)) {
        if (d.dir.rfind(d.hierarchy, 0) != 0) std::abort();
      }
    }
  }
  return 0;
}
