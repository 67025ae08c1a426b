#include "scheduler/webhook.h"

#include <array>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/quote.h"
#include "kube/annotations.h"
#include "kube/base64.h"
#include "kube/patch.h"
#include "kube/quantity.h"
#include "limits/vocabulary.h"
#include "scheduler/node_annotations.h"
#include "scheduler/request.h"

namespace hami::scheduler::webhook {
namespace {

using nlohmann::json;

constexpr std::string_view kReviewApiVersion = "admission.k8s.io/v1";
constexpr int kMaxDepth = 512;

Error Malformed(std::string_view field, std::string_view what) {
  std::string msg = "AdmissionReview: ";
  if (!field.empty()) msg += std::string(field) + ": ";
  msg += what;
  return Error(ErrorCode::kInvalidArgument, std::move(msg));
}

// Whether arrays and objects nest deeper than `limit` (strings skipped).
bool NestedDeeperThan(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > limit) return true;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return false;
}

// A string member: "" when absent or null; an error naming `field` when of another type.
Result<std::string> OptionalString(const json& object, std::string_view key,
                                   std::string_view field) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Malformed(field, "not a string");
  return it->get<std::string>();
}

Result<std::string> RequiredString(const json& object, std::string_view key,
                                   std::string_view field) {
  std::string s = HAMI_TRY(OptionalString(object, key, field));
  if (s.empty()) return Malformed(field, "missing");
  return s;
}

Result<const json*> RequiredObject(const json& object, std::string_view key,
                                   std::string_view field) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return Malformed(field, "missing");
  if (!it->is_object()) return Malformed(field, "not an object");
  return &*it;
}

struct Decision {
  bool allowed = true;
  int code = 0;
  std::string reason;
  std::string message;
  json patch = json::array();
};

Decision Deny(int code, std::string message) {
  Decision d;
  d.allowed = false;
  d.code = code;
  d.reason = code == 400 ? "BadRequest" : code == 500 ? "InternalError" : "Forbidden";
  d.message = std::move(message);
  return d;
}

std::string Respond(const std::string& uid, const Decision& d) {
  json response = {{"uid", uid}, {"allowed", d.allowed}};
  if (!d.allowed) {
    response["status"] = {{"code", d.code}, {"reason", d.reason}, {"message", d.message}};
  } else if (!d.patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = kube::EncodeBase64(d.patch.dump());
  }
  json review = {{"apiVersion", kReviewApiVersion},
                 {"kind", "AdmissionReview"},
                 {"response", std::move(response)}};
  return review.dump(-1, ' ', false, json::error_handler_t::replace);
}

// resources.<section> of a container when it is an object, else nullptr.
const json* Section(const json& container, std::string_view section) {
  auto r = container.find("resources");
  if (r == container.end() || !r->is_object()) return nullptr;
  auto s = r->find(section);
  if (s == r->end() || !s->is_object()) return nullptr;
  return &*s;
}

bool Names(const json& container, std::string_view name) {
  for (std::string_view section : {"limits", "requests"}) {
    const json* s = Section(container, section);
    if (s != nullptr && s->contains(name)) return true;
  }
  return false;
}

// The quantity `name` in limits, else requests; nullopt when absent or unreadable (the pod
// parse that follows names what is wrong).
std::optional<kube::Quantity> QuantityOf(const json& container, std::string_view name) {
  for (std::string_view section : {"limits", "requests"}) {
    const json* s = Section(container, section);
    if (s == nullptr) continue;
    auto it = s->find(name);
    if (it == s->end()) continue;
    std::string text;
    if (it->is_string()) {
      text = it->get<std::string>();
    } else if (it->is_number()) {
      text = it->dump();
    } else {
      return std::nullopt;
    }
    auto q = kube::ParseQuantity(text, "");
    if (!q.ok()) return std::nullopt;
    return *q;
  }
  return std::nullopt;
}

bool MentionsHami(const json& container, const config::DeviceConfig& c) {
  for (const std::string* name :
       {&c.resource_count_name, &c.resource_memory_name, &c.resource_memory_percentage_name,
        &c.resource_core_name, &c.resource_priority_name}) {
    if (Names(container, *name)) return true;
  }
  return false;
}

