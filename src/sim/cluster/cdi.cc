#include "sim/cluster/cdi.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace hami::sim::cluster {
namespace {

using nlohmann::json;

// The versions this reader knows, oldest first.
constexpr std::array<const char*, 8> kVersions = {"0.3.0", "0.4.0", "0.5.0", "0.6.0",
                                                  "0.7.0", "0.8.0", "1.0.0", "1.1.0"};

int VersionIndex(std::string_view v) {
  for (size_t i = 0; i < kVersions.size(); ++i) {
    if (v == kVersions[i]) return int(i);
  }
  return -1;
}

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool IsAlpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// vendor and class: a letter first, [A-Za-z0-9._-], alphanumeric last.
std::string VendorOrClassProblem(std::string_view s) {
  if (s.empty()) return "is empty";
  if (!IsAlpha(s.front())) return "does not start with a letter";
  if (!IsAlnum(s.back())) return "does not end with a letter or digit";
  for (char c : s) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-') {
      return std::string("holds '") + c + "' (allowed: letters, digits, '.', '_', '-')";
    }
  }
  return "";
}

// device name: [A-Za-z0-9_.:-], alphanumeric first and last.
std::string DeviceNameProblem(std::string_view s) {
  if (s.empty()) return "is empty";
  if (!IsAlnum(s.front())) return "does not start with a letter or digit";
  if (!IsAlnum(s.back())) return "does not end with a letter or digit";
  for (char c : s) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-' && c != ':') {
      return std::string("holds '") + c + "' (allowed: letters, digits, '.', '_', '-', ':')";
    }
  }
  return "";
}

// A YAML document as JSON: plain scalars that read as integers or booleans become those,
// quoted scalars stay strings.
json YamlToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : n) out[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& e : n) out.push_back(YamlToJson(e));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted
      if (s == "true" || s == "false") return s == "true";
      if (!s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-')) {
        size_t used = 0;
        try {
          long long v = std::stoll(s, &used, 10);
          if (used == s.size()) return v;
        } catch (const std::exception&) {
        }
      }
      return s;
    }
    default:
      return nullptr;
  }
}

// Reads one spec's JSON, field by field; every error names the file and the field.
class SpecReader {
 public:
  SpecReader(const std::string& path, int version) : path_(path), version_(version) {}

  Error Bad(const std::string& field, const std::string& what) const {
    return Error(ErrorCode::kInvalidArgument, "CDI spec " + path_ + ": " + field + " " + what);
  }

  // A field newer than the spec's own version.
  Status Needs(const char* min, const std::string& field, const std::string& what) const {
    if (version_ >= VersionIndex(min)) return OkStatus();
    return Bad(field, what + ", which needs cdiVersion " + min + " or later (the spec says " +
                          kVersions[size_t(version_)] + ")");
  }

