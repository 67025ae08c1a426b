#include "kube/objects.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

namespace hami::kube {
namespace {

using nlohmann::json;

// A field path built on the stack as the parser descends; rendered only for an error.
struct Path {
  const Path* parent = nullptr;
  std::string_view key;  // a member name, or empty for an array element
  size_t index = 0;

  Path Field(std::string_view k) const { return Path{this, k, 0}; }
  Path Element(size_t i) const { return Path{this, {}, i}; }

  void Render(std::string* out) const {
    if (parent == nullptr) return;  // the root
    parent->Render(out);
    if (key.empty()) {
      *out += '[';
      *out += std::to_string(index);
      *out += ']';
      return;
    }
    if (!out->empty()) *out += '.';
    *out += key;
  }
};

std::string_view TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::binary:
      return "binary";
    case json::value_t::discarded:
      return "discarded";
    default:
      return "number";
  }
}

// The member `key` of `obj`, or nullptr when `obj` is not an object or the member is absent or
// null.
const json* MemberOf(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// The string member `key` of `obj`, or "" when there is none (absent, null or not a string).
std::string_view StringMemberOf(const json& obj, std::string_view key) {
  const json* v = MemberOf(obj, key);
  if (v == nullptr || !v->is_string()) return {};
  return v->get_ref<const std::string&>();
}

// Parses one object; knows how to name it in errors.
class Reader {
 public:
  Reader(const json& root, std::string_view kind) : root_(root), kind_(kind) {}

  Error Fail(const Path& path, std::string_view problem) const {
    std::string msg = ObjectName();
    std::string rendered;
    path.Render(&rendered);
    if (!rendered.empty()) {
      msg += ": ";
      msg += rendered;
    }
    msg += ": ";
    msg += problem;
    return Error(ErrorCode::kInvalidArgument, std::move(msg));
  }

  Error WrongType(const Path& path, std::string_view want, const json& got) const {
    std::string problem = "expected ";
    problem += want;
    problem += ", got ";
    problem += TypeName(got);
    return Fail(path, problem);
  }

  Result<const json*> Object(const json& obj, std::string_view key, const Path& path) const {
    const json* v = MemberOf(obj, key);
    if (v != nullptr && !v->is_object()) return WrongType(path.Field(key), "an object", *v);
    return v;
  }

  Result<const json*> Array(const json& obj, std::string_view key, const Path& path) const {
    const json* v = MemberOf(obj, key);
    if (v != nullptr && !v->is_array()) return WrongType(path.Field(key), "an array", *v);
    return v;
  }

  Status String(const json& obj, std::string_view key, const Path& path, std::string* out) const {
    const json* v = MemberOf(obj, key);
    if (v == nullptr) return OkStatus();
    if (!v->is_string()) return WrongType(path.Field(key), "a string", *v);
    *out = v->get_ref<const std::string&>();
    return OkStatus();
  }

  Status Bool(const json& obj, std::string_view key, const Path& path, bool* out) const {
    const json* v = MemberOf(obj, key);
    if (v == nullptr) return OkStatus();
    if (!v->is_boolean()) return WrongType(path.Field(key), "a boolean", *v);
    *out = v->get<bool>();
    return OkStatus();
  }

  template <typename Int>
  Status Integer(const json& obj, std::string_view key, const Path& path,
                 std::optional<Int>* out) const {
    const json* v = MemberOf(obj, key);
    if (v == nullptr) return OkStatus();
    if (!v->is_number_integer()) return WrongType(path.Field(key), "an integer", *v);
    bool fits = v->is_number_unsigned()
                    ? v->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<Int>::max())
                    : v->get<int64_t>() >= std::numeric_limits<Int>::min() &&
                          v->get<int64_t>() <= std::numeric_limits<Int>::max();
    if (!fits) return Fail(path.Field(key), "integer " + v->dump() + " is out of range");
    *out = static_cast<Int>(v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>())
                                                    : v->get<int64_t>());
    return OkStatus();
  }

  Status Time(const json& obj, std::string_view key, const Path& path,
              std::optional<WallTime>* out) const {
    const json* v = MemberOf(obj, key);
    if (v == nullptr) return OkStatus();
    if (!v->is_string()) return WrongType(path.Field(key), "a timestamp string", *v);
    auto t = ParseTime(v->get_ref<const std::string&>());
    if (!t.ok()) return Fail(path.Field(key), t.error().message());
    *out = *t;
    return OkStatus();
  }

  Status Strings(const json& obj, std::string_view key, const Path& path, StringMap* out) const {
    const json* m = HAMI_TRY(Object(obj, key, path));
    if (m == nullptr) return OkStatus();
    Path at = path.Field(key);
    for (auto it = m->begin(); it != m->end(); ++it) {
      if (!it->is_string()) return WrongType(at.Field(it.key()), "a string", *it);
      out->emplace_hint(out->end(), it.key(), it->get_ref<const std::string&>());
    }
    return OkStatus();
  }

  Status Quantities(const json& obj, std::string_view key, const Path& path,
                    QuantityMap* out) const {
    const json* m = HAMI_TRY(Object(obj, key, path));
    if (m == nullptr) return OkStatus();
    Path at = path.Field(key);
    for (auto it = m->begin(); it != m->end(); ++it) {
      Result<Quantity> q = Quantity();
      if (it->is_string()) {
        q = ParseQuantity(it->get_ref<const std::string&>(), {});
      } else if (it->is_number()) {
        q = ParseQuantity(it->dump(), {});
      } else {
        return WrongType(at.Field(it.key()), "a quantity string", *it);
      }
      if (!q.ok()) return Fail(at.Field(it.key()), q.error().message());
      out->emplace_hint(out->end(), it.key(), *q);
    }
    return OkStatus();
  }

  Status Kind() const {
    const json* v = MemberOf(root_, "kind");
    if (v == nullptr) return OkStatus();
    if (!v->is_string()) return WrongType(Path{}.Field("kind"), "a string", *v);
    if (v->get_ref<const std::string&>() != kind_) {
      return Fail(Path{}.Field("kind"),
                  "expected " + std::string(kind_) + ", got " + v->get<std::string>());
    }
    return OkStatus();
  }

  Result<ObjectMeta> Meta() const {
    ObjectMeta meta;
    Path root;
    const json* m = HAMI_TRY(Object(root_, "metadata", root));
    if (m == nullptr) return meta;
    Path at = root.Field("metadata");
    HAMI_TRY(String(*m, "name", at, &meta.name));
    HAMI_TRY(String(*m, "namespace", at, &meta.ns));
    HAMI_TRY(String(*m, "uid", at, &meta.uid));
    HAMI_TRY(String(*m, "resourceVersion", at, &meta.resource_version));
    std::optional<int64_t> generation;
    HAMI_TRY(Integer(*m, "generation", at, &generation));
    meta.generation = generation.value_or(0);
    HAMI_TRY(Strings(*m, "labels", at, &meta.labels));
    HAMI_TRY(Strings(*m, "annotations", at, &meta.annotations));
    const json* owners = HAMI_TRY(Array(*m, "ownerReferences", at));
    if (owners != nullptr) {
      Path list = at.Field("ownerReferences");
      for (size_t i = 0; i < owners->size(); ++i) {
        const json& o = (*owners)[i];
        Path el = list.Element(i);
        if (!o.is_object()) return WrongType(el, "an object", o);
        OwnerReference ref;
        HAMI_TRY(String(o, "apiVersion", el, &ref.api_version));
        HAMI_TRY(String(o, "kind", el, &ref.kind));
        HAMI_TRY(String(o, "name", el, &ref.name));
        HAMI_TRY(String(o, "uid", el, &ref.uid));
        HAMI_TRY(Bool(o, "controller", el, &ref.controller));
        meta.owner_references.push_back(std::move(ref));
      }
    }
    HAMI_TRY(Time(*m, "creationTimestamp", at, &meta.creation_timestamp));
    HAMI_TRY(Time(*m, "deletionTimestamp", at, &meta.deletion_timestamp));
    return meta;
  }

  // Checks the root and kind, then reads the metadata.
  Result<ObjectMeta> Start() const {
    if (!root_.is_object()) return WrongType(Path{}, "a JSON object", root_);
    HAMI_TRY(Kind());
    return Meta();
  }

 private:
  // "Pod default/x", "Node node-1", "Pod (no name)": from the raw JSON, so that it works
  // whatever else is wrong with the object.
  std::string ObjectName() const {
    std::string out(kind_);
    std::string_view name = MetadataString(root_, "name");
    std::string_view ns = MetadataString(root_, "namespace");
    if (name.empty()) {
      out += " (no name)";
      return out;
    }
    out += ' ';
    if (!ns.empty()) {
      out += ns;
      out += '/';
    }
    out += name;
    return out;
  }

  const json& root_;
  std::string_view kind_;
};