// Adds `additions` (resource name -> quantity text) to the container at `base` (a JSON pointer):
// to resources.limits, and to resources.requests when the container has requests.
void AddResources(const json& container, const std::string& base,
                  const std::vector<std::pair<std::string, std::string>>& additions, json& patch) {
  if (additions.empty()) return;
  json values = json::object();
  for (const auto& [name, value] : additions) values[name] = value;
  auto r = container.find("resources");
  if (r == container.end() || !r->is_object()) {
    patch.push_back(
        {{"op", "add"}, {"path", base + "/resources"}, {"value", {{"limits", values}}}});
    return;
  }
  for (std::string_view section : {"limits", "requests"}) {
    auto s = r->find(section);
    const bool present = s != r->end() && s->is_object();
    const std::string path = base + "/resources/" + std::string(section);
    if (!present) {
      if (section == "limits") patch.push_back({{"op", "add"}, {"path", path}, {"value", values}});
      continue;
    }
    for (const auto& [name, value] : additions) {
      patch.push_back(
          {{"op", "add"}, {"path", path + "/" + EscapeJsonPointerToken(name)}, {"value", value}});
    }
  }
}

// Sets env `name` of the container at `base` to `value`.
void SetEnv(const json& container, const std::string& base, std::string_view name,
            const std::string& value, json& patch) {
  json var = {{"name", name}, {"value", value}};
  auto env = container.find("env");
  if (env == container.end() || !env->is_array()) {
    patch.push_back({{"op", "add"}, {"path", base + "/env"}, {"value", json::array({var})}});
    return;
  }
  for (size_t j = 0; j < env->size(); ++j) {
    const json& e = (*env)[j];
    if (!e.is_object()) continue;
    auto n = e.find("name");
    if (n != e.end() && n->is_string() && n->get_ref<const std::string&>() == name) {
      patch.push_back(
          {{"op", "replace"}, {"path", base + "/env/" + std::to_string(j)}, {"value", var}});
      return;
    }
  }
  patch.push_back({{"op", "add"}, {"path", base + "/env/-"}, {"value", var}});
}

// The containers of one list of the pod, with their JSON pointers and spec field names.
struct ContainerRef {
  const json* container;
  std::string pointer;  // "/spec/containers/0"
  std::string field;    // "spec.containers[0]"
  bool init;
  size_t index;
};

std::vector<ContainerRef> Containers(const json& pod) {
  std::vector<ContainerRef> out;
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return out;
  for (std::string_view list : {"initContainers", "containers"}) {
    auto l = spec->find(list);
    if (l == spec->end() || !l->is_array()) continue;
    for (size_t i = 0; i < l->size(); ++i) {
      if (!(*l)[i].is_object()) continue;
      out.push_back({&(*l)[i], "/spec/" + std::string(list) + "/" + std::to_string(i),
                     "spec." + std::string(list) + "[" + std::to_string(i) + "]",
                     list == "initContainers", i});
    }
  }
  return out;
}

bool Privileged(const json& container) {
  auto sc = container.find("securityContext");
  if (sc == container.end() || !sc->is_object()) return false;
  auto p = sc->find("privileged");
  return p != sc->end() && p->is_boolean() && p->get<bool>();
}

bool LabelledIgnore(const kube::StringMap& labels) {
  auto it = labels.find(kWebhookLabel);
  return it != labels.end() && it->second == kWebhookIgnore;
}

// Removes each of `names` the container's limits or requests hold.
void RemoveResources(const json& container, const std::string& base,
                     const std::vector<const std::string*>& names, json& patch) {
  for (std::string_view section : {"limits", "requests"}) {
    const json* s = Section(container, section);
    if (s == nullptr) continue;
    for (const std::string* name : names) {
      if (!s->contains(*name)) continue;
      patch.push_back({{"op", "remove"},
                       {"path", base + "/resources/" + std::string(section) + "/" +
                                    EscapeJsonPointerToken(*name)}});
    }
  }
}

