#include "sim/kube/discovery.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <span>
#include <tuple>

#include "common/strings.h"

namespace hami::sim::kube {

namespace {

using hami::kube::Resource;
using nlohmann::json;

constexpr std::string_view kJson = "application/json";
constexpr std::string_view kDiscoveryGroup = "apidiscovery.k8s.io";

// ---- Reading objects defensively ------------------------------------------------------------

const json* Field(const json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

const json* Path(const json& j, std::initializer_list<std::string_view> keys) {
  const json* at = &j;
  for (std::string_view k : keys) {
    at = Field(*at, k);
    if (at == nullptr) return nullptr;
  }
  return at;
}

std::string Str(const json& j, std::initializer_list<std::string_view> keys) {
  const json* v = Path(j, keys);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

int64_t Int(const json& j, std::initializer_list<std::string_view> keys) {
  const json* v = Path(j, keys);
  return v != nullptr && v->is_number_integer() ? v->get<int64_t>() : 0;
}

bool Bool(const json& j, std::initializer_list<std::string_view> keys) {
  const json* v = Path(j, keys);
  return v != nullptr && v->is_boolean() && v->get<bool>();
}

std::span<const json> Array(const json& j, std::initializer_list<std::string_view> keys) {
  const json* v = Path(j, keys);
  if (v == nullptr || !v->is_array()) return {};
  const auto& arr = v->get_ref<const json::array_t&>();
  return {arr.data(), arr.size()};
}

std::string OrNone(std::string s) { return s.empty() ? "<none>" : s; }

// ---- Accept negotiation ---------------------------------------------------------------------

enum class DiscoveryFormat { kLegacy, kAggregatedV2, kAggregatedV2Beta1 };

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct MediaRange {
  std::string_view type;                                              // "application/json", "*/*"
  std::vector<std::pair<std::string_view, std::string_view>> params;  // q excluded
  double q = 1;

  std::string_view Param(std::string_view key) const {
    for (const auto& [k, v] : params) {
      if (k == key) return v;
    }
    return {};
  }
};

std::vector<MediaRange> ParseAccept(std::string_view accept) {
  std::vector<MediaRange> out;
  std::vector<std::string_view> entries = SplitString(accept, ',', false);
  if (entries.back().empty()) entries.pop_back();  // "" and a trailing ','
  for (std::string_view entry : entries) {
    size_t semi = entry.find(';');
    MediaRange m;
    m.type = Trim(entry.substr(0, semi));
    while (semi != std::string_view::npos) {
      entry = entry.substr(semi + 1);
      semi = entry.find(';');
      std::string_view p = entry.substr(0, semi);
      size_t eq = p.find('=');
      if (eq == std::string_view::npos) continue;
      std::string_view key = Trim(p.substr(0, eq)), value = Trim(p.substr(eq + 1));
      if (key == "q") {
        m.q = std::strtod(std::string(value).c_str(), nullptr);
      } else {
        m.params.emplace_back(key, value);
      }
    }
    if (!m.type.empty()) out.push_back(std::move(m));
  }
  return out;
}

// The answer to give: `choose(range)` maps each media range to an answer (nullopt when it
// cannot serve that range); the range kept is the one Go's content negotiation ranks first
// (higher q, then concrete types before wildcards, then more parameters; ties by order).
template <typename T, typename Choose>
std::optional<T> Negotiate(std::string_view accept, Choose choose) {
  std::optional<T> best;
  std::tuple<double, int, size_t> best_rank{};
  for (const MediaRange& m : ParseAccept(accept)) {
    if (m.q <= 0) continue;
    std::optional<T> answer = choose(m);
    if (!answer) continue;
    int concrete = (m.type == "*/*" ? 0 : 1) + (m.type.ends_with("/*") ? 0 : 1);
    std::tuple<double, int, size_t> rank{m.q, concrete, m.params.size()};
    if (!best || rank > best_rank) {
      best = answer;
      best_rank = rank;
    }
  }
  return best;
}

DiscoveryFormat NegotiateDiscovery(std::string_view accept) {
  auto format = Negotiate<DiscoveryFormat>(accept, [](const MediaRange& m) {
    std::optional<DiscoveryFormat> f;
    if (m.type == "*/*" || m.type == "application/*") return f = DiscoveryFormat::kLegacy;
    if (m.type != kJson) return f;
    if (m.params.empty()) return f = DiscoveryFormat::kLegacy;
    if (m.Param("g") != kDiscoveryGroup || m.Param("as") != "APIGroupDiscoveryList") return f;
    if (m.Param("v") == "v2") f = DiscoveryFormat::kAggregatedV2;
    if (m.Param("v") == "v2beta1") f = DiscoveryFormat::kAggregatedV2Beta1;
    return f;
  });
  return format.value_or(DiscoveryFormat::kLegacy);
}

// ---- The resources served -------------------------------------------------------------------

struct Subresource {
  std::string_view parent;  // plural of the resource
  std::string_view name;
  std::string_view kind;
  std::string_view verbs;  // separated by spaces
};

constexpr Subresource kSubresources[] = {
    {"pods", "binding", "Binding", "create"},
    {"pods", "exec", "PodExecOptions", "create get"},
    {"pods", "log", "Pod", "get"},
    {"pods", "status", "Pod", "get patch update"},
    {"nodes", "status", "Node", "get patch update"},
    {"services", "status", "Service", "get patch update"},
    {"deployments", "status", "Deployment", "get patch update"},
    {"daemonsets", "status", "DaemonSet", "get patch update"},
    {"resourceclaims", "status", "ResourceClaim", "get patch update"},
};

// The resources kubectl's "all" category (`kubectl get all`) names.
bool InCategoryAll(const Resource& r) {
  return r.plural == "pods" || r.plural == "services" || r.plural == "deployments" ||
         r.plural == "daemonsets";
}

json VerbList(std::string_view verbs) {
  json out = json::array();
  while (!verbs.empty()) {
    size_t space = verbs.find(' ');
    out.push_back(verbs.substr(0, space));
    verbs = space == std::string_view::npos ? std::string_view() : verbs.substr(space + 1);
  }
  return out;
}

json Verbs(const Resource& r) {
  // Namespaces have no deletecollection in the real API.
  return VerbList(r.plural == "namespaces" ? "create delete get list patch update watch"
                                           : "create delete deletecollection get list patch "
                                             "update watch");
}

// The groups in AllResources() order; the core group is "".
std::vector<std::string_view> Groups() {
  std::vector<std::string_view> groups;
  for (const Resource& r : hami::kube::AllResources()) {
    if (std::find(groups.begin(), groups.end(), r.group) == groups.end()) {
      groups.push_back(r.group);
    }
  }
  return groups;
}

std::vector<std::string_view> Versions(std::string_view group) {
  std::vector<std::string_view> versions;
  for (const Resource& r : hami::kube::AllResources()) {
    if (r.group == group &&
        std::find(versions.begin(), versions.end(), r.version) == versions.end()) {
      versions.push_back(r.version);
    }
  }
  return versions;
}

std::string GroupVersion(std::string_view group, std::string_view version) {
  if (group.empty()) return std::string(version);
  return std::string(group) + "/" + std::string(version);
}

// ---- Aggregated discovery (apidiscovery.k8s.io) ---------------------------------------------

json AggregatedResource(const Resource& r) {
  json gvk = {{"group", r.group}, {"version", r.version}, {"kind", r.kind}};
  json out = {{"resource", r.plural},
              {"responseKind", gvk},
              {"scope", r.namespaced ? "Namespaced" : "Cluster"},
              {"singularResource", r.singular},
              {"verbs", Verbs(r)}};
  if (!r.short_name.empty()) out["shortNames"] = json::array({r.short_name});
  if (InCategoryAll(r)) out["categories"] = json::array({"all"});
  json subs = json::array();
  for (const Subresource& s : kSubresources) {
    if (s.parent != r.plural) continue;
    subs.push_back(
        {{"subresource", s.name},
         {"responseKind", {{"group", r.group}, {"version", r.version}, {"kind", s.kind}}},
         {"verbs", VerbList(s.verbs)}});
  }
  if (!subs.empty()) out["subresources"] = std::move(subs);
  return out;
}

Rendered AggregatedDiscovery(bool core, DiscoveryFormat format) {
  std::string_view version = format == DiscoveryFormat::kAggregatedV2 ? "v2" : "v2beta1";
  json items = json::array();
  for (std::string_view group : Groups()) {
    if (group.empty() != core) continue;
    json versions = json::array();
    for (std::string_view v : Versions(group)) {
      json resources = json::array();
      for (const Resource& r : hami::kube::AllResources()) {
        if (r.group == group && r.version == v) resources.push_back(AggregatedResource(r));
      }
      versions.push_back({{"version", v}, {"resources", resources}, {"freshness", "Current"}});
    }
    items.push_back({{"metadata", {{"name", group}}}, {"versions", versions}});
  }
  json body = {{"kind", "APIGroupDiscoveryList"},
               {"apiVersion", std::string(kDiscoveryGroup) + "/" + std::string(version)},
               {"metadata", json::object()},
               {"items", items}};
  std::string type = std::string(kJson) + ";g=" + std::string(kDiscoveryGroup) +
                     ";v=" + std::string(version) + ";as=APIGroupDiscoveryList";
  return {200, type, body.dump()};
}

// ---- Legacy discovery -----------------------------------------------------------------------

Rendered JsonAnswer(const json& body, int status = 200) {
  return {status, std::string(kJson), body.dump()};
}

Rendered NotFoundStatus() {
  return JsonAnswer({{"kind", "Status"},
                     {"apiVersion", "v1"},
                     {"metadata", json::object()},
                     {"status", "Failure"},
                     {"message", "the server could not find the requested resource"},
                     {"reason", "NotFound"},
                     {"details", json::object()},
                     {"code", 404}},
                    404);
}

json GroupJson(std::string_view group) {
  json versions = json::array();
  for (std::string_view v : Versions(group)) {
    versions.push_back({{"groupVersion", GroupVersion(group, v)}, {"version", v}});
  }
  return {{"name", group}, {"versions", versions}, {"preferredVersion", versions.front()}};
}

Rendered ApiResourceList(std::string_view group, std::string_view version) {
  json resources = json::array();
  for (const Resource& r : hami::kube::AllResources()) {
    if (r.group != group || r.version != version) continue;
    json entry = {{"name", r.plural},
                  {"singularName", r.singular},
                  {"namespaced", r.namespaced},
                  {"kind", r.kind},
                  {"verbs", Verbs(r)}};
    if (!r.short_name.empty()) entry["shortNames"] = json::array({r.short_name});
    if (InCategoryAll(r)) entry["categories"] = json::array({"all"});
    resources.push_back(std::move(entry));
    for (const Subresource& s : kSubresources) {
      if (s.parent != r.plural) continue;
      resources.push_back({{"name", std::string(r.plural) + "/" + std::string(s.name)},
                           {"singularName", ""},
                           {"namespaced", r.namespaced},
                           {"kind", s.kind},
                           {"verbs", VerbList(s.verbs)}});
    }
  }
  return JsonAnswer({{"kind", "APIResourceList"},
                     {"apiVersion", "v1"},
                     {"groupVersion", GroupVersion(group, version)},
                     {"resources", resources}});
}

Rendered Version() {
  // kServerGitVersion is "v<major>.<minor>.<patch>[-suffix]".
  std::string_view v = kServerGitVersion.substr(1);
  std::string_view major = v.substr(0, v.find('.'));
  v.remove_prefix(major.size() + 1);
  std::string_view minor = v.substr(0, v.find('.'));
#if defined(__x86_64__)
  constexpr std::string_view kPlatform = "linux/amd64";
#elif defined(__aarch64__)
  constexpr std::string_view kPlatform = "linux/arm64";
#else
  constexpr std::string_view kPlatform = "linux/unknown";
#endif
  return JsonAnswer({{"major", major},
                     {"minor", minor},
                     {"gitVersion", kServerGitVersion},
                     {"gitCommit", "0000000000000000000000000000000000000000"},
                     {"gitTreeState", "clean"},
                     {"buildDate", "2025-04-22T00:00:00Z"},
                     {"goVersion", "go1.23.8"},
                     {"compiler", "gc"},
                     {"platform", kPlatform}});
}

// ---- OpenAPI v3 -----------------------------------------------------------------------------

std::string Capitalized(std::string_view s) {
  std::string out(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = char(out[0] - 'a' + 'A');
  return out;
}

json QueryParameter(std::string_view name, std::string_view description) {
  return {{"name", name},
          {"in", "query"},
          {"description", description},
          {"schema", {{"type", "string"}, {"uniqueItems", true}}}};
}

// One path per kind with the PATCH operation kubectl looks for: its group-version-kind and a
// fieldValidation query parameter tell kubectl the server validates fields itself.
json OpenApiDocument(std::string_view group, std::string_view version) {
  json paths = json::object();
  std::string id_group = group.empty() ? "Core" : Capitalized(group.substr(0, group.find('.')));
  for (const Resource& r : hami::kube::AllResources()) {
    if (r.group != group || r.version != version) continue;
    std::string path = hami::kube::ObjectPath(r, "{namespace}", "{name}");
    json patch_types = json::object();
    for (const char* t :
         {"application/json-patch+json", "application/merge-patch+json",
          "application/strategic-merge-patch+json", "application/apply-patch+yaml"}) {
      patch_types[t] = {{"schema", {{"type", "object"}}}};
    }
    json op = {
        {"operationId", "patch" + id_group + Capitalized(version) +
                            (r.namespaced ? "Namespaced" : "") + std::string(r.kind)},
        {"description", "partially update the specified " + std::string(r.kind)},
        {"x-kubernetes-action", "patch"},
        {"x-kubernetes-group-version-kind",
         {{"group", r.group}, {"version", r.version}, {"kind", r.kind}}},
        {"parameters",
         json::array(
             {QueryParameter("dryRun", "When present, modifications are not persisted."),
              QueryParameter("fieldManager", "The name of the actor making the change."),
              QueryParameter("fieldValidation",
                             "Ignore, Warn or Strict: how the server treats unknown fields."),
              QueryParameter("force", "Force an apply patch over conflicts.")})},
        {"requestBody", {{"content", patch_types}, {"required", true}}},
        {"responses", {{"200", {{"description", "OK"}}}, {"201", {{"description", "Created"}}}}}};
    json path_params = json::array();
    path_params.push_back(
        {{"name", "name"}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}});
    if (r.namespaced) {
      path_params.push_back({{"name", "namespace"},
                             {"in", "path"},
                             {"required", true},
                             {"schema", {{"type", "string"}}}});
    }
    paths[path] = {{"parameters", path_params}, {"patch", op}};
  }
  return {{"openapi", "3.0.0"},
          {"info", {{"title", "Kubernetes"}, {"version", kServerGitVersion}}},
          {"paths", paths},
          {"components", {{"schemas", json::object()}}}};
}

std::string ContentHash(std::string_view text) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llX", static_cast<unsigned long long>(h));
  return buf;
}

// "api/v1" or "apis/coordination.k8s.io/v1": how /openapi/v3 names a group version.
std::string OpenApiKey(std::string_view group, std::string_view version) {
  return group.empty() ? "api/" + std::string(version) : "apis/" + GroupVersion(group, version);
}

Rendered OpenApiRoot() {
  json paths = json::object();
  for (std::string_view group : Groups()) {
    for (std::string_view v : Versions(group)) {
      std::string key = OpenApiKey(group, v);
      std::string hash = ContentHash(OpenApiDocument(group, v).dump());
      paths[key] = {{"serverRelativeURL", "/openapi/v3/" + key + "?hash=" + hash}};
    }
  }
  return JsonAnswer({{"paths", paths}});
}

// ---- Tables ---------------------------------------------------------------------------------

struct Column {
  std::string_view name;
  std::string_view type;
  std::string_view format;
  std::string_view description;
  int priority;
};

constexpr std::string_view kNameDoc =
    "Name must be unique within a namespace. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
constexpr std::string_view kAgeDoc =
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created.";

const Column kNameColumn = {"Name", "string", "name", kNameDoc, 0};
const Column kAgeColumn = {"Age", "string", "", kAgeDoc, 0};

const Column kPodColumns[] = {
    kNameColumn,
    {"Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic.", 0},
    {"Status", "string", "", "The aggregate status of the containers in this pod.", 0},
    {"Restarts", "string", "",
     "The number of times the containers in this pod have been restarted and when the last "
     "container in this pod has restarted.",
     0},
    kAgeColumn,
    {"IP", "string", "", "IP address allocated to the pod.", 1},
    {"Node", "string", "", "Name of the Node where the pod is assigned.", 1},
    {"Nominated Node", "string", "", "Name of the Node where the pod is nominated.", 1},
    {"Readiness Gates", "string", "", "Pod readiness gates that are true, of all.", 1},
};

const Column kNodeColumns[] = {
    kNameColumn,
    {"Status", "string", "", "The status of the node.", 0},
    {"Roles", "string", "", "The roles of the node.", 0},
    kAgeColumn,
    {"Version", "string", "", "Kubelet version reported by the node.", 0},
    {"Internal-IP", "string", "", "The node's internal IP address.", 1},
    {"External-IP", "string", "", "The node's external IP address.", 1},
    {"OS-Image", "string", "", "OS image reported by the node.", 1},
    {"Kernel-Version", "string", "", "Kernel version reported by the node.", 1},
    {"Container-Runtime", "string", "", "Container runtime version reported by the node.", 1},
};

const Column kEventColumns[] = {
    {"Last Seen", "string", "", "The time at which the most recent occurrence was recorded.", 0},
    {"Type", "string", "", "Type of this event (Normal, Warning).", 0},
    {"Reason", "string", "", "Short, machine understandable reason for the event.", 0},
    {"Object", "string", "", "The object this event is about.", 0},
    {"Subobject", "string", "", "The part of the object the event is about.", 1},
    {"Source", "string", "", "The component reporting this event.", 1},
    {"Message", "string", "", "A human-readable description of the event.", 0},
    {"First Seen", "string", "", "The time at which the event was first recorded.", 1},
    {"Count", "string", "", "The number of times this event has occurred.", 1},
    {"Name", "string", "name", kNameDoc, 1},
};

const Column kNamespaceColumns[] = {
    kNameColumn,
    {"Status", "string", "", "The phase of the namespace.", 0},
    kAgeColumn,
};

const Column kConfigMapColumns[] = {
    kNameColumn,
    {"Data", "string", "", "Number of data and binaryData keys.", 0},
    kAgeColumn,
};

const Column kResourceQuotaColumns[] = {
    kNameColumn,
    kAgeColumn,
    {"Request", "string", "", "Used and hard requests of the quota.", 0},
    {"Limit", "string", "", "Used and hard limits of the quota.", 0},
};

const Column kLeaseColumns[] = {
    kNameColumn,
    {"Holder", "string", "", "The holder of the lease.", 0},
    kAgeColumn,
};

const Column kSecretColumns[] = {
    kNameColumn,
    {"Type", "string", "", "The type of the secret.", 0},
    {"Data", "integer", "", "Number of data keys.", 0},
    kAgeColumn,
};

const Column kServiceAccountColumns[] = {
    kNameColumn,
    {"Secrets", "integer", "", "Number of secrets the service account names.", 0},
    kAgeColumn,
};

const Column kServiceColumns[] = {
    kNameColumn,
    {"Type", "string", "", "How the service is exposed.", 0},
    {"Cluster-IP", "string", "", "The service's cluster IP address.", 0},
    {"External-IP", "string", "", "Addresses outside the cluster that reach the service.", 0},
    {"Port(s)", "string", "", "The ports the service exposes.", 0},
    kAgeColumn,
    {"Selector", "string", "", "The labels of the pods the service routes to.", 1},
};

constexpr std::string_view kContainersDoc = "Names of each container in the template.";
constexpr std::string_view kImagesDoc = "Images referenced by each container in the template.";
constexpr std::string_view kSelectorDoc = "Label selector of the pods the controller manages.";

const Column kDeploymentColumns[] = {
    kNameColumn,
    {"Ready", "string", "", "Number of the pod with ready state.", 0},
    {"Up-to-date", "integer", "", "Total number of pods with the desired template.", 0},
    {"Available", "integer", "", "Number of available pods.", 0},
    kAgeColumn,
    {"Containers", "string", "", kContainersDoc, 1},
    {"Images", "string", "", kImagesDoc, 1},
    {"Selector", "string", "", kSelectorDoc, 1},
};

const Column kDaemonSetColumns[] = {
    kNameColumn,
    {"Desired", "integer", "", "The number of nodes that should run the daemon pod.", 0},
    {"Current", "integer", "", "The number of nodes running at least one daemon pod.", 0},
    {"Ready", "integer", "", "The number of nodes whose daemon pod is ready.", 0},
    {"Up-to-date", "integer", "", "The number of nodes running the updated daemon pod.", 0},
    {"Available", "integer", "", "The number of nodes whose daemon pod is available.", 0},
    {"Node Selector", "string", "", "The nodes the daemon pod may run on.", 0},
    kAgeColumn,
    {"Containers", "string", "", kContainersDoc, 1},
    {"Images", "string", "", kImagesDoc, 1},
    {"Selector", "string", "", kSelectorDoc, 1},
};

const Column kRoleColumns[] = {
    kNameColumn,
    {"Created At", "string", "date-time", kAgeDoc, 0},
};

const Column kRoleBindingColumns[] = {
    kNameColumn,
    {"Role", "string", "", "The role the binding grants.", 0},
    kAgeColumn,
    {"Users", "string", "", "Users in the binding.", 1},
    {"Groups", "string", "", "Groups in the binding.", 1},
    {"ServiceAccounts", "string", "", "Service accounts in the binding.", 1},
};

const Column kWebhookConfigurationColumns[] = {
    kNameColumn,
    {"Webhooks", "integer", "", "Number of webhooks in the configuration.", 0},
    kAgeColumn,
};

const Column kPriorityClassColumns[] = {
    kNameColumn,
    {"Value", "integer", "", "The priority of the pods that name the class.", 0},
    {"Global-Default", "boolean", "", "Whether pods that name no class get this one.", 0},
    kAgeColumn,
    {"PreemptionPolicy", "string", "", "Whether pods of the class may preempt others.", 0},
};

const Column kResourceClaimColumns[] = {
    kNameColumn,
    {"State", "string", "", "A summary of the current state (allocated, pending, reserved, etc.).",
     0},
    kAgeColumn,
};

const Column kResourceSliceColumns[] = {
    kNameColumn,
    {"Node", "string", "", "The node providing the devices of this slice.", 0},
    {"Driver", "string", "", "The driver providing the devices of this slice.", 0},
    {"Pool", "string", "", "The pool of the devices of this slice.", 0},
    kAgeColumn,
};

const Column kDefaultColumns[] = {kNameColumn, kAgeColumn};

std::span<const Column> ColumnsOf(const Resource& r) {
  if (r.group.empty()) {
    if (r.plural == "pods") return kPodColumns;
    if (r.plural == "nodes") return kNodeColumns;
    if (r.plural == "events") return kEventColumns;
    if (r.plural == "namespaces") return kNamespaceColumns;
    if (r.plural == "configmaps") return kConfigMapColumns;
    if (r.plural == "resourcequotas") return kResourceQuotaColumns;
  }
  if (r.group.empty()) {
    if (r.plural == "secrets") return kSecretColumns;
    if (r.plural == "serviceaccounts") return kServiceAccountColumns;
    if (r.plural == "services") return kServiceColumns;
  }
  if (r.group == "coordination.k8s.io" && r.plural == "leases") return kLeaseColumns;
  if (r.group == "apps") {
    if (r.plural == "deployments") return kDeploymentColumns;
    if (r.plural == "daemonsets") return kDaemonSetColumns;
  }
  if (r.group == "rbac.authorization.k8s.io") {
    if (r.plural == "clusterroles" || r.plural == "roles") return kRoleColumns;
    return kRoleBindingColumns;
  }
  if (r.group == "admissionregistration.k8s.io") return kWebhookConfigurationColumns;
  if (r.group == "scheduling.k8s.io") return kPriorityClassColumns;
  if (r.group == "resource.k8s.io") {
    if (r.plural == "resourceclaims") return kResourceClaimColumns;
    if (r.plural == "resourceslices") return kResourceSliceColumns;
  }
  return kDefaultColumns;  // deviceclasses, resourceclaimtemplates: Name, Age
}

// kubectl's translateTimestampSince: the age of a timestamp field, "<unknown>" when absent.
std::string AgeOf(const json& obj, std::initializer_list<std::string_view> keys,
                  hami::kube::WallTime now) {
  std::string text = Str(obj, keys);
  if (text.empty()) return "<unknown>";
  auto t = hami::kube::ParseTime(text);
  if (!t.ok()) return "<unknown>";
  return FormatAge(now - *t);
}

bool HasCondition(const json& pod, std::string_view type, bool want_true) {
  for (const json& c : Array(pod, {"status", "conditions"})) {
    if (Str(c, {"type"}) == type) return !want_true || Str(c, {"status"}) == "True";
  }
  return false;
}

// A terminated container's reason, or "<prefix>Signal:N" / "<prefix>ExitCode:N" without one.
std::string TerminatedReason(const json& terminated, std::string_view prefix) {
  std::string reason = Str(terminated, {"reason"});
  if (!reason.empty()) return std::string(prefix) + reason;
  int64_t signal = Int(terminated, {"signal"});
  if (signal != 0) return std::string(prefix) + "Signal:" + std::to_string(signal);
  return std::string(prefix) + "ExitCode:" + std::to_string(Int(terminated, {"exitCode"}));
}

// The later of `latest` and the status's lastState.terminated.finishedAt.
void NoteRestart(const json& status, std::string& latest_text, hami::kube::WallTime& latest) {
  std::string text = Str(status, {"lastState", "terminated", "finishedAt"});
  if (text.empty()) return;
  auto t = hami::kube::ParseTime(text);
  if (t.ok() && (latest_text.empty() || *t > latest)) {
    latest = *t;
    latest_text = text;
  }
}

// The cells of printPod in kubectl's server-side printers.
json PodCells(const json& pod, hami::kube::WallTime now) {
  std::span<const json> containers = Array(pod, {"spec", "containers"});
  std::span<const json> init_specs = Array(pod, {"spec", "initContainers"});
  auto restartable_init = [&init_specs](const std::string& name) {
    for (const json& c : init_specs) {
      if (Str(c, {"name"}) == name) return Str(c, {"restartPolicy"}) == "Always";
    }
    return false;
  };
  int64_t total = int64_t(containers.size());
  for (const json& c : init_specs) {
    if (Str(c, {"restartPolicy"}) == "Always") ++total;
  }
  std::string phase = Str(pod, {"status", "phase"});
  std::string reason = Str(pod, {"status", "reason"});
  if (reason.empty()) reason = phase;
  for (const json& c : Array(pod, {"status", "conditions"})) {
    if (Str(c, {"type"}) == "PodScheduled" && Str(c, {"reason"}) == "SchedulingGated") {
      reason = "SchedulingGated";
    }
  }

  int64_t restarts = 0, sidecar_restarts = 0, ready = 0;
  std::string last_restart_text, sidecar_restart_text;
  hami::kube::WallTime last_restart{}, sidecar_restart{};
  bool initializing = false;
  std::span<const json> init_statuses = Array(pod, {"status", "initContainerStatuses"});
  for (size_t i = 0; i < init_statuses.size(); ++i) {
    const json& s = init_statuses[i];
    restarts += Int(s, {"restartCount"});
    NoteRestart(s, last_restart_text, last_restart);
    bool sidecar = restartable_init(Str(s, {"name"}));
    if (sidecar) {
      sidecar_restarts += Int(s, {"restartCount"});
      NoteRestart(s, sidecar_restart_text, sidecar_restart);
    }
    const json* terminated = Path(s, {"state", "terminated"});
    std::string waiting = Str(s, {"state", "waiting", "reason"});
    if (terminated != nullptr && Int(*terminated, {"exitCode"}) == 0) continue;
    if (sidecar && Bool(s, {"started"})) {
      if (Bool(s, {"ready"})) ++ready;
      continue;
    }
    if (terminated != nullptr) {
      reason = TerminatedReason(*terminated, "Init:");
    } else if (!waiting.empty() && waiting != "PodInitializing") {
      reason = "Init:" + waiting;
    } else {
      reason = "Init:" + std::to_string(i) + "/" + std::to_string(init_specs.size());
    }
    initializing = true;
    break;
  }

  if (!initializing || HasCondition(pod, "Initialized", true)) {
    restarts = sidecar_restarts;
    last_restart_text = sidecar_restart_text;
    last_restart = sidecar_restart;
    bool running = false;
    std::span<const json> statuses = Array(pod, {"status", "containerStatuses"});
    for (size_t i = statuses.size(); i-- > 0;) {
      const json& s = statuses[i];
      restarts += Int(s, {"restartCount"});
      NoteRestart(s, last_restart_text, last_restart);
      std::string waiting = Str(s, {"state", "waiting", "reason"});
      const json* terminated = Path(s, {"state", "terminated"});
      if (!waiting.empty()) {
        reason = waiting;
      } else if (terminated != nullptr) {
        reason = TerminatedReason(*terminated, "");
      } else if (Bool(s, {"ready"}) && Path(s, {"state", "running"}) != nullptr) {
        running = true;
        ++ready;
      }
    }
    if (reason == "Completed" && running) {
      reason = HasCondition(pod, "Ready", true) ? "Running" : "NotReady";
    }
  }

  if (Path(pod, {"metadata", "deletionTimestamp"}) != nullptr) {
    if (Str(pod, {"status", "reason"}) == "NodeLost") {
      reason = "Unknown";
    } else if (phase != "Succeeded" && phase != "Failed") {
      reason = "Terminating";
    }
  }

  std::string restarts_cell = std::to_string(restarts);
  if (restarts != 0 && !last_restart_text.empty()) {
    restarts_cell += " (" + FormatAge(now - last_restart) + " ago)";
  }

  std::string ip;
  std::span<const json> ips = Array(pod, {"status", "podIPs"});
  if (!ips.empty()) ip = Str(ips[0], {"ip"});
  if (ip.empty()) ip = Str(pod, {"status", "podIP"});

  std::string gates = "<none>";
  std::span<const json> gate_specs = Array(pod, {"spec", "readinessGates"});
  if (!gate_specs.empty()) {
    size_t true_gates = 0;
    for (const json& g : gate_specs) {
      if (HasCondition(pod, Str(g, {"conditionType"}), true)) ++true_gates;
    }
    gates = std::to_string(true_gates) + "/" + std::to_string(gate_specs.size());
  }

  return json::array({Str(pod, {"metadata", "name"}),
                      std::to_string(ready) + "/" + std::to_string(total), reason, restarts_cell,
                      AgeOf(pod, {"metadata", "creationTimestamp"}, now), OrNone(ip),
                      OrNone(Str(pod, {"spec", "nodeName"})),
                      OrNone(Str(pod, {"status", "nominatedNodeName"})), gates});
}

std::string NodeAddress(const json& node, std::string_view type) {
  for (const json& a : Array(node, {"status", "addresses"})) {
    if (Str(a, {"type"}) == type) return Str(a, {"address"});
  }
  return {};
}

std::string OrUnknown(std::string s) { return s.empty() ? "<unknown>" : s; }

json NodeCells(const json& node, hami::kube::WallTime now) {
  std::string status;
  for (const json& c : Array(node, {"status", "conditions"})) {
    if (Str(c, {"type"}) == "Ready") status = Str(c, {"status"}) == "True" ? "Ready" : "NotReady";
  }
  if (status.empty()) status = "Unknown";
  if (Bool(node, {"spec", "unschedulable"})) status += ",SchedulingDisabled";

  constexpr std::string_view kRolePrefix = "node-role.kubernetes.io/";
  std::set<std::string> roles;
  if (const json* labels = Path(node, {"metadata", "labels"}); labels && labels->is_object()) {
    for (const auto& [key, value] : labels->items()) {
      if (key.starts_with(kRolePrefix) && key.size() > kRolePrefix.size()) {
        roles.insert(key.substr(kRolePrefix.size()));
      } else if (key == "kubernetes.io/role" && value.is_string() &&
                 !value.get<std::string>().empty()) {
        roles.insert(value.get<std::string>());
      }
    }
  }
  std::string role_cell;
  for (const std::string& role : roles) role_cell += (role_cell.empty() ? "" : ",") + role;

  return json::array({Str(node, {"metadata", "name"}), status, OrNone(role_cell),
                      AgeOf(node, {"metadata", "creationTimestamp"}, now),
                      Str(node, {"status", "nodeInfo", "kubeletVersion"}),
                      OrNone(NodeAddress(node, "InternalIP")),
                      OrNone(NodeAddress(node, "ExternalIP")),
                      OrUnknown(Str(node, {"status", "nodeInfo", "osImage"})),
                      OrUnknown(Str(node, {"status", "nodeInfo", "kernelVersion"})),
                      OrUnknown(Str(node, {"status", "nodeInfo", "containerRuntimeVersion"}))});
}

std::string Lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return s;
}

json EventCells(const json& ev, hami::kube::WallTime now) {
  std::string last_seen;
  std::string first_seen;
  int64_t count = Int(ev, {"count"});
  if (Path(ev, {"series"}) != nullptr) {
    last_seen = AgeOf(ev, {"series", "lastObservedTime"}, now);
    first_seen = AgeOf(ev, {"eventTime"}, now);
    count = Int(ev, {"series", "count"});
  } else {
    bool has_last = !Str(ev, {"lastTimestamp"}).empty();
    bool has_first = !Str(ev, {"firstTimestamp"}).empty();
    last_seen = AgeOf(ev, {has_last ? "lastTimestamp" : "eventTime"}, now);
    first_seen = AgeOf(ev, {has_first ? "firstTimestamp" : "eventTime"}, now);
  }
  std::string source = Str(ev, {"source", "component"});
  std::string host = Str(ev, {"source", "host"});
  if (source.empty()) source = Str(ev, {"reportingComponent"});
  if (!host.empty()) source += ", " + host;
  return json::array(
      {last_seen, Str(ev, {"type"}), Str(ev, {"reason"}),
       Lower(Str(ev, {"involvedObject", "kind"})) + "/" + Str(ev, {"involvedObject", "name"}),
       Str(ev, {"involvedObject", "fieldPath"}), source, Str(ev, {"message"}), first_seen,
       std::to_string(count), Str(ev, {"metadata", "name"})});
}

std::string QuantityText(const json& q) {
  if (q.is_string()) return q.get<std::string>();
  if (q.is_number()) return q.dump();
  return "0";
}

json ResourceQuotaCells(const json& quota, hami::kube::WallTime now) {
  // A real quota controller fills status.hard; without one, the spec's limits are shown.
  const json* hard = Path(quota, {"status", "hard"});
  if (hard == nullptr || !hard->is_object() || hard->empty()) hard = Path(quota, {"spec", "hard"});
  const json* used = Path(quota, {"status", "used"});
  std::string requests, limits;
  if (hard != nullptr && hard->is_object()) {
    for (const auto& [name, value] : hard->items()) {  // sorted by name
      const json* u = used != nullptr ? Field(*used, name) : nullptr;
      std::string entry = name + ": " + (u ? QuantityText(*u) : "0") + "/" + QuantityText(value);
      std::string& column = name.starts_with("limits.") ? limits : requests;
      column += (column.empty() ? "" : ", ") + entry;
    }
  }
  return json::array({Str(quota, {"metadata", "name"}),
                      AgeOf(quota, {"metadata", "creationTimestamp"}, now), requests, limits});
}

size_t MapSize(const json& obj, std::initializer_list<std::string_view> keys) {
  const json* v = Path(obj, keys);
  return v != nullptr && v->is_object() ? v->size() : 0;
}

std::string Joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

// "k=v,k2=v2" of a map of strings (sorted by key), "<none>" when empty.
std::string MapText(const json& obj, std::initializer_list<std::string_view> keys) {
  std::vector<std::string> parts;
  const json* v = Path(obj, keys);
  if (v != nullptr && v->is_object()) {
    for (const auto& [k, value] : v->items()) {
      parts.push_back(k + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
    }
  }
  return OrNone(Joined(parts));
}

// metav1.FormatLabelSelector: matchLabels as k=v, matchExpressions as `k in (a,b)`, `k`, `!k`.
std::string SelectorText(const json& obj, std::initializer_list<std::string_view> keys) {
  const json* sel = Path(obj, keys);
  if (sel == nullptr || !sel->is_object()) return "<none>";
  std::vector<std::string> parts;
  if (const json* labels = Field(*sel, "matchLabels"); labels && labels->is_object()) {
    for (const auto& [k, value] : labels->items()) {
      parts.push_back(k + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
    }
  }
  for (const json& e : Array(*sel, {"matchExpressions"})) {
    std::string key = Str(e, {"key"});
    std::string op = Str(e, {"operator"});
    std::vector<std::string> values;
    for (const json& v : Array(e, {"values"})) {
      if (v.is_string()) values.push_back(v.get<std::string>());
    }
    if (op == "Exists") {
      parts.push_back(key);
    } else if (op == "DoesNotExist") {
      parts.push_back("!" + key);
    } else {
      parts.push_back(key + (op == "NotIn" ? " notin (" : " in (") + Joined(values) + ")");
    }
  }
  return OrNone(Joined(parts));
}

// The template's container names and images, comma-separated.
std::pair<std::string, std::string> ContainersAndImages(const json& obj) {
  std::vector<std::string> names, images;
  for (const json& c : Array(obj, {"spec", "template", "spec", "containers"})) {
    names.push_back(Str(c, {"name"}));
    images.push_back(Str(c, {"image"}));
  }
  return {Joined(names), Joined(images)};
}

json ServiceCells(const json& svc, hami::kube::WallTime now) {
  std::string type = Str(svc, {"spec", "type"});
  if (type.empty()) type = "ClusterIP";
  std::vector<std::string> external;
  for (const json& ip : Array(svc, {"spec", "externalIPs"})) {
    if (ip.is_string()) external.push_back(ip.get<std::string>());
  }
  if (type == "LoadBalancer") {
    for (const json& ing : Array(svc, {"status", "loadBalancer", "ingress"})) {
      std::string a = Str(ing, {"ip"});
      if (a.empty()) a = Str(ing, {"hostname"});
      if (!a.empty()) external.push_back(a);
    }
  }
  std::string external_cell = Joined(external);
  if (external_cell.empty()) {
    if (type == "LoadBalancer") {
      external_cell = "<pending>";
    } else if (type == "ExternalName") {
      external_cell = Str(svc, {"spec", "externalName"});
    }
  }
  std::vector<std::string> ports;
  for (const json& p : Array(svc, {"spec", "ports"})) {
    std::string protocol = Str(p, {"protocol"});
    if (protocol.empty()) protocol = "TCP";
    std::string text = std::to_string(Int(p, {"port"}));
    if (int64_t node_port = Int(p, {"nodePort"}); node_port != 0) {
      text += ":" + std::to_string(node_port);
    }
    ports.push_back(text + "/" + protocol);
  }
  std::string cluster_ip = Str(svc, {"spec", "clusterIP"});
  return json::array({Str(svc, {"metadata", "name"}), type, OrNone(cluster_ip),
                      OrNone(external_cell), OrNone(Joined(ports)),
                      AgeOf(svc, {"metadata", "creationTimestamp"}, now),
                      MapText(svc, {"spec", "selector"})});
}

json DeploymentCells(const json& d, hami::kube::WallTime now) {
  const json* replicas = Path(d, {"spec", "replicas"});
  const int64_t desired =
      replicas != nullptr && replicas->is_number_integer() ? replicas->get<int64_t>() : 1;
  auto [containers, images] = ContainersAndImages(d);
  return json::array(
      {Str(d, {"metadata", "name"}),
       std::to_string(Int(d, {"status", "readyReplicas"})) + "/" + std::to_string(desired),
       Int(d, {"status", "updatedReplicas"}), Int(d, {"status", "availableReplicas"}),
       AgeOf(d, {"metadata", "creationTimestamp"}, now), containers, images,
       SelectorText(d, {"spec", "selector"})});
}

json DaemonSetCells(const json& ds, hami::kube::WallTime now) {
  auto [containers, images] = ContainersAndImages(ds);
  return json::array(
      {Str(ds, {"metadata", "name"}), Int(ds, {"status", "desiredNumberScheduled"}),
       Int(ds, {"status", "currentNumberScheduled"}), Int(ds, {"status", "numberReady"}),
       Int(ds, {"status", "updatedNumberScheduled"}), Int(ds, {"status", "numberAvailable"}),
       MapText(ds, {"spec", "template", "spec", "nodeSelector"}),
       AgeOf(ds, {"metadata", "creationTimestamp"}, now), containers, images,
       SelectorText(ds, {"spec", "selector"})});
}

json RoleBindingCells(const json& b, hami::kube::WallTime now) {
  std::vector<std::string> users, groups, accounts;
  for (const json& subject : Array(b, {"subjects"})) {
    const std::string kind = Str(subject, {"kind"});
    const std::string name = Str(subject, {"name"});
    if (kind == "User") {
      users.push_back(name);
    } else if (kind == "Group") {
      groups.push_back(name);
    } else if (kind == "ServiceAccount") {
      accounts.push_back(Str(subject, {"namespace"}) + "/" + name);
    }
  }
  return json::array({Str(b, {"metadata", "name"}),
                      Str(b, {"roleRef", "kind"}) + "/" + Str(b, {"roleRef", "name"}),
                      AgeOf(b, {"metadata", "creationTimestamp"}, now), Joined(users),
                      Joined(groups), Joined(accounts)});
}

// A ResourceClaim's State cell: "deleted" while being deleted, then "pending" (not allocated)
// or "allocated" with ",reserved" (reserved for a consumer) or ",deallocating" (being deleted).
std::string ClaimState(const json& claim) {
  std::vector<std::string> states;
  const bool deleting = Path(claim, {"metadata", "deletionTimestamp"}) != nullptr;
  if (deleting) states.push_back("deleted");
  const json* allocation = Path(claim, {"status", "allocation"});
  if (allocation == nullptr || allocation->is_null()) {
    if (!deleting) states.push_back("pending");
  } else {
    states.push_back("allocated");
    if (!Array(claim, {"status", "reservedFor"}).empty()) {
      states.push_back("reserved");
    } else if (deleting) {
      states.push_back("deallocating");
    }
  }
  std::string out;
  for (const std::string& s : states) out += (out.empty() ? "" : ",") + s;
  return out;
}

json Cells(const Resource& r, const json& obj, hami::kube::WallTime now) {
  std::span<const Column> columns = ColumnsOf(r);
  if (columns.data() == kPodColumns) return PodCells(obj, now);
  if (columns.data() == kNodeColumns) return NodeCells(obj, now);
  if (columns.data() == kEventColumns) return EventCells(obj, now);
  if (columns.data() == kResourceQuotaColumns) return ResourceQuotaCells(obj, now);
  std::string name = Str(obj, {"metadata", "name"});
  std::string age = AgeOf(obj, {"metadata", "creationTimestamp"}, now);
  if (columns.data() == kNamespaceColumns) {
    std::string phase = Str(obj, {"status", "phase"});
    return json::array({name, phase.empty() ? "Active" : phase, age});
  }
  if (columns.data() == kConfigMapColumns) {
    const json* data = Path(obj, {"data"});
    const json* binary = Path(obj, {"binaryData"});
    size_t n = (data && data->is_object() ? data->size() : 0) +
               (binary && binary->is_object() ? binary->size() : 0);
    return json::array({json(name), json(n), json(age)});
  }
  if (columns.data() == kLeaseColumns) {
    return json::array({name, OrUnknown(Str(obj, {"spec", "holderIdentity"})), age});
  }
  if (columns.data() == kSecretColumns) {
    return json::array({json(name), json(Str(obj, {"type"})),
                        json(MapSize(obj, {"data"}) + MapSize(obj, {"stringData"})), json(age)});
  }
  if (columns.data() == kServiceAccountColumns) {
    return json::array({json(name), json(Array(obj, {"secrets"}).size()), json(age)});
  }
  if (columns.data() == kServiceColumns) return ServiceCells(obj, now);
  if (columns.data() == kDeploymentColumns) return DeploymentCells(obj, now);
  if (columns.data() == kDaemonSetColumns) return DaemonSetCells(obj, now);
  if (columns.data() == kRoleColumns) {
    return json::array({name, Str(obj, {"metadata", "creationTimestamp"})});
  }
  if (columns.data() == kRoleBindingColumns) return RoleBindingCells(obj, now);
  if (columns.data() == kWebhookConfigurationColumns) {
    return json::array({json(name), json(Array(obj, {"webhooks"}).size()), json(age)});
  }
  if (columns.data() == kPriorityClassColumns) {
    return json::array({json(name), json(Int(obj, {"value"})), json(Bool(obj, {"globalDefault"})),
                        json(age), json(Str(obj, {"preemptionPolicy"}))});
  }
  if (columns.data() == kResourceClaimColumns) return json::array({name, ClaimState(obj), age});
  if (columns.data() == kResourceSliceColumns) {
    return json::array({name, OrNone(Str(obj, {"spec", "nodeName"})), Str(obj, {"spec", "driver"}),
                        Str(obj, {"spec", "pool", "name"}), age});
  }
  return json::array({name, age});
}

}  // namespace

std::optional<Rendered> RenderDiscovery(std::string_view path, std::string_view accept,
                                        std::string_view server_address) {
  path = path.substr(0, path.find('?'));
  if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);

  if (path == "/version") return Version();
  if (path == "/api" || path == "/apis") {
    bool core = path == "/api";
    DiscoveryFormat format = NegotiateDiscovery(accept);
    if (format != DiscoveryFormat::kLegacy) return AggregatedDiscovery(core, format);
    if (core) {
      json versions = json::array();
      for (std::string_view v : Versions("")) versions.push_back(v);
      return JsonAnswer(
          {{"kind", "APIVersions"},
           {"versions", versions},
           {"serverAddressByClientCIDRs",
            json::array({{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", server_address}}})}});
    }
    json groups = json::array();
    for (std::string_view group : Groups()) {
      if (!group.empty()) groups.push_back(GroupJson(group));
    }
    return JsonAnswer({{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}});
  }
  if (path == "/openapi/v3") return OpenApiRoot();
  if (path == "/openapi/v2") return NotFoundStatus();

  for (std::string_view group : Groups()) {
    if (!group.empty() && path == "/apis/" + std::string(group)) {
      json body = GroupJson(group);
      body["kind"] = "APIGroup";
      body["apiVersion"] = "v1";
      return JsonAnswer(body);
    }
    for (std::string_view v : Versions(group)) {
      std::string key = OpenApiKey(group, v);
      if (path == "/" + key) return ApiResourceList(group, v);
      if (path == "/openapi/v3/" + key) return JsonAnswer(OpenApiDocument(group, v));
    }
  }
  return std::nullopt;
}

bool WantsTable(std::string_view accept) {
  auto table = Negotiate<bool>(accept, [](const MediaRange& m) {
    std::optional<bool> answer;
    if (m.type == "*/*" || m.type == "application/*") return answer = false;
    if (m.type != kJson) return answer;
    if (m.Param("as").empty()) return answer = false;
    if (m.Param("as") == "Table" && m.Param("g") == "meta.k8s.io" &&
        (m.Param("v") == "v1" || m.Param("v") == "v1beta1")) {
      answer = true;
    }
    return answer;
  });
  return table.value_or(false);
}

std::optional<TableRowObject> ParseIncludeObject(std::string_view value) {
  if (value.empty() || value == "Metadata") return TableRowObject::kMetadata;
  if (value == "Object") return TableRowObject::kObject;
  if (value == "None") return TableRowObject::kNone;
  return std::nullopt;
}

nlohmann::json RenderTable(const hami::kube::Resource& r,
                           const std::vector<const nlohmann::json*>& objects,
                           std::string_view resource_version, bool include_columns,
                           hami::kube::WallTime now, TableRowObject row_object) {
  json columns = json::array();
  if (include_columns) {
    for (const Column& c : ColumnsOf(r)) {
      columns.push_back({{"name", c.name},
                         {"type", c.type},
                         {"format", c.format},
                         {"description", c.description},
                         {"priority", c.priority}});
    }
  }
  json rows = json::array();
  for (const json* obj : objects) {
    if (obj == nullptr) continue;
    const json* metadata = Field(*obj, "metadata");
    json row = {{"cells", Cells(r, *obj, now)}};
    switch (row_object) {
      case TableRowObject::kMetadata:
        row["object"] = {
            {"kind", "PartialObjectMetadata"},
            {"apiVersion", "meta.k8s.io/v1"},
            {"metadata", metadata && metadata->is_object() ? *metadata : json::object()}};
        break;
      case TableRowObject::kObject:
        row["object"] = obj->is_object() ? *obj : json::object();
        row["object"]["kind"] = r.kind;
        row["object"]["apiVersion"] = r.ApiVersion();
        break;
      case TableRowObject::kNone:
        break;
    }
    rows.push_back(std::move(row));
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", resource_version}}},
          {"columnDefinitions", columns},
          {"rows", rows}};
}

std::string FormatAge(std::chrono::system_clock::duration d) {
  using std::chrono::duration_cast;
  int64_t seconds = duration_cast<std::chrono::seconds>(d).count();  // toward zero
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  auto text = [](int64_t major, const char* major_unit, int64_t minor, const char* minor_unit) {
    std::string s = std::to_string(major) + major_unit;
    if (minor != 0) s += std::to_string(minor) + minor_unit;
    return s;
  };
  if (seconds < 120) return std::to_string(seconds) + "s";
  int64_t minutes = seconds / 60;
  if (minutes < 10) return text(minutes, "m", seconds % 60, "s");
  if (minutes < 180) return std::to_string(minutes) + "m";
  int64_t hours = minutes / 60;
  if (hours < 8) return text(hours, "h", minutes % 60, "m");
  if (hours < 48) return std::to_string(hours) + "h";
  if (hours < 24 * 8) return text(hours / 24, "d", hours % 24, "h");
  if (hours < 24 * 365 * 2) return std::to_string(hours / 24) + "d";
  if (hours < 24 * 365 * 8) return text(hours / 24 / 365, "y", (hours / 24) % 365, "d");
  return std::to_string(hours / 24 / 365) + "y";
}

}  // namespace hami::sim::kube