Status ReadContainers(const Reader& r, const json& spec, std::string_view key, const Path& path,
                      std::vector<Container>* out) {
  const json* list = HAMI_TRY(r.Array(spec, key, path));
  if (list == nullptr) return OkStatus();
  Path at = path.Field(key);
  out->reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const json& c = (*list)[i];
    Path el = at.Element(i);
    if (!c.is_object()) return r.WrongType(el, "an object", c);
    Container container;
    HAMI_TRY(r.String(c, "name", el, &container.name));
    HAMI_TRY(r.String(c, "image", el, &container.image));
    const json* res = HAMI_TRY(r.Object(c, "resources", el));
    if (res != nullptr) {
      Path rp = el.Field("resources");
      HAMI_TRY(r.Quantities(*res, "limits", rp, &container.limits));
      HAMI_TRY(r.Quantities(*res, "requests", rp, &container.requests));
    }
    const json* env = HAMI_TRY(r.Array(c, "env", el));
    if (env != nullptr) {
      Path ep = el.Field("env");
      for (size_t j = 0; j < env->size(); ++j) {
        const json& e = (*env)[j];
        Path var = ep.Element(j);
        if (!e.is_object()) return r.WrongType(var, "an object", e);
        EnvVar v;
        HAMI_TRY(r.String(e, "name", var, &v.name));
        HAMI_TRY(r.String(e, "value", var, &v.value));
        container.env.push_back(std::move(v));
      }
    }
    out->push_back(std::move(container));
  }
  return OkStatus();
}

