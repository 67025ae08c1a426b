#include "sim/visible_devices.h"

#include <algorithm>

namespace hami::sim {

namespace {

constexpr std::string_view kGpuPrefix = "GPU-";
constexpr std::string_view kMigPrefix = "MIG-";

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

struct Match {
  int physical = -1;  // set when exactly one device matched
  VisibleStop failure = VisibleStop::kNotADevice;
};

Match MatchIndex(std::string_view digits, size_t device_count) {
  // Leading zeros do not change the number; a value at or past the device count names no
  // device however long it is, so it is compared digit by digit and never overflows.
  while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
  size_t value = 0;
  for (char c : digits) {
    value = value * 10 + size_t(c - '0');
    if (value >= device_count) return {-1, VisibleStop::kNoSuchIndex};
  }
  return {int(value), VisibleStop::kNotADevice};
}

Match MatchUuid(std::string_view entry, std::span<const DeviceSpec> devices) {
  if (entry.size() == kGpuPrefix.size()) return {-1, VisibleStop::kNoSuchUuid};
  Match m{-1, VisibleStop::kNoSuchUuid};
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!std::string_view(devices[i].uuid).starts_with(entry)) continue;
    if (m.physical != -1) return {-1, VisibleStop::kAmbiguousUuid};
    m.physical = int(i);
  }
  return m;
}

}  // namespace

std::string_view VisibleStopText(VisibleStop reason) {
  switch (reason) {
    case VisibleStop::kEmptyEntry:
      return "is empty";
    case VisibleStop::kNoSuchIndex:
      return "is the index of no device";
    case VisibleStop::kNoSuchUuid:
      return "begins the UUID of no device";
    case VisibleStop::kAmbiguousUuid:
      return "begins the UUID of more than one device";
    case VisibleStop::kMigDevice:
      return "names a MIG device, and the simulated GPUs run with MIG off";
    case VisibleStop::kRepeated:
      return "names a device listed before it";
    case VisibleStop::kNotADevice:
      return "is neither a device index nor a GPU UUID";
  }
  return "is not understood";
}

VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   std::span<const DeviceSpec> devices) {
  VisibleDevices out;
  if (!value.has_value()) {
    for (size_t i = 0; i < devices.size(); ++i) out.physical.push_back(int(i));
    return out;
  }
  if (value->empty()) return out;
  std::string_view rest = *value;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view entry = TrimBlanks(rest.substr(0, comma));
    Match m;
    if (entry.empty()) {
      m.failure = VisibleStop::kEmptyEntry;
    } else if (AllDigits(entry)) {
      m = MatchIndex(entry, devices.size());
    } else if (entry.starts_with(kGpuPrefix)) {
      m = MatchUuid(entry, devices);
    } else if (entry.starts_with(kMigPrefix)) {
      m.failure = VisibleStop::kMigDevice;
    }
    if (m.physical >= 0 &&
        std::find(out.physical.begin(), out.physical.end(), m.physical) != out.physical.end()) {
      m = {-1, VisibleStop::kRepeated};
    }
    if (m.physical < 0) {
      out.stopped = VisibleDevices::Stop{std::string(entry), m.failure};
      return out;
    }
    out.physical.push_back(m.physical);
    if (comma == std::string_view::npos) return out;
    rest.remove_prefix(comma + 1);
  }
}

VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   std::span<const DeviceSpec> devices,
                                   std::span<const int> accessible) {
  std::vector<DeviceSpec> own;
  for (int p : accessible) own.push_back(devices[size_t(p)]);
  VisibleDevices v = ParseVisibleDevices(value, own);
  for (int& p : v.physical) p = accessible[size_t(p)];
  return v;
}

}  // namespace hami::sim