  Status OnlyFields(const json& obj, const std::string& at,
                    std::initializer_list<const char*> known) const {
    if (!obj.is_object()) return Bad(at.empty() ? "the document" : at, "is not an object");
    for (const auto& [key, value] : obj.items()) {
      if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
        return Bad(at.empty() ? key : at + "." + key, "is not a field of the CDI specification");
      }
    }
    return OkStatus();
  }

  Result<std::string> String(const json& obj, const char* key, const std::string& at,
                             bool required) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) return Bad(at + key, "is required");
      return std::string();
    }
    if (!it->is_string()) return Bad(at + key, "is not a string");
    return it->get<std::string>();
  }

  Result<std::vector<std::string>> Strings(const json& v, const std::string& at) const {
    std::vector<std::string> out;
    if (v.is_null()) return out;
    if (!v.is_array()) return Bad(at, "is not a list of strings");
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) return Bad(at + "[" + std::to_string(i) + "]", "is not a string");
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }

  Status Annotations(const json& v, const std::string& at) const {
    if (!v.is_object()) return Bad(at, "is not a map of strings");
    for (const auto& [k, value] : v.items()) {
      if (!value.is_string()) return Bad(at + "." + k, "is not a string");
    }
    return Needs("0.6.0", at, "is set");
  }

  Result<CdiContainerEdits> Edits(const json& e, const std::string& at) const {
    HAMI_TRY(OnlyFields(
        e, at,
        {"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"}));
    CdiContainerEdits out;
    if (auto it = e.find("env"); it != e.end()) {
      out.env = HAMI_TRY(Strings(*it, at + ".env"));
      for (size_t i = 0; i < out.env.size(); ++i) {
        const size_t eq = out.env[i].find('=');
        if (eq == std::string::npos || eq == 0) {
          return Bad(at + ".env[" + std::to_string(i) + "]",
                     "'" + out.env[i] + "' is not KEY=VALUE");
        }
      }
    }
    if (auto it = e.find("deviceNodes"); it != e.end() && !it->is_null()) {
      if (!it->is_array()) return Bad(at + ".deviceNodes", "is not a list");
      for (size_t i = 0; i < it->size(); ++i) {
        const json& d = (*it)[i];
        const std::string dat = at + ".deviceNodes[" + std::to_string(i) + "]";
        HAMI_TRY(OnlyFields(d, dat,
                            {"path", "hostPath", "type", "major", "minor", "fileMode",
                             "permissions", "uid", "gid"}));
        CdiContainerEdits::DeviceNode node;
        node.path = HAMI_TRY(String(d, "path", dat + ".", true));
        if (node.path.empty() || node.path[0] != '/') {
          return Bad(dat + ".path", "'" + node.path + "' is not an absolute path");
        }
        node.host_path = HAMI_TRY(String(d, "hostPath", dat + ".", false));
        if (!node.host_path.empty()) HAMI_TRY(Needs("0.5.0", dat + ".hostPath", "is set"));
        node.permissions = HAMI_TRY(String(d, "permissions", dat + ".", false));
        if (node.permissions.find_first_not_of("rwm") != std::string::npos) {
          return Bad(dat + ".permissions", "'" + node.permissions + "' is not a subset of \"rwm\"");
        }
        (void)HAMI_TRY(String(d, "type", dat + ".", false));
        for (const char* n : {"major", "minor", "fileMode", "uid", "gid"}) {
          if (auto f = d.find(n); f != d.end() && !f->is_null() && !f->is_number_integer()) {
            return Bad(dat + "." + n, "is not an integer");
          }
        }
        out.device_nodes.push_back(std::move(node));
      }
    }
    if (auto it = e.find("mounts"); it != e.end() && !it->is_null()) {
      if (!it->is_array()) return Bad(at + ".mounts", "is not a list");
      for (size_t i = 0; i < it->size(); ++i) {
        const json& m = (*it)[i];
        const std::string mat = at + ".mounts[" + std::to_string(i) + "]";
        HAMI_TRY(OnlyFields(m, mat, {"hostPath", "containerPath", "type", "options"}));
        CdiContainerEdits::Mount mount;
        mount.host_path = HAMI_TRY(String(m, "hostPath", mat + ".", true));
        mount.container_path = HAMI_TRY(String(m, "containerPath", mat + ".", true));
        if (mount.host_path.empty()) return Bad(mat + ".hostPath", "is empty");
        if (mount.container_path.empty() || mount.container_path[0] != '/') {
          return Bad(mat + ".containerPath",
                     "'" + mount.container_path + "' is not an absolute path");
        }
        mount.type = HAMI_TRY(String(m, "type", mat + ".", false));
        if (m.contains("type")) HAMI_TRY(Needs("0.4.0", mat + ".type", "is set"));
        if (auto o = m.find("options"); o != m.end()) {
          mount.options = HAMI_TRY(Strings(*o, mat + ".options"));
        }
        out.mounts.push_back(std::move(mount));
      }
    }
    if (auto it = e.find("hooks"); it != e.end() && !it->is_null()) {
      if (!it->is_array()) return Bad(at + ".hooks", "is not a list");
      for (size_t i = 0; i < it->size(); ++i) {
        const json& h = (*it)[i];
        const std::string hat = at + ".hooks[" + std::to_string(i) + "]";
        HAMI_TRY(OnlyFields(h, hat, {"hookName", "path", "args", "env", "timeout"}));
        (void)HAMI_TRY(String(h, "hookName", hat + ".", true));
        (void)HAMI_TRY(String(h, "path", hat + ".", true));
      }
      if (!it->empty()) out.unsupported.push_back("hooks");
    }
    if (auto it = e.find("intelRdt"); it != e.end() && !it->is_null()) {
      HAMI_TRY(Needs("0.7.0", at + ".intelRdt", "is set"));
      out.unsupported.push_back("intelRdt");
    }
    if (auto it = e.find("additionalGids"); it != e.end() && !it->is_null()) {
      HAMI_TRY(Needs("0.7.0", at + ".additionalGids", "is set"));
      if (!it->is_array()) return Bad(at + ".additionalGids", "is not a list");
      if (!it->empty()) out.unsupported.push_back("additionalGids");
    }
    if (auto it = e.find("netDevices"); it != e.end() && !it->is_null()) {
      HAMI_TRY(Needs("1.1.0", at + ".netDevices", "is set"));
      if (!it->is_array()) return Bad(at + ".netDevices", "is not a list");
      if (!it->empty()) out.unsupported.push_back("netDevices");
    }
    return out;
  }

 private:
  const std::string& path_;
  const int version_;
};

}  // namespace

