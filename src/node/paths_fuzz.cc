// Fuzzes the host layout's name validation (node/paths.h): whatever the hook path, pod UID
// and container name, a path is either refused or stays below the hook path's containers
// directory, with no "..", no control character and exactly the parts given.
//
// Input: hook path, pod UID and container name separated by 0xFF bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "node/paths.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

bool HasControl(std::string_view s) {
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view parts[3];
  for (int i = 0; i < 3; ++i) {
    size_t cut = std::min(input.find('\xff'), input.size());
    parts[i] = input.substr(0, cut);
    input.remove_prefix(std::min(cut + 1, input.size()));
  }
  const hami::node::ContainerRef ref{parts[1], parts[2]};
  auto dir = hami::node::ContainerDir(parts[0], ref);
  auto region = hami::node::ContainerRegionPath(parts[0], ref);
  auto limits = hami::node::ContainerLimitsPath(parts[0], ref);
  Check(dir.ok() == region.ok() && dir.ok() == limits.ok());
  if (!dir.ok()) {
    Check(!dir.error().message().empty());
    return 0;
  }
  const std::string& d = *dir;
  Check(!d.empty() && d[0] == '/');
  Check(d.find("..") == std::string::npos && !HasControl(d));
  const std::string tail =
      "/vgpu/containers/" + std::string(parts[1]) + "_" + std::string(parts[2]);
  Check(d.size() >= tail.size() && d.compare(d.size() - tail.size(), tail.size(), tail) == 0);
  Check(*region == d + "/usage.cache");
  Check(*limits == d + ".limits");
  Check(hami::node::ValidatePathComponent("pod UID", parts[1]).ok());
  Check(hami::node::ValidatePathComponent("container name", parts[2]).ok());
  return 0;
}