Result<PodPhase> PhaseFromName(const Reader& r, std::string_view name, const Path& path) {
  static constexpr PodPhase kPhases[] = {PodPhase::kPending, PodPhase::kRunning,
                                         PodPhase::kSucceeded, PodPhase::kFailed,
                                         PodPhase::kUnknown};
  if (name.empty()) return PodPhase::kUnset;
  for (PodPhase p : kPhases) {
    if (PodPhaseName(p) == name) return p;
  }
  return r.Fail(path, "unknown phase '" + std::string(name) +
                          "' (expected Pending, Running, Succeeded, Failed or Unknown)");
}

}  // namespace

const std::string* ObjectMeta::Annotation(std::string_view key) const {
  auto it = annotations.find(key);
  return it == annotations.end() ? nullptr : &it->second;
}

const std::string* ObjectMeta::Label(std::string_view key) const {
  auto it = labels.find(key);
  return it == labels.end() ? nullptr : &it->second;
}

std::string_view MetadataString(const json& object, std::string_view field) {
  const json* meta = MemberOf(object, "metadata");
  return meta == nullptr ? std::string_view() : StringMemberOf(*meta, field);
}

std::string_view PodPhaseName(PodPhase phase) {
  switch (phase) {
    case PodPhase::kUnset:
      return "";
    case PodPhase::kPending:
      return "Pending";
    case PodPhase::kRunning:
      return "Running";
    case PodPhase::kSucceeded:
      return "Succeeded";
    case PodPhase::kFailed:
      return "Failed";
    case PodPhase::kUnknown:
      return "Unknown";
  }
  return "";
}

Result<ObjectMeta> ParseObjectMeta(const json& object, std::string_view kind) {
  Reader r(object, kind);
  if (!object.is_object()) return r.WrongType(Path{}, "a JSON object", object);
  return r.Meta();
}

