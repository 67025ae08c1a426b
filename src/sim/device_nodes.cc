#include "sim/device_nodes.h"

#include <algorithm>
#include <cerrno>

#include "common/file.h"

namespace hami::sim {

namespace {

constexpr size_t kMaxFileBytes = 64 << 10;
constexpr size_t kShownLineBytes = 64;

// "GPU-" and 8-4-4-4-12 lower-case hex digits.
bool IsUuidText(std::string_view s) {
  constexpr std::string_view kShape = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  if (s.size() != kShape.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (kShape[i] != 'x') {
      if (c != kShape[i]) return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

// The line as a log shows it: at most kShownLineBytes, other bytes than printable ASCII as '?'.
std::string Shown(std::string_view line) {
  std::string out;
  for (char c : line.substr(0, kShownLineBytes)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (line.size() > kShownLineBytes) out += "...";
  return out;
}

Error LineError(std::string_view path, size_t number, std::string_view line) {
  std::string why;
  if (line.empty()) {
    why = "is empty";
  } else if (IsUuidText(line)) {
    why = "'" + Shown(line) + "' is the UUID of no GPU of this machine";
  } else {
    why = "'" + Shown(line) +
          "' is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, lower-case hex)";
  }
  return Error(ErrorCode::kInvalidArgument,
               std::string(path) + ": line " + std::to_string(number) + " " + why);
}

}  // namespace

Result<std::vector<int>> ParseDeviceNodes(std::string_view text,
                                          std::span<const DeviceSpec> devices,
                                          std::string_view path) {
  std::vector<bool> listed(devices.size(), false);
  size_t number = 0;
  while (!text.empty()) {
    ++number;
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    auto it = std::find_if(devices.begin(), devices.end(),
                           [line](const DeviceSpec& d) { return d.uuid == line; });
    if (line.empty() || it == devices.end()) return LineError(path, number, line);
    listed[size_t(it - devices.begin())] = true;
  }
  std::vector<int> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (listed[i]) out.push_back(int(i));
  }
  return out;
}

Result<std::vector<int>> ReadDeviceNodes(const std::string& path,
                                         std::span<const DeviceSpec> devices) {
  Result<std::string> text = ReadFileToString(path, kMaxFileBytes, Symlinks::kFollow);
  if (!text.ok()) {
    if (text.error().sys_errno() == ENOENT) {
      std::vector<int> every(devices.size());
      for (size_t i = 0; i < devices.size(); ++i) every[i] = int(i);
      return every;
    }
    return text.error();
  }
  return ParseDeviceNodes(*text, devices, path);
}

std::string DeviceNodesText(std::span<const std::string> uuids) {
  std::string out;
  for (const std::string& u : uuids) out += u + "\n";
  return out;
}

}  // namespace hami::sim