// Sets metadata.<map>[key] = value for each of `entries` ({map, key, value}; map is labels or
// annotations).
void SetMetadataEntries(const json& pod, const std::vector<std::array<std::string, 3>>& entries,
                        json& patch) {
  auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) {
    json value = json::object();
    for (const auto& [map, key, v] : entries) value[map][key] = v;
    patch.push_back({{"op", "add"}, {"path", "/metadata"}, {"value", std::move(value)}});
    return;
  }
  json added = json::object();  // maps the pod lacks, added whole
  for (const auto& [map, key, v] : entries) {
    auto m = meta->find(map);
    if (m == meta->end() || !m->is_object()) {
      added[map][key] = v;
      continue;
    }
    patch.push_back({{"op", "add"},
                     {"path", "/metadata/" + map + "/" + EscapeJsonPointerToken(key)},
                     {"value", v}});
  }
  for (auto& [map, value] : added.items()) {
    patch.push_back({{"op", "add"}, {"path", "/metadata/" + map}, {"value", value}});
  }
}

// The runtime class GPU pods run under, unless they name one.
void AddRuntimeClass(const json& pod, const config::DeviceConfig& config, json& patch) {
  if (config.runtime_class_name.empty()) return;
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return;
  auto rc = spec->find("runtimeClassName");
  if (rc == spec->end() || !rc->is_string() || rc->get_ref<const std::string&>().empty()) {
    patch.push_back(
        {{"op", "add"}, {"path", "/spec/runtimeClassName"}, {"value", config.runtime_class_name}});
  }
}

uint64_t Fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Whether `value` can stand between the double quotes of a CEL string literal as it is:
// printable ASCII without '"' and '\'.
bool CelLiteralSafe(std::string_view value) {
  for (char c : value) {
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return false;
  }
  return true;
}

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i != 0) out += separator;
    out += parts[i];
  }
  return out;
}

// The CEL selectors of the pod's use-/nouse- annotations; kInvalidArgument naming the
// annotation for a value that cannot be put in a CEL string.
Result<std::vector<std::string>> DraSelectors(const kube::ObjectMeta& meta) {
  const std::string attrs = "device.attributes[\"" + std::string(kDraDriver) + "\"]";
  struct Rule {
    std::string_view annotation;
    bool type;  // productName, lowered, contains; else uuid, equal
    bool use;   // any of the values; else none of them
  };
  const Rule rules[] = {{kube::kUseGpuUuidAnnotation, false, true},
                        {kube::kNoUseGpuUuidAnnotation, false, false},
                        {kube::kUseGpuTypeAnnotation, true, true},
                        {kube::kNoUseGpuTypeAnnotation, true, false}};
  std::vector<std::string> out;
  for (const Rule& r : rules) {
    const std::string* value = meta.Annotation(r.annotation);
    if (value == nullptr) continue;
    std::vector<std::string> terms;
    for (std::string item : DecodeCordonList(*value)) {
      if (!CelLiteralSafe(item)) {
        return Error(ErrorCode::kInvalidArgument,
                     DescribePod(meta) + ": annotation " + std::string(r.annotation) + ": " +
                         QuoteInput(item) +
                         " holds a character that a DRA selector cannot carry (a quote, a "
                         "backslash, or one outside printable ASCII)");
      }
      if (r.type) {
        for (char& c : item) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string term = attrs + ".productName.lowerAscii().contains(\"" + item + "\")";
        terms.push_back(r.use ? term : "!" + term);
      } else {
        terms.push_back(attrs + ".uuid " + (r.use ? "==" : "!=") + " \"" + item + "\"");
      }
    }
    if (!terms.empty()) out.push_back(Join(terms, r.use ? " || " : " && "));
  }
  return out;
}

// Whether `got` holds every field of `want` with the same value; strings that differ still
// match when both are quantities of the same value ("1Gi" and "1024Mi").
bool Holds(const json& got, const json& want) {
  if (want.is_object()) {
    if (!got.is_object()) return false;
    for (const auto& [key, value] : want.items()) {
      auto it = got.find(key);
      if (it == got.end() || !Holds(*it, value)) return false;
    }
    return true;
  }
  if (want.is_array()) {
    if (!got.is_array() || got.size() != want.size()) return false;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!Holds(got[i], want[i])) return false;
    }
    return true;
  }
  if (want.is_string() && got.is_string() && want != got) {
    auto a = kube::ParseQuantity(want.get<std::string>(), "");
    auto b = kube::ParseQuantity(got.get<std::string>(), "");
    return a.ok() && b.ok() && *a == *b;
  }
  return got == want;
}