Result<Pod> ParsePod(const json& object) {
  Reader r(object, "Pod");
  Pod pod;
  pod.metadata = HAMI_TRY(r.Start());
  Path root;
  const json* spec = HAMI_TRY(r.Object(object, "spec", root));
  if (spec != nullptr) {
    Path sp = root.Field("spec");
    HAMI_TRY(ReadContainers(r, *spec, "initContainers", sp, &pod.init_containers));
    HAMI_TRY(ReadContainers(r, *spec, "containers", sp, &pod.containers));
    HAMI_TRY(r.String(*spec, "nodeName", sp, &pod.node_name));
    HAMI_TRY(r.String(*spec, "schedulerName", sp, &pod.scheduler_name));
    HAMI_TRY(r.Integer(*spec, "priority", sp, &pod.priority));
  }
  const json* status = HAMI_TRY(r.Object(object, "status", root));
  if (status != nullptr) {
    Path st = root.Field("status");
    std::string phase;
    HAMI_TRY(r.String(*status, "phase", st, &phase));
    pod.phase = HAMI_TRY(PhaseFromName(r, phase, st.Field("phase")));
  }
  return pod;
}

Result<Node> ParseNode(const json& object) {
  Reader r(object, "Node");
  Node node;
  node.metadata = HAMI_TRY(r.Start());
  Path root;
  const json* spec = HAMI_TRY(r.Object(object, "spec", root));
  if (spec != nullptr)
    HAMI_TRY(r.Bool(*spec, "unschedulable", root.Field("spec"), &node.unschedulable));
  const json* status = HAMI_TRY(r.Object(object, "status", root));
  if (status == nullptr) return node;
  Path st = root.Field("status");
  HAMI_TRY(r.Quantities(*status, "capacity", st, &node.capacity));
  HAMI_TRY(r.Quantities(*status, "allocatable", st, &node.allocatable));
  const json* conditions = HAMI_TRY(r.Array(*status, "conditions", st));
  if (conditions == nullptr) return node;
  Path cp = st.Field("conditions");
  for (size_t i = 0; i < conditions->size(); ++i) {
    const json& c = (*conditions)[i];
    Path el = cp.Element(i);
    if (!c.is_object()) return r.WrongType(el, "an object", c);
    std::string type, value;
    HAMI_TRY(r.String(c, "type", el, &type));
    if (type != "Ready") continue;
    HAMI_TRY(r.String(c, "status", el, &value));
    if (value == "True") {
      node.ready = ConditionStatus::kTrue;
    } else if (value == "False") {
      node.ready = ConditionStatus::kFalse;
    } else if (value == "Unknown") {
      node.ready = ConditionStatus::kUnknown;
    } else {
      return r.Fail(el.Field("status"),
                    "unknown condition status '" + value + "' (expected True, False or Unknown)");
    }
  }
  return node;
}

Result<Lease> ParseLease(const json& object) {
  Reader r(object, "Lease");
  Lease lease;
  lease.metadata = HAMI_TRY(r.Start());
  Path root;
  const json* spec = HAMI_TRY(r.Object(object, "spec", root));
  if (spec == nullptr) return lease;
  Path sp = root.Field("spec");
  HAMI_TRY(r.String(*spec, "holderIdentity", sp, &lease.holder_identity));
  HAMI_TRY(r.Integer(*spec, "leaseDurationSeconds", sp, &lease.lease_duration_seconds));
  HAMI_TRY(r.Time(*spec, "acquireTime", sp, &lease.acquire_time));
  HAMI_TRY(r.Time(*spec, "renewTime", sp, &lease.renew_time));
  HAMI_TRY(r.Integer(*spec, "leaseTransitions", sp, &lease.lease_transitions));
  return lease;
}

Result<ConfigMap> ParseConfigMap(const json& object) {
  Reader r(object, "ConfigMap");
  ConfigMap cm;
  cm.metadata = HAMI_TRY(r.Start());
  HAMI_TRY(r.Strings(object, "data", Path{}, &cm.data));
  return cm;
}

