#include "node/paths.h"

#include <cstdint>
#include <span>

#include "common/strings.h"

namespace hami::node {

namespace {

Error Bad(std::string_view what, std::string_view value, std::string_view why) {
  std::string shown;
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      shown += "\\x" + HexEncode(std::span<const uint8_t>(&u, 1));
    } else {
      shown += c;
    }
  }
  return Error(ErrorCode::kInvalidArgument,
               std::string(what) + " '" + shown + "': " + std::string(why));
}

// The first control character in `value`, or npos.
size_t FindControl(std::string_view value) {
  for (size_t i = 0; i < value.size(); ++i) {
    auto u = static_cast<unsigned char>(value[i]);
    if (u < 0x20 || u == 0x7f) return i;
  }
  return std::string_view::npos;
}

Result<std::string> HookPath(std::string_view hook_path) {
  if (hook_path.empty()) return Bad("hook path", hook_path, "is empty");
  if (hook_path[0] != '/') return Bad("hook path", hook_path, "must be an absolute path");
  if (FindControl(hook_path) != std::string_view::npos) {
    return Bad("hook path", hook_path, "contains a control character");
  }
  if (hook_path.find("..") != std::string_view::npos) {
    return Bad("hook path", hook_path, "contains '..'");
  }
  while (hook_path.size() > 1 && hook_path.back() == '/') hook_path.remove_suffix(1);
  return std::string(hook_path == "/" ? "" : hook_path);
}

// <hook>/vgpu/containers/<podUID>_<container>, validated.
Result<std::string> ContainerStem(std::string_view hook_path, const ContainerRef& ref) {
  std::string hook = HAMI_TRY(HookPath(hook_path));
  HAMI_TRY(ValidatePathComponent("pod UID", ref.pod_uid));
  HAMI_TRY(ValidatePathComponent("container name", ref.container));
  return hook + "/" + kContainersSubdir + "/" + std::string(ref.pod_uid) + "_" +
         std::string(ref.container);
}

}  // namespace

Status ValidatePathComponent(std::string_view what, std::string_view value) {
  if (value.empty()) return Bad(what, value, "is empty");
  if (size_t at = FindControl(value); at != std::string_view::npos) {
    return Bad(what, value, "contains a control character at offset " + std::to_string(at));
  }
  if (value.find('/') != std::string_view::npos) return Bad(what, value, "contains '/'");
  if (value.find("..") != std::string_view::npos) return Bad(what, value, "contains '..'");
  if (value == ".") return Bad(what, value, "is '.'");
  return OkStatus();
}

Result<std::string> ContainerDir(std::string_view hook_path, const ContainerRef& ref) {
  return ContainerStem(hook_path, ref);
}

Result<std::string> ContainerRegionPath(std::string_view hook_path, const ContainerRef& ref) {
  return HAMI_TRY(ContainerStem(hook_path, ref)) + "/" + kRegionFileName;
}

Result<std::string> ContainerLimitsPath(std::string_view hook_path, const ContainerRef& ref) {
  return HAMI_TRY(ContainerStem(hook_path, ref)) + kLimitsFileSuffix;
}

}  // namespace hami::node
