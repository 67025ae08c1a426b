#include "sim/kube/strategy.h"

#include <algorithm>
#include <string>

#include "kube/time.h"

namespace hami::sim::kube {

using hami::kube::Resource;
using nlohmann::json;

namespace {

bool Is(const Resource& a, const Resource& b) { return a.group == b.group && a.plural == b.plural; }

const char* TypeName(const json& v) { return v.type_name(); }

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// A string field of `parent` or nothing; anything else is a decoding error naming `path`.
std::optional<ApiStatus> CheckString(const json& parent, const char* key, const std::string& path) {
  auto it = parent.find(key);
  if (it == parent.end() || it->is_string()) return std::nullopt;
  if (it->is_null()) return std::nullopt;
  return BadRequest(path + ": must be a string, not " + TypeName(*it));
}

std::optional<ApiStatus> CheckStringMap(json& parent, const char* key, const std::string& path) {
  auto it = parent.find(key);
  if (it == parent.end()) return std::nullopt;
  if (it->is_null()) {
    parent.erase(key);
    return std::nullopt;
  }
  if (!it->is_object())
    return BadRequest(path + ": must be a map of strings, not " + TypeName(*it));
  for (const auto& [k, v] : it->items()) {
    if (!v.is_string()) {
      return BadRequest(path + "[" + Quoted(k) + "]: must be a string, not " + TypeName(v));
    }
  }
  return std::nullopt;
}

std::optional<ApiStatus> CheckObjectOrNull(json& parent, const char* key) {
  auto it = parent.find(key);
  if (it == parent.end()) return std::nullopt;
  if (it->is_null()) {
    parent.erase(key);
    return std::nullopt;
  }
  if (!it->is_object())
    return BadRequest(std::string(key) + ": must be an object, not " + TypeName(*it));
  return std::nullopt;
}

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsAlnum(c) || c == '-'; });
}

bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  for (;;) {
    size_t dot = s.find('.', start);
    std::string_view part = s.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (part.empty() || !IsAlnum(part.front()) || !IsAlnum(part.back())) return false;
    if (!std::all_of(part.begin(), part.end(), [](char c) { return IsAlnum(c) || c == '-'; })) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string Name(const json& object) {
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  auto n = m->find("name");
  return n != m->end() && n->is_string() ? n->get<std::string>() : "";
}

void SetDefault(json& object, const char* key, json value) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) object[key] = std::move(value);
}

std::string DefaultPullPolicy(const json& container) {
  auto it = container.find("image");
  if (it == container.end() || !it->is_string()) return "IfNotPresent";
  const std::string& image = it->get_ref<const std::string&>();
  if (image.find('@') != std::string::npos) return "IfNotPresent";
  const size_t slash = image.rfind('/');
  const size_t colon = image.rfind(':');
  if (colon == std::string::npos || (slash != std::string::npos && colon < slash)) return "Always";
  return image.substr(colon + 1) == "latest" ? "Always" : "IfNotPresent";
}

// The defaults the API server fills into a Pod's spec (its defaulting functions).
void DefaultPodSpec(json& pod) {
  json& spec = pod["spec"];
  if (!spec.is_object()) return;
  SetDefault(spec, "restartPolicy", "Always");
  SetDefault(spec, "dnsPolicy", "ClusterFirst");
  SetDefault(spec, "schedulerName", "default-scheduler");
  SetDefault(spec, "terminationGracePeriodSeconds", 30);
  SetDefault(spec, "securityContext", json::object());
  SetDefault(spec, "enableServiceLinks", true);
  for (const char* list : {"containers", "initContainers"}) {
    auto it = spec.find(list);
    if (it == spec.end() || !it->is_array()) continue;
    for (json& c : *it) {
      if (!c.is_object()) continue;
      SetDefault(c, "terminationMessagePath", "/dev/termination-log");
      SetDefault(c, "terminationMessagePolicy", "File");
      SetDefault(c, "imagePullPolicy", DefaultPullPolicy(c));
      SetDefault(c, "resources", json::object());
    }
  }
}