Result<ResourceQuota> ParseResourceQuota(const json& object) {
  Reader r(object, "ResourceQuota");
  ResourceQuota quota;
  quota.metadata = HAMI_TRY(r.Start());
  Path root;
  const json* spec = HAMI_TRY(r.Object(object, "spec", root));
  if (spec != nullptr) HAMI_TRY(r.Quantities(*spec, "hard", root.Field("spec"), &quota.spec_hard));
  const json* status = HAMI_TRY(r.Object(object, "status", root));
  if (status != nullptr) {
    Path st = root.Field("status");
    HAMI_TRY(r.Quantities(*status, "hard", st, &quota.status_hard));
    HAMI_TRY(r.Quantities(*status, "used", st, &quota.status_used));
  }
  return quota;
}

json LeaseToJson(const Lease& lease, json base) {
  json out = base.is_object() ? std::move(base) : json::object();
  json& meta = out["metadata"];
  if (!meta.is_object()) meta = json::object();
  json& spec = out["spec"];
  if (!spec.is_object()) spec = json::object();
  auto put = [](json& obj, const char* key, bool set, auto&& value) {
    if (set) {
      obj[key] = std::forward<decltype(value)>(value);
    } else {
      obj.erase(key);
    }
  };
  const ObjectMeta& m = lease.metadata;
  out["apiVersion"] = "coordination.k8s.io/v1";
  out["kind"] = "Lease";
  meta["name"] = m.name;
  put(meta, "namespace", !m.ns.empty(), m.ns);
  put(meta, "uid", !m.uid.empty(), m.uid);
  put(meta, "resourceVersion", !m.resource_version.empty(), m.resource_version);
  put(meta, "labels", !m.labels.empty(), m.labels);
  put(meta, "annotations", !m.annotations.empty(), m.annotations);
  put(spec, "holderIdentity", !lease.holder_identity.empty(), lease.holder_identity);
  put(spec, "leaseDurationSeconds", lease.lease_duration_seconds.has_value(),
      lease.lease_duration_seconds.value_or(0));
  auto micro = [](const std::optional<WallTime>& t) {
    return t ? FormatMicroTime(*t) : std::string();
  };
  put(spec, "acquireTime", lease.acquire_time.has_value(), micro(lease.acquire_time));
  put(spec, "renewTime", lease.renew_time.has_value(), micro(lease.renew_time));
  put(spec, "leaseTransitions", lease.lease_transitions.has_value(),
      lease.lease_transitions.value_or(0));
  return out;
}

json LeaseToJson(const Lease& lease) { return LeaseToJson(lease, json::object()); }

ObjectReference ReferenceTo(std::string_view api_version, std::string_view kind,
                            const ObjectMeta& meta) {
  ObjectReference ref;
  ref.api_version = api_version;
  ref.kind = kind;
  ref.ns = meta.ns;
  ref.name = meta.name;
  ref.uid = meta.uid;
  ref.resource_version = meta.resource_version;
  return ref;
}

ObjectReference ReferenceToObject(const Resource& resource, const json& object) {
  ObjectReference ref;
  ref.api_version = StringMemberOf(object, "apiVersion");
  if (ref.api_version.empty()) ref.api_version = resource.ApiVersion();
  ref.kind = StringMemberOf(object, "kind");
  if (ref.kind.empty()) ref.kind = resource.kind;
  ref.ns = MetadataString(object, "namespace");
  ref.name = MetadataString(object, "name");
  ref.uid = MetadataString(object, "uid");
  ref.resource_version = MetadataString(object, "resourceVersion");
  return ref;
}

json ObjectReferenceToJson(const ObjectReference& ref) {
  json out = json::object();
  auto put = [&out](const char* key, const std::string& value) {
    if (!value.empty()) out[key] = value;
  };
  put("apiVersion", ref.api_version);
  put("kind", ref.kind);
  put("namespace", ref.ns);
  put("name", ref.name);
  put("uid", ref.uid);
  put("resourceVersion", ref.resource_version);
  put("fieldPath", ref.field_path);
  return out;
}

}  // namespace hami::kube