// One container rewritten into a claim.
struct DraRewrite {
  const ContainerRef* ref;
  const ContainerRequest* request;
  std::string claim;  // the pod's claim name
  json claim_template;
};

// DRA mode, once the pod has been read (DecidePod): the rewrite of its shares into claims.
Result<Decision> DecideDra(const json& pod, const std::string& ns, const kube::Pod& typed,
                           const PodRequest& request, const std::vector<ContainerRef>& containers,
                           const NamespaceView& view, const WebhookContext& ctx, bool dry_run,
                           json patch) {
  const config::DeviceConfig& config = ctx.device_config;
  const std::string pod_name = DescribePod(typed.metadata);
  auto what = [&](const ContainerRef& c, const ContainerRequest& r) {
    return pod_name + ": container \"" + r.name + "\" (" + c.field + ")";
  };
  const std::vector<const std::string*> hami_names = {
      &config.resource_count_name, &config.resource_memory_name,
      &config.resource_memory_percentage_name, &config.resource_core_name,
      &config.resource_priority_name};

  std::set<std::string> claim_names;
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    if (auto rc = spec->find("resourceClaims"); rc != spec->end() && rc->is_array()) {
      for (const json& e : *rc) {
        if (e.is_object() && e.contains("name") && e["name"].is_string())
          claim_names.insert(e["name"].get<std::string>());
      }
    }
  }

  std::vector<DraRewrite> rewrites;
  PodRequest recorded;  // the rewritten containers: the record and what the quota counts
  std::vector<std::string> unsized;  // containers whose memory is the device's default
  size_t position = 0;
  for (const ContainerRef& c : containers) {
    const size_t index = position++;
    const std::vector<ContainerRequest>& list =
        c.init ? request.init_containers : request.containers;
    if (c.index >= list.size()) continue;
    const ContainerRequest& r = list[c.index];
    const bool share = Names(*c.container, config.resource_memory_name) ||
                       Names(*c.container, config.resource_memory_percentage_name) ||
                       Names(*c.container, config.resource_core_name);
    if (!r.requests_gpus() || !share) {
      if (r.requests_gpus())
        unsized.push_back(what(c, r) + " asks only for " + config.resource_count_name);
      if (r.priority.has_value()) {
        RemoveResources(*c.container, c.pointer, {&config.resource_priority_name}, patch);
      }
      continue;
    }
    if (r.mem_mib == 0 && r.mem_percentage != 100) {
      const char* section =
          Section(*c.container, "limits") != nullptr &&
                  Section(*c.container, "limits")->contains(config.resource_memory_percentage_name)
              ? "limits"
              : "requests";
      return Deny(400, what(c, r) + ": resources." + section + "." +
                           config.resource_memory_percentage_name + ": " +
                           std::to_string(r.mem_percentage) +
                           " cannot be carried by a DRA claim: a claim asks for an amount, and a "
                           "device's memory is not known before one is chosen; ask for " +
                           config.resource_memory_name +
                           " in MiB (100 percent asks for the "
                           "whole memory)");
    }
    if (r.mem_mib == 0) {
      unsized.push_back(what(c, r) + " asks for the whole memory of its GPUs");
    }
    std::string claim = "hami-" + r.name;
    if (claim.size() > 63) claim = "hami-gpu-" + std::to_string(index);
    if (!claim_names.insert(claim).second) {
      return Deny(400, what(c, r) + ": the pod claim name " + QuoteInput(claim) +
                           " that DRA mode gives this container is already in spec.resourceClaims");
    }
    rewrites.push_back({&c, &r, std::move(claim), json()});
    (c.init ? recorded.init_containers : recorded.containers).push_back(r);
  }

  for (const ContainerRef& c : containers) {
    const std::vector<ContainerRequest>& list =
        c.init ? request.init_containers : request.containers;
    if (c.index < list.size() && list[c.index].requests_gpus() && Privileged(*c.container)) {
      return Deny(403, "container \"" + list[c.index].name + "\" (" + c.field +
                           ") is privileged and requests GPUs: a privileged container sees every "
                           "GPU of its node, outside HAMi's limits");
    }
  }
  if (!typed.node_name.empty()) {
    return Deny(403, "spec.nodeName is already set (\"" + typed.node_name +
                         "\"): a pod whose GPUs come from ResourceClaims must be placed by the "
                         "scheduler, which allocates its claims");
  }
  if (view.quota.memory_mib.has_value() && !unsized.empty()) {
    return Deny(403, "GPU quota: namespace " + ns + " limits " + config.resource_memory_name +
                         " (ResourceQuota " + view.quota.memory_source + "), and " + unsized[0] +
                         ": in DRA mode that memory is not known before a device is chosen, so "
                         "it cannot be counted; ask for " +
                         config.resource_memory_name + " in MiB");
  }
  if (rewrites.empty()) {
    AddRuntimeClass(pod, config, patch);
    Decision allow;
    allow.patch = std::move(patch);
    return allow;
  }
  auto selectors = DraSelectors(typed.metadata);
  if (!selectors.ok()) return Deny(400, selectors.error().message());
  if (auto exceeded = QuotaExceeded(ns, view.quota, view.used, RequestAmounts(recorded), config)) {
    return Deny(403, "GPU quota exceeded: " + *exceeded);
  }

  // Every check passed: the templates, then the patch.
  std::set<std::string> ensured;
  for (DraRewrite& w : rewrites) {
    w.claim_template =
        ClaimTemplate(ns, w.request->count, w.request->mem_mib, w.request->cores, *selectors);
    const std::string name = w.claim_template["metadata"]["name"].get<std::string>();
    if (dry_run || !ensured.insert(name).second) continue;
    const std::string which = "ResourceClaimTemplate " + ns + "/" + name;
    if (!ctx.ensure_claim_template) {
      return Deny(500, which + " cannot be created: this webhook has no API access configured");
    }
    if (auto st = ctx.ensure_claim_template(w.claim_template); !st.ok()) {
      return Deny(500, which + " for " + what(*w.ref, *w.request) +
                           " could not be made sure of: " + st.error().message());
    }
  }
  json pod_claims = json::array();
  for (const DraRewrite& w : rewrites) {
    const json& ctr = *w.ref->container;
    RemoveResources(ctr, w.ref->pointer, hami_names, patch);
    const json ref = {{"name", w.claim}};
    auto res = ctr.find("resources");
    auto claims = res != ctr.end() && res->is_object() ? res->find("claims") : ctr.end();
    if (res == ctr.end() || !res->is_object()) {
      patch.push_back({{"op", "add"},
                       {"path", w.ref->pointer + "/resources"},
                       {"value", {{"claims", json::array({ref})}}}});
    } else if (claims == res->end() || !claims->is_array()) {
      patch.push_back({{"op", "add"},
                       {"path", w.ref->pointer + "/resources/claims"},
                       {"value", json::array({ref})}});
    } else {
      patch.push_back(
          {{"op", "add"}, {"path", w.ref->pointer + "/resources/claims/-"}, {"value", ref}});
    }
    pod_claims.push_back(
        {{"name", w.claim}, {"resourceClaimTemplateName", w.claim_template["metadata"]["name"]}});
  }
  // The pod has a spec: it has the containers just rewritten.
  const json& spec = *pod.find("spec");
  auto existing = spec.find("resourceClaims");
  if (existing == spec.end() || !existing->is_array()) {
    patch.push_back({{"op", "add"}, {"path", "/spec/resourceClaims"}, {"value", pod_claims}});
  } else {
    for (const json& e : pod_claims) {
      patch.push_back({{"op", "add"}, {"path", "/spec/resourceClaims/-"}, {"value", e}});
    }
  }
  SetMetadataEntries(
      pod,
      {{"labels", std::string(kDraLabel), "true"},
       {"annotations", std::string(kDraRequestAnnotation), EncodeDraRequest(recorded)}},
      patch);
  AddRuntimeClass(pod, config, patch);
  Decision allow;
  allow.patch = std::move(patch);
  return allow;
}

