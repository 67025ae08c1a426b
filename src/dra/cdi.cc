#include "dra/cdi.h"

#include <algorithm>

namespace hami::dra {

using nlohmann::json;

std::string CdiSpecFileName(std::string_view claim_uid) {
  std::string uid(claim_uid);
  std::replace(uid.begin(), uid.end(), '/', '_');
  return std::string(kCdiVendor) + "-" + kCdiClass + "_" + uid + ".json";
}

std::string CdiDeviceName(std::string_view claim_uid, std::string_view device,
                          std::string_view share_id) {
  std::string name = std::string(claim_uid) + "-" + std::string(device);
  if (!share_id.empty()) name += "-" + std::string(share_id);
  return name;
}

bool IsValidCdiDeviceName(std::string_view name) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (name.empty() || !alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) {
    return alnum(c) || c == '_' || c == '.' || c == ':' || c == '-';
  });
}

std::string CdiDeviceId(std::string_view device_name) {
  return std::string(kCdiVendor) + "/" + kCdiClass + "=" + std::string(device_name);
}

json CdiSpec(const plugin::ContainerResponse& edits, const std::vector<CdiDevice>& devices) {
  json env = json::array();
  for (const auto& [k, v] : edits.envs) env.push_back(k + "=" + v);  // a std::map: sorted
  json mounts = json::array();
  for (const plugin::Mount& m : edits.mounts) {
    mounts.push_back({{"hostPath", m.host_path},
                      {"containerPath", m.container_path},
                      {"options", {m.read_only ? "ro" : "rw", "nosuid", "nodev", "bind"}}});
  }
  json spec_devices = json::array();
  for (size_t i = 0; i < devices.size(); ++i) {
    spec_devices.push_back({{"name", devices[i].name},
                            {"containerEdits",
                             {{"env",
                               {std::string(kDeviceEnvPrefix) + std::to_string(devices[i].ordinal) +
                                "=" + devices[i].uuid}}}}});
  }
  return {{"cdiVersion", kCdiVersion},
          {"kind", std::string(kCdiVendor) + "/" + kCdiClass},
          {"devices", std::move(spec_devices)},
          {"containerEdits", {{"env", std::move(env)}, {"mounts", std::move(mounts)}}}};
}

}  // namespace hami::dra
