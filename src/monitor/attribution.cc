#include "monitor/attribution.h"

#include "common/file.h"
#include "common/strings.h"
#include "node/paths.h"

namespace hami::monitor {

namespace {

// The next line of `text` from `pos` (without its newline); advances `pos`.
std::string_view NextLine(std::string_view text, size_t& pos) {
  size_t end = text.find('\n', pos);
  if (end == std::string_view::npos) end = text.size();
  std::string_view line = text.substr(pos, end - pos);
  pos = end + 1;
  return line;
}

// The `n`th (0-based) space-separated field of `line`, or nullopt.
std::optional<std::string_view> Field(std::string_view line, int n) {
  const std::vector<std::string_view> fields = SplitString(line, ' ', true);
  if (n < 0 || size_t(n) >= fields.size()) return std::nullopt;
  return fields[size_t(n)];
}

// mountinfo's octal escapes (\040 space, \011 tab, \012 newline, \134 backslash).
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto oct = [](char c) { return c >= '0' && c <= '7'; };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && oct(s[i + 1]) && oct(s[i + 2]) && oct(s[i + 3])) {
      out += char(((s[i + 1] - '0') << 6) | ((s[i + 2] - '0') << 3) | (s[i + 3] - '0'));
      i += 3;
      continue;
    }
    out += s[i];
  }
  return out;
}

}  // namespace

const char* AttributionSourceName(AttributionSource source) {
  switch (source) {
    case AttributionSource::kNone:
      return "none";
    case AttributionSource::kMountinfo:
      return "mountinfo";
    case AttributionSource::kCgroup:
      return "cgroup";
    case AttributionSource::kRegion:
      return "region";
  }
  return "none";
}

std::optional<ContainerKey> ContainerFromMountinfo(std::string_view mountinfo) {
  const std::string marker = std::string("/") + node::kContainersSubdir + "/";
  size_t pos = 0;
  while (pos < mountinfo.size()) {
    std::string_view line = NextLine(mountinfo, pos);
    auto root_field = Field(line, 3);
    if (!root_field) continue;
    const std::string root = Unescape(*root_field);
    // Every occurrence: "/x/vgpu/containers/<name>[/...]".
    for (size_t at = root.find(marker); at != std::string::npos; at = root.find(marker, at + 1)) {
      size_t begin = at + marker.size();
      size_t end = root.find('/', begin);
      std::string_view name = std::string_view(root).substr(
          begin, end == std::string::npos ? std::string::npos : end - begin);
      auto key = ParseContainerDirName(name);
      if (key.ok()) return std::move(key).value();
    }
  }
  return std::nullopt;
}

std::optional<std::string> PodUidFromCgroup(std::string_view cgroup) {
  size_t pos = 0;
  while (pos < cgroup.size()) {
    std::string_view line = NextLine(cgroup, pos);
    // "id:controllers:path"; the path may itself hold ':'.
    size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view path = line.substr(second + 1);
    bool in_kubepods = false;
    size_t p = 0;
    while (p <= path.size()) {
      size_t slash = path.find('/', p);
      if (slash == std::string_view::npos) slash = path.size();
      std::string_view comp = path.substr(p, slash - p);
      p = slash + 1;
      if (comp.empty()) continue;
      if (comp.starts_with("kubepods")) {
        // "kubepods", "kubepods.slice", "kubepods-burstable.slice": the hierarchy; a pod's
        // own slice "kubepods-burstable-pod<uid>.slice" holds "-pod".
        size_t at = comp.find("-pod");
        if (at == std::string_view::npos) {
          in_kubepods = true;
          continue;
        }
        std::string_view rest = comp.substr(at + 4);
        if (!rest.ends_with(".slice")) continue;
        rest.remove_suffix(6);
        std::string uid(rest);
        for (char& c : uid) {
          if (c == '_') c = '-';
        }
        if (node::ValidatePathComponent("pod UID", uid).ok()) return uid;
        continue;
      }
      if (in_kubepods && comp.starts_with("pod") && comp.size() > 3) {
        std::string uid(comp.substr(3));
        if (uid.ends_with(".slice")) uid.resize(uid.size() - 6);
        if (uid.find('_') == std::string::npos &&
            node::ValidatePathComponent("pod UID", uid).ok()) {
          return uid;
        }
      }
    }
  }
  return std::nullopt;
}

Attribution Attribute(const std::string& proc_root, pid_t pid) {
  const std::string base = proc_root + "/" + std::to_string(pid);
  Attribution out;
  if (auto text = ReadFileToString(base + "/mountinfo", 4 << 20, Symlinks::kRefuse); text.ok()) {
    if (auto key = ContainerFromMountinfo(*text)) {
      out.source = AttributionSource::kMountinfo;
      out.key = std::move(*key);
      return out;
    }
  }
  if (auto text = ReadFileToString(base + "/cgroup", 1 << 20, Symlinks::kRefuse); text.ok()) {
    if (auto uid = PodUidFromCgroup(*text)) {
      out.source = AttributionSource::kCgroup;
      out.key.pod_uid = std::move(*uid);
    }
  }
  return out;
}

}  // namespace hami::monitor