Result<Decision> DecidePod(const json& pod, const std::string& ns, const WebhookContext& ctx,
                           bool dry_run) {
  const config::DeviceConfig& config = ctx.device_config;
  Decision allow;

  // Labels and the scheduler name, read leniently: a malformed pod is the API server's to refuse.
  const json* labels = nullptr;
  if (auto meta = pod.find("metadata"); meta != pod.end() && meta->is_object()) {
    if (auto l = meta->find("labels"); l != meta->end() && l->is_object()) labels = &*l;
  }
  if (labels != nullptr) {
    auto it = labels->find(kWebhookLabel);
    if (it != labels->end() && it->is_string() && *it == kWebhookIgnore) return allow;
  }
  std::string scheduler;
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    if (auto s = spec->find("schedulerName"); s != spec->end() && s->is_string()) {
      scheduler = s->get<std::string>();
    }
  }
  if (!scheduler.empty() && scheduler != "default-scheduler" && scheduler != ctx.scheduler_name) {
    return allow;
  }

  const std::vector<ContainerRef> containers = Containers(pod);
  bool mentions = false;
  for (const ContainerRef& c : containers)
    mentions = mentions || MentionsHami(*c.container, config);
  if (!mentions && !config.overwrite_env) return allow;

  NamespaceView view;
  if (ctx.lookup_namespace) {
    auto found = ctx.lookup_namespace(ns);
    if (found.ok()) {
      view = std::move(*found);
    } else if (found.error().code() != ErrorCode::kNotFound) {
      return Error(found.error().code(),
                   "webhook: namespace " + ns + ": " + found.error().message());
    }
  }
  if (LabelledIgnore(view.labels)) return allow;

  json patch = json::array();
  // overwriteEnv: a container that asks for no GPU is told to see none, so that a node whose
  // default runtime is NVIDIA's does not hand it every GPU outside any limit.
  if (config.overwrite_env) {
    for (const ContainerRef& c : containers) {
      if (!MentionsHami(*c.container, config)) {
        SetEnv(*c.container, c.pointer, kVisibleDevicesEnv, "none", patch);
      }
    }
  }
  if (!mentions) {
    allow.patch = std::move(patch);
    return allow;
  }

  // Resources: the count a share implies, the cores a whole GPU implies (the device plugin's
  // way; in DRA mode the claim carries the count, and a count alone is KEP-5004's).
  for (const ContainerRef& c : containers) {
    if (ctx.mode == WebhookMode::kDra) break;
    const json& ctr = *c.container;
    std::vector<std::pair<std::string, std::string>> additions;
    const bool share = Names(ctr, config.resource_memory_name) ||
                       Names(ctr, config.resource_memory_percentage_name) ||
                       Names(ctr, config.resource_core_name);
    if (!Names(ctr, config.resource_count_name)) {
      if (share)
        additions.emplace_back(config.resource_count_name, std::to_string(config.default_gpu_num));
    } else if (!share && config.default_memory_mib == 0) {
      std::optional<kube::Quantity> count = QuantityOf(ctr, config.resource_count_name);
      if (count.has_value() && count->Value() >= 1) {
        additions.emplace_back(config.resource_core_name, "100");
      }
    }
    AddResources(ctr, c.pointer, additions, patch);
  }

  // The pod as it will be, read as the scheduler reads it.
  json patched = pod;
  if (!patch.empty()) {
    auto applied = kube::ApplyJsonPatch(pod, patch);
    if (!applied.ok()) {
      return Error(ErrorCode::kInternal,
                   "webhook: the pod's own patch does not apply: " + applied.error().message());
    }
    patched = std::move(*applied);
  }
  if (patched.contains("metadata") && patched["metadata"].is_object() &&
      !patched["metadata"].contains("namespace")) {
    patched["metadata"]["namespace"] = ns;  // for messages: creates may leave it to the URL
  }
  // A memory quantity that does not parse is named with its unit, beside what is wrong.
  for (const ContainerRef& c : containers) {
    for (std::string_view section : {"limits", "requests"}) {
      const json* s = Section(*c.container, section);
      if (s == nullptr) continue;
      auto it = s->find(config.resource_memory_name);
      if (it == s->end() || !(it->is_string() || it->is_number())) continue;
      const std::string text = it->is_string() ? it->get<std::string>() : it->dump();
      auto q = kube::ParseQuantity(text, "");
      if (q.ok()) continue;
      kube::ObjectMeta meta;
      meta.ns = ns;
      if (auto m = pod.find("metadata"); m != pod.end() && m->is_object()) {
        if (auto n = m->find("name"); n != m->end() && n->is_string())
          meta.name = n->get<std::string>();
      }
      return Deny(400, DescribePod(meta) + ": " + c.field + ".resources." + std::string(section) +
                           "." + config.resource_memory_name + ": " + q.error().message() + ": " +
                           MemoryUnitNote(config.resource_memory_name));
    }
  }
  auto typed = kube::ParsePod(patched);
  if (!typed.ok()) return Deny(400, typed.error().message());
  auto request = ParsePodRequest(*typed, config);
  if (!request.ok()) return Deny(400, request.error().message());

  // Priorities, into the environment.
  for (const ContainerRef& c : containers) {
    const std::vector<ContainerRequest>& list =
        c.init ? request->init_containers : request->containers;
    if (c.index >= list.size() || !list[c.index].priority.has_value()) continue;
    const limits::Entry priority = limits::SetTaskPriority(*list[c.index].priority);
    SetEnv(*c.container, c.pointer, priority.first, priority.second, patch);
  }

  if (ctx.mode == WebhookMode::kDra) {
    return DecideDra(pod, ns, *typed, *request, containers, view, ctx, dry_run, std::move(patch));
  }
  if (!request->RequestsGpus()) {
    allow.patch = std::move(patch);
    return allow;
  }
  for (const ContainerRef& c : containers) {
    const std::vector<ContainerRequest>& list =
        c.init ? request->init_containers : request->containers;
    if (c.index < list.size() && list[c.index].requests_gpus() && Privileged(*c.container)) {
      return Deny(403, "container \"" + list[c.index].name + "\" (" + c.field +
                           ") is privileged and requests GPUs: a privileged container sees every "
                           "GPU of its node, outside HAMi's limits");
    }
  }
  if (!typed->node_name.empty()) {
    return Deny(403, "spec.nodeName is already set (\"" + typed->node_name +
                         "\"): a pod that requests GPUs must be placed by " + ctx.scheduler_name +
                         ", which chooses its GPUs");
  }
  if (auto exceeded = QuotaExceeded(ns, view.quota, view.used, RequestAmounts(*request), config)) {
    return Deny(403, "GPU quota exceeded: " + *exceeded);
  }
  if (scheduler != ctx.scheduler_name) {
    patch.push_back(
        {{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", ctx.scheduler_name}});
  }
  // runtimeClassName: GPU pods run under the configured runtime class unless they name one.
  AddRuntimeClass(pod, config, patch);
  allow.patch = std::move(patch);
  return allow;
}

}  // namespace

std::string EscapeJsonPointerToken(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

Result<WebhookMode> ParseWebhookMode(std::string_view text, std::string_view what) {
  if (text == "device-plugin") return WebhookMode::kDevicePlugin;
  if (text == "dra") return WebhookMode::kDra;
  return Error(ErrorCode::kInvalidArgument,
               std::string(what) + ": " + QuoteInput(text) + " is not device-plugin or dra");
}

std::string_view WebhookModeName(WebhookMode mode) {
  return mode == WebhookMode::kDra ? "dra" : "device-plugin";
}

json ClaimTemplate(std::string_view ns, int32_t count, int32_t mem_mib, int32_t cores,
                   const std::vector<std::string>& selectors) {
  json exactly = {
      {"deviceClassName", kDraDriver}, {"allocationMode", "ExactCount"}, {"count", count}};
  if (!selectors.empty()) {
    json list = json::array();
    for (const std::string& e : selectors) list.push_back({{"cel", {{"expression", e}}}});
    exactly["selectors"] = std::move(list);
  }
  json capacity = {{"cores", std::to_string(cores)}};
  if (mem_mib > 0) {
    capacity["memory"] =
        kube::Quantity::FromInt(int64_t{mem_mib} << 20, kube::QuantityFormat::kBinarySI).ToString();
  }
  exactly["capacity"] = {{"requests", std::move(capacity)}};
  json request = {{"name", kDraRequestName}, {"exactly", std::move(exactly)}};
  json spec = {{"spec", {{"devices", {{"requests", json::array({std::move(request)})}}}}}};
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(Fnv1a64(spec.dump())));
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaimTemplate"},
          {"metadata",
           {{"name", "hami-" + std::string(hash)},
            {"namespace", ns},
            {"labels", {{std::string(kDraLabel), "true"}}}}},
          {"spec", std::move(spec)}};
}