std::optional<ApiStatus> ValidatePod(const Resource& r, const json& pod) {
  const std::string name = Name(pod);
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) {
    return Invalid(r, name, "spec.containers", "Required value");
  }
  for (const char* list : {"containers", "initContainers"}) {
    auto it = spec->find(list);
    const bool required = std::string_view(list) == "containers";
    if (it == spec->end() || it->is_null()) {
      if (required) return Invalid(r, name, "spec.containers", "Required value");
      continue;
    }
    const std::string field = std::string("spec.") + list;
    if (!it->is_array()) return Invalid(r, name, field, "Invalid value: must be a list");
    if (required && it->empty()) return Invalid(r, name, field, "Required value");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& c = (*it)[i];
      const std::string at = field + "[" + std::to_string(i) + "]";
      if (!c.is_object()) return Invalid(r, name, at, "Invalid value: must be an object");
      auto n = c.find("name");
      if (n == c.end() || !n->is_string() || n->get_ref<const std::string&>().empty()) {
        return Invalid(r, name, at + ".name", "Required value");
      }
    }
  }
  return std::nullopt;
}

std::optional<ApiStatus> Validate(const Resource& r, const json& object) {
  if (Is(r, hami::kube::kPods)) return ValidatePod(r, object);
  if (Is(r, hami::kube::kEvents)) {
    auto it = object.find("involvedObject");
    if (it == object.end() || !it->is_object()) {
      return Invalid(r, Name(object), "involvedObject", "Required value");
    }
  }
  return std::nullopt;
}

// Sets object[key] to other[key], or removes it when `other` has none.
void CopyOrErase(json& object, const json& other, const char* key) {
  auto it = other.find(key);
  if (it == other.end()) {
    object.erase(key);
  } else {
    object[key] = *it;
  }
}

bool ContainsAll(const json& outer, const json& inner) {
  if (!inner.is_array()) return inner.is_null();
  if (!outer.is_array()) return inner.empty();
  return std::all_of(inner.begin(), inner.end(), [&](const json& e) {
    return std::find(outer.begin(), outer.end(), e) != outer.end();
  });
}

// The old spec with the fields a pod update may change taken from `next`: equal to `next`
// exactly when the update changes nothing else.
std::optional<ApiStatus> ValidatePodSpecUpdate(const Resource& r, const std::string& name,
                                               const json& old_spec, const json& next_spec) {
  if (!old_spec.is_object() || !next_spec.is_object()) return std::nullopt;
  json masked = next_spec;
  for (const char* list : {"containers", "initContainers"}) {
    auto o = old_spec.find(list);
    auto n = masked.find(list);
    if (o == old_spec.end() || n == masked.end() || !o->is_array() || !n->is_array() ||
        o->size() != n->size()) {
      continue;
    }
    for (size_t i = 0; i < o->size(); ++i) {
      if ((*o)[i].is_object() && (*n)[i].is_object()) CopyOrErase((*n)[i], (*o)[i], "image");
    }
  }
  CopyOrErase(masked, old_spec, "activeDeadlineSeconds");
  CopyOrErase(masked, old_spec, "terminationGracePeriodSeconds");
  const json none = json::array();
  auto old_tolerations = old_spec.find("tolerations");
  if (ContainsAll(masked.value("tolerations", none),
                  old_tolerations == old_spec.end() ? none : *old_tolerations)) {
    CopyOrErase(masked, old_spec, "tolerations");
  }
  auto old_gates = old_spec.find("schedulingGates");
  if (old_gates != old_spec.end() &&
      ContainsAll(*old_gates, masked.value("schedulingGates", none))) {
    CopyOrErase(masked, old_spec, "schedulingGates");
  }
  if (masked == old_spec) return std::nullopt;
  return Invalid(r, name, "spec",
                 "Forbidden: pod updates may not change fields other than "
                 "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                 "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
                 "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
                 "was previously negative)");
}

// The API's timestamps by resource: parsed (any offset, any fraction) and written back in
// the API server's form, as decoding into metav1.Time/MicroTime and encoding again does.
enum class TimeKind { kTime, kMicroTime };
struct TimeField {
  std::string_view path;  // dotted; "[]" after a name walks each element of a list
  TimeKind kind;
};

std::vector<TimeField> TimeFields(const Resource& r) {
  std::vector<TimeField> out = {{"metadata.creationTimestamp", TimeKind::kTime},
                                {"metadata.deletionTimestamp", TimeKind::kTime}};
  if (Is(r, hami::kube::kPods)) {
    out.insert(out.end(), {{"status.startTime", TimeKind::kTime},
                           {"status.conditions[].lastProbeTime", TimeKind::kTime},
                           {"status.conditions[].lastTransitionTime", TimeKind::kTime}});
  } else if (Is(r, hami::kube::kNodes)) {
    out.insert(out.end(), {{"status.conditions[].lastHeartbeatTime", TimeKind::kTime},
                           {"status.conditions[].lastTransitionTime", TimeKind::kTime}});
  } else if (Is(r, hami::kube::kNamespaces)) {
    out.push_back({"status.conditions[].lastTransitionTime", TimeKind::kTime});
  } else if (Is(r, hami::kube::kLeases)) {
    out.insert(out.end(), {{"spec.acquireTime", TimeKind::kMicroTime},
                           {"spec.renewTime", TimeKind::kMicroTime}});
  } else if (Is(r, hami::kube::kEvents)) {
    out.insert(out.end(), {{"firstTimestamp", TimeKind::kTime},
                           {"lastTimestamp", TimeKind::kTime},
                           {"eventTime", TimeKind::kMicroTime},
                           {"series.lastObservedTime", TimeKind::kMicroTime}});
  }
  return out;
}

