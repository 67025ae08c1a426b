#include "sim/kube/dra_strategy.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace hami::sim::kube {

using hami::kube::Resource;
using nlohmann::json;

namespace {

bool Is(const Resource& a, const Resource& b) { return a.group == b.group && a.plural == b.plural; }

std::string Name(const json& object) {
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  auto n = m->find("name");
  return n != m->end() && n->is_string() ? n->get<std::string>() : "";
}

// A field that is present and not null, or nullptr.
const json* Find(const json& parent, std::string_view key) {
  if (!parent.is_object()) return nullptr;
  auto it = parent.find(key);
  return it == parent.end() || it->is_null() ? nullptr : &*it;
}

std::string Index(const std::string& field, size_t i) {
  return field + "[" + std::to_string(i) + "]";
}

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsAlnum(c) || c == '-'; });
}

bool IsDnsSubdomain(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  size_t start = 0;
  for (;;) {
    const size_t dot = s.find('.', start);
    std::string_view part = s.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (part.empty() || !IsAlnum(part.front()) || !IsAlnum(part.back())) return false;
    if (!std::all_of(part.begin(), part.end(), [](char c) { return IsAlnum(c) || c == '-'; })) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// The syntax of a resource.Quantity: [+-] digits [. digits] then a binary or decimal suffix
// (Ki..Ei, n u m k M G T P E) or an exponent (e/E [+-] digits).
bool IsQuantity(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return false;
  std::string_view suffix = s.substr(i);
  static constexpr std::string_view kSuffixes[] = {"",  "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n",
                                                   "u", "m",  "k",  "M",  "G",  "T",  "P",  "E"};
  if (std::find(std::begin(kSuffixes), std::end(kSuffixes), suffix) != std::end(kSuffixes)) {
    return true;
  }
  if (suffix[0] != 'e' && suffix[0] != 'E') return false;
  suffix.remove_prefix(1);
  if (!suffix.empty() && (suffix[0] == '+' || suffix[0] == '-')) suffix.remove_prefix(1);
  return !suffix.empty() &&
         std::all_of(suffix.begin(), suffix.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string Dump(const json& v) { return v.dump(); }

constexpr std::string_view kLabelRule =
    ": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
constexpr std::string_view kSubdomainRule =
    ": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

// Checks of one object; the first failure is kept.
class Checker {
 public:
  Checker(const Resource& r, const json& object) : r_(r), name_(Name(object)) {}

  bool failed() const { return status_.has_value(); }
  std::optional<ApiStatus> result() { return std::move(status_); }

  void Fail(const std::string& field, const std::string& what) {
    if (!status_) status_ = Invalid(r_, name_, field, what);
  }

  // A list at parent[key] of at most `max` entries; nullptr when absent (or not a list: failed).
  const json* List(const json& parent, std::string_view key, const std::string& field, size_t max) {
    const json* v = Find(parent, key);
    if (v == nullptr) return nullptr;
    if (!v->is_array()) {
      Fail(field, "Invalid value: " + Dump(*v) + ": must be a list");
      return nullptr;
    }
    if (v->size() > max) {
      Fail(field, "Too many: " + std::to_string(v->size()) + ": must have at most " +
                      std::to_string(max) + " items");
      return nullptr;
    }
    return v;
  }

  // An object at parent[key]; nullptr when absent (Required value when `required`).
  const json* Object(const json& parent, std::string_view key, const std::string& field,
                     bool required) {
    const json* v = Find(parent, key);
    if (v == nullptr) {
      if (required) Fail(field, "Required value");
      return nullptr;
    }
    if (!v->is_object()) {
      Fail(field, "Invalid value: " + Dump(*v) + ": must be an object");
      return nullptr;
    }
    return v;
  }

  // A string at parent[key]; "" when absent (Required value when `required`).
  std::string String(const json& parent, std::string_view key, const std::string& field,
                     bool required) {
    const json* v = Find(parent, key);
    if (v == nullptr || (v->is_string() && v->get_ref<const std::string&>().empty())) {
      if (required) Fail(field, "Required value");
      return "";
    }
    if (!v->is_string()) {
      Fail(field, "Invalid value: " + Dump(*v) + ": must be a string");
      return "";
    }
    return v->get<std::string>();
  }

  void DnsLabel(const std::string& value, const std::string& field) {
    if (!IsDnsLabel(value))
      Fail(field, "Invalid value: \"" + value + "\"" + std::string(kLabelRule));
  }

  void DnsSubdomain(const std::string& value, const std::string& field, size_t max) {
    if (value.size() > max) {
      Fail(field, "Too long: may not be more than " + std::to_string(max) + " bytes");
    } else if (!IsDnsSubdomain(value, max)) {
      Fail(field, "Invalid value: \"" + value + "\"" + std::string(kSubdomainRule));
    }
  }

  void Quantity(const json& v, const std::string& field) {
    if (!v.is_string() || !IsQuantity(v.get_ref<const std::string&>())) {
      Fail(field, "Invalid value: " + Dump(v) +
                      ": quantities must match the regular expression "
                      "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
    }
  }

  // A device request's shape, shared by `exactly` and the subrequests of `firstAvailable`.
  void RequestBody(const json& body, const std::string& field) {
    const std::string cls = String(body, "deviceClassName", field + ".deviceClassName", true);
    if (!cls.empty()) DnsSubdomain(cls, field + ".deviceClassName", 253);
    const json mode = body.value("allocationMode", json("ExactCount"));
    if (mode != "ExactCount" && mode != "All") {
      Fail(field + ".allocationMode",
           "Unsupported value: " + Dump(mode) + ": supported values: \"All\", \"ExactCount\"");
    }
    if (mode == "ExactCount") {
      const json* count = Find(body, "count");
      if (count != nullptr && (!count->is_number_integer() || count->get<int64_t>() <= 0)) {
        Fail(field + ".count", "Invalid value: " + Dump(*count) + ": must be greater than zero");
      }
    }
    if (const json* sel = List(body, "selectors", field + ".selectors", 32)) {
      for (size_t i = 0; i < sel->size(); ++i) Selector((*sel)[i], Index(field + ".selectors", i));
    }
    List(body, "tolerations", field + ".tolerations", 16);
    if (const json* cap = Object(body, "capacity", field + ".capacity", false)) {
      if (const json* req = Object(*cap, "requests", field + ".capacity.requests", false)) {
        for (const auto& [k, v] : req->items()) {
          Quantity(v, field + ".capacity.requests[" + k + "]");
        }
      }
    }
  }

  void Selector(const json& s, const std::string& field) {
    const json* cel = Object(s, "cel", field + ".cel", true);
    if (cel != nullptr) String(*cel, "expression", field + ".cel.expression", true);
  }

  // spec.devices of a claim (or spec.spec.devices of a template) at `prefix`.
  void ClaimSpec(const json* spec, const std::string& prefix) {
    if (spec == nullptr) return;
    const json* devices = Object(*spec, "devices", prefix + ".devices", false);
    if (devices == nullptr) return;
    const std::string field = prefix + ".devices.requests";
    const json* requests = List(*devices, "requests", field, 32);
    std::set<std::string> names;
    for (size_t i = 0; requests != nullptr && i < requests->size() && !failed(); ++i) {
      const json& req = (*requests)[i];
      const std::string at = Index(field, i);
      if (!req.is_object()) {
        Fail(at, "Invalid value: " + Dump(req) + ": must be an object");
        break;
      }
      const std::string name = String(req, "name", at + ".name", true);
      if (!name.empty()) {
        DnsLabel(name, at + ".name");
        if (!names.insert(name).second) Fail(at + ".name", "Duplicate value: \"" + name + "\"");
      }
      const json* exactly = Object(req, "exactly", at + ".exactly", false);
      const json* first = List(req, "firstAvailable", at + ".firstAvailable", 8);
      if (failed()) break;
      if ((exactly == nullptr) == (first == nullptr)) {
        Fail(at, exactly == nullptr
                     ? "Required value: exactly one of `exactly` or `firstAvailable` is required"
                     : "Invalid value: exactly one of `exactly` or `firstAvailable` is required, "
                       "but multiple fields are set");
        break;
      }
      if (exactly != nullptr) RequestBody(*exactly, at + ".exactly");
      if (first != nullptr) {
        if (first->empty()) Fail(at + ".firstAvailable", "Required value");
        std::set<std::string> sub_names;
        for (size_t j = 0; j < first->size() && !failed(); ++j) {
          const std::string sub_at = Index(at + ".firstAvailable", j);
          const json& sub = (*first)[j];
          if (!sub.is_object()) {
            Fail(sub_at, "Invalid value: " + Dump(sub) + ": must be an object");
            break;
          }
          const std::string sub_name = String(sub, "name", sub_at + ".name", true);
          if (!sub_name.empty()) {
            DnsLabel(sub_name, sub_at + ".name");
            if (!sub_names.insert(sub_name).second) {
              Fail(sub_at + ".name", "Duplicate value: \"" + sub_name + "\"");
            }
          }
          RequestBody(sub, sub_at);
        }
      }
    }
    List(*devices, "constraints", prefix + ".devices.constraints", 32);
    List(*devices, "config", prefix + ".devices.config", 32);
  }

  void DeviceClass(const json& object) {
    const json* spec = Object(object, "spec", "spec", false);
    if (spec == nullptr) return;
    if (const json* sel = List(*spec, "selectors", "spec.selectors", 32)) {
      for (size_t i = 0; i < sel->size(); ++i) Selector((*sel)[i], Index("spec.selectors", i));
    }
    if (const json* config = List(*spec, "config", "spec.config", 32)) {
      for (size_t i = 0; i < config->size(); ++i) {
        const std::string at = Index("spec.config", i);
        const json* opaque = Object((*config)[i], "opaque", at + ".opaque", true);
        if (opaque == nullptr) continue;
        const std::string driver = String(*opaque, "driver", at + ".opaque.driver", true);
        if (!driver.empty()) DnsSubdomain(driver, at + ".opaque.driver", 63);
      }
    }
    String(*spec, "extendedResourceName", "spec.extendedResourceName", false);
  }

  void Device(const json& d, const std::string& at, std::set<std::string>& names) {
    if (!d.is_object()) {
      Fail(at, "Invalid value: " + Dump(d) + ": must be an object");
      return;
    }
    const std::string name = String(d, "name", at + ".name", true);
    if (!name.empty()) {
      DnsLabel(name, at + ".name");
      if (!names.insert(name).second) Fail(at + ".name", "Duplicate value: \"" + name + "\"");
    }
    size_t entries = 0;
    if (const json* attrs = Object(d, "attributes", at + ".attributes", false)) {
      entries += attrs->size();
      for (const auto& [k, v] : attrs->items()) {
        const std::string field = at + ".attributes[" + k + "]";
        int kinds = 0;
        for (const char* kind : {"int", "bool", "string", "version"}) {
          if (Find(v, kind) != nullptr) ++kinds;
        }
        if (kinds != 1) {
          Fail(field, "Invalid value: " + Dump(v) +
                          ": exactly one value must be specified (int, bool, string, version)");
        }
      }
    }
    if (const json* cap = Object(d, "capacity", at + ".capacity", false)) {
      entries += cap->size();
      for (const auto& [k, v] : cap->items()) {
        const std::string field = at + ".capacity[" + k + "]";
        const json* value = Find(v, "value");
        if (value == nullptr) {
          Fail(field + ".value", "Required value");
        } else {
          Quantity(*value, field + ".value");
        }
        if (const json* policy = Object(v, "requestPolicy", field + ".requestPolicy", false)) {
          RequestPolicy(d, *policy, field + ".requestPolicy");
        }
      }
    }
    if (entries > 32) {
      Fail(at, "Too many: " + std::to_string(entries) +
                   ": must have at most 32 attributes and capacities combined");
    }
    if (const json* taints = List(d, "taints", at + ".taints", 16)) {
      for (size_t i = 0; i < taints->size(); ++i) {
        const std::string t_at = Index(at + ".taints", i);
        String((*taints)[i], "key", t_at + ".key", true);
        const std::string effect = String((*taints)[i], "effect", t_at + ".effect", true);
        if (!effect.empty() && effect != "NoSchedule" && effect != "NoExecute" &&
            effect != "None") {
          Fail(t_at + ".effect", "Unsupported value: \"" + effect +
                                     "\": supported values: \"NoExecute\", \"NoSchedule\", "
                                     "\"None\"");
        }
      }
    }
  }

  // A capacity's requestPolicy: only on a device with allowMultipleAllocations; validValues
  // or validRange, not both; either needs a default; a range needs its min; quantities.
  void RequestPolicy(const json& device, const json& policy, const std::string& field) {
    const json* multiple = Find(device, "allowMultipleAllocations");
    if (multiple == nullptr || *multiple != true) {
      Fail(field, "Forbidden: allowed only when allowMultipleAllocations is true");
      return;
    }
    const json* values = List(policy, "validValues", field + ".validValues", 10);
    const json* range = Object(policy, "validRange", field + ".validRange", false);
    if (failed()) return;
    if (values != nullptr && range != nullptr) {
      Fail(field, "Invalid value: only one of `validValues` or `validRange` may be set");
      return;
    }
    const json* def = Find(policy, "default");
    if (def != nullptr) Quantity(*def, field + ".default");
    if ((values != nullptr || range != nullptr) && def == nullptr) {
      Fail(field + ".default", "Required value: a default is required with valid values");
    }
    for (size_t i = 0; values != nullptr && i < values->size(); ++i) {
      Quantity((*values)[i], Index(field + ".validValues", i));
    }
    if (range != nullptr) {
      const json* min = Find(*range, "min");
      if (min == nullptr) {
        Fail(field + ".validRange.min", "Required value");
      } else {
        Quantity(*min, field + ".validRange.min");
      }
      for (const char* key : {"max", "step"}) {
        if (const json* q = Find(*range, key)) Quantity(*q, field + ".validRange." + key);
      }
    }
  }

  void ResourceSlice(const json& object) {
    const json* spec = Object(object, "spec", "spec", true);
    if (spec == nullptr) return;
    const std::string driver = String(*spec, "driver", "spec.driver", true);
    if (!driver.empty()) DnsSubdomain(driver, "spec.driver", 63);
    if (const json* pool = Object(*spec, "pool", "spec.pool", true)) {
      String(*pool, "name", "spec.pool.name", true);
      const json* generation = Find(*pool, "generation");
      if (generation != nullptr &&
          (!generation->is_number_integer() || generation->get<int64_t>() < 0)) {
        Fail("spec.pool.generation",
             "Invalid value: " + Dump(*generation) + ": must be greater than or equal to 0");
      }
      const json* count = Find(*pool, "resourceSliceCount");
      if (count == nullptr || !count->is_number_integer() || count->get<int64_t>() <= 0) {
        Fail("spec.pool.resourceSliceCount",
             "Invalid value: " + (count == nullptr ? std::string("0") : Dump(*count)) +
                 ": must be greater than zero");
      }
    }
    if (failed()) return;
    int selectors = 0;
    const std::string node = String(*spec, "nodeName", "spec.nodeName", false);
    if (!node.empty()) {
      ++selectors;
      DnsSubdomain(node, "spec.nodeName", 253);
    }
    if (Object(*spec, "nodeSelector", "spec.nodeSelector", false) != nullptr) ++selectors;
    for (const char* flag : {"allNodes", "perDeviceNodeSelection"}) {
      const json* v = Find(*spec, flag);
      if (v == nullptr) continue;
      if (!v->is_boolean()) {
        Fail(std::string("spec.") + flag, "Invalid value: " + Dump(*v) + ": must be a boolean");
      } else if (v->get<bool>()) {
        ++selectors;
      }
    }
    if (failed()) return;
    if (selectors == 0) {
      Fail("spec",
           "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
           "`perDeviceNodeSelection` is required");
      return;
    }
    if (selectors > 1) {
      Fail("spec",
           "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
           "`perDeviceNodeSelection` is required, but multiple fields are set");
      return;
    }
    const json* devices = List(*spec, "devices", "spec.devices", 128);
    const json* counters = List(*spec, "sharedCounters", "spec.sharedCounters", 8);
    if (failed()) return;
    if (devices != nullptr && !devices->empty() && counters != nullptr && !counters->empty()) {
      Fail("spec", "Invalid value: only one of `devices` or `sharedCounters` may be set");
      return;
    }
    if (devices == nullptr) return;
    const bool tainted = std::any_of(devices->begin(), devices->end(), [](const json& d) {
      const json* t = Find(d, "taints");
      return t != nullptr && t->is_array() && !t->empty();
    });
    if (tainted && devices->size() > 64) {
      Fail("spec.devices", "Too many: " + std::to_string(devices->size()) +
                               ": must have at most 64 items when devices have taints");
      return;
    }
    std::set<std::string> names;
    for (size_t i = 0; i < devices->size() && !failed(); ++i) {
      Device((*devices)[i], Index("spec.devices", i), names);
    }
  }

  void ClaimStatus(const json& old_status, const json& status) {
    const json* allocation = Object(status, "allocation", "status.allocation", false);
    if (allocation != nullptr) {
      if (const json* devices =
              Object(*allocation, "devices", "status.allocation.devices", false)) {
        const std::string field = "status.allocation.devices.results";
        if (const json* results = List(*devices, "results", field, 32)) {
          for (size_t i = 0; i < results->size() && !failed(); ++i) {
            const std::string at = Index(field, i);
            for (const char* key : {"request", "driver", "pool", "device"}) {
              String((*results)[i], key, at + "." + key, true);
            }
          }
        }
      }
      const json* old_allocation = Find(old_status, "allocation");
      if (!failed() && old_allocation != nullptr && *old_allocation != *allocation) {
        Fail("status.allocation", "Invalid value: " + Dump(*allocation) + ": field is immutable");
      }
    }
    const json* reserved = List(status, "reservedFor", "status.reservedFor", 256);
    if (reserved != nullptr && !reserved->empty() && allocation == nullptr) {
      Fail("status.reservedFor", "Forbidden: may not be specified when `allocated` is not set");
    }
    std::set<std::string> uids;
    for (size_t i = 0; reserved != nullptr && i < reserved->size() && !failed(); ++i) {
      const std::string at = Index("status.reservedFor", i);
      String((*reserved)[i], "resource", at + ".resource", true);
      String((*reserved)[i], "name", at + ".name", true);
      const std::string uid = String((*reserved)[i], "uid", at + ".uid", true);
      if (!uid.empty() && !uids.insert(uid).second) {
        Fail(at + ".uid", "Duplicate value: \"" + uid + "\"");
      }
    }
    if (const json* devices = List(status, "devices", "status.devices", 32)) {
      for (size_t i = 0; i < devices->size() && !failed(); ++i) {
        const std::string at = Index("status.devices", i);
        for (const char* key : {"driver", "pool", "device"}) {
          String((*devices)[i], key, at + "." + key, true);
        }
      }
    }
  }

 private:
  const Resource& r_;
  const std::string name_;
  std::optional<ApiStatus> status_;
};

void DefaultRequestBody(json& body) {
  if (!body.is_object()) return;
  auto mode = body.find("allocationMode");
  if (mode == body.end() || mode->is_null()) body["allocationMode"] = "ExactCount";
  if (body["allocationMode"] != "ExactCount") return;
  auto count = body.find("count");
  if (count == body.end() || count->is_null()) body["count"] = 1;
}

void DefaultClaimSpec(json* spec) {
  if (spec == nullptr || !spec->is_object()) return;
  auto devices = spec->find("devices");
  if (devices == spec->end() || !devices->is_object()) return;
  auto requests = devices->find("requests");
  if (requests == devices->end() || !requests->is_array()) return;
  for (json& req : *requests) {
    if (!req.is_object()) continue;
    if (auto e = req.find("exactly"); e != req.end()) DefaultRequestBody(*e);
    if (auto f = req.find("firstAvailable"); f != req.end() && f->is_array()) {
      for (json& sub : *f) DefaultRequestBody(sub);
    }
  }
}

json* SpecOf(json& object) {
  auto it = object.find("spec");
  return it != object.end() && it->is_object() ? &*it : nullptr;
}

}  // namespace

bool IsDraResource(const Resource& r) { return r.group == hami::kube::kResourceClaims.group; }

void DefaultDraObject(const Resource& r, json& object) {
  if (!object.is_object()) return;
  if (Is(r, hami::kube::kResourceClaims)) {
    DefaultClaimSpec(SpecOf(object));
  } else if (Is(r, hami::kube::kResourceClaimTemplates)) {
    if (json* spec = SpecOf(object)) DefaultClaimSpec(SpecOf(*spec));
  }
}

std::optional<ApiStatus> ValidateDraObject(const Resource& r, const json& object) {
  Checker c(r, object);
  if (Is(r, hami::kube::kDeviceClasses)) {
    c.DeviceClass(object);
  } else if (Is(r, hami::kube::kResourceSlices)) {
    c.ResourceSlice(object);
  } else if (Is(r, hami::kube::kResourceClaims)) {
    c.ClaimSpec(c.Object(object, "spec", "spec", true), "spec");
  } else if (Is(r, hami::kube::kResourceClaimTemplates)) {
    const json* spec = c.Object(object, "spec", "spec", true);
    if (spec != nullptr) {
      c.Object(*spec, "metadata", "spec.metadata", false);
      c.ClaimSpec(c.Object(*spec, "spec", "spec.spec", true), "spec.spec");
    }
  }
  return c.result();
}

std::optional<ApiStatus> ValidateDraUpdate(const Resource& r, const json& old, const json& next) {
  auto at = [](const json& j, std::initializer_list<const char*> keys) -> json {
    const json* v = &j;
    for (const char* k : keys) {
      if (!v->is_object() || !v->contains(k)) return nullptr;
      v = &(*v)[k];
    }
    return *v;
  };
  const std::string name = Name(next);
  if (Is(r, hami::kube::kResourceSlices)) {
    for (const char* key : {"driver", "nodeName"}) {
      const json before = at(old, {"spec", key});
      const json after = at(next, {"spec", key});
      if (before != after) {
        return Invalid(r, name, std::string("spec.") + key,
                       "Invalid value: " + after.dump() + ": field is immutable");
      }
    }
  }
  if (Is(r, hami::kube::kResourceClaims) || Is(r, hami::kube::kResourceClaimTemplates)) {
    if (at(old, {"spec"}) != at(next, {"spec"})) {
      return Invalid(r, name, "spec",
                     "Invalid value: " + at(next, {"spec"}).dump() + ": field is immutable");
    }
  }
  return std::nullopt;
}

std::optional<ApiStatus> ValidateClaimStatusUpdate(const json& old, const json& next) {
  Checker c(hami::kube::kResourceClaims, next);
  const json none = json::object();
  const json* old_status = Find(old, "status");
  const json* status = c.Object(next, "status", "status", false);
  if (status != nullptr) c.ClaimStatus(old_status != nullptr ? *old_status : none, *status);
  return c.result();
}

}  // namespace hami::sim::kube