Result<CdiQualifiedName> ParseCdiQualifiedName(std::string_view id) {
  const std::string text(id);
  const size_t slash = id.find('/');
  const size_t eq = id.find('=');
  if (slash == std::string_view::npos || eq == std::string_view::npos || eq < slash) {
    return Error(ErrorCode::kInvalidArgument,
                 "CDI device '" + text + "' is not a qualified name <vendor>/<class>=<name>");
  }
  CdiQualifiedName q{std::string(id.substr(0, slash)),
                     std::string(id.substr(slash + 1, eq - slash - 1)),
                     std::string(id.substr(eq + 1))};
  if (std::string p = VendorOrClassProblem(q.vendor); !p.empty()) {
    return Error(ErrorCode::kInvalidArgument, "CDI device '" + text + "': vendor " + p);
  }
  if (std::string p = VendorOrClassProblem(q.cls); !p.empty()) {
    return Error(ErrorCode::kInvalidArgument, "CDI device '" + text + "': class " + p);
  }
  if (std::string p = DeviceNameProblem(q.name); !p.empty()) {
    return Error(ErrorCode::kInvalidArgument, "CDI device '" + text + "': name " + p);
  }
  return q;
}

Result<CdiSpec> ParseCdiSpec(std::string_view text, bool yaml, const std::string& path) {
  json doc;
  if (yaml) {
    try {
      doc = YamlToJson(YAML::Load(std::string(text)));
    } catch (const std::exception& e) {
      return Error(ErrorCode::kInvalidArgument,
                   "CDI spec " + path + ": not valid YAML: " + e.what());
    }
  } else {
    doc = json::parse(text, nullptr, false);
    if (doc.is_discarded()) {
      return Error(ErrorCode::kInvalidArgument, "CDI spec " + path + ": not valid JSON");
    }
  }
  if (!doc.is_object()) {
    return Error(ErrorCode::kInvalidArgument,
                 "CDI spec " + path + ": the document is not an object");
  }
  CdiSpec spec;
  spec.path = path;
  auto version = doc.find("cdiVersion");
  if (version == doc.end() || !version->is_string()) {
    return Error(ErrorCode::kInvalidArgument,
                 "CDI spec " + path + ": cdiVersion is required (a string)");
  }
  spec.version = version->get<std::string>();
  if (spec.version == "0.1.0" || spec.version == "0.2.0") {
    return Error(ErrorCode::kIncompatible, "CDI spec " + path + ": cdiVersion " + spec.version +
                                               " is no longer supported (the earliest is 0.3.0)");
  }
  const int vi = VersionIndex(spec.version);
  if (vi < 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "CDI spec " + path + ": cdiVersion '" + spec.version +
                     "' is not a CDI version this reader knows (0.3.0 to 1.1.0)");
  }
  SpecReader r(path, vi);
  HAMI_TRY(
      r.OnlyFields(doc, "", {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}));
  const std::string kind = HAMI_TRY(r.String(doc, "kind", "", true));
  const size_t slash = kind.find('/');
  if (slash == std::string::npos) return r.Bad("kind", "'" + kind + "' is not <vendor>/<class>");
  spec.vendor = kind.substr(0, slash);
  spec.cls = kind.substr(slash + 1);
  if (std::string p = VendorOrClassProblem(spec.vendor); !p.empty()) {
    return r.Bad("kind", "'" + kind + "': vendor " + p);
  }
  if (std::string p = VendorOrClassProblem(spec.cls); !p.empty()) {
    return r.Bad("kind", "'" + kind + "': class " + p);
  }
  if (spec.cls.find('.') != std::string::npos) {
    HAMI_TRY(r.Needs("0.6.0", "kind", "'" + kind + "' has a dot in its class"));
  }
  if (auto a = doc.find("annotations"); a != doc.end()) HAMI_TRY(r.Annotations(*a, "annotations"));
  if (auto e = doc.find("containerEdits"); e != doc.end() && !e->is_null()) {
    spec.edits = HAMI_TRY(r.Edits(*e, "containerEdits"));
  }
  auto devices = doc.find("devices");
  if (devices == doc.end() || !devices->is_array() || devices->empty()) {
    return r.Bad("devices", "is required: a list of at least one device");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < devices->size(); ++i) {
    const json& d = (*devices)[i];
    const std::string at = "devices[" + std::to_string(i) + "]";
    HAMI_TRY(r.OnlyFields(d, at, {"name", "annotations", "containerEdits"}));
    const std::string name = HAMI_TRY(r.String(d, "name", at + ".", true));
    if (std::string p = DeviceNameProblem(name); !p.empty()) {
      return r.Bad(at + ".name", "'" + name + "' " + p);
    }
    if (std::isdigit(static_cast<unsigned char>(name[0]))) {
      HAMI_TRY(r.Needs("0.5.0", at + ".name", "'" + name + "' starts with a digit"));
    }
    if (!names.insert(name).second) return r.Bad(at + ".name", "'" + name + "' is a duplicate");
    if (auto a = d.find("annotations"); a != d.end()) {
      HAMI_TRY(r.Annotations(*a, at + ".annotations"));
    }
    auto edits = d.find("containerEdits");
    if (edits == d.end() || edits->is_null()) return r.Bad(at + ".containerEdits", "is required");
    spec.devices.emplace_back(name, HAMI_TRY(r.Edits(*edits, at + ".containerEdits")));
  }
  return spec;
}