std::optional<ApiStatus> NormalizeTimeAt(json& node, std::string_view rest, TimeKind kind,
                                         const std::string& where) {
  const size_t dot = rest.find('.');
  std::string_view segment = rest.substr(0, dot);
  const bool each = segment.ends_with("[]");
  if (each) segment.remove_suffix(2);
  if (!node.is_object()) return std::nullopt;
  auto it = node.find(segment);
  if (it == node.end() || it->is_null()) return std::nullopt;
  const std::string here =
      where.empty() ? std::string(segment) : where + "." + std::string(segment);
  if (dot != std::string_view::npos) {
    const std::string_view tail = rest.substr(dot + 1);
    if (!each) return NormalizeTimeAt(*it, tail, kind, here);
    if (!it->is_array()) return std::nullopt;
    for (size_t i = 0; i < it->size(); ++i) {
      if (auto bad = NormalizeTimeAt((*it)[i], tail, kind, here + "[" + std::to_string(i) + "]")) {
        return bad;
      }
    }
    return std::nullopt;
  }
  if (!it->is_string()) return BadRequest(here + ": a time must be a string, not " + TypeName(*it));
  auto t = hami::kube::ParseTime(it->get_ref<const std::string&>());
  if (!t.ok()) return BadRequest(here + ": " + t.error().message());
  *it = kind == TimeKind::kTime ? hami::kube::FormatTime(*t) : hami::kube::FormatMicroTime(*t);
  return std::nullopt;
}

}  // namespace

bool HasStatusSubresource(const Resource& r) {
  return Is(r, hami::kube::kPods) || Is(r, hami::kube::kNodes) || Is(r, hami::kube::kNamespaces) ||
         Is(r, hami::kube::kResourceQuotas);
}

bool AllowsCreateOnUpdate(const Resource& r) {
  return Is(r, hami::kube::kEvents) || Is(r, hami::kube::kLeases);
}

const std::vector<std::string_view>& SupportedFields(const Resource& r) {
  static const std::vector<std::string_view> kCommon = {"metadata.name", "metadata.namespace"};
  static const std::vector<std::string_view> kPodFields = {
      "metadata.name",      "metadata.namespace", "spec.nodeName",
      "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
      "status.phase",       "status.podIP",       "status.nominatedNodeName"};
  static const std::vector<std::string_view> kNamespaceFields = {
      "metadata.name", "metadata.namespace", "status.phase"};
  static const std::vector<std::string_view> kEventFields = {"metadata.name",
                                                             "metadata.namespace",
                                                             "involvedObject.kind",
                                                             "involvedObject.namespace",
                                                             "involvedObject.name",
                                                             "involvedObject.uid",
                                                             "involvedObject.apiVersion",
                                                             "involvedObject.resourceVersion",
                                                             "involvedObject.fieldPath",
                                                             "reason",
                                                             "reportingComponent",
                                                             "type"};
  if (Is(r, hami::kube::kPods)) return kPodFields;
  if (Is(r, hami::kube::kNamespaces)) return kNamespaceFields;
  if (Is(r, hami::kube::kEvents)) return kEventFields;
  return kCommon;
}