bool ClaimTemplateServes(const json& stored, const json& wanted) {
  auto got = stored.find("spec");
  auto want = wanted.find("spec");
  return got != stored.end() && want != wanted.end() && Holds(*got, *want);
}

Result<std::string> Review(std::string_view admission_review_json, const WebhookContext& ctx) {
  if (NestedDeeperThan(admission_review_json, kMaxDepth)) {
    return Malformed("", "nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  const json review = json::parse(admission_review_json, nullptr, /*allow_exceptions=*/false);
  if (review.is_discarded()) return Malformed("", "not JSON");
  if (!review.is_object()) return Malformed("", "not a JSON object");
  std::string api_version = HAMI_TRY(OptionalString(review, "apiVersion", "apiVersion"));
  if (api_version != kReviewApiVersion) {
    return Malformed("apiVersion",
                     (api_version.empty() ? std::string("missing")
                                          : QuoteInput(api_version) + " is not served") +
                         " (want " + std::string(kReviewApiVersion) + ")");
  }
  std::string kind = HAMI_TRY(OptionalString(review, "kind", "kind"));
  if (kind != "AdmissionReview") {
    return Malformed("kind", (kind.empty() ? std::string("missing") : QuoteInput(kind)) +
                                 " (want AdmissionReview)");
  }
  const json& request = *HAMI_TRY(RequiredObject(review, "request", "request"));
  std::string uid = HAMI_TRY(RequiredString(request, "uid", "request.uid"));
  const json& kind_object = *HAMI_TRY(RequiredObject(request, "kind", "request.kind"));
  std::string object_kind = HAMI_TRY(RequiredString(kind_object, "kind", "request.kind.kind"));
  const json& resource = *HAMI_TRY(RequiredObject(request, "resource", "request.resource"));
  std::string group = HAMI_TRY(OptionalString(resource, "group", "request.resource.group"));
  std::string plural = HAMI_TRY(RequiredString(resource, "resource", "request.resource.resource"));
  std::string sub = HAMI_TRY(OptionalString(request, "subResource", "request.subResource"));
  std::string operation = HAMI_TRY(RequiredString(request, "operation", "request.operation"));
  if (operation != "CREATE" && operation != "UPDATE" && operation != "DELETE" &&
      operation != "CONNECT") {
    return Malformed("request.operation",
                     QuoteInput(operation) + " is not CREATE, UPDATE, DELETE or CONNECT");
  }
  std::string ns = HAMI_TRY(OptionalString(request, "namespace", "request.namespace"));

  if (!group.empty() || plural != "pods" || !sub.empty() || operation != "CREATE") {
    return Respond(uid, Decision{});
  }
  if (object_kind != "Pod") {
    return Malformed("request.kind.kind",
                     QuoteInput(object_kind) + " for resource pods (want Pod)");
  }
  const json& pod = *HAMI_TRY(RequiredObject(request, "object", "request.object"));
  if (ns.empty()) {
    if (auto meta = pod.find("metadata"); meta != pod.end() && meta->is_object()) {
      if (auto n = meta->find("namespace"); n != meta->end() && n->is_string()) {
        ns = n->get<std::string>();
      }
    }
  }
  if (ns.empty()) return Malformed("request.namespace", "missing for a pod");
  bool dry_run = false;
  if (auto dr = request.find("dryRun"); dr != request.end() && !dr->is_null()) {
    if (!dr->is_boolean()) return Malformed("request.dryRun", "not a boolean");
    dry_run = dr->get<bool>();
  }
  Decision d = HAMI_TRY(DecidePod(pod, ns, ctx, dry_run));
  return Respond(uid, d);
}

}  // namespace hami::scheduler::webhook