namespace {

Status Apply(const CdiContainerEdits& e, const std::string& what, CdiEdits* out) {
  if (!e.unsupported.empty()) {
    std::string fields;
    for (const std::string& f : e.unsupported) fields += (fields.empty() ? "" : ", ") + f;
    return Error(ErrorCode::kUnsupported,
                 what + ": its containerEdits use " + fields +
                     ", which the simulated node cannot apply (it resolves env, mounts and "
                     "device nodes only)");
  }
  for (const std::string& kv : e.env) {
    const size_t eq = kv.find('=');
    out->env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const CdiContainerEdits::Mount& m : e.mounts) {
    if (!m.type.empty() && m.type != "bind") {
      return Error(ErrorCode::kUnsupported, what + ": mount of " + m.container_path +
                                                " has type '" + m.type +
                                                "'; the simulated node gives bind mounts only");
    }
    const bool ro = std::find(m.options.begin(), m.options.end(), "ro") != m.options.end();
    out->mounts.push_back({m.container_path, m.host_path, ro});
  }
  for (const CdiContainerEdits::DeviceNode& d : e.device_nodes) {
    out->devices.push_back({d.path, d.host_path.empty() ? d.path : d.host_path,
                            d.permissions.empty() ? "rwm" : d.permissions});
  }
  return OkStatus();
}

}  // namespace

Result<CdiEdits> ResolveCdiDevices(const std::vector<std::string>& dirs,
                                   const std::vector<std::string>& ids) {
  std::vector<CdiSpec> specs;
  std::vector<std::string> load_errors;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (auto it = std::filesystem::directory_iterator(dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const std::string ext = it->path().extension().string();
      if ((ext == ".json" || ext == ".yaml") && it->is_regular_file()) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) {
        load_errors.push_back("CDI spec " + f.string() + ": cannot be read");
        continue;
      }
      auto spec = ParseCdiSpec(text.str(), f.extension() == ".yaml", f.string());
      if (!spec.ok()) {
        load_errors.push_back(spec.error().message());
        continue;
      }
      specs.push_back(std::move(spec).value());
    }
  }
  CdiEdits out;
  std::set<size_t> applied_specs;
  for (const std::string& id : ids) {
    const CdiQualifiedName q = HAMI_TRY(ParseCdiQualifiedName(id));
    // The last directory that defines it wins; within that directory, one file must.
    std::vector<std::pair<size_t, const CdiContainerEdits*>> matches;
    for (size_t i = 0; i < specs.size(); ++i) {
      const CdiSpec& s = specs[i];
      if (s.vendor != q.vendor || s.cls != q.cls) continue;
      for (const auto& [name, edits] : s.devices) {
        if (name == q.name) matches.emplace_back(i, &edits);
      }
    }
    const CdiSpec* found = nullptr;
    size_t found_index = 0;
    const CdiContainerEdits* device = nullptr;
    if (!matches.empty()) {
      found_index = matches.back().first;
      found = &specs[found_index];
      device = matches.back().second;
      const auto dir = std::filesystem::path(found->path).parent_path();
      for (size_t m = 0; m + 1 < matches.size(); ++m) {
        const CdiSpec& other = specs[matches[m].first];
        if (std::filesystem::path(other.path).parent_path() == dir) {
          return Error(ErrorCode::kConflict, "CDI device " + id + " is defined by both " +
                                                 other.path + " and " + found->path);
        }
      }
    }
    if (found == nullptr) {
      std::string searched;
      for (const std::string& d : dirs) searched += (searched.empty() ? "" : ", ") + d;
      std::string message = "CDI device " + id + " is not defined by any spec in " + searched;
      for (const std::string& e : load_errors) message += "; " + e;
      return Error(ErrorCode::kNotFound, message);
    }
    if (applied_specs.insert(found_index).second) {
      HAMI_TRY(Apply(found->edits, "CDI spec " + found->path, &out));
    }
    HAMI_TRY(Apply(*device, "CDI spec " + found->path + " device " + q.name, &out));
  }
  return out;
}

}  // namespace hami::sim::cluster