ApiResult<json> DecodeObject(const Resource& r, json object) {
  if (!object.is_object()) {
    return BadRequest(std::string("the body must be a JSON object, not ") + TypeName(object));
  }
  if (auto it = object.find("kind"); it != object.end() && !it->is_null()) {
    if (!it->is_string() || it->get_ref<const std::string&>() != r.kind) {
      return BadRequest("the kind in the data (" +
                        (it->is_string() ? it->get<std::string>() : it->dump()) +
                        ") does not match the expected kind (" + std::string(r.kind) + ")");
    }
  }
  if (auto it = object.find("apiVersion"); it != object.end() && !it->is_null()) {
    if (!it->is_string() || it->get_ref<const std::string&>() != r.ApiVersion()) {
      return BadRequest("the API version in the data (" +
                        (it->is_string() ? it->get<std::string>() : it->dump()) +
                        ") does not match the expected API version (" + r.ApiVersion() + ")");
    }
  }
  object.erase("kind");
  object.erase("apiVersion");
  auto m = object.find("metadata");
  if (m == object.end() || m->is_null()) {
    object["metadata"] = json::object();
    m = object.find("metadata");
  }
  if (!m->is_object())
    return BadRequest(std::string("metadata: must be an object, not ") + TypeName(*m));
  for (const char* key :
       {"name", "generateName", "namespace", "uid", "resourceVersion", "creationTimestamp"}) {
    if (auto bad = CheckString(*m, key, std::string("metadata.") + key)) return std::move(*bad);
  }
  for (const char* key : {"labels", "annotations"}) {
    if (auto bad = CheckStringMap(*m, key, std::string("metadata.") + key)) return std::move(*bad);
  }
  if (auto f = m->find("finalizers"); f != m->end() && !f->is_null()) {
    if (!f->is_array()) return BadRequest("metadata.finalizers: must be a list of strings");
    for (const json& e : *f) {
      if (!e.is_string()) return BadRequest("metadata.finalizers: must be a list of strings");
    }
  }
  // Python sends back the null fields it read ("namespace": null): absent, as in Go.
  for (auto it = m->begin(); it != m->end();) {
    it = it->is_null() ? m->erase(it) : std::next(it);
  }
  for (const char* key : {"spec", "status"}) {
    if (auto bad = CheckObjectOrNull(object, key)) return std::move(*bad);
  }
  for (const TimeField& f : TimeFields(r)) {
    if (auto bad = NormalizeTimeAt(object, f.path, f.kind, "")) return std::move(*bad);
  }
  return object;
}

std::optional<ApiStatus> ValidateName(const Resource& r, std::string_view name) {
  const std::string n(name);
  if (Is(r, hami::kube::kNamespaces)) {
    if (IsDnsLabel(name)) return std::nullopt;
    return Invalid(r, n, "metadata.name",
                   "Invalid value: " + Quoted(name) +
                       ": a lowercase RFC 1123 label must consist of lower case alphanumeric "
                       "characters or '-', and must start and end with an alphanumeric "
                       "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
                       "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')");
  }
  if (IsDnsSubdomain(name)) return std::nullopt;
  return Invalid(r, n, "metadata.name",
                 "Invalid value: " + Quoted(name) +
                     ": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                     "characters, '-' or '.', and must start and end with an alphanumeric "
                     "character (e.g. 'example.com', regex used for validation is "
                     "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
}

ApiResult<json> PrepareForCreate(const Resource& r, json object) {
  if (Is(r, hami::kube::kPods)) {
    DefaultPodSpec(object);
    if (object.contains("spec") && object["spec"].is_object()) {
      SetDefault(object["spec"], "priority", 0);
      SetDefault(object["spec"], "preemptionPolicy", "PreemptLowerPriority");
    }
    object["status"] = {{"phase", "Pending"}};
  } else if (Is(r, hami::kube::kNamespaces)) {
    json& spec = object["spec"];
    if (!spec.is_object()) spec = json::object();
    SetDefault(spec, "finalizers", json::array({"kubernetes"}));
    object["status"] = {{"phase", "Active"}};
  } else if (Is(r, hami::kube::kResourceQuotas)) {
    object["status"] = json::object();
  }
  if (auto bad = Validate(r, object)) return std::move(*bad);
  return object;
}

ApiResult<json> PrepareForUpdate(const Resource& r, Subresource sub, const json& old, json next) {
  switch (sub) {
    case Subresource::kBinding:
      return next;
    case Subresource::kStatus:
      CopyOrErase(next, old, "spec");
      CopyOrErase(next, old, "metadata");
      return next;
    case Subresource::kNone:
      break;
  }
  if (HasStatusSubresource(r)) CopyOrErase(next, old, "status");
  if (Is(r, hami::kube::kNamespaces)) CopyOrErase(next, old, "spec");
  if (Is(r, hami::kube::kPods)) {
    DefaultPodSpec(next);
    if (auto bad = ValidatePod(r, next)) return std::move(*bad);
    auto old_spec = old.find("spec");
    auto next_spec = next.find("spec");
    if (old_spec != old.end() && next_spec != next.end()) {
      if (auto bad = ValidatePodSpecUpdate(r, Name(next), *old_spec, *next_spec)) {
        return std::move(*bad);
      }
    }
    return next;
  }
  if (auto bad = Validate(r, next)) return std::move(*bad);
  return next;
}

}  // namespace hami::sim::kube
